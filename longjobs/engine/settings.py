"""The engine's settings: one validated model, refused at start-up when it could lapse by construction.

Every field maps to an environment variable of the same name in upper case (`VISIBILITY_TIMEOUT_S`),
so a function reads its settings with `Settings.from_env()` and fails its cold start, not its first
renewal, when a value is wrong. (pydantic-settings would do the env mapping, but it is not in the
Powertools layer and this asset ships no dependencies of its own.)
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from collections.abc import Collection, Mapping
from functools import cached_property
from typing import Any, Literal, Self, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from longjobs.engine.exceptions import SettingsError
from longjobs.engine.policies import POLICIES, SQS_MAX_VISIBILITY_S, hold_limit

__all__ = [
    "FIFO_BATCH_SIZE",
    "FIFO_SUFFIX",
    "SQS_MAX_VISIBILITY_S",
    "PolicyName",
    "Settings",
    "SettingsError",
    "is_fifo_url",
    "number_not_boolean",
    "shown",
    "unknown_settings",
]

PolicyName = Literal["adaptive", "remaining", "threshold"]
MAX_DELAY_S = 900
"""SQS's longest message delay (`DelaySeconds`)."""
LAMBDA_MAX_TIMEOUT_S = 900.0
"""The longest any Lambda invocation runs."""
EXTENDER_TIMEOUT_S = 90.0
"""The extender function's timeout: a run stops itself after one period (`run_invocation`); the rest is
margin for the last pass. The longest of the functions that run an admission pass (the watcher's is 30 s)."""
MAX_SHARDS = 64
"""The most shards the due and reconcile indexes may be split into (`shards`, `previous_shards`)."""
MESSAGE_MAX_BYTES = 262_144
"""The largest message the processor's queues take (`MaximumMessageSize`, set on each by the stack and the
offline runtime: SQS's long-standing default, whatever a new queue's default becomes): the body and each
attribute's name, type and value count
(https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html)."""
MERGED_SETTINGS = {"max_receive_count": "max_attempts"}
"""Retired setting names, each with the setting that carries its meaning: one meaning has one name."""
SQS_MAX_RETENTION_S = 14 * 86_400
"""The longest SQS keeps a message (14 days), and how long the stack's queues keep them by default."""
SQS_MIN_RETENTION_S = 60
"""The shortest retention SQS allows (`MessageRetentionPeriod`)."""
RETENTION_MARGIN_S = 2 * 86_400
"""A message that waits is sent again (a fresh copy, its retention counted anew) this long before its
retention runs out, or a quarter of the retention when that is shorter: time for the admission passes
and receives that do it to come round, however late."""
MAX_REDRIVE_RECEIVES = 1_000
"""SQS's largest redrive `maxReceiveCount`."""
FAULT_RECEIVES = 2
"""Receives an attempt may lose to a receiver that failed its record (a crash, a throttled call)."""
FIFO_SUFFIX = ".fifo"
"""The name (and URL) of every FIFO queue ends with it, and no other queue's does."""
MAX_BATCH_SIZE = 10
"""The largest batch the stack's event source mapping sends (`receiver_batch_size`, no batching window)."""
FIFO_BATCH_SIZE = 1
"""The event source mapping's batch size on a FIFO queue. A record received behind its group's running
or retried job is skipped and still counts a receive, so with larger batches every retry of a group's
head would spend a receive of each job queued behind it, and a failing job would take them to the DLQ
unrun. One record per invocation receives only groups' heads; groups run side by side through the
mapping's concurrency."""
EXECUTION_INPUT_MAX_BYTES = 262_144
"""Step Functions' largest execution input, UTF-8 bytes
(https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html)."""
BODY_MAX_BYTES = EXECUTION_INPUT_MAX_BYTES - 16_384
"""The largest `max_body_bytes`: the job travels in its execution's input, beside the message's id, queue URL
and slot and its type's defaults, which 16 KiB leaves room for."""


