"""One extender pass: renew the leases that fall due, in batches, retrying throttled ones with jitter.

A lease that can no longer be held (past its max renewal or the 12 h limit, or a handle SQS refuses
for good) has its execution stopped before it is closed (invariant 8); a refused handle whose execution
has already ended is settled as reconciliation settles it, not stopped. A renewal that SQS accepted but
the table could not record is counted and left due (the belief stays earlier than the truth); a
renewal that lost its race to a release re-applies the release. Nothing in one lease's trouble ends
the pass for the others. The service takes every dependency as an argument (`Extender`) and returns a
report; the handler publishes it as metrics. Nothing here sleeps on the wall clock directly: tests and
the benchmarks drive it with a fake clock.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

from longjobs.engine import cancel
from longjobs.engine.clock import Clock
from longjobs.engine.execution import NEVER_STARTED, RUNNING_STATUSES, execution_status
from longjobs.engine.lease import LastError, Lease, LeaseStatus, LeaseStore, Renewal
from longjobs.engine.lease.legacy import LegacyShards
from longjobs.engine.observability import logger
from longjobs.engine.policies import RenewalPolicy, hold_limit
from longjobs.engine.settings import Settings
from longjobs.engine.settle import SettleError, reassert_release, settle_ended, stop_and_close
from longjobs.engine.visibility import ChangeOutcome, FailureClass, VisibilityChange, VisibilityClient

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

T = TypeVar("T")
R = TypeVar("R")

CAPPED_RETRIES = 4
"""How many times a renewal SQS refused as past the 12 h limit is asked again, each time half as long."""
VISIBILITY_LIMIT_REACHED = "12 hour visibility limit reached"
"""The last error of a lease capped at SQS's 12 h limit (with SQS's refusal as its cause, when it refused)."""


def legacy_shards(settings: Settings, clock: Clock) -> LegacyShards | None:
    """What an extender container watches of the shards of a previous, larger `shards`
    (`settings.legacy_shards`; see `longjobs.engine.lease.legacy`), None when there are none."""
    legacy = settings.legacy_shards
    return LegacyShards(legacy.start, legacy.stop, clock=clock) if legacy else None


@dataclass
class SweepSchedule:
    """When a sweep (reconciliation's of its index, admission's pass) next runs; mutable, in the container's
    memory: a new container sweeps at its first run."""

    next_at: float = 0.0


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
    admit: Callable[[float], Sequence[Any]] | None = None
    """Admission's pass over every limited job type (`longjobs.engine.admission.admit.admit_all`), run after
    reconciliation in each invocation, given the time by which it must stop beginning new work (the next
    tick's renewals come first); None where no type is limited."""
    sweeps: SweepSchedule = field(default_factory=SweepSchedule)
    """When reconciliation next sweeps its index, in this container's memory."""
    admissions: SweepSchedule = field(default_factory=SweepSchedule)
    """When admission's pass next runs (`settings.admission_pass_interval_s`), in this container's memory."""

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
    stopped: int = 0  # executions stopped because their lease could no longer be held
    settled: int = 0  # refused handles of executions already ended: settled as reconciliation does, not stopped
    throttled: int = 0  # throttled answers, each retried while time remained
    given_up: int = 0  # still throttled when time ran out: left due for the next tick
    failed: int = 0
    record_failures: int = 0  # renewals SQS accepted that the table did not record: due again next pass
    conflicts: int = 0  # another writer changed the lease first
    releases_reasserted: int = 0  # a renewal raced a release: the release was applied again
    cancels_finished: int = 0  # cancels cut short after their mark, finished here (`longjobs.engine.cancel.finish`)
    cancels_held: int = 0  # cancelled messages kept hidden until their cancel is finished
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
    """Renew every ACTIVE lease due by `now + horizon`; end those that can no longer be held."""
    report = PassReport()
    now = ext.clock.now()
    found = ext.store.index.due(before=now + ext.policy.horizon_s, with_cancelled=True)
    leases = [lease for lease in found if lease.active]
    report.due = len(found)
    _end_unholdable(
        ext,
        [(lease, LastError("max renewal duration reached")) for lease in leases if now >= lease.renew_until],
        LeaseStatus.CAPPED,
        report,
    )
    held = _finish_cancels(ext, [lease for lease in found if lease.status is LeaseStatus.CANCELLED], report)
    pending = [lease for lease in leases if now < lease.renew_until] + held
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


def _finish_cancels(ext: Extender, leases: Sequence[Lease], report: PassReport) -> list[Lease]:
    """The CANCELLED leases the due index showed: cancels not finished yet (their operator's process died,
    or a step such as the stop failed past its retries). Each is finished here once its hand-over has
    passed (`longjobs.engine.cancel.finish`: the stop, the holds, the one DLQ copy, the delete); those not
    finished are returned, to be renewed with the ACTIVE leases: the message stays hidden while its
    execution may still run. Without Step Functions or the DLQ at hand the cancel cannot be finished here:
    its message is only kept hidden."""
    if not leases:
        return []
    if ext.stepfunctions is None or not ext.settings.dlq_url:
        logger.warning(
            "cancelled leases due, but no DLQ or Step Functions to finish them", extra={"count": len(leases)}
        )
        report.cancels_held += len(leases)
        return list(leases)
    canceller = cancel.Canceller(
        store=ext.store, sqs=ext.sqs, stepfunctions=ext.stepfunctions, dlq_url=ext.settings.dlq_url, clock=ext.clock
    )
    results = ext.parallel(lambda lease: cancel.finish(canceller, lease), leases)
    report.cancels_finished += sum(1 for outcome, _ in results if outcome is cancel.Finish.FINISHED)
    held = [lease for outcome, lease in results if outcome is cancel.Finish.HIDE]
    report.cancels_held += len(held)
    return held


def _renew(ext: Extender, leases: Iterable[Lease], report: PassReport) -> list[Lease]:
    """One round of renewal calls. Returns the leases whose call was throttled."""
    plan: dict[str, _Planned] = {}
    too_late: list[tuple[Lease, LastError]] = []
    now = ext.clock.now()
    for lease in leases:
        decision = ext.policy.decide(now, lease)
        if not decision.renew:
            continue
        left = math.floor(hold_limit(lease.received_at, ext.settings.cap_safety_s) - now)
        timeout = min(decision.visibility_timeout_s, left)
        if timeout <= 0:
            too_late.append((lease, LastError(VISIBILITY_LIMIT_REACHED)))
        else:
            plan[lease.message_id] = _Planned(lease, timeout)
    _end_unholdable(ext, too_late, LeaseStatus.CAPPED, report)
    outcomes = ext.visibility.change_many(
        VisibilityChange(key, p.lease.queue_url, p.lease.receipt_handle, p.timeout_s) for key, p in plan.items()
    )
    by_class: dict[FailureClass | None, list[ChangeOutcome]] = {}
    for outcome in outcomes:
        by_class.setdefault(outcome.failure, []).append(outcome)

    _record(ext, [(plan[o.key], o) for o in by_class.get(None, [])], report)
    _capped(ext, [(plan[o.key], o) for o in by_class.get(FailureClass.CAPPED, [])], report)
    _lost(ext, [(plan[o.key], o) for o in by_class.get(FailureClass.LOST, [])], report)

    others = by_class.get(FailureClass.OTHER, [])
    report.failed += len(others)
    for outcome in others:
        logger.error("renewal failed", extra={"message_id": outcome.key, "error": outcome.error})
    ext.parallel(lambda o: _note_error(ext, plan[o.key].lease, LastError("renewal failed", o.error)), others)

    throttled = by_class.get(FailureClass.THROTTLED, [])
    report.throttled += len(throttled)
    return [plan[o.key].lease for o in throttled]


def _record(ext: Extender, accepted: Sequence[tuple[_Planned, ChangeOutcome]], report: PassReport) -> None:
    """Record renewals SQS accepted. A table error is counted, not raised: SQS holds the message for
    the new chunk whatever the table says, and the lease (still believing the older, earlier
    visible-until) is simply due again. A renewal that lost its race re-reads the lease: if it was
    released meanwhile, the renewal may have undone the release, which is applied again."""
    if not accepted:
        return
    _observe_time_left([(planned.lease, outcome.sent_at) for planned, outcome in accepted], report)
    renewals = [_renewal(ext, planned, outcome) for planned, outcome in accepted]
    results: list[Lease | BaseException | None]
    try:
        results = list(ext.store.renewals.record_many(renewals))
    except Exception as exc:
        logger.warning("recording renewals failed; recording one by one", extra={"error": str(exc)})
        results = [_record_one(ext, renewal) for renewal in renewals]
    conflicted: list[Lease] = []
    for renewal, result in zip(renewals, results, strict=True):
        if isinstance(result, BaseException):
            report.record_failures += 1
        elif result is None:
            report.conflicts += 1
            conflicted.append(renewal.lease)
        else:
            report.renewed += 1
    report.releases_reasserted += sum(ext.parallel(lambda lease: _after_conflict(ext, lease), conflicted))


def _record_one(ext: Extender, renewal: Renewal) -> Lease | BaseException | None:
    try:
        return ext.store.renewals.record(renewal)
    except Exception as exc:
        logger.error(
            "renewal accepted by SQS but not recorded; the lease is due again",
            extra={"message_id": renewal.lease.message_id, "error": str(exc)},
        )
        return exc


def _after_conflict(ext: Extender, stale: Lease) -> bool:
    """Another writer changed the lease between our read and our visibility change: if it released the
    message, our change may have hidden it again, so the release is applied once more."""
    try:
        fresh = ext.store.get(stale.message_id)
    except Exception as exc:
        logger.warning(
            "could not re-read a lease after a conflict", extra={"message_id": stale.message_id, "error": str(exc)}
        )
        return False
    if fresh is None or fresh.status is not LeaseStatus.RELEASED or fresh.receipt_handle != stale.receipt_handle:
        return False
    return reassert_release(fresh, visibility=ext.visibility, clock=ext.clock)


def _capped(ext: Extender, refused: Sequence[tuple[_Planned, ChangeOutcome]], report: PassReport) -> None:
    """SQS refused a renewal as past the 12 h limit of this receive (the receiver saw the record some
    time after SQS handed it out, so the limit comes sooner than the lease believes). Ask for half as
    long, a few times, to keep the message hidden as long as SQS allows, then stop the execution and
    close the lease CAPPED while the message is still hidden."""
    for planned, outcome in refused:
        logger.warning(
            "renewal refused: 12 h limit", extra={"message_id": planned.lease.message_id, "error": outcome.error}
        )

    def shorter(item: tuple[_Planned, ChangeOutcome]) -> Lease:
        planned = item[0]
        lease, timeout = planned.lease, planned.timeout_s // 2
        for _ in range(CAPPED_RETRIES):
            if timeout < 1:
                break
            retry = ext.visibility.change(
                VisibilityChange(lease.message_id, lease.queue_url, lease.receipt_handle, timeout)
            )
            if retry.ok:
                recorded = _record_one(ext, _renewal(ext, _Planned(lease, timeout), retry))
                return recorded if isinstance(recorded, Lease) else lease
            if retry.failure is not FailureClass.CAPPED:
                break
            timeout //= 2
        return lease

    kept = ext.parallel(shorter, refused)
    _end_unholdable(
        ext,
        [
            (lease, LastError(VISIBILITY_LIMIT_REACHED, outcome.error))
            for lease, (_, outcome) in zip(kept, refused, strict=True)
        ],
        LeaseStatus.CAPPED,
        report,
    )


def _lost(ext: Extender, refused: Sequence[tuple[_Planned, ChangeOutcome]], report: PassReport) -> None:
    """SQS no longer accepts the handle. If the lease is still the one we read (no newer receive adopted
    a newer handle meanwhile), the message may be in someone else's hands: stop the execution, close LOST.
    Unless the execution has already ended (`_settle_ended_instead`): then the handle was most likely
    refused because the message was deleted after its job succeeded, by a settlement whose close of the
    lease has not landed (reconciliation's completion, which deletes before it closes, cut short; a workflow
    close that failed for good), and the lease is settled by that end, as reconciliation would."""
    for planned, outcome in refused:
        logger.warning(
            "renewal refused: handle lost", extra={"message_id": planned.lease.message_id, "error": outcome.error}
        )
    _end_unholdable(
        ext,
        [
            (planned.lease, LastError("receipt handle no longer accepted", outcome.error))
            for planned, outcome in refused
        ],
        LeaseStatus.LOST,
        report,
    )


def _note_error(ext: Extender, lease: Lease, error: LastError) -> None:
    try:
        ext.store.note_error(lease, error)
    except Exception as exc:
        logger.warning("could not note a renewal error", extra={"message_id": lease.message_id, "error": str(exc)})


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
    """The renewal to record. The lease falls due again by its hard stop (`renew_until`) at the latest, so
    a chunk that outlasts it does not let the job run a chunk past `max_renewal_s`: the pass that finds
    it due caps it. A cancelled message kept hidden falls due again within `FINISH_RETRY_S`, so its
    cancel is tried again soon whatever chunk the policy gave."""
    lease = planned.lease
    renewed = _Timing(lease.received_at, outcome.sent_at + planned.timeout_s, outcome.sent_at)
    renew_at = min(ext.policy.renew_at(renewed), lease.renew_until)
    if lease.status is LeaseStatus.CANCELLED:
        renew_at = min(renew_at, outcome.sent_at + cancel.FINISH_RETRY_S)
    return Renewal(lease, outcome.sent_at, planned.timeout_s, renew_at)


@dataclass(frozen=True)
class _Timing:
    received_at: float
    visible_until: float
    last_renewed_at: float


def _end_unholdable(
    ext: Extender, leases: Sequence[tuple[Lease, LastError]], status: LeaseStatus, report: PassReport
) -> None:
    """Stop each lease's execution, then close the lease with its reason; a lease whose execution has
    already ended is settled by that end instead (`_settle_ended_instead`). A stop or a write that fails
    leaves the lease ACTIVE and due: the next pass tries again.

    Each lease is read again, consistently, before anything is stopped: the due index lags the table,
    and a refused renewal names the handle we had. A redelivery may have adopted the message meanwhile
    (a newer handle, a new 12 h and a new renew-until for the same running execution): stopping on the
    old read would kill the execution that now holds the message. Only a lease still as read
    (`still_as_read`) is ended; any other is left to the next pass, which sees it as it is."""
    if not leases:
        return

    def end(item: tuple[Lease, LastError]) -> str:
        read, reason = item
        try:
            lease = ext.store.get(read.message_id)
        except Exception as exc:
            logger.warning(
                "could not re-read an unholdable lease", extra={"message_id": read.message_id, "error": str(exc)}
            )
            return "failed"
        if lease is None or not lease.active or not still_as_read(lease, read):
            return "conflict"
        settled = _settle_ended_instead(ext, lease)
        if settled is not None:
            return settled
        try:
            closed = stop_and_close(
                lease, status, stepfunctions=ext.stepfunctions, store=ext.store, clock=ext.clock, reason=reason
            )
        except SettleError as exc:
            logger.error("could not stop the execution of an unholdable lease", extra={"error": str(exc)})
            return "failed"
        except Exception as exc:
            logger.error("could not close a lease", extra={"message_id": lease.message_id, "error": str(exc)})
            return "stopped_failed" if lease.execution_arn else "failed"
        if closed is None:
            return "stopped_conflict" if lease.execution_arn else "conflict"
        return "stopped_closed" if lease.execution_arn else "closed"

    results = ext.parallel(end, leases)
    report.stopped += sum(1 for r in results if r.startswith("stopped"))
    report.failed += sum(1 for r in results if r.endswith("failed"))
    report.conflicts += sum(1 for r in results if r.endswith("conflict"))
    report.settled += sum(1 for r in results if r == "settled")
    done = sum(1 for r in results if r.endswith("closed"))
    if status is LeaseStatus.CAPPED:
        report.capped += done
    elif status is LeaseStatus.LOST:
        report.lost += done


def _settle_ended_instead(ext: Extender, lease: Lease) -> str | None:
    """Settle, without a stop, a lease that can no longer be held (its handle refused, its hard stop
    reached) if its execution has already ended; None when it runs (or never started): the caller stops
    it and closes the lease.

    A refused handle means the message may be in someone else's hands, and a lease at its cap may be
    held no longer, so a running execution is stopped (invariant 8). An ended one runs nothing more:
    stopping it changes nothing but the record. A handle was most likely refused because the job's own
    success deleted the message before the lease was closed (reconciliation's completion deletes, then
    closes; a workflow's close that failed for good deletes all the same). Closing that lease LOST or
    CAPPED would report a job that succeeded as lost or cut off. Its execution's status says how it ended
    (Step Functions' describe is read after the lease is found unholdable), and the lease is settled by
    it, as reconciliation settles an ended execution:
    SUCCEEDED completes it (the delete, refused, is noted and the lease closes SUCCEEDED), any other end
    releases it (the release, refused, makes it LOST). A describe or a settlement that fails leaves the
    lease ACTIVE and due: the next pass tries again."""
    if not lease.execution_arn or ext.stepfunctions is None:
        return None
    try:
        status = execution_status(ext.stepfunctions, lease.execution_arn)
    except Exception as exc:
        logger.warning(
            "could not describe the execution of a refused handle",
            extra={"message_id": lease.message_id, "execution": lease.execution_arn, "error": str(exc)},
        )
        return "failed"
    if status in RUNNING_STATUSES or status == NEVER_STARTED:
        return None
    logger.warning(
        "renewal refused after the execution ended: settled by its end, not stopped",
        extra={"message_id": lease.message_id, "execution": lease.execution_arn, "status": status},
    )
    try:
        closed = settle_ended(lease, status, store=ext.store, visibility=ext.visibility, sqs=ext.sqs, clock=ext.clock)
    except Exception as exc:
        logger.error(
            "could not settle a lease whose execution ended", extra={"message_id": lease.message_id, "error": str(exc)}
        )
        return "failed"
    return "settled" if closed is not None else "conflict"


def still_as_read(lease: Lease, read: Lease) -> bool:
    """Whether a lease read again is the one the extender planned on: of the same receive (its receive
    count and receipt handle), at the same version. Versions only grow across a message's leases, so the
    version alone would tell; the receive is checked too, as the reason to end it is about that receive
    (its handle refused, its 12 h or its max renewal reached)."""
    return (lease.receive_count, lease.receipt_handle) == (read.receive_count, read.receipt_handle) and (
        lease.version == read.version
    )


def report_dict(report: Any) -> dict[str, Any]:
    """A JSON-ready dict of a report dataclass."""
    return {f.name: getattr(report, f.name) for f in fields(report)}


__all__ = ["Extender", "PassReport", "backoff_s", "legacy_shards", "renew_due", "report_dict"]
