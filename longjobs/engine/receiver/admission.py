"""Admission control: a job type never runs more than its `max_concurrency` executions at once.

An attempt of a limited type takes one of the type's slots (`longjobs.engine.admission.slots`) before its
lease names it and before it starts; every way it ends releases the slot (with its lease). A message
that finds its type full is not an attempt and is not started:

- **Waits in flight** when it can be expected to run within `admission_horizon_s`: the message stays on
  its queue, hidden by a visibility delay estimated from when a slot frees (`longjobs.engine.admission
  .estimate`: the holders' ages and the type's recent durations, stretched, jittered, doubled with each
  wait, capped); its lease is WAITING and sits in the `waiting` index by when it first waited.
- **Is parked** otherwise: copied to the type's waiting queue (with when it first waited, its original
  message id and its attempts' history in the `LongJobsAdmission` attribute) and acknowledged. Nothing
  receives a waiting queue but admission, and only what can be expected to run within the horizon, so
  a parked message costs no receive while it waits, however long: SQS's 12 h visibility limit does not
  apply to it.

Whoever finds a free slot gives it to the longest-waiting message first:

- `admit_type`, after every extender run and on every execution end the watcher hears of, admits the
  WAITING messages in place, oldest first: their lease becomes the ACTIVE lease of an attempt on the
  receive that holds them, so they start without being received again. Then it unparks: receives from
  the waiting queue what the horizon can take (those that fit a free slot start at once).
- The receiver, for a message that finds a free slot, first admits the WAITING messages that waited
  longer, then takes what is left; a newer message waits behind every waiting one of its type, and is
  parked while any is parked.

An admission in place is fenced like a receive: the WAITING lease is replaced only if unchanged (a
conditional write on its version), so a redelivery of the same message and an admitter never both
start it; the slot and the job lock are taken before, and released if the lease write loses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from longjobs.engine.admission import (
    Slots,
    TypeSlots,
    drain_time_s,
    expected_start_s,
    in_flight_target,
    waiting_delay_s,
)
from longjobs.engine.execution import (
    NEVER_STARTED,
    RUNNING_STATUSES,
    execution_arn,
    execution_name,
    execution_status,
    parse_execution_name,
)
from longjobs.engine.lease import Lease, LeaseStatus, job_lock_key
from longjobs.engine.lease.lock import Lock
from longjobs.engine.lease.types import Attempt
from longjobs.engine.observability import MetricName, logger, type_metric
from longjobs.engine.policies import hold_limit
from longjobs.engine.receiver.models import Job
from longjobs.engine.receiver.service import (
    ADMISSION_ATTRIBUTE,
    MAX_MESSAGE_ATTRIBUTES,
    Carried,
    Delivery,
    Outcome,
    Receiver,
    _release_lock,
    _release_unless_named,
    _resume,
    _take_job_lock,
    closed_record,
    receive,
    release_delay_s,
)
from longjobs.engine.settings import SQS_MAX_RETENTION_S, Settings
from longjobs.engine.visibility import FailureClass, VisibilityChange

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

VIEW_TTL_S = 2.0
"""How long the receiver trusts its reading of a type's waiting counts (a batch reads them once)."""
LOOKAHEAD = 3
"""WAITING leases read beyond the free slots: some may be about to show again, not admissible in place."""
WAIT_HORIZONS = 2
UNPARK_CALLS = 10
"""Receive calls on a waiting queue per admission pass at most (100 messages)."""


@dataclass
class View:
    """A reading of a type's waiting messages: in flight (WAITING leases) and parked (its waiting queue)."""

    read_at: float
    in_flight: int
    parked: int


@dataclass
class AdmitReport:
    job_type: str
    slots_in_use: int = 0
    free_slots: int = 0
    waiting: int = 0  # in flight (WAITING leases), after the pass
    parked: int = 0  # in the waiting queue (SQS's approximate count), before unparking
    admitted: int = 0  # WAITING messages started in place
    unparked: int = 0  # received from the waiting queue
    freed: int = 0  # slots of executions found not running, freed
    drain_s: float | None = None  # until the last waiting or parked message can be expected to start


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
    receiver.last_order = max(receiver.clock.now(), receiver.last_order + ORDER_STEP_S)
    return receiver.last_order


