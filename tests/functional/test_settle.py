"""Settling an attempt that ended (`longjobs.engine.settle`), on moto: the release, its re-assertion, the
completion and the end chosen by the execution's status. Each returns the lease as it closed, or None when
another writer got there first; the extender, reconciliation and the watcher count on those answers."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import boto3
import pytest
from botocore.stub import Stubber

from longjobs.engine.lease import LastError, Lease, LeaseStatus, LeaseStore
from longjobs.engine.settings import Settings
from longjobs.engine.settle import SettleError, complete, reassert_release, release, settle_ended, stop_and_close
from longjobs.engine.visibility import ChangeOutcome, FailureClass, VisibilityChange, VisibilityClient
from longjobs.sim.clock import FakeClock
from tests.functional.conftest import Harness
from tests.functional.test_extender_faults import FakeStepFunctions
from tests.functional.test_lease_store import held, with_holds

SETTINGS = Settings(policy="threshold", visibility_timeout_s=300, threshold_s=100, extender_period_s=1)
ARN = "arn:aws:states:us-east-1:123456789012:execution:jobs:m-1"
FAILED = LastError("execution failed")


@dataclass
class Answering:
    """A visibility client whose every change gets one answer, each change asked recorded."""

    failure: FailureClass | None = None
    asked: list[VisibilityChange] = field(default_factory=list)

    def change(self, change: VisibilityChange) -> ChangeOutcome:
        self.asked.append(change)
        error = None if self.failure is None else "ThrottlingException: Rate exceeded"
        return ChangeOutcome(change.key, 0.0, self.failure, error)


def leased(harness: Harness) -> tuple[Lease, LeaseStore, FakeClock]:
    """An ACTIVE lease of a running attempt whose release delay is 30 s."""
    harness.send()
    [lease] = harness.receive_and_lease(SETTINGS, execution_arn=ARN, release_delay_s=30)
    return lease, harness.store(SETTINGS), FakeClock(time.time())


def test_settle_release_gives_the_message_back_after_the_delay_asked(harness: Harness) -> None:
    """A release asked with its own delay (a start that never happened gives the message back at once)
    uses it, not the lease's."""
    lease, store, clock = leased(harness)
    visibility = Answering()

    closed = release(lease, store=store, visibility=visibility, clock=clock, reason=FAILED, delay_s=0)  # type: ignore[arg-type]

    assert closed is not None and closed.status is LeaseStatus.RELEASED
    assert [change.visibility_timeout_s for change in visibility.asked] == [0]
    assert closed.visible_until == pytest.approx(clock.now())


def test_settle_release_of_a_lease_changed_meanwhile_asks_nothing(harness: Harness) -> None:
    """A lease another writer changed first (a newer receive, another settlement) is theirs: the release
    returns None and leaves the message's visibility alone."""
    lease, store, clock = leased(harness)
    assert store.close(lease, LeaseStatus.SUCCEEDED, now=clock.now()) is not None  # the workflow's close
    visibility = Answering()

    assert release(lease, store=store, visibility=visibility, clock=clock, reason=FAILED) is None  # type: ignore[arg-type]
    assert visibility.asked == []


def test_settle_release_refused_for_a_passing_reason_stays_released_with_a_note(harness: Harness) -> None:
    """SQS throttled the release: the message comes back when its chunk ends, so the lease stays RELEASED,
    the refusal noted, and the closed lease is returned."""
    lease, store, clock = leased(harness)

    closed = release(
        lease,
        store=store,
        visibility=Answering(FailureClass.THROTTLED),  # type: ignore[arg-type]
        clock=clock,
        reason=FAILED,
    )

    assert isinstance(closed, Lease) and closed.status is LeaseStatus.RELEASED
    assert closed.last_error is not None and "release visibility change failed" in str(closed.last_error)


def test_settle_release_of_a_lost_handle_closes_lost(harness: Harness) -> None:
    lease, store, clock = leased(harness)
    harness.sqs.delete_message(QueueUrl=harness.queue_url, ReceiptHandle=lease.receipt_handle)

    closed = release(
        lease, store=store, visibility=VisibilityClient(harness.sqs, clock=clock), clock=clock, reason=FAILED
    )

    assert isinstance(closed, Lease) and closed.status is LeaseStatus.LOST
    stored = store.get(lease.message_id)
    assert stored is not None and stored.status is LeaseStatus.LOST


