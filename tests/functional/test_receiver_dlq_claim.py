"""The receiver's DLQ send is claimed on the message's REJECTED record before it is made
(`longjobs.engine.delivery.dlq_claim`), on moto: of two receives of one message at once one sends, and
none begins an attempt beside a DLQ copy.

SQS hands a message out at least once: "you might receive a message more than once"
(https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/standard-queues-at-least-once-delivery.html),
and Lambda's event source mapping may process a record more than once
(https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html, "Lambda ... may process the same message
more than once"). During a deploy the two receives may be handled by receivers of two settings: one whose
`max_attempts` is used up, and one whose is not.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from longjobs.engine.delivery.attempt import RELEASE_SLACK_S
from longjobs.engine.delivery.dlq_claim import claim_life_s
from longjobs.engine.delivery.types import Delivery, Outcome, Receiver
from longjobs.engine.execution import execution_arn, execution_name
from longjobs.engine.lease import LastError, Lease, LeaseStatus, LeaseStore
from longjobs.engine.receiver import service
from longjobs.engine.receiver.service import receive
from tests.functional.conftest import TABLE, Flow, OffsetClock, running_flow
from tests.functional.test_cancel_cut_short import Died, Hooked, throttled


def failed_once(flow: Flow, job_id: str = "nightly") -> tuple[str, Delivery]:
    """A wait job whose first attempt failed (its lease RELEASED, its execution long gone), received again."""
    message_id = flow.send_job(job_id, "wait", seconds=60)
    [delivery] = flow.receive_batch()
    now = time.time()
    arn = execution_arn(flow.receiver.state_machine_arn, execution_name(message_id, 0))
    released = Lease(
        message_id=message_id,
        queue_url=flow.harness.queue_url,
        receipt_handle="the first receive's",
        receive_count=0,
        received_at=now - 600,
        visible_until=now - 60,
        renew_until=now + 3600,
        status=LeaseStatus.RELEASED,
        execution_arn=arn,
        job_type="wait",
        job_id=job_id,
        last_error=LastError("States.TaskFailed", "the job failed"),
        closed_at=now - 60,
    )
    assert flow.receiver.store.create(released)
    return message_id, delivery


def attempts(receiver: Receiver, max_attempts: int) -> Receiver:
    return replace(receiver, settings=receiver.settings.model_copy(update={"max_attempts": max_attempts}))


def with_dynamodb(receiver: Receiver, client: Any) -> Receiver:
    store = receiver.store
    return replace(receiver, store=LeaseStore(client, TABLE, shards=store.shards, closed_ttl_s=store.closed_ttl_s))


def again(delivery: Delivery, suffix: str = "-again") -> Delivery:
    """The message handed out again: another receipt handle, one more receive."""
    return replace(delivery, receipt_handle=delivery.receipt_handle + suffix, receive_count=delivery.receive_count + 1)


def handed_out_again(flow: Flow, delivery: Delivery) -> Delivery:
    """SQS hands the message out again, for real: a receipt handle SQS accepts, one more receive."""
    flow.sqs.change_message_visibility(
        QueueUrl=flow.harness.queue_url, ReceiptHandle=delivery.receipt_handle, VisibilityTimeout=0
    )
    [newer] = flow.receive_batch()
    assert newer.receive_count == delivery.receive_count + 1
    return newer


def send_refused(flow: Flow) -> tuple[str, Delivery, Receiver]:
    """A message whose attempts are used up, received by a receiver whose DLQ send is refused (throttled past
    the SDK's retries): the receive raises, so its record fails. The message, that receive, its receiver."""
    message_id, delivery = failed_once(flow)
    receiver = attempts(flow.receiver, 1)
    receive_with_dlq_refused(flow, receiver, delivery)
    return message_id, delivery, receiver


def receive_with_dlq_refused(flow: Flow, receiver: Receiver, delivery: Delivery) -> None:
    """A receive whose DLQ send SQS refuses (throttled past the SDK's retries): the receive raises, so its
    record fails and SQS hands the message out again."""

    def refuse() -> None:
        raise throttled("SendMessage")

    with pytest.raises(ClientError):
        receive(replace(receiver, sqs=Hooked(flow.sqs, "send_message", refuse)), delivery)


def dlq_copies(flow: Flow, message_id: str) -> list[dict[str, Any]]:
    copies = flow.dlq_messages()
    assert all(m["MessageAttributes"]["OriginalMessageId"]["StringValue"] == message_id for m in copies)
    return copies


def test_receiver_dlq_claim_record_names_its_claimant_and_its_copy(flow: Flow) -> None:
    message_id, delivery = failed_once(flow)

    assert receive(attempts(flow.receiver, 1), delivery) is Outcome.REJECTED
    [copy] = dlq_copies(flow, message_id)
    record = flow.lease(message_id)
    assert record.status is LeaseStatus.REJECTED
    assert (record.claimed_by or "").startswith(delivery.receipt_handle + "#"), "its handle and a draw"
    assert record.copy_id == copy["MessageId"], "the copy noted: a redelivery is acknowledged"
    assert receive(flow.receiver, again(delivery)) is Outcome.REJECTED
    assert len(dlq_copies(flow, message_id)) == 1


def test_receiver_dlq_claim_deploy_raising_attempts_begins_first_and_nothing_is_dead_lettered(flow: Flow) -> None:
    """A deploy raises `max_attempts` from 1 to 3 while the message is handed out twice. The old receiver
    reads its attempts used up; before its record lands, the new one begins attempt 2. The old receiver's
    record then fails its condition: it reads again and leaves the message to the newer receive. No DLQ copy
    exists beside the running attempt, so no redrive runs the job a second time."""
    message_id, delivery = failed_once(flow)
    new, old = attempts(flow.receiver, 3), attempts(flow.receiver, 1)
    newer = handed_out_again(flow, delivery)
    outcomes: list[Outcome] = []
    hooked = Hooked(flow.harness.dynamodb, "put_item", lambda: outcomes.append(receive(new, newer)))

    outcomes.append(receive(with_dynamodb(old, hooked), delivery))

    assert outcomes == [Outcome.STARTED, Outcome.STALE], "the new receiver starts; the old one reads again"
    assert flow.dlq_messages() == []
    lease = flow.lease(message_id)
    assert (lease.status, lease.receive_count, len(lease.history)) == (LeaseStatus.ACTIVE, 2, 1)


def test_receiver_dlq_claim_deploy_raising_attempts_claimed_first_begins_nothing(flow: Flow) -> None:
    """The other order: the old receiver's claimed record lands first, and the new receiver's receive comes
    while it sends. The new one finds the send claimed and fresh: it comes back later (STALE), to find the
    copy noted, and begins no attempt."""
    message_id, delivery = failed_once(flow)
    new, old = attempts(flow.receiver, 3), attempts(flow.receiver, 1)
    newer = again(delivery)
    outcomes: list[Outcome] = []
    hooked = Hooked(flow.sqs, "send_message", lambda: outcomes.append(receive(new, newer)))

    outcomes.append(receive(replace(old, sqs=hooked), delivery))

    assert outcomes == [Outcome.STALE, Outcome.REJECTED]
    assert len(dlq_copies(flow, message_id)) == 1
    assert flow.executions() == [], "no attempt began"
    assert receive(new, again(newer)) is Outcome.REJECTED, "back later: in the DLQ, acknowledged"
    assert flow.executions() == []


@pytest.mark.parametrize("second_handle", ["-twin", ""], ids=["sqs-twice", "one-record-twice"])
def test_receiver_dlq_claim_two_receives_at_once_send_one_copy(flow: Flow, second_handle: str) -> None:
    """Two receives of one message whose attempts are used up, the second reading while the first sends:
    one claim, one copy. The mapping's second handling of one record has the same handle, and a draw of
    its own tells it apart."""
    message_id, delivery = failed_once(flow)
    receiver = attempts(flow.receiver, 1)
    second = replace(delivery, receipt_handle=delivery.receipt_handle + second_handle)
    outcomes: list[Outcome] = []
    hooked = Hooked(flow.sqs, "send_message", lambda: outcomes.append(receive(receiver, second)))

    outcomes.append(receive(replace(receiver, sqs=hooked), delivery))

    assert outcomes == [Outcome.STALE, Outcome.REJECTED], "the second comes back later; the first sends"
    assert len(dlq_copies(flow, message_id)) == 1


def test_receiver_dlq_claim_failed_send_is_given_up_and_sent_by_the_next_receive(flow: Flow) -> None:
    """The claimant's send fails (throttled past the SDK's retries): it gives its claim up and the record
    fails, so the message's next receive sends at once, not once the claim's life is over."""
    message_id, delivery, receiver = send_refused(flow)
    record = flow.lease(message_id)
    assert (record.status, record.claimed_at, record.copy_id) == (LeaseStatus.DEAD_LETTERING, None, None)
    assert flow.dlq_messages() == []

    assert receive(receiver, again(delivery)) is Outcome.REJECTED
    [copy] = dlq_copies(flow, message_id)
    assert flow.lease(message_id).copy_id == copy["MessageId"]
    attributes = {name: value["StringValue"] for name, value in copy["MessageAttributes"].items()}
    assert (attributes["ErrorType"], attributes["ErrorMessage"]) == (
        "AttemptsExhausted",
        "States.TaskFailed: the job failed",
    ), "the reason and history as the record keeps them"


@pytest.mark.parametrize("sent_ago_s", [3_600.0, None])
def test_receiver_dlq_claim_record_outlasts_its_message_on_the_queue(flow: Flow, sent_ago_s: float | None) -> None:
    """A record whose send keeps failing stays in the table as long as SQS may keep its message: "Amazon SQS
    automatically deletes messages left in a queue longer than the retention period configured for the
    queue" (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html),
    14 days by default, twice the closed leases' TTL. A record gone sooner would let the next receive begin
    a new attempt with no history, though the message's attempts were used up. Without its `SentTimestamp`
    the message is taken as sent now."""
    message_id, delivery = failed_once(flow)
    sent_at = time.time() - sent_ago_s if sent_ago_s is not None else None
    receiver = attempts(flow.receiver, 1)
    receive_with_dlq_refused(flow, receiver, replace(delivery, sent_at=sent_at))
    item = flow.harness.dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": message_id}}, ConsistentRead=True)["Item"]

    assert item["status"]["S"] == "DEAD_LETTERING"
    deleted_at = (sent_at if sent_at is not None else time.time()) + receiver.settings.queue_retention_s
    assert int(item["expires_at"]["N"]) >= deleted_at - 1


def test_receiver_dlq_claim_of_a_claimant_that_died_is_taken_over_once_old(flow: Flow) -> None:
    """The claimant dies between its claim and its send (the Lambda's timeout): its claim stays fresh. The
    next receive cannot tell a dead claimant from a live one, so it comes back later, and sends once the
    claimant's invocation has surely ended (`claim_life_s`)."""
    message_id, delivery = failed_once(flow)
    receiver = attempts(flow.receiver, 1)

    def die() -> None:
        raise Died

    with pytest.raises(Died):
        receive(replace(receiver, sqs=Hooked(flow.sqs, "send_message", die)), delivery)
    assert receive(receiver, again(delivery)) is Outcome.STALE
    assert flow.dlq_messages() == []
    later = replace(receiver, clock=OffsetClock(claim_life_s(receiver.settings) + 1))
    assert receive(later, again(delivery)) is Outcome.REJECTED
    assert len(dlq_copies(flow, message_id)) == 1


def test_receiver_dlq_claim_landed_unanswered_sends_once(flow: Flow, monkeypatch: pytest.MonkeyPatch) -> None:
    """The claimed record's write lands and its answer is lost (the SDK's retry then fails its condition):
    the receive reads again, finds its own claim, and sends the one copy."""
    message_id, delivery = failed_once(flow)
    receiver = attempts(flow.receiver, 1)
    store = receiver.store
    real_create = type(store).create
    lost: list[bool] = []

    def lands_unanswered(self: LeaseStore, lease: Lease, **kwargs: Any) -> bool:
        written = real_create(self, lease, **kwargs)
        if not lost and lease.status is LeaseStatus.DEAD_LETTERING:
            lost.append(True)
            return False
        return written

    monkeypatch.setattr(LeaseStore, "create", lands_unanswered)
    assert receive(receiver, delivery) is Outcome.REJECTED
    assert lost, "the claim's answer was lost once"
    assert len(dlq_copies(flow, message_id)) == 1


def test_receiver_dlq_claim_inline_job_whose_send_failed_is_sent_by_its_next_receive() -> None:
    """An inline job's last receive claims its send and fails to send; its next receive finds the record
    there, and sends the one copy."""
    with running_flow(max_attempts=1) as inline_flow:
        message_id = inline_flow.harness.send('{"job_id": "boom", "type": "echo", "params": {"fail": true}}')
        [delivery] = inline_flow.receive_batch()
        receive_with_dlq_refused(inline_flow, inline_flow.receiver, delivery)
        assert inline_flow.dlq_messages() == []

        assert receive(inline_flow.receiver, again(delivery)) is Outcome.REJECTED
        [copy] = dlq_copies(inline_flow, message_id)
        assert "echo job boom was asked to fail" in copy["MessageAttributes"]["ErrorMessage"]["StringValue"]


@pytest.mark.parametrize("attempts_then", [1, 3])
def test_receiver_dlq_claim_inline_job_claimed_for_the_dlq_is_not_run_again(
    monkeypatch: pytest.MonkeyPatch, attempts_then: int
) -> None:
    """An inline job's last receive claims its DLQ send (DEAD_LETTERING) and the send fails: the record is
    reported failed and SQS hands the message out again ("you might receive a message more than once",
    https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/standard-queues-at-least-once-delivery.html).
    That receive sends the claimed copy and does not run the job a time more, also when a deploy has raised
    `max_attempts` (1 to 3) so that its receive count is within the new limit. Had it run and succeeded, the
    message would be deleted as done while its record said it was on its way to the DLQ."""
    runs: list[str] = []

    def flaky(job: Any) -> None:
        runs.append(job.job_id)
        if len(runs) == 1:
            raise service.InlineJobFailed("echo job flaky failed once")

    monkeypatch.setattr(service, "run_inline", flaky)
    with running_flow(max_attempts=1) as inline_flow:
        message_id = inline_flow.harness.send('{"job_id": "flaky", "type": "echo", "params": {}}')
        [delivery] = inline_flow.receive_batch()
        receive_with_dlq_refused(inline_flow, inline_flow.receiver, delivery)

        assert receive(attempts(inline_flow.receiver, attempts_then), again(delivery)) is Outcome.REJECTED
        assert runs == ["flaky"], "not run beside its claimed DLQ send"
        [copy] = dlq_copies(inline_flow, message_id)
        assert "echo job flaky failed once" in copy["MessageAttributes"]["ErrorMessage"]["StringValue"]
        assert inline_flow.lease(message_id).status is LeaseStatus.REJECTED


def test_receiver_dlq_claim_outliving_its_message_is_taken_over(flow: Flow) -> None:
    """The last attempt's message comes back `RELEASE_SLACK_S` (60 s) before SQS deletes it, and its receive
    claims the send and dies. With a 30 s queue VT the next receive comes while the claim may still live;
    left to its claimant, the message would show again only after SQS deleted it ("Amazon SQS automatically
    deletes messages that have been in a queue for more than the maximum message retention period",
    https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-basic-architecture.html).
    A claim that would outlive the message is taken over at once: a possible second copy rather than none."""
    message_id, delivery = failed_once(flow)
    receiver = attempts(flow.receiver, 1)
    sent_at = time.time() - receiver.settings.queue_retention_s + RELEASE_SLACK_S  # deleted 60 s from now
    last = replace(delivery, sent_at=sent_at)

    def die() -> None:
        raise Died

    with pytest.raises(Died):
        receive(replace(receiver, sqs=Hooked(flow.sqs, "send_message", die)), last)
    assert claim_life_s(receiver.settings) > RELEASE_SLACK_S

    assert receive(replace(receiver, clock=OffsetClock(30)), again(last)) is Outcome.REJECTED
    assert len(dlq_copies(flow, message_id)) == 1


PREVIOUS_STATUSES = frozenset(
    {"ACTIVE", "SUCCEEDED", "RELEASED", "CAPPED", "LOST", "REJECTED", "WAITING", "PARKED", "REQUEUED", "CANCELLED"}
)
"""The lease statuses of the releases before the claimed DLQ send. They read an item by its status
(`LeaseStatus(item["status"])`), so an item with any other status fails their receive: the record is
retried, never acknowledged."""


def test_receiver_dlq_claim_record_is_refused_by_a_release_before_it(flow: Flow) -> None:
    """A rollback while a DLQ send fails (throttled, or a DLQ the new release cannot write to): the claimed
    record names a status the previous receiver cannot read, so it fails the record and the message stays on
    its queue. Had the record said REJECTED, that receiver would have acknowledged it as sent, and the
    mapping deleted the message with no DLQ copy."""
    message_id, delivery, receiver = send_refused(flow)
    stored = flow.harness.dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": message_id}})["Item"]
    assert stored["status"]["S"] not in PREVIOUS_STATUSES, stored["status"]
    assert receive(receiver, again(delivery)) is Outcome.REJECTED, "this release sends it"
    assert flow.lease(message_id).status is LeaseStatus.REJECTED