def claim(
    receiver: Receiver, job_type: str, limit: int, *, message_id: str, order: float, arn: str, arriving: bool = False
) -> str | None:
    """A slot of `job_type` for the attempt `arn`, or None when the type is full for it.

    Free slots go to the WAITING messages ahead of this one in line first (admitted in place), then, for
    a new arrival (`arriving`: it never waited), to the parked messages (unparked here: they start
    from their waiting queue); this one takes what is left.
    """
    slots = slots_of(receiver)
    now = receiver.clock.now()
    state = slots.read(job_type, limit, now=now)
    mine = state.holding_of(arn)
    if mine is not None:
        return mine
    if not state.free_keys:
        return None
    for waiting in receiver.store.waiting(
        job_type, len(state.free_keys) + LOOKAHEAD, hidden_after=now + margin_s(receiver)
    ):
        if not state.free_keys:
            return None
        if waiting.message_id == message_id or (waiting.waiting_order or 0.0) >= order:
            continue
        state = admit_in_place(receiver, waiting, state) or state
    if not state.free_keys:
        return None
    queue = receiver.settings.waiting_queue_urls.get(job_type)
    if arriving and queue is not None and _view(receiver, job_type, queue).parked > 0:
        if unpark(receiver, queue, len(state.free_keys)):  # they were first: they take the free slots
            return None
        state = slots.read(job_type, limit, now=receiver.clock.now())  # none was parked after all
        if not state.free_keys:
            return None
    taken_at = receiver.clock.now()  # not `now`: admitting others took time, and the sweep's grace counts from this
    taken = slots.take(
        state,
        holder=message_id,
        execution_arn=arn,
        now=taken_at,
        hold_until=receiver.settings.renew_until(taken_at),
        rng=receiver.rng,
    )
    return taken[0] if taken is not None else None


def wait_or_park(
    receiver: Receiver,
    delivery: Delivery,
    job: Job,
    limit: int,
    *,
    replacing: Lease | None,
    history: tuple[Attempt, ...],
    since: float,
    order: float,
) -> Outcome | None:
    """The type is full: the message waits in flight (a WAITING lease), or is parked in the type's waiting
    queue when it could not run within the horizon. None when a lease write lost its race (read again)."""
    settings = receiver.settings
    now = receiver.clock.now()
    queue = settings.waiting_queue_urls.get(job.type)
    returning = replacing is not None and replacing.waiting
    waits = replacing.waits if replacing is not None and returning else delivery.carried.waits
    view = _view(receiver, job.type, queue)
    state = slots_of(receiver).read(job.type, limit, now=now)
    fresh = not returning and delivery.carried.waiting_since is None
    position = receiver.store.count_waiting(job.type, now=now, ahead_of=(order, delivery.message_id))
    parked_here = queue is not None and receiver.queue_of(delivery) == queue
    if queue is not None and not parked_here and not returning:
        beyond = position >= in_flight_target(state, now, settings.admission_horizon_s)
        if (view.parked > 0 or beyond) and _has_room(delivery):
            if not park(receiver, delivery, job, queue, replacing=replacing, history=history, since=since, waits=waits):
                return None
            view.parked += 1
            return Outcome.PARKED
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
    queue_url = receiver.queue_of(delivery)
    outcome = receiver.visibility.change(
        VisibilityChange(delivery.message_id, queue_url, delivery.receipt_handle, delay)
    )
    if outcome.failure is FailureClass.LOST:
        return Outcome.STALE  # handed out again: the newer receive decides
    visible_until = now + delay if outcome.ok else now  # unknown: never believe it hidden longer than it is
    lease = Lease(
        message_id=delivery.message_id,
        queue_url=queue_url,
        receipt_handle=delivery.receipt_handle,
        receive_count=delivery.receive_count,
        received_at=now,
        visible_until=visible_until,
        renew_until=visible_until,
        status=LeaseStatus.WAITING,
        job_type=job.type,
        job_id=job.job_id,
        history=history,
        waiting_since=since,
        waiting_order=order,
        waits=waits + 1,
        job=job.model_dump_json(),
        last_error=None if outcome.ok else f"waiting delay not set: {outcome.error}",
    )
    if not receiver.store.create(lease, replacing=replacing):
        return None
    if fresh:
        view.in_flight += 1
    logger.info(
        "type full: waits for a slot",
        extra={"message_id": delivery.message_id, "job_type": job.type, "delay_s": delay, "position": position},
    )
    return Outcome.WAITING_FOR_SLOT


