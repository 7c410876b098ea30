"""The job catalog: the declared job types merged with the built-ins, the S3 triggers, and params validation.

Declarations come as JSON-shaped data: `{"job_types": [...], "s3_triggers": [...]}` (the repository's
`jobs.json`, the file the construct ships to the functions, or a scenario's `job_types`). A
declaration named like a built-in replaces it (so a file can list and tune the built-ins); two
declarations of one name are refused. Every problem is reported at once, each naming its
declaration (`job_types[3] 'wordcount': entry: ...`).

How the functions learn the catalog: the construct writes it into the Lambda asset as
`engine/job_types.json` (an environment variable would do for a few types, but Lambda caps all of
a function's variables at 4 KB together, and one JSON Schema can pass that). `JOB_TYPES_FILE` names
another file (the offline runtime's). Without either, the built-ins alone.

Params are validated with fastjsonschema, the validator behind Powertools' validation utility (the
Powertools layer ships it). Powertools' `validate()` compiles the schema on every call, so each type's
schema is compiled here, once, on its first job: the cold start pays for no schema.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from longjobs.engine.jobs.builtin import BUILTIN_TYPES, INLINE_TYPES
from longjobs.engine.jobs.names import collisions
from longjobs.engine.jobs.triggers import DEFAULT_TRIGGERS, SPARK_PARAMS, S3Trigger, TriggerError
from longjobs.engine.jobs.types import LOCATIONS, GlueSettings, JobType, JobTypeError

CATALOG_ENV = "JOB_TYPES_FILE"
SHIPPED_FILE = Path(__file__).resolve().parent.parent / "job_types.json"
"""`engine/job_types.json`: written into the Lambda asset by the construct; absent in the repository."""
TOP_KEYS = ("job_types", "s3_triggers")
SAMPLE_LOCATIONS = {name: f"s3://sample-{name}-bucket/" for name in LOCATIONS}
"""Bucket URIs of the shape a deployment gives `{curated}`, `{quarantine}` and `{raw}`: a strict load checks
defaults and triggers with them, as the receiver fills them in."""
SAMPLE_BUCKET = "sample-raw-bucket"
SAMPLE_PARTITION = "date=2024-01-31/"
"""A trigger's marker, as a strict load places it (in the trigger's bucket, else this one; under its prefix,
in this partition) to fill the trigger's params the way a marker's notification does."""


class ParamsError(ValueError):
    """A job's params break its type's schema: `path` (`params.input`) and what is wrong."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True)
class _Compiled:
    check: Callable[[Any], Any]