def test_settle_reassert_release_leaves_a_lease_not_released_alone(harness: Harness) -> None:
    """Only a release is re-applied: an ACTIVE lease's message made visible would go to a second job."""
    lease, _, clock = leased(harness)
    visibility = Answering()

    assert reassert_release(lease, visibility=visibility, clock=clock) is False  # type: ignore[arg-type]
    assert visibility.asked == []


@pytest.mark.parametrize(
    ("closed_at", "delay_s"),
    [(True, 20), (False, 30)],
    ids=["released-here-at-its-recorded-time", "released-by-the-workflow-after-its-delay"],
)
def test_settle_reassert_release_gives_the_message_back_when_the_release_said(
    harness: Harness, closed_at: bool, delay_s: int
) -> None:
    """A release this code made recorded when the message returns (20 s from now here); the workflow's
    records no time, so the lease's release delay (30 s) counts from now."""
    lease, _, clock = leased(harness)
    released = replace(
        lease,
        status=LeaseStatus.RELEASED,
        visible_until=clock.now() + 20,
        closed_at=clock.now() - 1 if closed_at else None,
    )
    visibility = Answering()

    assert reassert_release(released, visibility=visibility, clock=clock) is True  # type: ignore[arg-type]
    assert [change.visibility_timeout_s for change in visibility.asked] == [delay_s]


def test_settle_complete_of_a_lost_handle_still_closes_succeeded(harness: Harness) -> None:
    """SQS refuses the delete's handle (ReceiptHandleIsInvalid), but the job did succeed: the lease closes
    SUCCEEDED with the refusal noted, and a redelivery finds it so and deletes without running again."""
    lease, store, clock = leased(harness)

    closed = complete(replace(lease, receipt_handle="not-a-handle"), store=store, sqs=harness.sqs, clock=clock)

    assert closed is not None and closed.status is LeaseStatus.SUCCEEDED
    assert closed.last_error is not None and closed.last_error.error == "delete refused"


def test_settle_complete_whose_delete_is_throttled_leaves_the_lease_active(harness: Harness) -> None:
    """A throttled delete may pass: the lease stays ACTIVE and due, and the caller tries again."""
    lease, store, clock = leased(harness)
    sqs = boto3.client("sqs", region_name="us-east-1")
    stubber = Stubber(sqs)
    stubber.add_client_error("delete_message", "ThrottlingException", "Rate exceeded", http_status_code=400)

    with stubber, pytest.raises(SettleError, match="delete of"):
        complete(lease, store=store, sqs=sqs, clock=clock)

    stored = store.get(lease.message_id)
    assert stored is not None and stored.status is LeaseStatus.ACTIVE


def test_settle_ended_refuses_an_execution_that_still_runs(harness: Harness) -> None:
    lease, store, clock = leased(harness)
    for status in ("RUNNING", "PENDING_REDRIVE"):
        with pytest.raises(ValueError, match="nothing to settle"):
            settle_ended(
                lease,
                status,
                store=store,
                visibility=VisibilityClient(harness.sqs, clock=clock),
                sqs=harness.sqs,
                clock=clock,
            )
    stored = store.get(lease.message_id)
    assert stored is not None and stored.status is LeaseStatus.ACTIVE


def test_settle_stop_and_close_lost_to_the_executions_own_close_frees_its_holds(harness: Harness) -> None:
    """The execution closed its own lease (its job succeeded) while the stop was on its way, and the stop cut
    it off before it freed its job lock and slot: the close of the unholdable lease loses its race, and frees
    them (each conditional on that execution still holding it). Nothing else would until the sweep."""
    store = harness.store(Settings(shards=4))
    current = with_holds(store)
    assert current.execution_arn is not None
    harness.dynamodb.update_item(  # the workflow's close, step by step: SUCCEEDED, its holds not yet freed
        TableName="leases",
        Key={"pk": {"S": current.message_id}},
        UpdateExpression="SET #status = :done, version = version + :one",
        ExpressionAttributeNames={"#status": "status"},
        ExpressionAttributeValues={":done": {"S": LeaseStatus.SUCCEEDED.value}, ":one": {"N": "1"}},
    )
    assert all(held(store, current).values())
    stepfunctions = FakeStepFunctions({current.execution_arn: "RUNNING"})

    closed = stop_and_close(
        current,
        LeaseStatus.CAPPED,
        stepfunctions=stepfunctions,  # type: ignore[arg-type]
        store=store,
        clock=FakeClock(time.time()),
        reason=LastError("max renewal duration reached"),
    )

    assert closed is None and stepfunctions.stopped == [current.execution_arn]
    assert not any(held(store, current).values())
