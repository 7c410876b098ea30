"""Cancelling a message: an operator's decision that its job must not run (again), settled exactly once.

`longjobs cancel` and the offline runtime share this module: a pure decision on the lease as read
(`decide`), then the effects (`cancel`), in an order that never loses the message and never retries it:

1. **Mark** the lease CANCELLED: one write conditional on its version and status as read
   (`mark_cancelled`). Every other writer of a lease is conditional too, so a cancel racing a
   success, an admission in place (WAITING) or a parked copy's claim (PARKED) settles once: the loser
   reads again. A lease found SUCCEEDED is left alone ("already succeeded"); so is an ACTIVE one whose
   execution SUCCEEDED (the workflow's close failed for good), completed first as reconciliation
   would: a DLQ copy of a job that ran would be run again by a redrive. Once CANCELLED, nothing
   reconciles, admits or releases the lease, a parked copy's claim is refused, and the workflow's closes
   refuse it: a job that runs on after the mark (its stop refused, the operator's process gone) never has
   its success recorded, nor its message deleted as succeeded, nor released for a retry.
   The mark is safe on its own: until the cancel is finished the lease stays in the `due` index, at
   its renew-at or `HANDOVER_S` after the mark, whichever is sooner, and the extender keeps its message
   hidden, and once the hand-over has passed finishes what the cancel left (`finish`): a cancel cut
   short converges without its operator.
2. **Stop** the attempt's execution (`StopExecution`, error `Cancelled`, the reason as its cause), then
   read the lease again. A deployed workflow whose success close does not refuse CANCELLED (an older
   definition) may have closed it SUCCEEDED between the mark and the stop; then the job did succeed,
   and the cancel reports "already succeeded" and sends nothing. StopExecution does not wait for the job
   run of a `.sync` task.
3. **Free** the execution's job lock and admission slot, each conditional on that execution still holding
   it (`longjobs.engine.settle.release_holds`), and read them back: one still held by the execution (its
   write failed) leaves the cancel unfinished (`HoldsNotFreed`), so the extender or a second cancel frees it.
4. **Dead-letter** the message: its body goes to the DLQ with `ErrorType` `Cancelled`, the reason as
   `ErrorMessage` and the attempts' history (the receiver's DLQ format, `longjobs.engine.delivery.dlq`),
   then it is deleted from its queue with the lease's receipt handle. Never a release: it does not come
   back as a retry. A delete SQS refuses for good (the message was received again meanwhile) is noted:
   that redelivery finds the lease CANCELLED and is acknowledged (the receiver's row for CANCELLED).
   One DLQ copy per message: the send is claimed first on the lease (`CancelRecord.sending_at`, a write
   conditional on its version), so of two carriers at once (two operators, an operator and the extender)
   one sends and the other is told another is sending (`CancelRaced`); the copy's id is noted right after
   the send, so a carrier that died later (before its delete) leaves nothing to send again. A claim whose
   holder died is taken over after `SEND_CLAIM_S`; only a death between the send and its note (or a send
   whose answer was lost after it landed) can add a second copy. A receive that sends the copy (the cancel
   had no body) claims it the same way (`claim_dead_letter`).
5. **Note** the outcome on the lease (its `result`: the reason, the DLQ copy's id, whether it was
   deleted), so `longjobs lease ID` tells it, and the lease leaves the `due` index. A cancel cut short (a
   crash, a throttled call) is finished by the extender, or at once by cancelling again (`decide` returns
   RESUME for a CANCELLED lease not yet done).

Where the body comes from, since SQS cannot read a message by its handle:

- a WAITING lease keeps the job (`Lease.job`);
- an attempt's execution keeps it in its input (`ExecutionInput.job`): the lease's execution, else an
  earlier attempt's (the history names them);
- a lease whose execution never started and that has no earlier attempt has no copy of the body: the
  message is left on its queue (not deleted), hidden until its lease's visible-until, and its next
  receive finds the lease CANCELLED: the receiver sends it to the DLQ then (`dead_letter_delivery`);
- a PARKED marker holds the message (`parked_message`): it is sent to the DLQ at once, the marker turns
  CANCELLED, and its copies' claims are refused (they never run, and are acknowledged); a marker
  that does not hold its message (one an older release wrote) leaves the copy to be dead-lettered when
  admission receives it (`dead_letter_delivery`);
- a REQUEUED marker (the message waits for its job id as a delayed copy on its queue) holds no body:
  the marker turns CANCELLED, and the copy, refused when it claims the run, is dead-lettered by the
  receiver (`dead_letter_delivery`).

The DLQ copy carries the job message the receiver parsed (`{"job_id", "type", "params"}`), not
necessarily the producer's bytes (an S3 notification became a job), and none of the producer's message
attributes; on a FIFO DLQ it keeps its message group (`Lease.group_id`; a lease written before it
recorded the group: its message id).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from longjobs.engine.clock import Clock
from longjobs.engine.delivery.copies import CLAIM_STALE_S, message_to_send
from longjobs.engine.delivery.dlq import ERROR_MESSAGE_MAX, exhausted_attributes, send_copy
from longjobs.engine.delivery.types import Delivery
from longjobs.engine.execution import RUNNING_STATUSES, execution_arn, execution_status
from longjobs.engine.lease import LastError, Lease, LeaseStatus, LeaseStore, is_lease_key, is_lock_key
from longjobs.engine.lease.codec import item_to_lease, num
from longjobs.engine.lease.lock import hold_keys
from longjobs.engine.lease.schema import (
    PARTITION_KEY,
    RENEW_AT_ATTR,
    RESULT_ATTR,
    SHARD_ATTR,
    TTL_ATTR,
    WAITING_TYPE_ATTR,
)
from longjobs.engine.lease.types import COPIED_STATUSES
from longjobs.engine.lease.writes import conditional, values_of
from longjobs.engine.observability import logger
from longjobs.engine.settings import Settings
from longjobs.engine.settle import complete, release_holds
from longjobs.engine.visibility import FailureClass
from longjobs.engine.visibility.errors import classify_exception, describe_exception

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

CANCELLED = "Cancelled"
"""The DLQ's `ErrorType` of a cancelled message, and the error its execution is stopped with."""
RECORD_KEY = "cancel"
"""The key of the cancel's record in the lease's `result`."""
RACE_ATTEMPTS = 3
"""How many times a cancel reads the lease again after another writer changed it first."""
DEFAULT_REASON = "cancelled by an operator"
HANDOVER_S = 60.0
"""How long after its mark a cancel is left to the process that marked it. The extender keeps the message
hidden meanwhile, and finishes a cancel still unfinished after that (its operator's process died, or a step
failed past its retries)."""
SEND_CLAIM_S = 300.0
"""How long a claim to send a message's DLQ copy (`CancelRecord.sending_at`) keeps any other carrier of the
cancel from sending one: far longer than a send and its note take, even throttled."""
FINISH_RETRY_S = 60.0
"""How soon the extender looks again at a cancel it could not finish (its stop refused): its renewal of the
message's visibility falls due again no later than this."""


