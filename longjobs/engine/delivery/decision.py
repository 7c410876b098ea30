"""The receiver's decision: what one receive of a job message does, as one pure function.

`decide` maps what the receiver read (the receive, the message's lease, the parked marker's claim, the
lease's execution, the job id's lock, the type's slots) to one `Action`. It reads nothing itself: when
the decision depends on something not read yet, the action is a read (`CLAIM_COPY`, `READ_EXECUTION`,
`READ_JOB_LOCK`, `FIND_SLOT`), and the receiver calls it again with the answer. So a redelivery of a
finished job costs one read, and every row of the decision is one line of a table test
(tests/unit/test_receiver_decision.py), its expected action written out.

The order of the rules is the protocol's:

1. A message with no lease is a new attempt, except a parked or requeued copy whose original's run
   another copy claimed (a twin: acknowledged, or, while that copy has no lease yet, left to come back).
2. A lease that says where the message went ends the receive: a PARKED or REQUEUED marker (acknowledged
   once a copy is known, else its copy sent), SUCCEEDED, REJECTED (in the DLQ), DEAD_LETTERING (on its way
   there: a claimed send is left to its claimant, or sent), CANCELLED (sent to the DLQ now if the cancel
   could not send it; so is a copy whose marker was cancelled).
3. Fencing by receive count: an older receive is STALE; the same count with another handle is adopted
   only once SQS accepts that handle (`ADOPT_SAME_COUNT`); the same receive handled again resumes.
4. A newer receive adopts an ACTIVE lease, or a closed one whose execution still runs (an execution
   runs only while its message is held); a closed one whose execution succeeded (its job ran, and the
   lease was closed before the execution could settle it) is acknowledged; otherwise it begins a new
   attempt.
5. A new attempt: the DLQ with its history when its body fails this receiver's checks (see below), or
   once its attempts (or its refused starts) are used up; it waits while its job
   id's lock is held by a running execution (a copy sent back, or, on FIFO or with no room for the
   copy's attribute, held in place, and sent to the DLQ once its receives or retention are nearly
   spent), and in place while the job run of the lock's last execution is still ending; it
   waits or is parked while its type is full; else it takes its lease, lock and slot in one
   transaction and starts.

A body that fails this receiver's checks (`Reading.invalid_body`: its settings or catalog changed since
the message's attempts began) is judged only after its lease is read, by the same rules: what was valid
when an attempt began stays that attempt's contract. A message without a lease, or whose lease closed, is
sent to the DLQ with its history where it would begin a new attempt; a redelivery of an ACTIVE lease reads
its execution first and is adopted like any other while that execution exists (running, or ended and
settled by the adoption), and never dead-lettered; an attempt whose execution never started ends there,
its message in the DLQ. Everything else (markers, ended leases, fencing) is as for a valid body.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from longjobs.engine.execution import NEVER_STARTED, RUNNING_STATUSES
from longjobs.engine.lease.lock import Lock
from longjobs.engine.lease.types import Lease, LeaseStatus


class Action(StrEnum):
    """What the receiver does next: one read the decision needs, or what the receive becomes."""

    # Reads (the receiver decides again with the answer)
    CLAIM_COPY = "claim_copy"  # a parked or requeued copy: claim its original's run (a conditional write on the marker)
    READ_EXECUTION = "read_execution"  # whether the closed lease's execution still runs
    READ_JOB_LOCK = "read_job_lock"  # the job id's lock, and whether its holder may run
    FIND_SLOT = "find_slot"  # a slot of the type for this attempt, after those waiting longer
    # Ends
    DUPLICATE = "duplicate"  # another copy runs it (a twin, or the copy of a parked or requeued message): acknowledge
    SEND_COPY = "send_copy"  # parked or requeued, its copy not known to be sent: send it, acknowledge
    ALREADY_SUCCEEDED = "already_succeeded"  # acknowledge: the job ran
    ALREADY_DEAD_LETTERED = "already_dead_lettered"  # acknowledge: it is in the DLQ
    SEND_DEAD_LETTER = "send_dead_letter"  # its DLQ send claimed, no copy noted: left to its claimant, or sent
    ALREADY_CANCELLED = "already_cancelled"  # acknowledge: an operator cancelled it (it is in the DLQ)
    DEAD_LETTER_CANCELLED = "dead_letter_cancelled"  # cancelled without a DLQ copy (no body at hand): send it
    DEAD_LETTER_UNKNOWN = "dead_letter_unknown"  # a copy whose claimant's run can no longer be told: the DLQ
    STALE = "stale"  # an older receive, or one whose lease another receive holds: nothing to do
    STILL_WAITING = "still_waiting"  # this very receive waits for a slot already
    RESUME = "resume"  # this very receive, handled again: make sure its attempt runs
    ADOPT_SAME_COUNT = "adopt_same_count"  # a newer receive with the lease's count: prove its handle, adopt
    ADOPT = "adopt"  # a newer receive of an ACTIVE lease: take its handle, resume the attempt
    ADOPT_RUNNING = "adopt_running"  # a closed lease whose execution still runs: reopen it, start nothing
    DEAD_LETTER = "dead_letter"  # its attempts are used up
    DEAD_LETTER_INVALID = "dead_letter_invalid"  # its body fails this receiver's checks: the DLQ with its history
    DEAD_LETTER_REFUSED = "dead_letter_refused"  # Step Functions refused its starts too often
    WAIT_FOR_JOB = "wait_for_job"  # its job id runs: a delayed copy goes back to the queue
    HOLD_FOR_JOB = "hold_for_job"  # its job id runs, on FIFO or with no room for a copy: hidden for the wait
    DEAD_LETTER_BUSY = "dead_letter_busy"  # held in place so long its receives or retention are nearly spent
    WAIT_FOR_SLOT = "wait_for_slot"  # its type is full: it waits hidden, or is parked
    START = "start"  # lease, job lock and slot in one transaction; then hide and start


class LockState(StrEnum):
    """The job id's lock as this attempt finds it."""

    FREE = "free"  # absent, free, or held already for this attempt's execution
    STALE = "stale"  # held for an execution that no longer runs (or never will): taken over
    HELD_BY_THIS_MESSAGE = "held_by_this_message"  # another receive of this message holds it, may run
    HELD = "held"  # another message's execution holds it and may be running
    RUN_ENDING = "run_ending"  # its last holder's execution ended, its job run may not have (`longjobs.engine.runs`)


