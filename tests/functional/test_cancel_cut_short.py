"""A cancel cut short after its mark converges without the operator, and a cancelled job never succeeds.

`longjobs cancel` marks the lease CANCELLED, then stops the execution, then dead-letters the message. When
the stop is refused past its retries, or the operator's process dies after the mark, the job runs on. On
moto with the rendered workflow, these tests hold the promise that follows (issue 38, defect 1): the
workflow's success close refuses a CANCELLED lease (so the job's success is never recorded, and its message
is not deleted as succeeded), its failure path leaves it CANCELLED, and the extender finishes the cancel
(keeps the message hidden, stops the execution, sends the one DLQ copy, deletes the message).

AWS's StopExecution asks an execution to stop and returns its stop date; it does not wait for the job run a
`.sync` task started (https://docs.aws.amazon.com/step-functions/latest/apireference/API_StopExecution.html,
https://docs.aws.amazon.com/step-functions/latest/dg/connect-to-resource.html, "Run a Job (.sync)"), and moto's
engine may run the execution's next state after a stop. So nothing here relies on a stop ending the job: the
workflow's own closes refuse a CANCELLED lease.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from longjobs.engine import cancel
from longjobs.engine.delivery.types import Outcome
from longjobs.engine.extender.service import Extender, renew_due
from longjobs.engine.lease import LeaseStatus
from longjobs.engine.lease.lock import job_lock_key
from longjobs.engine.receiver import service
from tests.functional import test_cancel
from tests.functional.conftest import Flow, OffsetClock
from tests.functional.test_admission import LIMITED, SLOT, queued
from tests.functional.test_cancel import (
    REASON,
    assert_dead_lettered_as_cancelled,
    status_of,
)

flow = test_cancel.flow
"""The fixture these tests share with the cancel's own: a running flow with the wait and limited types."""

LATER_S = cancel.HANDOVER_S + 5
"""How far ahead the extender's clock runs when it is to finish a cancel: past the cancel's own hand-over."""


def throttled(operation: str) -> ClientError:
    return ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, operation)


class Died(BaseException):
    """The operator's process ends here (not an `Exception`: nothing in the cancel catches it)."""


class StopRefused:
    """Step Functions whose StopExecution always fails with `error` (throttled past the SDK's retries)."""

    def __init__(self, stepfunctions: Any, error: BaseException | None = None) -> None:
        self._sfn = stepfunctions
        self.error = error or throttled("StopExecution")
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sfn, name)

    def stop_execution(self, **kwargs: Any) -> Any:
        self.calls += 1
        raise self.error


class Hooked:
    """A client whose `method` runs `before` first (once), then does what the client does."""

    def __init__(self, client: Any, method: str, before: Callable[[], Any]) -> None:
        self._client = client
        self._method = method
        self._before: Callable[[], Any] | None = before

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name != self._method:
            return attr

        def call(**kwargs: Any) -> Any:
            before, self._before = self._before, None
            if before is not None:
                before()
            return attr(**kwargs)

        return call


def extender(flow: Flow, *, ahead_s: float = LATER_S, **changes: Any) -> Extender:
    """The flow's extender on a clock `ahead_s` ahead (past a cancel's hand-over), with the DLQ known."""
    settings = flow.settings.model_copy(update={"dlq_url": flow.dlq_url})
    return replace(flow.extender, settings=settings, clock=OffsetClock(ahead_s), **changes)


def run_extender(ext: Extender) -> None:
    renew_due(ext, deadline=time.time() + 2)


def ended(flow: Flow, arn: str) -> dict[str, Any]:
    """The execution once it has ended, without running the extender meanwhile."""
    status_of(flow, arn)
    described: dict[str, Any] = flow.harness.stepfunctions.describe_execution(executionArn=arn)
    return described


def start(flow: Flow, job_id: str, job_type: str = "wait", **params: Any) -> tuple[str, str]:
    message_id = flow.send_job(job_id, job_type, **params)
    assert flow.deliver() == {message_id: Outcome.STARTED}
    arn = flow.lease(message_id).execution_arn or ""
    flow.wait_for_job(arn)
    return message_id, arn


