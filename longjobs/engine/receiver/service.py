"""The receiver's entry point: one SQS record in, one `Outcome` out. A job message's receive is decided
by one pure function (`longjobs.engine.delivery.decision`) on what was read, and carried out by
`longjobs.engine.delivery.attempt`; this module parses, reads, decides and dispatches.

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
- Two messages of one job id never run at once: an attempt takes its job id's lock with its lease, in one
  transaction, before it starts (`longjobs.engine.lease.lock`). A message that finds the lock held by a
  running execution is not started and is not an attempt: its lease becomes a REQUEUED marker, a copy of
  it is sent back to the queue with a delay (doubling with each wait, counted in its `LongJobsAdmission`
  attribute) and this receive is acknowledged, so waiting uses none of the message's receives before
  the queue's redrive; the marker names the one copy that runs, however often the copy was sent
  (`longjobs.engine.delivery.copies`). On a FIFO queue a copy would go to the back of its message group
  and SQS refuses a per-message delay, so the message holds its group instead: it is hidden for the
  wait and reported not done (`HELD`), and the rest of its group waits behind it (so does a message
  whose attributes leave no room for a copy's).
- An S3 notification is fanned out into one job message per marker (one marker too, when its object
  creation is known, except on a FIFO queue or for a copy: `fan_out.runs_in_place`), each written
  first as a REQUEUED marker keyed by its object creation and claimed by the copy that runs, so a
  notification handled again, or its event delivered again by S3, runs no job twice
  (`longjobs.engine.receiver.fan_out`).
- FIFO queues (`settings.fifo`): every message the receiver sends carries its group id and a
  deduplication id derived from the original message id (S3 fan-out, the DLQ), and a failed attempt's
  release delay is `fifo_release_delay_s` (it holds the group meanwhile).
- A job type may have a concurrency limit (`longjobs.engine.admission`): an attempt takes one of the
  type's slots with its lease and job lock, in one transaction, or does not start. A message that finds its
  type full is not an attempt: it waits hidden (a WAITING lease, its delay estimated from when a slot
  frees) or, when it could not run within the admission horizon, is parked in the type's waiting
  queue. Slots go to the longest-waiting message first.
- A body this receiver refuses (`BadInput`: too large, not JSON, an unknown job type, params its schema
  refuses) is judged after its lease is read, never before: its settings or catalog may have changed
  since the message's attempts began, and what was valid then stays those attempts' contract. Without a
  lease it is poison, sent to the DLQ at once (as before any attempt); with one, the decision's rows
  apply as to any body (`Reading.invalid_body`): a running execution's message is adopted and deferred,
  never dead-lettered, and where a new attempt would begin the message goes to the DLQ with its
  `Attempts` history and its lease is closed REJECTED.
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

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from longjobs.engine.admission import line
from longjobs.engine.admission.slots import TypeSlots
from longjobs.engine.cancel import claim_dead_letter, note_dead_lettered, receive_may_send
from longjobs.engine.cancel import dead_letter_delivery as cancel_dead_letter
from longjobs.engine.cancel import redelivery_needs_dead_letter as needs_dead_letter
from longjobs.engine.delivery import attempt, copies, dlq_claim
from longjobs.engine.delivery.decision import Action, Limits, LockState, Reading, SlotState, decide
from longjobs.engine.delivery.dlq import CLAIM_UNKNOWN, JOB_ID_BUSY, STARTS_REFUSED, send_to_dlq
from longjobs.engine.delivery.models import BadInput, Job, parse_delivery
from longjobs.engine.delivery.read_ahead import first_read
from longjobs.engine.delivery.types import Delivery, Outcome, Receiver
from longjobs.engine.execution import (
    NEVER_STARTED,
    RUNNING_STATUSES,
    execution_arn,
    execution_name,
    execution_status,
)
from longjobs.engine.lease import LastError, Lease, LeaseStatus, Lock, job_lock_key
from longjobs.engine.lease.lock import Hold
from longjobs.engine.lease.types import Attempt
from longjobs.engine.observability import MetricName, logger, type_metric
from longjobs.engine.receiver import fan_out


class InlineJobFailed(Exception):
    """An inline job failed: the record is reported failed and SQS redelivers it (then the DLQ)."""


def receive(receiver: Receiver, delivery: Delivery) -> Outcome:
    """Handle one record. Raises only when the record must be retried (reported failed)."""
    try:
        parsed = parse_delivery(delivery, receiver.settings, receiver.catalog)
    except BadInput as bad:
        return decided(receiver, delivery, bad)
    if parsed.ignored_objects and receiver.metrics is not None:
        receiver.metrics.add_metric(name=MetricName.S3_OBJECTS_IGNORED, unit="Count", value=parsed.ignored_objects)
    jobs = parsed.jobs
    if not jobs:
        return Outcome.IGNORED
    if parsed.fans_out and not fan_out.runs_in_place(receiver, delivery, parsed):
        return fan_out.fan_out(receiver, jobs, parsed.events, delivery)
    job = jobs[0]
    if parsed.inline:
        return inline(receiver, delivery, job)
    return decided(receiver, delivery, job)


def reject(receiver: Receiver, delivery: Delivery, bad: BadInput) -> None:
    """A poison message with no lease and no history: DLQ first; the REJECTED lease is only a record, so
    its failure does not fail the record (a redelivery then finds no lease and sends a second copy)."""
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
        job_type=bad.job_type,  # shown by `longjobs leases`: whose params were wrong
    )
    try:
        receiver.store.record_rejection(record, now=now, error=str(bad))
    except Exception as exc:
        logger.warning("could not record the rejection", extra={"message_id": delivery.message_id, "error": str(exc)})


def inline(receiver: Receiver, delivery: Delivery, job: Job) -> Outcome:
    """Run an inline job. A failure fails the record, so SQS delivers it again, until its receives reach
    `max_attempts`: an inline job keeps no lease, so its receives count its attempts. Then it goes to the
    DLQ with the failure (`AttemptsExhausted`), rather than be received until the queue's redrive count, a
    backstop sized for waits (hundreds of receives). A receive after the first reads the record an earlier
    receive may have left: a DLQ send claimed (its send failed, or its claimant still sends) or made is
    carried on there (`dlq_claim`), and the job is not run a time more beside it. That holds whatever this
    receiver's `max_attempts`: the receive that claimed the send may have run under a lower one (a deploy
    that raises it), and a first receive has no earlier receive to have left a record."""
    if delivery.receive_count > 1:
        record = receiver.store.get(delivery.message_id)
        if record is not None and record.status in (LeaseStatus.DEAD_LETTERING, LeaseStatus.REJECTED):
            return decided(receiver, delivery, job)
    try:
        run_inline(job)
    except InlineJobFailed as failed:
        if delivery.receive_count < receiver.settings.max_attempts:
            raise
        dead = attempt.dead_letter(receiver, delivery, (), replacing=None, message=str(failed), job=job)
        # None: a record of the message is there already (a receive of it at once, or one whose delete was
        # lost), which the decision reads: in the DLQ already, or on its way.
        return dead or decided(receiver, delivery, job)
    return Outcome.INLINE_DONE


def run_inline(job: Job) -> None:
    from longjobs.engine.jobs import INLINE_TYPES

    if job.type not in INLINE_TYPES:
        raise InlineJobFailed(f"no inline code runs job type {job.type!r}")
    if job.params.get("fail"):
        raise InlineJobFailed(f"echo job {job.job_id} was asked to fail")
    logger.info("echo", extra={"job_id": job.job_id, "text": job.params.get("text", "")})


RACE_ATTEMPTS = 3
"""How many times the receiver reads the lease again after another writer changed it first."""


def decided(receiver: Receiver, delivery: Delivery, body: Job | BadInput) -> Outcome:
    """Decide on what is read, then act (`longjobs.engine.delivery.decision`); read again when a
    conditional write lost its race, a few times at most.

    `body` is the one long job, or why this receiver's checks refuse the body. A refused body is judged
    once its lease is read (by message id: a body that is not even JSON has one): poison without a lease,
    else as any receive of a message whose attempt began under the checks it passed then
    (`Reading.invalid_body`). It costs the one read a valid body's receive makes, and raises when the
    lease cannot be read: whether an execution runs for the message is not known, and the record comes
    back rather than take a running job's message to the DLQ."""
    for _ in range(RACE_ATTEMPTS):
        outcome = _decide_and_act(receiver, delivery, body)
        if outcome is not None:
            return outcome
    return Outcome.STALE  # other writers kept changing the lease: the record comes back later


