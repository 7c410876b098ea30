"""Admission passes: free slots go to the WAITING messages in place, longest waiting first (their lease
becomes an attempt's on the receive that holds them), then to parked ones; stale slots are freed."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from longjobs.engine.admission.estimate import drain_time_s, in_flight_target
from longjobs.engine.admission.parking import UNPARK_CALLS, Handle, refresh_parked, unpark
from longjobs.engine.admission.readings import LOOKAHEAD, longest_wait_s, margin_s, parked_count, read_slots
from longjobs.engine.admission.slots import TAKE_ATTEMPTS, TypeSlots, slot_keys
from longjobs.engine.delivery.attempt import (
    lock_hold,
    read_job_lock,
    release_delay_s,
    resume,
    within_retention,
    write_attempt,
)
from longjobs.engine.delivery.decision import LockState
from longjobs.engine.delivery.models import Job
from longjobs.engine.delivery.types import Receiver
from longjobs.engine.execution import (
    NEVER_STARTED,
    RUNNING_STATUSES,
    execution_arn,
    execution_name,
    execution_status,
    parse_execution_name,
)
from longjobs.engine.lease import Lease, job_lock_key
from longjobs.engine.lease.lock import LEASE_KEY, Hold, Lock
from longjobs.engine.observability import MetricName, logger, type_metric
from longjobs.engine.policies import hold_limit


@dataclass
class AdmitReport:
    job_type: str
    slots_in_use: int = 0
    free_slots: int = 0
    waiting: int | None = 0  # in flight (WAITING leases), after the pass; None: not counted (unmeasured)
    parked: int | None = 0  # in the waiting queue (SQS's approximate count), before unparking; None: not read
    admitted: int = 0  # WAITING messages started in place
    unparked: int = 0  # received from the waiting queue
    freed: int = 0  # slots of executions found not running, freed
    resent: int = 0  # parked copies sent again before the waiting queue's retention ran out
    drain_s: float | None = None  # until the last waiting or parked message can be expected to start
    failed: bool = False  # the type's pass raised (logged): nothing measured, the next pass goes on


def admit_in_place(receiver: Receiver, waiting: Lease, state: TypeSlots) -> TypeSlots | None:
    """Start a WAITING message's attempt on the receive that holds it (no new receive): its lease turned
    ACTIVE with its job lock and a slot, in one transaction; then the first chunk and the start. Returns
    the slots with the one it took, or None when it was not admitted."""
    settings = receiver.settings
    now = receiver.clock.now()
    if waiting.job is None or waiting.visible_until - now < margin_s(receiver):
        return None  # about to show again: its redelivery claims a slot itself
    if now - waiting.received_at > longest_wait_s(settings):
        return None  # too little of its receive's 12 h left for a run: its redelivery starts afresh
    job = Job.model_validate_json(waiting.job)
    arn = execution_arn(receiver.state_machine_arn, execution_name(waiting.message_id, waiting.receive_count))
    # The job lock is taken as free without reading it first (it nearly always is); only a take that
    # finds it held reads it, to take over a holding whose execution is not running. A type whose runs
    # can outlive their execution takes it only where it does not exist yet (a new job id): a free lock
    # is read first, since its last execution's run may still go on (`longjobs.engine.runs`).
    job_lock: LockState = LockState.FREE
    lock: Lock | None = None
    lock_key = job_lock_key(job.job_id)
    fresh = job.type in receiver.runs.places
    active = Lease(
        message_id=waiting.message_id,
        queue_url=waiting.queue_url,
        receipt_handle=waiting.receipt_handle,
        receive_count=waiting.receive_count,
        received_at=now,  # when the attempt began: reconciliation's grace counts from it
        visible_until=now + receiver.policy.initial_timeout_s(),
        renew_until=min(now + settings.renewal_s, hold_limit(waiting.received_at, settings.cap_safety_s)),
        version=waiting.version + 1,
        execution_arn=arn,
        attempt=waiting.receive_count,
        job_type=waiting.job_type,
        job_id=job.job_id,
        release_delay_s=release_delay_s(len(waiting.history) + 1, settings, receiver.rng),
        history=waiting.history,
        waits=waiting.waits,
        refused_starts=waiting.refused_starts,
    )
    active = replace(
        active,
        renew_at=receiver.policy.renew_at(active),
        release_delay_s=within_retention(active, waiting.sent_at, settings),  # None from an older version
    )
    for _ in range(TAKE_ATTEMPTS):
        slot = state.pick(receiver.rng)
        if slot is None:
            return None
        active = replace(active, slot=slot.key)
        # One transaction: the WAITING lease turned ACTIVE (if unchanged), the job lock and the slot. A
        # losing admitter (another admitter, or a redelivery) takes nothing and frees nothing.
        # unread: a type whose runs outlive their execution takes it only absent (or its own); else free too
        job_hold = lock_hold(lock_key, job_lock, lock) if lock is not None or fresh else Hold(lock_key)
        holds = [job_hold, slot]
        taken = write_attempt(receiver, active, receiver.store.admit_request(waiting, active), holds)
        if taken.written:
            break
        if LEASE_KEY in taken.lost or not taken.lost & {lock_key, slot.key}:
            return None  # another writer admitted or adopted it first (or a conflict: the next pass)
        if lock_key in taken.lost:
            if lock is not None:
                return None  # the holding read and taken over was taken by another meanwhile
            job_lock, lock = read_job_lock(receiver, job.job_id, job.type, waiting.message_id, arn)
            if job_lock is not LockState.STALE and not (fresh and job_lock is LockState.FREE):
                return None  # another message of the job runs (or may), or its last run is ending: it waits on
        if slot.key in taken.lost:
            state = state.without(slot.key, Lock(slot.key, "", "", now, held=True))  # another took it meanwhile
    else:
        return None
    waited = now - (waiting.waiting_since or now)
    type_metric(receiver.metrics, MetricName.ADMISSION_DELAY, "Seconds", waited, waiting.job_type or "")
    logger.info("admitted in place", extra={"message_id": waiting.message_id, "waited_s": round(waited, 1)})
    resume(receiver, job, active, new=True)
    return state.without(slot.key, Lock(slot.key, waiting.message_id, arn, now, held=True))


def admit_line(
    receiver: Receiver,
    job_type: str,
    state: TypeSlots,
    *,
    behind: tuple[float, str] | None = None,
    deadline: float = math.inf,
) -> tuple[TypeSlots, int]:
    """Give the free slots to the type's line of WAITING messages, longest waiting first (ahead of
    `behind`, a place in line and its message, when given): each is admitted in place, except one of the
    jobs queue about to show again or shown again within the receiver's timeout, which its own
    redelivery admits: its slot is kept from those behind it (counted held in the reading returned), so
    it keeps its place. Nothing new is begun past `deadline`. Returns the slots as they are left and how
    many were admitted."""
    now = receiver.clock.now()
    shown_since = now - receiver.settings.receiver_timeout_s  # the event source mapping redelivers it by then
    admitted = 0
    for waiting in receiver.store.index.waiting(job_type, len(state.free_keys) + LOOKAHEAD, hidden_after=shown_since):
        if not state.free_keys or receiver.clock.now() >= deadline:
            break
        if behind is not None and (waiting.message_id == behind[1] or (waiting.waiting_order or 0.0) >= behind[0]):
            continue
        if waiting.visible_until - receiver.clock.now() < margin_s(receiver):
            if waiting.queue_url == receiver.queue_url:
                state = state.reserved_for(waiting.message_id, now)
            continue  # a copy in its waiting queue comes back through unparking, in its turn
        taken = admit_in_place(receiver, waiting, state)
        if taken is not None:
            state, admitted = taken, admitted + 1
    return state, admitted


def admit_type(
    receiver: Receiver,
    job_type: str,
    limit: int,
    *,
    handle: Handle,
    sweep: bool = False,
    measure: bool = True,
    deadline: float = math.inf,
    freed: Hold | None = None,
) -> AdmitReport:
    """One admission pass of a type: free stale slots (`sweep`), admit the WAITING messages in place into
    the free slots (longest waiting first), then unpark what the horizon can take, then send again the
    parked copies near the waiting queue's retention. Nothing new is begun past `deadline` (what was
    begun is finished): the rest waits for the next pass. Without `measure` (a pass whose report is not
    published: the watcher's, after an end) nothing is counted: the slots left free after the line in
    flight are offered to the parked messages, received directly (asking the waiting queue's depth first
    costs the same request), and the line in flight is left to the extender's pass to top up;
    `waiting`, `parked` and `drain_s` are None. `freed`: the one slot an end freed, as the watcher's event
    tells it: the slots are then not read (`TypeSlots.freed`)."""
    report = AdmitReport(job_type)
    settings = receiver.settings
    now = receiver.clock.now()
    if freed is not None and freed.key in slot_keys(job_type, limit):
        state = TypeSlots.freed(job_type, limit, freed, now)
        receiver.state.full_slots.pop(job_type, None)  # a slot is free now: a copy unparked into it must not wait
    else:
        state = read_slots(receiver, job_type, limit)
    if sweep:
        state, report.freed = sweep_stale(receiver, state)
        if report.freed:
            receiver.state.full_slots.pop(job_type, None)  # a slot is free now: an unparked message claims it
    if state.free_keys:
        state, report.admitted = admit_line(receiver, job_type, state, deadline=deadline)
    queue = settings.waiting_queue_urls.get(job_type)
    if not measure:
        # What an end freed went to the line in flight; what is still free goes to the parked messages
        # (received directly: asking the depth first costs the same request). The extender's pass keeps
        # the line in flight filled to the horizon.
        if queue is not None:
            if state.free_keys and receiver.clock.now() < deadline:
                report.unparked = unpark(receiver, queue, len(state.free_keys), handle=handle, deadline=deadline)
                receiver.state.views.pop(job_type, None)
            report.resent = refresh_parked(receiver, job_type, deadline=deadline)
        report.waiting = report.parked = None
        report.slots_in_use, report.free_slots = state.used, len(state.free_keys)  # before unparking
        return report
    in_flight = receiver.store.index.count_waiting(job_type, now=now)
    if queue is not None:
        report.parked = parked_count(receiver.sqs, queue)
        want = in_flight_target(state, receiver.clock.now(), settings.admission_horizon_s) - in_flight
        if report.parked and want > 0 and receiver.clock.now() < deadline:
            report.unparked = unpark(receiver, queue, want, handle=handle, deadline=deadline)
            receiver.state.views.pop(job_type, None)
            in_flight = receiver.store.index.count_waiting(job_type, now=receiver.clock.now())
            state = read_slots(receiver, job_type, limit)
        report.resent = refresh_parked(receiver, job_type, deadline=deadline)
    report.waiting = in_flight
    report.slots_in_use = state.used
    report.free_slots = len(state.free_keys)
    report.drain_s = drain_time_s(state, receiver.clock.now(), in_flight + (report.parked or 0) - report.unparked)
    return report


def admit_all(
    receiver: Receiver,
    *,
    handle: Handle,
    sweep: bool = False,
    measure: bool = True,
    only: str | None = None,
    deadline: float = math.inf,
    freed: Hold | None = None,
) -> list[AdmitReport]:
    """`admit_type` for every limited type of the catalog (or the one named `only`, with the slot `freed`
    if known), none begun past `deadline`; a type whose pass fails is logged and reported `failed`, and
    the others go on."""
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
            reports.append(
                admit_type(
                    receiver,
                    job_type.name,
                    limit,
                    handle=handle,
                    sweep=sweep,
                    measure=measure,
                    deadline=deadline,
                    freed=freed if job_type.name == only else None,
                )
            )
        except Exception:
            logger.exception("admission pass failed", extra={"job_type": job_type.name})
            reports.append(AdmitReport(job_type.name, waiting=None, parked=None, failed=True))
    return reports


UNLIMITED_POLL_S = 900.0
"""How long after finding it empty the extender looks again in the waiting queue of a type without a limit
(`unpark_unlimited`): only a deploy that removed the type's limit leaves messages there, so a look costs one
request, and what it left starts within this much of its turn."""


def unpark_unlimited(receiver: Receiver, *, handle: Handle, deadline: float = math.inf) -> int:
    """The waiting queue of each type without a limit: what a deploy that removed the type's limit left in
    it (parked copies, and copies that waited in flight there) is received and handled as the receiver
    handles any message of the type, so it starts; its parked line is kept inside the queue's retention
    meanwhile (`refresh_parked`). A queue found empty is looked in again `UNLIMITED_POLL_S` later (per
    container); a type whose pass fails is logged and the others go on. How many copies were received."""
    received = 0
    state = receiver.state
    for job_type, queue in sorted(receiver.settings.waiting_queue_urls.items()):
        now = receiver.clock.now()
        if receiver.catalog.limit(job_type) is not None or now < state.next_unpark.get(job_type, -math.inf):
            continue
        if now >= deadline:
            break
        try:
            got = unpark(receiver, queue, UNPARK_CALLS * 10, handle=handle, deadline=deadline)
            refresh_parked(receiver, job_type, deadline=deadline)
        except Exception:
            logger.exception("waiting queue of a type without a limit not emptied", extra={"job_type": job_type})
            continue
        if got:
            logger.info("unparked messages of a type without a limit", extra={"job_type": job_type, "count": got})
        else:
            state.next_unpark[job_type] = now + UNLIMITED_POLL_S
        received += got
    return received


def extender_pass(receiver: Receiver, *, handle: Handle) -> Callable[[float], list[AdmitReport]]:
    """The extender's admission pass (`Extender.admit`): every limited type, stale slots swept, measured
    (its reports are published), then the waiting queues of the types without one (`unpark_unlimited`);
    nothing begun past the deadline it is given."""

    def admit(deadline: float) -> list[AdmitReport]:
        reports = admit_all(receiver, handle=handle, sweep=True, deadline=deadline)
        unpark_unlimited(receiver, handle=handle, deadline=deadline)
        return reports

    return admit


def watcher_pass(receiver: Receiver, *, handle: Handle) -> Callable[[str, Hold | None], list[AdmitReport]]:
    """The watcher's admission pass after an execution's end (`Watcher.admit`): the ended execution's type
    only, unmeasured (its report is not published), into the slot the end freed when the event names it."""

    def admit(job_type: str, freed: Hold | None = None) -> list[AdmitReport]:
        return admit_all(receiver, handle=handle, only=job_type, measure=False, freed=freed)

    return admit


def publish(sink: Any, reports: Sequence[AdmitReport]) -> None:
    """Each type's slots in use, waiting and parked messages, admissions in place, freed slots, and the
    backlog's expected drain time (when the type's durations are known); nothing of a pass that failed."""
    for report in reports:
        if report.failed:
            continue
        for name, value in (
            (MetricName.SLOTS_IN_USE, report.slots_in_use),
            (MetricName.WAITING_MESSAGES, report.waiting),
            (MetricName.PARKED_MESSAGES, report.parked),
            (MetricName.ADMITTED_IN_PLACE, report.admitted),
            (MetricName.SLOTS_FREED, report.freed),
            (MetricName.PARKED_COPIES_RESENT, report.resent),
        ):
            if value is not None:
                type_metric(sink, name, "Count", value, report.job_type)
        if report.drain_s is not None:
            type_metric(sink, MetricName.BACKLOG_DRAIN_TIME, "Seconds", report.drain_s, report.job_type)


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