def park(
    receiver: Receiver,
    delivery: Delivery,
    job: Job,
    queue_url: str,
    *,
    replacing: Lease | None,
    history: tuple[Attempt, ...],
    since: float,
    waits: int,
) -> bool:
    """Copy the message to its type's waiting queue, with what it carries. First a PARKED marker is
    written on its lease, so a redelivery of this message (its deletion lost, a send retried after it
    landed) sends no second copy, and twin copies run once (`runs_this_copy`). False when the marker
    write lost its race (read again). Raises when SQS refuses: the record is reported failed and comes
    back to a marker without a copy, which sends it then (`park_again`)."""
    marker = closed_record(
        receiver,
        delivery,
        LeaseStatus.PARKED,
        kept_s=SQS_MAX_RETENTION_S,  # as long as a copy may be in the waiting queue
        job_type=job.type,
        job_id=job.job_id,
        history=history,
        waiting_since=since,
        waits=waits,
    )
    if not receiver.store.create(marker, replacing=replacing):
        return False
    _send_copy(receiver, delivery, queue_url, marker)
    logger.info("type full beyond the horizon: parked", extra={"message_id": delivery.message_id})
    return True


def park_again(receiver: Receiver, delivery: Delivery, marker: Lease) -> Outcome:
    """A parked message received again: acknowledged when its copy was sent, else the copy is sent now
    (the earlier send failed, or landed unanswered: then two copies exist and one of them runs). Its type
    must still have a waiting queue (`is_parked_marker`)."""
    if marker.copy_id is None:
        queue_url = receiver.settings.waiting_queue_urls[marker.job_type or ""]
        _send_copy(receiver, delivery, queue_url, marker)
        logger.info("parked message received again: its copy is sent now", extra={"message_id": delivery.message_id})
        return Outcome.PARKED
    logger.info(
        "parked message received again: acknowledged",
        extra={"message_id": delivery.message_id, "copy": marker.copy_id},
    )
    return Outcome.DUPLICATE


def is_parked_marker(receiver: Receiver, lease: Lease) -> bool:
    """Whether a lease is the PARKED marker of a type that still has a waiting queue (else the message
    is handled as any closed one: a new attempt)."""
    return lease.status is LeaseStatus.PARKED and lease.job_type in receiver.settings.waiting_queue_urls


def runs_this_copy(receiver: Receiver, delivery: Delivery) -> bool:
    """Whether a message received with no lease of its own may start: anything but a parked copy may, and
    a parked copy only when its marker names it (the first copy received claims the run), or when no
    marker names any (parked before markers existed)."""
    parked_id = delivery.carried.parked_id
    if parked_id is None or receiver.queue_of(delivery) == receiver.queue_url:
        return True  # not a parked copy (a copy sent back to wait for its job id keeps the attribute)
    claimed = receiver.store.claim_parked(parked_id, delivery.message_id)
    if claimed is False:
        logger.warning(
            "twin copy of a parked message: acknowledged, the other copy runs",
            extra={"message_id": delivery.message_id, "parked_from": parked_id},
        )
    return claimed is not False


def _has_room(delivery: Delivery) -> bool:
    """Whether the copy has room for the admission attribute (else the message waits in flight)."""
    attributes = [name for name in delivery.message_attributes if name != ADMISSION_ATTRIBUTE]
    return len(attributes) < MAX_MESSAGE_ATTRIBUTES


def _send_copy(receiver: Receiver, delivery: Delivery, queue_url: str, marker: Lease) -> None:
    """Send the copy a PARKED marker describes, then note its id on the marker (best effort: without it a
    redelivery sends another copy, and the twins' claim runs one)."""
    carried = Carried(
        waiting_since=marker.waiting_since,
        original_id=delivery.original_id,
        waits=marker.waits,
        history=marker.history,
        parked_id=marker.message_id,
    )
    attributes = {k: v for k, v in delivery.message_attributes.items() if k != ADMISSION_ATTRIBUTE}
    attributes[ADMISSION_ATTRIBUTE] = {"DataType": "String", "StringValue": carried.encode()}
    sent = receiver.sqs.send_message(QueueUrl=queue_url, MessageBody=delivery.body, MessageAttributes=attributes)
    if not receiver.store.note_copy(marker, sent["MessageId"]):
        logger.info("parked marker changed meanwhile: copy id not noted", extra={"message_id": marker.message_id})


