"""Reconciliation: release ACTIVE leases whose execution has ended, or never started.

The watcher releases a message the moment its execution fails, but status events are best-effort
(and do not exist offline), so the extender also asks Step Functions about its leases now and then.
Leases younger than the grace period are skipped (the receiver may still be between writing the
lease and starting the execution). Calls are rate-limited and capped per run; leases are visited
soonest-due first, and renewal moves a visited lease back, so successive runs rotate through all.
"""

from __future__ import annotations

from dataclasses import dataclass

from functions.clock import Clock
from functions.execution import execution_status
from functions.extender.service import Extender
from functions.lease import Lease, LeaseStatus
from functions.observability import logger
from functions.settle import RUNNING_STATUSES, SettleError, settle_ended
from functions.visibility import FailureClass, classify_exception


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
    """Check the oldest-due leases past the grace period; settle those whose execution is over."""
    report = ReconcileReport()
    settings = ext.settings
    if ext.stepfunctions is None or settings.reconcile_max_per_run == 0:
        return report
    now = ext.clock.now()
    candidates = [lease for lease in ext.store.due(None) if now - lease.received_at >= settings.reconcile_grace_s]
    limiter = RateLimiter(settings.reconcile_rate_per_s, ext.clock)
    for lease in candidates[: settings.reconcile_max_per_run]:
        if ext.clock.now() >= deadline:
            break
        limiter.wait()
        try:
            status = execution_status(ext.stepfunctions, lease.execution_arn)
        except Exception as exc:
            report.failed += 1
            if classify_exception(exc) is FailureClass.THROTTLED:
                logger.warning("reconciliation throttled; resuming next run", extra={"error": str(exc)})
                break
            logger.error("describe execution failed", extra={"message_id": lease.message_id, "error": str(exc)})
            continue
        report.checked += 1
        if status in RUNNING_STATUSES:
            report.running += 1
            continue
        try:
            _settle(ext, lease, status, report)
        except SettleError as exc:
            report.failed += 1
            logger.warning("could not settle lease", extra={"message_id": lease.message_id, "error": str(exc)})
    return report


def _settle(ext: Extender, lease: Lease, status: str, report: ReconcileReport) -> None:
    settled = settle_ended(lease, status, store=ext.store, visibility=ext.visibility, sqs=ext.sqs, clock=ext.clock)
    if settled is None:
        return
    if settled.status is LeaseStatus.SUCCEEDED:
        report.completed += 1
    else:
        report.released += 1
        logger.info("lease settled by reconciliation", extra={"message_id": lease.message_id, "status": status})