def assert_finished(flow: Flow, message_id: str, job_id: str) -> cancel.CancelRecord:
    """The cancel's end: the lease CANCELLED and done, one DLQ copy, the message gone, nothing due."""
    lease = flow.lease(message_id)
    assert lease.status is LeaseStatus.CANCELLED
    record = cancel.CancelRecord.of(lease)
    assert record is not None and record.done, record
    assert_dead_lettered_as_cancelled(flow, message_id, job_id)  # exactly one copy
    assert queued(flow) == 0, "deleted from the jobs queue: it never comes back as a retry"
    assert flow.receiver.store.index.due(with_cancelled=True) == [], "nothing left for the extender"
    return record


# -- (a) the cancel's stop fails, and the job then succeeds --------------------------------------------------


def test_job_that_succeeds_after_a_throttled_stop_stays_cancelled_and_is_dead_lettered_once(flow: Flow) -> None:
    message_id, arn = start(flow, "nightly", seconds=2)

    with pytest.raises(ClientError, match="Throttling"):
        cancel.cancel(flow.canceller(stepfunctions=StopRefused(flow.harness.stepfunctions)), message_id, REASON)
    assert flow.lease(message_id).status is LeaseStatus.CANCELLED

    described = ended(flow, arn)  # the job ran its 2 s and reached the success path

    lease = flow.lease(message_id)
    assert lease.status is LeaseStatus.CANCELLED, "the success close must not overwrite CANCELLED"
    assert described["status"] == "FAILED" and described.get("error") == cancel.CANCELLED
    assert queued(flow) == 1, "not deleted as if it had succeeded: the cancel settles it"
    assert flow.dlq_messages() == []

    run_extender(extender(flow))

    assert_finished(flow, message_id, "nightly")
    lock = flow.receiver.store.locks.get(job_lock_key("nightly"))
    assert lock is None or not lock.held


def test_job_that_succeeds_after_the_operator_died_is_finished_by_the_extender(flow: Flow) -> None:
    message_id, arn = start(flow, "nightly", LIMITED, seconds=2)

    def dies() -> None:
        raise Died

    with pytest.raises(Died):
        cancel.cancel(
            flow.canceller(stepfunctions=Hooked(flow.harness.stepfunctions, "stop_execution", dies)), message_id
        )
    ended(flow, arn)
    assert flow.lease(message_id).status is LeaseStatus.CANCELLED

    run_extender(extender(flow))

    record = cancel.CancelRecord.of(flow.lease(message_id))
    assert record is not None and record.done and record.reason == cancel.DEFAULT_REASON
    [letter] = flow.dlq_messages()
    assert letter["MessageAttributes"]["ErrorType"]["StringValue"] == cancel.CANCELLED
    assert queued(flow) == 0 and flow.receiver.store.index.due(with_cancelled=True) == []
    slot = flow.receiver.store.locks.get(SLOT)
    assert slot is not None and not slot.held, "the slot is freed by the cancel the extender finished"


# -- (b) the extender meets a CANCELLED lease whose execution still runs -------------------------------------


def test_extender_keeps_a_cancelled_running_message_hidden_stops_it_and_dead_letters_it(flow: Flow) -> None:
    message_id, arn = start(flow, "nightly", seconds=60)
    with pytest.raises(ClientError):
        cancel.cancel(flow.canceller(stepfunctions=StopRefused(flow.harness.stepfunctions)), message_id, REASON)
    marked = flow.lease(message_id)

    # Its stop is still refused: the extender keeps the message hidden, and tries again later.
    refused = StopRefused(flow.harness.stepfunctions)
    run_extender(extender(flow, stepfunctions=refused))

    assert refused.calls >= 1, "the extender tried to finish the stop"
    kept = flow.lease(message_id)
    assert kept.status is LeaseStatus.CANCELLED and kept.renewal_count > marked.renewal_count
    assert kept.visible_until > marked.visible_until, "renewed: the message stays hidden while its job runs"
    assert flow.harness.visible_messages() == []
    assert flow.harness.stepfunctions.describe_execution(executionArn=arn)["status"] == "RUNNING"
    assert flow.dlq_messages() == []

    run_extender(extender(flow, ahead_s=LATER_S + cancel.FINISH_RETRY_S))

    assert status_of(flow, arn) == "ABORTED"
    assert_finished(flow, message_id, "nightly")
    run_extender(extender(flow, ahead_s=LATER_S + 2 * cancel.FINISH_RETRY_S))  # a late run, after the end
    assert_finished(flow, message_id, "nightly")


