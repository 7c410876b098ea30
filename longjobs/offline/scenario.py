"""The scenario file: settings, jobs and faults of one offline run (JSON).

    {"settings": {...any engine setting...}, "job_types": [...], "jobs": [...], "faults": [...],
     "timeout_s": 180, "batch_size": 10, "spark_heartbeat_s": 10, "seed": 1}

Settings not given take the engine's defaults; the resource names (table, queues, state machine)
belong to the runtime. `job_types` are declarations (as in `jobs.json`) added to the built-ins; their
relative entries are read from the current directory. A job is one of:

- the generic form, for any type: `{"id": "wc", "type": "wordcount", "params": {...}}` (a string
  param may use `{work_dir}`, the run's output folder);
- `{"id", "type": "wait", "seconds", "fail"}`, a Wait state;
- `{"id", "type": "spark", "events", "date", "seed"}`, the events pipeline on a generated partition;
- `{"id", "raw_body"}`, a body sent as it is.

With `"fifo": true` in the settings the jobs queue and its DLQ are FIFO, and every job names its message
`group` (optional `dedup_id`: two jobs of one group with the same one are one message, as SQS keeps only
the first within its 5 minutes). Jobs are sent in the order of the file.

Unknown keys anywhere are an error that names the key. Every problem in the file is reported at
once, each with its place (`jobs[2].seconds: ...`, `job_types[0] 'wordcount': entry: ...`).
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from longjobs.engine.delivery.models import BadInput, outlasts_renewal, parse_message
from longjobs.engine.jobs import JobCatalog, JobTypeError, load_catalog
from longjobs.engine.settings import FIFO_BATCH_SIZE, MERGED_SETTINGS, SQS_MAX_VISIBILITY_S, Settings
from longjobs.offline.resources import RUNTIME_SETTINGS

FinalState = Literal["deleted", "dlq", "queued"]
JobId = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
FifoId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[!-~]+$")]
"""A `MessageGroupId` or `MessageDeduplicationId`: 1 to 128 letters, digits and punctuation."""


DEFAULT_TIMEOUT_S = 180.0
MAX_TIMEOUT_S = 3_600.0
"""A run's `timeout_s` when the file gives none, and the most it may give."""


class ScenarioError(ValueError):
    """The scenario file is not valid; the message names each bad key."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WaitJob(_Strict):
    """A Wait state of `seconds`; `fail` makes it fail every time (walked to the DLQ)."""

    id: JobId
    type: Literal["wait"]
    seconds: int = Field(ge=0, le=SQS_MAX_VISIBILITY_S)
    fail: bool = False
    expect: FinalState | None = None
    group: FifoId | None = None
    dedup_id: FifoId | None = None

    @property
    def expected(self) -> FinalState:
        return self.expect or ("dlq" if self.fail else "deleted")


class SparkJob(_Strict):
    """The pipeline on a generated partition of `events` lines."""

    id: JobId
    type: Literal["spark"]
    events: int = Field(ge=1, le=5_000_000)
    date: str = Field(default="2026-11-20", pattern=r"^\d{4}-\d{2}-\d{2}$")
    seed: int = 1
    expect: FinalState | None = None
    group: FifoId | None = None
    dedup_id: FifoId | None = None

    @field_validator("date")
    @classmethod
    def _a_day(cls, value: str) -> str:
        """The generator writes the partition of this day before the run: a day that does not exist is refused here."""
        try:
            dt.date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a day of the calendar") from None
        return value

    @property
    def expected(self) -> FinalState:
        return self.expect or "deleted"


class GenericJob(_Strict):
    """A job of any declared type, its params as the job message carries them."""

    id: JobId
    type: str = Field(min_length=1, max_length=64)
    params: dict[str, Any] = Field(default_factory=dict)
    expect: FinalState | None = None
    group: FifoId | None = None
    dedup_id: FifoId | None = None

    @property
    def expected(self) -> FinalState:
        return self.expect or "deleted"


class RawJob(_Strict):
    """A message body sent as is: poison, or any body to try the receiver with."""

    id: JobId
    raw_body: str = Field(max_length=262_144)
    expect: FinalState | None = None
    group: FifoId | None = None
    dedup_id: FifoId | None = None

    @property
    def expected(self) -> FinalState:
        return self.expect or "dlq"


JobSpec = GenericJob | WaitJob | SparkJob | RawJob


class PauseExtender(_Strict):
    """No scheduled extender run starts from `at_s` for `for_s` seconds."""

    type: Literal["pause_extender"]
    at_s: float = Field(ge=0)
    for_s: float = Field(gt=0)


class Throttle(_Strict):
    """The extender's SQS client gets ThrottlingException for `operation` with this probability (seeded)."""

    type: Literal["throttle"]
    operation: Literal["ChangeMessageVisibilityBatch", "ChangeMessageVisibility"]
    probability: float = Field(gt=0, le=1)