class Decision(StrEnum):
    """What a cancel does with a lease as read (`decide`)."""

    MARK = "mark"  # open, or closed with a retry to come: mark it CANCELLED, then stop, free, dead-letter
    RESUME = "resume"  # CANCELLED by a cancel that did not finish: carry out what is left
    FOLLOW_COPY = "follow_copy"  # a PARKED or REQUEUED marker whose copy claimed the run: cancel the copy's lease
    ALREADY_SUCCEEDED = "already_succeeded"  # the job succeeded: nothing to cancel
    ALREADY_DEAD_LETTERED = "already_dead_lettered"  # REJECTED: sent to the DLQ already
    ALREADY_CANCELLED = "already_cancelled"  # cancelled, every effect done

    @property
    def acts(self) -> bool:
        return self in (Decision.MARK, Decision.RESUME, Decision.FOLLOW_COPY)


class Outcome(StrEnum):
    """What a cancel did."""

    CANCELLED = "cancelled"  # marked and carried out now
    COMPLETED = "completed"  # an earlier cancel's remaining effects carried out now
    ALREADY_CANCELLED = "already_cancelled"
    ALREADY_SUCCEEDED = "already_succeeded"  # before the cancel, or before its stop landed: nothing done
    ALREADY_DEAD_LETTERED = "already_dead_lettered"


class UnknownId(LookupError):
    """Neither a message id with a lease nor a job id of any lease."""

    def __init__(self, ident: str) -> None:
        super().__init__(f"no lease for message or job id {ident!r}")
        self.ident = ident


class CancelRaced(RuntimeError):
    """Other writers kept changing the lease: nothing was cancelled (try again)."""


@dataclass(frozen=True)
class CancelRecord:
    """The cancel's reason and progress, kept in the lease's `result` under `RECORD_KEY`."""

    reason: str
    previous_status: str
    at: float
    done: bool = False
    dead_letter_id: str | None = None
    deleted: bool = False
    note: str | None = None
    sending_at: float | None = None
    """When a carrier of the cancel claimed the DLQ send (see the module's step 4), None before any."""
    sending_by: str | None = None
    """The receive that claimed the send, by its name (its receipt handle and a draw of its own:
    `claim_dead_letter`); None for a cancel's or the extender's claim. A receive has the body only in the
    message it received."""

    def to_result(self) -> dict[str, Any]:
        return {
            RECORD_KEY: {
                "reason": self.reason,
                "previous_status": self.previous_status,
                "at": self.at,
                "done": self.done,
                "dead_letter_id": self.dead_letter_id,
                "deleted": self.deleted,
                "note": self.note,
                "sending_at": self.sending_at,
                "sending_by": self.sending_by,
            }
        }

    def send_claimed(self, now: float) -> bool:
        """Whether a carrier of the cancel claimed its DLQ send less than `SEND_CLAIM_S` ago, and has not
        noted the copy yet: any other carrier leaves the send to it."""
        return self.dead_letter_id is None and self.sending_at is not None and now - self.sending_at < SEND_CLAIM_S

    @classmethod
    def of(cls, lease: Lease) -> CancelRecord | None:
        """The record a CANCELLED lease keeps (None for any other, or one without a readable record)."""
        data = (lease.result or {}).get(RECORD_KEY) if lease.status is LeaseStatus.CANCELLED else None
        if not isinstance(data, dict):
            return None
        return cls(
            reason=str(data.get("reason") or DEFAULT_REASON),
            previous_status=str(data.get("previous_status") or ""),
            at=float(data.get("at") or 0.0),
            done=bool(data.get("done")),
            dead_letter_id=data.get("dead_letter_id"),
            deleted=bool(data.get("deleted")),
            note=data.get("note"),
            sending_at=float(data["sending_at"]) if data.get("sending_at") is not None else None,
            sending_by=data.get("sending_by"),
        )


