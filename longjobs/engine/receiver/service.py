"""The receiver's business logic: one SQS record in, one `Outcome` out.

A long job goes lease -> ChangeMessageVisibility (first chunk) -> StartExecution, and its record is
reported *deferred* so the event source mapping leaves the message alone. The rule that keeps one
execution per message: **an execution runs only while its message is held**, so a redelivery never
starts a second execution while the first runs, and never releases a message whose execution may run.

- A redelivery of a message whose lease is ACTIVE adopts the newer receipt handle (fenced by receive
  count and version) and then looks at the attempt's execution: running, nothing to do; ended, settle
  it; never started, start it under the attempt's name (idempotent).
- A redelivery of a message whose lease was closed without success starts a new attempt, unless the
  closed lease's execution still runs (its stop failed or has not landed yet): then the newer receive
  adopts that execution, and nothing new starts.
- A visibility change that fails does not give the message back: the lease is marked due at once (the
  belief must never be later than the truth) and the job goes on.
- Two messages of one job id never run at once: an attempt takes its job id's lock before it starts
  (`longjobs.engine.lease.lock`). A message that finds the lock held by a running execution is not started
  and is not an attempt: a copy of it is sent back to the queue with a delay (doubling with each wait,
  counted in its `LongJobsWaits` attribute) and this receive is acknowledged, so waiting uses none of
  the message's receives before the queue's redrive. On a FIFO queue a copy would go to the back of its
  message group and SQS refuses a per-message delay, so the message holds its group instead: it is
  hidden for the wait and reported not done (`HELD`), and the rest of its group waits behind it.
- FIFO queues (`settings.fifo`): every message the receiver sends carries its group id and a
  deduplication id derived from the original message id (S3 fan-out, the DLQ), and a failed attempt's
  release delay is `fifo_release_delay_s` (it holds the group meanwhile).
- A job type may have a concurrency limit (`longjobs.engine.receiver.admission`): an attempt takes one of the
  type's slots before it starts (after its job id's lock), or does not start. A message that finds its
  type full is not an attempt: it waits hidden (a WAITING lease, its delay estimated from when a slot
  frees) or, when it could not run within the admission horizon, is parked in the type's waiting
  queue. Slots go to the longest-waiting message first.
- Attempts, not receives, decide the DLQ: the lease carries the message's history of failed attempts
  from lease to lease; after `max_attempts` of them the receiver sends the message to the DLQ itself,
  with that history, and only then lets it be deleted.
- A StartExecution that fails may still have taken effect (a 5xx or a timeout after the call landed):
  the receiver asks Step Functions, and if the execution is not there it leaves the lease ACTIVE for a
  redelivery to resume or for reconciliation to release after its grace period. An execution that
  starts after that release finds its lease no longer names it and exits without running its job.

Each step may be the last one before a crash; what closes each window:
- no lease yet: the message returns after the queue's VT and is received afresh;
- lease, no visibility change or no execution: a redelivery resumes the attempt, or reconciliation
  finds the execution never started and releases the message;
- execution started: the workflow settles the message itself (delete or release).
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from longjobs.engine.clock import Clock
from longjobs.engine.execution import (
    NEVER_STARTED,
    RUNNING_STATUSES,
    ExecutionInput,
    execution_arn,
    execution_name,
    execution_status,
    parse_execution_name,
    start_execution,
)
from longjobs.engine.lease import Acquired, Lease, LeaseStatus, LeaseStore, Lock, job_lock_key
from longjobs.engine.lease.types import Attempt
from longjobs.engine.observability import MetricName, MetricsSink, logger, type_metric
from longjobs.engine.policies import RenewalPolicy
from longjobs.engine.receiver.dlq import EXHAUSTED, STARTS_REFUSED, send_exhausted_to_dlq, send_to_dlq
from longjobs.engine.receiver.models import BadInput, Job, parse_message
from longjobs.engine.settings import SQS_MAX_VISIBILITY_S, Settings
from longjobs.engine.settle import reassert_release, release, release_holds, settle_ended
from longjobs.engine.visibility import FailureClass, VisibilityChange, VisibilityClient

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import SendMessageBatchRequestEntryTypeDef
    from mypy_boto3_stepfunctions import SFNClient

    from longjobs.engine.jobs import JobCatalog


class Outcome(StrEnum):
    """What became of a record. Deferred outcomes leave the message on the queue, hidden by its lease."""

    REJECTED = "rejected"  # poison: sent to the DLQ
    IGNORED = "ignored"  # nothing to do (an S3 test event, a deleted object)
    INLINE_DONE = "inline_done"  # ran inside the receiver
    FANNED_OUT = "fanned_out"  # an S3 notification of several objects: one job message each
    ALREADY_SUCCEEDED = "already_succeeded"  # a redelivery of a finished job: delete, do not re-run
    STARTED = "started"
    RUNNING = "running"  # redelivered while its execution runs: lease refreshed, nothing started
    SETTLED = "settled"  # redelivered after its execution ended: completed or released now
    NOT_STARTED = "not_started"  # the execution could not be started now: a redelivery or reconciliation decides
    STALE = "stale"  # an older receive than the lease's, or one already settled
    WAITING = "waiting"  # its job id runs: a delayed copy went back to the queue, this receive is done
    WAITING_FOR_SLOT = "waiting_for_slot"  # its type is full: held hidden (WAITING lease) until about when it can run
    PARKED = "parked"  # its type is full for longer than the horizon: copied to the type's waiting queue
    DUPLICATE = "duplicate"  # a parked message received again, or a twin copy of it: another copy runs it
    DEAD_LETTERED = "dead_lettered"  # its attempts are used up: sent to the DLQ with their history
    HELD = "held"  # FIFO, its job id runs: hidden for the wait, holding its group (not done)

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
        Outcome.DEAD_LETTERED,
    }
)
WAITS_ATTRIBUTE = "LongJobsWaits"
"""Message attribute of a copy sent back to wait for its job id: how many times it has waited."""
ADMISSION_ATTRIBUTE = "LongJobsAdmission"
"""Message attribute of a parked copy: JSON of what the message carries to its waiting queue (when it
first waited, its original message id, its waits and its failed attempts)."""
MAX_MESSAGE_ATTRIBUTES = 10


class InlineJobFailed(Exception):
    """An inline job failed: the record is reported failed and SQS redelivers it (then the DLQ)."""


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
        )

    @property
    def waits(self) -> int:
        value = self.message_attributes.get(WAITS_ATTRIBUTE, {}).get("StringValue", "0")
        return int(value) if str(value).isdigit() else 0

    @property
    def carried(self) -> Carried:
        """What a parked copy carries (nothing for a message as its producer sent it)."""
        raw = self.message_attributes.get(ADMISSION_ATTRIBUTE, {}).get("StringValue")
        return Carried.decode(raw) if raw else Carried()

    @property
    def original_id(self) -> str:
        """The message id its producer's message had (a parked copy has a new one)."""
        return self.carried.original_id or self.message_id


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

    def encode(self) -> str:
        return json.dumps(
            {
                "since": self.waiting_since,
                "original": self.original_id,
                "waits": self.waits,
                "attempts": [a.to_data() for a in self.history],
                "parked": self.parked_id,
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
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            logger.warning("unreadable admission attribute: ignored", extra={"value": raw[:200]})
            return cls()


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


@dataclass
class Receiver:
    """Everything the receiver needs, passed in (the handler builds it once per container)."""

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
    views: dict[str, Any] = field(default_factory=dict)
    """Admission's short-lived readings of each limited type (`longjobs.engine.receiver.admission`)."""
    last_order: float = 0.0
    """The last place in line this receiver handed out (admission: places are strictly increasing)."""

    @property
    def queue_url(self) -> str:
        return self.settings.queue_url or ""

    def queue_of(self, delivery: Delivery) -> str:
        """The queue a delivery came from: the jobs queue, or a type's waiting queue."""
        return delivery.queue_url or self.queue_url

    @property
    def state_machine_arn(self) -> str:
        return self.settings.state_machine_arn or ""


def release_delay_s(attempt: int, settings: Settings, rng: random.Random) -> int:
    """Delay before a failed attempt's message returns: doubles per attempt up to the cap, with "equal
    jitter" (half fixed, half random) so it still grows with the count while spreading retries out. The
    last attempt's message returns at once: its next receive sends it to the DLQ. On a FIFO queue the
    delay holds the message's whole group, so it is fixed (`fifo_release_delay_s`)."""
    if attempt >= settings.effective_max_attempts:
        return 0
    if settings.fifo:
        return settings.fifo_release_delay_s
    ceiling = min(float(settings.release_delay_cap_s), settings.release_delay_base_s * 2.0 ** min(attempt - 1, 64))
    return min(SQS_MAX_VISIBILITY_S, round(rng.uniform(ceiling / 2, ceiling)))


def wait_delay_s(waits: int, settings: Settings, rng: random.Random) -> int:
    """Delay of a message's copy that waits for its job id: doubles per wait up to the cap, equal jitter."""
    ceiling = min(float(settings.job_wait_cap_s), settings.job_wait_base_s * 2.0 ** min(waits, 64))
    return round(rng.uniform(ceiling / 2, ceiling))


def receive(receiver: Receiver, delivery: Delivery) -> Outcome:
    """Handle one record. Raises only when the record must be retried (reported failed)."""
    try:
        parsed = parse_message(delivery.body, receiver.settings, receiver.catalog)
    except BadInput as bad:
        reject(receiver, delivery, bad)
        return Outcome.REJECTED
    if parsed.ignored_objects and receiver.metrics is not None:
        receiver.metrics.add_metric(name=MetricName.S3_OBJECTS_IGNORED, unit="Count", value=parsed.ignored_objects)
    jobs = parsed.jobs
    if not jobs:
        return Outcome.IGNORED
    if len(jobs) > 1:
        fan_out(receiver, jobs, delivery)
        return Outcome.FANNED_OUT
    job = jobs[0]
    job_type = receiver.catalog.get(job.type)
    if job_type is not None and job_type.runner == "inline":
        run_inline(job)
        return Outcome.INLINE_DONE
    return start_long_job(receiver, delivery, job)


def reject(receiver: Receiver, delivery: Delivery, bad: BadInput) -> None:
    """DLQ first; the REJECTED lease is only a record, so its failure does not fail the record. A
    redelivery of a message already rejected (its deletion was lost) sends no second copy."""
    if _already_rejected(receiver, delivery.message_id):
        logger.info("poison message already in the DLQ", extra={"message_id": delivery.message_id})
        return
    send_to_dlq(receiver.sqs, receiver.settings.dlq_url or "", delivery, bad)
    logger.warning("poison message sent to the DLQ", extra={"message_id": delivery.message_id, "error": str(bad)})
    now = receiver.clock.now()
    record = Lease(
        message_id=delivery.message_id,
        queue_url=receiver.queue_url,
        receipt_handle=delivery.receipt_handle,
        receive_count=delivery.receive_count,
        received_at=now,
        visible_until=now,
        renew_until=now,
    )
    try:
        receiver.store.record_rejection(record, now=now, error=str(bad))
    except Exception as exc:
        logger.warning("could not record the rejection", extra={"message_id": delivery.message_id, "error": str(exc)})


def _already_rejected(receiver: Receiver, message_id: str) -> bool:
    try:
        lease = receiver.store.get(message_id)
    except Exception:  # unknown: send the copy (one copy too many beats a lost message)
        return False
    return lease is not None and lease.status is LeaseStatus.REJECTED


def fan_out(receiver: Receiver, jobs: list[Job], delivery: Delivery) -> None:
    """One job message per object, back on the jobs queue (a notification may hold several records).
    A failed entry raises, so the notification is retried; re-sent jobs are harmless (a Spark run of
    a partition is idempotent). On a FIFO queue the jobs join the notification's message group, in
    order, at its back; their deduplication ids come from the notification's message id, so a retried
    fan-out within SQS's 5-minute window sends no second copy."""
    for start in range(0, len(jobs), 10):
        entries: list[SendMessageBatchRequestEntryTypeDef] = []
        for i, job in enumerate(jobs[start : start + 10]):
            entry: SendMessageBatchRequestEntryTypeDef = {"Id": str(i), "MessageBody": job.model_dump_json()}
            if receiver.settings.fifo:
                entry["MessageGroupId"] = delivery.group_id or delivery.message_id
                entry["MessageDeduplicationId"] = f"{delivery.message_id}-{start + i}"
            entries.append(entry)
        response = receiver.sqs.send_message_batch(QueueUrl=receiver.queue_url, Entries=entries)
        if response.get("Failed"):
            raise RuntimeError(f"fan-out of an S3 notification failed: {response['Failed']}")


def builtin_catalog() -> JobCatalog:
    """The built-in job types alone (the job catalog is imported on first use: see
    `longjobs.engine.receiver.models`)."""
    from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog

    return JobCatalog(BUILTIN_TYPES)


def run_inline(job: Job) -> None:
    from longjobs.engine.jobs import INLINE_TYPES

    if job.type not in INLINE_TYPES:
        raise InlineJobFailed(f"no inline code runs job type {job.type!r}")
    if job.params.get("fail"):
        raise InlineJobFailed(f"echo job {job.job_id} was asked to fail")
    logger.info("echo", extra={"job_id": job.job_id, "text": job.params.get("text", "")})


RACE_ATTEMPTS = 3
"""How many times the receiver reads the lease again after another writer changed it first."""


def start_long_job(receiver: Receiver, delivery: Delivery, job: Job) -> Outcome:
    """Lease, hide, start; or, for a redelivery, resume or adopt the attempt the lease records."""
    for _ in range(RACE_ATTEMPTS):
        outcome = _step(receiver, delivery, job, receiver.store.get(delivery.message_id))
        if outcome is not None:
            return outcome
    return Outcome.STALE  # other writers kept changing the lease: the record comes back later


def _step(receiver: Receiver, delivery: Delivery, job: Job, lease: Lease | None) -> Outcome | None:
    """One decision on the lease as read; None when a conditional write lost its race (read again)."""
    from longjobs.engine.receiver import admission

    if lease is None:
        if not admission.runs_this_copy(receiver, delivery):
            return Outcome.DUPLICATE
        return _new_attempt(receiver, delivery, job, replacing=None)
    if admission.is_parked_marker(receiver, lease):
        return admission.park_again(receiver, delivery, lease)
    if lease.status is LeaseStatus.SUCCEEDED:
        return Outcome.ALREADY_SUCCEEDED  # the mapping deletes this copy with its current handle
    if lease.status is LeaseStatus.REJECTED:
        logger.info("already in the DLQ: acknowledged", extra={"message_id": lease.message_id})
        return Outcome.REJECTED  # sent to the DLQ before (its deletion was lost): no second copy
    if lease.receive_count > delivery.receive_count:
        return Outcome.STALE
    if lease.receive_count == delivery.receive_count and lease.receipt_handle != delivery.receipt_handle:
        # A newer receive whose count did not grow (SQS calls it approximate): adopted only once SQS has
        # accepted its handle, so an older receive with an equal count can never take the lease.
        return _adopt_same_count(receiver, delivery, job, lease) if lease.active else Outcome.STALE
    if lease.receive_count == delivery.receive_count:
        # this very receive, handled again (a repeated invocation): resume it, if still open
        if lease.waiting:
            return Outcome.WAITING_FOR_SLOT  # it waits already (or is being admitted)
        return _resume(receiver, job, lease, new=False) if lease.active else Outcome.STALE
    if lease.active:
        adopted = receiver.store.refresh_handle(lease, _timing(receiver, delivery, lease))
        return None if adopted is None else _resume(receiver, job, adopted, new=False)
    if lease.execution_arn and execution_status(receiver.stepfunctions, lease.execution_arn) in RUNNING_STATUSES:
        # Closed while its execution still runs (a stop not yet landed): adopt it, start nothing.
        reopened = replace(lease, status=LeaseStatus.ACTIVE, last_error=None, closed_at=None, checked_at=None)
        adopted = _timing(receiver, delivery, reopened)
        if not receiver.store.create(adopted, replacing=lease):
            return None
        _retake_slot(receiver, adopted)
        logger.warning(
            "redelivered while a closed lease's execution runs: adopted", extra={"message_id": lease.message_id}
        )
        return _resume(receiver, job, adopted, new=False)
    return _new_attempt(receiver, delivery, job, replacing=lease)


def _adopt_same_count(receiver: Receiver, delivery: Delivery, job: Job, lease: Lease) -> Outcome | None:
    """Adopt a receive with the lease's own count but another handle: hide the message with the new
    handle first (SQS refuses a handle that is not the latest), then record it on the lease."""
    proof = receiver.visibility.change(
        VisibilityChange(
            lease.message_id, lease.queue_url, delivery.receipt_handle, receiver.policy.initial_timeout_s()
        )
    )
    if not proof.ok:
        return Outcome.STALE  # not the latest receive (or not provable now): the lease stays as it is
    adopted = receiver.store.refresh_handle(lease, _timing(receiver, delivery, lease))
    return None if adopted is None else _resume(receiver, job, adopted, new=False)


def _timing(receiver: Receiver, delivery: Delivery, base: Lease) -> Lease:
    """A lease for this receive: the policy's first chunk from now, renewal due when the policy says."""
    now = receiver.clock.now()
    timing = replace(
        base,
        receipt_handle=delivery.receipt_handle,
        receive_count=delivery.receive_count,
        received_at=now,
        visible_until=now + receiver.policy.initial_timeout_s(),
        renew_until=receiver.settings.renew_until(now),
        renewed_at=None,
    )
    return replace(timing, renew_at=receiver.policy.renew_at(timing))


def _attempt_of(lease: Lease) -> int:
    if lease.attempt:
        return lease.attempt
    parsed = parse_execution_name((lease.execution_arn or "").rpartition(":")[2])
    return parsed[1] if parsed else lease.receive_count


def _new_attempt(receiver: Receiver, delivery: Delivery, job: Job, *, replacing: Lease | None) -> Outcome | None:
    """A new attempt of the message: unless its attempts are used up (the DLQ), its job id runs (a copy
    waits), or its type is full (it waits for a slot, or is parked)."""
    from longjobs.engine.receiver import admission

    history = replacing.history_with_this() if replacing is not None else delivery.carried.history
    if len(history) >= receiver.settings.effective_max_attempts:
        return dead_letter(receiver, delivery, history, replacing=replacing)
    refused = replacing.refused_starts_with_this() if replacing is not None else 0
    if refused >= receiver.settings.max_refused_starts:
        last = replacing.last_error if replacing is not None else None
        message = f"{refused} starts refused by Step Functions; the last: {last}"
        return dead_letter(receiver, delivery, history, replacing=replacing, error_type=STARTS_REFUSED, message=message)
    name = execution_name(delivery.message_id, delivery.receive_count)
    arn = execution_arn(receiver.state_machine_arn, name)
    holder = _take_job_lock(receiver, job.job_id, delivery.message_id, arn)
    if holder is not None and holder.holder == delivery.message_id:
        # Another receive of this very message (a duplicate delivery, handled at the same time) holds its
        # job id for its own attempt: that receive decides. A copy sent to wait here would be a second
        # message of the job, run again after this one (or after it went to the DLQ).
        return Outcome.STALE
    if holder is not None:
        if receiver.settings.fifo:
            hold_for_job(receiver, delivery, job, holder)
            return Outcome.HELD
        wait_for_job(receiver, delivery, job, holder)
        return Outcome.WAITING
    slot: str | None = None
    # FIFO: no admission. A group already runs one job at a time, and a parked copy would leave its order.
    limit = None if receiver.settings.fifo else receiver.catalog.limit(job.type)
    if limit is not None:
        waiting = replacing if replacing is not None and replacing.waiting else None
        since = admission.waiting_since(receiver, delivery, waiting)
        order = admission.place_in_line(receiver, waiting)
        arriving = waiting is None and delivery.carried.waiting_since is None
        slot = admission.claim(
            receiver, job.type, limit, message_id=delivery.message_id, order=order, arn=arn, arriving=arriving
        )
        if slot is None:
            _release_lock(receiver, job_lock_key(job.job_id), arn)
            return admission.wait_or_park(
                receiver, delivery, job, limit, replacing=replacing, history=history, since=since, order=order
            )
        if waiting is not None or delivery.carried.waiting_since is not None:
            waited = max(0.0, receiver.clock.now() - since)
            type_metric(receiver.metrics, MetricName.ADMISSION_DELAY, "Seconds", waited, job.type)
    blank = Lease(
        message_id=delivery.message_id,
        queue_url=receiver.queue_of(delivery),
        receipt_handle=delivery.receipt_handle,
        receive_count=delivery.receive_count,
        received_at=0.0,
        visible_until=0.0,
        renew_until=0.0,
        execution_arn=arn,
        attempt=delivery.receive_count,
        job_type=job.type,
        job_id=job.job_id,
        release_delay_s=release_delay_s(len(history) + 1, receiver.settings, receiver.rng),
        slot=slot,
        history=history,
        refused_starts=refused,
    )
    lease = _timing(receiver, delivery, blank)
    if not receiver.store.create(lease, replacing=replacing):
        _release_unless_named(receiver, lease)
        return None  # another invocation wrote this message's lease first
    return _resume(receiver, job, lease, new=True)


def _release_lock(receiver: Receiver, key: str, arn: str) -> None:
    try:
        receiver.store.locks.release(key, arn, now=receiver.clock.now())
    except Exception as exc:  # left held: taken over once its execution is seen not running
        logger.warning("could not release a lock", extra={"key": key, "error": str(exc)})


def _release_unless_named(receiver: Receiver, lost: Lease) -> None:
    """A lease write lost its race: free the lock and slot taken for its execution, unless the lease that
    won names that same execution (this very receive, handled twice at once). When the winner is an
    attempt of this message that had its job lock taken over by the loser (it had not started yet: a
    stalled admitter), the lock is handed back to it rather than freed, so no other message of the job
    id can take it while the winner starts."""
    try:
        winner = receiver.store.get(lost.message_id)
    except Exception:
        return  # unknown: left to be freed once the execution is seen not running
    if winner is not None and winner.execution_arn == lost.execution_arn:
        return
    if winner is not None and winner.active and winner.execution_arn and lost.job_id and winner.job_id == lost.job_id:
        _hand_lock_back(receiver, lost, winner)
        lost = replace(lost, job_id=None)  # its slot is still to free
    release_holds(lost, store=receiver.store, clock=receiver.clock)


def _hand_lock_back(receiver: Receiver, lost: Lease, winner: Lease) -> None:
    """Give the job lock that `lost`'s execution holds to `winner`'s (a conditional take-over of that very
    holding; nothing when the lock names another execution)."""
    key = job_lock_key(lost.job_id or "")
    try:
        lock = receiver.store.locks.get(key)
        if lock is None or not lock.held or lock.execution_arn != lost.execution_arn:
            return
        now = receiver.clock.now()
        receiver.store.locks.take(
            key,
            holder=winner.message_id,
            execution_arn=winner.execution_arn or "",
            now=now,
            hold_until=winner.renew_until,
            over=lock,
        )
    except Exception as exc:  # left held by the loser's execution, which never starts: taken over later
        logger.warning("could not hand a job lock back", extra={"key": key, "error": str(exc)})


def closed_record(
    receiver: Receiver, delivery: Delivery, status: LeaseStatus, *, kept_s: float = 0, **fields: Any
) -> Lease:
    """The closed lease of this receive that records where the message went (the DLQ, a waiting queue),
    closed now; `kept_s` extends its TTL past now (while a copy of the message may still exist)."""
    now = receiver.clock.now()
    return Lease(
        message_id=delivery.message_id,
        queue_url=receiver.queue_of(delivery),
        receipt_handle=delivery.receipt_handle,
        receive_count=delivery.receive_count,
        received_at=now,
        visible_until=now,
        renew_until=now + kept_s,
        status=status,
        closed_at=now,
        **fields,
    )


def dead_letter(
    receiver: Receiver,
    delivery: Delivery,
    history: tuple[Attempt, ...],
    *,
    replacing: Lease | None,
    error_type: str = EXHAUSTED,
    message: str | None = None,
) -> Outcome | None:
    """Send the message to the DLQ with its attempts' history, then record it (REJECTED), then let it be
    deleted. Raises when the send fails: the record is reported failed, nothing is deleted."""
    send_exhausted_to_dlq(
        receiver.sqs, receiver.settings.dlq_url or "", delivery, history, error_type=error_type, message=message
    )
    last = message or (history[-1].error if history else None)
    logger.warning(
        "sent to the DLQ",
        extra={"message_id": delivery.message_id, "reason": error_type, "attempts": len(history), "error": last},
    )
    record = closed_record(
        receiver,
        delivery,
        LeaseStatus.REJECTED,
        job_type=replacing.job_type if replacing is not None else None,
        last_error=f"{error_type}: {last}" if last else error_type,
        history=history,
    )
    try:
        receiver.store.create(record, replacing=replacing)
    except Exception as exc:  # a record only: a redelivery then sends a second copy, nothing is lost
        logger.warning("could not record the DLQ send", extra={"message_id": delivery.message_id, "error": str(exc)})
    return Outcome.DEAD_LETTERED


def _resume(receiver: Receiver, job: Job, lease: Lease, *, new: bool) -> Outcome:
    """Hide the message for the first chunk, then make sure the attempt's execution exists.

    `new`: the lease was just created for a new attempt, so its execution cannot exist yet.
    """
    outcome = receiver.visibility.change(
        VisibilityChange(lease.message_id, lease.queue_url, lease.receipt_handle, receiver.policy.initial_timeout_s())
    )
    if outcome.failure is FailureClass.LOST:
        # SQS handed the message out again (or it is gone): a newer receive holds it and adopts the lease.
        if new:
            closed = receiver.store.close(
                lease, LeaseStatus.LOST, now=receiver.clock.now(), error=f"first visibility change: {outcome.error}"
            )
            if closed is not None:
                release_holds(closed, store=receiver.store, clock=receiver.clock)
        return Outcome.STALE
    hidden = outcome.ok
    if not hidden:
        logger.warning(
            "first visibility change failed; the lease is due at once", extra={"message_id": lease.message_id}
        )
        lease = receiver.store.mark_due_now(lease, receiver.clock.now()) or lease
    elif not new and _released_meanwhile(receiver, lease):
        return Outcome.SETTLED
    if new:
        status = NEVER_STARTED
    else:
        try:
            status = execution_status(receiver.stepfunctions, lease.execution_arn)
        except Exception as exc:
            logger.error(
                "execution status unknown; the lease stays", extra={"message_id": lease.message_id, "error": str(exc)}
            )
            return Outcome.NOT_STARTED
    if status in RUNNING_STATUSES:
        logger.warning("redelivered while its job runs", extra={"message_id": lease.message_id})
        return Outcome.RUNNING
    if status != NEVER_STARTED:
        settle_ended(
            lease, status, store=receiver.store, visibility=receiver.visibility, sqs=receiver.sqs, clock=receiver.clock
        )
        return Outcome.SETTLED
    if not hidden:
        # Not started on a guess: the message is hidden only by the queue's visibility timeout from the
        # receive, which need not outlast the extender runs the settings allow to be lost. The due lease
        # is renewed by the extender, and reconciliation releases the attempt that never started (no
        # attempt counted); its next receive starts it.
        return Outcome.NOT_STARTED
    if not new and lease.job_id and lease.execution_arn:
        # Resuming an attempt that never started: its lock may have been taken over meanwhile.
        holder = _take_job_lock(receiver, lease.job_id, lease.message_id, lease.execution_arn)
        if holder is not None:
            delay = wait_delay_s(0, receiver.settings, receiver.rng)
            release(
                lease,
                store=receiver.store,
                visibility=receiver.visibility,
                clock=receiver.clock,
                reason=_waiting(holder),
                delay_s=delay,
                never_started=True,
            )
            return Outcome.SETTLED
    if not new and lease.slot and not _retake_slot(receiver, lease):
        # Its slot was freed as stale and taken by another execution: it may not start without one.
        delay = wait_delay_s(0, receiver.settings, receiver.rng)
        reason = "waiting: its admission slot was taken over while it had not started"
        release(
            lease,
            store=receiver.store,
            visibility=receiver.visibility,
            clock=receiver.clock,
            reason=reason,
            delay_s=delay,
            never_started=True,
        )
        return Outcome.SETTLED
    return _start(receiver, job, lease)


def _retake_slot(receiver: Receiver, lease: Lease) -> bool:
    """Take the lease's slot again for its execution (it holds it still, or the slot is free); False when
    another execution holds it now."""
    if not lease.slot or not lease.execution_arn:
        return True
    try:
        return receiver.store.locks.take(
            lease.slot,
            holder=lease.message_id,
            execution_arn=lease.execution_arn,
            now=receiver.clock.now(),
            hold_until=lease.renew_until,
        )
    except Exception as exc:
        logger.warning("could not take the slot again", extra={"slot": lease.slot, "error": str(exc)})
        return False


def _take_job_lock(receiver: Receiver, job_id: str, message_id: str, arn: str) -> Lock | None:
    """Take the job id's lock for this attempt's execution; the lock that keeps it out, else None.

    A lock held by another execution is taken over when that execution is not running: it has ended,
    or it never started and the receiver that was to start it is past its timeout (the grace period).
    A lock of another attempt of this same message is taken over whenever its execution is not
    running: the message's one lease decides which attempt runs.
    """
    now = receiver.clock.now()

    def is_stale(lock: Lock) -> bool:
        try:
            status = execution_status(receiver.stepfunctions, lock.execution_arn)
        except Exception as exc:  # unknown: treat as running (waiting is safe, running twice is not)
            logger.warning("job lock holder's status unknown", extra={"job_id": job_id, "error": str(exc)})
            return False
        if status in RUNNING_STATUSES:
            return False
        if status != NEVER_STARTED or lock.holder == message_id:
            return True
        return now - lock.acquired_at >= receiver.settings.reconcile_grace_s

    taken = receiver.store.locks.acquire(
        job_lock_key(job_id),
        holder=message_id,
        execution_arn=arn,
        now=now,
        hold_until=receiver.settings.renew_until(now),
        is_stale=is_stale,
    )
    return None if isinstance(taken, Acquired) else taken.lock


def _waiting(holder: Lock) -> str:
    return f"waiting: its job id is held by {holder.execution_arn.rpartition(':')[2]}"


def wait_for_job(receiver: Receiver, delivery: Delivery, job: Job, holder: Lock) -> None:
    """Send a delayed copy of the message back to the queue (this receive is then acknowledged and
    deleted): it tries again when the delay ends, without using up a receive. Raises if SQS refuses:
    the record is then reported failed and comes back after the queue's VT."""
    waits = delivery.waits + 1
    delay = wait_delay_s(delivery.waits, receiver.settings, receiver.rng)
    attributes = dict(delivery.message_attributes)
    if WAITS_ATTRIBUTE in attributes or len(attributes) < MAX_MESSAGE_ATTRIBUTES:  # else its waits do not grow
        attributes[WAITS_ATTRIBUTE] = {"DataType": "Number", "StringValue": str(waits)}
    receiver.sqs.send_message(
        QueueUrl=receiver.queue_url, MessageBody=delivery.body, DelaySeconds=delay, MessageAttributes=attributes
    )
    logger.info(
        "job id is running: the message waits",
        extra={"message_id": delivery.message_id, "job_id": job.job_id, "waits": waits, "delay_s": delay},
    )


def hold_for_job(receiver: Receiver, delivery: Delivery, job: Job, holder: Lock) -> None:
    """FIFO: the message waits for its job id in place, holding its group. It is hidden for the wait delay
    (doubling with its receives: SQS counts each wait as one) and reported not done; the FIFO batch
    processor then leaves the rest of its group in this batch alone. A visibility change that fails
    leaves the message hidden for the queue's VT, which is a wait too."""
    delay = wait_delay_s(max(0, delivery.receive_count - 1), receiver.settings, receiver.rng)
    outcome = receiver.visibility.change(
        VisibilityChange(delivery.message_id, receiver.queue_url, delivery.receipt_handle, delay)
    )
    logger.info(
        "job id is running: the message holds its group",
        extra={
            "message_id": delivery.message_id,
            "job_id": job.job_id,
            "holder": holder.execution_arn.rpartition(":")[2],
            "delay_s": delay,
            "error": outcome.error,
        },
    )


def _released_meanwhile(receiver: Receiver, adopted: Lease) -> bool:
    """After hiding an adopted message: if the workflow released it meanwhile, our change may have
    landed after the release's and hidden it again, so the release is applied once more."""
    fresh = receiver.store.get(adopted.message_id)
    if fresh is None or fresh.status is not LeaseStatus.RELEASED or fresh.receipt_handle != adopted.receipt_handle:
        return False
    reassert_release(fresh, visibility=receiver.visibility, clock=receiver.clock)
    return True


def _start(receiver: Receiver, job: Job, lease: Lease) -> Outcome:
    payload = ExecutionInput(
        message_id=lease.message_id,
        attempt=_attempt_of(lease),
        queue_url=lease.queue_url,
        release_delay_s=lease.release_delay_s,
        job=job.model_dump(mode="json"),
        slot=lease.slot,
    )
    try:
        start_execution(receiver.stepfunctions, receiver.state_machine_arn, payload)
    except Exception as exc:
        # The call may have taken effect (a 5xx or a timeout after it landed): never give the message
        # back on a guess. Ask; if it is not there, the lease stays for a redelivery or reconciliation.
        try:
            status = execution_status(receiver.stepfunctions, lease.execution_arn)
        except Exception:
            status = None
        if status is not None and status != NEVER_STARTED:
            logger.warning("start answered with an error but the execution exists", extra={"error": str(exc)})
            return Outcome.STARTED
        logger.error(
            "execution not started; reconciliation releases the message if no redelivery starts it",
            extra={"message_id": lease.message_id, "error": str(exc)},
        )
        return Outcome.NOT_STARTED
    return Outcome.STARTED
