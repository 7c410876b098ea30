"""One execution per message: every step is fenced by the attempt that owns the lease (invariant 8).

Each test walks a path where an earlier version ran a message's job twice, let a message lapse, or
hid a failed job's message for a whole chunk: an older attempt settling a newer one's message, a
throttled visibility change on a redelivery, a StartExecution that took effect but answered 500, a
closed lease whose execution still runs, a renewal racing a release, and a lease that can no longer
be held while its execution runs.

StartExecution refused past the client's retries (spends no attempt; its own cap and DLQ reason) is
checked on virtual time: tests/sim/test_start_refused.py.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import moto.sqs.models as sqs_models
import pytest
from botocore.exceptions import ClientError

from longjobs.engine.delivery.types import Delivery, Outcome
from longjobs.engine.execution import STOP_ERROR, execution_arn, execution_name
from longjobs.engine.extender.service import renew_due
from longjobs.engine.lease import LastError, Lease, LeaseStatus, successor_version
from longjobs.engine.receiver.service import receive
from longjobs.engine.settle import release
from longjobs.engine.visibility import ChangeOutcome, FailureClass
from tests.functional.conftest import STATE_MACHINE_ARN, Flow


def started(flow: Flow, job_id: str, **params: Any) -> tuple[str, Lease]:
    """Send a wait job and let the receiver start its first attempt."""
    message_id = flow.send_job(job_id, **params)
    assert flow.deliver() == {message_id: Outcome.STARTED}
    lease = flow.lease(message_id)
    assert lease.execution_arn is not None
    return message_id, lease


def redeliver(flow: Flow, lease: Lease) -> Delivery:
    """The message shows up again (a lapse, a release): SQS hands it out with a newer handle."""
    flow.sqs.change_message_visibility(
        QueueUrl=flow.harness.queue_url, ReceiptHandle=lease.receipt_handle, VisibilityTimeout=0
    )
    [delivery] = flow.receive_batch()
    return delivery


def history_types(flow: Flow, arn: str) -> list[str]:
    events = flow.harness.stepfunctions.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    return [event["type"] for event in events]


def wait_until_ended(flow: Flow, arn: str, timeout_s: float = 20) -> dict[str, Any]:
    """Wait for an execution to end without running the extender (the lease is not ours to renew here)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        described: dict[str, Any] = flow.harness.stepfunctions.describe_execution(executionArn=arn)
        if described["status"] != "RUNNING":
            return described
        time.sleep(0.1)
    raise AssertionError(f"{arn} still running")


def newer_attempt(flow: Flow, old: Lease) -> Lease:
    """Attempt 2 holds the message: the lease was closed (capped here) and a newer receive replaced it."""
    capped = flow.receiver.store.close(
        old, LeaseStatus.CAPPED, now=time.time(), error=LastError("max renewal duration reached")
    )
    assert capped is not None
    delivery = redeliver(flow, old)
    now = time.time()
    second = replace(
        old,
        receipt_handle=delivery.receipt_handle,
        receive_count=delivery.receive_count,
        received_at=now,
        visible_until=now + 60,
        renew_at=now + 55,
        renew_until=now + 3600,
        execution_arn=execution_arn(STATE_MACHINE_ARN, execution_name(old.message_id, 2)),
        attempt=2,
        status=LeaseStatus.ACTIVE,
        last_error=None,
        closed_at=None,
        version=successor_version(capped),
    )
    assert flow.receiver.store.create(second, replacing=capped)
    flow.sqs.change_message_visibility(
        QueueUrl=flow.harness.queue_url, ReceiptHandle=second.receipt_handle, VisibilityTimeout=60
    )
    return flow.lease(old.message_id)


