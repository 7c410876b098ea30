"""The AWS effects of the receiver's actions on one attempt (`longjobs.engine.delivery.decision` decides
which): take the lease with its holds, hide the message, start or resume the execution, hold it in place
for its job id, or send the message to the DLQ (a copy sent back to wait for its job id is `copies`'s).
Admission's in-place start (`longjobs.engine.admission.admit`) uses the same steps.

Holds that are taken together are taken in one DynamoDB transaction with the lease's write
(`LeaseStore.take_holds`), conditional on the lease's version and on each lock and slot being free,
already this attempt's, or the very holding of an execution found not running: the loser of a race
holds nothing and releases nothing, and every release is conditional on the execution that holds.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

from longjobs.engine.delivery.decision import LockState, lock_state
from longjobs.engine.delivery.dlq import EXHAUSTED
from longjobs.engine.delivery.dlq_claim import kept_s, send_claimed
from longjobs.engine.delivery.models import Job
from longjobs.engine.delivery.types import (
    Delivery,
    Outcome,
    Receiver,
)
from longjobs.engine.execution import (
    JOB_STEP_ERRORS,
    NEVER_STARTED,
    RUNNING_STATUSES,
    ExecutionInput,
    ExecutionTimes,
    StartRefused,
    execution_status,
    execution_times,
    parse_execution_name,
    refused_outright,
    start_execution,
    start_or_refused,
)
from longjobs.engine.lease import Lease, LeaseStatus, Lock, job_lock_key, successor_version
from longjobs.engine.lease.lock import LEASE_KEY, Hold, HoldsTaken
from longjobs.engine.lease.types import Attempt, LastError
from longjobs.engine.observability import logger
from longjobs.engine.settings import SQS_MAX_VISIBILITY_S, Settings
from longjobs.engine.settle import reassert_release, release, release_holds, settle_ended
from longjobs.engine.visibility import FailureClass, VisibilityChange


def release_delay_s(attempt: int, settings: Settings, rng: random.Random) -> int:
    """Delay before a failed attempt's message returns: doubles per attempt up to the cap, with "equal
    jitter" (half fixed, half random) so it still grows with the count while spreading retries out. The
    last attempt's message returns at once: its next receive sends it to the DLQ. On a FIFO queue the
    delay holds the message's whole group, so it is fixed (`fifo_release_delay_s`)."""
    if attempt >= settings.max_attempts:
        return 0
    if settings.fifo:
        return settings.fifo_release_delay_s
    ceiling = min(float(settings.release_delay_cap_s), settings.release_delay_base_s * 2.0 ** min(attempt - 1, 64))
    return min(SQS_MAX_VISIBILITY_S, round(rng.uniform(ceiling / 2, ceiling)))


RELEASE_SLACK_S = 60
"""How long before SQS deletes a message its release shows it again at the latest: time for the receive
that then sends it afresh, or to the DLQ with the reason (`RetentionRunningOut`)."""


def within_retention(lease: Lease, sent_at: float | None, settings: Settings) -> int:
    """A new attempt's release delay, shortened so that an attempt failing as its hold ends (`renew_until`)
    gives its message, sent at `sent_at`, back `RELEASE_SLACK_S` before SQS deletes it. A hold is kept within
    the retention (the retention margin, `hold_fits`); the delay after it must be too, else the message is
    deleted unseen. Both ways an attempt begins cut it: a receive's (`begin`), an admission in place's."""
    if sent_at is None:
        return lease.release_delay_s
    room = sent_at + settings.queue_retention_s - lease.renew_until - RELEASE_SLACK_S
    return max(0, min(lease.release_delay_s, math.floor(room)))


def wait_delay_s(waits: int, settings: Settings, rng: random.Random) -> int:
    """Delay of a message's copy that waits for its job id: doubles per wait up to the cap, equal jitter."""
    ceiling = min(float(settings.job_wait_cap_s), settings.job_wait_base_s * 2.0 ** min(waits, 64))
    return round(rng.uniform(ceiling / 2, ceiling))


START_REFUSED = "start refused"
"""The last error of a lease whose execution Step Functions refused to start (and does not have)."""
START_REFUSED_EVERY_ATTEMPT = "start refused on every attempt"
"""The last error of a lease whose start Step Functions answered with a client error on every attempt
(`StartRefused`): none was processed, so no execution of it exists or can appear later, and the next
receive need not ask about it."""