@dataclass
class _Found:
    """What the reads found beyond the decision's reading: the lock as read, the slot to take, and the
    message's place in its type's line."""

    lock: Lock | None = None
    cancelled_marker: Lease | None = None
    lock_hold: Hold | None = None
    slot: Hold | None = None
    slots: TypeSlots | None = None
    since: float | None = None
    order: float | None = None


def _decide_and_act(receiver: Receiver, delivery: Delivery, body: Job | BadInput) -> Outcome | None:
    """One pass: read the lease (and the job lock), then what the decision asks for, then carry out its
    action. None when a conditional write lost its race (read again). `body`: the job, or why this
    receiver refuses the body."""
    job = body if isinstance(body, Job) else None
    lock_key = job_lock_key(job.job_id) if job is not None else None
    if lock_key is not None:
        # The lease and the job lock in one request: a new attempt needs both (the lock read is kept for
        # the decision's READ_JOB_LOCK; a holding that changed meanwhile fails the take, which reads again).
        lease, job_lock = first_read(receiver, delivery.message_id, lock_key)
    else:  # a refused body never begins an attempt: its lease alone (its job id may not be readable)
        lease, job_lock = receiver.store.get(delivery.message_id), None
    reading = replace(_first_reading(receiver, delivery, lease), invalid_body=job is None)
    limits = Limits(receiver.settings.max_attempts, receiver.settings.max_refused_starts, receiver.settings.fifo)
    arn = execution_arn(receiver.state_machine_arn, execution_name(delivery.message_id, delivery.receive_count))
    step = _Pass(receiver, delivery, body, lease, job_lock, lock_key, arn, reading)
    step.reading = _answered_as_read(step)
    while True:
        action = decide(step.reading, limits)
        read = _READS.get(action)
        if read is None:
            return _ENDS[action](step)
        step.reading = read(step)