def admit_in_place(receiver: Receiver, waiting: Lease, state: TypeSlots) -> TypeSlots | None:
    """Start a WAITING message's attempt on the receive that holds it (no new receive): job lock, slot,
    then its lease turned ACTIVE (conditional on the WAITING lease unchanged), then the first chunk and
    the start. Returns the slots with the one it took, or None when it was not admitted."""
    settings = receiver.settings
    now = receiver.clock.now()
    if waiting.job is None or waiting.visible_until - now < margin_s(receiver):
        return None  # about to show again: its redelivery claims a slot itself
    if now - waiting.received_at > longest_wait_s(settings):
        return None  # too little of its receive's 12 h left for a run: its redelivery starts afresh
    job = Job.model_validate_json(waiting.job)
    arn = execution_arn(receiver.state_machine_arn, execution_name(waiting.message_id, waiting.receive_count))
    if job.job_id and _take_job_lock(receiver, job.job_id, waiting.message_id, arn) is not None:
        return None
    taken = slots_of(receiver).take(
        state,
        holder=waiting.message_id,
        execution_arn=arn,
        now=now,
        hold_until=settings.renew_until(now),
        rng=receiver.rng,
    )
    if taken is None:
        if job.job_id:
            _release_lock(receiver, job_lock_key(job.job_id), arn)
        return None
    key, after = taken
    active = Lease(
        message_id=waiting.message_id,
        queue_url=waiting.queue_url,
        receipt_handle=waiting.receipt_handle,
        receive_count=waiting.receive_count,
        received_at=now,  # when the attempt began: reconciliation's grace counts from it
        visible_until=now + receiver.policy.initial_timeout_s(),
        renew_until=min(settings.renew_until(now), hold_limit(waiting.received_at, settings.cap_safety_s)),
        version=waiting.version + 1,
        execution_arn=arn,
        attempt=waiting.receive_count,
        job_type=waiting.job_type,
        job_id=job.job_id,
        release_delay_s=release_delay_s(len(waiting.history) + 1, settings, receiver.rng),
        slot=key,
        history=waiting.history,
        waits=waiting.waits,
    )
    active = replace(active, renew_at=receiver.policy.renew_at(active))
    if not _admitted(receiver, waiting, active):
        # Another admitter won. It computed the same execution name, so the lock and slot it holds name
        # that execution too: free them only if the winning lease names another (protocol review, defect 1).
        _release_unless_named(receiver, active)
        return None
    waited = now - (waiting.waiting_since or now)
    type_metric(receiver.metrics, MetricName.ADMISSION_DELAY, "Seconds", waited, waiting.job_type or "")
    logger.info("admitted in place", extra={"message_id": waiting.message_id, "waited_s": round(waited, 1)})
    _resume(receiver, job, active, new=True)
    return after


def admit_type(
    receiver: Receiver, job_type: str, limit: int, *, sweep: bool = False, deadline: float = math.inf
) -> AdmitReport:
    """One admission pass of a type: free stale slots (`sweep`), admit the WAITING messages in place into
    the free slots (longest waiting first), then unpark what the horizon can take. Nothing new is begun
    past `deadline` (what was begun is finished): the rest waits for the next pass."""
    report = AdmitReport(job_type)
    settings = receiver.settings
    now = receiver.clock.now()
    state = slots_of(receiver).read(job_type, limit, now=now)
    if sweep:
        state, report.freed = sweep_stale(receiver, state)
    if state.free_keys:
        hidden_after = now + margin_s(receiver)
        for waiting in receiver.store.waiting(job_type, len(state.free_keys) + LOOKAHEAD, hidden_after=hidden_after):
            if not state.free_keys or receiver.clock.now() >= deadline:
                break
            admitted = admit_in_place(receiver, waiting, state)
            if admitted is not None:
                state = admitted
                report.admitted += 1
    queue = settings.waiting_queue_urls.get(job_type)
    in_flight = receiver.store.count_waiting(job_type, now=now)
    if queue is not None:
        report.parked = parked_count(receiver.sqs, queue)
        want = in_flight_target(state, receiver.clock.now(), settings.admission_horizon_s) - in_flight
        if report.parked and want > 0 and receiver.clock.now() < deadline:
            report.unparked = unpark(receiver, queue, want, deadline=deadline)
            receiver.views.pop(job_type, None)
            in_flight = receiver.store.count_waiting(job_type, now=receiver.clock.now())
            state = slots_of(receiver).read(job_type, limit, now=receiver.clock.now())
    report.waiting = in_flight
    report.slots_in_use = state.used
    report.free_slots = len(state.free_keys)
    report.drain_s = drain_time_s(state, receiver.clock.now(), report.waiting + report.parked - report.unparked)
    return report


