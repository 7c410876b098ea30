"""The engine's settings: one validated model, refused at start-up when it could lapse by construction.

Every field maps to an environment variable of the same name in upper case (`VISIBILITY_TIMEOUT_S`),
so a function reads its settings with `Settings.from_env()` and fails its cold start, not its first
renewal, when a value is wrong. (pydantic-settings would do the env mapping, but it is not in the
Powertools layer and this asset ships no dependencies of its own.)
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

SQS_MAX_VISIBILITY_S = 43_200
"""SQS keeps a received message hidden for at most 12 hours from its receive."""

PolicyName = Literal["adaptive", "remaining", "threshold"]

POLICY_DEFAULT_MAX_RENEWAL_S: dict[str, int] = {
    "remaining": 300,  # seed 000: renewal stops after 5 minutes unless configured
    "threshold": SQS_MAX_VISIBILITY_S,
    "adaptive": SQS_MAX_VISIBILITY_S,
}


class SettingsError(ValueError):
    """A setting is out of range or the combination could let a message lapse."""


class Settings(BaseModel):
    """Renewal policy, timing and resources of the lease engine, validated together."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: PolicyName = "adaptive"
    visibility_timeout_s: int | None = Field(
        default=None,
        ge=0,
        le=SQS_MAX_VISIBILITY_S,
        description="VT a renewal asks for (remaining/threshold); None reads the queue's attribute.",
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

    table_name: str | None = None
    queue_url: str | None = None
    shards: int = Field(default=8, ge=1, le=64, description="Partitions of the due-index.")
    closed_ttl_s: int = Field(default=7 * 86_400, gt=0, description="How long closed leases are kept.")
    max_workers: int = Field(default=16, ge=1, le=64, description="Parallel AWS calls (the client pool holds 64).")

    retry_base_s: float = Field(default=0.2, gt=0)
    retry_cap_s: float = Field(default=5.0, gt=0)
    invocation_margin_s: float = Field(default=2.0, ge=0, description="Kept free before the Lambda timeout.")

    state_machine_arn: str | None = None
    dlq_url: str | None = None
    max_receive_count: int = Field(
        default=5, ge=1, le=1_000, description="Receives before SQS moves a message to the DLQ (queue redrive)."
    )
    max_body_bytes: int = Field(
        default=65_536, ge=1, le=1_048_576, description="Largest job message the receiver accepts (UTF-8 bytes)."
    )
    release_delay_base_s: float = Field(
        default=30.0, ge=0, description="Delay before a failed job's message returns, after its first receive."
    )
    release_delay_cap_s: int = Field(
        default=900, ge=0, le=SQS_MAX_VISIBILITY_S, description="Longest release delay (it doubles per receive)."
    )
    spark_output_uri: str | None = Field(
        default=None, description="Curated output of Spark jobs that name none (S3 notifications never do)."
    )
    spark_quarantine_uri: str | None = Field(default=None, description="Quarantine output, likewise.")

    reconcile_grace_s: float = Field(
        default=120.0, ge=0, description="Leases younger than this are not reconciled (receiver may be mid-way)."
    )
    reconcile_max_per_run: int = Field(default=100, ge=0)
    reconcile_rate_per_s: float = Field(default=10.0, gt=0, description="DescribeExecution calls per second.")

    @property
    def effective_max_renewal_s(self) -> int:
        if self.max_renewal_s is not None:
            return self.max_renewal_s
        return POLICY_DEFAULT_MAX_RENEWAL_S[self.policy]

    @property
    def renewal_enabled(self) -> bool:
        return self.effective_max_renewal_s > 0

    @property
    def tick_s(self) -> float:
        """How often leases are looked at: the schedule for adaptive, the heartbeat for the others."""
        if self.policy == "adaptive":
            return self.extender_period_s
        return min(self.heartbeat_s, self.extender_period_s)

    @property
    def adaptive_lead_s(self) -> float:
        """Renew this long before visible: the worst gap between two extender runs when
        `adaptive_lost_runs_survived` runs in a row are lost and the next is late by a full period, plus
        the time a call needs to land. Runs are lost independently, so one lost run alone is too few:
        at one in 20, two or three in a row turn up within a day."""
        return (self.adaptive_lost_runs_survived + 2) * self.extender_period_s + self.min_remaining_life_s

    @property
    def adaptive_floor_s(self) -> int:
        """The shortest adaptive chunk: the lead plus two periods, so a lease is not due every run."""
        return math.ceil(self.adaptive_lead_s + 2 * self.extender_period_s)

    def renew_until(self, received_at: float) -> float:
        """The hard stop of one receive: max renewal, and never past SQS's 12 h limit (less a margin)."""
        return received_at + min(self.effective_max_renewal_s, SQS_MAX_VISIBILITY_S - self.cap_safety_s)

    def with_visibility_timeout(self, seconds: int) -> Settings:
        """A copy with the queue's VT filled in, validated again (the lapse rules depend on it)."""
        return self.load({**self.model_dump(), "visibility_timeout_s": seconds})

    @model_validator(mode="after")
    def _refuse_lapse_by_construction(self) -> Settings:
        if self.retry_cap_s < self.retry_base_s:
            raise ValueError(f"retry_cap_s={self.retry_cap_s} must be >= retry_base_s={self.retry_base_s}")
        if self.release_delay_cap_s < self.release_delay_base_s:
            raise ValueError(
                f"release_delay_cap_s={self.release_delay_cap_s} must be >= "
                f"release_delay_base_s={self.release_delay_base_s:g}"
            )
        if not self.renewal_enabled:
            return self
        if self.policy == "adaptive":
            self._check_adaptive()
        elif self.visibility_timeout_s is not None:
            self._check_fixed_timeout(self.visibility_timeout_s)
        return self

    def _check_adaptive(self) -> None:
        floor = self.adaptive_floor_s
        if self.adaptive_ceiling_s < floor:
            raise ValueError(
                f"adaptive_ceiling_s={self.adaptive_ceiling_s} is below {floor} s, the shortest chunk that "
                f"survives {self.adaptive_lost_runs_survived} lost extender runs at "
                f"extender_period_s={self.extender_period_s:g}; "
                f"valid range: {floor}..{SQS_MAX_VISIBILITY_S - self.cap_safety_s}"
            )
        if self.adaptive_ceiling_s > SQS_MAX_VISIBILITY_S - self.cap_safety_s:
            raise ValueError(
                f"adaptive_ceiling_s={self.adaptive_ceiling_s} exceeds the 12 h limit less cap_safety_s; "
                f"valid range: {floor}..{SQS_MAX_VISIBILITY_S - self.cap_safety_s}"
            )

    def _check_fixed_timeout(self, vt: int) -> None:
        # Seed 004's rule: the timeout must outlast one tick plus the minimal remaining life.
        need = self.tick_s + self.min_remaining_life_s
        if vt <= need:
            raise ValueError(
                f"visibility_timeout_s={vt} must be greater than tick ({self.tick_s:g} s) + "
                f"min_remaining_life_s ({self.min_remaining_life_s:g} s) = {need:g} s, or the message "
                f"becomes visible before the next renewal; valid range: > {need:g} and <= {SQS_MAX_VISIBILITY_S}"
            )
        lead = self.threshold_s if self.policy == "threshold" else min(vt / 2, 10.0)
        name = "threshold_s" if self.policy == "threshold" else "visibility_timeout_s/2 (capped at 10 s)"
        if lead <= need:
            raise ValueError(
                f"{name}={lead:g} is when the {self.policy} policy renews; it must be greater than tick "
                f"({self.tick_s:g} s) + min_remaining_life_s ({self.min_remaining_life_s:g} s) = {need:g} s"
            )
        if self.policy == "threshold" and vt <= self.threshold_s:
            raise ValueError(
                f"visibility_timeout_s={vt} must be greater than threshold_s={self.threshold_s:g}, "
                "or every renewal is due again at once"
            )

    @classmethod
    def load(cls, values: Mapping[str, Any]) -> Settings:
        """Validate `values`, turning pydantic's report into one `SettingsError` naming each bad setting."""
        try:
            return cls.model_validate(dict(values))
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                where = ".".join(str(p) for p in err["loc"]) or "settings"
                problems.append(f"{where}: {err['msg']}")
            raise SettingsError("invalid settings: " + "; ".join(problems)) from None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read every field from its upper-case environment variable, where set."""
        env = os.environ if environ is None else environ
        values = {name: env[name.upper()] for name in cls.model_fields if name.upper() in env}
        return cls.load(values)


def resolve_settings(settings: Settings, sqs: SQSClient) -> Settings:
    """Fill in the VT from the queue's attribute when a fixed-VT policy needs it and none is set."""
    if settings.policy == "adaptive" or settings.visibility_timeout_s is not None:
        return settings
    if not settings.queue_url:
        raise SettingsError(
            f"queue_url (QUEUE_URL) is required: the {settings.policy} policy reads the queue's VisibilityTimeout "
            "when visibility_timeout_s is unset"
        )
    attributes = sqs.get_queue_attributes(QueueUrl=settings.queue_url, AttributeNames=["VisibilityTimeout"])
    return settings.with_visibility_timeout(int(attributes["Attributes"]["VisibilityTimeout"]))