@dataclass
class _Pass:
    """One pass of a receive: what it read, what the reads found, and the execution it would start."""

    receiver: Receiver
    delivery: Delivery
    body: Job | BadInput
    lease: Lease | None
    job_lock: Lock | None
    lock_key: str | None
    """The job lock's key (None for a refused body, which begins no attempt)."""
    arn: str
    reading: Reading
    found: _Found = field(default_factory=lambda: _Found())

    @property
    def job(self) -> Job:
        """The job; only an end that begins an attempt asks, and the decision begins none for a refused body."""
        assert isinstance(self.body, Job), f"a refused body begins no attempt: {self.body}"
        return self.body

    @property
    def held(self) -> Lease:
        """The lease; only an end of an existing lease asks."""
        assert self.lease is not None
        return self.lease

    @property
    def history(self) -> tuple[Attempt, ...]:
        return self.lease.history_with_this() if self.lease is not None else self.delivery.carried.history


# -- the reads: each answers the decision's question and it decides again ---------------------------------


def _claim_copy(step: _Pass) -> Reading:
    receiver, delivery, reading = step.receiver, step.delivery, step.reading
    claim = copies.claim_copy(receiver, delivery)
    step.found.cancelled_marker = claim.cancelled
    undelivered = claim.cancelled is not None and needs_dead_letter(claim.cancelled)
    return replace(
        reading,
        copy_runs=claim.runs,
        claimant_busy=claim.busy,
        claim_unknown=claim.unknown,
        cancel_undelivered=undelivered,
    )


def _read_execution(step: _Pass) -> Reading:
    arn = step.held.execution_arn
    assert arn is not None
    status = execution_status(step.receiver.stepfunctions, arn)
    return replace(
        step.reading,
        execution_running=status in RUNNING_STATUSES,
        execution_succeeded=status == "SUCCEEDED",
        execution_missing=status == NEVER_STARTED,
    )


def _read_job_lock(step: _Pass) -> Reading:
    job, found = step.job, step.found
    state, found.lock = attempt.read_job_lock(
        step.receiver, job.job_id, job.type, step.delivery.message_id, step.arn, read=step.job_lock, holder=step.lease
    )
    assert step.lock_key is not None
    found.lock_hold = attempt.lock_hold(step.lock_key, state, found.lock)
    return replace(step.reading, job_lock=state)


