"""A job type: one JSON-shaped declaration, read unchanged by the stack, the receiver and the offline runtime.

    {"name": "wordcount", "runner": "pyspark", "entry": "jobs/wordcount.py:run",
     "params_schema": {"type": "object", "required": ["input"], ...},
     "glue": {"worker_type": "G.1X", "workers": 2, "timeout_minutes": 60}}

Runners:
- `pyspark`: `entry` names a Python file (absolute, or relative to the directory the declaration was
  loaded from: the current directory for a user's file, the project's root for the built-ins) and a
  function `run(spark, params) -> dict`; the dict is the job's summary. In the cloud it runs on the
  type's `platform`: a Glue job (`glue` sizes it, the default) or an EMR Serverless application
  (`emr_serverless` sizes it); offline, on the local Spark worker either way. `code` names the folder
  the entry's imports are rooted in, shipped whole (without it the entry file ships alone);
  `requirements` lists third-party packages, each pinned (`name==version`) or a wheel file (see
  `longjobs.engine.jobs.code`).
- `wait`: a Wait state of `params.seconds` (failing afterwards when `params.fail`), for canaries, load
  tests and scenarios.
- `inline`: runs inside the receiver; only the built-in `echo` has code for it.
- `state_machine`: the user's own state machine (ECS, Batch, EMR Serverless, ...), named by
  `state_machine.arn`, run as a nested `.sync` execution with the params as its input. The offline
  runtime cannot run it: moto's engine does not run nested executions (see docs/jobs.md).

`params_schema` is a JSON Schema (draft 7) of the job message's `params`; `defaults` fills params a
message leaves out before validation, with `{curated}`, `{quarantine}` and `{raw}` standing for the
deployment's bucket URIs (a default whose location is not configured is left out, so the schema's
`required` names what is missing).

This module only describes and checks declarations; it imports nothing heavy (it is part of the
Lambda asset and of the receiver's cold start).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

Runner = Literal["pyspark", "wait", "inline", "state_machine"]
Platform = Literal["glue", "emr_serverless"]
PLATFORMS: tuple[str, ...] = ("glue", "emr_serverless")
RUNNERS: tuple[str, ...] = ("pyspark", "wait", "inline", "state_machine")
NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,39}$"
LOCATIONS = ("curated", "quarantine", "raw")
"""Placeholders a default may use: the deployment's bucket URIs (settings `curated_uri`, ...)."""
MAX_WAIT_S = 43_200
"""The longest a wait type may wait: SQS hides a received message for at most 12 hours
(https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html),
and the message stays hidden while its job runs."""
RESERVED_MODULES = frozenset({"longjobs", "pyspark", "awsglue", "py4j"})
"""Top-level modules every pyspark run imports besides the standard library: this project's package (the
entry script and the `pipeline` zip), Spark's Python API, Glue's, and the Java bridge under both."""
PYTHON_3_11_ONLY = frozenset(
    {
        *("aifc", "audioop", "cgi", "cgitb", "chunk", "crypt", "imghdr", "mailcap", "msilib", "nis", "nntplib"),
        *("ossaudiodev", "pipes", "sndhdr", "spwd", "sunau", "telnetlib", "uu", "xdrlib", "lib2to3"),
        *("distutils", "imp", "asynchat", "asyncore", "smtpd"),
    }
)
"""Standard-library modules of the Python 3.11 that Glue 5.x runs, gone from the 3.13 that runs synth
(`sys.stdlib_module_names` lists only the running Python's)."""

_ENTRY = re.compile(r"^(?P<file>.+\.py):(?P<function>[A-Za-z_][A-Za-z0-9_]*)$")
_PINNED = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:\[[A-Za-z0-9._,-]+\])?==[A-Za-z0-9.!+_-]+$")
"""A requirement pinned to one version (PEP 508 name, optional extras, `==` and a version)."""
_STATE_MACHINE_ARN = re.compile(r"^arn:aws[a-z-]*:states:[a-z0-9-]+:\d{12}:stateMachine:[A-Za-z0-9_-]{1,80}$")
_EMR_APPLICATION_ARN = re.compile(r"^arn:aws[a-z-]*:emr-serverless:[a-z0-9-]+:\d{12}:/applications/[0-9a-z]{1,64}$")
_TOKEN = re.compile(r"^\$\{Token\[[^\]]+\]\}$")
"""A CDK token standing for an ARN not known before deployment (a state machine of the user's own app)."""