def test_extender_leaves_a_fresh_cancel_to_its_operator_but_keeps_its_message_hidden(flow: Flow) -> None:
    message_id, arn = start(flow, "nightly", seconds=60)
    with pytest.raises(ClientError):
        cancel.cancel(flow.canceller(stepfunctions=StopRefused(flow.harness.stepfunctions)), message_id, REASON)

    run_extender(extender(flow, ahead_s=0))

    assert flow.dlq_messages() == [] and flow.lease(message_id).status is LeaseStatus.CANCELLED
    assert flow.harness.stepfunctions.describe_execution(executionArn=arn)["status"] == "RUNNING"

    report = cancel.cancel(flow.canceller(), message_id, REASON)  # the operator runs it again

    assert report.outcome is cancel.Outcome.COMPLETED
    assert_finished(flow, message_id, "nightly")


# -- (c) the workflow's failure path on a CANCELLED lease ----------------------------------------------------


def test_job_that_fails_after_a_throttled_stop_is_not_released_and_is_dead_lettered_once(flow: Flow) -> None:
    message_id, arn = start(flow, "nightly", seconds=2, fail=True)
    with pytest.raises(ClientError):
        cancel.cancel(flow.canceller(stepfunctions=StopRefused(flow.harness.stepfunctions)), message_id, REASON)

    described = ended(flow, arn)

    assert described["status"] == "FAILED"
    lease = flow.lease(message_id)
    assert lease.status is LeaseStatus.CANCELLED, "the failure path must not turn it RELEASED"
    entered = {
        event["stateEnteredEventDetails"]["name"]
        for event in flow.harness.stepfunctions.get_execution_history(executionArn=arn)["events"]
        if "stateEnteredEventDetails" in event
    }
    assert "MarkReleased" not in entered and "ReleaseMessage" not in entered, "not given back for a retry"

    run_extender(extender(flow))

    assert_finished(flow, message_id, "nightly")
    assert flow.deliver() == {}, "never comes back"


# -- adversarial: the cancel against itself, the extender and a redelivery -----------------------------------


def test_cancel_two_operators_cancelling_at_once_send_one_dlq_copy(flow: Flow) -> None:
    message_id, arn = start(flow, "nightly", seconds=60)
    second: list[cancel.CancelReport] = []

    # The first operator's stop lands after a second operator's whole cancel.
    def other_operator() -> None:
        second.append(cancel.cancel(flow.canceller(), message_id, REASON))

    first = cancel.cancel(
        flow.canceller(stepfunctions=Hooked(flow.harness.stepfunctions, "stop_execution", other_operator)),
        message_id,
        REASON,
    )

    assert second[0].outcome is cancel.Outcome.COMPLETED
    assert first.outcome is cancel.Outcome.ALREADY_CANCELLED, first
    assert status_of(flow, arn) == "ABORTED"
    assert_finished(flow, message_id, "nightly")


def test_extender_running_during_the_operators_dlq_send_sends_nothing(flow: Flow) -> None:
    message_id, _ = start(flow, "nightly", seconds=60)

    def extender_runs() -> None:
        run_extender(extender(flow))

    report = cancel.cancel(flow.canceller(sqs=Hooked(flow.sqs, "send_message", extender_runs)), message_id, REASON)

    assert report.outcome is cancel.Outcome.CANCELLED
    assert_finished(flow, message_id, "nightly")


def cancelling_again(flow: Flow, message_id: str, raced: list[cancel.CancelRaced]) -> Callable[[], None]:
    """The operator's cancel run again; told another carrier is sending (`CancelRaced`), kept in `raced`."""

    def again() -> None:
        try:
            cancel.cancel(flow.canceller(), message_id, REASON)
        except cancel.CancelRaced as exc:
            raced.append(exc)

    return again


def test_operator_cancelling_while_the_extender_finishes_sends_nothing_more(flow: Flow) -> None:
    message_id, arn = start(flow, "nightly", seconds=60)
    with pytest.raises(ClientError):
        cancel.cancel(flow.canceller(stepfunctions=StopRefused(flow.harness.stepfunctions)), message_id, REASON)
    raced: list[cancel.CancelRaced] = []
    operator_again = cancelling_again(flow, message_id, raced)

    run_extender(extender(flow, sqs=Hooked(flow.sqs, "send_message", operator_again)))

    assert len(raced) == 1 and "another" in str(raced[0]), "told that the extender is sending it now"
    assert status_of(flow, arn) == "ABORTED"
    assert_finished(flow, message_id, "nightly")


