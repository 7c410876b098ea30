"""An S3 notification becomes one job message per completion marker, back on the jobs queue, and each
marker's job runs once however often the notification is handled or S3 delivers its event. A notification
of one marker is fanned out too, when its event names its object creation (a sequencer): run under its
own message id instead, S3's second delivery of the event, a new message, would run the job again. It
runs in place on a FIFO queue, and as a copy an earlier release made (`runs_in_place`).

A notification is handled more than once: on a standard queue SQS delivers a message at least once,
its deletion may be lost, an invocation may die after its sends, or a later batch of the fan-out may
fail (the record is then reported failed and comes back); and S3 itself delivers an event at least once
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/EventNotifications.html, "designed to be
delivered at least once"), as a new message. SendMessage is not idempotent, so each of these would send
every job again. The fan-out therefore makes its job messages the way the receiver makes a requeued copy
(`longjobs.engine.delivery.copies`):

1. a REQUEUED marker per marker object is written first, all in conditional writes that create it only
   where none exists (`Markers.create`). Its key is derived from the object creation
   (`s3:<bucket>/<key>@<sequencer>`: the `sequencer` orders the events of one key, so with the bucket
   and key it names one event, https://docs.aws.amazon.com/AmazonS3/latest/userguide/notification-content-structure.html),
   so S3's own second delivery of the event finds the same marker; an event without a sequencer falls
   back to the notification's message id and the job's place in it (`s3:<message id>#<index>`);
2. the job message of each marker whose copy is not known (a marker written now, or found unnoted and
   unclaimed) is sent, naming the marker (`Carried.requeued_from`, and as `original_id`);
3. the sent copies' ids are noted on their markers (best effort).

A notification handled again sends only the job messages of markers that have no copy noted or claimed;
a cancelled marker sends none. A copy sent twice (a send answered 5xx after it landed, a death before the
notes, two receivers handling the notification at once) is a twin: the first copy received claims the
marker and runs, any other is acknowledged (`copies.claim_copy`, the same claim a requeued copy makes).

Cost per notification of N markers, handled once: one `TransactWriteItems` per 100 markers (or one
`PutItem` for a single marker, after a `GetItem` of the notification's own lease: `runs_in_place`), one
`SendMessageBatch` per 10, one `TransactWriteItems` per 100 notes; then one conditional `UpdateItem` (the
claim) per job message received. A marker is one small item
(about 0.5 KB: ids, times, the job's type and id). A retry adds one `BatchGetItem` per 100 markers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from longjobs.engine.delivery.attempt import closed_record
from longjobs.engine.delivery.models import Job, Parsed
from longjobs.engine.delivery.types import ADMISSION_ATTRIBUTE, Carried, Delivery, Outcome, Receiver
from longjobs.engine.lease import Lease, LeaseStatus
from longjobs.engine.lease.markers import CopyNote
from longjobs.engine.observability import logger
from longjobs.engine.settings import MAX_DELAY_S

if TYPE_CHECKING:
    from mypy_boto3_sqs.type_defs import SendMessageBatchRequestEntryTypeDef

MARKER_PREFIX = "s3:"
"""The key prefix of a fan-out's markers in the lease table (a message id is a UUID, a lock `job#`)."""

BATCH = 10
"""SendMessageBatch's most entries."""


class FanOutFailed(RuntimeError):
    """Some job messages of a fan-out were not sent: the notification is reported failed and comes back,
    and its next handling sends those whose markers have no copy yet."""


def runs_in_place(receiver: Receiver, delivery: Delivery, parsed: Parsed) -> bool:
    """Whether a notification of one marker runs under its own message id, as any job message does,
    rather than be fanned out:

    - on a FIFO queue: a job message sent would join the back of the notification's group, behind the
      messages sent after it. SQS drops a second delivery of the event within its deduplication interval
      (the queue deduplicates by content); a later one runs the job again, after the first (its place
      in the group, the job lock);
    - a copy of it (requeued or parked: `Carried` names its marker): a receiver of an earlier release,
      which ran such notifications in place, made it; it claims that marker as any copy does, so a
      cancel refuses it and its twin runs nothing;
    - a redelivery that a lease names: that receiver wrote the lease before a deploy replaced it, and the
      redelivery goes on with that attempt rather than start a second run beside it. The lease is read
      whatever the receive count: SQS may hand out a copy of a message kept on a server that missed a
      receive or a delete (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/standard-queues-at-least-once-delivery.html),
      and its count need not show the receives before. It costs one GetItem a notification."""
    if len(parsed.jobs) != 1:
        return False
    if receiver.settings.fifo:
        return True
    carried = delivery.carried
    if carried.requeued_from is not None or carried.parked_id is not None:
        return True
    return receiver.store.get(delivery.message_id) is not None


def marker_id(delivery: Delivery, index: int, event: str | None) -> str:
    """The key of the marker of a notification's `index`-th job: from the object creation when known."""
    return f"{MARKER_PREFIX}{event}" if event else f"{MARKER_PREFIX}{delivery.message_id}#{index}"


