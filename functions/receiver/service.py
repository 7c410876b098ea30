"""The receiver's business logic: one SQS record in, one `Outcome` out.

A long job goes lease -> ChangeMessageVisibility (first chunk) -> StartExecution, and its record is
reported *deferred* so the event source mapping leaves the message alone. Each step may be the last
one before a crash; what closes each window:

- no lease yet: the message returns after the queue's VT and is received afresh;
- lease, no visibility change or no execution: a redelivery finds the lease of its own or an older
  receive and resumes (refresh the handle, change visibility, start the execution under the
  attempt's name, which is idempotent); without a redelivery, reconciliation finds the execution
  never started and releases the message;
- execution started: the workflow settles the message itself (delete or release).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from functions.clock import Clock
from functions.execution import (
    ExecutionInput,
    execution_arn,
    execution_name,
    execution_status,
    parse_execution_name,
    start_execution,
)
from functions.lease import Lease, LeaseStatus, LeaseStore
from functions.observability import logger
from functions.policies import RenewalPolicy
from functions.receiver.dlq import send_to_dlq
from functions.receiver.models import INLINE_JOB_TYPES, BadInput, EchoJob, Job, parse_body
from functions.settings import SQS_MAX_VISIBILITY_S, Settings
from functions.settle import NEVER_STARTED, RUNNING_STATUSES, SettleError, release, settle_ended
from functions.visibility import FailureClass, VisibilityChange, VisibilityClient

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient


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
    NOT_STARTED = "not_started"  # the lease or execution could not be made: the message comes back
    STALE = "stale"  # an older receive than the lease's, or one already settled

    @property
    def deferred(self) -> bool:
        return self not in _DONE


_DONE = frozenset(
    {Outcome.REJECTED, Outcome.IGNORED, Outcome.INLINE_DONE, Outcome.FANNED_OUT, Outcome.ALREADY_SUCCEEDED}
)


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

    @classmethod
    def from_record(cls, record: SQSRecord) -> Delivery:
        return cls(
            message_id=record.message_id,
            receipt_handle=record.receipt_handle,
            body=record.body,
            receive_count=int(record.attributes.approximate_receive_count),
            source_arn=record.event_source_arn,
        )


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

    @property
    def queue_url(self) -> str:
        return self.settings.queue_url or ""

    @property
    def state_machine_arn(self) -> str:
        return self.settings.state_machine_arn or ""


def release_delay_s(attempt: int, settings: Settings, rng: random.Random) -> int:
    """Delay before a failed attempt's message returns: doubles per receive up to the cap, with "equal
    jitter" (half fixed, half random) so it still grows with the count while spreading retries out."""
    ceiling = min(float(settings.release_delay_cap_s), settings.release_delay_base_s * 2.0 ** min(attempt - 1, 64))
    return min(SQS_MAX_VISIBILITY_S, round(rng.uniform(ceiling / 2, ceiling)))


def receive(rx: Receiver, delivery: Delivery) -> Outcome:
    """Handle one record. Raises only when the record must be retried (reported failed)."""
    try:
        jobs = parse_body(delivery.body, rx.settings)
    except BadInput as bad:
        reject(rx, delivery, bad)
        return Outcome.REJECTED
    if not jobs:
        return Outcome.IGNORED
    if len(jobs) > 1:
        fan_out(rx, jobs)
        return Outcome.FANNED_OUT
    job = jobs[0]
    if job.type in INLINE_JOB_TYPES:
        run_inline(job)
        return Outcome.INLINE_DONE
    return start_long_job(rx, delivery, job)


def reject(rx: Receiver, delivery: Delivery, bad: BadInput) -> None:
    """DLQ first; the REJECTED lease is only a record, so its failure does not fail the record."""
    send_to_dlq(rx.sqs, rx.settings.dlq_url or "", delivery, bad)
    logger.warning("poison message sent to the DLQ", extra={"message_id": delivery.message_id, "error": str(bad)})
    now = rx.clock.now()
    record = Lease(
        message_id=delivery.message_id,
        queue_url=rx.queue_url,
        receipt_handle=delivery.receipt_handle,
        receive_count=delivery.receive_count,
        received_at=now,
        visible_until=now,
        renew_until=now,
    )
    try:
        rx.store.record_rejection(record, now=now, error=str(bad))
    except Exception as exc:
        logger.warning("could not record the rejection", extra={"message_id": delivery.message_id, "error": str(exc)})


def fan_out(rx: Receiver, jobs: list[Job]) -> None:
    """One job message per object, back on the jobs queue (a notification may hold several records).
    A failed entry raises, so the notification is retried; re-sent jobs are harmless (a Spark run of
    a partition is idempotent)."""
    for start in range(0, len(jobs), 10):
        chunk = jobs[start : start + 10]
        response = rx.sqs.send_message_batch(
            QueueUrl=rx.queue_url,
            Entries=[{"Id": str(i), "MessageBody": job.model_dump_json()} for i, job in enumerate(chunk)],
        )
        if response.get("Failed"):
            raise RuntimeError(f"fan-out of an S3 notification failed: {response['Failed']}")