class JobCatalog:
    """Job types by name (declaration order, built-ins first) and the S3 triggers."""

    def __init__(self, types: Iterable[JobType], s3_triggers: Sequence[S3Trigger] = DEFAULT_TRIGGERS) -> None:
        self.types: dict[str, JobType] = {t.name: t for t in types}
        self._limits = {t.name: t.concurrency_limit for t in self.types.values()}
        """Each type's limit, read on every receive: computed once, as the types never change."""
        self.s3_triggers: tuple[S3Trigger, ...] = tuple(s3_triggers)
        self._compiled: dict[str, _Compiled] = {}
        self._lock = threading.Lock()

    def __contains__(self, name: object) -> bool:
        return name in self.types

    def __iter__(self) -> Any:
        return iter(self.types.values())

    def get(self, name: str) -> JobType | None:
        return self.types.get(name)

    @property
    def names(self) -> list[str]:
        return sorted(self.types)

    def of_runner(self, runner: str) -> list[JobType]:
        return [t for t in self.types.values() if t.runner == runner]

    def limit(self, name: str) -> int | None:
        """The most executions of type `name` that may run at once (None: no limit, or no such type)."""
        return self._limits.get(name)

    def limited(self) -> list[JobType]:
        """The types with a concurrency limit: those admission control applies to."""
        return [t for t in self.types.values() if t.concurrency_limit is not None]

    def declared_limits(self) -> dict[str, int]:
        """Each type's `max_concurrency`, where one is declared (or filled in by the construct): what a
        history of its runs is checked against (`type_concurrency`)."""
        return {t.name: t.max_concurrency for t in self.types.values() if t.max_concurrency}

    def with_limits(self, limits: Mapping[str, int]) -> JobCatalog:
        """This catalog with `max_concurrency` set on the types named in `limits` that declare none
        (what the construct ships: a Glue type's limit is its Glue job's max concurrent runs)."""
        types = [
            t.model_copy(update={"max_concurrency": limits[t.name]})
            if t.max_concurrency is None and t.name in limits
            else t
            for t in self.types.values()
        ]
        return JobCatalog(types, self.s3_triggers)

    def with_glue(self, resolve: Callable[[JobType], GlueSettings]) -> JobCatalog:
        """This catalog with each Glue type's settings as `resolve` completes them (what the construct
        ships: the functions price an attempt by its workers, which a declaration may leave to the stack)."""
        types = [
            t.model_copy(update={"glue": resolve(t)}) if t.runner == "pyspark" and t.platform == "glue" else t
            for t in self.types.values()
        ]
        return JobCatalog(types, self.s3_triggers)

    def trigger_for(self, bucket: str, key: str) -> S3Trigger | None:
        return next((trigger for trigger in self.s3_triggers if trigger.matches(bucket, key)), None)

    def to_data(self) -> dict[str, Any]:
        return {
            "job_types": [t.declaration() for t in self.types.values()],
            "s3_triggers": [trigger.model_dump(mode="json") for trigger in self.s3_triggers],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_data(), indent=1, sort_keys=True)

    # -- params --------------------------------------------------------------------------------

    def validate_params(
        self, job_type: JobType, params: Mapping[str, Any], locations: Mapping[str, str | None] | None = None
    ) -> dict[str, Any]:
        """`params` with the type's defaults filled in, validated by its schema. Raises `ParamsError`."""
        filled = dict(params)
        unfilled: dict[str, str] = {}
        for name, default in job_type.defaults.items():
            if name not in filled:
                value = fill_locations(default, locations or {})
                if value is not None:
                    filled[name] = value
                else:
                    unfilled[name] = default
        compiled = self._compiled.get(job_type.name) or self._compile(job_type)
        from fastjsonschema import JsonSchemaValueException

        try:
            result = compiled.check(filled)
        except JsonSchemaValueException as exc:
            raise _why_unfilled(params_error(exc), unfilled, locations or {}) from None
        return whole_integers(dict(result), job_type.params_schema)

    def _compile(self, job_type: JobType) -> _Compiled:
        with self._lock:
            compiled = self._compiled.get(job_type.name)
            if compiled is None:
                compiled = _Compiled(compile_schema(job_type.params_schema))
                self._compiled[job_type.name] = compiled
            return compiled


