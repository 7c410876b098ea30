"""What happened to each job's message, watched from outside the processor.

Three sources, none of them inside the functions:
- the event source mapping shows every delivery; a delivery of a message while one of its executions
  is still running its job is a lapse (`redelivered_while_running`), the thing renewal prevents;
- the lease table's stream shows every lease change: receives, renewals (with the new visible-until),
  releases and closes;
- the emulator's queues show where each message is in the end: still queued, in the DLQ, or gone; and
  every copy the DLQ takes in, so a message dead-lettered still counts as such once an operator's
  redrive (or delete) has taken its copy out of the DLQ.

A job whose type is full may be parked: its message is copied to the type's waiting queue (a new message
id) and acknowledged, and the copy (or a copy of the copy, when it is parked again) runs the job. Each
copy is attributed to its job: by the PARKED marker that names it (`copy_id`, `claimed_by`; so is a copy
sent back to wait for its job id, by its REQUEUED marker), by the
scenario's job id attribute the copy keeps, or by the original it names (`LongJobsAdmission`). A job's
executions, leases and final state are then those of its message and all its copies.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from longjobs.engine.delivery.dlq import ORIGINAL_MESSAGE_ID
from longjobs.engine.delivery.types import ADMISSION_ATTRIBUTE, Carried
from longjobs.engine.execution import execution_arn, execution_name, parse_execution_name
from longjobs.engine.lease import Lease, LeaseStatus, is_lease_key
from longjobs.engine.lease.codec import item_to_lease
from longjobs.engine.lease.schema import PARTITION_KEY
from longjobs.engine.lease.types import COPIED_STATUSES
from longjobs.offline.emulator import Emulator, QueuedMessage, Resources, queue_messages, watch_arrivals

if TYPE_CHECKING:
    from mypy_boto3_sqs.type_defs import MessageAttributeValueTypeDef

log = logging.getLogger(__name__)

JOB_ID_ATTRIBUTE = "ScenarioJobId"
"""The message attribute that carries a scenario job's id (a raw body may have no place for it)."""
JOB_ENDED_EVENTS = frozenset(
    {"ParallelStateSucceeded", "ParallelStateFailed", "ParallelStateAborted", "ParallelStateExited"}
)
"""History events after which an execution no longer runs its job (the workflow's job is one Parallel)."""
JOB_SUCCEEDED_EVENT = "ParallelStateSucceeded"
ABORTED_EVENT = "ExecutionAborted"
"""A stopped execution's end. Step Functions ends a state the stop interrupts with its `...StateAborted`
event; moto's interpreter writes `ParallelStateSucceeded` there instead, then this event. A job step so
"succeeded" was stopped, and its workflow never went on to its success path."""
REREAD = 100
"""Stream records read again on each poll (see `Observer.poll`)."""
ORPHANS_KEPT = 1_000
"""Lease changes kept for message ids not yet known to be a job's copy (replayed when one is)."""


@dataclass(frozen=True)
class Delivery:
    at: float
    receive_count: int
    while_running: bool
    message_id: str = ""
    """The message delivered: the job's own, or a parked copy of it."""


@dataclass(frozen=True)
class Execution:
    name: str
    status: str
    started: float
    stopped: float | None
    job: tuple[float, float | None] | None = None
    """When its job ran: from entering the `RunJob` state to the next state after it (`ReadLease` or
    `ReadLeaseForRelease`), else to the execution's end; None when not asked for, or it never ran."""
    job_ended: float | None = None
    """When it left its job (the end of the workflow's job step), if it got there: the workflow's last
    steps (mark the lease, free the job lock) run after the message is deleted."""
    job_entered: float | None = None
    """When it entered its job step, if it got there (kept whether or not `job` was asked for)."""
    job_succeeded: bool = False
    """Whether its job step succeeded (the workflow went on to its success path)."""

    @property
    def job_span(self) -> tuple[float, float | None]:
        """The job's span where known, else the execution's (which also covers its settling)."""
        return self.job if self.job is not None else (self.started, self.stopped)

    @property
    def job_end(self) -> float:
        """The end of its job: when it left the job step, else when it stopped (running: never)."""
        if self.job_ended is not None:
            return self.job_ended
        return self.stopped if self.stopped is not None else float("inf")


JOB_STATE = "RunJob"