def run_inline(job: Job) -> None:
    if isinstance(job, EchoJob):
        if job.params.fail:
            raise InlineJobFailed(f"echo job {job.job_id} was asked to fail")
        logger.info("echo", extra={"job_id": job.job_id, "text": job.params.text})


def start_long_job(rx: Receiver, delivery: Delivery, job: Job) -> Outcome:
    """Lease, hide, start; or, for a redelivery, resume the attempt the lease records."""
    lease = rx.store.get(delivery.message_id)
    if lease is None:
        return _new_attempt(rx, delivery, job, replacing=None)
    if lease.status is LeaseStatus.SUCCEEDED:
        return Outcome.ALREADY_SUCCEEDED  # the mapping deletes this copy with its current handle
    if lease.receive_count > delivery.receive_count:
        return Outcome.STALE
    if not lease.active:
        if lease.receive_count == delivery.receive_count:
            return Outcome.STALE  # this very receive was settled already
        return _new_attempt(rx, delivery, job, replacing=lease)
    if lease.receive_count < delivery.receive_count:
        refreshed = rx.store.refresh_handle(lease, _timing(rx, delivery, lease))
        if refreshed is None:
            return Outcome.STALE  # a newer receive or a settlement won the race
        lease = refreshed
    return _resume(rx, job, lease, redelivered=delivery.receive_count > _attempt_of(lease))


def _timing(rx: Receiver, delivery: Delivery, base: Lease) -> Lease:
    """A lease for this receive: the policy's first chunk from now, renewal due when the policy says."""
    now = rx.clock.now()
    timing = replace(
        base,
        receipt_handle=delivery.receipt_handle,
        receive_count=delivery.receive_count,
        received_at=now,
        visible_until=now + rx.policy.initial_timeout_s(),
        renew_until=rx.settings.renew_until(now),
        renewed_at=None,
    )
    return replace(timing, renew_at=rx.policy.renew_at(timing))


def _attempt_of(lease: Lease) -> int:
    parsed = parse_execution_name((lease.execution_arn or "").rpartition(":")[2])
    return parsed[1] if parsed else lease.receive_count


def _new_attempt(rx: Receiver, delivery: Delivery, job: Job, *, replacing: Lease | None) -> Outcome:
    name = execution_name(delivery.message_id, delivery.receive_count)
    blank = Lease(
        message_id=delivery.message_id,
        queue_url=rx.queue_url,
        receipt_handle=delivery.receipt_handle,
        receive_count=delivery.receive_count,
        received_at=0.0,
        visible_until=0.0,
        renew_until=0.0,
        execution_arn=execution_arn(rx.state_machine_arn, name),
        job_type=job.type,
        release_delay_s=release_delay_s(delivery.receive_count, rx.settings, rx.rng),
    )
    lease = _timing(rx, delivery, blank)
    if not rx.store.create(lease, replacing=replacing):
        return Outcome.STALE  # another invocation holds this receive
    return _resume(rx, job, lease, redelivered=False)


def _resume(rx: Receiver, job: Job, lease: Lease, *, redelivered: bool) -> Outcome:
    """Hide the message for the first chunk, then make sure the attempt's execution exists."""
    outcome = rx.visibility.change(
        VisibilityChange(lease.message_id, lease.queue_url, lease.receipt_handle, rx.policy.initial_timeout_s())
    )
    if outcome.failure is FailureClass.LOST:
        rx.store.close(lease, LeaseStatus.LOST, now=rx.clock.now(), error=f"first visibility change: {outcome.error}")
        return Outcome.STALE
    if not outcome.ok:
        _give_back(rx, lease, f"first visibility change failed: {outcome.error}")
        return Outcome.NOT_STARTED
    status = execution_status(rx.stepfunctions, lease.execution_arn) if redelivered else NEVER_STARTED
    if status in RUNNING_STATUSES:
        logger.warning("redelivered while its job runs", extra={"message_id": lease.message_id})
        return Outcome.RUNNING
    if status != NEVER_STARTED:
        settle_ended(lease, status, store=rx.store, visibility=rx.visibility, sqs=rx.sqs, clock=rx.clock)
        return Outcome.SETTLED
    payload = ExecutionInput(
        message_id=lease.message_id,
        attempt=_attempt_of(lease),
        queue_url=lease.queue_url,
        release_delay_s=lease.release_delay_s,
        job=job.model_dump(mode="json"),
    )
    try:
        start_execution(rx.stepfunctions, rx.state_machine_arn, payload)
    except Exception as exc:
        _give_back(rx, lease, f"start execution failed: {exc}")
        return Outcome.NOT_STARTED
    return Outcome.STARTED


def _give_back(rx: Receiver, lease: Lease, reason: str) -> None:
    """The attempt cannot go on: release the message now. If even that fails the lease stays ACTIVE
    with an execution that never started, and reconciliation releases it after its grace period."""
    logger.error("job not started", extra={"message_id": lease.message_id, "reason": reason})
    try:
        release(lease, store=rx.store, visibility=rx.visibility, clock=rx.clock, reason=reason)
    except SettleError as exc:
        logger.error("release failed; reconciliation will retry", extra={"error": str(exc)})
