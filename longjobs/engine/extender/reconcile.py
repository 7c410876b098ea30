"""Reconciliation: settle ACTIVE leases whose execution has ended, or never started.

The watcher releases a message the moment its execution fails, but status events are best-effort
(and do not exist offline), so the extender also asks Step Functions about its leases now and then.

- Least recently checked first: the `reconcile` index orders ACTIVE leases by when reconciliation
  last looked at them, and each look moves the lease to the back. So every ACTIVE lease is looked at
  within about (active leases / `reconcile_max_per_run`) runs, however many there are.
- A lease looked at less than `reconcile_interval_s` ago is not looked at again (the index is in that
  order, so the pass ends there): the watcher settles an ended execution at once from its status event,
  and reconciliation is the backstop for an event that was lost, so each running job costs one
  DescribeExecution per interval, not one per run.
- Leases younger than the grace period are skipped: the receiver that wrote one may still be about to
  start its execution. The settings require the grace to outlast the receiver's timeout, so after it
  that invocation is dead (and an execution started later by an answer that got lost finds its lease
  released and exits without running: the workflow's own start check).
- The index is eventually consistent: before acting, the lease is read again (consistently) and acted
  on only if it is still ACTIVE, still this execution's and still past the grace.
- Calls are rate-limited and capped per run.
- A sweep that looked at every lease due stops the next one for `reconcile_grace_s`: a lease received
  after it is not due for a look before then, and one due meanwhile is looked at that much later at
  most (between one grace and two after its receive, between one interval and an interval and a grace
  after its last look). So an idle or steady table costs the index's queries once per grace, not once
  per run. A sweep cut short (the cap, the deadline, a throttle) goes on at the next run.
"""

from __future__ import annotations

from dataclasses import dataclass

from longjobs.engine.clock import Clock
from longjobs.engine.execution import RUNNING_STATUSES, execution_status
from longjobs.engine.extender.service import Extender
from longjobs.engine.lease import Lease, LeaseStatus
from longjobs.engine.observability import logger
from longjobs.engine.settle import settle_ended
from longjobs.engine.visibility import FailureClass, classify_exception


@dataclass
class ReconcileReport:
    checked: int = 0
    running: int = 0
    released: int = 0
    completed: int = 0
    failed: int = 0


class RateLimiter:
    """At most `rate` calls per second on the given clock (a few lines; no dependency for it)."""

    def __init__(self, rate: float, clock: Clock) -> None:
        self._interval = 1.0 / rate
        self._clock = clock
        self._next = clock.now()

    def wait(self) -> None:
        now = self._clock.now()
        if now < self._next:
            self._clock.sleep(self._next - now)
        self._next = max(now, self._next) + self._interval


def reconcile(ext: Extender, *, deadline: float) -> ReconcileReport:
    """Look at the least recently checked leases past the grace period; settle those whose execution is over."""
    report = ReconcileReport()
    settings = ext.settings
    if ext.stepfunctions is None or settings.reconcile_max_per_run == 0:
        return report
    grace = settings.reconcile_grace_s
    start = ext.clock.now()
    if start < ext.sweeps.next_at:
        return report
    limiter = RateLimiter(settings.reconcile_rate_per_s, ext.clock)
    candidates = ext.store.reconcile_candidates(settings.reconcile_max_per_run)
    whole = len(candidates) < settings.reconcile_max_per_run  # the sweep saw every lease that may be due
    for lease in candidates:
        now = ext.clock.now()
        if now >= deadline:
            whole = False
            break
        if lease.checked_at is not None and now - lease.checked_at < settings.reconcile_interval_s:
            whole = True
            break  # looked at recently, and so is every lease after it in the index
        if now - lease.received_at < grace:
            continue
        limiter.wait()
        try:
            status = execution_status(ext.stepfunctions, lease.execution_arn)
        except Exception as exc:
            report.failed += 1
            if classify_exception(exc) is FailureClass.THROTTLED:
                logger.warning("reconciliation throttled; resuming next run", extra={"error": str(exc)})
                whole = False
                break
            logger.error("describe execution failed", extra={"message_id": lease.message_id, "error": str(exc)})
            continue
        report.checked += 1
        _mark_checked(ext, lease)
        if status in RUNNING_STATUSES:
            report.running += 1
            continue
        try:
            _settle(ext, lease, status, report)
        except Exception as exc:
            report.failed += 1
            logger.warning("could not settle lease", extra={"message_id": lease.message_id, "error": str(exc)})
    ext.sweeps.next_at = start + grace if whole else 0.0
    return report


def _mark_checked(ext: Extender, lease: Lease) -> None:
    try:
        ext.store.mark_checked(lease, ext.clock.now())
    except Exception as exc:  # a note only: the lease is simply looked at again sooner
        logger.warning("could not note the reconciliation", extra={"message_id": lease.message_id, "error": str(exc)})


def _settle(ext: Extender, seen: Lease, status: str, report: ReconcileReport) -> None:
    fresh = ext.store.get(seen.message_id)
    if (
        fresh is None
        or not fresh.active
        or fresh.execution_arn != seen.execution_arn
        or ext.clock.now() - fresh.received_at < ext.settings.reconcile_grace_s
    ):
        return  # the index was behind: a newer receive or a settlement changed the lease
    settled = settle_ended(fresh, status, store=ext.store, visibility=ext.visibility, sqs=ext.sqs, clock=ext.clock)
    if settled is None:
        return
    if settled.status is LeaseStatus.SUCCEEDED:
        report.completed += 1
    else:
        report.released += 1
        logger.info("lease settled by reconciliation", extra={"message_id": seen.message_id, "status": status})
