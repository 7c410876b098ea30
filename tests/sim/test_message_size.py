"""SQS's message size counts the body and every attribute's name, type and value, 256 KiB by default
(https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html, and
SendMessage's `MessageAttributes`: "All parts of the message attribute, including Name, Type, and Value,
are part of the message size restriction"). A copy the processor sends carries attributes of its own
(the DLQ's reason and attempts, a waiting copy's admission attribute), so a message near the limit must
still reach the DLQ with its reason, and wait where it is rather than have its copy refused on every
receive. On the simulated AWS and a fake clock."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from longjobs.engine.admission.parking import REFRESH_PAGE, refresh_parked, waiting_delivery
from longjobs.engine.delivery.dlq import ATTEMPTS_MAX_BYTES, EXHAUSTED, exhausted_attributes, send_exhausted_to_dlq
from longjobs.engine.delivery.types import Delivery, Outcome, copy_fits, message_bytes
from longjobs.engine.lease.types import Attempt, LastError, LeaseStatus
from longjobs.engine.receiver.service import receive
from longjobs.engine.settings import MESSAGE_MAX_BYTES
from longjobs.engine.settle import release
from tests.sim.test_requeue import JOB
from tests.sim.test_retention import KEEP_S, START, Bench, bench, full_with_one_waiting_in_flight


def test_message_size_simulated_sqs_counts_attributes_as_aws_does() -> None:
    b = bench()
    b.aws.sqs.send_message(QueueUrl=b.jobs_url, MessageBody="x" * MESSAGE_MAX_BYTES)  # the limit itself: taken
    attribute = {"Team": {"DataType": "String", "StringValue": "data"}}  # 4 + 6 + 4 bytes

    with pytest.raises(ClientError) as refused:
        b.aws.sqs.send_message(
            QueueUrl=b.jobs_url, MessageBody="x" * (MESSAGE_MAX_BYTES - 13), MessageAttributes=attribute
        )

    assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert "Message must be shorter than 262144 bytes" in refused.value.response["Error"]["Message"]
    b.aws.sqs.send_message(QueueUrl=b.jobs_url, MessageBody="x" * (MESSAGE_MAX_BYTES - 14), MessageAttributes=attribute)


def test_message_size_a_large_message_out_of_attempts_reaches_the_dlq_with_its_reason() -> None:
    b = bench()
    history = [
        Attempt(n, f"exec-{n}", "RELEASED", LastError("JobFailed", "c" * 1_000), ended_at=float(n))
        for n in range(1, 41)
    ]
    delivery = Delivery(
        message_id="m-1", receipt_handle="h", body="x" * 240_000, receive_count=41, source_arn="arn:aws:sqs:q"
    )

    send_exhausted_to_dlq(b.aws.sqs, b.dlq_url, delivery, history)  # before: refused, and on every receive after

    [copy] = b.aws.sqs.receive_message(QueueUrl=b.dlq_url, MessageAttributeNames=["All"])["Messages"]
    attributes = copy["MessageAttributes"]
    assert attributes["ErrorType"]["StringValue"] == EXHAUSTED
    assert attributes["ErrorMessage"]["StringValue"].startswith("JobFailed: ccc")
    attempts = json.loads(attributes["Attempts"]["StringValue"])
    assert attempts[0]["omitted"] > 0 and attempts[-1]["attempt"] == 40, (
        "the newest attempts kept, the count of the rest"
    )
    assert len(attributes["Attempts"]["StringValue"]) < ATTEMPTS_MAX_BYTES
    assert message_bytes(copy["Body"], attributes) <= MESSAGE_MAX_BYTES


def test_message_size_a_message_too_large_for_a_copy_waits_for_its_job_id_in_place() -> None:
    b = bench(limit=9, job_wait_base_s=10, job_wait_cap_s=20)
    first = b.send(JOB)
    assert b.deliver_jobs_queue() == {first: Outcome.STARTED}
    body = json.dumps({"job_id": JOB, "type": "wait", "params": {"seconds": 60}})
    large = {"Payload": {"DataType": "String", "StringValue": "p" * (MESSAGE_MAX_BYTES - 1_000)}}
    second = str(b.aws.sqs.send_message(QueueUrl=b.jobs_url, MessageBody=body, MessageAttributes=large)["MessageId"])

    assert b.deliver_jobs_queue() == {second: Outcome.HELD}, "before: its copy refused, the record failed"
    assert b.receiver.store.get(second) is None, "no marker: no copy was made"
    assert b.jobs_ids() == sorted([first, second]), "it waits hidden on its queue"


def test_message_size_a_poison_body_near_the_limit_reaches_the_dlq_with_its_reason() -> None:
    b = bench()
    body = "x" * (MESSAGE_MAX_BYTES - 150)  # a legal SQS message, far over the processor's max_body_bytes
    message_id = str(b.aws.sqs.send_message(QueueUrl=b.jobs_url, MessageBody=body)["MessageId"])

    assert b.deliver_jobs_queue() == {message_id: Outcome.REJECTED}, "before: its DLQ copy refused every time"

    [copy] = b.aws.sqs.receive_message(QueueUrl=b.dlq_url, MessageAttributeNames=["All"])["Messages"]
    assert copy["MessageAttributes"]["ErrorType"]["StringValue"] == "TooLarge"
    assert copy["MessageAttributes"]["ErrorMessage"]["StringValue"], "a reason, cut to the room left"


def test_message_size_a_parked_claimant_that_failed_with_a_long_cause_is_parked_again_and_the_line_moves() -> None:
    b = bench(limit=1)
    first, _ = full_with_one_waiting_in_flight(b)
    body = json.dumps({"job_id": "X", "type": "wait", "params": {"seconds": 60}})
    fits_barely = {"Payload": {"DataType": "String", "StringValue": "p" * (MESSAGE_MAX_BYTES - 14_000 - len(body))}}
    x = str(b.aws.sqs.send_message(QueueUrl=b.jobs_url, MessageBody=body, MessageAttributes=fits_barely)["MessageId"])
    assert b.deliver_jobs_queue() == {x: Outcome.PARKED}
    [x_copy] = b.waiting_ids()
    b.clock.advance(1)
    y = b.send("Y")
    assert b.deliver_jobs_queue() == {y: Outcome.PARKED}, "parked behind X in the type's line"

    # X's copy claims X's run, starts, and fails with a cause as long as Step Functions allows (32,768).
    b.finish(first)
    b.clock.advance(5)
    _unpark_only(b, x_copy)
    claimant = b.receiver.store.get(x_copy)
    assert claimant is not None and claimant.active
    b.aws.stepfunctions.end(b.aws.stepfunctions.executions[claimant.execution_arn], "FAILED")
    reason = LastError("JobFailed", "Traceback ... " + "c" * 20_000)
    assert release(claimant, store=b.receiver.store, visibility=b.receiver.visibility, clock=b.clock, reason=reason)

    # Both markers fall due: X's claimant is parked again (its copy's causes cut to fit), and Y's copy is sent
    # again. Before, SQS refused X's copy on every pass and Y's copy expired behind it.
    b.advance_to(START + 2 + KEEP_S + 1)
    for _ in range(6):
        refresh_parked(b.receiver, "wait")
        b.clock.advance(120)
    parked_again = b.receiver.store.get(x_copy)
    assert parked_again is not None and parked_again.copy_id in b.waiting_ids(), "X's claimant waits in a fresh copy"
    y_marker = b.receiver.store.get(y)
    assert y_marker is not None and y_marker.copy_id in b.waiting_ids(), "Y's copy is kept inside the retention"


def test_message_size_markers_whose_copies_are_refused_do_not_hold_up_the_line_behind_them() -> None:
    b = bench(limit=1)
    full_with_one_waiting_in_flight(b)
    parked = {}
    for n in range(REFRESH_PAGE + 2):  # a whole page of markers refused at the head of the line, two behind
        b.clock.advance(1)
        parked[f"X{n}"] = b.send(f"X{n}")
        assert b.deliver_jobs_queue()[parked[f"X{n}"]] is Outcome.PARKED
    refusing = _RefusesJob(b.aws.sqs, {f"X{n}" for n in range(REFRESH_PAGE)})
    b.receiver.sqs = refusing  # type: ignore[assignment]
    b.advance_to(b.clock.now() + KEEP_S + 1)  # every marker due

    with pytest.raises(ClientError):
        refresh_parked(b.receiver, "wait")  # the pass counts as failed

    assert refusing.refused == REFRESH_PAGE, "each refused marker tried once a pass, not once a page"
    for behind in (f"X{REFRESH_PAGE}", f"X{REFRESH_PAGE + 1}"):
        marker = b.receiver.store.get(parked[behind])
        assert marker is not None and marker.copy_id in b.waiting_ids(), f"{behind} got its fresh copy all the same"
        assert marker.copy_sent_at is not None and marker.copy_sent_at > START + KEEP_S


class _RefusesJob:
    """SQS refusing every copy of some jobs' messages (as it refuses one too large); other calls go through."""

    def __init__(self, sqs: Any, job_ids: set[str]) -> None:
        self._sqs, self._job_ids = sqs, job_ids
        self.refused = 0

    def send_message(self, **request: Any) -> Any:
        if json.loads(request["MessageBody"]).get("job_id") in self._job_ids:
            self.refused += 1
            raise ClientError({"Error": {"Code": "InvalidParameterValue", "Message": "refused"}}, "SendMessage")
        return self._sqs.send_message(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)


