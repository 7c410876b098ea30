"""SQS's message move tasks (a DLQ redrive) in the simulated SQS: `StartMessageMoveTask`,
`ListMessageMoveTasks`, and the moving itself, which the world runs at each task's rate."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from longjobs.sim.aws.base import client_error
from longjobs.sim.aws.queue import FakeQueue, Message


@dataclass
class MoveTask:
    """A message move task (`StartMessageMoveTask`): the source's visible messages when it started, moved
    oldest first at `rate` a second, each as a new message; RUNNING, then COMPLETED or FAILED."""

    handle: str
    source: FakeQueue
    destination: FakeQueue | None
    rate: float
    to_move: int
    moved: int = 0
    status: str = "RUNNING"
    failure: str | None = None


MOVE_RATE_DEFAULT = 100.0
"""Messages a second of a move task started without `MaxNumberOfMessagesPerSecond` ("system optimized":
AWS names no figure; at most 500 when given)."""
MOVE_RATE_MAX = 500


class MoveTaskOperations:
    """The move-task operations of `FakeSqs` (its queues, its request counter and its sends)."""

    queues: dict[str, FakeQueue]
    move_tasks: list[MoveTask]
    on_move_task: Callable[[MoveTask], None] | None
    on_moved: Callable[[FakeQueue, Message, Message], None] | None

    if TYPE_CHECKING:  # FakeSqs's own

        def _count(self, operation: str) -> None: ...

        def put(
            self,
            queue: FakeQueue,
            body: str,
            attributes: Any = None,
            delay_s: int = 0,
            *,
            group_id: str | None = None,
            dedup_id: str | None = None,
        ) -> str: ...

    def _by_arn(self, arn: str) -> FakeQueue | None:
        return next((queue for queue in self.queues.values() if queue.arn == arn), None)

    def _existing(self, operation: str, arn: Any, parameter: str) -> FakeQueue:
        """The queue of a move task's ARN parameter, or SQS's error naming the parameter."""
        queue = self._by_arn(str(arn or ""))
        if queue is None:
            raise client_error(
                operation,
                "ResourceNotFoundException",
                f"The resource that you specified for the {parameter} parameter doesn't exist.",
            )
        return queue

    def start_message_move_task(self, **request: Any) -> dict[str, Any]:
        """A DLQ redrive, as AWS documents it (API_StartMessageMoveTask, and the SQS developer guide's
        "Configure a dead-letter queue redrive"): the source must be some queue's dead-letter queue; one
        active task per source; without `DestinationArn` each message goes back to the queue whose redrive
        policy moved it, and a message sent to the DLQ by `SendMessage` fails the task
        (`CouldNotDetermineMessageSource`, "Troubleshooting DLQ redrive"). A moved message is a new
        message (new id, receive count 0, its retention anew) with its body and attributes."""
        self._count("StartMessageMoveTask")
        source = self._existing("StartMessageMoveTask", request.get("SourceArn"), "SourceArn")
        if not any(queue.redrive is not None and queue.redrive[0] is source for queue in self.queues.values()):
            raise client_error(
                "StartMessageMoveTask",
                "InvalidParameterValue",
                "Source queue must be configured as a Dead Letter Queue.",
            )
        destination = None
        if request.get("DestinationArn") is not None:
            destination = self._existing("StartMessageMoveTask", request["DestinationArn"], "DestinationArn")
        rate = request.get("MaxNumberOfMessagesPerSecond")
        if rate is not None and not 1 <= int(rate) <= MOVE_RATE_MAX:
            raise client_error(
                "StartMessageMoveTask",
                "InvalidParameterValue",
                f"Value {rate} for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: must be between 1 "
                f"and {MOVE_RATE_MAX}.",
            )
        if any(task.source is source and task.status == "RUNNING" for task in self.move_tasks):
            raise client_error(
                "StartMessageMoveTask",
                "InvalidParameterValue",
                "There is already a task running. Only one active task is allowed for a source queue arn at a "
                "given time.",
            )
        visible, _, _ = source.counts()
        task = MoveTask(
            f"task-{len(self.move_tasks) + 1}", source, destination, float(rate or MOVE_RATE_DEFAULT), visible
        )
        self.move_tasks.append(task)
        if self.on_move_task is not None:
            self.on_move_task(task)
        return {"TaskHandle": task.handle}

    def list_message_move_tasks(self, **request: Any) -> dict[str, Any]:
        """The source's most recent tasks, newest first (`MaxResults`: 1 by default, at most 10)."""
        self._count("ListMessageMoveTasks")
        source = self._existing("ListMessageMoveTasks", request.get("SourceArn"), "SourceArn")
        tasks = [task for task in reversed(self.move_tasks) if task.source is source]
        results = []
        for task in tasks[: int(request.get("MaxResults", 1))]:
            result: dict[str, Any] = {
                "Status": task.status,
                "SourceArn": source.arn,
                "ApproximateNumberOfMessagesMoved": task.moved,
                "ApproximateNumberOfMessagesToMove": task.to_move,
            }
            if task.status == "RUNNING":
                result["TaskHandle"] = task.handle
            if task.failure is not None:
                result["FailureReason"] = task.failure
            if task.destination is not None:
                result["DestinationArn"] = task.destination.arn
            results.append(result)
        return {"Results": results}

    def move_one(self, task: MoveTask) -> bool:
        """Move the task's next message (not a request of anyone's): whether the task runs on."""
        if task.status != "RUNNING":
            return False
        message = task.source.oldest_visible() if task.moved < task.to_move else None
        if message is None:
            task.status = "COMPLETED"
            return False
        destination = task.destination or (self._by_arn(message.origin) if message.origin else None)
        if destination is None:
            task.status, task.failure = "FAILED", "CouldNotDetermineMessageSource"
            return False
        task.source.remove(message)
        new_id = self.put(
            destination,
            message.body,
            message.attributes,
            group_id=message.group_id,
            dedup_id=message.message_id if destination.fifo else None,
        )
        task.moved += 1
        if self.on_moved is not None and new_id in destination.messages:
            self.on_moved(destination, destination.messages[new_id], message)
        return True
