"""FIFO queues offline: their attributes, and moto's FIFO receive made to keep a group's order as SQS does.

SQS hands out no message of a group while one of its messages is in flight (received, and hidden), and
hands a group out from its head, in order. moto blocks a group while one of its messages is *pending*, a
set it keeps apart from visibility, and drifts from that rule:

- When several messages of one group become visible together (a batch whose records were all reported
  not done, say), its receive takes each off the pending set as it meets it while the later ones still
  block the group: it skips the group's first messages and hands out its last one.
- A message made visible (ChangeMessageVisibility to 0) leaves the pending set; hidden again with its old
  handle, which SQS refuses on FIFO ("The receipt handle has expired") but moto accepts, it blocks
  nothing, and the rest of its group is handed out around it.
- It decides which messages are visible once per pass and which groups are blocked later, so a message
  whose visibility runs out in between lets the next one of its group go first.

`keep_group_order` replaces moto's receive for FIFO queues (standard queues keep moto's own), and makes
moto's visibility change refuse a FIFO handle as SQS does, "The receipt handle has expired", once the
message's visibility has run out or it was received again (a retried release landing after the next
receive would otherwise hide nothing and show the new receive's message). A group is in
flight while one of its messages was received and is hidden; otherwise its messages are handed out from
its head, in order, up to the first one that is hidden, all decided on one look at the queue. A head
past the redrive's receives goes to the DLQ, and the next message is the head. Unlike SQS, moto's
`ReceiveMessage` is the one place this is decided, so the rule holds only in this process's server.

Deduplication follows SQS too. moto drops a send only while a message with its deduplication id is still
on the queue, and across the whole queue. SQS drops it for 5 minutes after the first send, received and
deleted or not, and in high-throughput mode (`DeduplicationScope=messageGroup`, the stack's) only within
its message group. A message SQS moves to a FIFO DLQ gets its message id as its deduplication id there.
"""

from __future__ import annotations

import copy
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_sqs.literals import QueueAttributeNameType

EXPIRED_HANDLE = "Value {} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."
"""What SQS answers a visibility change with a FIFO handle whose visibility ran out."""

FIFO_ATTRIBUTES: dict[QueueAttributeNameType, str] = {
    "FifoQueue": "true",
    "ContentBasedDeduplication": "true",
    "DeduplicationScope": "messageGroup",
    "FifoThroughputLimit": "perMessageGroupId",
}
"""The stack's FIFO queues (`longjobs.construct.queues.fifo_queue_props`): high-throughput mode,
content-based deduplication."""

DEDUPLICATION_S = 300
"""SQS's deduplication interval: a FIFO send with a deduplication id sent within it is dropped."""
IDLE_S = 0.05
"""How often a long poll looks again at a FIFO queue that has nothing to hand out."""
_PATCHED = "_longjobs_keeps_group_order"
_SENT = "_longjobs_deduplication_ids"
_SENT_LOCK = threading.Lock()


def is_duplicate(queue: Any, message: Any) -> bool:
    """Whether SQS drops this send to a FIFO queue: its deduplication id was sent within the last
    `DEDUPLICATION_S`, in its message group when the queue deduplicates per group. Records it otherwise."""
    from moto.core.utils import unix_time

    if message.deduplication_id is None:
        return False
    per_group = queue.attributes.get("DeduplicationScope") == "messageGroup"
    key = (message.group_id if per_group else None, message.deduplication_id)
    now = unix_time()
    with _SENT_LOCK:
        sent: dict[tuple[str | None, str], float] = queue.__dict__.setdefault(_SENT, {})
        for old in [k for k, at in sent.items() if now - at >= DEDUPLICATION_S]:
            del sent[old]
        if key in sent:
            return True
        sent[key] = now
        return False


def in_flight_groups(queue: Any) -> set[str]:
    """Groups with a message that was received and is hidden."""
    return {
        m.group_id
        for m in list(queue._messages)
        if m.group_id is not None and m.approximate_receive_count > 0 and not m.visible
    }