def test_cancel_that_died_after_its_dlq_send_is_finished_without_a_second_copy(flow: Flow) -> None:
    message_id, _ = start(flow, "nightly", seconds=60)

    def dies() -> None:
        raise Died

    with pytest.raises(Died):
        cancel.cancel(flow.canceller(sqs=Hooked(flow.sqs, "delete_message", dies)), message_id, REASON)
    assert len(flow.dlq_messages()) == 1 and queued(flow) == 1

    run_extender(extender(flow, ahead_s=LATER_S + cancel.SEND_CLAIM_S))

    assert_finished(flow, message_id, "nightly")


def test_cancel_that_died_after_its_claim_before_its_send_is_finished_once(flow: Flow) -> None:
    message_id, _ = start(flow, "nightly", seconds=60)

    def dies() -> None:
        raise Died

    with pytest.raises(Died):
        cancel.cancel(flow.canceller(sqs=Hooked(flow.sqs, "send_message", dies)), message_id, REASON)
    assert flow.dlq_messages() == []

    run_extender(extender(flow))  # the claim is fresh: left to its holder
    assert flow.dlq_messages() == [] and queued(flow) == 1

    run_extender(extender(flow, ahead_s=LATER_S + cancel.SEND_CLAIM_S))

    assert_finished(flow, message_id, "nightly")


def test_stop_answered_with_a_5xx_after_it_landed_is_finished_by_the_extender(flow: Flow) -> None:
    message_id, arn = start(flow, "nightly", seconds=60)

    class StopLandsThen5xx:
        def __init__(self, stepfunctions: Any) -> None:
            self._sfn = stepfunctions

        def __getattr__(self, name: str) -> Any:
            return getattr(self._sfn, name)

        def stop_execution(self, **kwargs: Any) -> Any:
            self._sfn.stop_execution(**kwargs)
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "boom"}}, "StopExecution")

    with pytest.raises(ClientError, match="InternalServerError"):
        cancel.cancel(flow.canceller(stepfunctions=StopLandsThen5xx(flow.harness.stepfunctions)), message_id, REASON)
    assert status_of(flow, arn) == "ABORTED"

    run_extender(extender(flow))

    assert_finished(flow, message_id, "nightly")


def test_redelivery_while_a_cut_short_cancel_runs_is_dead_lettered_once_and_the_job_never_succeeds(
    flow: Flow,
) -> None:
    message_id, arn = start(flow, "nightly", seconds=3)
    with pytest.raises(ClientError):
        cancel.cancel(flow.canceller(stepfunctions=StopRefused(flow.harness.stepfunctions)), message_id, REASON)
    running = flow.lease(message_id)
    flow.sqs.change_message_visibility(
        QueueUrl=flow.harness.queue_url, ReceiptHandle=running.receipt_handle, VisibilityTimeout=0
    )

    assert flow.deliver() == {message_id: Outcome.CANCELLED}, "the receiver dead-letters it and acknowledges it"
    assert len(flow.dlq_messages()) == 1
    ended(flow, arn)
    assert flow.lease(message_id).status is LeaseStatus.CANCELLED, "its job's success is not recorded"

    run_extender(extender(flow))

    assert_finished(flow, message_id, "nightly")
    assert [e["name"] for e in flow.executions()] == [arn.rpartition(":")[2]], "no second run"