def start_denied(lease: Lease | None) -> bool:
    """Whether `lease` closed with every attempt of its start refused (`START_REFUSED_EVERY_ATTEMPT`)."""
    return (
        lease is not None
        and lease.never_started
        and lease.last_error is not None
        and lease.last_error.error == START_REFUSED_EVERY_ATTEMPT
    )


def refused_start_delay_s(refused: int, settings: Settings, rng: random.Random) -> int:
    """How long a message whose start was refused stays hidden before its next receive, in whole seconds:
    full jitter over 2^(`refused` - 1) seconds, `refused` being the starts refused before this one, and at
    most one extender period. So the first two refusals give the message back at once. AWS's advice for
    throttled calls is exponential backoff with jitter, and a quota's refusal passes within seconds
    (StartExecution's token bucket refills every second)."""
    ceiling = min(float(settings.extender_period_s), 2.0 ** (min(refused, 16) - 1))
    return int(rng.uniform(0, ceiling))


def timing(receiver: Receiver, delivery: Delivery, base: Lease, *, adopted: bool = False) -> Lease:
    """A lease for this receive: the policy's first chunk from now, renewal due when the policy says.
    `adopted`: the receive takes over an attempt under way (a duplicate, a lapse, a closed lease whose
    execution runs), which keeps its hard stop, and falls due by it: a redelivery now and then never lets
    a job run past the `renew_until` of the receive that began its attempt."""
    now = receiver.clock.now()
    renew_until = now + receiver.settings.renewal_s
    timing = replace(
        base,
        receipt_handle=delivery.receipt_handle,
        receive_count=delivery.receive_count,
        received_at=now,
        visible_until=now + receiver.policy.initial_timeout_s(),
        renew_until=min(renew_until, base.renew_until) if adopted else renew_until,
        renewed_at=None,
    )
    renew_at = receiver.policy.renew_at(timing)
    return replace(timing, renew_at=min(renew_at, timing.renew_until) if adopted else renew_at)


def begin(
    receiver: Receiver,
    delivery: Delivery,
    job: Job,
    *,
    arn: str,
    replacing: Lease | None,
    history: tuple[Attempt, ...],
    refused_starts: int,
    job_lock: Hold,
    slot: Hold | None,
) -> Lease | None:
    """Begin a new attempt of the execution `arn`. Its lease, timed from now, is written with its job lock
    (and a limited type's slot) in one transaction. None when a condition failed (another writer, a taker
    of the lock or the slot): the receive reads again."""
    blank = Lease(
        message_id=delivery.message_id,
        queue_url=receiver.queue_of(delivery),
        receipt_handle=delivery.receipt_handle,
        receive_count=delivery.receive_count,
        received_at=0.0,
        visible_until=0.0,
        renew_until=0.0,
        version=successor_version(replacing),
        execution_arn=arn,
        attempt=delivery.receive_count,
        job_type=job.type,
        job_id=job.job_id,
        release_delay_s=release_delay_s(len(history) + 1, receiver.settings, receiver.rng),
        slot=slot.key if slot is not None else None,
        history=history,
        refused_starts=refused_starts,
        group_id=delivery.group_id,
    )
    lease = timing(receiver, delivery, blank)
    lease = replace(lease, release_delay_s=within_retention(lease, delivery.sent_at, receiver.settings))
    action = receiver.store.create_request(lease, replacing=replacing)
    taken = write_attempt(receiver, lease, action, [job_lock, *([slot] if slot is not None else [])])
    return lease if taken.written else None


def attempt_of(lease: Lease) -> int:
    if lease.attempt:
        return lease.attempt
    parsed = parse_execution_name((lease.execution_arn or "").rpartition(":")[2])
    return parsed[1] if parsed else lease.receive_count


