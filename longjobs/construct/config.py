"""The stack's settings, read from CDK context (`cdk deploy -c key=value`) with defaults.

Two models validate them. The lease engine's own settings (policy, timings, shards, release delays,
max receives, ...) go through `longjobs.engine.settings.Settings`, the very model the functions load from
their environment at cold start, so a value the functions would refuse fails `cdk synth` instead.
The settings only the infrastructure has (stage, timeouts, Glue size, alarms, ...) have their own
model here. Then the two are checked against each other: a queue whose VT is shorter than the
receiver's timeout, or a Glue run longer than renewal lasts, is refused too. Every error names the
context key and the value it got.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import ErrorDetails

from longjobs.construct.constants import (
    EXTENDER_PERIOD,
    LAMBDA_ARCHITECTURE,
    LAMBDA_RUNTIME,
    LOG_RETENTION,
    POWERTOOLS_LAYER_NAME,
    POWERTOOLS_LAYER_NAMES,
    SNAPSTART_UNAVAILABLE_REGIONS,
)
from longjobs.engine.jobs import GlueSettings, JobCatalog, JobType
from longjobs.engine.jobs.types import MAX_WAIT_S
from longjobs.engine.policies import hold_limit
from longjobs.engine.policies.remaining_time import MAX_BUFFER_S, lost_run_need_s
from longjobs.engine.settings import (
    EXTENDER_TIMEOUT_S,
    FIFO_BATCH_SIZE,
    MAX_BATCH_SIZE,
    MERGED_SETTINGS,
    SQS_MAX_VISIBILITY_S,
    Settings,
    SettingsError,
    number_not_boolean,
    shown,
    unknown_settings,
)

RESOURCE_FIELDS = frozenset(
    {
        "table_name",
        "queue_url",
        "dlq_url",
        "state_machine_arn",
        "curated_uri",
        "quarantine_uri",
        "raw_uri",
        "waiting_queues",
        "job_runs",
    }
)
"""Engine settings the stack fills in from the resources it creates: not context settings."""
FIXED_FIELDS = frozenset({"extender_period_s", "receiver_timeout_s"})
"""Engine settings fixed by the infrastructure: the extender runs every minute (EXTENDER_PERIOD), and the
receiver's timeout is the receiver function's (the infrastructure key `receiver_timeout_s`)."""
ENGINE_KEYS = tuple(name for name in Settings.model_fields if name not in RESOURCE_FIELDS | FIXED_FIELDS)

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_LAYER_ARN = re.compile(r"^arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:layer:[A-Za-z0-9_-]+:\d+$")
_KEY_ARN = re.compile(
    r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/(mrk-[0-9a-f]{32}|[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12})$"
)
CREATE_KEY = "create"
"""The `kms_key` value that has the processor create its own customer-managed key."""
_EMR_ARN_REGION = re.compile(r"^arn:aws[a-z-]*:emr-serverless:[a-z0-9-]+:")
"""An EMR Serverless application's ARN, not a token standing for one: its fourth field is its region."""


class ConfigError(ValueError):
    """A CDK context value is out of range, or two of them do not fit together."""


Tracing = Literal["off", "service", "xray-sdk", "opentelemetry"]
"""How the functions are traced (docs/deploy.md has the table: what each traces, its cold-start cost)."""


