"""Reconciliation: release ACTIVE leases whose execution has ended, or never started.

The watcher releases a message the moment its execution fails, but status events are best-effort
(and do not exist offline), so the extender also asks Step Functions about its leases now and then.
Leases younger than the grace period are skipped (the receiver may still be between writing the
lease and starting the execution). Calls are rate-limited and capped per run; leases are visited
soonest-due first, and renewal moves a visited lease back, so successive runs rotate through all.
"""

from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import ClientError

from functions.clock import Clock
from functions.extender.service import Extender
from functions.lease import Lease
from functions.observability import logger
from functions.settle import SettleError, complete, release
from functions.visibility import FailureClass, classify_exception

RUNNING_STATUSES = frozenset({"RUNNING", "PENDING_REDRIVE"})
NEVER_STARTED = "NEVER_STARTED"


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


def execution_status(ext: Extender, lease: Lease) -> str:
    """The execution's status, or NEVER_STARTED when it does not exist."""
    assert ext.stepfunctions is not None
    if not lease.execution_arn:
        return NEVER_STARTED
    try:
        return ext.stepfunctions.describe_execution(executionArn=lease.execution_arn)["status"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ExecutionDoesNotExist":
            return NEVER_STARTED
        raise


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
            status = execution_status(ext, lease)
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
    if status == "SUCCEEDED":
        # The workflow deletes and closes on success; an ACTIVE lease here means that last step was lost.
        if complete(lease, store=ext.store, sqs=ext.sqs, clock=ext.clock) is not None:
            report.completed += 1
        return
    reason = f"execution {status.lower().replace('_', ' ')}" if status != NEVER_STARTED else "execution never started"
    if release(lease, store=ext.store, visibility=ext.visibility, clock=ext.clock, reason=reason) is not None:
        report.released += 1
        logger.info("lease released by reconciliation", extra={"message_id": lease.message_id, "reason": reason})
