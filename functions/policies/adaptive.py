"""The default policy: the chunk grows with the job's age, between a lapse-proof floor and a ceiling.

A job that has run for ten minutes is asked to be kept ten minutes more: long Spark jobs get long
chunks and so few calls, while a young job (the ones that most often die early) gets a short one.
Every chunk is renewed `lead_s` before it ends, which covers the worst gap between two extender runs
when one scheduled run is lost and the next is late by a full period. The ceiling bounds how long the
message of a job that died *silently* stays hidden; jobs that die loudly are released at once by the
workflow and the watcher, whatever the chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

from functions.policies.base import KEEP, LeaseTiming, RenewalDecision, whole_seconds


@dataclass(frozen=True)
class AdaptivePolicy:
    """Chunk = clamp(job age, floor, ceiling), renewed `lead_s` before it ends."""

    lead_s: float
    floor_s: int
    ceiling_s: int
    name: str = "adaptive"

    def chunk_s(self, age_s: float) -> int:
        return whole_seconds(min(max(age_s, self.floor_s), self.ceiling_s))

    def initial_timeout_s(self) -> int:
        return self.floor_s

    def renew_at(self, lease: LeaseTiming) -> float:
        return lease.visible_until - self.lead_s

    def decide(self, now: float, lease: LeaseTiming) -> RenewalDecision:
        if now >= self.renew_at(lease):
            return RenewalDecision(True, self.chunk_s(now - lease.received_at))
        return KEEP