class AbortExecution(_Strict):
    """StopExecution of the job's running execution at `at_s` (no status event follows offline)."""

    type: Literal["abort_execution"]
    job: str
    at_s: float = Field(ge=0)


class KillWorker(_Strict):
    """The Spark worker dies `after_s` into the job's first run: no more heartbeats, no answer."""

    type: Literal["kill_worker"]
    job: str
    after_s: float = Field(default=1.0, ge=0)


class DuplicateDelivery(_Strict):
    """At `at_s`, the job's message becomes visible (as a lapse would make it) and is delivered again."""

    type: Literal["duplicate_delivery"]
    job: str
    at_s: float = Field(ge=0)


FaultFunction = Literal["receiver", "extender", "watcher", "any"]
FaultMode = Literal["throttled", "server_error", "timeout", "answer_lost", "crash_before", "crash_after"]
"""An AWS call's fault: the simulation's names (`longjobs.history.faults.CallFault`), one vocabulary for both."""
RENAMED_MODES = {"throttle": "throttled", "error": "server_error", "ambiguous": "answer_lost", "crash": "crash_before"}
"""Mode names a scenario may not use, each refused with the simulation's name for that mode."""
FAULT_SERVICES = ("sqs", "dynamodb", "stepfunctions")
"""The services the functions call; an `aws_fault` operation must be one of theirs."""


@cache
def service_operations() -> dict[str, frozenset[str]]:
    """botocore's operation names of each service the functions call, from its service models."""
    import botocore.session

    session = botocore.session.get_session()
    return {name: frozenset(session.get_service_model(name).operation_names) for name in FAULT_SERVICES}


class AwsFault(_Strict):
    """A function's own AWS calls answered with a fault, per call with this probability (seeded).

    `operation` is botocore's operation name (`StartExecution`, `ChangeMessageVisibilityBatch`,
    `PutItem`, ...) or `*`. `mode`, as the simulation names a call's faults: `throttled`, the service's
    throttling answer; `server_error`, an HTTP 500 as the service sends it; `timeout`, no answer and no
    effect (the client's read times out); `answer_lost`, the request takes effect and the caller gets
    that 500 instead of the answer; `crash_before`, the invocation dies at that call, before sending
    it; `crash_after`, it dies once the request took effect. `count` caps the injections;
    `at_s`/`until_s` bound the window (seconds since the jobs were sent)."""

    type: Literal["aws_fault"]
    function: FaultFunction = "any"
    operation: str
    mode: FaultMode
    probability: float = Field(default=1.0, gt=0, le=1)
    count: int | None = Field(default=None, ge=1)
    at_s: float = Field(default=0.0, ge=0)
    until_s: float | None = Field(default=None, gt=0)

    @field_validator("mode", mode="before")
    @classmethod
    def _current_mode(cls, value: object) -> object:
        if isinstance(value, str) and value in RENAMED_MODES:
            raise ValueError(f"mode {value!r} is named {RENAMED_MODES[value]!r} now (the simulation's name)")
        return value

    @field_validator("operation")
    @classmethod
    def _known_operation(cls, value: str) -> str:
        if value != "*" and not any(value in names for names in service_operations().values()):
            raise ValueError(f"{value!r} is not an operation of SQS, DynamoDB or Step Functions (or '*')")
        return value

    @field_validator("until_s")
    @classmethod
    def _after_start(cls, value: float | None, info: ValidationInfo) -> float | None:
        at_s = info.data.get("at_s")
        if value is not None and isinstance(at_s, float) and value <= at_s:
            raise ValueError(f"must be later than at_s ({at_s:g}), got {value:g}")
        return value

    def matches(self, function: str, operation: str) -> bool:
        return self.function in ("any", function) and self.operation in ("*", operation)

    def open_at(self, elapsed_s: float) -> bool:
        return self.at_s <= elapsed_s and (self.until_s is None or elapsed_s < self.until_s)


class LoseScheduledRuns(_Strict):
    """Each scheduled extender run is lost with this probability (seeded), as EventBridge may lose one."""

    type: Literal["lose_scheduled_runs"]
    probability: float = Field(gt=0, le=1)


class DropStatusEvents(_Strict):
    """Each Step Functions status event is dropped with this probability (seeded): no watcher invocation."""

    type: Literal["drop_status_events"]
    probability: float = Field(default=1.0, gt=0, le=1)