def closed_record(
    receiver: Receiver, delivery: Delivery, status: LeaseStatus, *, kept_s: float = 0, **fields: Any
) -> Lease:
    """The closed lease of this receive that records where the message went (the DLQ, a waiting queue),
    closed now; `kept_s` extends its TTL past now (while a copy of the message may still exist). On FIFO
    it names the message's group, as an attempt's lease does (`longjobs lease` shows it)."""
    now = receiver.clock.now()
    fields.setdefault("group_id", delivery.group_id)
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
    in_place: bool = False,
    job: Job | None = None,
) -> Outcome | None:
    """Send the message to the DLQ with its attempts' history, its send claimed first on its record
    (`longjobs.engine.delivery.dlq_claim`): the record is written DEAD_LETTERING in this receive's name,
    conditional on the lease as read, then the message is sent, then its copy is noted (REJECTED). None
    when the lease changed meanwhile (read again: another receive may be beginning an attempt, or sending
    it).
    Raises when a write or the send fails: the record is reported failed, nothing is deleted.
    `in_place`: the record replaces a lease of this very receive (its receive count), fenced by its
    version alone.

    The record keeps the job's type and id, from the lease it replaces or `job` (`longjobs lease` and
    `longjobs cancel JOB_ID` find the job's message there); it names no execution, so nothing releases a
    hold by it.

    The message leaves for good, so what its last attempt may still hold is freed first, conditional on
    that attempt's execution (the decision reads it not running): a lease closed by a writer that crashed
    before its own release leaves its job lock held, and no later message of the job id may come to take
    it over."""
    if replacing is not None and replacing.execution_arn and not replacing.active:
        release_holds(replacing, store=receiver.store, clock=receiver.clock)
    last = message or (str(history[-1].error) if history and history[-1].error else None)
    record = closed_record(
        receiver,
        delivery,
        LeaseStatus.DEAD_LETTERING,
        kept_s=kept_s(receiver.settings, delivery.sent_at, now=receiver.clock.now()),
        version=successor_version(replacing),
        job_type=(replacing.job_type if replacing is not None else None) or (job.type if job is not None else None),
        job_id=(replacing.job_id if replacing is not None else None) or (job.job_id if job is not None else None),
        last_error=LastError(error_type, last),
        history=history,
        claimed_by=delivery.claimant(receiver.rng),
        claimed_at=receiver.clock.now(),
    )
    if in_place:
        written = receiver.store.markers.replace_in_place(record, replacing=replacing)
    else:
        written = receiver.store.create(record, replacing=replacing)
    if not written:
        return None
    return send_claimed(receiver, delivery, record)


def resume(receiver: Receiver, job: Job | None, lease: Lease, *, new: bool) -> Outcome:
    """Hide the message for the first chunk, then make sure the attempt's execution exists.

    `new`: the lease was just created for a new attempt, so its execution cannot exist yet. `job` is None
    for a body this receiver refuses: its attempt's execution is adopted or settled, never started.
    """
    outcome = receiver.visibility.change(
        VisibilityChange(lease.message_id, lease.queue_url, lease.receipt_handle, receiver.policy.initial_timeout_s())
    )
    if outcome.failure is FailureClass.LOST:
        # SQS handed the message out again (or it is gone): a newer receive holds it and adopts the lease.
        # A new attempt's execution was never started: no attempt is spent (a refused start, counted apart).
        if new:
            receiver.store.close(  # its holds with it
                lease,
                LeaseStatus.LOST,
                now=receiver.clock.now(),
                error=LastError("first visibility change", outcome.error),
                never_started=True,
            )
        return Outcome.STALE
    hidden = outcome.ok
    if not hidden:
        logger.warning(
            "first visibility change failed; the lease is due at once", extra={"message_id": lease.message_id}
        )
        lease = receiver.store.mark_due_now(lease, receiver.clock.now()) or lease
    elif not new and released_meanwhile(receiver, lease):
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
    if job is None:
        # A refused body: the decision read its execution there (running or ended), so none starts here
        # on it; were it missing now, the lease stays for reconciliation to release unstarted.
        logger.warning("no execution to adopt for a refused body", extra={"message_id": lease.message_id})
        return Outcome.NOT_STARTED
    if not new and (lease.job_id or lease.slot) and lease.execution_arn:
        # Resuming an attempt that never started: its lock or slot may have been taken over meanwhile.
        refused = retake_holds(receiver, lease)
        if isinstance(refused, Outcome):
            return refused
        if refused is not None:
            release(
                lease,
                store=receiver.store,
                visibility=receiver.visibility,
                clock=receiver.clock,
                reason=LastError(refused),
                delay_s=wait_delay_s(0, receiver.settings, receiver.rng),
                never_started=True,
            )
            return Outcome.SETTLED
    return start(receiver, job, lease)


def _waiting(holder: Lock) -> str:
    return f"waiting: its job id is held by {holder.execution_arn.rpartition(':')[2]}"