def _answered_as_read(step: _Pass) -> Reading:
    """The reads whose answer needs no call: the slots of a type without a limit, and the job lock as read
    with the lease, when no other execution holds it. The common new attempt so decides once; a limited
    type, or a lock another execution holds, is asked about when the decision needs it (`_READS`)."""
    if not isinstance(step.body, Job) or step.lock_key is None:
        return step.reading
    reading = step.reading
    if _type_limit(step.receiver, step.body) is None:
        reading = replace(reading, slot=SlotState.UNLIMITED)
    if attempt.free_as_read(step.job_lock, step.arn):
        step.found.lock = step.job_lock
        step.found.lock_hold = attempt.lock_hold(step.lock_key, LockState.FREE, step.job_lock)
        reading = replace(reading, job_lock=LockState.FREE)
    return reading


def _type_limit(receiver: Receiver, job: Job) -> int | None:
    """The job type's concurrency limit; None without one, and on FIFO queues (no admission: a group
    already runs one job at a time, and a parked copy would leave its order)."""
    return None if receiver.settings.fifo else receiver.catalog.limit(job.type)


def _find_slot_read(step: _Pass) -> Reading:
    return replace(
        step.reading, slot=_find_slot(step.receiver, step.delivery, step.job, step.lease, step.arn, step.found)
    )


_READS: dict[Action, Callable[[_Pass], Reading]] = {
    Action.CLAIM_COPY: _claim_copy,
    Action.READ_EXECUTION: _read_execution,
    Action.READ_JOB_LOCK: _read_job_lock,
    Action.FIND_SLOT: _find_slot_read,
}


def _lock_of(receiver: Receiver, lease: Lease) -> Lock | None:
    """The job lock of a succeeded lease, for a refused body's receive, which read its lease alone (a rare
    receive: the read is made only then). Unknown (None) when the read fails: the receive is acknowledged."""
    if not lease.job_id:
        return None
    try:
        return receiver.store.locks.get(job_lock_key(lease.job_id))
    except Exception as exc:
        logger.warning("could not read a succeeded job's lock", extra={"job_id": lease.job_id, "error": str(exc)})
        return None


def _first_reading(receiver: Receiver, delivery: Delivery, lease: Lease | None) -> Reading:
    history = lease.history_with_this() if lease is not None else delivery.carried.history
    denied = attempt.start_denied(lease)  # a start refused on every attempt left no execution to ask about
    spent = attempt.hold_spent(receiver, delivery)
    return Reading(
        receive_count=delivery.receive_count,
        receipt_handle=delivery.receipt_handle,
        lease=lease,
        parked_copy=copies.is_parked_copy(receiver, delivery),
        requeued_copy=copies.is_requeued_copy(receiver, delivery),
        room_for_copy=copies.has_room(delivery, history),
        hold_spent=spent,
        marker_live=lease is not None and copies.is_live_marker(receiver, lease),
        attempts=len(history),
        refused_starts=delivery.refused_starts(lease),
        cancel_undelivered=lease is not None and needs_dead_letter(lease),
        execution_running=False if denied else None,
        execution_missing=denied,
    )


def _find_slot(
    receiver: Receiver, delivery: Delivery, job: Job, lease: Lease | None, arn: str, found: _Found
) -> SlotState:
    """Whether a slot of the job's type is free for this attempt (after those that waited longer)."""
    limit = _type_limit(receiver, job)
    if limit is None:
        return SlotState.UNLIMITED
    waiting = lease if lease is not None and lease.waiting else None
    found.since = line.waiting_since(receiver, delivery, waiting)
    found.order = line.place_in_line(receiver, waiting)
    found.slot, found.slots = line.claim(
        receiver,
        job.type,
        limit,
        message_id=delivery.message_id,
        order=found.order,
        arn=arn,
        arriving=waiting is None and delivery.carried.waiting_since is None,
        handle=receive,
    )
    return SlotState.FULL if found.slot is None else SlotState.FREE


# -- the ends: each carries out what the receive becomes (None: a write lost its race, read again) --------