def admit_all(
    receiver: Receiver, *, sweep: bool = False, only: str | None = None, deadline: float = math.inf
) -> list[AdmitReport]:
    """`admit_type` for every limited type of the catalog (or the one named `only`), none begun past
    `deadline`; a type whose pass fails is logged and skipped."""
    reports = []
    for job_type in receiver.catalog.limited():
        if only is not None and job_type.name != only:
            continue
        if receiver.clock.now() >= deadline:
            logger.warning("admission pass out of time; the next pass goes on", extra={"job_type": job_type.name})
            break
        limit = job_type.concurrency_limit
        assert limit is not None
        try:
            reports.append(admit_type(receiver, job_type.name, limit, sweep=sweep, deadline=deadline))
        except Exception:
            logger.exception("admission pass failed", extra={"job_type": job_type.name})
    return reports


def publish(sink: Any, reports: Sequence[AdmitReport]) -> None:
    """Each type's slots in use, waiting and parked messages, admissions in place, freed slots, and the
    backlog's expected drain time (when the type's durations are known)."""
    for report in reports:
        for name, value in (
            (MetricName.SLOTS_IN_USE, report.slots_in_use),
            (MetricName.WAITING_MESSAGES, report.waiting),
            (MetricName.PARKED_MESSAGES, report.parked),
            (MetricName.ADMITTED_IN_PLACE, report.admitted),
            (MetricName.SLOTS_FREED, report.freed),
        ):
            type_metric(sink, name, "Count", value, report.job_type)
        if report.drain_s is not None:
            type_metric(sink, MetricName.BACKLOG_DRAIN_TIME, "Seconds", report.drain_s, report.job_type)