def aged(receiver: Receiver, delivery: Delivery) -> bool:
    """Whether a message is at or past its `resend_at`: its queue's retention is running out."""
    sent_at = delivery.sent_at
    return sent_at is not None and receiver.clock.now() >= sent_at + receiver.settings.resend_after_s


def hold_spent(receiver: Receiver, delivery: Delivery) -> bool:
    """Whether a message may no longer wait for its job id in place: its retention's margin is reached
    (`aged`), or one more wait could take it past the queue's redrive count (`Settings.redrive_receives`:
    each wait in place is a receive); it then goes to the DLQ with a reason instead."""
    if aged(receiver, delivery):
        return True
    settings = receiver.settings
    return delivery.receive_count >= settings.redrive_receives - 1


def hold_for_job(receiver: Receiver, delivery: Delivery, job: Job, holder: Lock) -> None:
    """The message waits for its job id in place (FIFO: holding its group; a message whose attributes
    leave no room for a requeued copy's). It is hidden for the wait delay (doubling with its receives:
    SQS counts each wait as one) and reported not done; the FIFO batch processor then leaves the rest of
    its group in this batch alone. A visibility change that fails leaves the message hidden for the
    queue's VT, which is a wait too. A lock whose run is ending (`LockState.RUN_ENDING`: freed, or held by
    an execution that ended) waits no longer than that run's end, when its runner tells it (the offline
    worker's heartbeat timeout)."""
    delay = wait_delay_s(max(0, delivery.receive_count - 1), receiver.settings, receiver.rng)
    ended_by = None if holder.held else receiver.runs.ended_by(job.type, holder.released_at)
    if ended_by is not None:
        delay = min(delay, max(1, math.ceil(ended_by - receiver.clock.now())))
    outcome = receiver.visibility.change(
        VisibilityChange(delivery.message_id, receiver.queue_of(delivery), delivery.receipt_handle, delay)
    )
    logger.info(
        "job id is running: the message waits in place"
        if holder.held
        else "its job id's last run is ending: the message waits in place",
        extra={
            "message_id": delivery.message_id,
            "job_id": job.job_id,
            "holder": holder.execution_arn.rpartition(":")[2],
            "delay_s": delay,
            "error": outcome.error,
        },
    )


def released_meanwhile(receiver: Receiver, adopted: Lease) -> bool:
    """After hiding an adopted message: if the workflow released it meanwhile, our change may have
    landed after the release's and hidden it again, so the release is applied once more."""
    fresh = receiver.store.get(adopted.message_id)
    if fresh is None or fresh.status is not LeaseStatus.RELEASED or fresh.receipt_handle != adopted.receipt_handle:
        return False
    reassert_release(fresh, visibility=receiver.visibility, clock=receiver.clock)
    return True


def start(receiver: Receiver, job: Job, lease: Lease) -> Outcome:
    payload = ExecutionInput(
        message_id=lease.message_id,
        attempt=attempt_of(lease),
        queue_url=lease.queue_url,
        release_delay_s=lease.release_delay_s,
        job=job.model_dump(mode="json"),
        slot=lease.slot,
    )
    try:
        if receiver.starts is None:
            start_execution(receiver.stepfunctions, receiver.state_machine_arn, payload)
        else:
            start_or_refused(
                receiver.starts, receiver.state_machine_arn, payload, clock=receiver.clock, rng=receiver.rng
            )
    except Exception as exc:
        status = failed_start_status(receiver, lease, exc)
        if status is None:
            logger.error(
                "start unanswered and its execution not found: the lease stays for a redelivery or reconciliation",
                extra={"message_id": lease.message_id, "error": str(exc)},
            )
            return Outcome.NOT_STARTED
        if status != NEVER_STARTED:
            logger.warning("start answered with an error but the execution exists", extra={"error": str(exc)})
            return Outcome.STARTED
        # Refused, so the execution does not exist: the message goes back now, after a short backoff,
        # not at the next reconciliation.
        delay = refused_start_delay_s(lease.refused_starts, receiver.settings, receiver.rng)
        release(
            lease,
            store=receiver.store,
            visibility=receiver.visibility,
            clock=receiver.clock,
            reason=LastError(START_REFUSED_EVERY_ATTEMPT if isinstance(exc, StartRefused) else START_REFUSED, str(exc)),
            delay_s=delay,
            never_started=True,
        )
        logger.warning(
            "execution not started: its message returns after a backoff",
            extra={"message_id": lease.message_id, "delay_s": delay, "error": str(exc)},
        )
        return Outcome.NOT_STARTED
    return Outcome.STARTED


