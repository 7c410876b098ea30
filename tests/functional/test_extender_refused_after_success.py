"""The extender meets a handle SQS refuses because the job is done: the message was deleted after its job
succeeded, by a settlement whose close of the lease had not landed (reconciliation's completion deletes,
then closes, and may be cut short between; the offline runtime's moto can lose the workflow's close when
another client's transaction is cancelled, docs/moto.md). Stopping that execution and closing the lease
LOST turned a job that succeeded into a lost message (the offline demo under load, issue 37; simulation
seed 78, property `stopped_with_cause`). An execution that has ended is settled by its end instead; one
that runs is stopped as before (invariant 8)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from longjobs.engine.execution import execution_arn
from longjobs.engine.extender.service import PassReport, renew_due
from longjobs.engine.lease import Lease, LeaseStatus
from longjobs.engine.visibility import VisibilityClient
from longjobs.sim.clock import FakeClock
from tests.functional.conftest import Harness
from tests.functional.test_extender_faults import (
    STATE_MACHINE,
    THRESHOLD,
    FakeStepFunctions,
    throttled,
    with_stepfunctions,
)


def deleted_while_active(harness: Harness, name: str) -> Lease:
    """A lease left ACTIVE whose message is deleted: a completion cut short between its delete and its close."""
    harness.send()
    [lease] = harness.receive_and_lease(THRESHOLD, execution_arn=execution_arn(STATE_MACHINE, name))
    harness.sqs.delete_message(QueueUrl=harness.queue_url, ReceiptHandle=lease.receipt_handle)
    return lease


def stored(harness: Harness, lease: Lease) -> Lease:
    found = harness.store(THRESHOLD).get(lease.message_id)
    assert found is not None
    return found


def extender_pass_over_a_deleted_message(
    harness: Harness, message: str, status: str
) -> tuple[Lease, FakeStepFunctions, PassReport]:
    """An extender pass over a lease whose message was deleted while it was ACTIVE, its execution `status`."""
    lease = deleted_while_active(harness, message)
    fake = FakeStepFunctions({lease.execution_arn or "": status})
    clock = FakeClock(lease.received_at + 2.6)
    extender = with_stepfunctions(harness.extender(THRESHOLD, clock), fake)
    return lease, fake, renew_due(extender, deadline=clock.now() + 30)


def test_extender_a_refused_handle_of_a_succeeded_execution_completes_the_lease_without_a_stop(
    harness: Harness,
) -> None:
    lease, fake, report = extender_pass_over_a_deleted_message(harness, "done-1", "SUCCEEDED")

    assert fake.stopped == [], "an execution that succeeded is not stopped"
    assert (report.settled, report.stopped, report.lost) == (1, 0, 0)
    after = stored(harness, lease)
    assert after.status is LeaseStatus.SUCCEEDED, "the job succeeded: its lease says so, not LOST"
    assert harness.visible_messages() == [], "nothing comes back"


@pytest.mark.parametrize("status", ["FAILED", "ABORTED", "TIMED_OUT"])
def test_extender_a_refused_handle_of_an_execution_that_ended_otherwise_is_released_without_a_stop(
    harness: Harness, status: str
) -> None:
    lease, fake, report = extender_pass_over_a_deleted_message(harness, f"ended-{status.lower()}", status)

    assert fake.stopped == []
    assert (report.settled, report.stopped) == (1, 0)
    assert stored(harness, lease).status is LeaseStatus.LOST, "the release's own change is refused: LOST"


def test_extender_a_refused_handle_of_a_running_execution_is_still_stopped_and_lost(harness: Harness) -> None:
    lease, fake, report = extender_pass_over_a_deleted_message(harness, "running-1", "RUNNING")

    assert fake.stopped == [lease.execution_arn]
    assert (report.settled, report.stopped, report.lost) == (0, 1, 1)
    assert stored(harness, lease).status is LeaseStatus.LOST


def test_extender_a_describe_that_fails_stops_nothing_and_the_next_pass_settles(harness: Harness) -> None:
    lease = deleted_while_active(harness, "throttled-1")
    fake = FakeStepFunctions({lease.execution_arn or "": "SUCCEEDED"})
    clock = FakeClock(lease.received_at + 2.6)
    extender = with_stepfunctions(harness.extender(THRESHOLD, clock), fake)
    real_describe = fake.describe_execution
    failures = {"left": 1}

    def describe(**kwargs: Any) -> Any:
        if failures["left"]:
            failures["left"] -= 1
            raise throttled("DescribeExecution")
        return real_describe(**kwargs)

    fake.describe_execution = describe  # type: ignore[method-assign]

    first = renew_due(extender, deadline=clock.now() + 30)
    assert fake.stopped == [] and (first.failed, first.settled) == (1, 0)
    assert stored(harness, lease).status is LeaseStatus.ACTIVE, "left ACTIVE and due for the next pass"

    second = renew_due(extender, deadline=clock.now() + 30)
    assert fake.stopped == [] and second.settled == 1
    assert stored(harness, lease).status is LeaseStatus.SUCCEEDED


def test_extender_a_close_that_lands_before_the_refusal_is_read_again_and_nothing_is_stopped(harness: Harness) -> None:
    """The workflow's success: the renewal planned on the ACTIVE lease it read, the close lands, then the
    delete, then the renewal is sent and refused. The consistent re-read finds the lease closed: no
    describe, no stop, no write."""
    harness.send()
    [lease] = harness.receive_and_lease(THRESHOLD, execution_arn=execution_arn(STATE_MACHINE, "closed-1"))
    fake = FakeStepFunctions({lease.execution_arn or "": "RUNNING"})
    clock = FakeClock(lease.received_at + 2.6)
    store = harness.store(THRESHOLD)

    class SuccessFirst(VisibilityClient):
        def change_many(self, changes: Any) -> Any:
            planned = list(changes)
            assert store.close(lease, LeaseStatus.SUCCEEDED, now=clock.now()) is not None
            harness.sqs.delete_message(QueueUrl=harness.queue_url, ReceiptHandle=lease.receipt_handle)
            return super().change_many(planned)

    base = harness.extender(THRESHOLD, clock)
    extender = with_stepfunctions(base, fake)
    object.__setattr__(extender, "visibility", SuccessFirst(harness.sqs, clock=clock, executor=harness.executor))

    report = renew_due(extender, deadline=clock.now() + 30)

    assert fake.described == [] and fake.stopped == []
    assert (report.settled, report.stopped, report.conflicts) == (0, 0, 1)
    assert stored(harness, lease).status is LeaseStatus.SUCCEEDED


def test_extender_two_extender_runs_that_meet_the_same_refusal_settle_it_once(harness: Harness) -> None:
    """Runs overlap (no reserved concurrency): both planned on the ACTIVE lease; the first settles it, the
    second's re-read finds it closed and leaves it."""
    lease = deleted_while_active(harness, "overlap-1")
    fake = FakeStepFunctions({lease.execution_arn or "": "SUCCEEDED"})
    clock = FakeClock(lease.received_at + 2.6)
    first_run = with_stepfunctions(harness.extender(THRESHOLD, clock), fake)
    second_run = with_stepfunctions(harness.extender(THRESHOLD, clock), fake)
    stale = second_run.store.index.due(before=clock.now() + second_run.policy.horizon_s)
    assert [d.message_id for d in stale] == [lease.message_id]
    # The index as read before the first run's close.
    object.__setattr__(second_run.store.index, "due", lambda before, **_: stale)

    first = renew_due(first_run, deadline=clock.now() + 30)
    second = renew_due(second_run, deadline=clock.now() + 30)

    assert fake.stopped == []
    assert (first.settled, second.settled, second.conflicts) == (1, 0, 1)
    assert stored(harness, lease).status is LeaseStatus.SUCCEEDED


def test_extender_a_stop_refused_as_already_ended_is_never_reached(harness: Harness) -> None:
    """The describe answers before any stop: an execution that already ended is not sent StopExecution at all
    (AWS refuses it for an ended execution)."""
    lease = deleted_while_active(harness, "ended-before-stop")
    fake = FakeStepFunctions({lease.execution_arn or "": "SUCCEEDED"})

    def refuse(**_: Any) -> Any:
        raise ClientError({"Error": {"Code": "ValidationException", "Message": "ended"}}, "StopExecution")

    fake.stop_execution = refuse  # type: ignore[method-assign]
    clock = FakeClock(lease.received_at + 2.6)
    report = renew_due(with_stepfunctions(harness.extender(THRESHOLD, clock), fake), deadline=clock.now() + 30)

    assert (report.settled, report.failed) == (1, 0)
    assert stored(harness, lease).status is LeaseStatus.SUCCEEDED
