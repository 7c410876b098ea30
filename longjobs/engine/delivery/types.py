"""The receiver's types: a record as the receiver takes it (`Delivery`), what a parked copy carries
(`Carried`), what became of it (`Outcome`), and what the receiver is given (`Receiver`)."""

from __future__ import annotations

import base64
import json
import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from longjobs.engine.clock import Clock
from longjobs.engine.lease import LeaseStore
from longjobs.engine.lease.lock import Lock
from longjobs.engine.lease.types import Attempt, Lease
from longjobs.engine.observability import MetricsSink, logger
from longjobs.engine.policies import RenewalPolicy
from longjobs.engine.runs import JobRuns
from longjobs.engine.settings import MESSAGE_MAX_BYTES, Settings
from longjobs.engine.visibility import VisibilityClient

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

    from longjobs.engine.jobs import JobCatalog


class Outcome(StrEnum):
    """What became of a record. Deferred outcomes leave the message on the queue, hidden by its lease."""

    REJECTED = "rejected"  # sent to the DLQ: poison, or its attempts used up (the reason on the copy and the lease)
    IGNORED = "ignored"  # nothing to do (an S3 test event, a deleted object)
    INLINE_DONE = "inline_done"  # ran inside the receiver
    FANNED_OUT = "fanned_out"  # an S3 notification: one job message per completion marker
    ALREADY_SUCCEEDED = "already_succeeded"  # a redelivery of a finished job: delete, do not re-run
    STARTED = "started"
    RUNNING = "running"  # redelivered while its execution runs: lease refreshed, nothing started
    SETTLED = "settled"  # redelivered after its execution ended: completed or released now
    NOT_STARTED = "not_started"  # the execution could not be started now: a redelivery or reconciliation decides
    STALE = "stale"  # an older receive than the lease's, one already settled, or not now: it comes back later
    WAITING = "waiting"  # its job id runs: a delayed copy went back to the queue (REQUEUED), this receive is done
    WAITING_FOR_SLOT = "waiting_for_slot"  # its type is full: held hidden (WAITING lease) until about when it can run
    PARKED = "parked"  # its type is full for longer than the horizon: copied to the type's waiting queue
    DUPLICATE = "duplicate"  # a parked or requeued message received again, or a twin copy: another copy runs it
    HELD = "held"  # its job id runs, on FIFO or with no room for a copy: hidden for the wait (not done)
    CANCELLED = "cancelled"  # cancelled by an operator before (its deletion was lost): in the DLQ already

    @property
    def deferred(self) -> bool:
        return self not in _DONE


_DONE = frozenset(
    {
        Outcome.REJECTED,
        Outcome.IGNORED,
        Outcome.INLINE_DONE,
        Outcome.FANNED_OUT,
        Outcome.ALREADY_SUCCEEDED,
        Outcome.WAITING,
        Outcome.PARKED,
        Outcome.DUPLICATE,
        Outcome.CANCELLED,
    }
)


WAITS_ATTRIBUTE = "LongJobsWaits"
"""Legacy message attribute of a copy sent back to wait for its job id: how many times it has waited.
Copies carry their waits in `ADMISSION_ATTRIBUTE` (`Carried.job_waits`); this one is read, never written."""


ADMISSION_ATTRIBUTE = "LongJobsAdmission"
"""Message attribute of a parked or requeued copy: JSON of what the message carries on (when it first
waited, its original message id, its waits, its failed attempts, the marker that names its copy)."""


MAX_MESSAGE_ATTRIBUTES = 10
CARRIED_MARGIN_BYTES = 2_048
"""Room kept for what a copy's `ADMISSION_ATTRIBUTE` holds besides the attempts (ids, times, counts) and
for a few more attempts: a parked claimant that failed is parked again with one more (`copy_attributes`)."""


def message_bytes(body: str, attributes: Mapping[str, Any]) -> int:
    """A message's size as SQS counts it against `MESSAGE_MAX_BYTES`."""
    size = len(body.encode())
    for name, value in attributes.items():
        data = value.get("StringValue")
        payload = len(data.encode()) if data is not None else len(value.get("BinaryValue") or b"")
        size += len(name.encode()) + len(str(value.get("DataType", "")).encode()) + payload
    return size


