"""One extender run: renew the leases that fall due, in batches, retrying throttled ones with jitter.

The service takes every dependency as an argument (`Extender`) and returns a report; the handler
publishes the report as metrics. Nothing here sleeps on the wall clock directly: tests and the
benchmarks drive it with a fake clock.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

from functions.clock import Clock
from functions.lease import Lease, LeaseStatus, LeaseStore, Renewal
from functions.observability import logger
from functions.policies import RenewalPolicy
from functions.settings import SQS_MAX_VISIBILITY_S, Settings
from functions.visibility import ChangeOutcome, FailureClass, VisibilityChange, VisibilityClient

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Extender:
    """Everything an extender run uses; built once per container (or per test)."""

    settings: Settings
    policy: RenewalPolicy
    store: LeaseStore
    visibility: VisibilityClient
    sqs: SQSClient
    clock: Clock
    executor: Executor | None = None
    stepfunctions: SFNClient | None = None
    rng: random.Random = field(default_factory=random.Random)

    def parallel(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """`fn` over `items`, on the executor when there is one."""
        if self.executor is None or len(items) <= 1:
            return [fn(item) for item in items]
        return list(self.executor.map(fn, items))


@dataclass
class PassReport:
    """Counts of one pass (and, summed, of one invocation)."""

    due: int = 0
    renewed: int = 0
    lapses: int = 0
    lost: int = 0
    capped: int = 0
    throttled: int = 0  # throttled answers, each retried while time remained
    given_up: int = 0  # still throttled when time ran out: left due for the next tick
    failed: int = 0
    conflicts: int = 0  # another writer changed the lease first
    min_time_left_s: float | None = None

    def add(self, other: PassReport) -> None:
        for f in fields(self):
            if f.name == "min_time_left_s":
                values = [v for v in (self.min_time_left_s, other.min_time_left_s) if v is not None]
                self.min_time_left_s = min(values) if values else None
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass(frozen=True)
class _Planned:
    lease: Lease
    timeout_s: int


def backoff_s(attempt: int, settings: Settings, rng: random.Random) -> float:
    """Full-jitter exponential backoff (botocore's retrier covers whole calls, not batch entries)."""
    return rng.uniform(0, min(settings.retry_cap_s, settings.retry_base_s * 2**attempt))


def renew_due(ext: Extender, *, deadline: float) -> PassReport:
    """Renew every ACTIVE lease due now; close those past their hard stop or no longer accepted."""
    report = PassReport()
    now = ext.clock.now()
    leases = ext.store.due(before=now)
    report.due = len(leases)
    _close_all(
        ext,
        [(lease, "max renewal duration reached") for lease in leases if now >= lease.renew_until],
        LeaseStatus.CAPPED,
        report,
    )
    pending = [lease for lease in leases if now < lease.renew_until]
    attempt = 0
    while pending:
        pending = _renew(ext, pending, report)
        if not pending:
            break
        delay = backoff_s(attempt, ext.settings, ext.rng)
        if ext.clock.now() + delay >= deadline:
            report.given_up += len(pending)
            logger.warning("renewals still throttled at the deadline", extra={"count": len(pending)})
            break
        ext.clock.sleep(delay)
        attempt += 1
    return report


def _renew(ext: Extender, leases: Iterable[Lease], report: PassReport) -> list[Lease]:
    """One round of renewal calls. Returns the leases whose call was throttled."""
    plan: dict[str, _Planned] = {}
    too_late: list[tuple[Lease, str]] = []
    now = ext.clock.now()
    for lease in leases:
        decision = ext.policy.decide(now, lease)
        if not decision.renew:
            continue
        cap_left = math.floor(lease.received_at + SQS_MAX_VISIBILITY_S - ext.settings.cap_safety_s - now)
        timeout = min(decision.visibility_timeout_s, cap_left)
        if timeout <= 0:
            too_late.append((lease, "12 hour visibility limit reached"))
        else:
            plan[lease.message_id] = _Planned(lease, timeout)
    _close_all(ext, too_late, LeaseStatus.CAPPED, report)
    outcomes = ext.visibility.change_many(
        VisibilityChange(key, p.lease.queue_url, p.lease.receipt_handle, p.timeout_s) for key, p in plan.items()
    )
    by_class: dict[FailureClass | None, list[ChangeOutcome]] = {}
    for outcome in outcomes:
        by_class.setdefault(outcome.failure, []).append(outcome)

    successes = by_class.get(None, [])
    _observe_time_left([(plan[o.key].lease, o.sent_at) for o in successes], report)
    renewed = ext.store.record_renewals([_renewal(ext, plan[o.key], o) for o in successes])
    report.renewed += sum(1 for lease in renewed if lease is not None)
    report.conflicts += sum(1 for lease in renewed if lease is None)

    for failure, status in ((FailureClass.LOST, LeaseStatus.LOST), (FailureClass.CAPPED, LeaseStatus.CAPPED)):
        refused = by_class.get(failure, [])
        for outcome in refused:
            logger.warning(
                "renewal refused", extra={"message_id": outcome.key, "class": str(failure), "error": outcome.error}
            )
        _close_all(ext, [(plan[o.key].lease, o.error or str(failure)) for o in refused], status, report)

    others = by_class.get(FailureClass.OTHER, [])
    report.failed += len(others)
    for outcome in others:
        logger.error("renewal failed", extra={"message_id": outcome.key, "error": outcome.error})
    ext.parallel(lambda o: ext.store.note_error(plan[o.key].lease, o.error or "unknown error"), others)

    throttled = by_class.get(FailureClass.THROTTLED, [])
    report.throttled += len(throttled)
    return [plan[o.key].lease for o in throttled]


def _observe_time_left(renewed: Sequence[tuple[Lease, float]], report: PassReport) -> None:
    """Margin left at each renewal; a negative one is a lapse (the message may have been visible)."""
    late: list[tuple[float, str]] = []
    for lease, sent_at in renewed:
        time_left = lease.visible_until - sent_at
        if time_left < 0:
            late.append((-time_left, lease.message_id))
        if report.min_time_left_s is None or time_left < report.min_time_left_s:
            report.min_time_left_s = time_left
    if late:
        report.lapses += len(late)
        late.sort(reverse=True)
        logger.warning(
            "leases lapsed before renewal (renewed anyway)",
            extra={"count": len(late), "worst_late_s": late[0][0], "message_ids": [m for _, m in late[:5]]},
        )


def _renewal(ext: Extender, planned: _Planned, outcome: ChangeOutcome) -> Renewal:
    lease = planned.lease
    renewed = _Timing(lease.received_at, outcome.sent_at + planned.timeout_s, outcome.sent_at)
    return Renewal(lease, outcome.sent_at, planned.timeout_s, ext.policy.renew_at(renewed))


@dataclass(frozen=True)
class _Timing:
    received_at: float
    visible_until: float
    last_renewed_at: float


def _close_all(ext: Extender, leases: Sequence[tuple[Lease, str]], status: LeaseStatus, report: PassReport) -> None:
    """Close each lease with its reason; count the ones closed and the ones another writer changed first."""
    if not leases:
        return
    now = ext.clock.now()
    closed = ext.parallel(lambda item: ext.store.close(item[0], status, now=now, error=item[1]), leases)
    done = sum(1 for lease in closed if lease is not None)
    report.conflicts += len(closed) - done
    if status is LeaseStatus.CAPPED:
        report.capped += done
    elif status is LeaseStatus.LOST:
        report.lost += done


def report_dict(report: Any) -> dict[str, Any]:
    """A JSON-ready dict of a report dataclass."""
    return {f.name: getattr(report, f.name) for f in fields(report)}


__all__ = ["Extender", "PassReport", "backoff_s", "renew_due", "report_dict"]