def failed_start_status(receiver: Receiver, lease: Lease, exc: Exception) -> str | None:
    """What a start that raised `exc` left: NEVER_STARTED when Step Functions refused it unprocessed (every
    attempt refused, `StartRefused`), the execution's status when DescribeExecution finds it, else None.

    Any other error may come after the start landed (a 5xx, a timeout). An execution not found then may
    still exist: DescribeExecution is eventually consistent ("The results are best effort and may not
    reflect very recent updates and changes",
    https://docs.aws.amazon.com/step-functions/latest/apireference/API_DescribeExecution.html), and the
    execution may already have passed its start check. So that reading, like one that fails, tells nothing:
    the lease stays, for a redelivery or reconciliation to read the execution again much later."""
    if isinstance(exc, StartRefused) or (receiver.starts is None and refused_outright(exc, receiver.stepfunctions)):
        return NEVER_STARTED
    try:
        status = execution_status(receiver.stepfunctions, lease.execution_arn)
    except Exception:
        return None
    return None if status == NEVER_STARTED else status


def adopt_same_count(receiver: Receiver, delivery: Delivery, job: Job | None, lease: Lease) -> Outcome | None:
    """Adopt a receive with the lease's own count but another handle: hide the message with the new
    handle first (SQS refuses a handle that is not the latest), then record it on the lease."""
    proof = receiver.visibility.change(
        VisibilityChange(
            lease.message_id, lease.queue_url, delivery.receipt_handle, receiver.policy.initial_timeout_s()
        )
    )
    if not proof.ok:
        return Outcome.STALE  # not the latest receive (or not provable now): the lease stays as it is
    adopted = receiver.store.refresh_handle(lease, timing(receiver, delivery, lease, adopted=True))
    return None if adopted is None else resume(receiver, job, adopted, new=False)


class _Unread:
    """The job lock was not read yet (None means read and absent)."""


UNREAD = _Unread()


def free_holds_left(receiver: Receiver, lease: Lease, job_lock: Lock | None) -> None:
    """A redelivery of a job that SUCCEEDED frees what its execution still holds (its job lock, its slot),
    which only happens when the workflow's releases failed past their retries: the watcher and
    reconciliation settle only unsuccessful ends, so nothing else would free that lock until another
    message of the job id took it over. The lock read with the lease says whether it is still held by that
    execution, so a redelivery costs no request otherwise; each release is conditional on the holding."""
    if job_lock is not None and job_lock.held and job_lock.execution_arn == lease.execution_arn:
        release_holds(lease, store=receiver.store, clock=receiver.clock)


def note_succeeded(receiver: Receiver, lease: Lease) -> None:
    """A lease closed (capped, lost) before its execution succeeded becomes SUCCEEDED, as the workflow would
    have closed it: what `longjobs lease` shows, and a later duplicate of the message is acknowledged
    without asking Step Functions. Best effort (the message is acknowledged either way); conditional on
    the lease as read."""
    note = LastError(f"closed {lease.status.value} before its execution succeeded", str(lease.last_error or ""))
    try:
        receiver.store.amend(lease, status=LeaseStatus.SUCCEEDED, error=note)
    except Exception as exc:
        logger.warning("could not note a late success", extra={"message_id": lease.message_id, "error": str(exc)})