class InfraSettings(BaseModel):
    """What only the infrastructure needs to know. Field names are the context keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: str = Field(
        default="dev", pattern=r"^[a-z][a-z0-9-]{0,19}$", description="Part of the stack name; `prod` protects data."
    )
    deletion_protection: bool | None = Field(
        default=None,
        description="Lease table deletion protection; the table and queues are then retained. Default: on for prod.",
    )
    receiver_timeout_s: int = Field(default=30, ge=1, le=900)
    receiver_batch_size: int = Field(
        default=MAX_BATCH_SIZE,
        ge=1,
        le=MAX_BATCH_SIZE,
        description="Records per receiver invocation; on FIFO always 1 (longjobs.engine.settings.FIFO_BATCH_SIZE).",
    )
    receiver_max_concurrency: int = Field(
        default=10, ge=2, le=1_000, description="Event source mapping's maximum concurrency (2..1000)."
    )
    lambda_memory_mb: int = Field(default=256, ge=128, le=10_240, description="Memory of each function.")
    snapstart: bool = Field(
        default=False,
        description="Lambda SnapStart for the three functions: each is published as a version, with an alias `live` "
        "that the event source mapping, the schedule and the status-change rule invoke; a new container resumes "
        "from the version's snapshot. It needs Python 3.12 or later and is not offered in every region; it adds "
        "snapshot caching and restore charges (docs/deploy.md).",
    )
    reserve_concurrency: bool = Field(
        default=False,
        description="Reserve Lambda concurrency for the extender (1) and the watcher (5). Lambda refuses a "
        "reservation that leaves the account under 100 unreserved, which a new account's quota does: off, the "
        "default stack deploys anywhere.",
    )
    queue_visibility_timeout_s: int = Field(
        default=180,
        ge=0,
        le=SQS_MAX_VISIBILITY_S,
        description="Jobs queue VT: how soon a record the receiver never leased comes back.",
    )
    glue_version: Literal["5.0", "5.1", "6.0"] = Field(
        default="6.0",
        description="Glue version of every pyspark type that does not pin its own: 6.0 runs Spark 4.1.1 on "
        "Python 3.13; 5.0 and 5.1 run Spark 3.5 on Python 3.11.",
    )
    glue_worker_type: Literal["G.1X", "G.2X", "G.4X", "G.8X"] = Field(
        default="G.1X", description="Glue settings of every pyspark job type that does not set its own."
    )
    glue_workers: int = Field(default=2, ge=2, le=1_000)
    glue_timeout_minutes: int = Field(default=360, ge=1, le=2_880, description="One Glue run's limit.")
    glue_max_concurrent_runs: int = Field(default=10, ge=1, le=1_000)
    log_retention_days: int = 365  # a year: what regulated accounts ask of logs (AWS Control Tower, checkov)
    quarantine_expiration_days: int = Field(default=30, ge=1, le=3_650)
    oldest_message_alarm_s: int | None = Field(
        default=None,
        ge=60,
        description="Alarm threshold on the queue's oldest message; default: the longest run + 1 h.",
    )
    alarm_email: str | None = Field(default=None, description="Subscribed to the alarm topic when set.")
    s3_notifications: bool = Field(
        default=False, description="Raw bucket ObjectCreated events of the S3 triggers' markers -> jobs queue."
    )
    tracing: Tracing = Field(
        default="service",
        description="off | service (Lambda's and Step Functions' own X-Ray traces, no SDK in the functions) | "
        "xray-sdk (Powertools' Tracer too: the X-Ray SDK, in maintenance) | opentelemetry (the ADOT layer, "
        "otel_layer_arn). `true`/`false` still mean xray-sdk/off.",
    )
    otel_layer_arn: str | None = Field(
        default=None, description="The AWS Distro for OpenTelemetry Python layer's ARN (tracing=opentelemetry)."
    )
    powertools_layer_arn: str | None = Field(
        default=None, description="Overrides the Powertools layer resolved from its public SSM parameter."
    )
    kms_key: str | None = Field(
        default=None,
        description="One customer-managed KMS key for the queues, the lease table, the log groups, the buckets, "
        "the state machine, the Glue jobs, the functions' environment and the alarm topic: `create` (the processor "
        "creates it, with its key policy) or the ARN of an existing key (whose policy you keep: docs/deploy.md). "
        "Unset: each service's own encryption (SSE-SQS, DynamoDB's and CloudWatch Logs' keys, SSE-S3), as before.",
    )

    @field_validator("*", mode="before")
    @classmethod
    def _number_not_boolean(cls, value: Any, info: ValidationInfo) -> Any:
        return number_not_boolean(cls, value, info)

    @field_validator("glue_version", mode="before")
    @classmethod
    def _version_of_a_number(cls, value: Any) -> Any:
        """Accept the number cdk.json's `"glue_version": 5.1` gives, as well as the string of `-c glue_version=5.1`."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            return f"{value:.1f}"
        return value

    @field_validator("log_retention_days")
    @classmethod
    def _known_retention(cls, value: int) -> int:
        if value not in LOG_RETENTION:
            raise ValueError(f"must be one of CloudWatch's retentions: {', '.join(map(str, LOG_RETENTION))}")
        return value

    @field_validator("alarm_email")
    @classmethod
    def _email(cls, value: str | None) -> str | None:
        if value is not None and not _EMAIL.match(value):
            raise ValueError("must be an email address")
        return value

    @field_validator("tracing", mode="before")
    @classmethod
    def _tracing_of_old(cls, value: Any) -> Any:
        """Accept the bool form too: `true` means `xray-sdk`, `false` means `off`."""
        old = {"true": "xray-sdk", "false": "off"}
        if isinstance(value, bool):
            return "xray-sdk" if value else "off"
        return old.get(str(value).strip().lower(), value)

    @model_validator(mode="after")
    def _otel_needs_its_layer(self) -> InfraSettings:
        if self.tracing == "opentelemetry" and self.otel_layer_arn is None:
            raise ValueError(
                "tracing=opentelemetry needs otel_layer_arn: the AWS Distro for OpenTelemetry Python layer of your "
                "region (https://aws-otel.github.io/docs/getting-started/lambda/lambda-python)"
            )
        return self

    @field_validator("powertools_layer_arn", "otel_layer_arn")
    @classmethod
    def _layer_arn(cls, value: str | None) -> str | None:
        if value is not None and not _LAYER_ARN.match(value):
            raise ValueError("must be a Lambda layer version ARN (arn:aws:lambda:<region>:<account>:layer:<name>:<n>)")
        return value

    @field_validator("powertools_layer_arn")
    @classmethod
    def _powertools_layer_fits(cls, value: str | None) -> str | None:
        """One of Powertools' own layers (`AWSLambdaPowertoolsPython...`, as it names them) must be the v3
        layer built for the functions' runtime and architecture: another loads, and its compiled packages
        fail at the first cold start. A layer of another name is taken as the deployer's own build."""
        parts = (value or "").split(":")
        name = parts[6] if len(parts) > 6 else ""
        if POWERTOOLS_LAYER_NAMES.fullmatch(name) and name != POWERTOOLS_LAYER_NAME:
            raise ValueError(
                f"the layer {name} is not the one the functions run with: use {POWERTOOLS_LAYER_NAME} (Powertools "
                f"v3 for Lambda's {LAMBDA_RUNTIME.name} on {LAMBDA_ARCHITECTURE.name})"
            )
        return value

    @field_validator("kms_key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        if value is not None and value != CREATE_KEY and not _KEY_ARN.match(value):
            raise ValueError(
                f"must be {CREATE_KEY!r} or a KMS key ARN (arn:aws:kms:<region>:<account>:key/<key id>), not an alias"
            )
        return value

    @property
    def table_deletion_protection(self) -> bool:
        return self.stage == "prod" if self.deletion_protection is None else self.deletion_protection

    def oldest_message_alarm_threshold_s(self, catalog: JobCatalog) -> int:
        """`oldest_message_alarm_s`, else the longest run of a type of `catalog` plus an hour: a wait job's
        longest `seconds`, a Glue, EMR Serverless or state machine run's timeout. A message its job holds
        that long is not stuck."""
        if self.oldest_message_alarm_s is not None:
            return self.oldest_message_alarm_s
        runs = [(self.run_timeout_minutes(t) or 0) * 60 for t in catalog]
        waits = [MAX_WAIT_S for t in catalog if t.runner == "wait"]
        return max([*runs, *waits, 0]) + 3_600

    def glue_of(self, job_type: JobType) -> GlueSettings:
        """A pyspark type's Glue settings, each one it leaves out taken from these settings."""
        own = job_type.glue or GlueSettings()
        return GlueSettings(
            version=own.version or self.glue_version,
            worker_type=own.worker_type or self.glue_worker_type,
            workers=own.workers or self.glue_workers,
            timeout_minutes=own.timeout_minutes or self.glue_timeout_minutes,
            max_concurrent_runs=own.max_concurrent_runs or self.glue_max_concurrent_runs,
        )

    def run_timeout_minutes(self, job_type: JobType) -> int | None:
        """How long one run of the type may last: its Glue or EMR Serverless run's limit, a state machine
        type's step timeout; None for the types that run no job of their own (wait, inline)."""
        if job_type.runner == "pyspark":
            if job_type.platform == "emr_serverless":
                return job_type.emr.timeout_minutes
            return self.glue_of(job_type).timeout_minutes
        if job_type.runner == "state_machine" and job_type.state_machine is not None:
            return job_type.state_machine.timeout_minutes
        return None


@dataclass(frozen=True)
class StackConfig:
    """Everything the stack is built from, validated."""

    infra: InfraSettings
    engine: Settings

    @property
    def mapping_batch_size(self) -> int:
        """The event source mapping's batch size: `receiver_batch_size`, on FIFO `FIFO_BATCH_SIZE` (1)."""
        return FIFO_BATCH_SIZE if self.engine.fifo else self.infra.receiver_batch_size

    def engine_environment(self) -> dict[str, str]:
        """The engine settings as the functions read them (upper-case env vars): those set in
        context, plus the extender's period, which the schedule fixes."""
        chosen = {name: getattr(self.engine, name) for name in self.engine.model_fields_set if name in ENGINE_KEYS}
        chosen["extender_period_s"] = self.engine.extender_period_s
        chosen["receiver_timeout_s"] = self.engine.receiver_timeout_s
        return {name.upper(): str(value) for name, value in sorted(chosen.items()) if value is not None}


def context_keys() -> tuple[str, ...]:
    """Every context key the stack reads."""
    return (*InfraSettings.model_fields, *ENGINE_KEYS)


def refuse_unknown_keys(keys: Mapping[str, str], *, also: Collection[str] = ()) -> None:
    """Refuse each key of `keys` (mapped to the name it is reported by) that names no setting, nor one of
    `also`, with the nearest name: a misspelt key would otherwise leave its setting at the default."""
    problems = unknown_settings(keys, [*context_keys(), *MERGED_SETTINGS, *also])
    if problems:
        raise ConfigError(f"invalid CDK context: {'; '.join(problems)}; the settings: docs/deploy.md#context-settings")


def load_config(
    context: Mapping[str, Any], *, app_keys: Collection[str] = (), catalog: JobCatalog | None = None
) -> StackConfig:
    """Validate the context values (missing or None keys take their defaults). Raises `ConfigError`
    naming every bad key, and every key that names no setting. `app_keys`: keys the caller reads
    itself (the app's `jobs_file`), named as the nearest to a misspelt one. `catalog`: the job types
    the stack will run, so that a timeout refused names one that also fits their admission."""
    given = {key: value for key, value in context.items() if value is not None}
    refuse_unknown_keys({key: key for key in given}, also=app_keys)
    problems: list[str] = []
    infra: InfraSettings | None = None
    engine: Settings | None = None
    try:
        infra = InfraSettings.model_validate({key: given[key] for key in InfraSettings.model_fields if key in given})
    except ValidationError as exc:
        problems += [_infra_problem(e) for e in exc.errors()]
    receiver_timeout = infra.receiver_timeout_s if infra is not None else InfraSettings().receiver_timeout_s
    engine_values = {
        **{key: given[key] for key in (*ENGINE_KEYS, *MERGED_SETTINGS) if key in given},
        "extender_period_s": EXTENDER_PERIOD.to_seconds(),
        "receiver_timeout_s": receiver_timeout,
    }
    remaining = _remaining_on_the_schedule(engine_values)
    if remaining is not None:
        problems.append(remaining)
    else:
        try:
            engine = Settings.load(engine_values)
        except SettingsError as exc:
            problems.append(str(exc).removeprefix("invalid settings: "))
    if infra is None or engine is None:
        raise ConfigError("invalid CDK context: " + "; ".join(problems))
    _check_together(infra, engine, catalog)
    return StackConfig(infra=infra, engine=engine)


def _infra_problem(error: ErrorDetails) -> str:
    """One of pydantic's errors as `key=value: problem`; a check across keys names its keys itself."""
    message = error["msg"].removeprefix("Value error, ")
    if not error["loc"]:
        return message
    return f"{'.'.join(map(str, error['loc']))}={shown(error['input'])}: {message}"


def _remaining_on_the_schedule(values: Mapping[str, Any]) -> str | None:
    """Why the remaining policy cannot renew on the stack, if it cannot. It renews at most 10 s before
    visible, and one lost run of the stack's fixed 1-minute schedule leaves longer. The engine would
    advise a shorter extender_period_s, which the stack does not offer: this names the policies that fit."""
    if values.get("policy") != "remaining":
        return None
    try:
        # The policy checks its renewals once the VT is known: without one, the rest is checked.
        settings = Settings.load({**values, "visibility_timeout_s": None})
    except SettingsError:
        return None  # the full load names what else is wrong
    need = lost_run_need_s(settings)
    if not settings.renewal_enabled or need < MAX_BUFFER_S:
        return None
    return (
        f"policy=remaining cannot renew on the stack's {settings.extender_period_s:g} s extender schedule: it renews "
        f"at most {MAX_BUFFER_S:g} s before visible, and one lost scheduled run leaves {need:g} s (the period, a "
        f"tick of heartbeat_s and min_remaining_life_s); use policy=adaptive (the default), or policy=threshold "
        f"with threshold_s above {need:g} and visibility_timeout_s above that"
    )


def make_config(
    *,
    infra: InfraSettings | Mapping[str, Any] | None = None,
    engine: Settings | Mapping[str, Any] | None = None,
    catalog: JobCatalog | None = None,
) -> StackConfig:
    """The construct's settings: each a validated object or plain values (as context values would be),
    checked together, and against every pyspark type's Glue timeout when `catalog` is given. Raises
    `ConfigError` naming the bad setting."""
    if isinstance(infra, InfraSettings):
        infra_values: dict[str, Any] = infra.model_dump(exclude_unset=True)
    else:
        infra_values = dict(infra or {})
    if isinstance(engine, Settings):
        engine_values: dict[str, Any] = engine.model_dump(exclude_unset=True)
    else:
        engine_values = dict(engine or {})
    for key in sorted(engine_values):
        if key in RESOURCE_FIELDS or key == "extender_period_s":
            raise ConfigError(f"invalid settings: engine.{key} is set by the processor itself")
    if "receiver_timeout_s" in engine_values:
        raise ConfigError("invalid settings: engine.receiver_timeout_s: set infra receiver_timeout_s instead")
    named = {**{key: f"infra.{key}" for key in infra_values}, **{key: f"engine.{key}" for key in engine_values}}
    refuse_unknown_keys(named)
    overlap = sorted(set(infra_values) & set(engine_values))
    if overlap:
        raise ConfigError(f"invalid settings: {', '.join(overlap)} given both as infra and engine settings")
    try:
        config = load_config({**infra_values, **engine_values}, catalog=catalog)
        if catalog is not None:
            check_job_types(config, catalog)
    except ConfigError as exc:  # the construct reads no context: its settings are the props'
        raise ConfigError(str(exc).replace("invalid CDK context: ", "invalid settings: ", 1)) from None
    return config


def check_job_types(config: StackConfig, catalog: JobCatalog) -> None:
    """Every type's run (Glue, EMR Serverless, a nested state machine) must end before renewal stops (see
    `_check_together`), and a Glue type may not admit more executions than its Glue job runs at once."""
    renewal_s = config.engine.renewal_s
    for job_type in catalog:
        minutes = config.infra.run_timeout_minutes(job_type) or 0
        if minutes * 60 > renewal_s:
            raise ConfigError(
                f"invalid job type {job_type.name!r}: {_timeout_field(job_type)}={minutes} ({minutes * 60} s) is "
                f"longer than renewal lasts ({renewal_s:g} s): a long run's message would come back while it runs; "
                f"{_renewal_fix(_timeout_field(job_type), config.engine, [job_type])}"
            )
        _check_glue_concurrency(config.infra, job_type)
    check_admission(config, catalog)


def _check_glue_concurrency(infra: InfraSettings, job_type: JobType) -> None:
    """A Glue type's `max_concurrency` may not pass its Glue job's `max_concurrent_runs`. The job queues the
    runs past that limit (job run queuing: the run waits, WAITING,
    https://docs.aws.amazon.com/glue/latest/dg/job-run-statuses.html), so the executions admitted beyond it
    would each hold a message and a slot until their step timed out (JobTimedOut), without having run."""
    if job_type.runner != "pyspark" or job_type.platform != "glue" or job_type.max_concurrency is None:
        return
    runs = infra.glue_of(job_type).max_concurrent_runs or 1
    if job_type.max_concurrency > runs:
        own = job_type.glue is not None and job_type.glue.max_concurrent_runs is not None
        source = "its glue.max_concurrent_runs" if own else "the context setting glue_max_concurrent_runs"
        raise ConfigError(
            f"invalid job type {job_type.name!r}: max_concurrency={job_type.max_concurrency} is more than its Glue "
            f"job's max_concurrent_runs={runs} ({source}): the executions past {runs} would wait in Glue's queue "
            f"until their step timed out, without running; lower max_concurrency to {runs} or less, or raise "
            f"{source.removeprefix('its ').removeprefix('the context setting ')}"
        )


def _timeout_field(job_type: JobType) -> str:
    """What sets the type's run timeout: its declaration's field, or for a Glue type that declares none, the
    context setting `glue_timeout_minutes`, which a deployer lowers instead."""
    if job_type.runner == "pyspark" and job_type.platform == "glue":
        own = job_type.glue is not None and job_type.glue.timeout_minutes is not None
        return "glue.timeout_minutes" if own else "glue_timeout_minutes"
    if job_type.runner == "state_machine":
        return "state_machine.timeout_minutes"
    return "emr_serverless.timeout_minutes" if job_type.platform == "emr_serverless" else "glue.timeout_minutes"


def check_region(config: StackConfig, catalog: JobCatalog, region: str) -> None:
    """The settings that name a resource of one region, or a feature some regions lack, against the stack's
    `region`: each would otherwise fail the deploy, or every run, naming no setting."""
    if config.infra.snapstart and region in SNAPSTART_UNAVAILABLE_REGIONS:
        raise ConfigError(f"snapstart: Lambda SnapStart is not offered in {region}; leave snapstart off there")
    key = config.infra.kms_key
    if key not in (None, CREATE_KEY) and (key_region := key.split(":")[3]) != region:
        raise ConfigError(
            f"kms_key: the key is in region {key_region}, the processor's stack in {region}: SQS, DynamoDB, "
            f"CloudWatch Logs and the other services it encrypts use a key of their own region only; give a "
            f"key of {region} (a multi-Region key's replica there), or kms_key=create"
        )
    for job_type in catalog:
        arn = job_type.emr_serverless.application_arn if job_type.emr_serverless is not None else None
        if arn is not None and _EMR_ARN_REGION.match(arn) and (arn_region := arn.split(":")[3]) != region:
            raise ConfigError(
                f"job type {job_type.name!r}: emr_serverless.application_arn: the application is in region "
                f"{arn_region}, the processor's stack in {region}: the workflow starts its runs in its own "
                f"region; give an application of {region}, or leave application_arn out to have one created"
            )


def check_admission(config: StackConfig, catalog: JobCatalog) -> None:
    """A limited type's message may be admitted in place after waiting hidden on its receive for up to
    `longest_wait_s` (twice the horizon and a period): its run must still end before that receive's 12 h."""
    from longjobs.engine.admission.readings import WAIT_HORIZONS, longest_wait_s

    engine = config.engine
    hold_s = hold_limit(0.0, engine.cap_safety_s)
    for job_type in catalog.limited():
        run_s = (config.infra.run_timeout_minutes(job_type) or 0) * 60
        if longest_wait_s(engine) + run_s > hold_s:
            largest = math.floor((hold_s - engine.extender_period_s - run_s) / WAIT_HORIZONS)
            its_run = f", and its run may take {run_s} s" if run_s else ""
            smallest = _smallest_horizon_s(engine)
            fits = _admitted_run_minutes(engine)  # the run's minutes, with this horizon
            if largest >= smallest:
                fix = f"lower admission_horizon_s to {largest} or less"
            elif fits > 0:  # no horizon the settings take fits beside this run: only a shorter run does
                fix = f"lower {_timeout_field(job_type)} to {fits} or less"
            else:
                shortest = longest_wait_s(engine.model_copy(update={"admission_horizon_s": smallest}))
                fix = (
                    f"lower admission_horizon_s to {smallest} and {_timeout_field(job_type)} to "
                    f"{math.floor((hold_s - shortest) / 60)} or less"
                )
            raise ConfigError(
                f"invalid CDK context: admission_horizon_s={engine.admission_horizon_s}: a {job_type.name!r} message "
                f"may wait hidden {longest_wait_s(engine):g} s on its receive before it runs{its_run}: more than "
                f"SQS's 12 h hold allows ({hold_s:g} s); {fix}"
            )


def _smallest_horizon_s(engine: Settings) -> int:
    """The smallest `admission_horizon_s` the settings take: the field's own bound, and no less than
    `admission_wait_base_s` (a waiting message's shortest delay)."""
    bounds = [getattr(rule, "ge", 0) for rule in Settings.model_fields["admission_horizon_s"].metadata]
    return max([*bounds, engine.admission_wait_base_s])


def _check_fifo(infra: InfraSettings, engine: Settings) -> None:
    if not engine.fifo:
        return
    if infra.s3_notifications:
        raise ConfigError(
            "invalid CDK context: s3_notifications=true with fifo=true: S3 event notifications cannot be sent to a "
            "FIFO queue; leave s3_notifications off, or deliver S3 events through EventBridge to the queue with a "
            "message group id"
        )
    batch = infra.receiver_batch_size
    if "receiver_batch_size" in infra.model_fields_set and batch != FIFO_BATCH_SIZE:
        raise ConfigError(
            f"invalid CDK context: receiver_batch_size={batch} with fifo=true: on FIFO a record received behind its "
            "group's running or retried job is skipped and still counts a receive, so every retry of a failing job "
            "would spend a receive of each job queued behind it and take them to the DLQ unrun; on FIFO the batch "
            f"size is {FIFO_BATCH_SIZE} (groups run side by side through receiver_max_concurrency): leave "
            "receiver_batch_size unset"
        )


def _check_together(infra: InfraSettings, engine: Settings, catalog: JobCatalog | None = None) -> None:
    _check_fifo(infra, engine)
    vt, timeout = infra.queue_visibility_timeout_s, infra.receiver_timeout_s
    if vt < timeout:
        raise ConfigError(
            f"invalid CDK context: queue_visibility_timeout_s={vt} must be >= receiver_timeout_s={timeout}: "
            "Lambda refuses an event source mapping whose queue hides a message for less than the function may run"
        )
    margin, needed = engine.retention_margin_s, vt + timeout
    if margin < needed:
        raise ConfigError(
            f"invalid CDK context: queue_retention_s={engine.queue_retention_s} sends a waiting message afresh "
            f"{margin:g} s before SQS deletes it, less than a failed receive of it takes to show it again "
            f"(queue_visibility_timeout_s={vt} + receiver_timeout_s={timeout:g}): it would be deleted unseen; "
            f"raise queue_retention_s to at least {4 * needed:g}"
        )
    if engine.policy == "remaining" and engine.visibility_timeout_s is None:
        # The functions will read the queue's VT (resolve_visibility_timeout): check the policy against this one.
        try:
            engine.with_visibility_timeout(vt)
        except SettingsError as exc:
            raise ConfigError(
                f"invalid CDK context: with the queue's VT (queue_visibility_timeout_s={vt}), "
                + str(exc).removeprefix("invalid settings: ")
            ) from None
    _check_extender_window(engine)
    run_s = infra.glue_timeout_minutes * 60
    renewal_s = engine.renewal_s
    if run_s > renewal_s:
        raise ConfigError(
            f"invalid CDK context: glue_timeout_minutes={infra.glue_timeout_minutes} ({run_s} s) is longer than "
            f"renewal lasts ({renewal_s:g} s: max_renewal_s, at most 12 h less cap_safety_s), so a long run's "
            f"message would come back while it runs; "
            f"{_renewal_fix('glue_timeout_minutes', engine, _context_timed(infra, catalog))}"
        )


def _renewal_fix(field: str, engine: Settings, job_types: Iterable[JobType] = ()) -> str:
    """What to change when a run's timeout `field` outlasts renewal: the longest timeout that fits, and
    raising max_renewal_s only when that would lengthen renewal (below SQS's 12 h less cap_safety_s).
    For a limited type among `job_types` (the types `field` times), the timeout named also fits after
    the longest wait admission may give its message (`check_admission`), so one change is enough."""
    minutes = int(engine.renewal_s // 60)
    fits = [_admitted_run_minutes(engine) for job_type in job_types if _admitted(job_type)]
    shorter = min((m for m in fits if 0 < m < minutes), default=None)
    if shorter is not None:
        return (
            f"lower {field} to {shorter} or less (a limited type's message may first wait hidden "
            f"{_longest_wait_s(engine):g} s for a slot, and its run must end within SQS's 12 h hold)"
        )
    fix = f"lower {field} to {minutes} or less"
    if engine.renewal_raisable:
        fix += ", or raise max_renewal_s"
    return fix


def _admitted(job_type: JobType) -> bool:
    """Whether admission limits the type: it declares a limit, or it runs on Glue, whose job's
    `max_concurrent_runs` (the context's `glue_max_concurrent_runs` unless declared) is its limit."""
    return job_type.concurrency_limit is not None or (job_type.runner == "pyspark" and job_type.platform == "glue")


def _context_timed(infra: InfraSettings, catalog: JobCatalog | None) -> list[JobType]:
    """The Glue types whose run timeout is the context's `glue_timeout_minutes` (they declare none)."""
    return [t for t in catalog or () if _timeout_field(t) == "glue_timeout_minutes"]


def _longest_wait_s(engine: Settings) -> float:
    from longjobs.engine.admission.readings import longest_wait_s

    return longest_wait_s(engine)


def _admitted_run_minutes(engine: Settings) -> int:
    """The longest run, in whole minutes, that still ends within SQS's 12 h hold after a limited type's
    message waited hidden as long as admission may keep it (0 or less: none does)."""
    return math.floor((hold_limit(0.0, engine.cap_safety_s) - _longest_wait_s(engine)) / 60)


def _check_extender_window(engine: Settings) -> None:
    """An extender invocation runs until its period ends or its timeout less `invocation_margin_s` does. A
    margin that leaves less than the period ends every invocation early: the sub-minute policies' ticks stop
    before the next scheduled run, and reconciliation and admission, which begin nothing past the deadline,
    get little time or none."""
    window_s = EXTENDER_TIMEOUT_S - engine.invocation_margin_s
    if window_s < engine.extender_period_s:
        raise ConfigError(
            f"invalid CDK context: invocation_margin_s={engine.invocation_margin_s:g} leaves the extender less than "
            f"its {engine.extender_period_s:g} s period: an invocation stops at its {EXTENDER_TIMEOUT_S:g} s timeout "
            "less the margin, so renewal ticks, reconciliation and admission would stop before the next run; set "
            f"invocation_margin_s to {EXTENDER_TIMEOUT_S - engine.extender_period_s:g} or less"
        )