def copy_fits(body: str, attributes: Mapping[str, Any], history: Sequence[Attempt]) -> bool:
    """Whether a copy of a message (its `attributes`, the admission attribute left out) fits in one SQS
    message with the admission attribute carrying `history`: a body near SQS's limit leaves no room, and
    such a message waits where it is rather than have a copy refused on every receive."""
    shortest = Carried(history=tuple(history))._encode(0)  # its causes cut out, as `copy_attributes` may
    carried = {ADMISSION_ATTRIBUTE: {"DataType": "String", "StringValue": shortest}}
    own = {name: value for name, value in attributes.items() if name != ADMISSION_ATTRIBUTE}
    return message_bytes(body, {**own, **carried}) + CARRIED_MARGIN_BYTES <= MESSAGE_MAX_BYTES


@dataclass(frozen=True)
class Delivery:
    """The parts of an SQS record the receiver uses."""

    message_id: str
    receipt_handle: str
    body: str
    receive_count: int
    source_arn: str
    message_attributes: Mapping[str, Any] = field(default_factory=dict)
    """The message's attributes as `SendMessage` takes them (kept on a copy sent back to wait)."""
    queue_url: str | None = None
    """The queue it was received from, when not the jobs queue (a type's waiting queue)."""
    group_id: str | None = None
    """Its `MessageGroupId` (FIFO queues only)."""
    sent_at: float | None = None
    """When it was sent (`SentTimestamp`): its queue's retention runs from then, received or not."""
    hidden_until: float | None = None
    """Until when its receive hid it at least (the time before the receive plus the `VisibilityTimeout`
    it asked for: never later than SQS's), when the receive asked for one (an unparking's)."""
    parse_cache: list[Any] = field(default_factory=list, compare=False, repr=False)
    """Its body's parse, made once per receive (`longjobs.engine.delivery.models.parse_delivery`)."""
    claim_name: list[str] = field(default_factory=list, init=False, compare=False, repr=False)
    """This receive's name on a claim of a DLQ send (`claimant`), drawn at its first claim; a delivery made
    from it (`dataclasses.replace`) is another receive, with a name of its own."""
    carried: Carried = field(init=False, compare=False, repr=False)
    """What a parked copy carries (nothing for a message as its producer sent it), decoded once, when the
    delivery is made: nearly every receive reads it, and the delivery's attributes never change."""

    def __post_init__(self) -> None:
        raw = self.message_attributes.get(ADMISSION_ATTRIBUTE, {}).get("StringValue")
        object.__setattr__(self, "carried", Carried.decode(raw) if raw else Carried())

    @classmethod
    def from_record(cls, record: SQSRecord) -> Delivery:
        return cls(
            message_id=record.message_id,
            receipt_handle=record.receipt_handle,
            body=record.body,
            receive_count=int(record.attributes.approximate_receive_count),
            source_arn=record.event_source_arn,
            message_attributes=send_attributes(record.raw_event.get("messageAttributes") or {}),
            group_id=record.attributes.message_group_id,
            sent_at=sent_at(record.attributes.sent_timestamp),
        )

    def claimant(self, rng: random.Random) -> str:
        """This receive's name on a claim of a DLQ send: its receipt handle and a draw of its own from `rng`,
        made at its first claim. The mapping handles a record at least once, so two handlings of one record
        (one handle) are two claimants; a pass read again after its claim landed unanswered is this one."""
        if not self.claim_name:
            self.claim_name.append(f"{self.receipt_handle}#{rng.getrandbits(32):08x}")
        return self.claim_name[0]

    @property
    def waits(self) -> int:
        """How many times the message waited for its job id (its copy's delay doubles with it)."""
        value = self.message_attributes.get(WAITS_ATTRIBUTE, {}).get("StringValue", "0")
        return max(self.carried.job_waits, int(value) if str(value).isdigit() else 0)

    @property
    def original_id(self) -> str:
        """The message id its producer's message had (a parked copy has a new one)."""
        return self.carried.original_id or self.message_id

    def refused_starts(self, lease: Lease | None) -> int:
        """The starts refused so far that this receive's next lease carries on: its lease's count (and
        that lease's own refusal), else what a copy carries."""
        return lease.refused_starts_with_this() if lease is not None else self.carried.refused_starts


