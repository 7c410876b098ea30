"""SQS: standard queues with visibility, receive counts, the 12 h limit, delays, retention and redrive."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

from botocore.exceptions import ClientError

from longjobs.engine.settings import SQS_MAX_RETENTION_S
from longjobs.sim.aws.base import REGION, SQS_MAX_VISIBILITY_S, Account, client_error
from longjobs.sim.aws.move_tasks import MoveTask, MoveTaskOperations
from longjobs.sim.aws.queue import FakeQueue, Message

FIFO_DEDUPLICATION_S = 300  # SQS drops a FIFO message whose deduplication id it saw in the last 5 minutes


def _size(body: str, attributes: Mapping[str, Any]) -> int:
    """A message's size as SQS counts it: the body, and every attribute's name, type and value
    (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html)."""
    total = len(body.encode())
    for name, value in attributes.items():
        payload = value.get("StringValue")
        total += len(name.encode()) + len(str(value["DataType"]).encode())
        total += len(payload.encode()) if payload is not None else len(value.get("BinaryValue") or b"")
    return total


class FakeSqs(MoveTaskOperations):
    """SQS's operations the processor calls, on `FakeQueue`s by URL."""

    def __init__(self, aws: Account) -> None:
        self._aws = aws
        self.queues: dict[str, FakeQueue] = {}
        self._ids = itertools.count(1)
        self.meta = SimpleNamespace(region_name=REGION)  # as a boto3 client's (code builds ARNs from it)
        self.on_receive: Callable[[FakeQueue, Message], None] | None = None
        self.on_dead_letter: Callable[[FakeQueue, Message], None] | None = None
        self.on_sent: Callable[[FakeQueue, Message], None] | None = None
        self.move_tasks: list[MoveTask] = []
        self.on_move_task: Callable[[MoveTask], None] | None = None  # runs the task (`move_one` at its rate)
        self.on_moved: Callable[[FakeQueue, Message, Message], None] | None = None  # (destination, new, old)

    def _count(self, operation: str) -> None:
        self._aws.calls[f"sqs.{operation}"] += 1

    def create_queue(
        self, name: str, *, visibility_timeout_s: int, retention_s: float = SQS_MAX_RETENTION_S
    ) -> FakeQueue:
        queue = FakeQueue(
            name,
            visibility_timeout_s=visibility_timeout_s,
            clock=self._aws.clock,
            rng=self._aws.rng,
            retention_s=retention_s,
        )
        self.queues[queue.url] = queue
        return queue

    def delete_queue(self, url: str) -> None:
        """A queue deleted, as CloudFormation deletes a resource a deploy removed: "any messages in the queue
        are no longer available", and a request naming it is refused (SQS, DeleteQueue)."""
        self.queues.pop(url)

    def _queue(self, operation: str, url: str) -> FakeQueue:
        queue = self.queues.get(url)
        if queue is None:
            raise client_error(operation, "AWS.SimpleQueueService.NonExistentQueue", "The queue does not exist")
        return queue

    def put(
        self,
        queue: FakeQueue,
        body: str,
        attributes: Mapping[str, Any] | None = None,
        delay_s: int = 0,
        *,
        group_id: str | None = None,
        dedup_id: str | None = None,
    ) -> str:
        """A send, without counting it as a request (the producer's). On a FIFO queue a message with the
        deduplication id (content-based when none is given) of one sent in the last 5 minutes is not
        added: its first message's id is answered."""
        now = self._aws.clock.now()
        if queue.fifo:
            dedup = dedup_id or hashlib.sha256(body.encode()).hexdigest()
            seen = queue.deduplicated.get(dedup)
            if seen is not None and now - seen[0] < FIFO_DEDUPLICATION_S:
                return seen[1]
        message_id = f"m{next(self._ids):07d}-0000-4000-8000-000000000000"
        job_key = None
        with contextlib.suppress(ValueError, AttributeError):
            job_key = json.loads(body).get("job_id")
        message = Message(message_id, body, dict(attributes or {}), now, now + delay_s, job_key)
        if queue.fifo:
            message.group_id, message.sequence = group_id, next(self._ids)
            queue.deduplicated[dedup] = (now, message_id)
        queue.add(message)
        return message_id

    def send_message(self, **request: Any) -> dict[str, Any]:
        self._count("SendMessage")
        queue = self._queue("SendMessage", request["QueueUrl"])
        return {"MessageId": self._send("SendMessage", queue, request)}

    def send_message_batch(self, **request: Any) -> dict[str, Any]:
        """Up to ten messages in one request; an entry SQS refuses is a failed entry, the others are sent.
        A batch of none, of more than ten, with an id twice, or longer in all than one message may be
        ("The maximum total payload size (the sum of the individual lengths of all of the batched
        messages)" is the message size limit, SendMessageBatch) is refused as a whole, as SQS does."""
        self._count("SendMessageBatch")
        queue = self._queue("SendMessageBatch", request["QueueUrl"])
        entries = request["Entries"]
        if not entries:
            raise client_error(
                "SendMessageBatch",
                "AWS.SimpleQueueService.EmptyBatchRequest",
                "There should be at least one SendMessageBatchRequestEntry in the request.",
            )
        if len(entries) > 10:
            raise client_error(
                "SendMessageBatch",
                "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
                f"Maximum number of entries per request are 10. You have sent {len(entries)}.",
            )
        ids = [entry["Id"] for entry in entries]
        if len(set(ids)) < len(ids):
            repeated = next(entry_id for entry_id in ids if ids.count(entry_id) > 1)
            raise client_error(
                "SendMessageBatch", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", f"Id {repeated} repeated."
            )
        total = sum(_size(entry["MessageBody"], entry.get("MessageAttributes") or {}) for entry in entries)
        if total > queue.maximum_message_size:  # AWS's limit on the batch's sum; moto has none
            raise client_error(
                "SendMessageBatch",
                "AWS.SimpleQueueService.BatchRequestTooLong",
                f"Batch requests cannot be longer than {queue.maximum_message_size} bytes. "
                f"You have sent {total} bytes.",
            )
        successful, failed = [], []
        for entry in entries:
            try:
                message_id = self._send("SendMessage", queue, entry)
            except ClientError as exc:
                error = exc.response["Error"]
                failed.append(
                    {"Id": entry["Id"], "Code": error["Code"], "Message": error["Message"], "SenderFault": True}
                )
            else:
                successful.append({"Id": entry["Id"], "MessageId": message_id})
        return {"Successful": successful, "Failed": failed}

    def _send(self, operation: str, queue: FakeQueue, request: Mapping[str, Any]) -> str:
        """One message sent (`SendMessage`'s request, or one entry of a batch): its id."""
        if queue.fifo and ("MessageGroupId" not in request or "DelaySeconds" in request):
            raise client_error(
                operation,
                "InvalidParameterValue" if "DelaySeconds" in request else "MissingParameter",
                "The request must contain the parameter MessageGroupId."
                if "DelaySeconds" not in request
                else "Value for parameter DelaySeconds is invalid. Reason: The request include parameter that is "
                "not valid for this queue type.",
            )
        size = _size(request["MessageBody"], request.get("MessageAttributes") or {})
        if size > queue.maximum_message_size:
            raise client_error(
                operation,
                "InvalidParameterValue",
                "One or more parameters are invalid. Reason: Message must be shorter than "
                f"{queue.maximum_message_size} bytes.",
            )
        message_id = self.put(
            queue,
            request["MessageBody"],
            request.get("MessageAttributes"),
            int(request.get("DelaySeconds", 0)),
            group_id=request.get("MessageGroupId"),
            dedup_id=request.get("MessageDeduplicationId"),
        )
        if (
            self.on_dead_letter is not None
            and queue.redrive is None
            and queue.name.removesuffix(".fifo").endswith("dlq")
        ):
            self.on_dead_letter(queue, queue.messages[message_id])
        if self.on_sent is not None and message_id in queue.messages:
            self.on_sent(queue, queue.messages[message_id])
        return message_id

    def receive_message(self, **request: Any) -> dict[str, Any]:
        self._count("ReceiveMessage")
        queue = self._queue("ReceiveMessage", request["QueueUrl"])
        messages = self.receive(queue, int(request.get("MaxNumberOfMessages", 1)), request)
        return {"Messages": messages} if messages else {}  # SQS leaves `Messages` out when none was received

    def receive(self, queue: FakeQueue, count: int, request: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Receive up to `count` visible messages (the caller counts the request)."""
        now = self._aws.clock.now()
        vt = int((request or {}).get("VisibilityTimeout", queue.visibility_timeout_s))
        # asked for by name or as "All"; the event source mapping (no request) always hands it to the function
        asked = (request or {}).get("AttributeNames") or (request or {}).get("MessageSystemAttributeNames") or []
        sent_asked = request is None or "All" in asked or "SentTimestamp" in asked
        out: list[dict[str, Any]] = []
        while len(out) < count:
            taken = queue.take_visible(count - len(out))
            if not taken:
                break
            for message in taken:
                if queue.redrive is not None and message.receive_count >= queue.redrive[1]:
                    dead, _ = queue.redrive
                    queue.remove(message)
                    # a standard queue's DLQ copy keeps its first send time (its retention runs on); FIFO's resets
                    sent_at = now if dead.fifo else message.sent_at
                    copy = Message(message.message_id, message.body, message.attributes, sent_at, now, message.job_key)
                    copy.group_id, copy.sequence, copy.origin = message.group_id, message.sequence, queue.arn
                    dead.add(copy)
                    if self.on_dead_letter is not None:
                        self.on_dead_letter(dead, message)
                    continue
                message.receive_count += 1
                message.handle = f"{message.message_id}#{message.receive_count}"
                message.received_at = now
                queue.hide(message, now + vt)
                self._aws.receives += 1
                if self.on_receive is not None:
                    self.on_receive(queue, message)
                attributes = {"ApproximateReceiveCount": str(message.receive_count)}
                if sent_asked:
                    attributes["SentTimestamp"] = str(int(message.sent_at * 1000))
                if queue.fifo:
                    attributes |= {"MessageGroupId": str(message.group_id), "SequenceNumber": str(message.sequence)}
                out.append(
                    {
                        "MessageId": message.message_id,
                        "ReceiptHandle": message.handle,
                        "Body": message.body,
                        "Attributes": attributes,
                        "MessageAttributes": dict(message.attributes),
                    }
                )
        return out

    def _held(self, operation: str, queue: FakeQueue, handle: str) -> Message:
        message_id = handle.partition("#")[0]
        message = queue.messages.get(message_id)
        if message is None or message.deleted:
            raise client_error(operation, "ReceiptHandleIsInvalid", f"The input receipt handle {handle} is not valid")
        if message.handle != handle:
            raise client_error(
                operation,
                "InvalidParameterValue",
                f"Value {handle} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.",
            )
        return message

    def _change(self, operation: str, queue: FakeQueue, handle: str, timeout: int) -> None:
        message = self._held(operation, queue, handle)
        now = self._aws.clock.now()
        if message.visible_at <= now:
            raise client_error(operation, "AWS.SimpleQueueService.MessageNotInflight", "Message not inflight")
        if now + timeout > message.received_at + SQS_MAX_VISIBILITY_S:
            raise client_error(
                operation,
                "InvalidParameterValue",
                f"Value {timeout} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for "
                "the message is beyond the limit [43200 seconds]",
            )
        queue.hide(message, now + timeout)

    def change_message_visibility(self, **request: Any) -> dict[str, Any]:
        self._count("ChangeMessageVisibility")
        queue = self._queue("ChangeMessageVisibility", request["QueueUrl"])
        queue.refresh()
        self._change("ChangeMessageVisibility", queue, request["ReceiptHandle"], int(request["VisibilityTimeout"]))
        return {}

    def change_message_visibility_batch(self, **request: Any) -> dict[str, Any]:
        self._count("ChangeMessageVisibilityBatch")
        queue = self._queue("ChangeMessageVisibilityBatch", request["QueueUrl"])
        queue.refresh()
        successful, failed = [], []
        for entry in request["Entries"]:
            try:
                self._change("ChangeMessageVisibility", queue, entry["ReceiptHandle"], int(entry["VisibilityTimeout"]))
            except ClientError as exc:
                error = exc.response["Error"]
                code = str(error["Code"]).removeprefix("AWS.SimpleQueueService.")
                failed.append({"Id": entry["Id"], "Code": code, "Message": error["Message"], "SenderFault": True})
            else:
                successful.append({"Id": entry["Id"]})
        return {"Successful": successful, "Failed": failed}

    def _delete(self, operation: str, queue: FakeQueue, handle: str) -> None:
        """Delete with the current handle. A handle SQS issued earlier (an older receive's, or the message's
        last one after it was deleted or moved to the DLQ) is accepted without deleting anything: "If you use
        an old ReceiptHandle, the request will succeed, but the message might not be deleted" (DeleteMessage);
        only a handle never issued is `ReceiptHandleIsInvalid`."""
        message_id, _, number = handle.partition("#")
        message = queue.messages.get(message_id)
        if message is not None and not message.deleted and message.handle == handle:
            queue.remove(message)
            return
        receives = message.receive_count if message is not None else queue.gone.get(message_id, 0)
        if not (number.isdigit() and 1 <= int(number) <= receives):
            raise client_error(operation, "ReceiptHandleIsInvalid", f"The input receipt handle {handle} is not valid")

    def delete_message(self, **request: Any) -> dict[str, Any]:
        self._count("DeleteMessage")
        self._delete("DeleteMessage", self._queue("DeleteMessage", request["QueueUrl"]), request["ReceiptHandle"])
        return {}

    def delete_message_batch(self, **request: Any) -> dict[str, Any]:
        self._count("DeleteMessageBatch")
        queue = self._queue("DeleteMessageBatch", request["QueueUrl"])
        successful, failed = [], []
        for entry in request["Entries"]:
            try:
                self._delete("DeleteMessage", queue, entry["ReceiptHandle"])
            except ClientError as exc:
                error = exc.response["Error"]
                failed.append(
                    {"Id": entry["Id"], "Code": error["Code"], "Message": error["Message"], "SenderFault": True}
                )
            else:
                successful.append({"Id": entry["Id"]})
        return {"Successful": successful, "Failed": failed}

    def get_queue_attributes(self, **request: Any) -> dict[str, Any]:
        self._count("GetQueueAttributes")
        queue = self._queue("GetQueueAttributes", request["QueueUrl"])
        visible, in_flight, delayed = queue.counts()
        known = {
            "ApproximateNumberOfMessages": str(visible),
            "ApproximateNumberOfMessagesNotVisible": str(in_flight),
            "ApproximateNumberOfMessagesDelayed": str(delayed),
            "VisibilityTimeout": str(queue.visibility_timeout_s),
            "QueueArn": queue.arn,
        }
        asked = request.get("AttributeNames", [])
        attributes = dict(known) if "All" in asked else {name: known[name] for name in asked if name in known}
        return {"Attributes": attributes} if attributes else {}  # SQS answers the attributes asked for
