"""The receiver's decision, row by row: every reading the receiver can make and the one action it leads
to, written out (`longjobs.engine.delivery.decision`)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from longjobs.engine.delivery.attempt import refused_start_delay_s
from longjobs.engine.delivery.decision import Action, Limits, LockState, Reading, SlotState, decide, lock_state
from longjobs.engine.lease.lock import Lock
from longjobs.engine.lease.types import Lease, LeaseStatus
from longjobs.engine.settings import Settings

LIMITS = Limits(max_attempts=3, max_refused_starts=5)
FIFO = Limits(max_attempts=3, max_refused_starts=5, fifo=True)
ARN = "arn:aws:states:eu-west-1:123456789012:execution:jobs:m-1"


def lease(status: LeaseStatus, receive_count: int = 1, handle: str = "h1", **fields: object) -> Lease:
    return Lease(
        message_id="m",
        queue_url="q",
        receipt_handle=handle,
        receive_count=receive_count,
        received_at=0.0,
        visible_until=0.0,
        renew_until=0.0,
        status=status,
        **fields,  # type: ignore[arg-type]
    )


def receive(count: int = 2, handle: str = "h2", **fields: object) -> Reading:
    """A receive of the message (its count and handle), with what was read of it."""
    return Reading(receive_count=count, receipt_handle=handle, **fields)  # type: ignore[arg-type]


def refused(count: int = 2, handle: str = "h2", **fields: object) -> Reading:
    """A receive whose body this receiver's checks refuse (`Reading.invalid_body`)."""
    return receive(count, handle, invalid_body=True, **fields)


ACTIVE = lease(LeaseStatus.ACTIVE, execution_arn=ARN, renew_at=0.0)
RELEASED = lease(LeaseStatus.RELEASED, execution_arn=ARN)
CAPPED = lease(LeaseStatus.CAPPED, execution_arn=ARN)
WAITING = lease(LeaseStatus.WAITING, job_type="t", waiting_order=1.0)
PARKED_SENT = lease(LeaseStatus.PARKED, job_type="t", copy_id="copy")
PARKED_UNSENT = lease(LeaseStatus.PARKED, job_type="t")
PARKED_CLAIMED = lease(LeaseStatus.PARKED, job_type="t", claimed_by="copy")
REQUEUED_SENT = lease(LeaseStatus.REQUEUED, job_type="t", copy_id="copy")
REQUEUED_UNSENT = lease(LeaseStatus.REQUEUED, job_type="t")
REQUEUED_CLAIMED = lease(LeaseStatus.REQUEUED, job_type="t", claimed_by="copy")