def read_job_lock(
    receiver: Receiver,
    job_id: str,
    job_type: str,
    message_id: str,
    arn: str,
    *,
    read: Lock | _Unread | None = UNREAD,
    holder: Lease | None = None,
) -> tuple[LockState, Lock | None]:
    """The job id's lock as the attempt `arn` of `message_id` finds it (`read`: as already read with the
    lease, else read now), and the lock as read. Step Functions is asked about the lock's execution when
    it holds the lock, or when the type's runner finds runs by their execution (EMR Serverless, Glue); an
    unknown answer counts as running (waiting is safe, running twice is not). A lock another execution
    held, free now or stale, is held still while that execution's job run has not ended
    (`longjobs.engine.runs`): a run outlives its stopped execution. Such a stale holding comes back as
    freed at its execution's end, which is when its run began to end: the wait for that run
    (`hold_for_job`) reads its end from there, as from a freed lock's release. `holder`, the lease read
    with the lock (this message's), may show that the offline worker's run ended before its task did
    (`worker_reported_end`): there is then nothing to wait for."""
    lock = receiver.store.locks.get(job_lock_key(job_id)) if isinstance(read, _Unread) else read
    if lock is None or free_as_read(lock, arn):
        return LockState.FREE, lock
    place = receiver.runs.places.get(job_type)
    state = LockState.FREE
    times: ExecutionTimes | None = None
    if lock.held or (place is not None and place.runner != "worker"):
        # The holder's status; and, for a runner asked by name, when its execution started: the lock's own
        # `acquired_at` is rewritten when the holder takes it again (a redelivery that adopts it).
        try:
            times = execution_times(receiver.stepfunctions, lock.execution_arn)
        except Exception as exc:
            logger.warning("job lock holder's status unknown", extra={"job_id": job_id, "error": str(exc)})
        if lock.held:
            state = lock_state(
                lock,
                times.status if times is not None else None,
                message_id=message_id,
                now=receiver.clock.now(),
                grace_s=receiver.settings.reconcile_grace_s,
            )
            if state is not LockState.STALE:
                return state, lock
    if place is None or (times is not None and times.status == NEVER_STARTED):
        return state, lock  # no run to wait for
    if place.runner != "worker" and times is None:
        return LockState.RUN_ENDING, lock  # its execution cannot be asked about: waiting is safe
    since, ended_at = lock.acquired_at, lock.released_at
    if times is not None:  # the execution's own times: a lock taken again keeps neither
        since = times.started_at if times.started_at is not None else since
        ended_at = ended_at if not lock.held else times.stopped_at
    if place.runner == "worker" and worker_reported_end(holder, lock):
        return state, lock
    if receiver.runs.running(job_type, lock.execution_arn, since=since, ended_at=ended_at, now=receiver.clock.now()):
        return LockState.RUN_ENDING, replace(lock, held=False, released_at=ended_at) if lock.held else lock
    return state, lock


def worker_reported_end(holder: Lease | None, lock: Lock) -> bool:
    """Whether the offline worker reported that the run of the lock's execution ended: that execution's
    own workflow closed `holder` RELEASED (`workflow_closed_at`, no `closed_at`) with the task failure the
    worker sent. The worker sends it only once the run's Spark jobs have ended (`longjobs.offline.worker`).

    Its error is the job's exception class, a Python name. The job step's own errors (`JOB_STEP_ERRORS`:
    a heartbeat timeout is `JobTimedOut`) and Step Functions' or a service's (`States.Timeout`,
    `SQS.<exception>`) are not: those tasks ended without the worker, whose run may go on. So may a run
    whose execution was stopped or timed out: the processor, not the workflow, closes its lease. Any other
    lease, or another execution's, counts as a run that may go on: waiting is safe."""
    if holder is None or holder.execution_arn != lock.execution_arn or holder.status is not LeaseStatus.RELEASED:
        return False
    if holder.workflow_closed_at is None or holder.closed_at is not None or holder.last_error is None:
        return False
    error = holder.last_error.error
    return error.isidentifier() and error not in JOB_STEP_ERRORS


def free_as_read(lock: Lock | None, arn: str) -> bool:
    """The job lock is free for the attempt `arn` as read, with no call: absent, never held by an
    execution, or held by that attempt's own."""
    return lock is None or lock.execution_arn == arn or not lock.execution_arn


def lock_hold(key: str, state: LockState, lock: Lock | None) -> Hold:
    """The job lock's part of an attempt's holds, taken as it was read: absent (`fresh`), or that very lock,
    free or a stale holding (taken over). A lock that changed since (another message of the job took it,
    ran and freed it) fails the take, and is read again: its run is asked about then."""
    if lock is None:
        return Hold(key, fresh=True)
    return Hold(key, over=lock if state in (LockState.STALE, LockState.FREE) else None)