def _duplicate(step: _Pass) -> Outcome:
    if step.lease is not None:
        logger.info("copied message received again: acknowledged", extra={"message_id": step.delivery.message_id})
    return Outcome.DUPLICATE


def _send_copy(step: _Pass) -> Outcome | None:
    return copies.send_copy_again(step.receiver, step.delivery, step.held)


def _acknowledged(action: Action, outcome: Outcome) -> Callable[[_Pass], Outcome]:
    """An end that acknowledges the message: it ended already."""

    def acknowledge(step: _Pass) -> Outcome:
        logger.info(
            "already ended: acknowledged", extra={"message_id": step.delivery.message_id, "action": action.value}
        )
        return outcome

    return acknowledge


def _already_succeeded(step: _Pass) -> Outcome:
    """The job ran: the holds it left are freed and, when its execution is seen SUCCEEDED, its lease noted so."""
    receiver, lease = step.receiver, step.lease
    if lease is not None:
        attempt.free_holds_left(
            receiver, lease, step.job_lock if isinstance(step.body, Job) else _lock_of(receiver, lease)
        )
        if step.reading.execution_succeeded:
            attempt.note_succeeded(receiver, lease)
    # the mapping deletes this copy with its handle
    return _acknowledged(Action.ALREADY_SUCCEEDED, Outcome.ALREADY_SUCCEEDED)(step)


def _dead_letter_cancelled(step: _Pass) -> Outcome | None:
    """The DLQ copy of a cancelled message whose cancel sent none: the send claimed first, as a cancel
    claims it, so a cancel run again (or the extender finishing one) meanwhile sends no second copy. Another
    receive's fresh claim: STALE, this record comes back later. None when another writer got there first:
    read again (a cancel's claim is then acknowledged)."""
    receiver, delivery = step.receiver, step.delivery
    target, now = step.found.cancelled_marker or step.held, receiver.clock.now()
    claimant = delivery.claimant(receiver.rng)
    if not receive_may_send(target, claimant, now=now, life_s=dlq_claim.claim_life_s(receiver.settings)):
        return Outcome.STALE  # another receive of it is sending it (a duplicate delivery, a twin copy)
    cancelled = claim_dead_letter(receiver.store, target, claimant, now=now)
    if cancelled is None:
        return None
    copy_id = cancel_dead_letter(receiver.sqs, receiver.settings.dlq_url or "", delivery, cancelled)
    note_dead_lettered(receiver.store, cancelled, copy_id, now=receiver.clock.now())
    logger.warning("cancelled message sent to the DLQ", extra={"message_id": delivery.message_id, "copy": copy_id})
    return Outcome.CANCELLED


def _send_dead_letter(step: _Pass) -> Outcome | None:
    """A DEAD_LETTERING record, its DLQ send claimed and no copy noted (`dlq_claim`): another receive's claim
    is left to it while it may live (STALE: this record comes back later), unless it would outlive the
    message; this receive's own, an expired one or one given up is claimed again and the message sent.
    None when another writer got there first: read again."""
    receiver, record, now = step.receiver, step.held, step.receiver.clock.now()
    claimant = step.delivery.claimant(receiver.rng)
    life_s = dlq_claim.claim_life_s(receiver.settings)
    if not dlq_claim.may_send(record, claimant, now=now, life_s=life_s):
        retention_s = receiver.settings.queue_retention_s
        if not dlq_claim.outlives_message(record, step.delivery.sent_at, retention_s=retention_s, life_s=life_s):
            return Outcome.STALE
        logger.warning(
            "a DLQ claim outlives its message's retention: taken over", extra={"message_id": record.message_id}
        )
    claimed = dlq_claim.claim(receiver.store, record, claimant, now=now)
    if claimed is None:
        return None
    return dlq_claim.send_claimed(receiver, step.delivery, claimed)


def _dead_letter_unknown(step: _Pass) -> Outcome | None:
    message = (
        "a copy of a message whose run another copy claimed long ago; that copy left no lease the table still "
        "keeps, so whether the job ran cannot be told: check before a redrive"
    )
    return attempt.dead_letter(
        step.receiver,
        step.delivery,
        step.history,
        replacing=None,
        error_type=CLAIM_UNKNOWN,
        message=message,
        job=_job_or_none(step),
    )


