"""Planted bugs: each disables one protection of the engine, in this process, so a reader can watch the
simulation find a broken promise, replay it and shrink it (`python -m offline sim --plant NAME`), and a
test can prove the harness has teeth (tests/sim/test_planted.py). A plant patches the processor's own code
(the engine's, the command's, or the simulated DynamoDB's conditions), never the simulation's checks.

The lease's version condition is planted with the conditions it shares each write with (`lease_fence`),
and the handle check on renewal with the version check beside it (`handle_check`): alone, each is masked
by the other conditions (docs/simulation.md says why)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from longjobs.engine import runs
from longjobs.engine.delivery import attempt
from longjobs.engine.delivery import types as receiver_types
from longjobs.engine.delivery.decision import LockState
from longjobs.engine.lease import LeaseStatus
from longjobs.engine.lease.lock import Locks

Patch = Callable[[Any, str, Any], None]
"""Sets an attribute for the plant's duration: `setattr` undone at the end, or pytest's `monkeypatch.setattr`."""

__all__ = ["PLANTS", "SEARCH_LEAD", "Plant", "planted"]


def _no_job_lock(patch: Patch) -> None:
    """The job lock is ignored: read as free, and taken whoever holds it. Two messages of one job id run."""
    take_request = Locks.take_request

    def unconditional(self: Locks, key: str, **kwargs: Any) -> dict[str, Any]:
        request = take_request(self, key, **kwargs)
        return {"TableName": request["TableName"], "Item": request["Item"]}

    patch(Locks, "take_request", unconditional)
    patch(attempt, "read_job_lock", lambda *args, **kwargs: (LockState.FREE, None))


def _no_stop_at_cap(patch: Patch) -> None:
    """A lease that can no longer be held (the 12 h limit, the max renewal, a handle refused) is closed
    without stopping its execution."""
    from longjobs.engine import settle

    patch(settle, "stop_execution", lambda *args, **kwargs: None)


def _delete_before_success(patch: Patch) -> None:
    """A started long job counts as done: the event source mapping deletes its message at once."""
    patch(receiver_types, "_DONE", receiver_types._DONE | {receiver_types.Outcome.STARTED})


def _no_handle_check(patch: Patch) -> None:
    """The extender ends a lease it cannot hold (a handle SQS refused, the 12 h limit, the max renewal)
    whatever its consistent re-read shows: a newer receive's lease (a redelivery that adopted the running
    execution, or started one) is ended too, and its execution stopped. The receive and the version are
    checked together (`still_as_read`); versions only grow, so either alone would catch it."""
    from longjobs.engine.extender import service

    patch(service, "still_as_read", lambda lease, read: True)


def _no_lease_fence(patch: Patch) -> None:
    """Every conditional write of a lease passes once the lease exists (version, status and receive count
    ignored, by the functions and the workflow alike; a marker's claim too): a stale writer is never fenced
    off. The version condition alone is not planted: the status and receive-count conditions on the same
    writes mask it."""
    from longjobs.engine.lease.lock import is_lock_key
    from longjobs.engine.lease.schema import PARTITION_KEY
    from longjobs.sim.aws.dynamodb import FakeDynamoDb

    def unfenced(request: dict[str, Any]) -> dict[str, Any]:
        key = (request.get("Key") or request.get("Item") or {}).get(PARTITION_KEY, {}).get("S", "")
        condition = request.get("ConditionExpression")
        if condition is None or is_lock_key(key):
            return request
        names = {**request.get("ExpressionAttributeNames", {}), "#planted_pk": PARTITION_KEY}
        condition = f"({condition}) OR attribute_exists(#planted_pk)"
        return {**request, "ConditionExpression": condition, "ExpressionAttributeNames": names}

    put, update, transact = FakeDynamoDb.put_item, FakeDynamoDb.update_item, FakeDynamoDb.transact_write_items

    def transact_unfenced(self: FakeDynamoDb, **request: Any) -> dict[str, Any]:
        items = [{kind: unfenced(body) for kind, body in item.items()} for item in request["TransactItems"]]
        return transact(self, **{**request, "TransactItems": items})

    patch(FakeDynamoDb, "put_item", lambda self, **request: put(self, **unfenced(request)))
    patch(FakeDynamoDb, "update_item", lambda self, **request: update(self, **unfenced(request)))
    patch(FakeDynamoDb, "transact_write_items", transact_unfenced)


def _success_over_cancel(patch: Patch) -> None:
    """The workflow's success close accepts a CANCELLED lease: a job that runs on after an operator's cancel
    marked it (its stop lost, the operator gone) records its success over the cancel."""
    from longjobs.sim.aws.dynamodb import FakeDynamoDb

    def lenient(request: dict[str, Any]) -> dict[str, Any]:
        condition = request.get("ConditionExpression")
        if condition is None or " AND #status <> :cancelled" not in condition:
            return request
        # the value goes with its clause: DynamoDB refuses a request with an unused value, and that error,
        # not the weakened condition, would then be what the campaign sees
        values = {name: value for name, value in request["ExpressionAttributeValues"].items() if name != ":cancelled"}
        condition = condition.replace(" AND #status <> :cancelled", "")
        return {**request, "ConditionExpression": condition, "ExpressionAttributeValues": values}

    update, transact = FakeDynamoDb.update_item, FakeDynamoDb.transact_write_items

    def transact_lenient(self: FakeDynamoDb, **request: Any) -> dict[str, Any]:
        items = [{kind: lenient(body) for kind, body in item.items()} for item in request["TransactItems"]]
        return transact(self, **{**request, "TransactItems": items})

    patch(FakeDynamoDb, "update_item", lambda self, **request: update(self, **lenient(request)))
    patch(FakeDynamoDb, "transact_write_items", transact_lenient)


def _slow_refused_starts(patch: Patch) -> None:
    """A refused start's message comes back ten extender periods later: the backoff has no cap."""
    patch(attempt, "refused_start_delay_s", lambda refused, settings, rng: int(10 * settings.extender_period_s))


def _invalid_body_as_poison(patch: Patch) -> None:
    """A body this receiver refuses (a deploy made its schema stricter, its body limit lower, its type gone)
    goes to the DLQ as poison, without the history of the attempts it had before the deploy."""
    from longjobs.engine.receiver import service

    judged = service._dead_letter_invalid

    def as_poison(receiver: Any, delivery: Any, bad: Any, lease: Any, history: Any) -> Any:
        return judged(receiver, delivery, bad, None, ())

    patch(service, "_dead_letter_invalid", as_poison)


def _adoption_renews_the_cap(patch: Patch) -> None:
    """A redelivery that adopts a running attempt gives it a new hard stop from its own receive: a job
    redelivered now and then (a duplicate, a lapse) runs on past `max_renewal_s`."""
    timing = attempt.timing

    def renewing(receiver: Any, delivery: Any, base: Any, *, adopted: bool = False) -> Any:
        return timing(receiver, delivery, base)

    patch(attempt, "timing", renewing)


def _redrive_drops_held(patch: Patch) -> None:
    """`longjobs dlq redrive`'s copy loop deletes the DLQ messages it held back (not selected, or whose send
    failed) instead of showing them again: a filtered redrive loses what it left."""
    from longjobs.cli import dlq

    def drop(sqs: Any, dlq_url: str, handles: list[str]) -> None:
        for handle in handles:
            sqs.delete_message(QueueUrl=dlq_url, ReceiptHandle=handle)

    patch(dlq, "show_again", drop)


def _lost_on_any_error(patch: Patch) -> None:
    """A visibility change's throttle or 5xx is taken for a refused handle: the extender stops a healthy job
    and closes its lease LOST, though SQS still hides its message under that handle."""
    from longjobs.engine.visibility import client
    from longjobs.engine.visibility.errors import FailureClass, classify, classify_exception

    def as_lost(failure: FailureClass) -> FailureClass:
        return FailureClass.LOST if failure in (FailureClass.THROTTLED, FailureClass.OTHER) else failure

    patch(client, "classify", lambda *args, **kwargs: as_lost(classify(*args, **kwargs)))
    patch(client, "classify_exception", lambda exc: as_lost(classify_exception(exc)))


def _stale_receive_adopted(patch: Patch) -> None:
    """An older receive of a message than its lease names is adopted, not fenced off: the decision's
    staleness row and the adoption write's receive condition are both gone (the version condition alone
    passes, the lease being read afresh)."""
    from longjobs.engine.delivery.decision import Action, decide
    from longjobs.engine.receiver import service
    from longjobs.sim.aws.dynamodb import FakeDynamoDb

    def adopting(reading: Any, limits: Any) -> Action:
        lease = reading.lease
        if lease is not None and lease.active and lease.receive_count > reading.receive_count:
            return Action.ADOPT
        return decide(reading, limits)

    update = FakeDynamoDb.update_item
    clause = " AND (receive_count < :rc OR (receive_count = :rc AND receipt_handle <> :handle))"

    def unordered(self: FakeDynamoDb, **request: Any) -> dict[str, Any]:
        condition = request.get("ConditionExpression")
        if condition is not None and clause in condition:
            request = {**request, "ConditionExpression": condition.replace(clause, "")}
        return update(self, **request)

    patch(service, "decide", adopting)
    patch(FakeDynamoDb, "update_item", unordered)


def _receiver_keeps_done_message(patch: Patch) -> None:
    """The receiver gives back a redelivered message whose job already succeeded instead of acknowledging
    it: the message comes back again and again until its queue's redrive moves it to the DLQ."""
    patch(receiver_types, "_DONE", receiver_types._DONE - {receiver_types.Outcome.ALREADY_SUCCEEDED})


def _previous_run_ignored(patch: Patch) -> None:
    """A job's next attempt does not wait for the previous attempt's run, which outlives its stopped
    execution: two runs of the job go on at once."""
    patch(runs.JobRuns, "running", lambda self, *args, **kwargs: False)


def _worker_end_assumed(patch: Patch) -> None:
    """A job's next attempt takes any lease its last execution's workflow closed RELEASED for the worker's
    own report that its run ended, whatever the error: a run whose task timed out goes on beside the next."""
    patch(
        attempt,
        "worker_reported_end",
        lambda holder, lock: holder is not None and holder.status is LeaseStatus.RELEASED,
    )


def _missing_start_trusted(patch: Patch) -> None:
    """A start whose answers were all lost is taken as never started when DescribeExecution does not find
    its execution, though that read may lag the start: the message comes back while the execution runs."""
    from longjobs.engine.execution import NEVER_STARTED, StartRefused, execution_status

    def trusted(receiver: Any, lease: Any, exc: Exception) -> str | None:
        if isinstance(exc, StartRefused):
            return NEVER_STARTED
        try:
            return execution_status(receiver.stepfunctions, lease.execution_arn)
        except Exception:
            return None

    patch(attempt, "failed_start_status", trusted)


def _unlimited_left_parked(patch: Patch) -> None:
    """Nothing looks in the waiting queue of a type without a limit: what a deploy that removed the type's
    limit left parked there waits forever."""
    from longjobs.engine.admission import admit

    patch(admit, "unpark_unlimited", lambda *args, **kwargs: 0)


def _s3_event_forgotten(patch: Patch) -> None:
    """A notification's markers are keyed by its message, not by the object creation they notify: S3
    delivering an event again, as a new message, fans its partitions' jobs out again."""
    from longjobs.engine.receiver import fan_out

    marker_id = fan_out.marker_id
    patch(fan_out, "marker_id", lambda delivery, index, event: marker_id(delivery, index, None))


def _one_marker_in_place(patch: Patch) -> None:
    """A notification of one marker runs under its own message, not fanned out: S3 delivering its event
    again, as a new message, runs its partition's job again."""
    from longjobs.engine.delivery.models import Parsed

    patch(Parsed, "fans_out", property(lambda parsed: len(parsed.jobs) > 1))


def _cancel_send_unclaimed(patch: Patch) -> None:
    """A receive dead-letters a cancelled message without claiming the send: beside a cancel run again, or
    the extender finishing one, it sends a second `Cancelled` copy (a redrive of both runs the job twice)."""
    from longjobs.engine.receiver import service

    patch(service, "claim_dead_letter", lambda store, lease, receive, *, now: lease)


def _dlq_send_unclaimed(patch: Patch) -> None:
    """The receiver sends a message to the DLQ before it writes its REJECTED record, which claims nothing:
    of two receives of one message at once both send, and one may begin an attempt beside the DLQ copy."""
    from longjobs.engine.admission import line
    from longjobs.engine.delivery.dlq import EXHAUSTED, send_exhausted_to_dlq

    claimed = attempt.dead_letter

    def sent_first(receiver: Any, delivery: Any, history: Any, **kwargs: Any) -> Any:
        dlq_url = receiver.settings.dlq_url or ""
        error_type, message = kwargs.get("error_type", EXHAUSTED), kwargs.get("message")
        send_exhausted_to_dlq(receiver.sqs, dlq_url, delivery, history, error_type=error_type, message=message)
        return claimed(receiver, delivery, history, **kwargs) or receiver_types.Outcome.REJECTED

    patch(attempt, "send_claimed", lambda receiver, delivery, record: receiver_types.Outcome.REJECTED)
    patch(attempt, "dead_letter", sent_first)
    patch(line, "dead_letter", sent_first)


def _dlq_claim_taken_fresh(patch: Patch) -> None:
    """A receive takes another's DLQ claim over while that claimant may still be sending: both send."""
    from longjobs.engine.delivery import dlq_claim

    patch(dlq_claim, "may_send", lambda *args, **kwargs: True)


def _cancel_copy_out_of_group(patch: Patch) -> None:
    """A cancelled job's DLQ copy forgets its message group (FIFO): a redrive puts it in a group of its own,
    beside the jobs of its group sent after it."""
    from longjobs.engine import cancel

    send = cancel.send_cancelled

    def groupless(sqs: Any, dlq_url: str, lease: Any, body: str, reason: str) -> str:
        return send(sqs, dlq_url, replace(lease, group_id=None), body, reason)

    patch(cancel, "send_cancelled", groupless)


SEARCH_LEAD = 5
"""How many seeds before a plant's first seed its test's campaign begins."""


@dataclass(frozen=True)
class Plant:
    """A planted bug: what it disables, and the property a campaign reports it by at its first failed seed."""

    apply: Callable[[Patch], None]
    reported_as: str
    first_seed: int = 0
    """The first seed a campaign from 0 (the default profile) reports it at, as docs/simulation.md's table of
    plants names it."""

    @property
    def search_from(self) -> int:
        """Where tests/sim/test_planted.py begins its 200 seeds: `SEARCH_LEAD` seeds before `first_seed`, so CI
        spends a few seeds where a search from 0 would spend hundreds, and still sees the seeds before it pass."""
        return max(0, self.first_seed - SEARCH_LEAD)

    @property
    def what(self) -> str:
        """The first line of what it disables."""
        return (self.apply.__doc__ or "").strip().splitlines()[0]


PLANTS: dict[str, Plant] = {
    "lease_fence": Plant(_no_lease_fence, "cancelled_never_succeeds"),
    "job_lock": Plant(_no_job_lock, "single_execution_per_job"),
    "cap_handling": Plant(_no_stop_at_cap, "held_while_running", first_seed=2),
    "handle_check": Plant(_no_handle_check, "stopped_as_read", first_seed=63),
    "delete_after_success": Plant(_delete_before_success, "nothing_lost"),
    "refused_start_backoff": Plant(_slow_refused_starts, "refused_start_returns", first_seed=446),
    "success_over_cancel": Plant(_success_over_cancel, "cancelled_never_succeeds", first_seed=7),
    "redrive_drops_held": Plant(_redrive_drops_held, "nothing_lost", first_seed=3),
    "invalid_body_as_poison": Plant(_invalid_body_as_poison, "dlq_keeps_history", first_seed=65),
    "adoption_renews_the_cap": Plant(_adoption_renews_the_cap, "attempt_within_cap", first_seed=48),
    "lost_on_any_error": Plant(_lost_on_any_error, "stopped_with_cause", first_seed=198),
    "keeps_done_message": Plant(_receiver_keeps_done_message, "needless_redeliveries"),
    "stale_receive_adopted": Plant(_stale_receive_adopted, "newest_receive"),
    "previous_run_ignored": Plant(_previous_run_ignored, "single_run_per_job", first_seed=135),
    "worker_end_assumed": Plant(_worker_end_assumed, "single_run_per_job", first_seed=577),
    "missing_start_trusted": Plant(_missing_start_trusted, "held_while_running", first_seed=64),
    "unlimited_left_parked": Plant(_unlimited_left_parked, "settled_in_time", first_seed=16),
    "s3_event_forgotten": Plant(_s3_event_forgotten, "once_per_message", first_seed=9),
    "one_marker_in_place": Plant(_one_marker_in_place, "once_per_message", first_seed=32),
    "cancel_send_unclaimed": Plant(_cancel_send_unclaimed, "dlq_send_claimed", first_seed=22),
    "dlq_send_unclaimed": Plant(_dlq_send_unclaimed, "dlq_send_claimed"),
    "dlq_claim_taken_fresh": Plant(_dlq_claim_taken_fresh, "dlq_send_claimed", first_seed=243),
    "cancel_copy_out_of_group": Plant(_cancel_copy_out_of_group, "fifo_order", first_seed=7),
}


@contextmanager
def planted(name: str | None) -> Iterator[None]:
    """The plant `name` applied in this process until the block ends (nothing for None)."""
    undo: list[tuple[Any, str, Any]] = []

    def patch(target: Any, attribute: str, value: Any) -> None:
        undo.append((target, attribute, getattr(target, attribute)))
        setattr(target, attribute, value)

    if name is not None:
        PLANTS[name].apply(patch)
    try:
        yield
    finally:
        for target, attribute, value in reversed(undo):
            setattr(target, attribute, value)