@dataclass(frozen=True)
class CancelReport:
    """One message's cancel: what was found and what was done."""

    message_id: str
    outcome: Outcome
    previous_status: str
    job_type: str | None = None
    job_id: str | None = None
    execution_stopped: str | None = None
    holds_released: bool = False
    dead_letter_id: str | None = None
    deleted: bool = False
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Canceller:
    """What a cancel needs: the lease store, SQS, Step Functions, the DLQ and a clock."""

    store: LeaseStore
    sqs: SQSClient
    stepfunctions: SFNClient
    dlq_url: str
    clock: Clock


OPERATOR_SHARDS = 1
"""The shard count of an operator's lease store (`operator_store`): a cancel reads and writes by key, and
only the mark's `shard` attribute depends on the count. With one, a cancel's lease lands on shard 0, which
every extender watches whatever the stack's count, and before, during and after a deploy that changes it."""


def operator_store(dynamodb: DynamoDBClient, table_name: str) -> LeaseStore:
    """The lease store an operator's cancel goes through (`longjobs cancel`, the simulation's operator):
    it need not know the deployed stack's settings (`OPERATOR_SHARDS`; closed leases keep the default TTL)."""
    return LeaseStore(dynamodb, table_name, shards=OPERATOR_SHARDS, closed_ttl_s=Settings().closed_ttl_s)


# -- the decision --------------------------------------------------------------------------------


def decide(lease: Lease) -> Decision:
    """What a cancel does with `lease` as read. Pure: the effects follow in `cancel`."""
    if lease.status is LeaseStatus.SUCCEEDED:
        return Decision.ALREADY_SUCCEEDED
    if lease.status in (LeaseStatus.REJECTED, LeaseStatus.DEAD_LETTERING):  # a receive sends the latter
        return Decision.ALREADY_DEAD_LETTERED
    if lease.status is LeaseStatus.CANCELLED:
        record = CancelRecord.of(lease)
        return Decision.ALREADY_CANCELLED if record is not None and record.done else Decision.RESUME
    if lease.status in COPIED_STATUSES and lease.claimed_by:
        return Decision.FOLLOW_COPY
    return Decision.MARK


def redelivery_needs_dead_letter(lease: Lease) -> bool:
    """Whether a message received with a CANCELLED lease (a redelivery, or a copy its cancelled marker
    refused) is still to be sent to the DLQ: no DLQ copy is noted, and no cancel's carrier claimed the send.

    A cancel's or the extender's claim has its body at hand (an execution's input, a marker's message) and
    is finished by its claimant, or by the extender from the lease (which stays due until the cancel is
    done): the receive is acknowledged. A receive's claim has only the message it received, which may
    never come back: so a receive that meets one is never acknowledged for it (`receive_may_send`)."""
    record = CancelRecord.of(lease)
    if lease.status is not LeaseStatus.CANCELLED:
        return False
    if record is None or record.sending_by is not None:
        return record is None or record.dead_letter_id is None
    return record.dead_letter_id is None and record.sending_at is None


def receive_may_send(lease: Lease, receive: str, *, now: float, life_s: float) -> bool:
    """Whether the receive named `receive` may claim the DLQ send now: no other receive holds a claim
    younger than `life_s`, how long the invocation that made it may still run
    (`longjobs.engine.delivery.dlq_claim.claim_life_s`). Another receive (a duplicate delivery, a twin
    copy, the same record handled twice) may still be sending; this one then comes back later, to find
    the copy noted or the claim old enough to take over. Its own claim is its pass read again after the
    claim landed unanswered."""
    record = CancelRecord.of(lease)
    if record is None or record.sending_by in (None, receive) or record.dead_letter_id is not None:
        return True
    return record.sending_at is None or now - record.sending_at >= life_s


def claim_dead_letter(store: LeaseStore, lease: Lease, receive: str, *, now: float) -> Lease | None:
    """Claim, for the receive named `receive`, the DLQ send of a CANCELLED lease or marker, as a cancel
    claims its own (step 4): one write conditional on the version read, so of a receive and a cancel's
    carrier at once one sends. None when another writer changed it first (read again)."""
    record = CancelRecord.of(lease) or CancelRecord(DEFAULT_REASON, lease.status.value, now)
    claim = replace(record, sending_at=now, sending_by=receive)
    error = lease.last_error or _error(record.reason)
    due_at = None if record.done else lease.renew_at  # an unfinished cancel stays due: the extender finishes it
    return mark_cancelled(store, lease, now=now, error=error, record=claim.to_result(), due_at=due_at)


# -- finding what to cancel ----------------------------------------------------------------------


