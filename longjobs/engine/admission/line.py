"""The line of a full type: a message that finds no slot waits in flight (a WAITING lease, hidden for an
estimated delay) or is parked; one that finds a slot gives it to those that waited longer first."""

from __future__ import annotations

import math
from collections.abc import Sequence

from longjobs.engine.admission.admit import admit_line
from longjobs.engine.admission.estimate import expected_start_s, in_flight_target, waiting_delay_s
from longjobs.engine.admission.parking import Handle, unpark
from longjobs.engine.admission.readings import longest_wait_s, read_slots, slots_for_claim, view_of
from longjobs.engine.admission.slots import TypeSlots
from longjobs.engine.delivery.attempt import dead_letter
from longjobs.engine.delivery.copies import has_room, park
from longjobs.engine.delivery.dlq import RETENTION_RUNNING_OUT
from longjobs.engine.delivery.models import Job
from longjobs.engine.delivery.types import Delivery, Outcome, Receiver
from longjobs.engine.lease import Lease, LeaseStatus, successor_version
from longjobs.engine.lease.lock import Hold
from longjobs.engine.lease.types import Attempt, LastError
from longjobs.engine.observability import logger
from longjobs.engine.visibility import FailureClass, VisibilityChange

ORDER_STEP_S = 0.001
"""Places in line handed out by one receiver are this far apart at least (the table keeps milliseconds)."""


def waiting_since(receiver: Receiver, delivery: Delivery, waiting: Lease | None) -> float:
    """When the message first waited for a slot: its WAITING lease's, its parked copy's, else now."""
    if waiting is not None and waiting.waiting_since is not None:
        return waiting.waiting_since
    carried = delivery.carried.waiting_since
    return carried if carried is not None else receiver.clock.now()


def place_in_line(receiver: Receiver, waiting: Lease | None) -> float:
    """The message's place in its type's line of messages waiting in flight (the `waiting` index's key):
    the one it has, or the back of the line, now. A parked message joins at the back when it is
    unparked: every message in flight then joined before it, so none is overtaken and each one's
    estimate holds; among parked ones the order is the waiting queue's (SQS's best effort, each batch
    sorted by when its messages first waited)."""
    if waiting is not None and waiting.waiting_order is not None:
        return waiting.waiting_order
    state = receiver.state
    with state.order_lock:  # after every place handed out before, and not before now
        state.last_order = max(receiver.clock.now(), state.last_order + ORDER_STEP_S)
        return state.last_order


def claim(
    receiver: Receiver,
    job_type: str,
    limit: int,
    *,
    message_id: str,
    order: float,
    arn: str,
    arriving: bool,
    handle: Handle,
) -> tuple[Hold | None, TypeSlots]:
    """A slot of `job_type` for the attempt `arn` to take with its lease (None when the type is full for
    it), and the type's slots as last read (`wait_or_park` estimates from them).

    Free slots go to the WAITING messages ahead of this one in line first (admitted in place), then, for
    a new arrival (`arriving`: it never waited), to the parked messages (unparked here: they start
    from their waiting queue); this one gets what is left. Nothing is taken here: the slot is taken in
    the transaction that writes the attempt's lease.
    """
    state = slots_for_claim(receiver, job_type, limit)
    mine = state.holding_of(arn)
    if mine is not None:
        return Hold(mine), state
    if not state.free_keys:
        return None, state
    state, _ = admit_line(receiver, job_type, state, behind=(order, message_id))
    if not state.free_keys:
        return None, state
    queue = receiver.settings.waiting_queue_urls.get(job_type)
    if arriving and queue is not None and view_of(receiver, job_type, queue).parked > 0:
        if unpark(receiver, queue, len(state.free_keys), handle=handle):  # they were first: they take the free slots
            return None, state
        state = read_slots(receiver, job_type, limit)  # none was parked after all
    return state.pick(receiver.rng), state


def can_park(receiver: Receiver, delivery: Delivery, job: Job, history: Sequence[Attempt]) -> bool:
    """Whether the message can be parked: its type has a waiting queue, and the copy and its marker room."""
    return job.type in receiver.settings.waiting_queue_urls and has_room(delivery, history, parked=True)


def hold_fits(receiver: Receiver, delivery: Delivery) -> bool:
    """Whether a whole hold of an attempt (`max_renewal_s`) ends before SQS deletes the message."""
    settings, sent_at = receiver.settings, delivery.sent_at
    if sent_at is None:
        return True
    return receiver.clock.now() + settings.effective_max_renewal_s <= sent_at + settings.queue_retention_s


