"""`longjobs.engine.cancel` on moto with the real workflow: a cancel settles once whatever the message is
doing (running, waiting for a slot, parked, succeeding), stops its execution, frees its holds, and puts it
in the DLQ as `Cancelled`, never back on its queue as a retry.

The type `limited` is the built-in `wait` runner with `max_concurrency` 1 (as in test_admission.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from longjobs.engine import cancel
from longjobs.engine.delivery.types import Outcome
from longjobs.engine.lease import LastError, Lease, LeaseStatus, LeaseStore
from longjobs.engine.lease.lock import job_lock_key
from longjobs.engine.receiver.service import receive
from tests.functional.conftest import Flow, running_flow
from tests.functional.test_admission import (
    CATALOG,
    LIMITED,
    SLOT,
    WAITING_URL,
    admit,
    parked_copies,
    parking_flow,
    queued,
)

REASON = "wrong input date"


@pytest.fixture
def flow() -> Iterator[Flow]:
    with running_flow(CATALOG, max_attempts=2) as built:
        yield built


def status_of(flow: Flow, arn: str, timeout_s: float = 30) -> str:
    """The execution's status once it has left RUNNING (moto's engine ends an abort on its thread)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = str(flow.harness.stepfunctions.describe_execution(executionArn=arn)["status"])
        if status != "RUNNING":
            return status
        time.sleep(0.05)
    raise AssertionError(f"{arn} still running")


def assert_dead_lettered_as_cancelled(flow: Flow, message_id: str, job_id: str) -> dict[str, Any]:
    [letter] = flow.dlq_messages()
    attributes = {name: value["StringValue"] for name, value in letter["MessageAttributes"].items()}
    assert attributes["ErrorType"] == cancel.CANCELLED
    assert attributes["ErrorMessage"] == REASON
    assert attributes["OriginalMessageId"] == message_id
    assert json.loads(letter["Body"])["job_id"] == job_id, "the body is the job message, ready for a redrive"
    return attributes