def _unpark_only(b: Bench, copy_id: str) -> None:
    """An unparking pass that receives `copy_id` alone (the other copies shown again at once)."""
    for message in b._received(b.waiting_url):
        if message["MessageId"] == copy_id:
            receive(b.receiver, waiting_delivery(message, b.waiting_url))
        else:
            b.aws.sqs.change_message_visibility(
                QueueUrl=b.waiting_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
            )


def _claimant_outgrown() -> tuple[Any, str, str]:
    """A bench whose full type's parked claimant (a wait job's copy) failed, then grew a history its copy no
    longer fits beside its message: the bench, the claimant copy's message id, and the job's body."""
    b = bench(limit=1, max_attempts=30)
    first, _ = full_with_one_waiting_in_flight(b)
    body = json.dumps({"job_id": "X", "type": "wait", "params": {"seconds": 60}})
    payload = _largest_payload_parked(body)
    x = str(b.aws.sqs.send_message(QueueUrl=b.jobs_url, MessageBody=body, MessageAttributes=payload)["MessageId"])
    assert b.deliver_jobs_queue()[x] is Outcome.PARKED, "its copy fits with no attempt"
    [x_copy] = b.waiting_ids()
    b.finish(first)
    b.clock.advance(5)
    _unpark_only(b, x_copy)
    claimant = b.receiver.store.get(x_copy)
    assert claimant is not None and claimant.execution_arn is not None
    b.aws.stepfunctions.end(b.aws.stepfunctions.executions[claimant.execution_arn], "FAILED")
    released = release(
        claimant, store=b.receiver.store, visibility=b.receiver.visibility, clock=b.clock, reason=LastError("JobFailed")
    )
    assert released is not None
    # The claimant's later receives ran and failed 14 times more (max_attempts is 30): its history outgrew
    # the margin its first park kept, so a copy carrying every attempt cannot fit beside the message.
    earlier = tuple(
        Attempt(n, f"{x_copy}-{n}", "RELEASED", LastError("States.TaskFailed", "short"), START + n)
        for n in range(1, 15)
    )
    grown = replace(released, history=earlier, receive_count=released.receive_count + 1, version=released.version + 1)
    assert b.receiver.store.create(grown, replacing=released)
    return b, x_copy, body