@dataclass
class Track:
    """One job's message, as observed."""

    job_id: str
    message_id: str
    sent_at: float
    deliveries: list[Delivery] = field(default_factory=list)
    renewals: list[float] = field(default_factory=list)
    visibility: list[tuple[float, float]] = field(default_factory=list)
    """(when, visible-until) each time the lease's belief changed."""
    released: int = 0
    closes: list[float] = field(default_factory=list)
    """When each of its leases closed (succeeded, released, rejected...)."""
    lease: Lease | None = None
    executions: list[Execution] = field(default_factory=list)
    final: str = "queued"
    on_queue: bool = False
    """Whether its message or a copy was on the jobs queue or a waiting queue at the last look (`final`
    keeps its last decided value while the observer cannot decide yet)."""
    dlq_error: str | None = None
    dlq_attributes: dict[str, str] = field(default_factory=dict)
    """The message attributes of its copy in the DLQ (`ErrorType`, `ErrorMessage`, `OriginalMessageId`...),
    or of the copy the DLQ took in, when a redrive has taken it out since."""
    running_at_end: frozenset[str] = frozenset()
    """Names of its executions still RUNNING when the run ended (before the runtime stopped them)."""
    group: str | None = None
    """FIFO: its message group."""
    duplicate_of: str | None = None
    """FIFO: SQS dropped its send as a duplicate of this job's message (the same deduplication id)."""
    copies: list[str] = field(default_factory=list)
    """Message ids of the parked copies of its message (in a waiting queue), in the order they were seen."""
    parked: list[float] = field(default_factory=list)
    """When its message (or a copy) was parked: each PARKED marker written."""
    carried_original: str | None = None
    """The original a followed message names that no followed message is: a fan-out's marker
    (`s3:bucket/key@sequencer`), which its DLQ copy names as `OriginalMessageId`."""

    @property
    def redelivered_while_running(self) -> list[float]:
        return [d.at for d in self.deliveries if d.while_running]

    @property
    def message_ids(self) -> tuple[str, ...]:
        """Its message's id and its copies' ids (an execution is named after the one it runs from)."""
        return (self.message_id, *self.copies)

    @property
    def current_message_id(self) -> str:
        """The message that holds the job now: the latest of its message and copies with a lease seen."""
        return self.lease.message_id if self.lease is not None else self.message_id

    def rank(self, message_id: str) -> int:
        """Place of `message_id` in `message_ids` (a later copy outranks the message it was parked from)."""
        return self.message_ids.index(message_id) if message_id in self.message_ids else -1


def job_step(history: Iterable[Mapping[str, Any]]) -> tuple[float | None, float | None, bool]:
    """From an execution's history events: when it entered its job step, when it left it, and whether the
    step succeeded and the workflow went on (None where it never got there)."""
    entered: float | None = None
    events = iter(history)
    for event in events:
        name = event.get("stateEnteredEventDetails", {}).get("name")
        if name == JOB_STATE and entered is None:
            entered = event["timestamp"].timestamp()
        elif event["type"] in JOB_ENDED_EVENTS:
            succeeded = event["type"] == JOB_SUCCEEDED_EVENT and next(events, {}).get("type") != ABORTED_EVENT
            return entered, event["timestamp"].timestamp(), succeeded
    return entered, None, False