class StopsRecorded:
    """Step Functions, recording each StopExecution's arguments (moto's DescribeExecution has no cause)."""

    def __init__(self, stepfunctions: Any) -> None:
        self._sfn = stepfunctions
        self.calls: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sfn, name)

    def stop_execution(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return self._sfn.stop_execution(**kwargs)


def test_cancel_running_job_stops_it_dead_letters_it_and_frees_its_lock_and_slot(flow: Flow) -> None:
    message_id = flow.send_job("nightly", LIMITED, seconds=60)
    assert flow.deliver() == {message_id: Outcome.STARTED}
    running = flow.lease(message_id)
    flow.wait_for_job(running.execution_arn or "")

    stops = StopsRecorded(flow.harness.stepfunctions)

    report = cancel.cancel(flow.canceller(stepfunctions=stops), message_id, REASON)

    assert (report.outcome, report.previous_status) == (cancel.Outcome.CANCELLED, "ACTIVE")
    assert report.execution_stopped == running.execution_arn and report.holds_released and report.deleted
    assert status_of(flow, running.execution_arn or "") == "ABORTED"
    assert stops.calls == [
        {"executionArn": running.execution_arn, "error": cancel.CANCELLED, "cause": f"cancelled: {REASON}"}
    ]
    lease = flow.lease(message_id)
    assert lease.status is LeaseStatus.CANCELLED and lease.last_error == LastError("Cancelled", REASON)
    record = cancel.CancelRecord.of(lease)
    assert record is not None and record.done and record.dead_letter_id == report.dead_letter_id
    assert_dead_lettered_as_cancelled(flow, message_id, "nightly")
    assert queued(flow) == 0, "deleted from the jobs queue: it never comes back as a retry"
    lock = flow.receiver.store.locks.get(job_lock_key("nightly"))
    slot = flow.receiver.store.locks.get(SLOT)
    assert lock is not None and not lock.held and slot is not None and not slot.held
    assert flow.receiver.store.index.due() == [], "nothing left for the extender to renew"


def test_cancel_whose_mark_landed_with_its_answer_lost_reports_cancelled(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mark lands and its answer is lost (a timeout; botocore's retry then finds its condition false,
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Programming.Errors.html#Programming.Errors.RetryAndBackoff):
    the cancel reads its own mark back and reports that it cancelled the message, not that it completed an
    earlier cancel."""
    message_id = flow.send_job("nightly", LIMITED, seconds=60)
    assert flow.deliver() == {message_id: Outcome.STARTED}
    flow.wait_for_job(flow.lease(message_id).execution_arn or "")
    real_mark = cancel.mark_cancelled
    lost: list[str] = []

    def mark_then_lose_the_answer(store: LeaseStore, lease: Lease, **kwargs: Any) -> Lease | None:
        marked = real_mark(store, lease, **kwargs)
        if not lost and marked is not None:
            lost.append(lease.message_id)
            return None  # as the retry of a write that landed answers: its condition no longer holds
        return marked

    monkeypatch.setattr(cancel, "mark_cancelled", mark_then_lose_the_answer)
    report = cancel.cancel(flow.canceller(), message_id, REASON)

    assert lost == [message_id]
    assert (report.outcome, report.previous_status) == (cancel.Outcome.CANCELLED, "ACTIVE")
    assert report.deleted and report.holds_released
    assert_dead_lettered_as_cancelled(flow, message_id, "nightly")


def test_cancel_waiting_message_dead_letters_its_job_and_it_is_never_admitted(flow: Flow) -> None:
    running = flow.send_job("first", LIMITED, seconds=1)
    assert flow.deliver() == {running: Outcome.STARTED}
    waiting = flow.send_job("second", LIMITED, seconds=1)
    assert flow.deliver() == {waiting: Outcome.WAITING_FOR_SLOT}

    report = cancel.cancel(flow.canceller(), waiting, REASON)

    assert (report.outcome, report.previous_status, report.execution_stopped) == (
        cancel.Outcome.CANCELLED,
        "WAITING",
        None,
    )
    assert_dead_lettered_as_cancelled(flow, waiting, "second")
    assert flow.lease(waiting).status is LeaseStatus.CANCELLED
    assert flow.wait_for_execution(flow.lease(running).execution_arn or "")["status"] == "SUCCEEDED"
    assert admit(flow).admitted == 0, "the cancelled message left the waiting line"
    assert flow.lease(waiting).status is LeaseStatus.CANCELLED and queued(flow) == 0


def test_cancel_parked_message_refuses_its_copy_which_never_runs_and_goes_to_the_dlq() -> None:
    with parking_flow() as (flow, first, second):
        third = flow.send_job("third", LIMITED, seconds=1)
        assert flow.deliver() == {third: Outcome.PARKED}
        [copy] = parked_copies(flow)

        report = cancel.cancel(flow.canceller(), third, REASON)

        assert (report.outcome, report.previous_status) == (cancel.Outcome.CANCELLED, "PARKED")
        assert any("sent to the DLQ from its marker" in note for note in report.notes)
        [dead] = flow.dlq_messages()  # at once, from the marker: a copy may never be received before it expires
        assert flow.lease(third).status is LeaseStatus.CANCELLED
        for running in (first, second):
            assert flow.wait_for_execution(flow.lease(running).execution_arn or "")["status"] == "SUCCEEDED"
            admit(flow)
        assert flow.receiver.store.get(copy["MessageId"]) is None, "its copy was received and never started"
        assert queued(flow, WAITING_URL) == 0, "the refused copy was acknowledged"
        names = [execution["name"] for execution in flow.executions()]
        assert not any(name.startswith(copy["MessageId"]) for name in names)
        assert [message["MessageId"] for message in flow.dlq_messages()] == [dead["MessageId"]], "once"
        assert dead["MessageAttributes"]["ErrorType"]["StringValue"] == "Cancelled"
        assert dead["Body"] == copy["Body"]


def test_cancel_after_a_success_reports_already_succeeded_and_does_nothing(flow: Flow) -> None:
    message_id = flow.send_job("quick", "wait", seconds=0)
    assert flow.deliver() == {message_id: Outcome.STARTED}
    assert flow.wait_for_execution(flow.lease(message_id).execution_arn or "")["status"] == "SUCCEEDED"

    report = cancel.cancel(flow.canceller(), message_id, REASON)

    assert report.outcome is cancel.Outcome.ALREADY_SUCCEEDED
    assert flow.lease(message_id).status is LeaseStatus.SUCCEEDED and flow.dlq_messages() == []


class StaleFirstRead:
    """A lease store whose first read of a lease returns `stale` (read before the success landed)."""

    def __init__(self, store: LeaseStore, stale: Lease) -> None:
        self._store = store
        self._stale: Lease | None = stale

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def get(self, message_id: str) -> Lease | None:
        stale, self._stale = self._stale, None
        return stale if stale is not None else self._store.get(message_id)


def test_cancel_racing_a_success_that_landed_first_does_nothing(flow: Flow) -> None:
    message_id = flow.send_job("quick", "wait", seconds=0)
    assert flow.deliver() == {message_id: Outcome.STARTED}
    read_before = flow.lease(message_id)
    assert flow.wait_for_execution(read_before.execution_arn or "")["status"] == "SUCCEEDED"

    store = StaleFirstRead(flow.receiver.store, read_before)
    report = cancel.cancel(flow.canceller(store=store), message_id, REASON)

    assert report.outcome is cancel.Outcome.ALREADY_SUCCEEDED, "its conditional write lost, it read again"
    assert flow.lease(message_id).status is LeaseStatus.SUCCEEDED and flow.dlq_messages() == []


class StopAfterTheEnd:
    """Step Functions whose StopExecution lands only after the execution has ended (a success that raced
    the cancel's stop and won)."""

    def __init__(self, stepfunctions: Any) -> None:
        self._sfn = stepfunctions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sfn, name)

    def stop_execution(self, **kwargs: Any) -> Any:
        deadline = time.monotonic() + 30
        while self._sfn.describe_execution(executionArn=kwargs["executionArn"])["status"] == "RUNNING":
            assert time.monotonic() < deadline, "the execution never ended"
            time.sleep(0.05)
        return self._sfn.stop_execution(**kwargs)


def test_cancel_whose_stop_lands_after_the_job_ended_still_dead_letters_it(flow: Flow) -> None:
    """The mark came first: the job's success after it is not recorded (the workflow's success close refuses
    a CANCELLED lease), so the cancel goes on and the message ends in the DLQ, once, never succeeded."""
    message_id = flow.send_job("quick", "wait", seconds=1)
    assert flow.deliver() == {message_id: Outcome.STARTED}
    arn = flow.lease(message_id).execution_arn or ""
    flow.wait_for_job(arn)  # past its start check: the job runs

    report = cancel.cancel(
        flow.canceller(stepfunctions=StopAfterTheEnd(flow.harness.stepfunctions)), message_id, REASON
    )

    assert report.outcome is cancel.Outcome.CANCELLED and report.deleted
    described = flow.harness.stepfunctions.describe_execution(executionArn=arn)
    assert (described["status"], described.get("error")) == ("FAILED", cancel.CANCELLED)
    assert flow.lease(message_id).status is LeaseStatus.CANCELLED, "its success was never recorded"
    assert_dead_lettered_as_cancelled(flow, message_id, "quick")
    assert queued(flow) == 0


def test_cancel_of_a_released_message_names_no_stop_for_its_failed_execution(flow: Flow) -> None:
    """A released message's execution already failed: the cancel dead-letters the message and reports
    no stopped execution, whatever StopExecution would answer on an ended one."""
    message_id = flow.send_job("failing", "wait", seconds=0, fail=True)
    assert flow.deliver() == {message_id: Outcome.STARTED}
    arn = flow.lease(message_id).execution_arn or ""
    assert flow.wait_for_execution(arn)["status"] == "FAILED"
    assert flow.lease(message_id).status is LeaseStatus.RELEASED

    report = cancel.cancel(flow.canceller(), message_id, REASON)

    assert (report.outcome, report.previous_status, report.execution_stopped) == (
        cancel.Outcome.CANCELLED,
        "RELEASED",
        None,
    )
    described = flow.harness.stepfunctions.describe_execution(executionArn=arn)
    assert (described["status"], described.get("error")) == ("FAILED", "WaitJobFailed"), "left as it ended"
    assert_dead_lettered_as_cancelled(flow, message_id, "failing")


def test_cancel_unknown_id_raises_naming_it(flow: Flow) -> None:
    with pytest.raises(cancel.UnknownId, match="no-such-message"):
        cancel.cancel(flow.canceller(), "no-such-message")
    with pytest.raises(cancel.UnknownId, match="no-such-job"):
        cancel.find_targets(flow.receiver.store, flow.harness.dynamodb, "leases", "no-such-job")


def test_cancel_by_job_id_finds_every_message_of_the_job(flow: Flow) -> None:
    first = flow.send_job("shared", "wait", seconds=0)
    assert flow.deliver() == {first: Outcome.STARTED}
    assert flow.wait_for_execution(flow.lease(first).execution_arn or "")["status"] == "SUCCEEDED"
    second = flow.send_job("shared", "wait", seconds=5)
    assert flow.deliver() == {second: Outcome.STARTED}

    scans: list[dict[str, Any]] = []
    dynamodb = flow.harness.dynamodb
    event = "provide-client-params.dynamodb.Scan"

    def record(params: dict[str, Any], **_: Any) -> None:
        scans.append(dict(params))

    dynamodb.meta.events.register(event, record)
    try:
        targets = cancel.find_targets(flow.receiver.store, dynamodb, "leases", "shared")
    finally:
        dynamodb.meta.events.unregister(event, record)

    # Strongly consistent (DynamoDB's Scan API: with ConsistentRead every write completed before the Scan
    # began is in its response), so a lease written a moment ago is not missed; moto is always consistent.
    assert scans and all(params.get("ConsistentRead") is True for params in scans), scans
    assert targets.by_job and [lease.message_id for lease in targets.leases] == [first, second]
    assert [lease.message_id for lease in targets.to_cancel] == [second], "the one that succeeded is only reported"
    assert [cancel.report_finished(lease).outcome for lease in targets.finished] == [cancel.Outcome.ALREADY_SUCCEEDED]
    # Left to end by itself: moto's StopExecution at the flow's teardown is not always obeyed.
    assert flow.wait_for_execution(flow.lease(second).execution_arn or "")["status"] == "SUCCEEDED"


def test_cancel_cut_short_is_finished_by_cancelling_again(flow: Flow) -> None:
    message_id = flow.send_job("nightly", "wait", seconds=60)
    assert flow.deliver() == {message_id: Outcome.STARTED}
    running = flow.lease(message_id)
    flow.wait_for_job(running.execution_arn or "")

    class DlqDown:
        def __init__(self, sqs: Any) -> None:
            self._sqs = sqs

        def __getattr__(self, name: str) -> Any:
            return getattr(self._sqs, name)

        def send_message(self, **kwargs: Any) -> Any:
            raise RuntimeError("the DLQ send failed")

    with pytest.raises(RuntimeError, match="DLQ send failed"):
        cancel.cancel(flow.canceller(sqs=DlqDown(flow.sqs)), message_id, REASON)
    assert flow.lease(message_id).status is LeaseStatus.CANCELLED and queued(flow) == 1, "kept: not yet in the DLQ"

    report = cancel.cancel(flow.canceller(), message_id, "another reason")

    assert report.outcome is cancel.Outcome.COMPLETED
    assert_dead_lettered_as_cancelled(flow, message_id, "nightly")
    assert queued(flow) == 0
    assert cancel.cancel(flow.canceller(), message_id).outcome is cancel.Outcome.ALREADY_CANCELLED


class DeleteLost:
    """SQS whose DeleteMessage answers and does nothing (the cancel's delete lost)."""

    def __init__(self, sqs: Any) -> None:
        self._sqs = sqs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def delete_message(self, **kwargs: Any) -> Any:
        return {}  # answered, never done


def test_receiver_handler_acknowledges_and_counts_a_redelivery_of_a_cancelled_message(flow: Flow) -> None:
    """The same redelivery through the handler's core, its outcome counted: it is acknowledged (not
    reported failed). Found by the simulation's operator: the handler had no metric for the outcome,
    raised on it and reported the record failed on every receive, until SQS's redrive put the message in
    the DLQ a second time, with no reason."""
    from dataclasses import replace as changed

    from longjobs.functions.receiver import batch_processor, receive_records
    from tests.functional.test_receiver import sqs_event

    message_id = flow.send_job("nightly", "wait", seconds=60)
    [delivery] = flow.receive_batch()
    assert receive(flow.receiver, delivery) is Outcome.STARTED
    running = flow.lease(message_id)
    flow.wait_for_job(running.execution_arn or "")
    cancel.cancel(flow.canceller(sqs=DeleteLost(flow.sqs)), message_id, REASON)
    flow.sqs.change_message_visibility(
        QueueUrl=flow.harness.queue_url, ReceiptHandle=running.receipt_handle, VisibilityTimeout=0
    )
    counted: list[str] = []

    class Sink:
        def add_metric(self, name: str, unit: str, value: float) -> None:
            counted.append(name)

    receiver = changed(flow.receiver, metrics=Sink())
    response = receive_records(receiver, sqs_event(flow, flow.receive_batch()), batch_processor(False))

    assert response == {"batchItemFailures": []}, "acknowledged: the mapping deletes it"
    assert counted == ["JobsAlreadyCancelled"]


def test_receiver_acknowledges_a_redelivery_of_a_cancelled_message(flow: Flow) -> None:
    """The lead's row in the receiver: a message received again after its cancel (its delete lost, or
    its handle refused) is acknowledged, never run. Fails until the receiver has that row."""
    message_id = flow.send_job("nightly", "wait", seconds=60)
    [delivery] = flow.receive_batch()
    assert receive(flow.receiver, delivery) is Outcome.STARTED
    running = flow.lease(message_id)
    flow.wait_for_job(running.execution_arn or "")
    cancel.cancel(flow.canceller(sqs=DeleteLost(flow.sqs)), message_id, REASON)
    flow.sqs.change_message_visibility(
        QueueUrl=flow.harness.queue_url, ReceiptHandle=running.receipt_handle, VisibilityTimeout=0
    )

    outcomes = flow.deliver()

    assert outcomes[message_id] not in (Outcome.STARTED, Outcome.RUNNING, Outcome.SETTLED), outcomes
    assert not outcomes[message_id].deferred, "acknowledged: deleted from the queue"
    assert [e["name"] for e in flow.executions()] == [(running.execution_arn or "").rpartition(":")[2]], "no second run"
    assert flow.lease(message_id).status is LeaseStatus.CANCELLED


class SucceededAlready:
    """Step Functions whose DescribeExecution says SUCCEEDED: the workflow's success close never landed
    (its DynamoDB writes failed for good), so the lease is still ACTIVE while its execution succeeded."""

    def __init__(self, stepfunctions: Any) -> None:
        self._sfn = stepfunctions
        self.stops = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sfn, name)

    def describe_execution(self, **kwargs: Any) -> Any:
        return {**self._sfn.describe_execution(**kwargs), "status": "SUCCEEDED"}

    def stop_execution(self, **kwargs: Any) -> Any:
        self.stops += 1
        return self._sfn.stop_execution(**kwargs)


def test_cancel_of_a_job_whose_execution_succeeded_completes_it_and_sends_nothing(flow: Flow) -> None:
    """The job succeeded but its lease was never closed (reconciliation has not completed it yet): a cancel
    then completes it as reconciliation would (the message deleted, the lease SUCCEEDED) and reports
    "already succeeded". Dead-lettering it as Cancelled would put a job that ran in the DLQ, where a
    redrive runs it again. Found by the simulation's operator (seed 681)."""
    message_id = flow.send_job("nightly", "wait", seconds=60)
    assert flow.deliver() == {message_id: Outcome.STARTED}
    running = flow.lease(message_id)
    flow.wait_for_job(running.execution_arn or "")
    succeeded = SucceededAlready(flow.harness.stepfunctions)

    report = cancel.cancel(flow.canceller(stepfunctions=succeeded), message_id, REASON)

    assert report.outcome is cancel.Outcome.ALREADY_SUCCEEDED
    assert succeeded.stops == 0 and flow.dlq_messages() == []
    assert flow.lease(message_id).status is LeaseStatus.SUCCEEDED
    assert queued(flow) == 0, "completed: deleted from the jobs queue"


def test_cancel_whose_lock_release_failed_stays_unfinished_until_cancelled_again(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Freeing the attempt's job lock failed (its writes throttled): the cancel does not finish, since a
    finished cancel leaves the lease out of the extender's view and the lock would stay held. Cancelling
    again frees it and finishes. Found by the simulation's operator (seed 76)."""
    message_id = flow.send_job("nightly", "wait", seconds=60)
    assert flow.deliver() == {message_id: Outcome.STARTED}
    running = flow.lease(message_id)
    flow.wait_for_job(running.execution_arn or "")
    from longjobs.engine.lease.lock import Locks

    release = Locks.release

    def throttled(*args: Any, **kwargs: Any) -> Any:
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "UpdateItem")

    monkeypatch.setattr(Locks, "release", throttled)
    with pytest.raises(cancel.HoldsNotFreed, match="job#nightly is still held"):
        cancel.cancel(flow.canceller(), message_id, REASON)
    record = cancel.CancelRecord.of(flow.lease(message_id))
    assert record is not None and not record.done and flow.dlq_messages() == []

    monkeypatch.setattr(Locks, "release", release)
    report = cancel.cancel(flow.canceller(), message_id, REASON)

    assert report.outcome is cancel.Outcome.COMPLETED and report.holds_released
    lock = flow.receiver.store.locks.get(job_lock_key("nightly"))
    assert lock is not None and not lock.held
    assert_dead_lettered_as_cancelled(flow, message_id, "nightly")