def dead_letter_aged(
    receiver: Receiver, delivery: Delivery, history: tuple[Attempt, ...], *, replacing: Lease | None, job: Job
) -> Outcome | None:
    """A message whose retention is running out and that cannot be sent afresh: to the DLQ with the reason
    (`RetentionRunningOut`), rather than deleted by SQS without a trace."""
    sent_at = delivery.sent_at or receiver.clock.now()
    reason = (
        f"sent {receiver.clock.now() - sent_at:.0f} s ago (the queue keeps {receiver.settings.queue_retention_s} s); "
        f"a job of {job.type} cannot be parked afresh, nor run whole before SQS deletes it"
    )
    return dead_letter(
        receiver, delivery, history, replacing=replacing, error_type=RETENTION_RUNNING_OUT, message=reason, job=job
    )


def wait_or_park(
    receiver: Receiver,
    delivery: Delivery,
    job: Job,
    *,
    replacing: Lease | None,
    history: tuple[Attempt, ...],
    since: float,
    order: float,
    slots: TypeSlots,
) -> Outcome | None:
    """The type is full (`slots`, as `claim` last read them): the message waits in flight (a WAITING
    lease), or is parked in the type's waiting queue when it could not run within the horizon. None when a
    lease write lost its race (read again)."""
    settings = receiver.settings
    now = receiver.clock.now()
    queue = settings.waiting_queue_urls.get(job.type)
    returning = replacing is not None and replacing.waiting
    waits = replacing.waits if replacing is not None and returning else delivery.carried.waits
    view = view_of(receiver, job.type, queue)
    state = slots
    # One that joins the line joins at its back: every message in flight is ahead of it (the view counts
    # them); one that returns to its place counts those ahead of it.
    position = (
        receiver.store.index.count_waiting(job.type, now=now, ahead_of=(order, delivery.message_id))
        if returning
        else view.in_flight
    )
    parked_here = queue is not None and receiver.queue_of(delivery) == queue
    # Its queue deletes it at the end of its retention, hidden or not: from `resend_at` on it waits only
    # as a fresh copy (parked), and until then never hidden past it.
    resend_at = delivery.sent_at + settings.resend_after_s if delivery.sent_at is not None else math.inf
    aged = now >= resend_at
    if queue is not None and has_room(delivery, history, parked=True):
        beyond = position >= in_flight_target(state, now, settings.admission_horizon_s)
        if aged or (not parked_here and not returning and (view.parked > 0 or beyond)):
            if not park(receiver, delivery, job, queue, replacing=replacing, history=history, since=since, waits=waits):
                return None
            view.parked += 1
            return Outcome.PARKED
    if aged:
        return dead_letter_aged(receiver, delivery, history, replacing=replacing, job=job)
    start = expected_start_s(state, now, position)
    period = settings.extender_period_s
    delay = waiting_delay_s(
        start,
        waits=waits,
        base_s=settings.admission_wait_base_s,
        cap_s=longest_wait_s(settings),
        slack_s=period,
        rng=receiver.rng,
    )
    if resend_at < math.inf:
        delay = min(delay, math.ceil(resend_at - now))
    queue_url = receiver.queue_of(delivery)
    hidden_until = delivery.hidden_until
    last_error: LastError | None = None
    if hidden_until is not None and now + delay <= hidden_until <= resend_at:
        visible_until = hidden_until  # its receive hides it long enough already (an unparking's): no change
    else:
        outcome = receiver.visibility.change(
            VisibilityChange(delivery.message_id, queue_url, delivery.receipt_handle, delay)
        )
        if outcome.failure is FailureClass.LOST:
            return Outcome.STALE  # handed out again: the newer receive decides
        visible_until = now + delay if outcome.ok else now  # unknown: never believe it hidden longer than it is
        last_error = None if outcome.ok else LastError("waiting delay not set", outcome.error)
    lease = Lease(
        message_id=delivery.message_id,
        queue_url=queue_url,
        receipt_handle=delivery.receipt_handle,
        receive_count=delivery.receive_count,
        received_at=now,
        visible_until=visible_until,
        renew_until=visible_until,
        status=LeaseStatus.WAITING,
        version=successor_version(replacing),
        job_type=job.type,
        job_id=job.job_id,
        history=history,
        waiting_since=since,
        sent_at=delivery.sent_at,  # its admission in place cuts its attempt's release delay to the retention
        waiting_order=order,
        waits=waits + 1,
        refused_starts=delivery.refused_starts(replacing),
        job=job.model_dump_json(),
        last_error=last_error,
    )
    if not receiver.store.create(lease, replacing=replacing):
        return None
    if not returning:
        view.in_flight += 1
    logger.info(
        "type full: waits for a slot",
        extra={"message_id": delivery.message_id, "job_type": job.type, "delay_s": delay, "position": position},
    )
    return Outcome.WAITING_FOR_SLOT