class SlotState(StrEnum):
    """The type's slots as this attempt finds them."""

    UNLIMITED = "unlimited"  # the type has no limit (or the queue is FIFO: no admission)
    FREE = "free"  # a slot is free for it (or held already for its execution)
    FULL = "full"


@dataclass(frozen=True)
class Limits:
    """The settings the decision reads."""

    max_attempts: int
    max_refused_starts: int
    fifo: bool = False


@dataclass(frozen=True)
class Reading:
    """What the receiver read, so far, for one receive of a job message."""

    receive_count: int
    receipt_handle: str
    lease: Lease | None = None
    parked_copy: bool = False
    """A copy received from a waiting queue that names the message it was parked from."""
    requeued_copy: bool = False
    """A copy received from the jobs queue that names the message it was sent back from (`copies`)."""
    room_for_copy: bool = True
    """The message's attributes leave room for a requeued copy's (else it waits for its job id in place)."""
    hold_spent: bool = False
    """Its receives (the queue's redrive count) or its retention are nearly spent: it may not wait in place."""
    marker_live: bool = False
    """The lease is a PARKED marker of a type that still has a waiting queue."""
    copy_runs: bool | None = None
    """`CLAIM_COPY`'s answer: this copy runs the message (False: a twin runs it, or it was cancelled)."""
    claimant_busy: bool = False
    """`CLAIM_COPY`'s answer: another copy claimed the run and may still be taking it (no lease yet)."""
    claim_unknown: bool = False
    """`CLAIM_COPY`'s answer: the claimant has no lease and whether it ran can no longer be told."""
    cancel_undelivered: bool = False
    """The message was cancelled (its lease, or a parked copy's marker) and no DLQ copy was made: the cancel
    had no body at hand (`longjobs.engine.cancel`), so this receive sends it."""
    execution_running: bool | None = None
    """`READ_EXECUTION`'s answer for the lease's execution."""
    execution_succeeded: bool = False
    """`READ_EXECUTION`'s answer: the lease's execution ended SUCCEEDED. Every way the workflow succeeds
    comes after its job succeeded; one whose read of the lease failed for good ends so with the lease
    left ACTIVE, which the extender may then close (capped, lost) before reconciliation completes it."""
    execution_missing: bool = False
    """`READ_EXECUTION`'s answer: the lease's execution does not exist (it never started)."""
    invalid_body: bool = False
    """The body fails this receiver's checks (`longjobs.engine.delivery.models.BadInput`): its size, its
    shape, its job type or its params, under the settings and catalog of this receiver."""
    attempts: int = 0
    """Failed attempts before this receive (the lease's history, or a parked copy's)."""
    refused_starts: int = 0
    job_lock: LockState | None = None
    slot: SlotState | None = None