def test_message_size_a_parked_claimant_whose_attempts_outgrew_its_copy_goes_to_the_dlq_with_its_reason() -> None:
    b, x_copy, body = _claimant_outgrown()

    b.advance_to(START + 2 + KEEP_S + 1)
    refresh_parked(b.receiver, "wait")  # before: its copy refused, CopyTooLarge on every pass, the message lost

    [copy] = b.aws.sqs.receive_message(QueueUrl=b.dlq_url, MessageAttributeNames=["All"])["Messages"]
    assert copy["Body"] == body
    assert copy["MessageAttributes"]["ErrorType"]["StringValue"] == "RetentionRunningOut"
    assert "would not fit in one SQS message" in copy["MessageAttributes"]["ErrorMessage"]["StringValue"]
    closed = b.receiver.store.get(x_copy)
    assert closed is not None and closed.status is LeaseStatus.REJECTED


def _largest_payload_parked(body: str) -> dict[str, Any]:
    """The largest attribute beside `body` whose copy still fits with no attempt (`copy_fits`)."""
    low, high = 0, MESSAGE_MAX_BYTES
    while low < high:
        middle = (low + high + 1) // 2
        if copy_fits(body, {"Payload": {"DataType": "String", "StringValue": "p" * middle}}, ()):
            low = middle
        else:
            high = middle - 1
    return {"Payload": {"DataType": "String", "StringValue": "p" * low}}


