"""Seed 000's policy: renew `min(remaining/2, 10 s)` before visible, by |remaining| + VT.

Its buffer is at most 10 s, so it survives a lost scheduled run only on a schedule much shorter than
that (the offline runtime's); on the stack's 1-minute schedule the settings refuse it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from longjobs.engine.exceptions import SettingsError
from longjobs.engine.policies.base import (
    KEEP,
    LeaseTiming,
    RenewalDecision,
    TimingSettings,
    check_timeout_outlasts_tick,
    fixed_timeout_tick_s,
    lost_run_gap_s,
    whole_seconds,
)

MAX_BUFFER_S = 10.0
IMMEDIATE_BELOW_S = 0.4
DEFAULT_MAX_RENEWAL_S = 300
"""Seed 000: renewal stops after 5 minutes unless configured."""


def renew_after(remaining_s: float) -> float:
    """Seconds after a renewal at which the next one is due, given the time left at that renewal."""
    buffer = min(remaining_s / 2, MAX_BUFFER_S)
    return remaining_s - buffer


def extension(remaining_s: float, visibility_timeout_s: int) -> int:
    """The timeout asked for: the remaining time (or the overrun, if late) plus one VT."""
    return whole_seconds(max(abs(remaining_s) + visibility_timeout_s, visibility_timeout_s))


def lost_run_need_s(settings: TimingSettings) -> float:
    """How long before visible a renewal must come to survive one lost scheduled run: the gap that run
    leaves (a period and a tick) and the time a call needs to land."""
    return lost_run_gap_s(settings, fixed_timeout_tick_s(settings)) + settings.min_remaining_life_s


@dataclass(frozen=True)
class RemainingTimePolicy:
    """Renews a fixed VT ahead, compensating for late renewals."""

    visibility_timeout_s: int
    name: str = "remaining"
    horizon_s: float = 0.0

    default_max_renewal_s = DEFAULT_MAX_RENEWAL_S

    @staticmethod
    def tick_s(settings: TimingSettings) -> float:
        return fixed_timeout_tick_s(settings)

    @staticmethod
    def check(settings: TimingSettings) -> None:
        """Checked once the VT is known (set, or read from the queue): see `with_visibility_timeout`."""
        vt = settings.visibility_timeout_s
        if vt is None:
            return
        tick = fixed_timeout_tick_s(settings)
        life = settings.min_remaining_life_s
        check_timeout_outlasts_tick(vt, settings)
        need = lost_run_need_s(settings)
        if need >= MAX_BUFFER_S:
            raise ValueError(
                f"extender_period_s={settings.extender_period_s:g} is too long for the remaining policy: it "
                f"renews at most {MAX_BUFFER_S:g} s before visible, and one lost scheduled run leaves "
                f"extender_period_s + tick ({tick:g} s) + min_remaining_life_s ({life:g} s) = {need:g} s; "
                f"extender_period_s must be below {MAX_BUFFER_S - tick - life:g} s, or use the adaptive policy"
            )
        if vt / 2 <= need:
            raise ValueError(
                f"visibility_timeout_s={vt}: the remaining policy renews visibility_timeout_s/2 = {vt / 2:g} s "
                f"before visible, which must be greater than extender_period_s ({settings.extender_period_s:g} s) "
                f"+ tick ({tick:g} s) + min_remaining_life_s ({life:g} s) = {need:g} s, the gap one lost "
                f"scheduled run leaves; smallest safe visibility_timeout_s: {math.floor(2 * need) + 1}"
            )

    @staticmethod
    def from_settings(settings: TimingSettings) -> RemainingTimePolicy:
        if settings.visibility_timeout_s is None:
            raise SettingsError(
                "visibility_timeout_s is unset: the remaining policy needs the queue's VisibilityTimeout "
                "resolved first (longjobs.engine.policies.resolve_visibility_timeout)"
            )
        return RemainingTimePolicy(visibility_timeout_s=settings.visibility_timeout_s)

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