def _dead_letter_invalid_end(step: _Pass) -> Outcome | None:
    assert isinstance(step.body, BadInput)
    return _dead_letter_invalid(step.receiver, step.delivery, step.body, step.lease, step.history)


def _job_or_none(step: _Pass) -> Job | None:
    """The job, or None for a refused body: an attempt under way goes on whatever this receiver thinks of
    its body now (what was valid when the attempt began stays its contract)."""
    return step.body if isinstance(step.body, Job) else None


def _resume(step: _Pass) -> Outcome | None:
    return attempt.resume(step.receiver, _job_or_none(step), step.held, new=False)


def _adopt_same_count(step: _Pass) -> Outcome | None:
    return attempt.adopt_same_count(step.receiver, step.delivery, _job_or_none(step), step.held)


def _adopt(step: _Pass) -> Outcome | None:
    return attempt.adopt(step.receiver, _job_or_none(step), step.delivery, step.held)


def _adopt_running(step: _Pass) -> Outcome | None:
    return attempt.adopt_running(step.receiver, _job_or_none(step), step.delivery, step.held)


def _dead_letter(step: _Pass) -> Outcome | None:
    assert isinstance(step.body, Job), "the decision ends no attempt of a refused body this way"
    return attempt.dead_letter(step.receiver, step.delivery, step.history, replacing=step.lease, job=step.job)


def _dead_letter_refused(step: _Pass) -> Outcome | None:
    assert isinstance(step.body, Job), "the decision ends no attempt of a refused body this way"
    lease, delivery = step.lease, step.delivery
    last = lease.last_error if lease else None
    message = f"{step.reading.refused_starts} starts refused by Step Functions; the last: {last}"
    return attempt.dead_letter(
        step.receiver, delivery, step.history, replacing=lease, error_type=STARTS_REFUSED, message=message, job=step.job
    )


def _lock(step: _Pass) -> Lock:
    assert step.found.lock is not None
    return step.found.lock


def _wait_for_job(step: _Pass) -> Outcome | None:
    return copies.wait_for_job(
        step.receiver, step.delivery, step.job, _lock(step), replacing=step.lease, history=step.history
    )


def _hold_for_job(step: _Pass) -> Outcome:
    attempt.hold_for_job(step.receiver, step.delivery, step.job, _lock(step))
    return Outcome.HELD


def _dead_letter_busy(step: _Pass) -> Outcome | None:
    job, delivery = step.job, step.delivery
    holder = _lock(step).execution_arn.rpartition(":")[2]
    message = (
        f"waited in place for its job id {job.job_id!r} (held by {holder}) {delivery.receive_count} times, "
        "until its receives or its retention were nearly spent"
    )
    return attempt.dead_letter(
        step.receiver, delivery, step.history, replacing=step.lease, error_type=JOB_ID_BUSY, message=message, job=job
    )


def _wait_for_slot(step: _Pass) -> Outcome | None:
    return _wait_or_park(step.receiver, step.delivery, step.job, step.lease, step.found, step.history)


def _start(step: _Pass) -> Outcome | None:
    """A new attempt: its lease with its job lock and slot in one transaction, then hide and start. None
    when any condition failed (another writer, a taker of the lock or the slot): read again. A message
    whose retention is running out is sent afresh (parked) where its type can park it; it starts only if
    a whole hold still fits before SQS deletes it, else it goes to the DLQ with the reason, never lost."""
    receiver, delivery, job, replacing, found = step.receiver, step.delivery, step.job, step.lease, step.found
    history = step.history
    if attempt.aged(receiver, delivery):
        if found.slots is not None and line.can_park(receiver, delivery, job, history):
            return _wait_for_slot(step)
        if not line.hold_fits(receiver, delivery):
            return line.dead_letter_aged(receiver, delivery, history, replacing=replacing, job=job)
    assert found.lock_hold is not None
    lease = attempt.begin(
        receiver,
        delivery,
        job,
        arn=step.arn,
        replacing=replacing,
        history=history,
        refused_starts=step.reading.refused_starts,
        job_lock=found.lock_hold,
        slot=found.slot,
    )
    if lease is None:
        return None  # another writer got there first: read again
    waited_before = (replacing is not None and replacing.waiting) or delivery.carried.waiting_since is not None
    if found.since is not None and waited_before:
        waited = max(0.0, receiver.clock.now() - found.since)
        type_metric(receiver.metrics, MetricName.ADMISSION_DELAY, "Seconds", waited, job.type)
    return attempt.resume(receiver, job, lease, new=True)