def leases_of_job(dynamodb: DynamoDBClient, table_name: str, job_id: str) -> list[Lease]:
    """Every lease of a job id, oldest receive first: a Scan of the whole table filtered on `job_id`
    (the table has no index by job id; a cancel by job id is rare and operator-driven). Strongly
    consistent, at twice the read units: a lease a receive wrote a moment before the cancel is found
    (DynamoDB's Scan API: with `ConsistentRead`, every write completed before the Scan began is in its
    response; without, a recent write may be missing)."""
    pages = dynamodb.get_paginator("scan").paginate(
        TableName=table_name,
        ConsistentRead=True,
        FilterExpression="#job = :job",
        ExpressionAttributeNames={"#job": "job_id"},
        ExpressionAttributeValues={":job": {"S": job_id}},
    )
    leases = [
        item_to_lease(item)
        for page in pages
        for item in page.get("Items", [])
        if not is_lock_key(item[PARTITION_KEY]["S"]) and "status" in item
    ]
    return sorted(leases, key=lambda lease: (lease.received_at, lease.message_id))


@dataclass(frozen=True)
class Targets:
    """What an id names: one message (`by_job` False), or every lease of a job id."""

    ident: str
    by_job: bool
    leases: list[Lease] = field(default_factory=list)

    @property
    def to_cancel(self) -> list[Lease]:
        """The leases a cancel acts on (a job's finished messages are only reported). A parked marker whose
        copy claimed the run is left out when the copy's own lease is among them (it is cancelled once)."""
        ids = {lease.message_id for lease in self.leases}
        return [
            lease
            for lease in self.leases
            if decide(lease).acts and not (decide(lease) is Decision.FOLLOW_COPY and lease.claimed_by in ids)
        ]

    @property
    def finished(self) -> list[Lease]:
        """The leases there is nothing to cancel of: succeeded, in the DLQ already, or cancelled."""
        return [lease for lease in self.leases if not decide(lease).acts]


def find_targets(store: LeaseStore, dynamodb: DynamoDBClient, table_name: str, ident: str) -> Targets:
    """The lease of message `ident`, else every lease of job id `ident`. A message id wins: message ids
    are SQS's UUIDs, job ids are the producer's. The key of an item that is not a lease (a job lock, a
    slot, the published job types) names no message. Raises `UnknownId` when neither exists."""
    lease = store.get(ident) if is_lease_key(ident) else None
    if lease is not None:
        return Targets(ident, by_job=False, leases=[lease])
    leases = leases_of_job(dynamodb, table_name, ident)
    if not leases:
        raise UnknownId(ident)
    return Targets(ident, by_job=True, leases=leases)


# -- the effects ---------------------------------------------------------------------------------


def cancel(canceller: Canceller, message_id: str, reason: str = DEFAULT_REASON) -> CancelReport:
    """Cancel one message (see the module's steps). Raises `UnknownId` when it has no lease, `CancelRaced`
    when other writers kept changing its lease, and any AWS error of a step (the lease then stays
    CANCELLED and not done: cancelling again finishes it)."""
    ours: CancelRecord | None = None  # this call's mark, once sent: it may land with its answer lost
    for _ in range(RACE_ATTEMPTS):
        lease = canceller.store.get(message_id)
        if lease is None:
            raise UnknownId(message_id)
        decision = decide(lease)
        if decision is Decision.FOLLOW_COPY:
            followed = _follow_copy(canceller, lease, reason)
            if followed is not None:
                return followed
            decision = Decision.MARK  # its claimant copy never got a lease: the marker itself is cancelled
        if not decision.acts:
            return _report(lease, Outcome(decision.value), previous=lease.status.value)
        if decision is Decision.RESUME:
            record = CancelRecord.of(lease) or CancelRecord(reason, lease.status.value, canceller.clock.now())
            # Our own mark, found on the lease after its write answered a failure (a timeout, then a retry
            # whose condition failed): this call cancelled it, it is not an earlier cancel's completion.
            mine = ours is not None and (record.reason, record.previous_status, record.at) == (
                ours.reason,
                ours.previous_status,
                ours.at,
            )
            resumed = _carry_out(canceller, lease, record, outcome=Outcome.CANCELLED if mine else Outcome.COMPLETED)
            if resumed is not None:
                return resumed
            continue
        if lease.active and execution_status(canceller.stepfunctions, lease.execution_arn) == "SUCCEEDED":
            # The job succeeded, but the workflow's close never landed (reconciliation completes such a
            # lease on its next look): complete it now. A DLQ copy of a job that ran would be run again
            # by a redrive.
            completed = complete(lease, store=canceller.store, sqs=canceller.sqs, clock=canceller.clock)
            if completed is not None:
                return _report(
                    completed,
                    Outcome.ALREADY_SUCCEEDED,
                    previous=lease.status.value,
                    notes=("its execution had succeeded: completed, as reconciliation would",),
                )
            continue  # the lease changed meanwhile: read it again
        now = canceller.clock.now()
        record = ours = CancelRecord(reason=reason, previous_status=lease.status.value, at=now)
        marked = mark_cancelled(
            canceller.store,
            lease,
            now=now,
            error=_error(reason),
            record=record.to_result(),
            due_at=handover_due(lease, now),
        )
        if marked is not None:
            done = _carry_out(canceller, marked, record, outcome=Outcome.CANCELLED)
            if done is not None:
                return done
    raise CancelRaced(f"the lease of {message_id} kept changing while it was being cancelled: try again")


def handover_due(lease: Lease, now: float) -> float:
    """The renew-at a lease gets at its mark: the extender's look at the cancel comes `HANDOVER_S` after
    the mark, or at the lease's own renew-at if that is sooner (its message must stay hidden)."""
    handover = now + HANDOVER_S
    return min(lease.renew_at, handover) if lease.renew_at is not None else handover