def kept_s(receiver: Receiver) -> float:
    """How long a marker outlives its last send: a copy may wait on the queue for its whole retention."""
    return MAX_DELAY_S + receiver.settings.queue_retention_s


@dataclass(frozen=True)
class _Planned:
    index: int
    job: Job
    marker: Lease


def fan_out(receiver: Receiver, jobs: list[Job], events: list[str | None], delivery: Delivery) -> Outcome:
    """Write the markers, send the job messages of those whose copy is not known, note them (see the
    module). Raises when a marker's write or a send fails: the record is reported failed and retried."""
    planned: dict[str, _Planned] = {}
    for index, job in enumerate(jobs):
        key = marker_id(delivery, index, events[index] if index < len(events) else None)
        if key not in planned:  # one object named twice in a notification is one job
            planned[key] = _Planned(index, job, _marker(receiver, delivery, key, job))
    created = receiver.store.markers.create([plan.marker for plan in planned.values()])
    existing = [key for key, made in zip(planned, created, strict=True) if not made]
    found = receiver.store.get_many(existing) if existing else {}
    to_send: list[_Planned] = []
    for (key, plan), made in zip(planned.items(), created, strict=True):
        if made:
            to_send.append(plan)
            continue
        marker = found.get(key)
        if marker is None:
            # written by another and gone again (its TTL) between the write and the read: the next try writes it
            raise FanOutFailed(f"the marker {key} of a fan-out could not be read back")
        if marker.status is LeaseStatus.REQUEUED and not (marker.copy_id or marker.claimed_by):
            to_send.append(_Planned(plan.index, plan.job, marker))
    skipped = len(planned) - len(to_send)
    if skipped:
        logger.info(
            "S3 notification handled again: job messages already sent are not sent again",
            extra={"message_id": delivery.message_id, "known": skipped, "sent": len(to_send)},
        )
    _send(receiver, delivery, to_send)
    return Outcome.FANNED_OUT


def _marker(receiver: Receiver, delivery: Delivery, key: str, job: Job) -> Lease:
    marker = closed_record(
        receiver, delivery, LeaseStatus.REQUEUED, kept_s=kept_s(receiver), job_type=job.type, job_id=job.job_id
    )
    return replace(marker, message_id=key)


def _send(receiver: Receiver, delivery: Delivery, plans: list[_Planned]) -> None:
    """Send each plan's job message, 10 a batch, then note the copies sent on their markers. A batch
    that fails (an entry refused, or the call) is reported after the copies sent are noted."""
    notes: list[CopyNote] = []
    failed: list[str] = []
    error: Exception | None = None
    for start in range(0, len(plans), BATCH):
        chunk = plans[start : start + BATCH]
        entries = [_entry(receiver, delivery, i, plan) for i, plan in enumerate(chunk)]
        sent_at = receiver.clock.now()
        try:
            response = receiver.sqs.send_message_batch(QueueUrl=receiver.queue_url, Entries=entries)
        except Exception as exc:  # a 5xx may come after the batch landed: the markers tell its copies apart
            error = exc
            break
        kept_until = sent_at + kept_s(receiver)
        for done in response.get("Successful", []):
            plan = chunk[int(done["Id"])]
            notes.append(CopyNote(plan.marker, done["MessageId"], sent_at, kept_until))
        failed += [str(entry) for entry in response.get("Failed", [])]
        if failed:
            break
    if notes:
        try:
            receiver.store.markers.note_copies(notes)
        except Exception as exc:  # without the notes a retry sends twins, of which the claims run one
            logger.warning(
                "could not note a fan-out's copies", extra={"message_id": delivery.message_id, "error": str(exc)}
            )
    if error is not None:
        raise FanOutFailed(f"fan-out of an S3 notification failed: {error}") from error
    if failed:
        raise FanOutFailed(f"fan-out of an S3 notification failed: {failed}")


def _entry(receiver: Receiver, delivery: Delivery, i: int, plan: _Planned) -> SendMessageBatchRequestEntryTypeDef:
    """A job message naming its marker. On a FIFO queue it joins the notification's message group, in
    order, at its back; its deduplication id comes from the notification's message id."""
    carried = Carried(original_id=plan.marker.message_id, requeued_from=plan.marker.message_id)
    attributes: dict[str, Any] = {ADMISSION_ATTRIBUTE: {"DataType": "String", "StringValue": carried.encode()}}
    entry: SendMessageBatchRequestEntryTypeDef = {
        "Id": str(i),
        "MessageBody": plan.job.model_dump_json(),
        "MessageAttributes": attributes,
    }
    if receiver.settings.fifo:
        entry["MessageGroupId"] = delivery.group_id or delivery.message_id
        entry["MessageDeduplicationId"] = f"{delivery.message_id}-{plan.index}"
    return entry
