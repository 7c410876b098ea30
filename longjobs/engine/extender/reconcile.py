"""Reconciliation: settle ACTIVE leases whose execution has ended, or never started.

The watcher releases a message the moment its execution fails, but status events are best-effort
(and do not exist offline), so the extender also asks Step Functions about its leases now and then.

- One list vouches for the running: a sweep reads the leases due (the `reconcile` index, every page of
  every shard: a page is one request, whatever it holds) and lists the state machine's RUNNING
  executions (ListExecutions, 1,000 a page). A lease whose execution is listed is healthy: no
  DescribeExecution, and no write. So a running job costs a share of a few requests per sweep, not a
  DescribeExecution and an UpdateItem each per `reconcile_interval_s`.
- The list proves nothing by absence: ListExecutions is eventually consistent ("best effort", it "may
  not reflect very recent updates"), so an execution started lately may be missing from it. A lease whose
  execution is not listed is asked about with DescribeExecution before anything is settled. That read
  is eventually consistent too, with the same words, but it comes after the grace (below): an execution
  missing from both reads minutes after its start is taken as never started. A list stale the other way
  (a closed execution still shown RUNNING) only puts its settlement off, and for an hour at most: AWS
  documents no bound on the lag, so the list vouches for a lease only within `LIST_VOUCHES_S` of its
  last look (one DescribeExecution an hour per running job).
  A list that fails (or is throttled, or runs out of time) vouches only for what its pages read showed
  (for nothing when its first page failed): every other lease due is asked about, as without a list,
  and the sweep goes on at the next run.
- Least recently looked at first: the index orders ACTIVE leases by when DescribeExecution last looked
  at them, and each look moves the lease to the back, so with more unlisted leases than
  `reconcile_max_per_run` (the cap on DescribeExecution calls a run) each is looked at within about
  (unlisted leases / cap) runs. A healthy lease is not written, so it keeps its place: which is why the
  sweep reads the whole index rather than its first `cap` leases, which would then be the same ones each
  time. A lease looked at less than `reconcile_interval_s` ago is not looked at again until then.
- Leases younger than the grace period are skipped: the receiver that wrote one may still be about to
  start its execution. The settings require the grace to outlast the receiver's timeout, so after it
  that invocation is dead (and an execution started later by an answer that got lost finds its lease
  released and exits without running: the workflow's own start check).
- The index is eventually consistent: before acting, the lease is read again (consistently) and acted
  on only if it is still ACTIVE, still this execution's and still past the grace.
- DescribeExecution calls are rate-limited and capped per run.
- A sweep that looked at every lease due stops the next one for `reconcile_grace_s`: a lease received
  after it is not due for a look before then, and one due meanwhile is looked at that much later at
  most. So an idle or steady table costs the index's queries and the list once per grace, not once per
  run. A sweep cut short (the cap, the deadline, a throttle, a failed list) goes on at the next run.
- Without the state machine's ARN in the settings there is no list: every lease due is asked about.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from longjobs.engine.clock import Clock
from longjobs.engine.execution import RUNNING_STATUSES, execution_status
from longjobs.engine.extender.service import Extender
from longjobs.engine.lease import Lease, LeaseStatus
from longjobs.engine.observability import logger
from longjobs.engine.settle import settle_ended
from longjobs.engine.visibility import FailureClass, classify_exception

LIST_PAGE = 1_000
"""ListExecutions' largest page (`maxResults`)."""


@dataclass
class ReconcileReport:
    checked: int = 0  # DescribeExecution looks
    running: int = 0  # of which still running
    released: int = 0
    completed: int = 0
    failed: int = 0
    listed: int = 0  # leases due that the list of running executions vouched for (no look)


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
    """Look at the leases past the grace period that the list of running executions does not vouch for,
    least recently looked at first; settle those whose execution is over."""
    report = ReconcileReport()
    settings = ext.settings
    if ext.stepfunctions is None or settings.reconcile_max_per_run == 0:
        return report
    grace = settings.reconcile_grace_s
    start = ext.clock.now()
    if start < ext.sweeps.next_at:
        return report
    due = [
        lease
        for lease in ext.store.index.reconcile_due(checked_before=start - grace)
        if start - lease.received_at >= grace
        and (lease.checked_at is None or start - lease.checked_at >= settings.reconcile_interval_s)
    ]
    whole = True  # the sweep saw every lease that may be due
    if due and settings.state_machine_arn:
        running, complete = _running_executions(ext, settings.state_machine_arn, deadline, report)
        if not complete:
            whole = False  # the leases a failed list did not vouch for are looked at; the sweep goes on next run
        vouched = {
            lease.message_id for lease in due if lease.execution_arn in running and _recently_looked_at(lease, start)
        }
        report.listed = len(vouched)
        due = [lease for lease in due if lease.message_id not in vouched]
    limiter = RateLimiter(settings.reconcile_rate_per_s, ext.clock)
    for looked, lease in enumerate(due):
        if looked >= settings.reconcile_max_per_run or ext.clock.now() >= deadline:
            whole = False
            break
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


LIST_VOUCHES_S = 3_600.0
"""How long after its last look (its receive, or a DescribeExecution) the list may vouch for a lease: a
list that stays stale (AWS documents no bound on its lag) still lets reconciliation find a dead execution
within this, at one DescribeExecution an hour per running job."""


def _recently_looked_at(lease: Lease, now: float) -> bool:
    return now - (lease.checked_at if lease.checked_at is not None else lease.received_at) < LIST_VOUCHES_S


def _running_executions(
    ext: Extender, state_machine_arn: str, deadline: float, report: ReconcileReport
) -> tuple[frozenset[str], bool]:
    """The ARNs of the state machine's executions ListExecutions shows RUNNING, page after page, and whether
    the list is complete. A page that fails, or time running out, ends it incomplete: what the pages read
    show still vouches for their leases (a listed execution was running a moment ago, and a stale list
    only delays), the others are left to DescribeExecution."""
    assert ext.stepfunctions is not None
    arns: set[str] = set()
    request: dict[str, Any] = {"stateMachineArn": state_machine_arn, "statusFilter": "RUNNING", "maxResults": LIST_PAGE}
    while True:
        if ext.clock.now() >= deadline:
            return frozenset(arns), False
        try:
            page = ext.stepfunctions.list_executions(**request)
        except Exception as exc:
            report.failed += 1
            logger.warning("could not list running executions; describing instead", extra={"error": str(exc)})
            return frozenset(arns), False
        arns.update(execution["executionArn"] for execution in page.get("executions", []))
        if not page.get("nextToken"):
            return frozenset(arns), True
        request["nextToken"] = page["nextToken"]


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