COPIED_VALUES = frozenset(status.value for status in COPIED_STATUSES)
"""A marker's earlier statuses: its message was acknowledged when copied, so there is none to keep hidden."""


class Finish(StrEnum):
    """What the extender did with a CANCELLED lease it found due (`finish`)."""

    FINISHED = "finished"  # what the cancel left is done: stopped, freed, in the DLQ, deleted, noted
    HIDE = "hide"  # not finished (in its hand-over, or a step failed): its message is to stay hidden
    LEFT = "left"  # another carrier sends its DLQ copy now, or the lease changed: nothing this time


def finish(canceller: Canceller, read: Lease) -> tuple[Finish, Lease]:
    """The extender's part of a cancel: a CANCELLED lease it found due, read again consistently. Within its
    hand-over (`HANDOVER_S` from the mark) the cancel is its operator's: HIDE. After it, the rest of the
    cancel is carried out here (the stop first), as cancelling again would; a step that fails (the stop
    still throttled) leaves it to HIDE, and a try again `FINISH_RETRY_S` later. A send claimed by another
    carrier is left to it (LEFT, no renewal: its note follows within seconds). Returns the lease to renew
    with (as read again)."""
    lease = canceller.store.get(read.message_id)
    if lease is None or lease.status is not LeaseStatus.CANCELLED:
        return Finish.LEFT, read
    record = CancelRecord.of(lease)
    now = canceller.clock.now()
    if record is not None and record.done:
        return Finish.LEFT, lease  # the index lagged its done note
    if record is not None and record.send_claimed(now):
        return Finish.LEFT, lease
    hide = Finish.LEFT if record is not None and record.previous_status in COPIED_VALUES else Finish.HIDE
    if record is not None and now - record.at < HANDOVER_S:
        return hide, lease
    try:
        report = _carry_out(
            canceller,
            lease,
            record or CancelRecord(DEFAULT_REASON, lease.status.value, now),
            outcome=Outcome.COMPLETED,
        )
    except CancelRaced:
        return Finish.LEFT, lease
    except Exception as exc:
        logger.warning(
            "could not finish a cancel: its message is kept hidden, tried again later",
            extra={"message_id": lease.message_id, "error": describe_exception(exc)},
        )
        return hide, canceller.store.get(lease.message_id) or lease
    if report is None:
        return Finish.LEFT, lease
    logger.info(
        "cancel finished by the extender",
        extra={"message_id": lease.message_id, "dead_letter_id": report.dead_letter_id, "deleted": report.deleted},
    )
    return Finish.FINISHED, lease


def _follow_copy(canceller: Canceller, marker: Lease, reason: str) -> CancelReport | None:
    """A parked or requeued message whose copy claimed the run: the job is the copy's now, so the copy is
    cancelled (and so on along the chain of copies). None when the copy has no lease and its claim is
    `CLAIM_STALE_S` old: its receives are over and it never got one (it went to the DLQ through SQS's
    redrive); then the marker itself is cancelled, so a redrive of that copy is refused its run."""
    copy_id = marker.claimed_by or ""
    try:
        report = cancel(canceller, copy_id, reason)
    except UnknownId:
        if canceller.clock.now() - (marker.claimed_at or 0.0) >= CLAIM_STALE_S:
            return None
        raise CancelRaced(
            f"{marker.message_id} was {marker.status.value.lower()} and its copy {copy_id} claimed the run "
            "but has no lease yet: try again in a moment"
        ) from None
    note = f"{marker.status.value.lower()} as {marker.message_id}; its copy {copy_id} ran it, so the copy was cancelled"
    return replace(report, notes=(note, *report.notes))