def unpark(receiver: Receiver, queue_url: str, want: int, *, deadline: float = math.inf) -> int:
    """Receive up to `want` parked messages of a waiting queue and handle each as the receiver does (it
    starts if a slot is free for it, else waits in flight there); those done are deleted. No receive is
    made past `deadline`; what was received is still handled."""
    received = 0
    for _ in range(UNPARK_CALLS):
        if received >= want or receiver.clock.now() >= deadline:
            break
        messages = receiver.sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=min(10, want - received),
            AttributeNames=["ApproximateReceiveCount"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            break
        received += len(messages)
        deliveries = sorted(
            (waiting_delivery(message, queue_url) for message in messages),
            key=lambda d: d.carried.waiting_since or 0.0,
        )
        done: list[str] = []
        for delivery in deliveries:
            try:
                outcome = receive(receiver, delivery)
            except Exception as exc:  # it shows again after the waiting queue's VT
                logger.warning("unparked message failed", extra={"message_id": delivery.message_id, "error": str(exc)})
                continue
            if not outcome.deferred:
                done.append(delivery.receipt_handle)
        _delete(receiver.sqs, queue_url, done)
    return received


def _admitted(receiver: Receiver, waiting: Lease, active: Lease) -> bool:
    """Write the admission (the WAITING lease turned ACTIVE). An error other than a lost condition may
    come after the write took effect (a 5xx, a timeout): the lease is read again, and the admission is
    ours if the table holds exactly the lease we wrote. Raises when that read fails too: the holds stay,
    and the slot sweep frees them once their execution is seen never to have started."""
    try:
        return receiver.store.admit(waiting, active)
    except Exception as exc:
        logger.warning(
            "admission write failed; reading whether it landed",
            extra={"message_id": waiting.message_id, "error": str(exc)},
        )
    stored = receiver.store.get(active.message_id)
    return stored is not None and _same_write(stored, active)


def _same_write(stored: Lease, written: Lease) -> bool:
    """Whether the table holds the lease `written` (it keeps times to the millisecond): the same version,
    execution, handle and status, and the attempt's start time of this very write."""
    return (stored.status, stored.version, stored.execution_arn, stored.receipt_handle) == (
        written.status,
        written.version,
        written.execution_arn,
        written.receipt_handle,
    ) and abs(stored.received_at - written.received_at) < 0.001


def waiting_delivery(message: Mapping[str, Any], queue_url: str) -> Delivery:
    """A message received from a waiting queue, as the receiver takes it."""
    return Delivery(
        message_id=message["MessageId"],
        receipt_handle=message["ReceiptHandle"],
        body=message["Body"],
        receive_count=int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1")),
        source_arn=queue_url,
        message_attributes={
            name: {k: v for k, v in value.items() if k in ("DataType", "StringValue", "BinaryValue")}
            for name, value in message.get("MessageAttributes", {}).items()
        },
        queue_url=queue_url,
    )


def _delete(sqs: SQSClient, queue_url: str, handles: Sequence[str]) -> None:
    for start in range(0, len(handles), 10):
        chunk = handles[start : start + 10]
        try:
            response = sqs.delete_message_batch(
                QueueUrl=queue_url, Entries=[{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(chunk)]
            )
        except Exception as exc:  # they show again; their lease says they were handled (no double effect)
            logger.warning("could not delete handled waiting messages", extra={"error": str(exc)})
            continue
        if response.get("Failed"):
            logger.warning("some handled waiting messages not deleted", extra={"failed": response["Failed"]})


def parked_count(sqs: SQSClient, queue_url: str) -> int:
    """Messages parked in a waiting queue (visible or delayed: not the ones received), as SQS counts them."""
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    return int(attributes.get("ApproximateNumberOfMessages", 0)) + int(
        attributes.get("ApproximateNumberOfMessagesDelayed", 0)
    )


def _view(receiver: Receiver, job_type: str, queue: str | None) -> View:
    now = receiver.clock.now()
    view = receiver.views.get(job_type)
    if not isinstance(view, View) or now - view.read_at > VIEW_TTL_S:
        view = View(
            now, receiver.store.count_waiting(job_type, now=now), parked_count(receiver.sqs, queue) if queue else 0
        )
        receiver.views[job_type] = view
    return view


def sweep_stale(receiver: Receiver, state: TypeSlots) -> tuple[TypeSlots, int]:
    """Free the slots held by executions that no longer run (their release was lost).

    A holder whose lease is ACTIVE and names it is left to reconciliation (which releases the slot with
    the lease). Any other is asked about: not running, and ended (or never started and past the
    receiver's grace, so no start can land any more), its slot is freed, conditional on that holding.
    """
    held = state.held
    if not held:
        return state, 0
    now = receiver.clock.now()
    owners = {lock.key: _message_of(lock) for lock in held}
    leases = receiver.store.get_many([m for m in owners.values() if m])
    freed = 0
    for lock in held:
        lease = leases.get(owners[lock.key] or "")
        if lease is not None and lease.active and lease.execution_arn == lock.execution_arn:
            continue
        try:
            status = execution_status(receiver.stepfunctions, lock.execution_arn)
        except Exception as exc:
            logger.warning("slot holder's status unknown", extra={"slot": lock.key, "error": str(exc)})
            continue
        if status in RUNNING_STATUSES:
            continue
        if status == NEVER_STARTED and now - lock.acquired_at < receiver.settings.reconcile_grace_s:
            continue
        if receiver.store.locks.free(lock, now=now):
            freed += 1
            logger.warning("stale slot freed", extra={"slot": lock.key, "execution": lock.execution_arn})
            state = state.without(lock.key, replace(lock, held=False, released_at=now))
    return state, freed


def _message_of(lock: Lock) -> str | None:
    parsed = parse_execution_name(lock.execution_arn.rpartition(":")[2])
    return parsed[0] if parsed else None
