"""What admission reads of a job type: its slots, its waiting messages (in flight and parked), and the
times that bound a wait."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from longjobs.engine.admission.slots import Slots, TypeSlots
from longjobs.engine.delivery.types import Receiver
from longjobs.engine.settings import Settings

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


VIEW_TTL_S = 2.0
"""How long the receiver trusts its reading of a type's waiting counts (a batch reads them once)."""


LOOKAHEAD = 3
"""WAITING leases read beyond the free slots: some may be about to show again, not admissible in place."""


WAIT_HORIZONS = 2


@dataclass
class View:
    """A reading of a type's waiting messages: in flight (WAITING leases) and parked (its waiting queue)."""

    read_at: float
    in_flight: int
    parked: int


def longest_wait_s(settings: Settings) -> float:
    """The longest a message waits hidden on one receive: twice the horizon (an estimate within the horizon,
    stretched) and one admitter period. An admission in place starts a run on that receive, so the
    longest run must fit in what is left of its 12 h (`longjobs.construct.config` checks it)."""
    return WAIT_HORIZONS * settings.admission_horizon_s + settings.extender_period_s


def margin_s(receiver: Receiver) -> float:
    """How long a WAITING message must still be hidden to be admitted in place: the lease write and the
    first visibility change must land before SQS shows it again."""
    return max(2.0, 4 * receiver.settings.min_remaining_life_s)


def slots_of(receiver: Receiver) -> Slots:
    return Slots(receiver.store.locks)


def read_slots(receiver: Receiver, job_type: str, limit: int) -> TypeSlots:
    """The type's slots, read now (one BatchGetItem); a reading that finds every one held is kept for
    `slots_for_claim`."""
    state = slots_of(receiver).read(job_type, limit, now=receiver.clock.now())
    if state.free_keys:
        receiver.state.full_slots.pop(job_type, None)
    else:
        receiver.state.full_slots[job_type] = state
    return state


def slots_for_claim(receiver: Receiver, job_type: str, limit: int) -> TypeSlots:
    """The type's slots for a claim: read, unless this batch read them all held less than `VIEW_TTL_S` ago
    (`longjobs.engine.receiver.batch.receive_batch` forgets it), then that reading: a batch of arrivals for a full
    type reads its slots once, not once a message. Safe both ways: a slot is only ever taken by a conditional write,
    and a message that waits because a slot freed meanwhile is admitted in place, in its place in line, by the next
    admission pass (the one after that end, or the extender's within a period)."""
    full = receiver.state.full_slots.get(job_type)
    if isinstance(full, TypeSlots) and full.limit == limit and 0 <= receiver.clock.now() - full.read_at <= VIEW_TTL_S:
        return full
    return read_slots(receiver, job_type, limit)


def parked_count(sqs: SQSClient, queue_url: str) -> int:
    """Messages parked in a waiting queue (visible or delayed: not the ones received), as SQS counts them."""
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    return int(attributes.get("ApproximateNumberOfMessages", 0)) + int(
        attributes.get("ApproximateNumberOfMessagesDelayed", 0)
    )


def view_of(receiver: Receiver, job_type: str, queue: str | None) -> View:
    now = receiver.clock.now()
    view = receiver.state.views.get(job_type)
    if not isinstance(view, View) or now - view.read_at > VIEW_TTL_S:
        waiting = receiver.store.index.count_waiting(job_type, now=now)
        view = View(now, waiting, parked_count(receiver.sqs, queue) if queue else 0)
        receiver.state.views[job_type] = view
    return view
