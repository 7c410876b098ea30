"""SQS's message move tasks (dead-letter queue redrive) for the offline runtime, which moto lacks.

`StartMessageMoveTask`, `ListMessageMoveTasks` and `CancelMessageMoveTask` as AWS documents them
(https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_StartMessageMoveTask.html and
the two pages beside it), on moto's in-process SQS backend; `longjobs.offline.gateway` routes the calls here.

- The source must be a dead-letter queue: some queue's redrive policy names it (else
  `InvalidParameterValue`, "Source queue must be configured as a Dead Letter Queue.").
- Without `DestinationArn` each message goes back to the queue SQS dead-lettered it from. SQS knows that
  only for messages its redrive policy moved: one sent to the DLQ with `SendMessage` (as the receiver
  sends a job whose attempts ran out) fails the task with `CouldNotDetermineMessageSource`, as in AWS
  (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/troubleshooting-dlq-redrive.html);
  name the jobs queue with `DestinationArn` for those.
- `MaxNumberOfMessagesPerSecond` (1..500) paces the task; without it, it moves as fast as it can.
- A task counts the DLQ's visible messages when it starts (`ApproximateNumberOfMessagesToMove`) and moves
  at most that many, oldest first; in-flight messages stay. A moved message is a new message on its
  destination (new id, receive count 0) with the body and message attributes it had.
- Status: RUNNING, then COMPLETED, FAILED (with `FailureReason`), or CANCELLING then CANCELLED. Only one
  active task per source; `ListMessageMoveTasks` gives the most recent (1 by default, at most 10), with
  `TaskHandle` only while RUNNING and `DestinationArn`/`MaxNumberOfMessagesPerSecond` only when given.
- Errors carry the codes and messages AWS answers (as recorded against AWS in LocalStack's snapshot tests
  of this API).

Where several queues share one DLQ, the origin of a message moved by a redrive policy cannot be told
apart here (moto does not record it): such a DLQ's messages need a `DestinationArn`.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

RUNNING, COMPLETED, CANCELLING, CANCELLED, FAILED = "RUNNING", "COMPLETED", "CANCELLING", "CANCELLED", "FAILED"
ACTIVE = frozenset({RUNNING, CANCELLING})
MAX_RATE = 500
"""AWS's ceiling on `MaxNumberOfMessagesPerSecond`."""
MAX_LISTED = 10
MOVE_HOLD_S = 30
"""How long a message being moved stays hidden in the DLQ (a move takes microseconds here)."""
NO_SOURCE = "CouldNotDetermineMessageSource"
NO_QUEUE = "AWS.SimpleQueueService.NonExistentQueue"
MOVED, DRAINED = "moved", "drained"
"""What moving one message did, besides failing."""
ORIGIN_RECORDER = "_longjobs_dead_letter_origins"
"""Marks a moto DLQ whose arrivals are recorded (the attribute holds the recording `add_message`)."""

Backend = Any
"""moto's `SQSBackend` of one account and region."""
Backends = Callable[[str, str], Backend]
Wait = Callable[[threading.Event, float], bool]


class MoveTaskError(Exception):
    """An SQS error answer: `code` as SQS's JSON protocol names the shape, `query_code` as its
    `x-amzn-query-error` header (and the AWS CLI) names it."""

    def __init__(self, code: str, message: str, *, status: int = 400, query_code: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.query_code = query_code or code


def invalid(message: str) -> MoveTaskError:
    return MoveTaskError("InvalidParameterValue", message)


def not_found(message: str) -> MoveTaskError:
    return MoveTaskError("ResourceNotFoundException", message, status=404)


@dataclass(frozen=True)
class QueueArn:
    region: str
    account: str
    name: str

    @classmethod
    def parse(cls, arn: Any, parameter: str) -> QueueArn:
        parts = arn.split(":") if isinstance(arn, str) else []
        if len(parts) != 6 or parts[0] != "arn" or parts[2] != "sqs" or not all(parts[3:]):
            raise invalid(f"Value {arn} for parameter {parameter} is invalid. Reason: not an SQS queue ARN.")
        return cls(region=parts[3], account=parts[4], name=parts[5])


def encode_handle(task_id: str, source_arn: str) -> str:
    """AWS's task handle form: base64 of `{"taskId": ..., "sourceArn": ...}`."""
    return base64.b64encode(json.dumps({"taskId": task_id, "sourceArn": source_arn}).encode()).decode()


def decode_handle(handle: Any) -> tuple[str, str]:
    try:
        data = json.loads(base64.b64decode(str(handle), validate=True))
        return str(data["taskId"]), str(data["sourceArn"])
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise invalid("Value for parameter TaskHandle is invalid.") from None


@dataclass
class MoveTask:
    task_id: str
    source_arn: str
    destination_arn: str | None
    rate: int | None
    started_ms: int
    to_move: int
    status: str = RUNNING
    moved: int = 0
    failure_reason: str | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)

    @property
    def handle(self) -> str:
        return encode_handle(self.task_id, self.source_arn)

    def entry(self) -> dict[str, Any]:
        """The task as a `ListMessageMoveTasksResultEntry`."""
        entry: dict[str, Any] = {
            "SourceArn": self.source_arn,
            "Status": self.status,
            "ApproximateNumberOfMessagesMoved": self.moved,
            "ApproximateNumberOfMessagesToMove": self.to_move,
            "StartedTimestamp": self.started_ms,
        }
        if self.status == RUNNING:
            entry["TaskHandle"] = self.handle
        if self.destination_arn is not None:
            entry["DestinationArn"] = self.destination_arn
        if self.rate is not None:
            entry["MaxNumberOfMessagesPerSecond"] = self.rate
        if self.failure_reason is not None:
            entry["FailureReason"] = self.failure_reason
        return entry