def _carry_out(canceller: Canceller, lease: Lease, record: CancelRecord, *, outcome: Outcome) -> CancelReport | None:
    """Steps 2 to 5 on a lease marked CANCELLED. None when another writer changed the lease first (the
    caller reads it again); raises `CancelRaced` when another carrier of the cancel claimed its DLQ send."""
    notes: list[str] = []
    stopped = None
    if record.send_claimed(canceller.clock.now()):
        raise _sending_elsewhere(lease)
    if lease.execution_arn:
        if stop(canceller.stepfunctions, lease.execution_arn, record.reason):
            stopped = lease.execution_arn
        current = canceller.store.get(lease.message_id)
        if current is not None and current.status is LeaseStatus.SUCCEEDED:
            # Only a workflow whose success close does not refuse CANCELLED (an older definition) closes it so.
            release_holds(current, store=canceller.store, clock=canceller.clock)
            return _report(
                current,
                Outcome.ALREADY_SUCCEEDED,
                previous=record.previous_status,
                notes=("the job succeeded before the stop landed: nothing was sent to the DLQ",),
            )
        if current is None or current.status is not LeaseStatus.CANCELLED:
            return None
        if current.version != lease.version:  # a renewal, a receive's note, another carrier's progress
            record = CancelRecord.of(current) or record
            if record.done:
                return None
            if record.send_claimed(canceller.clock.now()):
                raise _sending_elsewhere(current)
            lease = current
    released = release_holds(lease, store=canceller.store, clock=canceller.clock)
    _check_holds_freed(canceller, lease)
    dead_letter_id, deleted = record.dead_letter_id, record.deleted
    body: str | None = None
    if record.previous_status == LeaseStatus.PARKED.value and dead_letter_id is None and lease.parked_message:
        # The marker holds the message: it goes to the DLQ now, not when a copy is received (which a
        # backlog longer than the queue's retention might never do); its copies' claims are refused.
        body, _, _ = message_to_send(lease.parked_message)
        notes.append("parked: sent to the DLQ from its marker; its copy never runs and is acknowledged")
    elif record.previous_status == LeaseStatus.PARKED.value:
        notes.append(
            "parked: its copy waits in the waiting queue with the body; when admission receives it, its claim "
            "is refused (it never runs) and the receiver dead-letters it as Cancelled"
        )
    elif record.previous_status == LeaseStatus.REQUEUED.value:
        notes.append(
            "requeued: its copy waits on its queue with the body (its job id was running); when it is "
            "received, its claim is refused (it never runs) and the receiver dead-letters it as Cancelled"
        )
    elif dead_letter_id is None:
        body = job_body(canceller.stepfunctions, lease)
        if body is None:
            notes.append(
                "no copy of the body here (its execution never started): the message stays on its queue, "
                "and the receiver dead-letters it as Cancelled when it is received again"
            )
    if body is not None:
        claimed = _claim_send(canceller, lease, record)
        if claimed is None:
            return None
        lease, record = claimed
        try:
            dead_letter_id = send_cancelled(canceller.sqs, canceller.dlq_url, lease, body, record.reason)
        except Exception:
            _release_claim(canceller, lease, record)
            raise
        if record.previous_status == LeaseStatus.PARKED.value:
            deleted = True  # the original was acknowledged when it was parked
        sent = replace(record, dead_letter_id=dead_letter_id, deleted=deleted)
        lease, record = _note(canceller, lease, record, sent)
    if dead_letter_id is not None and not deleted:
        deleted, note = delete(canceller.sqs, lease)
        if note:
            notes.append(note)
    done = replace(record, done=True, dead_letter_id=dead_letter_id, deleted=deleted, note="; ".join(notes) or None)
    if _note(canceller, lease, record, done)[1] is not done:
        notes.append("the cancel's outcome could not be noted on the lease: it changed meanwhile")
    return CancelReport(
        message_id=lease.message_id,
        outcome=outcome,
        previous_status=record.previous_status,
        job_type=lease.job_type,
        job_id=lease.job_id,
        execution_stopped=stopped,
        holds_released=released,
        dead_letter_id=dead_letter_id,
        deleted=deleted,
        notes=tuple(notes),
    )


class HoldsNotFreed(RuntimeError):
    """A cancel could not free its attempt's job lock or slot (its writes failed): it stays unfinished."""


def _check_holds_freed(canceller: Canceller, lease: Lease) -> None:
    """Raise `HoldsNotFreed` when the attempt's job lock or slot is still held by its execution. Freeing
    them is best effort elsewhere, where the execution's end or a later look frees them; a cancel that
    finished would leave its lease out of the extender's view, and a lock no later message of the job
    id takes would stay held. So the cancel stays unfinished, and the extender (or cancelling again)
    frees them."""
    if not lease.execution_arn:
        return
    for key in hold_keys(lease):
        lock = canceller.store.locks.get(key)
        if lock is not None and lock.held and lock.execution_arn == lease.execution_arn:
            raise HoldsNotFreed(f"{key} is still held by {lease.execution_arn}: cancel again to finish")


def _sending_elsewhere(lease: Lease) -> CancelRaced:
    return CancelRaced(
        f"another cancel of {lease.message_id} (or a receive of it) is sending it to the DLQ now: run the "
        "cancel again in a few minutes to see its outcome"
    )


def _claim_send(canceller: Canceller, lease: Lease, record: CancelRecord) -> tuple[Lease, CancelRecord] | None:
    """Claim the DLQ send on the lease (one write conditional on its version): None when another writer
    changed it first (read again)."""
    claim = replace(record, sending_at=canceller.clock.now(), sending_by=None)
    claimed = mark_cancelled(
        canceller.store,
        lease,
        now=canceller.clock.now(),
        error=_error(record.reason),
        record=claim.to_result(),
        due_at=lease.renew_at,
    )
    return None if claimed is None else (claimed, claim)


def _release_claim(canceller: Canceller, lease: Lease, record: CancelRecord) -> None:
    """Give up this carrier's claim after its send failed, so cancelling again need not wait out
    `SEND_CLAIM_S`. Best effort: a claim left is taken over once stale."""
    try:
        mark_cancelled(
            canceller.store,
            lease,
            now=canceller.clock.now(),
            error=_error(record.reason),
            record=replace(record, sending_at=None).to_result(),
            due_at=lease.renew_at,
        )
    except Exception as exc:
        logger.warning(
            "could not give up a DLQ send's claim", extra={"message_id": lease.message_id, "error": str(exc)}
        )