Fault = Annotated[
    PauseExtender
    | Throttle
    | AbortExecution
    | KillWorker
    | DuplicateDelivery
    | AwsFault
    | LoseScheduledRuns
    | DropStatusEvents,
    Field(discriminator="type"),
]
_FAULT_TYPES = (
    "pause_extender",
    "throttle",
    "abort_execution",
    "kill_worker",
    "duplicate_delivery",
    "aws_fault",
    "lose_scheduled_runs",
    "drop_status_events",
)
_FAULT: TypeAdapter[Fault] = TypeAdapter(Fault)


class Scenario(_Strict):
    settings: Settings
    job_types: list[dict[str, Any]] = Field(default_factory=list, description="Added to the built-in job types.")
    jobs: list[Annotated[JobSpec, Field(union_mode="left_to_right")]] = Field(min_length=1)
    faults: list[Fault] = []
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S)
    batch_size: int | None = Field(
        default=None,
        ge=1,
        le=10,
        description="The event source mapping's batch size; by default the stack's: 10, on FIFO 1 (the only one).",
    )
    spark_heartbeat_s: int = Field(
        default=10,
        ge=1,
        le=3_600,
        description="Heartbeat timeout of the Spark step: a worker silent this long is taken for dead.",
    )
    seed: int = Field(default=1, description="Seeds the faults' draws and the status events' delays.")

    _catalog: JobCatalog | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _faults_name_jobs(self) -> Scenario:
        jobs = {job.id: job for job in self.jobs}
        if (duplicates := _duplicate_ids([job.id for job in self.jobs])) is not None:
            raise ValueError(duplicates)
        for index, fault in enumerate(self.faults):
            name = getattr(fault, "job", None)
            if name is None:
                continue
            job = jobs.get(name)
            if job is None:
                raise ValueError(f"faults[{index}].job: no job has id {name!r}")
            if isinstance(job, RawJob):
                raise ValueError(f"faults[{index}].job: {name!r} is a raw_body message, it runs no job")
            if isinstance(fault, KillWorker) and not self.runs_spark(job):
                raise ValueError(f"faults[{index}].job: kill_worker needs a pyspark job, {name!r} is {job.type}")
        return self

    @model_validator(mode="after")
    def _fifo_groups(self) -> Scenario:
        """On a FIFO queue every job names its message group; elsewhere none does. One deduplication id is
        not used in two groups: SQS would keep both (deduplication per group), moto drops the second."""
        problems = []
        groups_of_key: dict[str, str] = {}
        for index, job in enumerate(self.jobs):
            if not self.settings.fifo:
                problems += [
                    f"jobs[{index}].{key}: only on a FIFO queue (settings.fifo)"
                    for key in ("group", "dedup_id")
                    if getattr(job, key) is not None
                ]
                continue
            if job.group is None:
                problems.append(f"jobs[{index}].group: required on a FIFO queue (settings.fifo): its message group id")
                continue
            key = dedup_key(job)
            if key is not None and groups_of_key.setdefault(key, job.group) != job.group:
                problems.append(
                    f"jobs[{index}].dedup_id: used in groups {groups_of_key[key]!r} and {job.group!r}; the offline "
                    "runtime's moto deduplicates across the whole queue, SQS per group"
                )
        if self.settings.fifo and self.batch_size not in (None, FIFO_BATCH_SIZE):
            problems.append(
                f"batch_size: {self.batch_size} on a FIFO queue: a record received behind its group's running or "
                f"retried job still counts a receive, so the stack's FIFO mapping takes {FIFO_BATCH_SIZE}; leave it out"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def job(self, job_id: str) -> JobSpec:
        return next(job for job in self.jobs if job.id == job_id)

    def duplicate_of(self, job: JobSpec) -> str | None:
        """The earlier job whose message SQS keeps when this one is sent (FIFO: the same group and
        deduplication id, given or, for a raw body, content-based), or None."""
        key = dedup_key(job)
        if not self.settings.fifo or key is None:
            return None
        return next(
            (
                other.id
                for other in self.jobs[: self.jobs.index(job)]
                if dedup_key(other) == key and other.group == job.group
            ),
            None,
        )

    def group_jobs(self) -> dict[str, list[JobSpec]]:
        """FIFO: each message group's jobs, in send order (the order of the file)."""
        groups: dict[str, list[JobSpec]] = {}
        for job in self.jobs:
            if job.group is not None:
                groups.setdefault(job.group, []).append(job)
        return groups

    def job_catalog(self) -> JobCatalog:
        """The built-in job types and the scenario's own (already checked when the file was loaded)."""
        if self._catalog is None:
            self._catalog = load_catalog(job_types=self.job_types)
        return self._catalog

    def runs_spark(self, job: JobSpec) -> bool:
        """Whether the job runs on the local Spark worker (a pyspark type)."""
        if isinstance(job, SparkJob):
            return True
        if isinstance(job, GenericJob):
            job_type = self.job_catalog().get(job.type)
            return job_type is not None and job_type.runner == "pyspark"
        return False


def dedup_key(job: JobSpec) -> str | None:
    """What SQS deduplicates a FIFO job's message by, when two jobs may share it: the `dedup_id`, or the
    body of a raw one (content-based deduplication; the other jobs' bodies hold their unique ids)."""
    if job.dedup_id is not None:
        return f"id:{job.dedup_id}"
    return f"body:{job.raw_body}" if isinstance(job, RawJob) else None


def _duplicate_ids(ids: list[object]) -> str | None:
    """The problem of job ids given to more than one job, or None."""
    twice = sorted({str(i) for i in ids if ids.count(i) > 1})
    return f"job ids must be unique; used twice: {twice}" if twice else None


def _place(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "scenario"


def _job_problems(jobs: Any, catalog: JobCatalog | None) -> list[str]:
    """Which model each job is, checked by hand: pydantic's report on a union lists every member."""
    if not isinstance(jobs, list):
        return []
    problems = []
    for index, job in enumerate(jobs):
        if not isinstance(job, Mapping):
            problems.append(f"jobs[{index}]: must be an object")
        elif "raw_body" in job:
            continue
        elif "params" in job:
            if catalog is not None and (not isinstance(job.get("type"), str) or job["type"] not in catalog):
                known = ", ".join(catalog.names)
                problems.append(f"jobs[{index}].type: {job.get('type')!r} is not a job type (known: {known})")
        elif job.get("type") not in ("wait", "spark"):
            problems += [f"jobs[{index}].{key}: unknown key" for key in job if key not in _JOB_KEYS]
            problems.append(
                f"jobs[{index}]: give params (any job type), or type 'wait' or 'spark' in their short forms, or a "
                f"raw_body; got type {job.get('type')!r}"
            )
    return problems


WORK_DIR_STAND_IN = "/work_dir"
"""What `{work_dir}` stands for when a job's params are checked at load, before the run's folder is known."""


def _refused(job: _Strict, settings: Settings | None, catalog: JobCatalog | None) -> str | None:
    """Why the receiver would dead-letter the message of a job expected to run, or None (also while the
    settings or job types are themselves invalid). Such a run would end with the job in the DLQ and blame
    the processor; a job meant to be refused says `expect: dlq`."""
    if settings is None or catalog is None:
        return None
    if isinstance(job, WaitJob):
        return _outlasts_renewal(job, settings, catalog) if job.expected == "deleted" else None
    if not isinstance(job, GenericJob) or job.expected != "deleted":
        return None
    if job.type not in catalog:
        return None  # reported as an unknown type
    params = {k: v.replace("{work_dir}", WORK_DIR_STAND_IN) if isinstance(v, str) else v for k, v in job.params.items()}
    try:
        parse_message(json.dumps({"job_id": job.id, "type": job.type, "params": params}), settings, catalog)
    except BadInput as exc:
        return f'the receiver would send its message to the DLQ ({exc}); fix it, or give "expect": "dlq"'
    return None


def _outlasts_renewal(job: WaitJob, settings: Settings, catalog: JobCatalog) -> str | None:
    """Why the receiver would send a wait job expected to succeed to the DLQ: it runs longer than renewal
    lasts (`outlasts_renewal`, the receiver's own rule)."""
    job_type = catalog.get(job.type)
    why = None if job_type is None else outlasts_renewal(job_type, {"seconds": job.seconds}, settings)
    if why is None:
        return None
    return f'{why.removeprefix("params.seconds: ")}, or give "expect": "dlq" (the receiver sends it to the DLQ)'


_JOB_KEYS = frozenset().union(*(model.model_fields for model in (WaitJob, SparkJob, GenericJob, RawJob)))
"""The keys of a job in any of its forms: one outside them is named as unknown when no form fits."""


def _model_for(job: Mapping[str, Any]) -> type[_Strict]:
    if "raw_body" in job:
        return RawJob
    if "params" in job:
        return GenericJob
    return WaitJob if job.get("type") == "wait" else SparkJob


def _catalog_problems(declarations: Any) -> tuple[JobCatalog | None, list[str]]:
    """The scenario's job types, checked as `cdk synth` checks `jobs.json` (entries read, schemas compiled)."""
    if not isinstance(declarations, list):
        return None, ["job_types: must be a list of job type declarations"]
    try:
        catalog = load_catalog(job_types=declarations, strict=True)
    except JobTypeError as exc:
        return None, [str(exc).removeprefix("invalid job types: ")]
    problems = [
        f"job_types: {t.name!r} runs a state machine, which the offline runtime cannot run: moto's engine does not "
        "run nested executions (docs/jobs.md)"
        for t in catalog.of_runner("state_machine")
    ]
    return catalog, problems


def parse_scenario(data: Any) -> Scenario:
    """Validate a decoded scenario; raises `ScenarioError` listing every problem."""
    if not isinstance(data, Mapping):
        raise ScenarioError(f"scenario: must be a JSON object, got {type(data).__name__}")
    problems: list[str] = []
    settings_values = data.get("settings", {})
    if not isinstance(settings_values, Mapping):
        problems.append("settings: must be an object")
        settings_values = {}
    for key in settings_values:
        if key in RUNTIME_SETTINGS:
            problems.append(f"settings.{key}: set by the offline runtime from the resources it creates")
        elif key in MERGED_SETTINGS:
            merged = MERGED_SETTINGS[key]
            problems.append(f"settings.{key}: unknown setting: merged into {merged}, set {merged}")
        elif key not in Settings.model_fields:
            nearest = difflib.get_close_matches(key, list(Settings.model_fields), n=1)
            problems.append(f"settings.{key}: unknown setting" + (f" (did you mean {nearest[0]}?)" if nearest else ""))
    settings_known = not problems
    catalog, catalog_problems = _catalog_problems(data.get("job_types", []))
    problems += catalog_problems
    problems += _job_problems(data.get("jobs"), catalog)
    if isinstance(data.get("jobs"), list):  # checked here too, so that it is reported with the rest
        ids = [job.get("id") for job in data["jobs"] if isinstance(job, Mapping) and isinstance(job.get("id"), str)]
        problems += [duplicates] if (duplicates := _duplicate_ids(ids)) is not None else []
    problems += [f"{key}: unknown key" for key in data if key not in Scenario.model_fields]
    faults = data.get("faults", [])
    if isinstance(faults, list):
        for index, fault in enumerate(faults):
            if isinstance(fault, Mapping) and fault.get("type") not in _FAULT_TYPES:
                problems.append(
                    f"faults[{index}].type: must be one of {', '.join(_FAULT_TYPES)}, got {fault.get('type')!r}"
                )
            else:
                try:
                    _FAULT.validate_python(fault)
                except ValidationError as exc:
                    problems += _describe(exc, prefix=("faults", index))
    settings: Settings | None = None
    if settings_known:
        try:
            settings = Settings.model_validate(dict(settings_values))
        except ValidationError as exc:
            problems += _describe(exc, prefix=("settings",))
    jobs = data.get("jobs")
    typed_jobs: Any = jobs
    if isinstance(jobs, list):
        typed_jobs = []
        for index, job in enumerate(jobs):
            if not isinstance(job, Mapping) or (
                "raw_body" not in job and "params" not in job and job.get("type") not in ("wait", "spark")
            ):
                continue  # reported above
            try:
                typed_jobs.append(_model_for(job).model_validate(job))
            except ValidationError as exc:
                problems += _describe(exc, prefix=("jobs", index))
                continue
            if (refused := _refused(typed_jobs[-1], settings, catalog)) is not None:
                place = "seconds" if isinstance(typed_jobs[-1], WaitJob) else "params"
                problems.append(f"jobs[{index}].{place}: {refused}")
    if problems:
        raise ScenarioError("invalid scenario: " + "; ".join(problems))
    try:
        return Scenario.model_validate({**data, "settings": settings, "jobs": typed_jobs})
    except ValidationError as exc:
        raise ScenarioError("invalid scenario: " + "; ".join(_describe(exc))) from None


def _describe(exc: ValidationError, prefix: tuple[int | str, ...] = ()) -> list[str]:
    """pydantic's errors as `place: problem`, without the union tags it adds to the place."""
    out = []
    for err in exc.errors():
        loc = (*prefix, *err["loc"])
        loc = tuple(p for i, p in enumerate(loc) if not (p in _FAULT_TYPES and i and isinstance(loc[i - 1], int)))
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            out.append(f"{_place(loc)}: unknown key")
        elif not loc:
            out.append(message)  # a check across keys names its own place
        else:
            out.append(f"{_place(loc)}: {message}")
    return out


def load_scenario(path: Path) -> Scenario:
    """Read and validate a scenario file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError(f"cannot read the scenario {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ScenarioError(f"{path} is not JSON: {exc}") from None
    return parse_scenario(data)
