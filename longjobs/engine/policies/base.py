"""The renewal policy contract: a pure function of (now, lease, settings), and the one 12 h limit.

Each policy owns its timing: the values it derives from the settings (when to renew, how far ahead a
pass looks, the first chunk) and the check that refuses settings under which it would lapse by
construction. Adding a policy touches one module and the registry in `longjobs.engine.policies`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

SQS_MAX_VISIBILITY_S = 43_200
"""SQS keeps a received message hidden for at most 12 hours from its receive."""


class TimingSettings(Protocol):
    """The settings a policy reads (`longjobs.engine.settings.Settings` satisfies it)."""

    @property
    def visibility_timeout_s(self) -> int | None: ...
    @property
    def extender_period_s(self) -> float: ...
    @property
    def heartbeat_s(self) -> float: ...
    @property
    def threshold_s(self) -> float: ...
    @property
    def min_remaining_life_s(self) -> float: ...
    @property
    def adaptive_ceiling_s(self) -> int: ...
    @property
    def adaptive_lost_runs_survived(self) -> int: ...
    @property
    def pass_budget_s(self) -> float | None: ...
    @property
    def cap_safety_s(self) -> int: ...


class LeaseTiming(Protocol):
    """The parts of a lease a policy reads (the `Lease` record satisfies it)."""

    @property
    def received_at(self) -> float: ...

    @property
    def visible_until(self) -> float: ...

    @property
    def last_renewed_at(self) -> float: ...


@dataclass(frozen=True)
class RenewalDecision:
    """Renew now or not, and the `VisibilityTimeout` to ask SQS for (seconds from the call)."""

    renew: bool
    visibility_timeout_s: int = 0


KEEP = RenewalDecision(renew=False)


class RenewalPolicy(Protocol):
    """Decides when a lease is renewed and for how long. Implementations hold no mutable state."""

    @property
    def name(self) -> str: ...

    @property
    def horizon_s(self) -> float:
        """How far past `now` a pass looks for due leases: the time the pass itself may take."""
        ...

    def initial_timeout_s(self) -> int:
        """The first chunk, asked for when the job is accepted."""
        ...

    def renew_at(self, lease: LeaseTiming) -> float:
        """When the lease falls due (the due-index key); a pass at `now` takes it from `now + horizon_s`."""
        ...

    def decide(self, now: float, lease: LeaseTiming) -> RenewalDecision:
        """Whether to renew at `now`, and with which timeout."""
        ...


class PolicyType(Protocol):
    """The class side of a policy: its defaults, its schedule, its lapse check and its constructor."""

    default_max_renewal_s: int

    @staticmethod
    def tick_s(settings: TimingSettings) -> float:
        """How often the extender looks at leases under this policy."""
        ...

    @staticmethod
    def check(settings: TimingSettings) -> None:
        """Raise `ValueError` naming the settings and the smallest safe values when the policy could lapse."""
        ...

    @staticmethod
    def from_settings(settings: TimingSettings) -> RenewalPolicy: ...


def whole_seconds(seconds: float) -> int:
    """SQS takes whole seconds: round up, ignoring float noise below a millisecond."""
    return max(0, math.ceil(round(seconds, 3)))


def hold_limit(received_at: float, cap_safety_s: float) -> float:
    """The last moment a receive can keep its message hidden: 12 h after it, less the safety margin.

    The one 12 h clamp of the engine: the hard stop of renewal and the longest timeout a renewal asks.
    """
    return received_at + SQS_MAX_VISIBILITY_S - cap_safety_s


def lost_run_gap_s(settings: TimingSettings, tick_s: float) -> float:
    """The longest time between two looks at a lease when one scheduled run is lost (or a full period
    late): the last tick of one invocation falls up to one tick before its period ends, and the next
    look is the invocation after the lost one."""
    return settings.extender_period_s + tick_s


def fixed_timeout_tick_s(settings: TimingSettings) -> float:
    """The fixed-timeout policies look at leases every heartbeat, within each scheduled invocation."""
    return min(settings.heartbeat_s, settings.extender_period_s)


def check_timeout_outlasts_tick(vt: int, settings: TimingSettings) -> None:
    """Seed 004's rule: the timeout must outlast one tick plus the time a call needs to land."""
    tick, life = fixed_timeout_tick_s(settings), settings.min_remaining_life_s
    if vt <= tick + life:
        raise ValueError(
            f"visibility_timeout_s={vt} must be greater than tick ({tick:g} s) + min_remaining_life_s "
            f"({life:g} s) = {tick + life:g} s, or the message becomes visible before the next renewal"
        )