@pytest.mark.parametrize("fails", [True, False], ids=["failing", "succeeding"])
def test_workflow_older_attempt_settles_nothing_of_a_newer_attempt(flow: Flow, fails: bool) -> None:
    message_id, first = started(flow, "outlived", seconds=2, fail=fails)
    assert first.execution_arn is not None
    flow.wait_for_job(first.execution_arn)  # attempt 1 runs its job: it held its message when it started
    second = newer_attempt(flow, first)

    ended = wait_until_ended(flow, first.execution_arn)

    assert ended["status"] == "FAILED"
    assert ended["error"] == (STOP_ERROR if not fails else "WaitJobFailed")
    now = flow.lease(message_id)
    assert now.status is LeaseStatus.ACTIVE, "attempt 2's lease is untouched"
    assert (now.execution_arn, now.receipt_handle, now.version) == (
        second.execution_arn,
        second.receipt_handle,
        second.version,
    )
    assert flow.harness.visible_messages() == [], "attempt 2's message is neither released nor deleted"
    attributes = flow.sqs.get_queue_attributes(QueueUrl=flow.harness.queue_url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "1"


@pytest.mark.parametrize("lease_state", ["released", "another_attempt"])
def test_workflow_execution_without_its_lease_ends_before_running_its_job(flow: Flow, lease_state: str) -> None:
    """A StartExecution whose answer got lost may land after reconciliation released the lease (or after a
    newer attempt took it): the execution must not run its job without holding the message."""
    message_id = flow.harness.send(json.dumps({"job_id": "late-start", "type": "wait", "params": {"seconds": 30}}))
    own = execution_name(message_id, 1)
    [lease] = flow.harness.receive_and_lease(flow.settings, execution_arn=execution_arn(STATE_MACHINE_ARN, own))
    if lease_state == "released":
        closed = release(
            lease,
            store=flow.receiver.store,
            visibility=flow.receiver.visibility,
            clock=flow.receiver.clock,
            reason=LastError("execution never started"),
        )
        assert closed is not None
        late_name = own
    else:
        late_name = execution_name(message_id, 7)
    before = flow.lease(message_id)
    job = {"job_id": "late-start", "type": "wait", "params": {"seconds": 30, "fail": False}}
    payload = {"message_id": message_id, "attempt": 1, "queue_url": flow.harness.queue_url, "release_delay_s": 0}

    late = flow.harness.stepfunctions.start_execution(
        stateMachineArn=STATE_MACHINE_ARN, name=late_name, input=json.dumps({**payload, "job": job})
    )["executionArn"]

    ended = wait_until_ended(flow, late, timeout_s=10)
    assert (ended["status"], ended["error"]) == ("FAILED", STOP_ERROR)
    assert "ParallelStateEntered" not in history_types(flow, late), "the job never ran"
    after = flow.lease(message_id)
    assert (after.status, after.version) == (before.status, before.version)


def test_redelivery_with_throttled_first_visibility_change_keeps_the_running_job(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    message_id, first = started(flow, "throttled-redelivery", seconds=4)
    delivery = redeliver(flow, first)

    def throttled(change: Any) -> ChangeOutcome:
        return ChangeOutcome(change.key, time.time(), FailureClass.THROTTLED, "ThrottlingException: Rate exceeded")

    with monkeypatch.context() as patch:
        patch.setattr(flow.receiver.visibility, "change", throttled)
        outcome = receive(flow.receiver, delivery)

    assert outcome is Outcome.RUNNING, "nothing released, nothing started"
    adopted = flow.lease(message_id)
    assert adopted.active and adopted.receive_count == 2 and adopted.receipt_handle == delivery.receipt_handle
    assert adopted.visible_until <= time.time(), "the first chunk was not set: due at once"
    assert flow.harness.visible_messages() == [], "still hidden by the mapping's receive"
    assert [e["name"] for e in flow.executions()] == [execution_name(message_id, 1)]
    assert first.execution_arn is not None
    assert flow.wait_for_execution(first.execution_arn)["status"] == "SUCCEEDED"
    assert flow.lease(message_id).status is LeaseStatus.SUCCEEDED


def internal_error(operation: str) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": "InternalServerError", "Message": "We encountered an internal error."},
            "ResponseMetadata": {"HTTPStatusCode": 500},
        },
        operation,
    )