class Observer:
    """Keeps one `Track` per sent job, fed by the mapping (`on_batch`) and the lease stream (`poll`)."""

    def __init__(self, emulator: Emulator, resources: Resources, *, follow_every_message: bool = False) -> None:
        """`follow_every_message`: also track each message the mapping delivers that `send` did not send
        (the local service's, sent by the user's own tools), keyed by its message id."""
        self.follow_every_message = follow_every_message
        self.types: dict[str, str] = {}
        """Each followed job's type, as its body names it."""
        self.sqs = emulator.sqs()
        self.stepfunctions = emulator.stepfunctions()
        self.streams = emulator.client("dynamodbstreams")
        self.resources = resources
        self.tracks: dict[str, Track] = {}
        self._by_message: dict[str, Track] = {}
        self._lock = threading.Lock()
        self._stream_arn = emulator.dynamodb().describe_table(TableName=resources.table_name)["Table"][
            "LatestStreamArn"
        ]
        shard = self.streams.describe_stream(StreamArn=self._stream_arn)["StreamDescription"]["Shards"][0]
        self._shard_id: str = shard["ShardId"]
        self._first_sequence = int(shard["SequenceNumberRange"]["StartingSequenceNumber"])
        self._tail: int | None = None
        self._seen: set[str] = set()
        self._sent_by_dedup_id: dict[str, Track] = {}
        self._orphans: dict[str, list[dict[str, Any]]] = {}
        """Lease changes of message ids not known yet (a copy's lease seen before what names it)."""
        self._dead_letters: list[QueuedMessage] = []
        """Every message the DLQ took in, in order, whether or not it is there still."""
        watch_arrivals(resources.dlq_name, self._dead_letter_arrived)

    def _dead_letter_arrived(self, message: QueuedMessage) -> None:
        with self._lock:
            self._dead_letters.append(message)

    def send(self, job_id: str, body: str, *, group: str | None = None, dedup_id: str | None = None) -> Track:
        """Put one job's message on the jobs queue, its id in an attribute; on a FIFO queue, in `group`
        (with `dedup_id`, or deduplicated by content). A send SQS drops as a duplicate gets the track of
        the message it duplicates, as `duplicate_of`."""
        attributes: dict[str, MessageAttributeValueTypeDef] = {
            JOB_ID_ATTRIBUTE: {"DataType": "String", "StringValue": job_id}
        }
        url = self.resources.queue_url
        if group is None:
            response = self.sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attributes)
        elif dedup_id is None:
            response = self.sqs.send_message(
                QueueUrl=url, MessageBody=body, MessageAttributes=attributes, MessageGroupId=group
            )
        else:
            response = self.sqs.send_message(
                QueueUrl=url,
                MessageBody=body,
                MessageAttributes=attributes,
                MessageGroupId=group,
                MessageDeduplicationId=dedup_id,
            )
        track = Track(job_id=job_id, message_id=response["MessageId"], sent_at=time.time(), group=group)
        if group is not None:
            key = dedup_id or hashlib.sha256(body.encode()).hexdigest()
            original = self._sent_by_dedup_id.setdefault(key, track)
            kept = {m.message_id for m in queue_messages(self.resources.queue_name)}
            if original is not track and track.message_id not in kept:
                track.message_id, track.duplicate_of = original.message_id, original.job_id
                with self._lock:
                    self.tracks[job_id] = track
                return track
        with self._lock:
            self.tracks[job_id] = self._by_message[track.message_id] = track
        return track

    def track_of(self, message: dict[str, Any]) -> Track | None:
        """The track of a delivered message: by the scenario's job id attribute, else by its message id (a
        followed message is keyed by its id, whatever attributes it carries)."""
        job_id = message.get("MessageAttributes", {}).get(JOB_ID_ATTRIBUTE, {}).get("StringValue")
        track = self.tracks.get(job_id) if job_id else None
        return track or self._by_message.get(message["MessageId"])

    def on_batch(self, messages: Sequence[dict[str, Any]]) -> None:
        """The mapping received these: note each delivery, and whether its job was still running."""
        now = time.time()
        for message in messages:
            track = self.track_of(message) or self._follow(message)
            if track is None:
                continue  # a message the scenario did not send (an S3 fan-out, say)
            count = int(message["Attributes"]["ApproximateReceiveCount"])
            delivered = message["MessageId"]
            running = any(self.job_running(delivered, attempt) for attempt in range(1, count))
            with self._lock:
                track.deliveries.append(Delivery(now, count, running, delivered))
            if running:
                log.warning("job %s delivered again while its job runs (receive %d)", track.job_id, count)

    def _follow(self, message: dict[str, Any]) -> Track | None:
        """A message `send` did not send, when every message is followed: a copy the processor sent is its
        original's (the message it names); any other is a job of its own, its id the body's `job_id`."""
        if not self.follow_every_message:
            return None
        message_id = message["MessageId"]
        attributes = message.get("MessageAttributes", {})
        raw = attributes.get(ADMISSION_ATTRIBUTE, {}).get("StringValue")
        carried = Carried.decode(raw) if raw else None
        named = [carried.parked_id, carried.original_id] if carried is not None else []
        named.append(attributes.get(ORIGINAL_MESSAGE_ID, {}).get("StringValue"))  # a DLQ copy redriven
        original = next((self._by_message[name] for name in named if name and name in self._by_message), None)
        if original is not None:
            self._adopt(original, message_id)
            return original
        try:
            body = json.loads(message.get("Body", ""))
        except (ValueError, RecursionError):  # not JSON, a number past int's digit limit, nested too deep
            body = None
        job_id = body.get("job_id") if isinstance(body, dict) else None
        sent_ms = message.get("Attributes", {}).get("SentTimestamp")
        sent_at = int(sent_ms) / 1000 if sent_ms else time.time()
        track = Track(job_id=job_id if isinstance(job_id, str) else message_id, message_id=message_id, sent_at=sent_at)
        track.carried_original = carried.original_id if carried is not None else None
        if isinstance(body, dict) and isinstance(body.get("type"), str):
            self.types[track.job_id] = body["type"]
        with self._lock:
            self.tracks[message_id] = self._by_message[message_id] = track
        return track

    def job_running(self, message_id: str, attempt: int) -> bool:
        """Whether the attempt's execution is running and has not yet left its job."""
        arn = execution_arn(self.resources.state_machine_arn, execution_name(message_id, attempt))
        try:
            if self.stepfunctions.describe_execution(executionArn=arn)["status"] != "RUNNING":
                return False
        except self.stepfunctions.exceptions.ExecutionDoesNotExist:
            return False
        events = self.stepfunctions.get_execution_history(executionArn=arn, maxResults=1000)["events"]
        return not any(event["type"] in JOB_ENDED_EVENTS for event in events)

    def poll(self) -> None:
        """Read the lease stream up to now, then where each message is.

        Each read starts a little before the last record read, with a fresh iterator, and skips the
        records already seen: moto's cancelled transaction puts back a copy of the whole table, stream
        included, so the old iterator would read a shard nothing is written to any more, and the
        copy numbers its new records from where the copy was taken."""
        start = self._first_sequence if self._tail is None else max(self._first_sequence, self._tail - REREAD)
        iterator: str | None = self.streams.get_shard_iterator(
            StreamArn=self._stream_arn,
            ShardId=self._shard_id,
            ShardIteratorType="AT_SEQUENCE_NUMBER",
            SequenceNumber=str(start),
        )["ShardIterator"]
        while iterator:
            page = self.streams.get_records(ShardIterator=iterator, Limit=1000)
            iterator = page.get("NextShardIterator")
            for record in page["Records"]:
                self._tail = int(record["dynamodb"]["SequenceNumber"])
                if record["eventID"] not in self._seen:
                    self._seen.add(record["eventID"])
                    self._on_lease_change(record["dynamodb"])
            if not page["Records"]:
                break
        self._locate()

    def _on_lease_change(self, change: dict[str, Any]) -> None:
        if "NewImage" not in change or not is_lease_key(change["Keys"][PARTITION_KEY]["S"]):
            return  # job locks live in the lease table too
        new = item_to_lease(change["NewImage"])
        old = item_to_lease(change["OldImage"]) if "OldImage" in change else None
        track = self._by_message.get(new.message_id) or self._copy_in_waiting_queue(new.message_id)
        if track is None:
            if len(self._orphans) < ORPHANS_KEPT:  # perhaps a copy whose marker is not read yet
                self._orphans.setdefault(new.message_id, []).append(change)
            return
        now = time.time()
        if new.status is LeaseStatus.PARKED and (old is None or old.status is not LeaseStatus.PARKED):
            track.parked.append(now)
        if new.status in COPIED_STATUSES:
            for copy_id in (new.copy_id, new.claimed_by):
                if copy_id:
                    self._adopt(track, copy_id)
        if track.lease is None or track.rank(new.message_id) >= track.rank(track.lease.message_id):
            track.lease = new  # the latest link's lease: a copy's, not its original's marker
        same_receive = old is not None and old.receive_count == new.receive_count
        if same_receive and old is not None and new.renewal_count > old.renewal_count:
            track.renewals.append(new.last_renewed_at)
        if new.active and (not same_receive or (old is not None and old.visible_until != new.visible_until)):
            track.visibility.append((new.last_renewed_at, new.visible_until))
        if not new.active and (old is None or not same_receive or old.active):
            track.closes.append(now)
            if new.status is LeaseStatus.RELEASED:
                track.released += 1
                track.visibility.append((now, now + new.release_delay_s))

    def _adopt(self, track: Track, copy_id: str) -> None:
        """Attribute a parked copy to its job, and replay the lease changes seen of it before."""
        with self._lock:
            if copy_id in self._by_message:
                return
            self._by_message[copy_id] = track
            track.copies.append(copy_id)
        for change in self._orphans.pop(copy_id, []):
            self._on_lease_change(change)

    def _owner(self, message: QueuedMessage) -> Track | None:
        """The job a waiting queue's message belongs to: by the job id it keeps, else the message it was
        parked from or its original (both in `LongJobsAdmission`)."""
        track = self.tracks.get(message.attributes.get(JOB_ID_ATTRIBUTE, ""))
        if track is None and ADMISSION_ATTRIBUTE in message.attributes:
            carried = Carried.decode(message.attributes[ADMISSION_ATTRIBUTE])
            track = self._by_message.get(carried.parked_id or "") or self._by_message.get(carried.original_id or "")
        return track

    def _waiting_messages(self) -> list[QueuedMessage]:
        """Every message of the waiting queues (the parked copies, in flight or not)."""
        return [m for name in self.resources.waiting_queue_names.values() for m in queue_messages(name)]

    def _copy_in_waiting_queue(self, message_id: str) -> Track | None:
        """The job of a copy not attributed yet, found in its waiting queue (then attributed)."""
        for message in self._waiting_messages():
            if message.message_id == message_id and (track := self._owner(message)) is not None:
                self._adopt(track, message_id)
                return track
        return None

    def _locate(self) -> None:
        """Final state of each message: in the DLQ, still queued (on the jobs queue, or parked in a waiting
        queue), or gone. A job's copies count as its message."""
        queued = {m.message_id for m in queue_messages(self.resources.queue_name)}
        for message in self._waiting_messages():
            queued.add(message.message_id)
            track = self._by_message.get(message.message_id) or self._owner(message)
            if track is not None:
                self._adopt(track, message.message_id)
        dead = queue_messages(self.resources.dlq_name)
        for track in self.tracks.values():
            if track.duplicate_of is not None:
                original = self.tracks[track.duplicate_of]
                track.final, track.dlq_error = original.final, original.dlq_error  # one message
                track.dlq_attributes = original.dlq_attributes
                continue
            track.on_queue = any(message_id in queued for message_id in track.message_ids)
            copy = next((m for m in dead if self._dead_copy_of(m, track)), None)
            if copy is not None:
                self._dead_lettered(track, copy)
            elif track.on_queue:
                track.final = "queued"
            elif track.lease is not None and track.lease.status is LeaseStatus.PARKED:
                pass  # its copy was taken from its waiting queue, its lease not read yet: the next poll
            elif track.lease is None or not track.lease.active:
                left = self._dead_copy_left(track)
                if left is not None:
                    self._dead_lettered(track, left)
                else:
                    track.final = "deleted" if self._deleted_after_success(track) else "lost"
            # else: deleted by the workflow, lease not yet closed: decided on the next poll

    def _dead_lettered(self, track: Track, copy: QueuedMessage) -> None:
        track.final = "dlq"
        track.dlq_error = self._dead_reason(copy, track)
        track.dlq_attributes = dict(copy.attributes)

    def _dead_copy_left(self, track: Track) -> QueuedMessage | None:
        """The latest DLQ copy of a message gone from every queue whose lease (its latest link's) sent it to
        the DLQ, a copy the DLQ took in and no longer holds: an operator's redrive, or a delete, took it
        out. The message ended in the DLQ all the same. A redriven copy names it (SQS's move task and
        `longjobs dlq redrive` keep `OriginalMessageId`), a link of its own: once delivered, its lease
        decides."""
        if not self._sent_to_dlq(track.lease):
            return None
        with self._lock:
            arrived = list(self._dead_letters)
        return next((m for m in reversed(arrived) if self._dead_copy_of(m, track)), None)

    @staticmethod
    def _dead_copy_of(message: QueuedMessage, track: Track) -> bool:
        """The DLQ holds the message itself or a copy (redrive), or the receiver's copy of it (a poison
        one, attempts used up), which names the original: for a fanned-out job, its marker."""
        ids = (*track.message_ids, track.carried_original) if track.carried_original else track.message_ids
        return message.message_id in ids or message.attributes.get(ORIGINAL_MESSAGE_ID) in ids

    @staticmethod
    def _dead_reason(message: QueuedMessage, track: Track) -> str | None:
        if "ErrorType" in message.attributes:
            return f"{message.attributes['ErrorType']}: {message.attributes.get('ErrorMessage', '')}"
        error = track.lease.last_error if track.lease else None
        return str(error) if error else None

    @staticmethod
    def _sent_to_dlq(lease: Lease | None) -> bool:
        """Whether a message's lease, as last seen, is the record of its DLQ send: REJECTED, CANCELLED, or a
        claimed DEAD_LETTERING (a given-up claim sent nothing); or none at all (a poison message whose
        record failed: the receiver sends it first)."""
        if lease is None or lease.status in (LeaseStatus.REJECTED, LeaseStatus.CANCELLED):
            return True
        return lease.status is LeaseStatus.DEAD_LETTERING and lease.claimed_at is not None

    @staticmethod
    def _deleted_after_success(track: Track) -> bool:
        """Gone from the queue for a good reason: its job succeeded (the lease of its message, or of the
        copy that ran it), or it was a body the receiver finished inline (no lease is kept for those). A DLQ
        claim given up (DEAD_LETTERING without `claimed_at`: its send failed, its receive failed the record)
        deleted nothing: that message is not gone for a good reason."""
        lease = track.lease
        if lease is not None and lease.status is LeaseStatus.DEAD_LETTERING:
            return lease.claimed_at is not None  # claimed: sent, its note lost
        return lease is None or lease.status in (LeaseStatus.SUCCEEDED, LeaseStatus.REJECTED)

    def message_id(self, job_id: str) -> str:
        """The id of the job's message as sent (on the jobs queue)."""
        return self.tracks[job_id].message_id

    def current_message_id(self, job_id: str) -> str:
        """The message that holds the job now: its own, or the parked copy that runs it."""
        return self.tracks[job_id].current_message_id

    def deliveries_of(self, job_id: str) -> list[Delivery]:
        """Every delivery of the job's message seen so far, in order."""
        with self._lock:
            return list(self.tracks[job_id].deliveries)

    def runs_its_job(self, job_id: str) -> bool:
        """Whether an execution of the job's message is running and has not yet left its job."""
        return any(
            self.job_running(message_id, attempt)
            for message_id in self.tracks[job_id].message_ids
            for attempt in self._running_attempts(message_id)
        )

    def settled(self, job_id: str) -> bool:
        """Whether the job's message is deleted or in the DLQ (as of the last `poll`)."""
        return self.tracks[job_id].final in ("deleted", "dlq")

    def _running_attempts(self, message_id: str) -> list[int]:
        attempts = []
        for name in self.running_executions():
            parsed = parse_execution_name(name)
            if parsed is not None and parsed[0] == message_id:
                attempts.append(parsed[1])
        return attempts

    def running_executions(self) -> set[str]:
        """Names of the executions running now."""
        names: set[str] = set()
        pages = self.stepfunctions.get_paginator("list_executions").paginate(
            stateMachineArn=self.resources.state_machine_arn, statusFilter="RUNNING"
        )
        for page in pages:
            names.update(execution["name"] for execution in page["executions"])
        return names

    def mark_end(self) -> None:
        """Note which executions of each message still run as the run ends."""
        running = self.running_executions()
        for track in self.tracks.values():
            track.running_at_end = frozenset(
                name for name in running if (parse_execution_name(name) or ("",))[0] in track.message_ids
            )

    def running_jobs(self) -> set[str]:
        """Job ids whose execution is running now."""
        running = set()
        pages = self.stepfunctions.get_paginator("list_executions").paginate(
            stateMachineArn=self.resources.state_machine_arn, statusFilter="RUNNING"
        )
        for page in pages:
            for execution in page["executions"]:
                parsed = parse_execution_name(execution["name"])
                track = self._by_message.get(parsed[0]) if parsed else None
                if track is not None:
                    running.add(track.job_id)
        return running

    def job_steps(self, execution_arn: str) -> tuple[float | None, float | None, bool]:
        """When the execution entered its job step and left it, and whether the step succeeded, from its
        history (None where it never got there)."""
        pages = self.stepfunctions.get_paginator("get_execution_history").paginate(executionArn=execution_arn)
        return job_step(event for page in pages for event in page["events"])

    def collect_executions(self, *, job_spans: bool = False) -> None:
        """Every execution of each message, for the report and the timeline; with `job_spans`, when each
        one's job ran too (one history read an execution: what admission bounds)."""
        for page in self.stepfunctions.get_paginator("list_executions").paginate(
            stateMachineArn=self.resources.state_machine_arn
        ):
            for execution in page["executions"]:
                parsed = parse_execution_name(execution["name"])
                track = self._by_message.get(parsed[0]) if parsed else None
                if track is None:
                    continue
                stop = execution.get("stopDate")
                stopped = stop.timestamp() if stop else None
                entered, left, succeeded = self.job_steps(execution["executionArn"])
                job = (entered, left if left is not None else stopped) if job_spans and entered is not None else None
                track.executions.append(
                    Execution(
                        execution["name"],
                        execution["status"],
                        execution["startDate"].timestamp(),
                        stopped,
                        job,
                        left,
                        entered,
                        succeeded,
                    )
                )
        for track in self.tracks.values():
            track.executions.sort(key=lambda e: e.started)