def _note(
    canceller: Canceller, lease: Lease, record: CancelRecord, progress: CancelRecord
) -> tuple[Lease, CancelRecord]:
    """Note the cancel's `progress` on the lease (a done record takes it out of the `due` index). A write
    that loses to a renewal (the extender keeps the message hidden) is made again on the lease read again,
    while that one is still this cancel's, unfinished, with no copy noted by another; returns the lease and
    record as they now are (`progress` when noted)."""
    for _ in range(RACE_ATTEMPTS):
        due_at = None if progress.done else lease.renew_at
        noted = mark_cancelled(
            canceller.store,
            lease,
            now=canceller.clock.now(),
            error=_error(progress.reason),
            record=progress.to_result(),
            due_at=due_at,
        )
        if noted is not None:
            return noted, progress
        current = canceller.store.get(lease.message_id)
        found = CancelRecord.of(current) if current is not None else None
        if current is None or found is None or found.done or found.sending_at != record.sending_at:
            break
        if found.dead_letter_id not in (None, progress.dead_letter_id):
            break
        lease = current
    return lease, record


def stop(stepfunctions: SFNClient, arn: str, reason: str) -> bool:
    """Stop an execution with error `Cancelled` and the reason as its cause. False when it does not exist
    or had already ended; any other refusal raises. An ended execution is not asked to stop: the
    StopExecution reference lists no error for one, so its answer cannot tell the cancel it stopped nothing
    (https://docs.aws.amazon.com/step-functions/latest/apireference/API_StopExecution.html)."""
    if execution_status(stepfunctions, arn) not in RUNNING_STATUSES:
        return False
    try:
        stepfunctions.stop_execution(executionArn=arn, error=CANCELLED, cause=f"cancelled: {reason}"[:32_768])
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code")
        if code == "ExecutionDoesNotExist":
            return False
        if code == "ValidationException" and execution_status(stepfunctions, arn) not in RUNNING_STATUSES:
            return False
        raise
    return True


def job_body(stepfunctions: SFNClient, lease: Lease) -> str | None:
    """The job message of a lease's message: the WAITING lease's copy, else the input of its execution,
    else of an earlier attempt's; None when none has one (no execution ever started)."""
    if lease.job:
        return lease.job
    for arn in _executions(lease):
        try:
            described = stepfunctions.describe_execution(executionArn=arn)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ExecutionDoesNotExist":
                continue
            raise
        try:
            job = json.loads(described.get("input") or "{}").get("job")
        except (ValueError, AttributeError):
            continue
        if isinstance(job, dict):
            return json.dumps(job, separators=(",", ":"))
    return None


def _executions(lease: Lease) -> Iterable[str]:
    """The lease's execution, then its earlier attempts' (newest first), as ARNs."""
    if not lease.execution_arn:
        return []
    head, _, _ = lease.execution_arn.rpartition(":")  # arn:...:execution:<machine>
    machine = head.replace(":execution:", ":stateMachine:", 1)
    earlier = [execution_arn(machine, attempt.execution) for attempt in reversed(lease.history)]
    return [lease.execution_arn, *earlier]


def queue_arn(sqs: SQSClient, queue_url: str) -> str:
    """A queue's ARN from its URL (`.../<account>/<name>`), in the client's region: no call."""
    account, _, name = queue_url.rstrip("/").rpartition("/")
    return f"arn:aws:sqs:{sqs.meta.region_name}:{account.rpartition('/')[2]}:{name}"


def send_cancelled(sqs: SQSClient, dlq_url: str, lease: Lease, body: str, reason: str) -> str:
    """Send a cancelled message's body to the DLQ in the receiver's format, `ErrorType` `Cancelled`;
    returns the DLQ copy's message id."""
    delivery = Delivery(
        message_id=lease.message_id,
        receipt_handle=lease.receipt_handle,
        body=body,
        receive_count=lease.receive_count,
        source_arn=queue_arn(sqs, lease.queue_url),
        queue_url=lease.queue_url,
        group_id=lease.group_id,  # FIFO: back into its group on a redrive, in its order
    )
    return dead_letter_delivery(sqs, dlq_url, delivery, lease, reason=reason)


def dead_letter_delivery(
    sqs: SQSClient, dlq_url: str, delivery: Delivery, lease: Lease, *, reason: str | None = None
) -> str:
    """Send a message whose lease (or parked marker) is CANCELLED to the DLQ as `Cancelled`, with the
    cancel's reason and the attempts' history, in the receiver's DLQ format (`exhausted_attributes`);
    returns the DLQ copy's id. Also for the receiver's row of a received message whose lease is CANCELLED
    when `redelivery_needs_dead_letter` (the cancel had no body to send). On a FIFO DLQ the copy's group
    is the delivery's (else its message id) and its deduplication id its message id, as the receiver's."""
    record = CancelRecord.of(lease)
    text = reason or (record.reason if record is not None else DEFAULT_REASON)
    attributes = exhausted_attributes(delivery, lease.history, error_type=CANCELLED, message=text[:ERROR_MESSAGE_MAX])
    return send_copy(sqs, dlq_url, delivery, attributes)