@pytest.mark.parametrize("describe_fails", [False, True], ids=["answer-found", "answer-unknown"])
def test_ambiguous_start_execution_starts_no_second_execution(
    flow: Flow, monkeypatch: pytest.MonkeyPatch, describe_fails: bool
) -> None:
    """StartExecution took effect, but the caller got a 500: the message must not be given back."""
    message_id = flow.send_job("ambiguous", seconds=3)
    real_start = flow.receiver.stepfunctions.start_execution
    real_describe = flow.receiver.stepfunctions.describe_execution

    def start_then_fail(**kwargs: Any) -> Any:
        real_start(**kwargs)
        raise internal_error("StartExecution")

    def describe(**kwargs: Any) -> Any:
        if describe_fails:
            raise internal_error("DescribeExecution")
        return real_describe(**kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(flow.receiver.stepfunctions, "start_execution", start_then_fail)
        patch.setattr(flow.receiver.stepfunctions, "describe_execution", describe)
        outcomes = flow.deliver()

    assert outcomes == {message_id: Outcome.NOT_STARTED if describe_fails else Outcome.STARTED}
    lease = flow.lease(message_id)
    assert lease.active, "the lease stays ACTIVE: the execution may be running"
    assert flow.harness.visible_messages() == []
    # A lapse now would hand the message out again: the redelivery adopts, it does not start attempt 2.
    again = redeliver(flow, lease)
    assert receive(flow.receiver, again) is Outcome.RUNNING
    assert [e["name"] for e in flow.executions()] == [execution_name(message_id, 1)]
    assert lease.execution_arn is not None
    assert flow.wait_for_execution(lease.execution_arn)["status"] == "SUCCEEDED"


def test_redelivery_of_a_closed_lease_whose_execution_still_runs_adopts_it(flow: Flow) -> None:
    """The extender closed the lease (its stop did not land): a redelivery must not start attempt 2."""
    message_id, first = started(flow, "closed-but-running", seconds=3)
    assert (
        flow.receiver.store.close(first, LeaseStatus.LOST, now=time.time(), error=LastError("handle refused"))
        is not None
    )
    delivery = redeliver(flow, first)

    assert receive(flow.receiver, delivery) is Outcome.RUNNING
    adopted = flow.lease(message_id)
    assert adopted.active and adopted.execution_arn == first.execution_arn and adopted.receive_count == 2
    assert [e["name"] for e in flow.executions()] == [execution_name(message_id, 1)]
    assert first.execution_arn is not None
    assert flow.wait_for_execution(first.execution_arn)["status"] == "SUCCEEDED"
    assert flow.lease(message_id).status is LeaseStatus.SUCCEEDED


def test_extender_stops_the_execution_of_a_lease_past_its_max_renewal_before_closing_it(flow: Flow) -> None:
    message_id, lease = started(flow, "capped", seconds=60)
    assert lease.execution_arn is not None
    flow.wait_for_job(lease.execution_arn)  # moto loses a stop that lands before the job's branch opens
    flow.harness.dynamodb.update_item(
        TableName="leases",
        Key={"pk": {"S": message_id}},
        UpdateExpression="SET renew_until = :past, renew_at = :past",
        ExpressionAttributeValues={":past": {"N": str(round(time.time() - 1, 3))}},
    )

    # The lease as the stop found it: still ACTIVE, so the message was never let go while the job ran. (Its
    # visibility, which no extender renews here, may run out first on a busy machine: no time is compared.)
    seen: list[LeaseStatus] = []

    class StopWatch:
        def __getattr__(self, name: str) -> Any:
            return getattr(flow.harness.stepfunctions, name)

        def stop_execution(self, **kwargs: Any) -> Any:
            seen.append(flow.lease(message_id).status)
            return flow.harness.stepfunctions.stop_execution(**kwargs)

    report = renew_due(replace(flow.extender, stepfunctions=StopWatch()), deadline=time.time() + 5)

    assert (report.capped, report.stopped) == (1, 1)
    capped = flow.lease(message_id)
    assert capped.status is LeaseStatus.CAPPED and capped.last_error == LastError("max renewal duration reached")
    assert seen == [LeaseStatus.ACTIVE], "stopped before the lease was let go"
    assert wait_until_ended(flow, lease.execution_arn, timeout_s=10)["status"] == "ABORTED"


def adopted_after(flow: Flow, message_id: str, first: Lease) -> Lease:
    """A redelivery adopts the message whose execution runs: a newer handle and version, same execution."""
    assert receive(flow.receiver, redeliver(flow, first)) is Outcome.RUNNING
    adopted = flow.lease(message_id)
    assert adopted.version != first.version and adopted.execution_arn == first.execution_arn
    return adopted


@pytest.mark.parametrize("closed", [None, LeaseStatus.LOST])
def test_redelivery_adopting_a_running_attempt_keeps_its_hard_stop(flow: Flow, closed: LeaseStatus | None) -> None:
    """A redelivery (a duplicate, a lapse) that adopts a running attempt takes its handle, not a new hold:
    the attempt still ends at its first receive's `renew_until` (`max_renewal_s`, SQS's 12 h), so a job
    redelivered now and then cannot run on past its cap. Closed (LOST) with its execution running, the
    same."""
    message_id, first = started(flow, "kept-cap", seconds=60)
    cap = round(time.time() + 1, 3)  # nearer than the first chunk's renewal
    flow.harness.dynamodb.update_item(
        TableName="leases",
        Key={"pk": {"S": message_id}},
        UpdateExpression="SET renew_until = :cap",
        ExpressionAttributeValues={":cap": {"N": str(cap)}},
    )
    first = flow.lease(message_id)
    if closed is not None:
        assert flow.receiver.store.close(first, closed, now=time.time(), error=LastError("handle refused"))

    adopted = adopted_after(flow, message_id, first)

    assert adopted.active and adopted.receive_count == 2
    assert adopted.renew_until == cap, "the attempt's hard stop, not a new receive's"
    assert adopted.renew_at is not None and adopted.renew_at <= cap, "due by its hard stop, not a chunk later"


def test_extender_stops_nothing_on_a_stale_index_read_of_an_adopted_lease(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect 8 of the protocol review: the due index still shows the lease as read before a redelivery
    adopted it, past its max renewal; the table has the adopted lease. The extender must re-read before
    it stops the execution that now holds the message."""
    message_id, first = started(flow, "adopted-stale-index", seconds=4)
    adopted_after(flow, message_id, first)
    stale = replace(first, renew_until=time.time() - 1, renew_at=time.time() - 1)
    monkeypatch.setattr(flow.extender.store.index, "due", lambda before=None, **_: [stale])

    report = renew_due(flow.extender, deadline=time.time() + 5)

    assert (report.capped, report.stopped, report.conflicts) == (0, 0, 1)
    assert first.execution_arn is not None
    assert flow.harness.stepfunctions.describe_execution(executionArn=first.execution_arn)["status"] == "RUNNING"
    assert flow.lease(message_id).active


def test_extender_stops_nothing_when_the_12_hour_refusal_names_a_handle_adopted_since(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same race on the 12 h path: SQS refuses the renewal of the handle the extender read as past the
    limit of its receive, while a redelivery has adopted the message with a newer handle."""
    message_id, first = started(flow, "adopted-capped", seconds=4)
    due_now = replace(first, renew_at=time.time() - 1, visible_until=time.time())
    adopted_after(flow, message_id, first)
    monkeypatch.setattr(flow.extender.store.index, "due", lambda before=None, **_: [due_now])

    def refused(change: Any) -> ChangeOutcome:
        return ChangeOutcome(change.key, time.time(), FailureClass.CAPPED, "InvalidParameterValue: beyond the limit")

    monkeypatch.setattr(flow.extender.visibility, "change", refused)
    monkeypatch.setattr(flow.extender.visibility, "change_many", lambda changes: [refused(c) for c in changes])

    report = renew_due(flow.extender, deadline=time.time() + 5)

    assert (report.capped, report.stopped, report.conflicts) == (0, 0, 1)
    assert first.execution_arn is not None
    assert flow.harness.stepfunctions.describe_execution(executionArn=first.execution_arn)["status"] == "RUNNING"


def test_extender_keeps_an_unholdable_lease_while_its_execution_cannot_be_stopped(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    message_id, lease = started(flow, "unstoppable", seconds=5)
    flow.harness.dynamodb.update_item(
        TableName="leases",
        Key={"pk": {"S": message_id}},
        UpdateExpression="SET renew_until = :past, renew_at = :past",
        ExpressionAttributeValues={":past": {"N": str(round(time.time() - 1, 3))}},
    )

    def throttled(**kwargs: Any) -> Any:
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "StopExecution")

    with monkeypatch.context() as patch:
        patch.setattr(flow.extender.stepfunctions, "stop_execution", throttled)
        report = renew_due(flow.extender, deadline=time.time() + 5)

    assert (report.capped, report.stopped, report.failed) == (0, 0, 1)
    assert flow.lease(message_id).active, "not let go while its execution may run"
    assert lease.execution_arn is not None
    assert flow.harness.stepfunctions.describe_execution(executionArn=lease.execution_arn)["status"] == "RUNNING"


def test_renewal_racing_a_release_applies_the_release_again(flow: Flow, monkeypatch: pytest.MonkeyPatch) -> None:
    """The extender read the lease ACTIVE; the job failed and its release landed; then the renewal's
    visibility change landed and hid the message for a whole chunk. The release must win."""
    message_id = flow.harness.send(json.dumps({"job_id": "raced", "type": "wait", "params": {"seconds": 0}}))
    [lease] = flow.harness.receive_and_lease(flow.settings, release_delay_s=0)
    extender = flow.later(3)  # the lease is due for renewal
    stale = extender.store.index.due(before=extender.clock.now() + 1)
    assert [s.message_id for s in stale] == [message_id]
    released = release(
        lease,
        store=flow.receiver.store,
        visibility=flow.receiver.visibility,
        clock=flow.receiver.clock,
        reason=LastError("failed"),
    )
    assert released is not None and flow.harness.visible_messages() == [message_id]

    monkeypatch.setattr(extender.store.index, "due", lambda before=None, **_: stale)
    report = renew_due(extender, deadline=time.time() + 5)

    assert (report.renewed, report.conflicts, report.releases_reasserted) == (0, 1, 1)
    assert flow.harness.visible_messages() == [message_id], "visible after the release delay, not after a chunk"
    assert flow.lease(message_id).status is LeaseStatus.RELEASED


def test_workflow_marks_a_release_refused_for_a_lost_handle_lost(flow: Flow) -> None:
    message_id, lease = started(flow, "gone", seconds=2, fail=True)
    # The message is deleted under the job (by hand, or it was received again and settled elsewhere).
    flow.sqs.delete_message(QueueUrl=flow.harness.queue_url, ReceiptHandle=lease.receipt_handle)
    assert lease.execution_arn is not None

    assert wait_until_ended(flow, lease.execution_arn)["status"] == "FAILED"

    lost = flow.lease(message_id)
    assert lost.status is LeaseStatus.LOST
    assert "ReceiptHandleIsInvalid" in str(lost.last_error)


def test_redelivery_whose_receive_count_did_not_grow_is_adopted_by_its_handle(flow: Flow) -> None:
    """SQS's ApproximateReceiveCount is approximate ("the number of times a message has been received
    across all queues but not deleted", ReceiveMessage, Amazon SQS API Reference:
    https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html), so a
    newer receive may show the lease's own count. It is told apart by its handle: SQS accepts the new
    handle, and the lease records it (else the extender would renew with a stale one and lose the job)."""
    message_id, lease = started(flow, "same-count", seconds=1)  # ends within its first chunk: no renewal timing
    newer = redeliver(flow, lease)
    same_count = replace(newer, receive_count=lease.receive_count)
    assert receive(flow.receiver, same_count) is Outcome.RUNNING
    adopted = flow.lease(message_id)
    assert adopted.active and adopted.receipt_handle == newer.receipt_handle
    assert adopted.execution_arn == lease.execution_arn, "the running execution is kept, nothing new started"
    assert [e["name"] for e in flow.executions()] == [execution_name(message_id, 1)]
    assert receive(flow.receiver, same_count) is Outcome.RUNNING, "the same receive again: resumed, not adopted"
    assert lease.execution_arn is not None
    assert flow.wait_for_execution(lease.execution_arn)["status"] == "SUCCEEDED"


def test_workflow_success_after_an_adoption_deletes_the_message_by_its_newest_handle(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A redelivery adopted the running attempt after its execution read the lease: the lease names a newer
    handle than the execution's. The success close, conditional on the execution's handle, is refused; the
    workflow reads the lease and closes and deletes by the handle it names. A delete by the older handle is
    accepted and may leave the message on the queue: "you must provide the most recently received receipt
    handle ... otherwise, the request succeeds, but the message might not be deleted"
    (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html). moto
    deletes by any handle the message had, so the handle each delete names is recorded."""
    deleted_by: list[str] = []
    delete = sqs_models.Queue.delete_message

    def recorded(queue: Any, receipt_handle: str) -> None:
        deleted_by.append(receipt_handle)
        delete(queue, receipt_handle)

    monkeypatch.setattr(sqs_models.Queue, "delete_message", recorded)
    message_id, first = started(flow, "adopted-then-done", seconds=3)
    assert first.execution_arn is not None
    flow.wait_for_job(first.execution_arn)  # the execution has read its lease, and the first handle with it
    adopted = adopted_after(flow, message_id, first)
    assert adopted.receipt_handle != first.receipt_handle

    assert flow.wait_for_execution(first.execution_arn)["status"] == "SUCCEEDED"
    done = flow.lease(message_id)
    assert done.status is LeaseStatus.SUCCEEDED and done.receipt_handle == adopted.receipt_handle
    assert deleted_by == [adopted.receipt_handle]
