"""Step Functions' "Execution Status Change" events, delivered to the real watcher as EventBridge would.

moto emits no events, so this thread watches the state machine's executions (`ListExecutions` every
`poll_s`) and, for each execution that ends in a status the stack's rule forwards (`FAILED`,
`TIMED_OUT`, `ABORTED`: `longjobs.construct.functions.WATCHED_STATUSES`), delivers one EventBridge-shaped event to
the watcher handler, best effort and a little late (0.5 to 1.5 s, seeded). A `drop_status_events`
fault drops events with its probability; reconciliation in the extender is then what settles.

EventBridge invokes the watcher asynchronously: a failed invocation (an exception, or
`InvocationCrashed`) is retried twice, as Lambda retries an async invocation, with the delays
compressed from minutes to `retry_delay_s`.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from longjobs.engine.watcher.models import status_change_envelope
from longjobs.offline.emulator import ACCOUNT, REGION
from longjobs.offline.lambdas import InvocationCrashed

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient

    from longjobs.offline.faults import Faults

log = logging.getLogger(__name__)

ASYNC_RETRIES = 2
"""Lambda retries a failed asynchronous invocation twice."""


def watched_statuses() -> frozenset[str]:
    """The statuses the stack's EventBridge rule sends to the watcher: every end (imported late: the CDK
    loads slowly)."""
    from longjobs.construct.functions import WATCHED_STATUSES

    return frozenset(WATCHED_STATUSES)


def _millis(value: Any) -> int | None:
    return int(value.timestamp() * 1000) if isinstance(value, datetime) else None


def status_change_event(
    execution: Mapping[str, Any], *, account: str = ACCOUNT, region: str = REGION
) -> dict[str, Any]:
    """The event EventBridge delivers for an ended execution, from its `DescribeExecution`."""
    stopped = execution.get("stopDate")
    when = stopped if isinstance(stopped, datetime) else datetime.now(UTC)
    detail = {
        "executionArn": execution["executionArn"],
        "stateMachineArn": execution["stateMachineArn"],
        "name": execution["name"],
        "status": execution["status"],
        "startDate": _millis(execution.get("startDate")),
        "stopDate": _millis(stopped),
        "input": execution.get("input"),
        "output": execution.get("output"),
        "error": execution.get("error"),
        "cause": execution.get("cause"),
    }
    return status_change_envelope(detail, event_id=str(uuid.uuid4()), at=when, account=account, region=region)


@dataclass(order=True)
class _Pending:
    due: float
    seq: int
    event: dict[str, Any] = field(compare=False)
    attempt: int = field(default=0, compare=False)


class StatusEvents(threading.Thread):
    """Notices ended executions and delivers their events to `deliver` (the watcher's invocation)."""

    def __init__(
        self,
        stepfunctions: SFNClient,
        state_machine_arn: str,
        deliver: Callable[[dict[str, Any]], object],
        faults: Faults,
        *,
        statuses: Collection[str],
        poll_s: float = 0.5,
        retry_delay_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name="status-events", daemon=True)
        self.stepfunctions = stepfunctions
        self.state_machine_arn = state_machine_arn
        self.deliver = deliver
        self.faults = faults
        self.statuses = frozenset(statuses)
        self.poll_s = poll_s
        self.retry_delay_s = retry_delay_s
        self.clock = clock
        self.stopped = threading.Event()
        self.ended: set[str] = set()
        self.delivered = 0
        self.failed = 0
        self.given_up = 0
        self.dropped = 0
        self._pending: list[_Pending] = []
        self._seq = itertools.count()

    def stop(self) -> None:
        """Ask the thread to end; `join()` waits for it."""
        self.stopped.set()

    def run(self) -> None:
        next_poll = self.clock()
        while not self.stopped.is_set():
            now = self.clock()
            if now >= next_poll:
                try:
                    self.notice()
                except Exception:
                    log.exception("listing executions failed")
                next_poll = now + self.poll_s
            self.deliver_due()
            wake = min([next_poll, *(p.due for p in self._pending[:1])])
            self.stopped.wait(max(0.0, wake - self.clock()))

    @property
    def pending(self) -> int:
        return len(self._pending)

    def deliver_due(self) -> None:
        """Invoke the watcher with each event whose time has come (retries included)."""
        while self._pending and self._pending[0].due <= self.clock() and not self.stopped.is_set():
            self._invoke(heapq.heappop(self._pending))

    def notice(self) -> None:
        """Queue one event per execution that ended since the last look, in a watched status."""
        for page in self.stepfunctions.get_paginator("list_executions").paginate(
            stateMachineArn=self.state_machine_arn
        ):
            for execution in page["executions"]:
                arn = execution["executionArn"]
                if execution["status"] == "RUNNING" or arn in self.ended:
                    continue
                self.ended.add(arn)
                if execution["status"] not in self.statuses:
                    continue
                described = self.stepfunctions.describe_execution(executionArn=arn)
                if self.faults.drop_event():
                    self.dropped += 1
                    log.info("status event of %s (%s) dropped", execution["name"], execution["status"])
                    continue
                event = status_change_event(dict(described))
                due = self.clock() + self.faults.event_delay()
                heapq.heappush(self._pending, _Pending(due, next(self._seq), event))

    def _invoke(self, pending: _Pending) -> None:
        try:
            self.deliver(pending.event)
        except (Exception, InvocationCrashed) as exc:
            self.failed += 1
            if pending.attempt >= ASYNC_RETRIES:
                self.given_up += 1
                log.error("watcher failed on %s after %d retries: %s", pending.event["resources"], ASYNC_RETRIES, exc)
                return
            log.warning("watcher invocation failed (%s); retried in %g s", exc, self.retry_delay_s)
            retry = _Pending(self.clock() + self.retry_delay_s, next(self._seq), pending.event, pending.attempt + 1)
            heapq.heappush(self._pending, retry)
            return
        self.delivered += 1