def is_fifo_url(url: str) -> bool:
    """Whether a queue URL names a FIFO queue."""
    return url.rstrip("/").endswith(FIFO_SUFFIX)


def unknown_settings(keys: Mapping[str, str], known: Collection[str]) -> list[str]:
    """Each key of `keys` (mapped to the name it is reported by) that is not in `known`, as `name: no such
    setting`, with the nearest known name: a misspelt key would otherwise leave its setting at the default."""
    problems = []
    for key, shown in sorted(keys.items()):
        if key not in known:
            snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key).lower()  # `receiverTimeoutS` -> receiver_timeout_s
            nearest = difflib.get_close_matches(snake, known, n=1)
            problems.append(f"{shown}: no such setting" + (f" (did you mean {nearest[0]}?)" if nearest else ""))
    return problems


def number_not_boolean(model: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
    """`value`, refused when it is true or false and the field is a number. Pydantic's lax mode reads a
    boolean as 1 or 0, so `"receiver_timeout_s": true` in cdk.json would deploy a 1 s timeout; its strict
    mode would also refuse the strings `cdk deploy -c key=value` passes, so this check is kept. A field
    validator, so each such field is named beside the model's other errors."""
    field = model.model_fields.get(info.field_name or "")
    if isinstance(value, bool) and field is not None and _numeric(field.annotation):
        raise ValueError("a number is needed, not a boolean")
    return value


def shown(value: Any) -> str:
    """A setting's value as an error shows it: `true`, `false` and `null` as JSON (cdk.json) writes them,
    anything else as Python's `repr` (a string in quotes, so `'60'` from `-c` differs from `60`)."""
    return json.dumps(value) if value is None or isinstance(value, bool) else repr(value)


def _numeric(annotation: Any) -> bool:
    """Whether a field's type is a number, or a number or None."""
    return annotation in (int, float) or bool(set(get_args(annotation)) & {int, float})


ADMISSION_PASS_RUNS = 4
ADMISSION_PASS_MAX_S = 240.0
"""The extender's admission pass runs every `ADMISSION_PASS_RUNS` of its runs by default, but at least every
`ADMISSION_PASS_MAX_S` (and at most every run): 4 minutes at the default period, so each 5-minute period of
the dashboard's admission metrics (and of the backlog alarm) gets a datapoint, and three runs of four skip
the reads it makes (the slots, their holders' leases, the line's length, the waiting queue's depth)."""


class Settings(BaseModel):
    """Renewal policy, timing and resources of the lease engine, validated together."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: PolicyName = "adaptive"
    visibility_timeout_s: int | None = Field(
        default=None,
        ge=0,
        le=SQS_MAX_VISIBILITY_S,
        description="VT a renewal asks for: remaining reads the queue's when None, threshold takes 30 s.",
    )
    max_renewal_s: int | None = Field(
        default=None,
        ge=0,
        le=SQS_MAX_VISIBILITY_S,
        description="Stop renewing this long after the receive; 0 disables renewal; None: the policy's default.",
    )
    extender_period_s: float = Field(default=60.0, gt=0, description="Schedule of the extender function.")
    heartbeat_s: float = Field(
        default=1.0, gt=0, description="Tick inside one extender invocation for the sub-minute policies."
    )
    threshold_s: float = Field(default=5.0, gt=0, description="threshold policy: renew this close to visible.")
    min_remaining_life_s: float = Field(
        default=0.5, ge=0, description="Time a renewal call needs to land before the message shows again."
    )
    adaptive_ceiling_s: int = Field(
        default=900,
        gt=0,
        le=SQS_MAX_VISIBILITY_S,
        description="adaptive policy: the longest chunk, so a silently dead job returns within it.",
    )
    adaptive_lost_runs_survived: int = Field(
        default=3,
        ge=1,
        le=10,
        description="adaptive policy: consecutive lost scheduled runs (after one a full period late) survived.",
    )
    cap_safety_s: int = Field(default=60, ge=0, le=3_600, description="Margin kept below the 12 h limit.")
    pass_budget_s: float | None = Field(
        default=None,
        gt=0,
        description="adaptive policy: time one extender pass may take; None: a quarter of the period, at most 15 s.",
    )

    table_name: str | None = None
    queue_url: str | None = None
    shards: int = Field(
        default=1,
        ge=1,
        le=MAX_SHARDS,
        description="Partitions of the due and reconcile indexes: one takes ~1,000 lease writes a second.",
    )
    previous_shards: int = Field(
        default=8,
        ge=1,
        le=MAX_SHARDS,
        description="The shards count before `shards` was lowered (8: the old default): the extender watches "
        'the shards from `shards` up to it until no lease is left on them (the log says "legacy shards '
        'empty"); set it to your old count if it was above 8, and to `shards` once they are empty.',
    )
    closed_ttl_s: int = Field(
        default=7 * 86_400,
        ge=3_600,
        description="How long closed leases are kept (at least an hour: a parked or requeued copy's claim is "
        "judged by whether its claimant's lease is still there, up to 15 minutes after the claim).",
    )
    max_workers: int = Field(default=16, ge=1, le=64, description="Parallel AWS calls (the client pool holds 64).")

    retry_base_s: float = Field(default=0.2, gt=0)
    retry_cap_s: float = Field(default=5.0, gt=0)
    invocation_margin_s: float = Field(default=2.0, ge=0, description="Kept free before the Lambda timeout.")

    state_machine_arn: str | None = None
    dlq_url: str | None = None
    waiting_queues: str | None = Field(
        default=None,
        description='Admission: each limited job type\'s waiting queue, as JSON {"<type>": "<queue url>"} '
        "(set by the stack and the offline runtime); a type without one waits in flight only.",
    )
    job_runs: str | None = Field(
        default=None,
        description="Where each pyspark type's runs can be asked whether they ended, as JSON "
        '{"<type>": {"emr_application": "<id>"} | {"glue_job": "<name>"} | {"worker_heartbeat_s": <s>}} '
        "(set by the stack and the offline runtime): a new attempt waits for its job's previous run to end.",
    )
    queue_retention_s: int = Field(
        default=SQS_MAX_RETENTION_S,
        ge=SQS_MIN_RETENTION_S,
        le=SQS_MAX_RETENTION_S,
        description="How long the jobs queue and the waiting queues keep a message (SQS counts it from the send, "
        "received or not): a message waiting for a slot is sent again before it runs out.",
    )
    max_attempts: int = Field(
        default=5,
        ge=1,
        le=100,
        description="Failed execution attempts after which the processor sends the message to the DLQ. "
        "Waiting for a slot is no attempt.",
    )
    max_refused_starts: int = Field(
        default=20,
        ge=1,
        le=500,
        description="Starts Step Functions refused (the execution never existed: a throttled burst) after which "
        "the processor sends the message to the DLQ as StartsRefused; counted apart from max_attempts.",
    )
    admission_pass_interval_s: float | None = Field(
        default=None,
        gt=0,
        le=3_600,
        description="Admission: how often the extender's pass over the limited types runs (stale slots freed, "
        "the line in flight topped up to the horizon, the backlog measured); the watcher admits on every end. "
        "Default: every fourth run, at least every 240 s, at most every run.",
    )
    admission_horizon_s: int = Field(
        default=3_600,
        ge=60,
        le=6 * 3_600,
        description="Admission: a message waits for a slot in flight on its queue only when it can be expected "
        "to run within this long; later work is parked in the type's waiting queue, unreceived.",
    )
    admission_wait_base_s: int = Field(
        default=30,
        ge=1,
        le=900,
        description="Admission: the shortest delay of a message waiting for a slot (doubling with its waits).",
    )
    max_body_bytes: int = Field(
        default=65_536,
        ge=1,
        le=BODY_MAX_BYTES,
        description="Largest job message the receiver accepts (UTF-8 bytes); at most 240 KiB, for the execution's "
        "input (256 KiB).",
    )
    release_delay_base_s: float = Field(
        default=30.0, ge=0, description="Delay before a failed job's message returns, after its first receive."
    )
    release_delay_cap_s: int = Field(
        default=900, ge=0, le=SQS_MAX_VISIBILITY_S, description="Longest release delay (it doubles per receive)."
    )
    curated_uri: str | None = Field(
        default=None,
        description="The curated bucket (s3://bucket/): `{curated}` in a job type's defaults (spark's output).",
    )
    quarantine_uri: str | None = Field(default=None, description="The quarantine bucket: `{quarantine}`, likewise.")
    raw_uri: str | None = Field(default=None, description="The raw bucket: `{raw}`, likewise.")
    job_wait_base_s: int = Field(
        default=30,
        ge=0,
        le=MAX_DELAY_S,
        description="A job whose job id is running waits this long before it tries again (doubling per wait).",
    )
    job_wait_cap_s: int = Field(
        default=MAX_DELAY_S, ge=0, le=MAX_DELAY_S, description="Longest such wait (SQS delays at most 15 minutes)."
    )
    fifo: bool = Field(
        default=False,
        description="The jobs queue (and its DLQ) is FIFO: jobs run in order per message group (URLs end in .fifo).",
    )
    fifo_release_delay_s: int = Field(
        default=0,
        ge=0,
        le=SQS_MAX_VISIBILITY_S,
        description="FIFO: a failed job's message returns after this delay, which holds its group meanwhile "
        "(instead of the growing release delay of a standard queue).",
    )

    receiver_timeout_s: float = Field(
        default=30.0, gt=0, le=900, description="The receiver function's timeout: after it, an invocation is dead."
    )
    reconcile_grace_s: float = Field(
        default=120.0,
        ge=0,
        description="Leases younger than this are not reconciled: must outlast the receiver's timeout.",
    )
    reconcile_interval_s: float = Field(
        default=600.0,
        ge=0,
        description="A lease reconciliation has looked at is not looked at again for this long: the watcher's "
        "status events settle ended executions at once, reconciliation is the backstop for a lost one.",
    )
    reconcile_max_per_run: int = Field(default=100, ge=0)
    reconcile_rate_per_s: float = Field(default=10.0, gt=0, description="DescribeExecution calls per second.")

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy, as pydantic makes it, without the derived values computed on this one (the
        `cached_property` values below): pydantic copies them as they are, stale once `update` changes
        a setting they derive from (pydantic issue 11428)."""
        copy = super().model_copy(update=update, deep=deep)
        for cls in type(self).__mro__:  # a subclass's copy too: `vars` of its own class holds none of these
            for name, value in vars(cls).items():
                if isinstance(value, cached_property):
                    copy.__dict__.pop(name, None)
        return copy

    @cached_property
    def effective_max_renewal_s(self) -> int:
        if self.max_renewal_s is not None:
            return self.max_renewal_s
        return POLICIES[self.policy].default_max_renewal_s

    @property
    def waiting_queue_urls(self) -> dict[str, str]:
        """`waiting_queues` decoded: job type -> its waiting queue's URL."""
        if not self.waiting_queues:
            return {}
        decoded = json.loads(self.waiting_queues)
        return {str(k): str(v) for k, v in decoded.items()}

    @property
    def effective_admission_pass_interval_s(self) -> float:
        if self.admission_pass_interval_s is not None:
            return self.admission_pass_interval_s
        period = self.extender_period_s
        return max(period, min(ADMISSION_PASS_RUNS * period, ADMISSION_PASS_MAX_S))

    @cached_property
    def locations(self) -> dict[str, str | None]:
        """The bucket URIs a job type's defaults may name (`{curated}`, `{quarantine}`, `{raw}`)."""
        return {"curated": self.curated_uri, "quarantine": self.quarantine_uri, "raw": self.raw_uri}

    @property
    def legacy_shards(self) -> range:
        """Shards a lease written before `shards` was lowered may still be on: [shards, previous_shards)."""
        return range(self.shards, max(self.shards, self.previous_shards))

    @cached_property
    def renewal_enabled(self) -> bool:
        return self.effective_max_renewal_s > 0

    @property
    def tick_s(self) -> float:
        """How often leases are looked at: the schedule for adaptive, the heartbeat for the others."""
        return POLICIES[self.policy].tick_s(self)

    @cached_property
    def renewal_s(self) -> float:
        """How long renewal lasts from a receive: `max_renewal_s`, and never past SQS's 12 h limit less
        `cap_safety_s`. A receive at `t` has its hard stop (`Lease.renew_until`) at `t + renewal_s`."""
        return min(float(self.effective_max_renewal_s), hold_limit(0.0, self.cap_safety_s))

    @cached_property
    def renewal_raisable(self) -> bool:
        """Whether raising `max_renewal_s` would lengthen renewal: it is below SQS's 12 h less `cap_safety_s`."""
        return self.effective_max_renewal_s < hold_limit(0.0, self.cap_safety_s)

    @cached_property
    def retention_margin_s(self) -> float:
        """How long before its retention runs out a waiting message is sent again (`RETENTION_MARGIN_S`)."""
        return min(RETENTION_MARGIN_S, self.queue_retention_s / 4)

    @cached_property
    def resend_after_s(self) -> float:
        """How long after it was sent a message that still waits must be sent again: its retention less the
        margin. Until then it may wait hidden; from then on it is copied afresh."""
        return self.queue_retention_s - self.retention_margin_s

    def redrive_max_receives(self, retention_s: float) -> int:
        """The queue's redrive `maxReceiveCount`: a backstop the processor's own accounting never reaches.

        A message is received once per attempt (`max_attempts`), once per start refused
        (`max_refused_starts`), and once more when the processor sends it to the DLQ; each attempt may
        lose `FAULT_RECEIVES` more to a receiver that failed the record.
        While it waits for a slot in flight it is received again at most `doublings` times while its
        delay doubles from `admission_wait_base_s` to `admission_horizon_s`, then once per horizon for as
        long as it can wait at all: the queue's retention. SQS allows at most 1,000.
        """
        horizon = self.admission_horizon_s
        doublings = math.ceil(math.log2(horizon / self.admission_wait_base_s))
        waits = doublings + math.ceil(retention_s / horizon)
        attempts = self.max_attempts * (1 + FAULT_RECEIVES) + self.max_refused_starts + 1
        return min(MAX_REDRIVE_RECEIVES, attempts + waits)

    @cached_property
    def redrive_receives(self) -> int:
        """The jobs queue's redrive `maxReceiveCount`: `redrive_max_receives` of its own retention."""
        return self.redrive_max_receives(self.queue_retention_s)

    def with_visibility_timeout(self, seconds: int) -> Settings:
        """A copy with the queue's VT filled in, validated again (the lapse rules depend on it)."""
        return self.load({**self.model_dump(exclude_unset=True), "visibility_timeout_s": seconds})

    @model_validator(mode="before")
    @classmethod
    def _refuse_merged_names(cls, values: Any) -> Any:
        """A retired setting name is refused with the name to set instead."""
        if isinstance(values, Mapping):
            for old, new in MERGED_SETTINGS.items():
                if old in values:
                    raise ValueError(f"{old} is merged into {new}: set {new}")
        return values

    @field_validator("*", mode="before")
    @classmethod
    def _number_not_boolean(cls, value: Any, info: ValidationInfo) -> Any:
        return number_not_boolean(cls, value, info)

    @model_validator(mode="after")
    def _refuse_lapse_by_construction(self) -> Settings:
        if self.retry_cap_s < self.retry_base_s:
            raise ValueError(f"retry_cap_s={self.retry_cap_s} must be >= retry_base_s={self.retry_base_s}")
        if self.release_delay_cap_s < self.release_delay_base_s:
            raise ValueError(
                f"release_delay_cap_s={self.release_delay_cap_s} must be >= "
                f"release_delay_base_s={self.release_delay_base_s:g}"
            )
        if self.job_wait_cap_s < self.job_wait_base_s:
            raise ValueError(f"job_wait_cap_s={self.job_wait_cap_s} must be >= job_wait_base_s={self.job_wait_base_s}")
        if self.waiting_queues:
            try:
                decoded = json.loads(self.waiting_queues)
            except ValueError:
                decoded = None
            if not isinstance(decoded, dict) or not all(isinstance(v, str) for v in decoded.values()):
                raise ValueError('waiting_queues must be a JSON object {"<job type>": "<queue url>", ...}')
        if self.job_runs:
            from longjobs.engine.runs import parse_places  # with the logger it needs: only when set

            parse_places(self.job_runs)
        if self.admission_horizon_s < self.admission_wait_base_s:
            raise ValueError(
                f"admission_horizon_s={self.admission_horizon_s} must be >= admission_wait_base_s="
                f"{self.admission_wait_base_s}: a waiting message's shortest delay"
            )
        if self.reconcile_grace_s <= self.receiver_timeout_s:
            raise ValueError(
                f"reconcile_grace_s={self.reconcile_grace_s:g} must be greater than receiver_timeout_s="
                f"{self.receiver_timeout_s:g}: a younger lease may belong to a receiver that has not started its "
                f"execution yet; smallest safe reconcile_grace_s: {self.receiver_timeout_s + 1:g}"
            )
        if self.retention_margin_s < self.effective_max_renewal_s:
            raise ValueError(
                f"queue_retention_s={self.queue_retention_s} leaves a margin of {self.retention_margin_s:g} s after a "
                f"waiting message's resend time, less than max_renewal_s={self.effective_max_renewal_s}: a job "
                f"started just before it could outlive its message; smallest queue_retention_s: "
                f"{4 * self.effective_max_renewal_s}"
            )
        if self.renewal_enabled:
            POLICIES[self.policy].check(self)
        return self

    @model_validator(mode="after")
    def _queue_type_matches(self) -> Settings:
        """A FIFO queue needs the FIFO receiver (group order, group ids on every send), and a standard one
        must not get it: the queue URLs must say what `fifo` says. A FIFO queue's DLQ is FIFO too."""
        for name in ("queue_url", "dlq_url"):
            url = getattr(self, name)
            if url is None or is_fifo_url(url) == self.fifo:
                continue
            if self.fifo:
                raise ValueError(
                    f"{name}={url!r} is a standard queue but fifo is true: a FIFO processor needs FIFO queues "
                    f"(their names end in {FIFO_SUFFIX}); set FIFO=false, or deploy with the CDK context fifo=true"
                )
            raise ValueError(
                f"{name}={url!r} is a FIFO queue but fifo is false: set FIFO=true (the CDK context fifo=true), "
                "so the receiver keeps each message group's order and sends with group ids"
            )
        return self

    @classmethod
    def load(cls, values: Mapping[str, Any]) -> Settings:
        """Validate `values`, turning pydantic's report into one `SettingsError` naming each bad setting.
        A check across settings has no place of its own: its message names the settings it is about."""
        try:
            return cls.model_validate(dict(values))
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                where = ".".join(str(p) for p in err["loc"])
                message = err["msg"].removeprefix("Value error, ")
                if err["type"] == "extra_forbidden":
                    problems += unknown_settings({where: where}, list(cls.model_fields))
                else:
                    problems.append(f"{where}={shown(err['input'])}: {message}" if where else message)
            raise SettingsError("invalid settings: " + "; ".join(problems)) from None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read every field from its upper-case environment variable, where set."""
        env = os.environ if environ is None else environ
        values = {name: env[name.upper()] for name in cls.model_fields if name.upper() in env}
        return cls.load(values)
