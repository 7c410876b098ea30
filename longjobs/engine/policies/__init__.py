"""Renewal policies: strategy objects behind `RenewalPolicy`, with `adaptive` as the default.

Each policy class owns its defaults, its schedule (`tick_s`), the values it derives from the settings
and the check that refuses settings under which it would lapse; `POLICIES` names them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Self

from longjobs.engine.exceptions import SettingsError
from longjobs.engine.policies.adaptive import AdaptivePolicy
from longjobs.engine.policies.base import (
    KEEP,
    SQS_MAX_VISIBILITY_S,
    LeaseTiming,
    PolicyType,
    RenewalDecision,
    RenewalPolicy,
    TimingSettings,
    hold_limit,
)
from longjobs.engine.policies.remaining_time import RemainingTimePolicy
from longjobs.engine.policies.threshold import ThresholdPolicy

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = [
    "KEEP",
    "POLICIES",
    "SQS_MAX_VISIBILITY_S",
    "AdaptivePolicy",
    "LeaseTiming",
    "PolicyType",
    "RemainingTimePolicy",
    "RenewalDecision",
    "RenewalPolicy",
    "ThresholdPolicy",
    "build_policy",
    "hold_limit",
    "resolve_visibility_timeout",
]

POLICIES: dict[str, PolicyType] = {
    "adaptive": AdaptivePolicy,
    "remaining": RemainingTimePolicy,
    "threshold": ThresholdPolicy,
}


class NamedTimingSettings(TimingSettings, Protocol):
    @property
    def policy(self) -> str: ...
    @property
    def queue_url(self) -> str | None: ...
    def with_visibility_timeout(self, seconds: int) -> Self: ...


def build_policy(settings: NamedTimingSettings) -> RenewalPolicy:
    """The policy the settings name (the remaining policy needs the queue's VT resolved first)."""
    return POLICIES[settings.policy].from_settings(settings)


def resolve_visibility_timeout[S: NamedTimingSettings](settings: S, sqs: SQSClient) -> S:
    """Fill in the queue's `VisibilityTimeout` for the remaining policy when no VT is set (it renews by
    the queue's timeout), validated again since the lapse check depends on it."""
    if settings.policy != "remaining" or settings.visibility_timeout_s is not None:
        return settings
    if not settings.queue_url:
        raise SettingsError(
            "queue_url (QUEUE_URL) is required: the remaining policy reads the queue's VisibilityTimeout "
            "when visibility_timeout_s is unset"
        )
    attributes = sqs.get_queue_attributes(QueueUrl=settings.queue_url, AttributeNames=["VisibilityTimeout"])
    return settings.with_visibility_timeout(int(attributes["Attributes"]["VisibilityTimeout"]))
