"""The threshold policy: every heartbeat, renew the leases within the threshold of visible, VT from now.

Without a configured `visibility_timeout_s` it asks for 30 s (not the queue's timeout, which is sized
for the receiver, not for renewal).
"""

from __future__ import annotations

from dataclasses import dataclass

from longjobs.engine.policies.base import (
    KEEP,
    SQS_MAX_VISIBILITY_S,
    LeaseTiming,
    RenewalDecision,
    TimingSettings,
    check_timeout_outlasts_tick,
    fixed_timeout_tick_s,
    lost_run_gap_s,
)

DEFAULT_VISIBILITY_TIMEOUT_S = 30
"""Seed 001's VT."""


@dataclass(frozen=True)
class ThresholdPolicy:
    """Checked every heartbeat; renews leases about to become visible."""

    visibility_timeout_s: int
    threshold_s: float
    name: str = "threshold"
    horizon_s: float = 0.0

    default_max_renewal_s = SQS_MAX_VISIBILITY_S

    @staticmethod
    def tick_s(settings: TimingSettings) -> float:
        return fixed_timeout_tick_s(settings)

    @staticmethod
    def check(settings: TimingSettings) -> None:
        vt = settings.visibility_timeout_s or DEFAULT_VISIBILITY_TIMEOUT_S
        tick = fixed_timeout_tick_s(settings)
        life = settings.min_remaining_life_s
        check_timeout_outlasts_tick(vt, settings)
        gap = lost_run_gap_s(settings, tick)
        if settings.threshold_s <= gap + life:
            raise ValueError(
                f"threshold_s={settings.threshold_s:g} must be greater than extender_period_s "
                f"({settings.extender_period_s:g} s) + tick ({tick:g} s) + min_remaining_life_s ({life:g} s) = "
                f"{gap + life:g} s: one lost scheduled run leaves that gap between two looks at a lease; "
                f"smallest safe threshold_s: {_just_above(gap + life)}, with visibility_timeout_s above it"
            )
        if vt <= settings.threshold_s:
            smallest = int(settings.threshold_s) + 1
            given, fix = f"visibility_timeout_s={vt}", f"smallest safe visibility_timeout_s: {smallest}"
            if settings.visibility_timeout_s is None:  # say where the VT nobody set comes from, and both fixes
                given += " (the threshold policy's default, as visibility_timeout_s is unset)"
                lower = f", or lower threshold_s below {vt}" if gap + life < vt else ""
                fix = f"set visibility_timeout_s to {smallest} or more{lower}"
            raise ValueError(
                f"{given} must be greater than threshold_s={settings.threshold_s:g}, or every renewal is due "
                f"again at once; {fix}"
            )

    @staticmethod
    def from_settings(settings: TimingSettings) -> ThresholdPolicy:
        return ThresholdPolicy(
            visibility_timeout_s=settings.visibility_timeout_s or DEFAULT_VISIBILITY_TIMEOUT_S,
            threshold_s=settings.threshold_s,
        )

    def initial_timeout_s(self) -> int:
        return self.visibility_timeout_s

    def renew_at(self, lease: LeaseTiming) -> float:
        return lease.visible_until - self.threshold_s

    def decide(self, now: float, lease: LeaseTiming) -> RenewalDecision:
        if lease.visible_until - now <= self.threshold_s:
            return RenewalDecision(True, self.visibility_timeout_s)
        return KEEP


def _just_above(value: float) -> str:
    """The smallest value in tenths of a second above `value`, as text."""
    return f"{(int(value * 10) + 1) / 10:g}"
