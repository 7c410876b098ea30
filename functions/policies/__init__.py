"""Renewal policies: strategy objects behind `RenewalPolicy`, with `adaptive` as the default."""

from __future__ import annotations

from functions.policies.adaptive import AdaptivePolicy
from functions.policies.base import KEEP, LeaseTiming, RenewalDecision, RenewalPolicy
from functions.policies.remaining_time import RemainingTimePolicy
from functions.policies.threshold import ThresholdPolicy
from functions.settings import Settings, SettingsError

__all__ = [
    "KEEP",
    "AdaptivePolicy",
    "LeaseTiming",
    "RemainingTimePolicy",
    "RenewalDecision",
    "RenewalPolicy",
    "ThresholdPolicy",
    "build_policy",
]


def build_policy(settings: Settings) -> RenewalPolicy:
    """The policy the settings name. The fixed-VT policies need the VT resolved first."""
    if settings.policy == "adaptive":
        return AdaptivePolicy(
            lead_s=settings.adaptive_lead_s,
            floor_s=settings.adaptive_floor_s,
            ceiling_s=settings.adaptive_ceiling_s,
        )
    vt = settings.visibility_timeout_s
    if vt is None:
        raise SettingsError(
            f"visibility_timeout_s is unset: the {settings.policy} policy needs the queue's "
            "VisibilityTimeout resolved first (Settings.with_visibility_timeout)"
        )
    if settings.policy == "remaining":
        return RemainingTimePolicy(visibility_timeout_s=vt)
    return ThresholdPolicy(visibility_timeout_s=vt, threshold_s=settings.threshold_s)
