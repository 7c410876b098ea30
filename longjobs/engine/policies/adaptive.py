"""The default policy: the chunk grows with the job's age, between a lapse-proof floor and a ceiling.

A job that has run for ten minutes is asked to be kept ten minutes more: long Spark jobs get long
chunks and so few calls, while a young job (the ones that most often die early) gets a short one.

Every chunk is renewed `lead_s` before it ends. The lead covers the worst gap between two extender
runs that the settings promise to survive: `adaptive_lost_runs_survived` runs lost in a row, then one a
full period late, plus the time a call needs to land. A pass looks `horizon_s` (the pass budget) past
its start, so a lease due while the pass is still busy is renewed in it: after the worst gap the
whole pass, of however many leases, has that budget before any of them lapses. The ceiling bounds how
long the message of a job that died *silently* stays hidden; jobs that die loudly are released at
once by the workflow and the watcher, whatever the chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from longjobs.engine.policies.base import (
    KEEP,
    SQS_MAX_VISIBILITY_S,
    LeaseTiming,
    RenewalDecision,
    TimingSettings,
    whole_seconds,
)

MAX_PASS_BUDGET_S = 15.0
"""Default pass budget on the 1-minute schedule; 10,000 leases take about 7 s (benchmarks/extender_throughput)."""


def pass_budget_s(settings: TimingSettings) -> float:
    """The time one pass may take: as set, else a quarter of the period, at most 15 s."""
    if settings.pass_budget_s is not None:
        return settings.pass_budget_s
    return min(MAX_PASS_BUDGET_S, settings.extender_period_s / 4)


def lead_s(settings: TimingSettings) -> float:
    """Renew this long before visible: `adaptive_lost_runs_survived` lost runs, one more a full period
    late, and the landing time of a call. Runs are lost independently, so one lost run alone is too
    few: at one in 20, two or three in a row turn up within a day."""
    return (settings.adaptive_lost_runs_survived + 2) * settings.extender_period_s + settings.min_remaining_life_s


def floor_s(settings: TimingSettings) -> int:
    """The shortest chunk: the lead and the horizon plus two periods, so a lease is not due every run."""
    return math.ceil(lead_s(settings) + pass_budget_s(settings) + 2 * settings.extender_period_s)


@dataclass(frozen=True)
class AdaptivePolicy:
    """Chunk = clamp(job age, floor, ceiling), renewed `lead_s` before it ends."""

    lead_s: float
    floor_s: int
    ceiling_s: int
    horizon_s: float = 0.0
    name: str = "adaptive"

    default_max_renewal_s = SQS_MAX_VISIBILITY_S

    @staticmethod
    def tick_s(settings: TimingSettings) -> float:
        return settings.extender_period_s

    @staticmethod
    def check(settings: TimingSettings) -> None:
        floor = floor_s(settings)
        top = SQS_MAX_VISIBILITY_S - settings.cap_safety_s
        budget = pass_budget_s(settings)
        if budget >= settings.extender_period_s:
            raise ValueError(
                f"pass_budget_s={budget:g} must be below extender_period_s={settings.extender_period_s:g}: "
                "a pass must end before the next scheduled run"
            )
        if not floor <= settings.adaptive_ceiling_s <= top:
            raise ValueError(
                f"adaptive_ceiling_s={settings.adaptive_ceiling_s} is outside {floor}..{top}: the shortest "
                f"chunk that survives {settings.adaptive_lost_runs_survived} lost extender runs and a pass of "
                f"pass_budget_s={budget:g} at extender_period_s={settings.extender_period_s:g} is {floor} s, and "
                f"no chunk may pass the 12 h limit less cap_safety_s; smallest safe adaptive_ceiling_s: {floor}"
            )

    @staticmethod
    def from_settings(settings: TimingSettings) -> AdaptivePolicy:
        return AdaptivePolicy(
            lead_s=lead_s(settings),
            floor_s=floor_s(settings),
            ceiling_s=settings.adaptive_ceiling_s,
            horizon_s=pass_budget_s(settings),
        )

    def chunk_s(self, age_s: float) -> int:
        return whole_seconds(min(max(age_s, self.floor_s), self.ceiling_s))

    def initial_timeout_s(self) -> int:
        return self.floor_s

    def renew_at(self, lease: LeaseTiming) -> float:
        return lease.visible_until - self.lead_s

    def decide(self, now: float, lease: LeaseTiming) -> RenewalDecision:
        if now + self.horizon_s >= self.renew_at(lease):
            return RenewalDecision(True, self.chunk_s(now - lease.received_at))
        return KEEP