def decide(reading: Reading, limits: Limits) -> Action:
    """The one action for a receive as read (see the module's rules)."""
    lease = reading.lease
    if lease is None:
        if (reading.parked_copy or reading.requeued_copy) and reading.copy_runs is None:
            return Action.CLAIM_COPY
        if reading.copy_runs is False:
            if reading.cancel_undelivered:
                return Action.DEAD_LETTER_CANCELLED
            if reading.claim_unknown:
                return Action.DEAD_LETTER_UNKNOWN
            return Action.STALE if reading.claimant_busy else Action.DUPLICATE
        return _new_attempt(reading, limits)
    if lease.status is LeaseStatus.REQUEUED or (reading.marker_live and lease.status is LeaseStatus.PARKED):
        return Action.DUPLICATE if lease.copy_id or lease.claimed_by else Action.SEND_COPY
    if lease.status is LeaseStatus.SUCCEEDED:
        return Action.ALREADY_SUCCEEDED
    if lease.status is LeaseStatus.REJECTED:
        return Action.ALREADY_DEAD_LETTERED
    if lease.status is LeaseStatus.DEAD_LETTERING:  # its claimant may not have sent it (`dlq_claim`)
        return Action.SEND_DEAD_LETTER
    if lease.status is LeaseStatus.CANCELLED:
        return Action.DEAD_LETTER_CANCELLED if reading.cancel_undelivered else Action.ALREADY_CANCELLED
    if lease.receive_count > reading.receive_count:
        return Action.STALE
    if lease.active and reading.invalid_body and lease.execution_arn:
        # The attempt began under the checks its body passed then: its execution is adopted (or settled)
        # as any redelivery's; one that never started has nothing to keep, and ends with the message.
        if reading.execution_running is None:
            return Action.READ_EXECUTION
        if reading.execution_missing:
            return Action.DEAD_LETTER_INVALID
    if lease.receive_count == reading.receive_count:
        if lease.receipt_handle != reading.receipt_handle:
            return Action.ADOPT_SAME_COUNT if lease.active else Action.STALE
        if lease.waiting:
            return Action.STILL_WAITING
        return Action.RESUME if lease.active else Action.STALE
    if lease.active:
        return Action.ADOPT
    if lease.execution_arn and reading.execution_running is None:
        return Action.READ_EXECUTION
    if reading.execution_running:
        return Action.ADOPT_RUNNING
    if reading.execution_succeeded:
        return Action.ALREADY_SUCCEEDED
    return _new_attempt(reading, limits)


def _new_attempt(reading: Reading, limits: Limits) -> Action:
    if reading.invalid_body:
        return Action.DEAD_LETTER_INVALID  # no retry can make it valid: in the DLQ with its history, if any
    if reading.attempts >= limits.max_attempts:
        return Action.DEAD_LETTER
    if reading.refused_starts >= limits.max_refused_starts:
        return Action.DEAD_LETTER_REFUSED
    if reading.job_lock is None:
        return Action.READ_JOB_LOCK
    if reading.job_lock is LockState.HELD_BY_THIS_MESSAGE:
        # Another receive of this very message (a duplicate delivery, handled at the same time) holds its
        # job id for its own attempt: that receive decides. A copy sent to wait here would be a second
        # message of the job, run again after this one.
        return Action.STALE
    if reading.job_lock is LockState.RUN_ENDING:
        # The previous run of the job id was asked to stop and is ending: a short wait, in place, no copy.
        return Action.DEAD_LETTER_BUSY if reading.hold_spent else Action.HOLD_FOR_JOB
    if reading.job_lock is LockState.HELD:
        if limits.fifo or not reading.room_for_copy:
            return Action.DEAD_LETTER_BUSY if reading.hold_spent else Action.HOLD_FOR_JOB
        return Action.WAIT_FOR_JOB
    if reading.slot is None:
        return Action.FIND_SLOT
    if reading.slot is SlotState.FULL:
        return Action.WAIT_FOR_SLOT
    return Action.START


def lock_state(lock: Lock, holder_status: str | None, *, message_id: str, now: float, grace_s: float) -> LockState:
    """The job lock held by another execution than this attempt's, given its holder's status (None when
    unknown: counted as running). A holder not running is stale once it has ended, or never started and
    is another attempt of this same message (its one lease decides which attempt runs) or past the
    receiver's grace (no start of it can land any more, as reconciliation judges leases)."""
    if holder_status is None or holder_status in RUNNING_STATUSES:
        return LockState.HELD_BY_THIS_MESSAGE if lock.holder == message_id else LockState.HELD
    if holder_status != NEVER_STARTED or lock.holder == message_id or now - lock.acquired_at >= grace_s:
        return LockState.STALE
    return LockState.HELD