def test_message_size_a_dlq_copy_leaves_out_its_attempts_before_its_reason() -> None:
    delivery = Delivery(message_id="m-1", receipt_handle="h", body="", receive_count=3, source_arn="arn:aws:sqs:q")
    history = [Attempt(1, "exec-1", "RELEASED", LastError("JobFailed", "boom"), ended_at=1.0)]
    without_attempts = {k: v for k, v in exhausted_attributes(delivery, history).items() if k != "Attempts"}
    exact = replace(delivery, body="x" * (MESSAGE_MAX_BYTES - message_bytes("", without_attempts)))

    attributes = exhausted_attributes(exact, history)  # everything but the attempts fits, to the byte

    assert "Attempts" not in attributes
    assert attributes["ErrorMessage"]["StringValue"] == "JobFailed: boom", "the reason whole"
    assert set(attributes) == set(without_attempts)
    assert message_bytes(exact.body, attributes) == MESSAGE_MAX_BYTES


def test_message_size_a_parked_claimant_whose_dlq_send_failed_is_sent_by_the_next_pass() -> None:
    """The admission pass claims the DLQ send of a claimant whose attempts outgrew its copy (its record
    DEAD_LETTERING, `dlq_claim`), and the send fails: the claim is given up. The claimant's copy sits in a
    waiting queue that no receive reads while the type is full, a margin before SQS deletes it ("Amazon SQS
    automatically deletes messages that have been in a queue for more than the maximum message retention
    period", SetQueueAttributes `MessageRetentionPeriod`). So no receive comes to take the claim over, and
    the marker's stored message is the one copy of the job that will be left: the next pass sends it."""
    b, x_copy, body = _claimant_outgrown()
    sqs = b.receiver.sqs
    b.receiver.sqs = _RefusesDlqOnce(sqs, b.dlq_url)  # type: ignore[assignment]

    b.advance_to(START + 2 + KEEP_S + 1)
    with pytest.raises(ClientError):
        refresh_parked(b.receiver, "wait")  # the send refused: the claim given up
    given_up = b.receiver.store.get(x_copy)
    assert given_up is not None and given_up.status is LeaseStatus.DEAD_LETTERING and given_up.claimed_at is None

    for _ in range(3):
        b.clock.advance(60)
        refresh_parked(b.receiver, "wait")  # the DEAD_LETTERING claimant keeps its marker in the line

    [copy] = b.aws.sqs.receive_message(QueueUrl=b.dlq_url, MessageAttributeNames=["All"])["Messages"]
    assert copy["Body"] == body
    assert copy["MessageAttributes"]["ErrorType"]["StringValue"] == "RetentionRunningOut"
    closed = b.receiver.store.get(x_copy)
    assert closed is not None and closed.status is LeaseStatus.REJECTED and closed.copy_id == copy["MessageId"]


class _RefusesDlqOnce:
    """SQS refusing the first send to the DLQ (a throttle past botocore's retries); other calls go through."""

    def __init__(self, sqs: Any, dlq_url: str) -> None:
        self._sqs, self._dlq_url = sqs, dlq_url
        self.refused = 0

    def send_message(self, **request: Any) -> Any:
        if request["QueueUrl"] == self._dlq_url and not self.refused:
            self.refused += 1
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "refused"}}, "SendMessage")
        return self._sqs.send_message(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)