def moto_backends(account: str, region: str) -> Backend:
    from moto.sqs.models import sqs_backends

    return sqs_backends[account][region]


def _spawn(run: Callable[[], None]) -> None:
    threading.Thread(target=run, name="sqs-move-task", daemon=True).start()


def _wait(cancelled: threading.Event, seconds: float) -> bool:
    return cancelled.wait(seconds)


class MoveTasks:
    """Every move task of the local service. `spawn` runs a task's mover (a thread by default; a test runs
    it in place); `clock` and `wait` pace it (`wait(event, s)` returns True when the event was set)."""

    def __init__(
        self,
        backends: Backends = moto_backends,
        *,
        spawn: Callable[[Callable[[], None]], None] = _spawn,
        clock: Callable[[], float] = time.monotonic,
        wait: Wait = _wait,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.backends = backends
        self.spawn = spawn
        self.clock = clock
        self.wait = wait
        self.now_ms = now_ms
        self._lock = threading.Lock()
        self._tasks: list[MoveTask] = []
        self.origins: dict[str, str] = {}
        """message id in a DLQ -> ARN of the queue a redrive policy moved it from."""

    # The three operations, each taking the request's JSON and returning the response's.

    def start(self, request: Mapping[str, Any]) -> dict[str, Any]:
        source_arn = request.get("SourceArn")
        if not source_arn:
            raise MoveTaskError("MissingParameter", "The request must contain the parameter SourceArn.")
        source = QueueArn.parse(source_arn, "SourceArn")
        backend = self.backends(source.account, source.region)
        source_queue = backend.queues.get(source.name)
        if source_queue is None:
            raise not_found("The resource that you specified for the SourceArn parameter doesn't exist.")
        self.watch(backend)
        if not self._sources_of(backend, source_queue):
            raise invalid("Source queue must be configured as a Dead Letter Queue.")
        rate = request.get("MaxNumberOfMessagesPerSecond")
        if rate is not None and (not isinstance(rate, int) or not 1 <= rate <= MAX_RATE):
            raise invalid(
                f"Value {rate} for parameter MaxNumberOfMessagesPerSecond is invalid. "
                f"Reason: must be between 1 and {MAX_RATE}."
            )
        destination_arn = request.get("DestinationArn")
        if destination_arn is not None:
            destination = QueueArn.parse(destination_arn, "DestinationArn")
            queue = self.backends(destination.account, destination.region).queues.get(destination.name)
            if queue is None:
                raise not_found("The resource that you specified for the DestinationArn parameter doesn't exist.")
            if bool(queue.fifo_queue) != bool(source_queue.fifo_queue):
                raise invalid("The source queue and the destination queue must be of the same type (FIFO or standard).")
        with self._lock:
            if any(t.source_arn == source_arn and t.status in ACTIVE for t in self._tasks):
                raise invalid(
                    "There is already a task running. Only one active task is allowed for a source queue arn "
                    "at a given time."
                )
            task = MoveTask(
                task_id=str(uuid.uuid4()),
                source_arn=source_arn,
                destination_arn=destination_arn,
                rate=rate,
                started_ms=self.now_ms(),
                to_move=len(source_queue.messages),
            )
            self._tasks.append(task)
        self.spawn(lambda: self.run(task))
        return {"TaskHandle": task.handle}

    def list_tasks(self, request: Mapping[str, Any]) -> dict[str, Any]:
        source_arn = request.get("SourceArn")
        if not source_arn:
            raise MoveTaskError("MissingParameter", "The request must contain the parameter SourceArn.")
        source = QueueArn.parse(source_arn, "SourceArn")
        if source.name not in self.backends(source.account, source.region).queues:
            raise not_found("The resource that you specified for the SourceArn parameter doesn't exist.")
        limit = request.get("MaxResults", 1)
        if not isinstance(limit, int) or not 1 <= limit <= MAX_LISTED:
            raise invalid(
                f"Value {limit} for parameter MaxResults is invalid. Reason: must be between 1 and {MAX_LISTED}."
            )
        with self._lock:
            tasks = [t for t in self._tasks if t.source_arn == source_arn]
            return {"Results": [t.entry() for t in reversed(tasks[-limit:])]}

    def cancel(self, request: Mapping[str, Any]) -> dict[str, Any]:
        task_id, source_arn = decode_handle(request.get("TaskHandle"))
        source = QueueArn.parse(source_arn, "SourceArn")
        if source.name not in self.backends(source.account, source.region).queues:
            raise not_found("The resource that you specified for the SourceArn parameter doesn't exist.")
        with self._lock:
            task = next((t for t in self._tasks if t.task_id == task_id and t.source_arn == source_arn), None)
            if task is None:
                raise not_found("Task does not exist.")
            if task.status != RUNNING:
                raise invalid(f"Only a task in status RUNNING can be cancelled; this one is {task.status}.")
            task.status = CANCELLING
            task.cancelled.set()
            return {"ApproximateNumberOfMessagesMoved": task.moved}

    def stop(self) -> None:
        """Cancel every active task (the service stops) and forget them all (moto's state was reset)."""
        with self._lock:
            for task in self._tasks:
                task.cancelled.set()
            self._tasks.clear()
            self.origins.clear()

    # The mover.

    def run(self, task: MoveTask) -> None:
        """Move the task's messages until its count is reached, the DLQ has no visible one left, a message
        cannot be moved (FAILED), or it is cancelled."""
        source = QueueArn.parse(task.source_arn, "SourceArn")
        backend = self.backends(source.account, source.region)
        started = self.clock()
        reason: str | None = None
        while task.moved < task.to_move and not task.cancelled.is_set():
            if task.rate is not None:  # the n-th message no earlier than n / rate after the start
                delay = started + task.moved / task.rate - self.clock()
                if delay > 0 and self.wait(task.cancelled, delay):
                    break
            step = self._move_one(task, backend, source)
            if step == DRAINED:
                break
            if step != MOVED:
                reason = step
                break
        with self._lock:
            if task.cancelled.is_set():
                task.status = CANCELLED
            else:
                task.status, task.failure_reason = (FAILED, reason) if reason else (COMPLETED, None)

    def _move_one(self, task: MoveTask, backend: Backend, source: QueueArn) -> str:
        """Move the DLQ's oldest visible message: `MOVED`, `DRAINED` when it has none visible, else the
        failure reason (the message then stays in the DLQ, visible again)."""
        from moto.sqs.exceptions import QueueDoesNotExist

        try:
            received = backend.receive_message(source.name, 1, 0, MOVE_HOLD_S, ["All"])
        except QueueDoesNotExist:
            return NO_QUEUE
        if not received:
            return DRAINED
        message = received[0]
        destination_arn = task.destination_arn or self.origins.get(message.id)
        if destination_arn is None:
            backend.change_message_visibility(source.name, message.receipt_handle, 0)
            return NO_SOURCE
        destination = QueueArn.parse(destination_arn, "DestinationArn")
        target = self.backends(destination.account, destination.region)
        try:
            fifo = bool(target.get_queue(destination.name).fifo_queue)
            target.send_message(
                destination.name,
                message.body,
                message_attributes=dict(message.message_attributes),
                group_id=message.group_id if fifo else None,
                deduplication_id=(message.deduplication_id or message.id) if fifo else None,
            )
        except QueueDoesNotExist:
            backend.change_message_visibility(source.name, message.receipt_handle, 0)
            return NO_QUEUE
        backend.delete_message(source.name, message.receipt_handle)
        self.origins.pop(message.id, None)
        task.moved += 1
        return MOVED

    # Where dead letters came from.

    def watch(self, backend: Backend) -> None:
        """Record, from now on, which queue each message a redrive policy moves into a DLQ comes from.

        moto moves such a message (the same object) with `add_message` after it has been received at least
        `maxReceiveCount` times; a message sent to the DLQ has never been received when it is added. So a
        message added with a receive count above zero was moved by a redrive policy: its origin is the
        DLQ's source queue, when there is exactly one."""
        for queue in list(backend.queues.values()):
            dlq = queue.dead_letter_queue
            if dlq is None or getattr(dlq, ORIGIN_RECORDER, None) is not None:
                continue
            recorder = self._recorder(backend, dlq, dlq.add_message)
            setattr(dlq, ORIGIN_RECORDER, recorder)
            dlq.add_message = recorder

    def _recorder(self, backend: Backend, dlq: Any, add: Callable[[Any], None]) -> Callable[[Any], None]:
        def add_message(message: Any) -> None:
            if message.approximate_receive_count > 0:
                sources = self._sources_of(backend, dlq)
                if len(sources) == 1:
                    self.origins[message.id] = sources[0].queue_arn
            add(message)

        return add_message

    @staticmethod
    def _sources_of(backend: Backend, dlq: Any) -> list[Any]:
        """The queues whose redrive policy targets `dlq`."""
        return [
            queue
            for queue in list(backend.queues.values())
            if queue is not dlq
            and queue.redrive_policy
            and queue.redrive_policy.get("deadLetterTargetArn") == dlq.queue_arn
        ]


__all__ = ["MoveTaskError", "MoveTasks"]