def whole_integers(params: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """`params` with each whole float (`30.0`, `1e2`) an int where the schema's property says `integer`.
    JSON Schema counts such a float as an integer, and a JSON reader keeps it a float; Step Functions' Wait
    state takes only integers (the `wait` type's `seconds`), and a job's code expects an int there too."""
    properties = schema.get("properties") or {}
    for name, value in params.items():
        spec = properties.get(name) if isinstance(properties, Mapping) else None  # a subschema may be `true`
        declared = spec.get("type") if isinstance(spec, Mapping) else None
        integer = declared == "integer" or (isinstance(declared, list) and "integer" in declared)
        if integer and isinstance(value, float) and value.is_integer():
            params[name] = int(value)
    return params


def full_date(value: str) -> bool:
    """JSON Schema's `date` format, RFC 3339's full-date: `YYYY-MM-DD`, a day of the calendar. fastjsonschema's
    own check is a pattern, which takes 2026-02-30; a job given that date would fail on every attempt."""
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        return False
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        return False
    return True


FORMATS: dict[str, Callable[[str], bool]] = {"date": full_date}
"""The formats checked in their own way rather than by fastjsonschema's patterns."""


def compile_schema(schema: Mapping[str, Any], *, fill_defaults: bool = True) -> Callable[[Any], Any]:
    """A validator of `schema` that also fills its `default` values unless told not to (fastjsonschema,
    imported on use)."""
    import fastjsonschema

    validator: Callable[[Any], Any] = fastjsonschema.compile(dict(schema), use_default=fill_defaults, formats=FORMATS)
    return validator


def params_error(exc: Any) -> ParamsError:
    """fastjsonschema's error as `params.<path>: <what is wrong>`, naming the very parameter for a
    missing or unknown one (fastjsonschema names the object that holds it)."""
    name = "params" + str(exc.name).removeprefix("data")
    message = str(exc.message).removeprefix(f"{exc.name} ")
    value, definition = exc.value, exc.definition if isinstance(exc.definition, dict) else {}
    if exc.rule == "required" and isinstance(value, dict):
        missing = [key for key in definition.get("required", []) if key not in value]
        if missing:  # every one named: a sender fixes them at once rather than one a try
            also = [f"{name}.{key}" for key in missing[1:]]
            verb = "is" if len(also) == 1 else "are"
            required = f"is required (so {verb} {', '.join(also)})" if also else "is required"
            # The rule checked first hides the unknown params, which are often the missing ones mistyped.
            known = definition.get("properties", {})
            unknown = [str(key) for key in value if key not in known]
            if unknown and definition.get("additionalProperties") is False:
                named = ", ".join(f"{name}.{key}" for key in unknown)
                required += f"; {named} {'is not a parameter' if len(unknown) == 1 else 'are not parameters'} of it"
            return ParamsError(f"{name}.{missing[0]}", required)
    if exc.rule == "additionalProperties" and isinstance(value, dict):
        known = sorted(definition.get("properties", {}))
        extra = sorted(str(key) for key in value if key not in known)
        if extra:
            return ParamsError(f"{name}.{extra[0]}", f"is not a parameter of this type (known: {', '.join(known)})")
    if exc.rule in ("pattern", "format") and definition.get("description"):
        # A regular expression tells a user little: the schema's own words instead.
        return ParamsError(name, f"must be {definition['description']}, got {value!r}")
    return ParamsError(name, message)


def _why_unfilled(error: ParamsError, unfilled: Mapping[str, str], locations: Mapping[str, str | None]) -> ParamsError:
    """`error`, saying why the defaults of the params it names missing were not filled in: the buckets they
    name are not configured (`curated_uri` and the like). The sender learns to give the params, or the
    deployer to set the buckets."""
    # The params an error says are required: its path, and those `params_error` lists after it ("(so are
    # params.a, params.b)"); a name's end is where that list goes on, not a word boundary (`out` in
    # `params.out-x`), and the value an error quotes names no param.
    also = error.message.partition("(so ")[2] if error.message.startswith("is required") else ""
    required = f"{error.path}, {also}"
    named = [name for name in unfilled if re.search(rf"(?:^|\s)params\.{re.escape(name)}(?=[,)])", required)]
    if not named:
        return error
    needed = [
        f"{place}_uri"
        for place in LOCATIONS
        if not locations.get(place) and any("{" + place + "}" in unfilled[name] for name in named)
    ]
    whose = "its default needs" if len(named) == 1 else f"the defaults of {' and '.join(named)} need"
    return ParamsError(
        error.path, f"{error.message}: {whose} {' and '.join(needed)}, which this deployment does not set"
    )


def fill_locations(value: Any, locations: Mapping[str, str | None]) -> Any:
    """A default with `{curated}`-style placeholders filled; None when one of them is not configured."""
    if not isinstance(value, str):
        return value
    for name in LOCATIONS:
        token = "{" + name + "}"
        if token in value:
            location = locations.get(name)
            if not location:
                return None
            value = value.replace(token, location)
    return value


# -- loading ---------------------------------------------------------------------------------------


def load_catalog(
    data: Mapping[str, Any] | None = None,
    *,
    job_types: Sequence[JobType | Mapping[str, Any]] | None = None,
    s3_triggers: Sequence[S3Trigger | Mapping[str, Any]] | None = None,
    base: Path | None = None,
    include_builtins: bool = True,
    strict: bool = False,
    source: str = "",
) -> JobCatalog:
    """A catalog from a decoded `{"job_types": [...], "s3_triggers": [...]}` and/or the two lists.

    `base` resolves relative entries (default: the current directory). Two types whose names would give
    the stack one id are refused (`longjobs.engine.jobs.names`). `strict` also compiles every schema, reads
    every entry's file and checks its module name, checks the defaults, a wait type's `seconds` and each
    trigger's params against their type's schema (what `cdk synth` and scenario loading do; the functions
    and the CLI trust what was checked there, and the functions keep their cold start small). Raises
    `JobTypeError` listing every problem, each prefixed with `source` when given.
    """
    problems: list[str] = []
    data = dict(data or {})
    for key in data:
        if key not in TOP_KEYS:
            problems.append(f"{key}: unknown key (expected {' and '.join(TOP_KEYS)})")
    declared = list(data.get("job_types", [])) + list(job_types or [])
    triggers_in = data.get("s3_triggers")
    triggers_in = list(triggers_in) if triggers_in is not None else None
    if s3_triggers is not None:
        triggers_in = (triggers_in or []) + list(s3_triggers)
    types: list[tuple[int, JobType]] = []
    for index, item in enumerate(declared):
        where = f"job_types[{index}]"
        try:
            job_type = item if isinstance(item, JobType) else JobType.model_validate(item)
        except ValidationError as exc:
            name = item.get("name") if isinstance(item, Mapping) else None
            problems += [f"{where}{_named(name)}: {msg}" for msg in _describe(exc)]
            continue
        if job_type._base is None:
            job_type = job_type.with_base(base or Path.cwd())
        problems += [f"{where}{_named(job_type.name)}: {msg}" for msg in _check(job_type, strict=strict)]
        types.append((index, job_type))
    seen: dict[str, int] = {}
    for index, job_type in types:
        if job_type.name in seen:
            problems.append(
                f"job_types[{index}] '{job_type.name}': declared twice (also job_types[{seen[job_type.name]}])"
            )
        seen.setdefault(job_type.name, index)
    merged = {t.name: t for t in (BUILTIN_TYPES if include_builtins else ())}
    merged.update({t.name: t for _, t in types})
    problems += _collisions(merged.values(), {t.name: index for index, t in types})
    if triggers_in is None:  # the default trigger starts `spark`: a catalog without that type has none
        triggers_in = [trigger for trigger in DEFAULT_TRIGGERS if trigger.job_type in merged]
    triggers: list[S3Trigger] = []
    for index, trigger_item in enumerate(triggers_in):
        try:
            trigger = trigger_item if isinstance(trigger_item, S3Trigger) else S3Trigger.model_validate(trigger_item)
        except ValidationError as exc:
            problems += [f"s3_triggers[{index}]: {msg}" for msg in _describe(exc)]
            continue
        if trigger.job_type not in merged:
            problems.append(
                f"s3_triggers[{index}].job_type: {trigger.job_type!r} is not a job type "
                f"(known: {', '.join(sorted(merged))})"
            )
        elif merged[trigger.job_type].runner == "inline":
            problems.append(
                f"s3_triggers[{index}].job_type: {trigger.job_type!r} runs inline; a trigger starts long jobs"
            )
        else:
            problems += _check_trigger(index, trigger, merged[trigger.job_type], strict=strict)
        triggers.append(trigger)
    if problems:
        prefix = f"{source}: " if source else ""
        raise JobTypeError(f"{prefix}invalid job types: " + "; ".join(problems))
    return JobCatalog(merged.values(), triggers)


def _named(name: object) -> str:
    return f" {name!r}" if isinstance(name, str) and name else ""


def _describe(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        where = ".".join(str(part) for part in err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        out.append(f"{where}: {message}" if where else message)
    return out


def _check(job_type: JobType, *, strict: bool) -> list[str]:
    problems = []
    if job_type.runner == "inline" and job_type.name not in INLINE_TYPES:
        problems.append(f"runner: 'inline' is for the built-in {', '.join(sorted(INLINE_TYPES))} only")
    if strict:
        try:
            compile_schema(job_type.params_schema)
        except Exception as exc:  # fastjsonschema's JsonSchemaDefinitionException and friends
            problems.append(f"params_schema: not a valid JSON Schema: {exc}")
        else:
            problems += _check_defaults(job_type)
        problems += job_type.brace_problems()
        wait_problem = job_type.wait_seconds_problem()
        if wait_problem:
            problems.append(wait_problem)
        try:
            job_type.check_files()
        except ValueError as exc:
            problems.append(str(exc))
    return problems


def _check_defaults(job_type: JobType) -> list[str]:
    """The defaults, their placeholders filled with sample locations, must be valid params of the type: every
    message that leaves one out gets it, so a default the schema refuses refuses those messages, for a param
    their senders never sent. `required` is left out of the check, since defaults need not hold every param.
    So must the schema's own `default` values: fastjsonschema fills them in after it has checked the params,
    without checking them, so a bad one would reach the job on every message that leaves its param out."""
    from fastjsonschema import JsonSchemaValueException

    schema = {key: value for key, value in job_type.params_schema.items() if key != "required"}
    filled = {name: fill_locations(value, SAMPLE_LOCATIONS) for name, value in job_type.defaults.items()}
    try:
        with_schema_defaults = compile_schema(schema)(filled)
    except JsonSchemaValueException as exc:
        error = params_error(exc)
        return [
            f"defaults{error.path.removeprefix('params')}: {error.message}: every message that leaves it out gets "
            "this default; change the default or params_schema"
        ]
    try:
        compile_schema(schema, fill_defaults=False)(with_schema_defaults)
    except JsonSchemaValueException as exc:
        error = params_error(exc)
        if error.path == "params":  # a rule of the whole object (`maxProperties`, `not`, ...) the defaults break
            return [f"params_schema: its `default` values, filled in, break it: {error.message}; change them"]
        name = error.path.removeprefix("params.").partition(".")[0]
        return [
            f"params_schema.properties.{name}.default: {error.message}: every message that leaves "
            f"params.{name} out gets this default; change the default or the schema"
        ]
    return []


def _check_trigger(index: int, trigger: S3Trigger, job_type: JobType, *, strict: bool) -> list[str]:
    """In a strict load, a trigger's params must be given unless it starts `spark` (their default is that
    type's), and be valid params of its type once a marker's values fill them: else every marker's job
    goes to the DLQ. A catalog a synth published already passed this, so other loads trust it."""
    if not strict:
        return []
    where = f"s3_triggers[{index}] (prefix {trigger.prefix!r}, job type {trigger.job_type!r})"
    if trigger.job_type != "spark" and "params" not in trigger.model_fields_set:
        return [
            f"{where}: params: give its jobs' params: without them it sends the spark type's "
            f"({', '.join(sorted(SPARK_PARAMS))})"
        ]
    from fastjsonschema import JsonSchemaDefinitionException

    folder = trigger.prefix if trigger.prefix.endswith("/") or not trigger.prefix else f"{trigger.prefix}/"
    try:
        job = trigger.job(trigger.bucket or SAMPLE_BUCKET, f"{folder}{SAMPLE_PARTITION}{trigger.marker}")
        JobCatalog([job_type]).validate_params(job_type, job.params, SAMPLE_LOCATIONS)
    except (ParamsError, TriggerError) as exc:
        return [f"{where}: params: its jobs' params would be refused ({exc}): fix the params or the type's schema"]
    except JsonSchemaDefinitionException:  # the type's schema does not compile: reported with the type
        return []
    return []


def _collisions(job_types: Iterable[JobType], declared: Mapping[str, int]) -> list[str]:
    """Two types whose names would give one id in the stack, each pair named at the later declaration."""
    problems = []
    for collision in collisions(job_types):
        named = collision.second if collision.second in declared else collision.first
        where = f"job_types[{declared[named]}] {named!r}" if named in declared else repr(named)
        problems.append(
            f"{where}: name: {collision.first!r} and {collision.second!r} would both give the stack the id "
            f"{collision.id!r} (a type's ids are its name in CamelCase, without '-' and '_', with a fixed part "
            "before or after): rename one of them"
        )
    return problems


def load_catalog_file(path: Path, *, strict: bool = False, include_builtins: bool = True) -> JobCatalog:
    """Read a `{"job_types": [...], "s3_triggers": [...]}` file; relative entries resolve against the
    current directory (as a user runs `cdk` or `python -m offline` from their project)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise JobTypeError(f"{path}: cannot read the job types: {exc.strerror}") from None
    except ValueError as exc:
        raise JobTypeError(f"{path}: not JSON: {exc}") from None
    except RecursionError:
        raise JobTypeError(f"{path}: not JSON this reader takes: nested thousands of levels deep") from None
    if not isinstance(data, dict):
        raise JobTypeError(f"{path}: must be a JSON object with job_types (and s3_triggers)")
    return load_catalog(data, strict=strict, include_builtins=include_builtins, source=str(path))


def catalog_from_env(environ: Mapping[str, str] | None = None) -> JobCatalog:
    """The functions' catalog: `JOB_TYPES_FILE`, else the shipped `engine/job_types.json`, else the
    built-ins. A file that exists is trusted as written by the construct (no strict checks)."""
    env = os.environ if environ is None else environ
    named = env.get(CATALOG_ENV)
    if named:
        return load_catalog_file(Path(named))
    if SHIPPED_FILE.is_file():
        return load_catalog_file(SHIPPED_FILE)
    return builtin_catalog()


@functools.cache
def builtin_catalog() -> JobCatalog:
    """The built-in job types alone, made once: a catalog never changes, so every user shares it."""
    return JobCatalog(BUILTIN_TYPES)