@dataclass(frozen=True)
class Carried:
    """What a message carries from its jobs queue to its waiting queue (`ADMISSION_ATTRIBUTE`)."""

    waiting_since: float | None = None
    original_id: str | None = None
    waits: int = 0
    history: tuple[Attempt, ...] = ()
    parked_id: str | None = None
    """The message id of the message this copy was parked from: its PARKED marker names the one copy
    that runs (a repeated park makes twins)."""
    requeued_from: str | None = None
    """The message id of the message this copy was sent back from to wait for its job id: its REQUEUED
    marker names the one copy that runs (`longjobs.engine.delivery.copies`)."""
    job_waits: int = 0
    """How many times the message waited for its job id."""
    refused_starts: int = 0
    """Starts Step Functions refused for the message so far (`max_refused_starts` counts them on)."""

    def encode(self, budget: int | None = None) -> str:
        """The attribute's JSON; within `budget` bytes when given, each attempt's cause cut shorter
        (`CARRIED_CAUSE_CUTS`) until it fits, the shortest when none does. No attempt is left out: their
        number counts toward `max_attempts`."""
        text = self._encode(None)
        if budget is None:
            return text
        for cut in CARRIED_CAUSE_CUTS:
            if len(text.encode()) <= budget:
                break
            text = self._encode(cut)
        return text

    def _encode(self, cause_max: int | None) -> str:
        attempts = [a.to_data() for a in self.history]
        if cause_max is not None:
            attempts = [{**data, "error": _cut_cause(data["error"], cause_max)} for data in attempts]
        return json.dumps(
            {
                "since": self.waiting_since,
                "original": self.original_id,
                "waits": self.waits,
                "attempts": attempts,
                "parked": self.parked_id,
                "requeued": self.requeued_from,
                "job_waits": self.job_waits,
                "refused": self.refused_starts,
            },
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, raw: str) -> Carried:
        try:
            data = json.loads(raw)
            since = data.get("since")
            return cls(
                waiting_since=float(since) if since is not None else None,
                original_id=data.get("original"),
                waits=int(data.get("waits", 0)),
                history=tuple(Attempt.from_data(a) for a in data.get("attempts", [])),
                parked_id=data.get("parked"),
                requeued_from=data.get("requeued"),
                job_waits=int(data.get("job_waits", 0)),
                refused_starts=int(data.get("refused", 0)),
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            logger.warning("unreadable admission attribute: ignored", extra={"value": raw[:200]})
            return cls()


CARRIED_CAUSE_CUTS = (1_024, 128, 0)
"""How short a copy cuts each carried attempt's cause to fit in one SQS message (`Carried.encode`); the
lease or marker it was sent from keeps them whole."""


def _cut_cause(error: dict[str, Any] | None, cause_max: int) -> dict[str, Any] | None:
    if error is None or "Cause" not in error:
        return error
    if cause_max <= 0:
        return {"Error": error["Error"]}
    return {**error, "Cause": str(error["Cause"])[:cause_max]}


def copy_attributes(body: str, attributes: Mapping[str, Any], carried: Carried) -> dict[str, Any]:
    """A copy's attributes: its own (`attributes`, any admission attribute it carries left out) and the
    admission attribute carrying `carried`, its causes cut to the room SQS's message size leaves
    (`Carried.encode`). Raises `CopyTooLarge` when even the shortest form does not fit (`copy_fits` said it
    would)."""
    own = {name: value for name, value in attributes.items() if name != ADMISSION_ATTRIBUTE}
    budget = MESSAGE_MAX_BYTES - message_bytes(body, own) - len(ADMISSION_ATTRIBUTE) - len("String")
    encoded = carried.encode(budget)
    if len(encoded.encode()) > budget:
        raise CopyTooLarge(
            f"a copy with {len(carried.history)} attempt(s) needs {len(encoded.encode()) - budget} bytes more"
        )
    return {**own, ADMISSION_ATTRIBUTE: {"DataType": "String", "StringValue": encoded}}


class CopyTooLarge(ValueError):
    """A copy of a message would not fit in one SQS message with what it carries."""


def sent_at(sent_timestamp: str | None) -> float | None:
    """SQS's `SentTimestamp` (epoch milliseconds, a string) in epoch seconds; None when absent."""
    return int(sent_timestamp) / 1000 if sent_timestamp else None


def send_attributes(event_attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Message attributes as the Lambda event writes them, in the form `SendMessage` takes."""
    attributes: dict[str, Any] = {}
    for name, value in event_attributes.items():
        data_type = value.get("dataType") or "String"
        if value.get("stringValue") is not None:
            attributes[name] = {"DataType": data_type, "StringValue": value["stringValue"]}
        elif value.get("binaryValue") is not None:
            attributes[name] = {"DataType": data_type, "BinaryValue": base64.b64decode(value["binaryValue"])}
    return attributes


def builtin_catalog() -> JobCatalog:
    """The built-in job types alone (the job catalog is imported on first use: see
    `longjobs.engine.delivery.models`)."""
    from longjobs.engine.jobs import builtin_catalog

    return builtin_catalog()


@dataclass
class ReceiverState:
    """What one container of the receiver remembers between records and batches: admission's readings and
    its place in line, the leases a batch read ahead, and the copies its parkings leave to the batch's end.
    Only the receiver's own code writes it; a new container starts with none."""

    views: dict[str, Any] = field(default_factory=dict)
    """Admission's short-lived readings of each limited type (`longjobs.engine.admission.readings`)."""
    last_order: float = 0.0
    """The last place in line this receiver handed out (admission: places are strictly increasing)."""
    order_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    """Held while a place is handed out (`longjobs.engine.admission.line.place_in_line`): a batch's records
    are handled on threads at once."""
    next_refresh: dict[str, float] = field(default_factory=dict)
    """Per type with parked messages, when its oldest parked copy must be sent again, as last read
    (`refresh_parked`)."""
    next_unpark: dict[str, float] = field(default_factory=dict)
    """Per type without a limit, when its waiting queue is looked in again after it was found empty
    (`longjobs.engine.admission.admit.unpark_unlimited`)."""
    full_slots: dict[str, Any] = field(default_factory=dict)
    """Per limited type, this batch's reading of its slots that found every one held
    (`longjobs.engine.admission.readings.slots_for_claim`); the next batch forgets them
    (`longjobs.engine.receiver.batch.receive_batch`)."""
    read_ahead: dict[str, tuple[str, Lock | None]] = field(default_factory=dict)
    """Message id -> its job lock's key and that lock (absent or free), for the messages this batch read
    ahead and found nothing held for: no lease (`longjobs.engine.delivery.read_ahead`); each is taken by the
    message's first read (`read_ahead.first_read`), the next batch forgets the rest."""

    pending_copies: dict[str, list[tuple[str, Lease]]] = field(default_factory=dict)
    """Message id -> the copies its batch's parkings leave to its end (each a waiting queue and a PARKED
    marker), for the records of the batches going on (`longjobs.engine.receiver.batch.receive_batch`):
    kept by message, so batches handled at once on one receiver (the simulation's two pollers) never
    send or drop each other's. A message of no batch (an unparked copy) sends its copy at once."""


@dataclass
class Receiver:
    """Everything the receiver needs, passed in (the handler builds it once per container): its settings,
    clients, clock and catalog, and its container's `state`."""

    settings: Settings
    policy: RenewalPolicy
    store: LeaseStore
    sqs: SQSClient
    visibility: VisibilityClient
    stepfunctions: SFNClient
    clock: Clock
    rng: random.Random
    catalog: JobCatalog = field(default_factory=lambda: builtin_catalog())
    metrics: MetricsSink | None = None
    state: ReceiverState = field(default_factory=lambda: ReceiverState())
    """What this container remembers between records and batches (`ReceiverState`)."""
    runs: JobRuns = field(default_factory=lambda: JobRuns({}, None))
    """Whether a job's previous run has ended (`longjobs.engine.runs`); by default no type has runs."""
    starts: SFNClient | None = None
    """Step Functions with one attempt a call, for starts (`longjobs.engine.factory.Clients.starts`)."""

    @property
    def queue_url(self) -> str:
        return self.settings.queue_url or ""

    def queue_of(self, delivery: Delivery) -> str:
        """The queue a delivery came from: the jobs queue, or a type's waiting queue."""
        return delivery.queue_url or self.queue_url

    @property
    def state_machine_arn(self) -> str:
        return self.settings.state_machine_arn or ""