ROWS: list[tuple[str, Reading, Limits, Action]] = [
    # no lease: a new attempt, or a parked copy whose original's run is claimed first
    ("first receive", receive(1, "h1"), LIMITS, Action.READ_JOB_LOCK),
    ("parked copy, not claimed yet", receive(1, parked_copy=True), LIMITS, Action.CLAIM_COPY),
    ("parked copy, a twin runs it", receive(1, parked_copy=True, copy_runs=False), LIMITS, Action.DUPLICATE),
    (
        "parked copy of a cancelled message",
        receive(1, parked_copy=True, copy_runs=False, cancel_undelivered=True),
        LIMITS,
        Action.DEAD_LETTER_CANCELLED,
    ),
    ("parked copy that runs it", receive(1, parked_copy=True, copy_runs=True), LIMITS, Action.READ_JOB_LOCK),
    ("requeued copy, not claimed yet", receive(1, requeued_copy=True), LIMITS, Action.CLAIM_COPY),
    ("requeued copy, a twin runs it", receive(1, requeued_copy=True, copy_runs=False), LIMITS, Action.DUPLICATE),
    (
        "requeued copy of a cancelled message",
        receive(1, requeued_copy=True, copy_runs=False, cancel_undelivered=True),
        LIMITS,
        Action.DEAD_LETTER_CANCELLED,
    ),
    ("requeued copy that runs it", receive(1, requeued_copy=True, copy_runs=True), LIMITS, Action.READ_JOB_LOCK),
    (
        "requeued copy, its claimant has no lease yet",
        receive(1, requeued_copy=True, copy_runs=False, claimant_busy=True),
        LIMITS,
        Action.STALE,
    ),
    (
        "requeued copy, its claimant's run can no longer be told",
        receive(1, requeued_copy=True, copy_runs=False, claim_unknown=True),
        LIMITS,
        Action.DEAD_LETTER_UNKNOWN,
    ),
    (
        "parked copy, its claimant has no lease yet",
        receive(1, parked_copy=True, copy_runs=False, claimant_busy=True),
        LIMITS,
        Action.STALE,
    ),
    # a lease that says where the message went
    ("parked, copy sent", receive(lease=PARKED_SENT, marker_live=True), LIMITS, Action.DUPLICATE),
    ("parked, copy not sent", receive(lease=PARKED_UNSENT, marker_live=True), LIMITS, Action.SEND_COPY),
    ("parked, copy not noted, claimed", receive(lease=PARKED_CLAIMED, marker_live=True), LIMITS, Action.DUPLICATE),
    ("parked, its type no longer parks", receive(lease=PARKED_SENT), LIMITS, Action.READ_JOB_LOCK),
    ("requeued, copy sent", receive(lease=REQUEUED_SENT), LIMITS, Action.DUPLICATE),
    ("requeued, copy not known to be sent", receive(lease=REQUEUED_UNSENT), LIMITS, Action.SEND_COPY),
    ("requeued, copy not noted, claimed", receive(lease=REQUEUED_CLAIMED), LIMITS, Action.DUPLICATE),
    ("requeued, older receive", receive(1, lease=lease(LeaseStatus.REQUEUED, 3)), LIMITS, Action.SEND_COPY),
    ("succeeded", receive(lease=lease(LeaseStatus.SUCCEEDED)), LIMITS, Action.ALREADY_SUCCEEDED),
    ("succeeded, older receive", receive(1, lease=lease(LeaseStatus.SUCCEEDED, 3)), LIMITS, Action.ALREADY_SUCCEEDED),
    ("in the DLQ", receive(lease=lease(LeaseStatus.REJECTED)), LIMITS, Action.ALREADY_DEAD_LETTERED),
    (
        "in the DLQ, its copy noted",
        receive(lease=lease(LeaseStatus.REJECTED, claimed_by="h0#1", copy_id="c")),
        LIMITS,
        Action.ALREADY_DEAD_LETTERED,
    ),
    (
        "on its way to the DLQ, claimed",
        receive(lease=lease(LeaseStatus.DEAD_LETTERING, claimed_by="h0#1")),
        LIMITS,
        Action.SEND_DEAD_LETTER,
    ),
    (
        "on its way to the DLQ, older receive",
        receive(1, lease=lease(LeaseStatus.DEAD_LETTERING, 3, claimed_by="h0#1")),
        LIMITS,
        Action.SEND_DEAD_LETTER,
    ),
    ("cancelled", receive(lease=lease(LeaseStatus.CANCELLED)), LIMITS, Action.ALREADY_CANCELLED),
    (
        "cancelled, no DLQ copy yet",
        receive(lease=lease(LeaseStatus.CANCELLED), cancel_undelivered=True),
        LIMITS,
        Action.DEAD_LETTER_CANCELLED,
    ),
    # fencing by receive count
    ("older receive", receive(1, lease=lease(LeaseStatus.ACTIVE, 2)), LIMITS, Action.STALE),
    ("same count, other handle, active", receive(1, "h9", lease=ACTIVE), LIMITS, Action.ADOPT_SAME_COUNT),
    ("same count, other handle, closed", receive(1, "h9", lease=RELEASED), LIMITS, Action.STALE),
    ("same receive again, active", receive(1, "h1", lease=ACTIVE), LIMITS, Action.RESUME),
    ("same receive again, waiting", receive(1, "h1", lease=WAITING), LIMITS, Action.STILL_WAITING),
    ("same receive again, closed", receive(1, "h1", lease=RELEASED), LIMITS, Action.STALE),
    # a newer receive
    ("newer receive of an active lease", receive(lease=ACTIVE), LIMITS, Action.ADOPT),
    ("newer, closed with an execution", receive(lease=RELEASED), LIMITS, Action.READ_EXECUTION),
    ("newer, closed, execution runs", receive(lease=RELEASED, execution_running=True), LIMITS, Action.ADOPT_RUNNING),
    ("newer, closed, execution ended", receive(lease=RELEASED, execution_running=False), LIMITS, Action.READ_JOB_LOCK),
    (
        "newer, closed, execution succeeded",
        receive(lease=CAPPED, execution_running=False, execution_succeeded=True),
        LIMITS,
        Action.ALREADY_SUCCEEDED,
    ),
    ("newer receive of a waiting one", receive(lease=WAITING), LIMITS, Action.READ_JOB_LOCK),
    # a new attempt
    ("attempts used up", receive(attempts=3, job_lock=LockState.HELD), LIMITS, Action.DEAD_LETTER),
    ("one attempt left", receive(attempts=2), LIMITS, Action.READ_JOB_LOCK),
    ("starts refused too often", receive(refused_starts=5), LIMITS, Action.DEAD_LETTER_REFUSED),
    ("lock: another receive of it", receive(job_lock=LockState.HELD_BY_THIS_MESSAGE), LIMITS, Action.STALE),
    ("lock held by a running job", receive(job_lock=LockState.HELD), LIMITS, Action.WAIT_FOR_JOB),
    ("lock held, FIFO", receive(job_lock=LockState.HELD), FIFO, Action.HOLD_FOR_JOB),
    (
        "lock held, no room for a copy",
        receive(job_lock=LockState.HELD, room_for_copy=False),
        LIMITS,
        Action.HOLD_FOR_JOB,
    ),
    (
        "lock held, FIFO, receives spent",
        receive(job_lock=LockState.HELD, hold_spent=True),
        FIFO,
        Action.DEAD_LETTER_BUSY,
    ),
    (
        "lock held, no room, receives spent",
        receive(job_lock=LockState.HELD, room_for_copy=False, hold_spent=True),
        LIMITS,
        Action.DEAD_LETTER_BUSY,
    ),
    (
        "lock held, copy sent back, however old",
        receive(job_lock=LockState.HELD, hold_spent=True),
        LIMITS,
        Action.WAIT_FOR_JOB,
    ),
    # the lock's last holder ended, its job run has not (`longjobs.engine.runs`): a short wait in place
    ("previous run ending", receive(job_lock=LockState.RUN_ENDING), LIMITS, Action.HOLD_FOR_JOB),
    ("previous run ending, FIFO", receive(job_lock=LockState.RUN_ENDING), FIFO, Action.HOLD_FOR_JOB),
    (
        "previous run ending, receives nearly spent",
        receive(job_lock=LockState.RUN_ENDING, hold_spent=True),
        LIMITS,
        Action.DEAD_LETTER_BUSY,
    ),
    (
        "previous run ending, attempts used up",
        receive(attempts=3, job_lock=LockState.RUN_ENDING),
        LIMITS,
        Action.DEAD_LETTER,
    ),
    ("lock free", receive(job_lock=LockState.FREE), LIMITS, Action.FIND_SLOT),
    ("lock stale", receive(job_lock=LockState.STALE), LIMITS, Action.FIND_SLOT),
    ("type full", receive(slot=SlotState.FULL, job_lock=LockState.FREE), LIMITS, Action.WAIT_FOR_SLOT),
    ("slot free", receive(slot=SlotState.FREE, job_lock=LockState.FREE), LIMITS, Action.START),
    ("type unlimited", receive(slot=SlotState.UNLIMITED, job_lock=LockState.FREE), LIMITS, Action.START),
    ("unlimited, lock taken over", receive(slot=SlotState.UNLIMITED, job_lock=LockState.STALE), LIMITS, Action.START),
    # a body this receiver refuses (its settings or catalog changed since the message's attempts began),
    # judged once its lease is read: never a new attempt, never the end of a running execution's message
    ("refused body, no lease: poison", refused(1, "h1"), LIMITS, Action.DEAD_LETTER_INVALID),
    ("refused body, parked copy, not claimed yet", refused(1, parked_copy=True), LIMITS, Action.CLAIM_COPY),
    (
        "refused body, parked copy that runs it",
        refused(1, parked_copy=True, copy_runs=True),
        LIMITS,
        Action.DEAD_LETTER_INVALID,
    ),
    (
        "refused body, requeued copy, a twin runs it",
        refused(1, requeued_copy=True, copy_runs=False),
        LIMITS,
        Action.DUPLICATE,
    ),
    ("refused body, in the DLQ", refused(lease=lease(LeaseStatus.REJECTED)), LIMITS, Action.ALREADY_DEAD_LETTERED),
    ("refused body, succeeded", refused(lease=lease(LeaseStatus.SUCCEEDED)), LIMITS, Action.ALREADY_SUCCEEDED),
    ("refused body, cancelled", refused(lease=lease(LeaseStatus.CANCELLED)), LIMITS, Action.ALREADY_CANCELLED),
    ("refused body, requeued, copy sent", refused(lease=REQUEUED_SENT), LIMITS, Action.DUPLICATE),
    (
        "refused body, older receive",
        refused(1, lease=lease(LeaseStatus.ACTIVE, 2, execution_arn=ARN)),
        LIMITS,
        Action.STALE,
    ),
    ("refused body, newer receive of an active lease", refused(lease=ACTIVE), LIMITS, Action.READ_EXECUTION),
    ("refused body, active, execution runs", refused(lease=ACTIVE, execution_running=True), LIMITS, Action.ADOPT),
    (
        "refused body, active, execution ended: settled by the adoption",
        refused(lease=ACTIVE, execution_running=False),
        LIMITS,
        Action.ADOPT,
    ),
    (
        "refused body, active, execution succeeded",
        refused(lease=ACTIVE, execution_running=False, execution_succeeded=True),
        LIMITS,
        Action.ADOPT,
    ),
    (
        "refused body, active, execution never started",
        refused(lease=ACTIVE, execution_running=False, execution_missing=True),
        LIMITS,
        Action.DEAD_LETTER_INVALID,
    ),
    ("refused body, same receive again, active", refused(1, "h1", lease=ACTIVE), LIMITS, Action.READ_EXECUTION),
    (
        "refused body, same receive again, execution runs",
        refused(1, "h1", lease=ACTIVE, execution_running=True),
        LIMITS,
        Action.RESUME,
    ),
    (
        "refused body, same receive again, never started",
        refused(1, "h1", lease=ACTIVE, execution_running=False, execution_missing=True),
        LIMITS,
        Action.DEAD_LETTER_INVALID,
    ),
    (
        "refused body, same count, other handle, execution runs",
        refused(1, "h9", lease=ACTIVE, execution_running=True),
        LIMITS,
        Action.ADOPT_SAME_COUNT,
    ),
    ("refused body, newer, closed with an execution", refused(lease=RELEASED), LIMITS, Action.READ_EXECUTION),
    (
        "refused body, newer, closed, execution runs",
        refused(lease=RELEASED, execution_running=True),
        LIMITS,
        Action.ADOPT_RUNNING,
    ),
    (
        "refused body, newer, closed, execution succeeded",
        refused(lease=CAPPED, execution_running=False, execution_succeeded=True),
        LIMITS,
        Action.ALREADY_SUCCEEDED,
    ),
    (
        "refused body, newer, closed, execution ended: the DLQ with its history",
        refused(lease=RELEASED, execution_running=False, attempts=1),
        LIMITS,
        Action.DEAD_LETTER_INVALID,
    ),
    (
        "refused body, attempts used up: its body is the reason",
        refused(lease=RELEASED, execution_running=False, attempts=3),
        LIMITS,
        Action.DEAD_LETTER_INVALID,
    ),
    ("refused body, same receive again, waiting", refused(1, "h1", lease=WAITING), LIMITS, Action.STILL_WAITING),
    ("refused body, newer receive of a waiting one", refused(lease=WAITING), LIMITS, Action.DEAD_LETTER_INVALID),
]