class JobTypeError(ValueError):
    """A declaration is not valid; the message names the declaration and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GlueSettings(_Strict):
    """The Glue job of a `pyspark` type. A value left out takes the stack's context setting of the same
    meaning (`glue_worker_type`, `glue_workers`, `glue_timeout_minutes`, `glue_max_concurrent_runs`)."""

    version: Literal["5.0", "5.1", "6.0"] | None = Field(
        default=None, description="The Glue version this type runs on (its code's Python and Spark)."
    )
    worker_type: Literal["G.1X", "G.2X", "G.4X", "G.8X"] | None = None
    workers: int | None = Field(default=None, ge=2, le=1_000)
    timeout_minutes: int | None = Field(default=None, ge=1, le=2_880)
    max_concurrent_runs: int | None = Field(default=None, ge=1, le=1_000)


class EmrServerlessSettings(_Strict):
    """The EMR Serverless run of a pyspark type whose `platform` is `emr_serverless`. Each field's
    default is documented beside it; none reads a context setting."""

    application_arn: str | None = Field(
        default=None,
        description="An existing Spark application to run on, by ARN (default: the construct creates one for "
        "the type, with `release_label`).",
    )
    release_label: Literal["emr-spark-8.0.0"] = Field(
        default="emr-spark-8.0.0",
        description="The created application's release: `emr-spark-8.0.0` (Spark 4.0, the major version of "
        "Glue 6.0; Python 3.11 and later, as the project's shipped code is written).",
    )
    timeout_minutes: int = Field(
        default=360,
        ge=1,
        le=720,
        description="One run's limit (`executionTimeoutMinutes`): EMR Serverless cancels a run past it.",
    )
    executor_cores: Literal[1, 2, 4, 8, 16] = Field(default=4, description="vCPUs of each executor (and the driver).")
    executor_memory_gb: int = Field(
        default=16, ge=2, le=96, description="Spark memory of each executor (and the driver), in GB."
    )
    max_vcpu: int = Field(
        default=64,
        ge=1,
        le=4_000,
        description="The created application's maximum capacity in vCPUs: all its runs together (memory "
        "scales with it, at `executor_memory_gb` per `executor_cores`).",
    )

    @field_validator("application_arn")
    @classmethod
    def _application_arn(cls, value: str | None) -> str | None:
        if value is not None and not (_EMR_APPLICATION_ARN.match(value) or _TOKEN.match(value)):
            raise ValueError(
                f"{value!r} is not an EMR Serverless application ARN "
                "(arn:aws:emr-serverless:<region>:<account>:/applications/<id>)"
            )
        return value

    @model_validator(mode="after")
    def _memory_per_core(self) -> EmrServerlessSettings:
        # A worker holds the memory and Spark's overhead (10 %): EMR Serverless's worker sizes allow 2 to
        # 7.5 GB per vCPU from 4 vCPU up, so 2 to 6 GB of Spark memory per vCPU fits every size.
        per_core = self.executor_memory_gb / self.executor_cores
        if not 2 <= per_core <= 6:
            raise ValueError(
                f"executor_memory_gb: {self.executor_memory_gb} GB for {self.executor_cores} vCPU: give 2 to 6 GB "
                "per vCPU (with Spark's overhead, what EMR Serverless's worker sizes hold)"
            )
        return self


class StateMachineSettings(_Strict):
    """The user's state machine of a `state_machine` type."""

    arn: str = Field(description="Its ARN, or a CDK token of one (a state machine of the same app).")
    timeout_minutes: int = Field(default=60, ge=1, le=720, description="The nested execution's step timeout.")

    @field_validator("arn")
    @classmethod
    def _arn(cls, value: str) -> str:
        if not (_STATE_MACHINE_ARN.match(value) or _TOKEN.match(value)):
            raise ValueError(
                f"{value!r} is not a state machine ARN (arn:aws:states:<region>:<account>:stateMachine:<name>)"
            )
        return value


