"""Seed 001's policy: when within the threshold of visible, set VT from now."""

from __future__ import annotations

from dataclasses import dataclass

from functions.policies.base import KEEP, LeaseTiming, RenewalDecision


@dataclass(frozen=True)
class ThresholdPolicy:
    """Checked every heartbeat; renews leases about to become visible (seed 001)."""

    visibility_timeout_s: int
    threshold_s: float
    name: str = "threshold"

    def initial_timeout_s(self) -> int:
        return self.visibility_timeout_s

    def renew_at(self, lease: LeaseTiming) -> float:
        return lease.visible_until - self.threshold_s

    def decide(self, now: float, lease: LeaseTiming) -> RenewalDecision:
        if lease.visible_until - now <= self.threshold_s:
            return RenewalDecision(True, self.visibility_timeout_s)
        return KEEP