def receive_fifo(
    backend: Any, queue: Any, count: int, wait_seconds_timeout: int, visibility_timeout: int, names: list[str]
) -> list[Any]:
    """One `ReceiveMessage` on a FIFO queue, by SQS's rule (see the module's docstring)."""
    from moto.core.utils import unix_time
    from moto.sqs.models import _filter_message_attributes

    polling_end = unix_time() + wait_seconds_timeout
    while True:
        result: list[Any] = []
        to_dlq: list[Any] = []
        stopped = in_flight_groups(queue)
        for message in list(queue._messages):
            group = message.group_id
            if group in stopped or len(result) >= count:
                continue
            if not message.visible or message.delayed:
                stopped.add(group)  # the group's next message waits for this one
                continue
            queue.pending_messages.discard(message)  # visible again: no longer in flight
            redrive = queue.redrive_policy if queue.dead_letter_queue is not None else None
            if redrive and message.approximate_receive_count >= redrive["maxReceiveCount"]:
                to_dlq.append(message)
                continue
            queue.pending_messages.add(message)
            message.mark_received(visibility_timeout=visibility_timeout)
            delivered = copy.deepcopy(message)
            _filter_message_attributes(delivered, names)
            result.append(delivered)
        for message in to_dlq:
            queue._messages.remove(message)
            message.deduplication_id = message.id  # as SQS does on a FIFO DLQ
            queue.dead_letter_queue.add_message(message)
        if result or not wait_seconds_timeout or unix_time() > polling_end:
            return result
        time.sleep(IDLE_S)


def keep_group_order() -> None:
    """Patch moto's SQS backend (process-wide, once): FIFO queues receive by `receive_fifo`."""
    from moto.sqs.exceptions import InvalidParameterValue
    from moto.sqs.models import Queue, SQSBackend

    if getattr(SQSBackend, _PATCHED, False):
        return
    moto_receive = SQSBackend.receive_message

    def receive_message(
        self: Any,
        queue_name: str,
        count: int,
        wait_seconds_timeout: int,
        visibility_timeout: int,
        message_attribute_names: list[str] | None = None,
    ) -> list[Any]:
        queue = self.get_queue(queue_name)
        if not queue.fifo_queue:
            return moto_receive(
                self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names
            )
        return receive_fifo(self, queue, count, wait_seconds_timeout, visibility_timeout, message_attribute_names or [])

    moto_change_visibility = SQSBackend.change_message_visibility

    def change_message_visibility(self: Any, queue_name: str, receipt_handle: str, visibility_timeout: int) -> None:
        queue = self.get_queue(queue_name)
        if queue.fifo_queue:
            message = next((m for m in queue._messages if m.had_receipt_handle(receipt_handle)), None)
            if message is not None and (message.receipt_handle != receipt_handle or message.visible):
                raise InvalidParameterValue(EXPIRED_HANDLE.format(receipt_handle))
        moto_change_visibility(self, queue_name, receipt_handle, visibility_timeout)

    moto_add_message = Queue.add_message

    def add_message(self: Any, message: Any) -> None:
        """moto's, with SQS's deduplication on a FIFO queue (moto's own event source mappings, which the
        offline runtime does not use, are not served on FIFO queues)."""
        if not self.fifo_queue:
            moto_add_message(self, message)
            return
        if is_duplicate(self, message):
            return
        with self._messages_lock:
            self._messages.append(message)
            self._messages_lock.notify_all()

    SQSBackend.receive_message = receive_message  # type: ignore[method-assign]
    Queue.add_message = add_message  # type: ignore[method-assign]
    SQSBackend.change_message_visibility = change_message_visibility  # type: ignore[method-assign]
    Queue.pending_message_groups = property(in_flight_groups)  # type: ignore[method-assign,assignment]
    setattr(SQSBackend, _PATCHED, True)