def note_dead_lettered(store: LeaseStore, lease: Lease, copy_id: str, *, now: float) -> None:
    """Record on a CANCELLED lease or marker that a receive sent the message to the DLQ
    (`dead_letter_delivery`), so any other carrier of it (a twin copy, a redelivery of the original) is
    acknowledged rather than dead-lettered again. Best effort: a lost note costs one more DLQ copy."""
    record = CancelRecord.of(lease) or CancelRecord(DEFAULT_REASON, lease.status.value, now)
    noted = replace(record, dead_letter_id=copy_id, note="sent to the DLQ by the receive that found it cancelled")
    error = lease.last_error or _error(record.reason)
    due_at = None if record.done else lease.renew_at  # an unfinished cancel stays due: the extender finishes it
    try:
        if mark_cancelled(store, lease, now=now, error=error, record=noted.to_result(), due_at=due_at) is None:
            logger.info("cancelled lease changed meanwhile: DLQ copy not noted", extra={"message_id": lease.message_id})
    except Exception as exc:
        logger.warning("could not note the DLQ copy", extra={"message_id": lease.message_id, "error": str(exc)})


def delete(sqs: SQSClient, lease: Lease) -> tuple[bool, str | None]:
    """Delete the message with the lease's receipt handle: (deleted, note). A handle SQS refuses for good
    (the message was received again, or is gone) is a note: that receive finds the lease CANCELLED."""
    try:
        sqs.delete_message(QueueUrl=lease.queue_url, ReceiptHandle=lease.receipt_handle)
    except Exception as exc:
        if classify_exception(exc) is not FailureClass.LOST:
            raise
        return False, (
            f"not deleted ({describe_exception(exc)}): it was received again; that receive finds the lease "
            "CANCELLED and is acknowledged"
        )
    return True, None


def report_finished(lease: Lease) -> CancelReport:
    """The report of a lease there is nothing to cancel of (`Targets.finished`)."""
    decision = decide(lease)
    if decision.acts:
        raise ValueError(f"{lease.message_id} is {lease.status.value}: it is to be cancelled, not reported")
    return _report(lease, Outcome(decision.value), previous=lease.status.value)


def _error(reason: str) -> LastError:
    return LastError(CANCELLED, reason)


def _report(lease: Lease, outcome: Outcome, *, previous: str, notes: tuple[str, ...] = ()) -> CancelReport:
    """The report of `lease` as it stands. A REJECTED lease names the DLQ copy its receiver sent."""
    record = CancelRecord.of(lease)
    if record is not None:
        dead_letter_id = record.dead_letter_id
    else:
        dead_letter_id = lease.copy_id if lease.status is LeaseStatus.REJECTED else None
    return CancelReport(
        message_id=lease.message_id,
        outcome=outcome,
        previous_status=previous,
        job_type=lease.job_type,
        job_id=lease.job_id,
        dead_letter_id=dead_letter_id,
        deleted=record.deleted if record is not None else False,
        notes=notes,
    )


def mark_cancelled(
    store: LeaseStore,
    lease: Lease,
    *,
    now: float,
    error: LastError,
    record: dict[str, Any],
    due_at: float | None = None,
) -> Lease | None:
    """Close a lease CANCELLED (the cancel's mark, step 1 above), or note a
    cancel's progress on a lease already CANCELLED. One write, conditional on the version and status as
    read: a cancel racing a success, an admission in place or a parked copy's claim settles once, and
    None tells the caller another writer got there first (read again).

    It leaves the reconcile and waiting indexes' reach (nothing reconciles or admits a CANCELLED lease).
    With `due_at` (a cancel not finished yet) it stays in the `due` index with that renew-at, in its
    shard: the extender then keeps its message hidden and finishes the cancel (`longjobs.engine.cancel.
    finish`), so a cancel cut short after its mark converges without its operator; without, it leaves
    the index. `record` (the cancel's reason and progress) is kept as the lease's result. A PARKED or
    REQUEUED marker keeps its TTL (it must outlive its copy on its queue, which it now refuses); any
    other expires as a closed lease does."""
    first = lease.status is not LeaseStatus.CANCELLED
    sets = ["#status = :cancelled", "last_error = :error", "#result = :result", "version = version + :one"]
    values: dict[str, Any] = {
        "cancelled": LeaseStatus.CANCELLED.value,
        "error": error.to_data(),
        "result": json.dumps(record, separators=(",", ":")),
        "one": 1,
        "version": lease.version,
        "old": lease.status.value,
    }
    if first:
        sets.append("closed_at = :now")
        values["now"] = num(now)
    if first and lease.status not in COPIED_STATUSES:
        sets.append(f"{TTL_ATTR} = :ttl")
        values["ttl"] = int(now) + store.closed_ttl_s
    removed = ["#waiting"]
    if due_at is None:
        removed[:0] = ["#shard", "#renew_at"]
    else:
        sets += ["#shard = :shard", "#renew_at = :due"]
        values.update(shard=store.shard_of(lease.message_id), due=num(due_at))
    if not conditional(
        store.client.update_item,
        TableName=store.table_name,
        Key={PARTITION_KEY: {"S": lease.message_id}},
        UpdateExpression="SET " + ", ".join(sets) + " REMOVE " + ", ".join(removed),
        ConditionExpression="version = :version AND #status = :old",
        ExpressionAttributeNames={
            "#status": "status",
            "#result": RESULT_ATTR,
            "#shard": SHARD_ATTR,
            "#renew_at": RENEW_AT_ATTR,
            "#waiting": WAITING_TYPE_ATTR,
        },
        ExpressionAttributeValues=values_of(**values),
    ):
        return None
    return replace(
        lease,
        status=LeaseStatus.CANCELLED,
        renew_at=due_at,
        closed_at=now if first else lease.closed_at,
        last_error=error,
        result=record,
        version=lease.version + 1,
    )