@pytest.mark.parametrize(("reading", "limits", "expected"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_receiver_decision_table(reading: Reading, limits: Limits, expected: Action) -> None:
    assert decide(reading, limits) is expected


def test_receiver_decision_table_reaches_every_action() -> None:
    assert {row[3] for row in ROWS} == set(Action)


BEGINS_ATTEMPT = frozenset(
    {
        Action.READ_JOB_LOCK,
        Action.FIND_SLOT,
        Action.START,
        Action.WAIT_FOR_JOB,
        Action.HOLD_FOR_JOB,
        Action.WAIT_FOR_SLOT,
        Action.DEAD_LETTER,
        Action.DEAD_LETTER_REFUSED,
        Action.DEAD_LETTER_BUSY,
    }
)


@pytest.mark.parametrize(
    ("reading", "limits"),
    [row[1:3] for row in ROWS if not row[1].invalid_body],
    ids=[row[0] for row in ROWS if not row[1].invalid_body],
)
def test_receiver_decision_of_a_refused_body_is_a_valid_ones_where_no_attempt_begins(
    reading: Reading, limits: Limits
) -> None:
    """Every row again with the body refused (which reads no job lock and no slot): where a valid body
    begins an attempt (or reads for one), the DLQ; a newer or same receive of an ACTIVE lease first reads
    its execution; anything else as for a valid body."""
    unread = replace(reading, job_lock=None, slot=None)
    valid = decide(unread, limits)
    action = decide(replace(unread, invalid_body=True), limits)
    lease = reading.lease
    if valid in BEGINS_ATTEMPT:
        assert action is Action.DEAD_LETTER_INVALID
    elif lease is not None and lease.active and lease.receive_count <= reading.receive_count:
        assert action is Action.READ_EXECUTION
    else:
        assert action is valid


def test_receiver_decision_reads_only_what_it_lacks() -> None:
    """Each read, answered, leads to another action: the receiver's loop ends."""
    reading = receive(lease=RELEASED)
    answers = {
        Action.READ_EXECUTION: {"execution_running": False},
        Action.READ_JOB_LOCK: {"job_lock": LockState.FREE},
        Action.FIND_SLOT: {"slot": SlotState.FREE},
    }
    path = []
    while (action := decide(reading, LIMITS)) in answers:
        path.append(action)
        reading = replace(reading, **answers[action])  # type: ignore[arg-type]
    assert path == [Action.READ_EXECUTION, Action.READ_JOB_LOCK, Action.FIND_SLOT]
    assert action is Action.START


HOLDER = Lock("job#j", holder="other", execution_arn=ARN, acquired_at=1000.0, held=True)
MINE = replace(HOLDER, holder="m")
LOCK_ROWS: list[tuple[str, Lock, str | None, float, LockState]] = [
    ("holder's status unknown", HOLDER, None, 1001.0, LockState.HELD),
    ("another receive of it, unknown", MINE, None, 1001.0, LockState.HELD_BY_THIS_MESSAGE),
    ("holder running", HOLDER, "RUNNING", 1001.0, LockState.HELD),
    ("holder being redriven", HOLDER, "PENDING_REDRIVE", 1001.0, LockState.HELD),
    ("another receive of it, running", MINE, "RUNNING", 1001.0, LockState.HELD_BY_THIS_MESSAGE),
    ("holder succeeded", HOLDER, "SUCCEEDED", 1001.0, LockState.STALE),
    ("holder failed", HOLDER, "FAILED", 1001.0, LockState.STALE),
    ("holder stopped", HOLDER, "ABORTED", 1001.0, LockState.STALE),
    ("another receive of it, never started", MINE, "NEVER_STARTED", 1001.0, LockState.STALE),
    ("holder never started, may still", HOLDER, "NEVER_STARTED", 1059.0, LockState.HELD),
    ("holder never started, past the grace", HOLDER, "NEVER_STARTED", 1060.0, LockState.STALE),
]


@pytest.mark.parametrize(
    ("lock", "status", "now", "expected"), [row[1:] for row in LOCK_ROWS], ids=[row[0] for row in LOCK_ROWS]
)
def test_receiver_decision_lock_state_table(lock: Lock, status: str | None, now: float, expected: LockState) -> None:
    assert lock_state(lock, status, message_id="m", now=now, grace_s=60.0) is expected


def test_receiver_decision_every_action_is_a_read_or_an_end_with_one_effect() -> None:
    """The receiver carries out each action from one table: a read answers the decision's question and it
    decides again; an end is what the receive becomes. No action is both, none is neither."""
    from longjobs.engine.receiver.service import _ENDS, _READS

    assert not set(_READS) & set(_ENDS)
    assert set(_READS) | set(_ENDS) == set(Action)
    assert set(_READS) == {Action.CLAIM_COPY, Action.READ_EXECUTION, Action.READ_JOB_LOCK, Action.FIND_SLOT}


@pytest.mark.parametrize(
    ("refused", "ceiling"), [(0, 0.5), (1, 1.0), (2, 2.0), (5, 16.0), (6, 32.0), (7, 60.0), (30, 60.0)]
)
def test_receiver_refused_start_backoff_doubles_up_to_an_extender_period(refused: int, ceiling: float) -> None:
    """Full jitter over 2^(n-1) s for the n-th start refused in a row, at most one extender period."""
    settings = Settings(extender_period_s=60)
    rng = random.Random(refused)
    delays = [refused_start_delay_s(refused, settings, rng) for _ in range(200)]
    assert all(0 <= delay < max(ceiling, 1) for delay in delays)
    assert max(delays) >= int(ceiling) - 1, "full jitter reaches up to the ceiling"
