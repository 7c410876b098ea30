"""Seed 000's policy: renew `min(remaining/2, 10 s)` before visible, by |remaining| + VT."""

from __future__ import annotations

from dataclasses import dataclass

from functions.policies.base import KEEP, LeaseTiming, RenewalDecision, whole_seconds

MAX_BUFFER_S = 10.0
IMMEDIATE_BELOW_S = 0.4


def renew_after(remaining_s: float) -> float:
    """Seconds after a renewal at which the next one is due, given the time left at that renewal."""
    buffer = min(remaining_s / 2, MAX_BUFFER_S)
    return remaining_s - buffer


def extension(remaining_s: float, visibility_timeout_s: int) -> int:
    """The timeout asked for: the remaining time (or the overrun, if late) plus one VT."""
    return whole_seconds(max(abs(remaining_s) + visibility_timeout_s, visibility_timeout_s))


@dataclass(frozen=True)
class RemainingTimePolicy:
    """Renews a fixed VT ahead, compensating for late renewals (seed 000)."""

    visibility_timeout_s: int
    name: str = "remaining"

    def initial_timeout_s(self) -> int:
        return self.visibility_timeout_s

    def renew_at(self, lease: LeaseTiming) -> float:
        remaining_at_renewal = lease.visible_until - lease.last_renewed_at
        return lease.last_renewed_at + renew_after(remaining_at_renewal)

    def decide(self, now: float, lease: LeaseTiming) -> RenewalDecision:
        remaining = lease.visible_until - now
        if now >= self.renew_at(lease) or remaining < IMMEDIATE_BELOW_S:
            return RenewalDecision(True, extension(remaining, self.visibility_timeout_s))
        return KEEP