def test_mark_answered_with_a_5xx_after_it_landed_is_finished_by_the_extender(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    message_id, arn = start(flow, "nightly", seconds=60)
    real_mark = cancel.mark_cancelled

    def mark_lands_then_5xx(store: Any, lease: Any, **kwargs: Any) -> Any:
        real_mark(store, lease, **kwargs)
        raise ClientError({"Error": {"Code": "InternalServerError", "Message": "boom"}}, "UpdateItem")

    with monkeypatch.context() as patch:
        patch.setattr(cancel, "mark_cancelled", mark_lands_then_5xx)
        with pytest.raises(ClientError, match="InternalServerError"):
            cancel.cancel(flow.canceller(), message_id, REASON)
    assert flow.lease(message_id).status is LeaseStatus.CANCELLED, "the mark landed; nothing else was done"
    assert flow.harness.stepfunctions.describe_execution(executionArn=arn)["status"] == "RUNNING"

    run_extender(extender(flow))

    assert status_of(flow, arn) == "ABORTED"
    assert_finished(flow, message_id, "nightly")


def cut_short_and_back(flow: Flow, job_id: str) -> tuple[str, str]:
    """A running job's cancel cut short after its mark (its stop throttled), and its message visible again:
    its next receive finds the lease CANCELLED with no DLQ copy and no send claimed."""
    message_id, arn = start(flow, job_id, seconds=60)
    with pytest.raises(ClientError):
        cancel.cancel(flow.canceller(stepfunctions=StopRefused(flow.harness.stepfunctions)), message_id, REASON)
    lease = flow.lease(message_id)
    flow.sqs.change_message_visibility(
        QueueUrl=flow.harness.queue_url, ReceiptHandle=lease.receipt_handle, VisibilityTimeout=0
    )
    return message_id, arn


def test_cancel_run_again_while_a_redelivery_sends_is_told_and_sends_nothing(flow: Flow) -> None:
    """The receive claims the DLQ send on the lease before it sends, as a cancel does: the operator's cancel
    run again meanwhile (as the docs advise) is told another carrier is sending, and there is one copy."""
    message_id, _ = cut_short_and_back(flow, "nightly")
    raced: list[cancel.CancelRaced] = []
    operator_again = cancelling_again(flow, message_id, raced)

    flow.receiver = replace(flow.receiver, sqs=Hooked(flow.sqs, "send_message", operator_again))

    assert flow.deliver() == {message_id: Outcome.CANCELLED}
    assert len(raced) == 1 and "is sending it to the DLQ now" in str(raced[0])
    assert_dead_lettered_as_cancelled(flow, message_id, "nightly")  # exactly one copy
    run_extender(extender(flow))
    assert_finished(flow, message_id, "nightly")


def test_cancel_run_again_before_a_redelivery_claims_the_send_leaves_it_one_copy(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's cancel lands between the receive's read of the lease and its claim: the claim's
    condition fails, the receive reads again, finds the cancel's copy noted and acknowledges the message."""
    message_id, _ = cut_short_and_back(flow, "nightly")
    real_claim = service.claim_dead_letter
    reports: list[cancel.CancelReport] = []

    def operator_first(*args: Any, **kwargs: Any) -> Any:
        if not reports:
            reports.append(cancel.cancel(flow.canceller(), message_id, REASON))
        return real_claim(*args, **kwargs)

    monkeypatch.setattr(service, "claim_dead_letter", operator_first)

    assert flow.deliver() == {message_id: Outcome.CANCELLED}
    assert reports[0].dead_letter_id is not None
    assert_finished(flow, message_id, "nightly")


def test_redelivery_while_the_extender_finishes_a_cancel_sends_one_dlq_copy(flow: Flow) -> None:
    """Past the hand-over, the extender's finish runs while the receive's send is on its way: it leaves
    the claimed send to the receive, and finishes the rest (the delete, the note) on a later run."""
    message_id, _ = cut_short_and_back(flow, "nightly")
    flow.receiver = replace(flow.receiver, sqs=Hooked(flow.sqs, "send_message", lambda: run_extender(extender(flow))))

    assert flow.deliver() == {message_id: Outcome.CANCELLED}
    run_extender(extender(flow))
    assert_finished(flow, message_id, "nightly")


def test_redelivery_whose_dlq_send_failed_is_sent_once_its_claim_is_old(flow: Flow) -> None:
    """A receive that claimed the send and then failed (its send throttled) leaves its claim. The message's
    next receive cannot tell a dead claimant from a live one (SQS may hand a message out twice at once), so
    it comes back later (STALE, not acknowledged: the message may be the body's last holder) and sends
    once the claim is `SEND_CLAIM_S` old."""
    message_id, _ = cut_short_and_back(flow, "nightly")
    receiver = flow.receiver

    def throttled_send() -> None:
        raise throttled("SendMessage")

    [delivery] = flow.receive_batch()
    with pytest.raises(ClientError):
        service.receive(replace(receiver, sqs=Hooked(flow.sqs, "send_message", throttled_send)), delivery)
    record = cancel.CancelRecord.of(flow.lease(message_id))
    assert record is not None and record.dead_letter_id is None
    assert (record.sending_by or "").startswith(delivery.receipt_handle + "#"), "named by its handle and a draw"
    again = replace(
        delivery, receipt_handle=delivery.receipt_handle + "-next", receive_count=delivery.receive_count + 1
    )

    assert service.receive(receiver, again) is Outcome.STALE, "another receive's fresh claim: it comes back"
    assert flow.dlq_messages() == []
    later = replace(receiver, clock=OffsetClock(cancel.SEND_CLAIM_S + 1))
    assert service.receive(later, again) is Outcome.CANCELLED
    assert_dead_lettered_as_cancelled(flow, message_id, "nightly")  # exactly one copy


@pytest.mark.parametrize("second_handle", ["-twin", ""], ids=["sqs-twice", "one-record-twice"])
def test_two_receives_of_one_message_at_once_send_one_dlq_copy(flow: Flow, second_handle: str) -> None:
    """SQS may hand one message out twice at once, and the mapping may handle one record twice (one receipt
    handle). Both receives find the lease CANCELLED with no copy; the first claims the send, under its
    handle and a draw of its own, and the second, reading while the first sends, leaves it to the first."""
    message_id, _ = cut_short_and_back(flow, "nightly")
    [first] = flow.receive_batch()
    second = replace(first, receipt_handle=first.receipt_handle + second_handle)
    outcomes: list[Outcome] = []
    receiver = replace(
        flow.receiver,
        sqs=Hooked(flow.sqs, "send_message", lambda: outcomes.append(service.receive(flow.receiver, second))),
    )
    outcomes.append(service.receive(receiver, first))

    assert outcomes == [Outcome.STALE, Outcome.CANCELLED], "the second comes back later; the first sends"
    assert_dead_lettered_as_cancelled(flow, message_id, "nightly")  # exactly one copy


def test_receive_whose_claim_landed_unanswered_sends_once(flow: Flow, monkeypatch: pytest.MonkeyPatch) -> None:
    """The claim's write lands and its answer is lost (the SDK's retry then fails its condition): the
    receive reads again, finds its own claim, and sends the one copy."""
    message_id, _ = cut_short_and_back(flow, "nightly")
    real_mark = cancel.mark_cancelled
    lost: list[bool] = []

    def lands_unanswered(store: Any, lease: Any, **kwargs: Any) -> Any:
        written = real_mark(store, lease, **kwargs)
        if not lost and "sending_by" in json.dumps(kwargs.get("record", {})):
            lost.append(True)
            return None  # as the retry of a write that took effect: its condition fails
        return written

    monkeypatch.setattr(cancel, "mark_cancelled", lands_unanswered)
    assert flow.deliver() == {message_id: Outcome.CANCELLED}
    assert lost, "the claim's answer was lost once"
    assert_dead_lettered_as_cancelled(flow, message_id, "nightly")  # exactly one copy


def test_requeued_copy_is_not_acknowledged_on_another_receives_claim(flow: Flow) -> None:
    """A message that waits for its job id is acknowledged once its REQUEUED marker and delayed copy are
    written; a cancel then marks the marker with no body to send (the copy holds it). SQS hands the deleted
    original out once more (a server that missed the delete) and that receive claims the send, then fails.
    It may never come back: the copy, received next, is not acknowledged on its claim but comes back later
    (STALE) to send it, so the job is not lost."""
    start(flow, "nightly", seconds=60)  # holds the job id
    waiting = flow.send_job("nightly", "wait", seconds=1)
    [original] = flow.receive_batch()
    quick = flow.settings.model_copy(update={"job_wait_base_s": 0})  # the copy shows at once: no real wait
    assert service.receive(replace(flow.receiver, settings=quick), original) is Outcome.WAITING
    flow.sqs.delete_message(QueueUrl=flow.harness.queue_url, ReceiptHandle=original.receipt_handle)
    assert cancel.cancel(flow.canceller(), waiting, REASON).dead_letter_id is None, "the marker holds no body"

    def throttled_send() -> None:
        raise throttled("SendMessage")

    ghost = replace(original, receipt_handle=original.receipt_handle + "-ghost", receive_count=2)
    with pytest.raises(ClientError):
        service.receive(replace(flow.receiver, sqs=Hooked(flow.sqs, "send_message", throttled_send)), ghost)
    copy_id = flow.lease(waiting).copy_id
    deadline = time.monotonic() + 30  # generous: the copy is sent with no delay
    copy = None
    while copy is None and time.monotonic() < deadline:
        copy = next((d for d in flow.receive_batch(wait_s=5) if d.message_id == copy_id), None)
    assert copy is not None, "the requeued copy shows"

    assert service.receive(flow.receiver, copy) is Outcome.STALE, "not acknowledged: it comes back"
    later = replace(flow.receiver, clock=OffsetClock(cancel.SEND_CLAIM_S + 1))
    assert service.receive(later, copy) is Outcome.CANCELLED
    assert len(flow.dlq_messages()) == 1
