"""The scenario's faults, applied to the running processor from outside its code.

- `throttle`: a botocore `before-send` hook on the extender's SQS client answers the operation with
  a real SQS throttling response (HTTP 400, `ThrottlingException`, query code `RequestThrottled`) with
  the given probability, seeded. botocore parses it and retries it as it would AWS's.
- `pause_extender`: the schedule skips its runs inside the window (lost scheduled runs).
- `abort_execution`, `duplicate_delivery`: timed actions on the job's current execution or message.
- `kill_worker`: the Spark worker goes silent on the job's first run (see `offline.worker`).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from botocore.awsrequest import AWSResponse

from functions.lease import LeaseStore
from offline.scenario import AbortExecution, DuplicateDelivery, KillWorker, PauseExtender, Scenario, Throttle

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

log = logging.getLogger(__name__)

ACTION_PATIENCE_S = 30.0
REDELIVERY_CHECK_S = 2.0
"""How long `duplicate_delivery` waits for the mapping to receive the message before making it visible again."""
"""How long a timed action waits for its job to reach the state it acts on."""


class _Body:
    """The raw stream an `AWSResponse` reads its content from."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Any:
        yield self._data


def throttling_response(url: str) -> AWSResponse:
    """SQS's answer to a throttled call on its JSON protocol."""
    body = json.dumps({"__type": "com.amazonaws.sqs#ThrottlingException", "message": "Rate exceeded"}).encode()
    headers = {
        "Content-Type": "application/x-amz-json-1.0",
        "x-amzn-query-error": "RequestThrottled;Sender",
        "x-amzn-RequestId": "offline-throttle",
    }
    return AWSResponse(url, 400, headers, _Body(body))


class Faults:
    """The faults of one run; times are seconds since `begin()`."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.start = time.time()
        self.rng = random.Random(scenario.seed)
        self.throttled = 0
        self.killed: set[str] = set()
        self.done: list[str] = []
        self._lock = threading.Lock()
        self.pauses = [f for f in scenario.faults if isinstance(f, PauseExtender)]

    def begin(self) -> float:
        """Fault times count from now (the jobs are being sent)."""
        self.start = time.time()
        return self.start

    def elapsed(self) -> float:
        return time.time() - self.start

    def extender_paused(self) -> bool:
        now = self.elapsed()
        return any(p.at_s <= now < p.at_s + p.for_s for p in self.pauses)

    def lapse_excused(self, at: float, period_s: float) -> bool:
        """A lapse the faults made unavoidable: inside a pause longer than one extender period (the
        engine survives one lost or late run by design) or until the first run after it."""
        t = at - self.start
        return any(p.for_s > period_s and p.at_s <= t < p.at_s + p.for_s + period_s for p in self.pauses)

    def duplicates_of(self, job_id: str) -> int:
        return sum(1 for f in self.scenario.faults if isinstance(f, DuplicateDelivery) and f.job == job_id)

    def install_throttle(self, sqs: SQSClient) -> None:
        for fault in self.scenario.faults:
            if isinstance(fault, Throttle):
                sqs.meta.events.register(f"before-send.sqs.{fault.operation}", self._throttle_hook(fault.probability))

    def _throttle_hook(self, probability: float) -> Callable[..., AWSResponse | None]:
        def hook(request: Any, **_: Any) -> AWSResponse | None:
            with self._lock:
                hit = self.rng.random() < probability
                if hit:
                    self.throttled += 1
            return throttling_response(request.url) if hit else None

        return hook

    def kill_after(self, job_id: str) -> float | None:
        """Seconds the worker lives into this job, on its first run only; None: it does not die."""
        with self._lock:
            for fault in self.scenario.faults:
                if isinstance(fault, KillWorker) and fault.job == job_id and job_id not in self.killed:
                    self.killed.add(job_id)
                    return fault.after_s
        return None


class TimedActions(threading.Thread):
    """Runs `abort_execution` and `duplicate_delivery` at their times, against the job's lease."""

    def __init__(
        self,
        faults: Faults,
        *,
        message_ids: Callable[[str], str],
        store: LeaseStore,
        sqs: SQSClient,
        stepfunctions: SFNClient,
    ) -> None:
        super().__init__(name="fault-actions", daemon=True)
        self.faults = faults
        self.message_ids = message_ids
        self.store = store
        self.sqs = sqs
        self.stepfunctions = stepfunctions
        self.stopped = threading.Event()

    def stop(self) -> None:
        """Ask the thread to end; `join()` waits for it."""
        self.stopped.set()

    def run(self) -> None:
        actions = sorted(
            (f for f in self.faults.scenario.faults if isinstance(f, AbortExecution | DuplicateDelivery)),
            key=lambda f: f.at_s,
        )
        for action in actions:
            if self.stopped.wait(max(0.0, action.at_s - self.faults.elapsed())):
                return
            try:
                self._apply(action)
            except Exception:
                log.exception("fault %s on %s failed", action.type, action.job)

    def _apply(self, action: AbortExecution | DuplicateDelivery) -> None:
        deadline = time.monotonic() + ACTION_PATIENCE_S
        message_id = self.message_ids(action.job)
        received: int | None = None  # the receive the duplicate must come after
        while not self.stopped.is_set() and time.monotonic() < deadline:
            lease = self.store.get(message_id)
            if lease is not None and lease.active and lease.execution_arn:
                if isinstance(action, DuplicateDelivery):
                    received = lease.receive_count if received is None else received
                    if self._redeliver(message_id, received):
                        self.faults.done.append(f"duplicate_delivery {action.job}")
                        return
                    continue
                if self._abort(lease.execution_arn):
                    self.faults.done.append(f"abort_execution {action.job}")
                    return
            self.stopped.wait(0.2)
        log.warning("fault %s on %s found no running job to act on", action.type, action.job)

    def _redeliver(self, message_id: str, receive_count: int) -> bool:
        """Make the message visible, as a lapse would, until the mapping has received it again.

        One `VisibilityTimeout=0` is not always enough: a renewal that lands before the mapping's next
        poll hides the message again. So it is repeated until the lease shows a newer receive."""
        lease = self.store.get(message_id)
        if lease is not None and lease.receive_count > receive_count:
            return True
        if lease is None or not lease.active:
            return False
        self.sqs.change_message_visibility(
            QueueUrl=lease.queue_url, ReceiptHandle=lease.receipt_handle, VisibilityTimeout=0
        )
        if self.stopped.wait(REDELIVERY_CHECK_S):
            return False
        lease = self.store.get(message_id)
        return lease is not None and lease.receive_count > receive_count

    def _abort(self, arn: str) -> bool:
        """StopExecution once the engine has entered a state (moto refuses to stop one before)."""
        try:
            events = self.stepfunctions.get_execution_history(executionArn=arn)["events"]
        except self.stepfunctions.exceptions.ExecutionDoesNotExist:
            return False
        if not any(event["type"].endswith("StateEntered") for event in events):
            return False
        self.stepfunctions.stop_execution(executionArn=arn, error="Operator", cause="abort_execution fault")
        return True