_ENDS: dict[Action, Callable[[_Pass], Outcome | None]] = {
    Action.DUPLICATE: _duplicate,
    Action.SEND_COPY: _send_copy,
    Action.ALREADY_SUCCEEDED: _already_succeeded,
    Action.ALREADY_DEAD_LETTERED: _acknowledged(
        Action.ALREADY_DEAD_LETTERED, Outcome.REJECTED
    ),  # in the DLQ before (its deletion was lost)
    Action.ALREADY_CANCELLED: _acknowledged(
        Action.ALREADY_CANCELLED, Outcome.CANCELLED
    ),  # cancelled: in the DLQ, never run again
    Action.SEND_DEAD_LETTER: _send_dead_letter,
    Action.DEAD_LETTER_CANCELLED: _dead_letter_cancelled,
    Action.DEAD_LETTER_UNKNOWN: _dead_letter_unknown,
    Action.STALE: lambda step: Outcome.STALE,
    Action.STILL_WAITING: lambda step: Outcome.WAITING_FOR_SLOT,  # it waits already (or is being admitted)
    Action.RESUME: _resume,
    Action.ADOPT_SAME_COUNT: _adopt_same_count,
    Action.ADOPT: _adopt,
    Action.ADOPT_RUNNING: _adopt_running,
    Action.DEAD_LETTER: _dead_letter,
    Action.DEAD_LETTER_INVALID: _dead_letter_invalid_end,
    Action.DEAD_LETTER_REFUSED: _dead_letter_refused,
    Action.WAIT_FOR_JOB: _wait_for_job,
    Action.HOLD_FOR_JOB: _hold_for_job,
    Action.DEAD_LETTER_BUSY: _dead_letter_busy,
    Action.WAIT_FOR_SLOT: _wait_for_slot,
    Action.START: _start,
}
"""What each end of the decision does: one entry an end (the reads are in `_READS`)."""


def _dead_letter_invalid(
    receiver: Receiver, delivery: Delivery, bad: BadInput, lease: Lease | None, history: tuple[Attempt, ...]
) -> Outcome | None:
    """A refused body where a new attempt would begin, or whose ACTIVE lease's execution never started:
    the DLQ with its history (`Attempts`) and its lease closed REJECTED; with no lease and no history,
    poison (`reject`). None when the lease changed meanwhile (read again).

    An ACTIVE lease is closed first, as reconciliation closes an attempt that never started (RELEASED,
    no attempt counted, its holds freed with it), conditional on the version read: a start that lands
    later finds its lease no longer names it and runs nothing, and a DLQ send that fails leaves that
    closed lease for the retry to find. The REJECTED record then replaces it in place (this receive may
    be the one that wrote it, with its receive count)."""
    in_place = False
    if lease is not None and lease.active:
        closed = receiver.store.close(
            lease,
            LeaseStatus.RELEASED,
            now=receiver.clock.now(),
            error=LastError(bad.error_type, bad.message),
            never_started=True,
        )
        if closed is None:
            return None
        lease, history, in_place = closed, closed.history_with_this(), closed.receive_count >= delivery.receive_count
    if lease is None and not history:
        reject(receiver, delivery, bad)
        return Outcome.REJECTED
    return attempt.dead_letter(
        receiver,
        delivery,
        history,
        replacing=lease,
        error_type=bad.error_type,
        message=bad.message,
        in_place=in_place,
    )


def _wait_or_park(
    receiver: Receiver, delivery: Delivery, job: Job, lease: Lease | None, found: _Found, history: tuple[Attempt, ...]
) -> Outcome | None:
    """The message waits for a slot of its limited type, or is parked (`line.wait_or_park`), from where
    `_find_slot` placed it in line."""
    assert found.since is not None and found.order is not None and found.slots is not None
    return line.wait_or_park(
        receiver,
        delivery,
        job,
        replacing=lease,
        history=history,
        since=found.since,
        order=found.order,
        slots=found.slots,
    )