def write_attempt(receiver: Receiver, lease: Lease, action: dict[str, Any], holds: list[Hold]) -> HoldsTaken:
    """Write an attempt's lease with its holds in one transaction (`LeaseStore.take_holds`). An error
    other than a lost race may come after the write took effect (a 5xx, a timeout): the lease is read
    again, and the write is ours if the table holds exactly the lease written. Raises when that read
    fails too: whatever was taken stays, and is freed once its execution is seen never to have started."""
    try:
        return receiver.store.take_holds(lease, action, holds, now=receiver.clock.now())
    except Exception as exc:
        logger.warning(
            "lease write failed; reading whether it landed", extra={"message_id": lease.message_id, "error": str(exc)}
        )
    stored = receiver.store.get(lease.message_id)
    written = stored is not None and same_write(stored, lease)
    return HoldsTaken(written=written, lost=frozenset() if written else frozenset({LEASE_KEY}))


def same_write(stored: Lease, written: Lease) -> bool:
    """Whether the table holds the lease `written` (it keeps times to the millisecond): the same version,
    execution, handle and status, and the attempt's start time of this very write."""
    return (stored.status, stored.version, stored.execution_arn, stored.receipt_handle) == (
        written.status,
        written.version,
        written.execution_arn,
        written.receipt_handle,
    ) and abs(stored.received_at - written.received_at) < 0.001


def retake_holds(receiver: Receiver, lease: Lease) -> Outcome | str | None:
    """Take an unstarted attempt's job lock and slot again, in one transaction checked against its lease
    (they may have been taken over while it had not started). None when it holds both; else the reason
    it may not start (a string: its lease is released), or the outcome when its lease changed meanwhile
    (a newer writer decides) or the write's result is unknown (a redelivery or reconciliation decides)."""
    assert lease.execution_arn is not None
    holds: list[Hold] = []
    if lease.job_id:
        state, lock = read_job_lock(receiver, lease.job_id, lease.job_type or "", lease.message_id, lease.execution_arn)
        if state in (LockState.HELD, LockState.HELD_BY_THIS_MESSAGE, LockState.RUN_ENDING):
            assert lock is not None
            return _waiting(lock)
        holds.append(lock_hold(job_lock_key(lease.job_id), state, lock))
    if lease.slot:
        holds.append(Hold(lease.slot))
    try:
        taken = receiver.store.take_holds(
            lease, receiver.store.unchanged_request(lease), holds, now=receiver.clock.now()
        )
    except Exception as exc:
        logger.warning("could not take the holds again", extra={"message_id": lease.message_id, "error": str(exc)})
        return Outcome.NOT_STARTED
    if taken.written:
        return None
    if LEASE_KEY in taken.lost or not taken.lost:
        return Outcome.STALE if taken.lost else Outcome.NOT_STARTED
    return "waiting: its job lock or admission slot was taken over while it had not started"


def adopt_running(receiver: Receiver, job: Job | None, delivery: Delivery, closed: Lease) -> Outcome | None:
    """A newer receive of a lease closed while its execution still runs (a stop not yet landed): the lease
    is reopened on this receive, its holds taken again for that execution where free, and nothing new
    starts. None when the lease changed meanwhile (read again)."""
    reopened = replace(
        closed,
        status=LeaseStatus.ACTIVE,
        version=successor_version(closed),
        last_error=None,
        closed_at=None,
        checked_at=None,
    )
    adopted = timing(receiver, delivery, reopened, adopted=True)
    if not receiver.store.create(adopted, replacing=closed):
        return None
    holds = [Hold(key) for key in (job_lock_key(adopted.job_id) if adopted.job_id else None, adopted.slot) if key]
    try:
        taken = receiver.store.take_holds(
            adopted, receiver.store.unchanged_request(adopted), holds, now=receiver.clock.now()
        )
        if not taken.written:
            logger.warning("a running execution's holds are taken by another", extra={"lost": sorted(taken.lost)})
    except Exception as exc:  # its execution runs unheld until it ends (its own release is conditional)
        logger.warning("could not take a running execution's holds again", extra={"error": str(exc)})
    logger.warning(
        "redelivered while a closed lease's execution runs: adopted", extra={"message_id": closed.message_id}
    )
    return resume(receiver, job, adopted, new=False)


def adopt(receiver: Receiver, job: Job | None, delivery: Delivery, lease: Lease) -> Outcome | None:
    """A newer receive of an ACTIVE lease: its handle recorded on the lease (fenced by receive count and
    version), then the attempt resumed. None when the lease changed meanwhile (read again)."""
    adopted = receiver.store.refresh_handle(lease, timing(receiver, delivery, lease, adopted=True))
    return None if adopted is None else resume(receiver, job, adopted, new=False)