class JobType(_Strict):
    """One declared job type (see the module's docstring)."""

    name: str = Field(pattern=NAME_PATTERN, description="What a job message's `type` names.")
    runner: Runner
    entry: str | None = Field(default=None, description="pyspark: `path/to/file.py:function`.")
    code: str | None = Field(
        default=None,
        description="pyspark: the folder the entry's imports are rooted in, shipped whole (default: the entry "
        "file alone).",
    )
    requirements: tuple[str, ...] = Field(
        default=(), description="pyspark: third-party packages, each `name==version` or a wheel file's path."
    )
    params_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    defaults: dict[str, Any] = Field(default_factory=dict)
    platform: Platform = Field(
        default="glue", description="pyspark: where its cloud runs go, `glue` or `emr_serverless`."
    )
    glue: GlueSettings | None = None
    emr_serverless: EmrServerlessSettings | None = None
    state_machine: StateMachineSettings | None = None
    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        le=1_000,
        description="Executions of this type running at once, at most (admission); a pyspark type's default "
        "is its Glue job's max concurrent runs where that is known (the construct fills it in).",
    )
    description: str = Field(default="", max_length=1_024)

    _base: Path | None = PrivateAttr(default=None)

    @field_validator("params_schema")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError('must be a JSON Schema of an object ({"type": "object", ...}): params are a JSON object')
        return value

    @field_validator("defaults")
    @classmethod
    def _placeholders(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, default in value.items():
            if isinstance(default, str):
                unknown = set(re.findall(r"\{([^{}]*)\}", default)) - set(LOCATIONS)
                if unknown:
                    raise ValueError(
                        f"{key}: unknown placeholder(s) {', '.join(sorted(unknown))}; known: {', '.join(LOCATIONS)}"
                    )
        return value

    @model_validator(mode="after")
    def _runner_fields(self) -> JobType:
        if self.runner == "pyspark":
            if self.entry is None:
                raise ValueError("entry: a pyspark type needs an entry, `path/to/file.py:function`")
            if not _ENTRY.match(self.entry):
                raise ValueError(f"entry: {self.entry!r} is not `path/to/file.py:function`")
        elif self.entry is not None:
            raise ValueError(f"entry: only pyspark types have one, this one's runner is {self.runner!r}")
        if (self.code is not None or self.requirements) and self.runner != "pyspark":
            raise ValueError(f"code, requirements: only pyspark types ship code, this one's runner is {self.runner!r}")
        for index, requirement in enumerate(self.requirements):
            if not (_PINNED.match(requirement) or requirement.endswith(".whl")):
                if _PINNED.match(compact := "".join(requirement.split())):
                    raise ValueError(f"requirements[{index}]: {requirement!r} has spaces: write {compact!r}")
                raise ValueError(
                    f"requirements[{index}]: {requirement!r} is not pinned: "
                    "write `name==version` or a wheel file's path"
                )
        if self.platform != "glue" and self.runner != "pyspark":
            raise ValueError(f"platform: only pyspark types choose one, this one's runner is {self.runner!r}")
        if self.glue is not None and (self.runner != "pyspark" or self.platform != "glue"):
            raise ValueError(f"glue: only pyspark types on platform glue run on Glue, this one is {self._runs_on}")
        if self.emr_serverless is not None and self.platform != "emr_serverless":
            raise ValueError(
                f"emr_serverless: only pyspark types on platform emr_serverless run there, this one is {self._runs_on}"
            )
        if self.platform == "emr_serverless" and self.requirements:
            raise ValueError(
                "requirements: an emr_serverless type cannot install packages yet (EMR Serverless takes them as "
                "a virtual environment built for its own image); ship pure-Python code in `code`, or run on glue"
            )
        if (self.state_machine is None) != (self.runner != "state_machine"):
            raise ValueError("state_machine: a state_machine type needs one, and only it may have one")
        if self.max_concurrency is not None and self.runner == "inline":
            raise ValueError("max_concurrency: an inline type runs inside the receiver, it has no executions to limit")
        if self.runner == "wait":
            properties = self.params_schema.get("properties", {})
            if "seconds" not in self.params_schema.get("required", []) or "seconds" not in properties:
                raise ValueError("params_schema: a wait type's schema must require an integer `seconds`")
        return self

    @property
    def _runs_on(self) -> str:
        return f"runner {self.runner!r}" if self.runner != "pyspark" else f"platform {self.platform!r}"

    @property
    def emr(self) -> EmrServerlessSettings:
        """An emr_serverless type's settings, its defaults filled in."""
        return self.emr_serverless or EmrServerlessSettings()

    @property
    def concurrency_limit(self) -> int | None:
        """The most executions of this type that may run at once: `max_concurrency`, else a pyspark
        type's Glue `max_concurrent_runs` when its declaration gives one; None: no limit."""
        if self.max_concurrency is not None:
            return self.max_concurrency
        if self.runner == "pyspark" and self.platform == "glue" and self.glue is not None:
            return self.glue.max_concurrent_runs
        return None

    # -- pyspark entries ---------------------------------------------------------------------------

    def with_base(self, base: Path) -> JobType:
        """This declaration, its relative entry resolved against `base`."""
        copy = self.model_copy()
        copy._base = base
        return copy

    @property
    def entry_function(self) -> str:
        match = _ENTRY.match(self.entry or "")
        if match is None:
            raise ValueError(f"job type {self.name!r} has no pyspark entry")
        return match.group("function")

    @property
    def entry_file(self) -> Path:
        """The entry's file: absolute, or relative to where the declaration was loaded from."""
        match = _ENTRY.match(self.entry or "")
        if match is None:
            raise ValueError(f"job type {self.name!r} has no pyspark entry")
        return self._resolve(match.group("file"))

    @property
    def code_root(self) -> Path | None:
        """The `code` folder, resolved like the entry; None when the entry file ships alone."""
        return None if self.code is None else self._resolve(self.code)

    @property
    def entry_module(self) -> str:
        """The module name the entry's file is imported under, what Glue imports: its dotted path under
        `code`, else its file name."""
        return ".".join(self._module_parts)

    @property
    def _module_parts(self) -> list[str]:
        """The entry module's name, part by part: the file's stem alone, or the folders and stem under `code`
        (a package's `__init__.py` is the package)."""
        root = self.code_root
        if root is None:
            return [self.entry_file.stem]
        parts = list(self.entry_file.relative_to(root).with_suffix("").parts)
        return parts[:-1] if parts[-1] == "__init__" else parts

    @property
    def wheel_files(self) -> list[Path]:
        """The requirements that are wheel files, resolved like the entry."""
        return [self._resolve(requirement) for requirement in self.requirements if requirement.endswith(".whl")]

    @property
    def pinned(self) -> list[str]:
        """The requirements that name a package and its version."""
        return [requirement for requirement in self.requirements if not requirement.endswith(".whl")]

    def _resolve(self, name: str) -> Path:
        path = Path(name)
        if path.is_absolute():
            return path
        return (self._base or Path.cwd()) / path

    def check_files(self) -> None:
        """Raise `ValueError` when the entry's file or function is missing. Reads the file's syntax
        only: nothing of the user's code runs (it imports Spark)."""
        import ast  # synthesis and scenario loading only

        if self.runner == "pyspark":
            path = self.entry_file
            if self.code_root is None:
                self._check_module_name()
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            except OSError as exc:
                raise ValueError(f"entry: cannot read {path}: {exc.strerror}") from None
            except SyntaxError as exc:
                raise ValueError(f"entry: {path} is not valid Python: {exc.msg} (line {exc.lineno})") from None
            functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
            if self.entry_function not in functions:
                raise ValueError(f"entry: {path} defines no top-level function {self.entry_function!r}")
            root = self.code_root
            if root is not None:
                if not root.is_dir():
                    raise ValueError(f"code: {root} is not a folder")
                if not path.resolve().is_relative_to(root.resolve()):
                    raise ValueError(f"entry: {path} is not inside the code folder {root}")
                self._check_module_name()
            for wheel in self.wheel_files:
                if not wheel.is_file():
                    raise ValueError(f"requirements: no wheel file {wheel}")

    def _check_module_name(self) -> None:
        """Raise `ValueError` when the entry cannot be imported under its module name, or when that name is
        taken: Glue imports the entry by name (`--job-module`), so `wordcount.v2.py` is the missing package
        `wordcount`, and `json.py` is the standard library's `json`, which has no `run`."""
        module = self.entry_module
        root = self.code_root
        where = f"{self.entry_file}" + (f" (under the code folder {root})" if root is not None else "")
        if not all(part.isidentifier() for part in self._module_parts):
            raise ValueError(
                f"entry: {where} would be imported as the module {module!r}, which Python cannot import (each part "
                "of a module name is letters, digits and `_`, not starting with a digit): rename "
                + ("the file" if root is None else "the file or its folders")
            )
        top = self._module_parts[0]
        if top in RESERVED_MODULES or top in sys.stdlib_module_names or top in PYTHON_3_11_ONLY:
            owner = "a module every run imports" if top in RESERVED_MODULES else "a standard-library module"
            raise ValueError(
                f"entry: {where} would be imported as the module {module!r}, but {top!r} is {owner}, which the run "
                f"would import instead of yours: rename {'the file' if root is None else repr(top)}"
            )

    def brace_problems(self) -> list[str]:
        """A default's lone `{` or `}` (as in `{curated`), which would reach the job literally: a strict load's
        check, so that a catalog published before it still loads."""
        problems = []
        for key, default in self.defaults.items():
            problem = unbalanced_brace(default, LOCATIONS) if isinstance(default, str) else ""
            if problem:
                problems.append(f"defaults: {key}: {problem}")
        return problems

    def wait_seconds_problem(self) -> str | None:
        """What is wrong with a wait type's `seconds`, else None: it must be an integer from 0 to `MAX_WAIT_S`.
        The Wait state fails on anything but a non-negative integer, with an error no catch sees
        (https://docs.aws.amazon.com/step-functions/latest/dg/amazon-states-language-wait-state.html), and a
        longer wait outlives the 12 hours SQS may keep its message hidden."""
        if self.runner != "wait":
            return None
        seconds = self.params_schema.get("properties", {}).get("seconds")
        fix = f'declare {{"type": "integer", "minimum": 0, "maximum": {MAX_WAIT_S}}} (or a narrower range)'
        if not isinstance(seconds, dict) or seconds.get("type") != "integer":
            return f"params_schema: a wait type's `seconds` must be an integer: {fix}, not {seconds!r}"
        minimum, maximum = _number(seconds.get("minimum")), _number(seconds.get("maximum"))
        if minimum is None or minimum < 0:
            return (
                f"params_schema: a wait type's `seconds` needs a minimum of 0 or more (a negative wait fails the "
                f"Wait state): {fix}; its minimum: {seconds.get('minimum', 'none')!s}"
            )
        if maximum is None or maximum > MAX_WAIT_S:
            return (
                f"params_schema: a wait type's `seconds` needs a maximum of at most {MAX_WAIT_S} (12 h: a longer "
                f"wait outlives what SQS keeps hidden): {fix}; its maximum: {seconds.get('maximum', 'none')!s}"
            )
        return None

    def declaration(self) -> dict[str, Any]:
        """The declaration as JSON-ready data (what the construct ships to the functions)."""
        return self.model_dump(mode="json", exclude_defaults=True)


def _number(value: object) -> float | None:
    """A schema keyword's number; None when it is absent or not a number (a bool is not one)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def unbalanced_brace(template: str, names: tuple[str, ...]) -> str:
    """What is wrong with `template`'s braces once its `{name}` placeholders are taken out ("" when
    nothing): a lone `{` or `}`, as in `{curated`, would otherwise pass through literally."""
    rest = re.sub(r"\{(?:" + "|".join(map(re.escape, names)) + r")\}", "", template)
    if "{" in rest or "}" in rest:
        known = ", ".join("{" + name + "}" for name in names)
        return f"{template!r} has an unbalanced brace: write a placeholder whole ({known}); no other brace is allowed"
    return ""
