"""An S3 notification fanned out into one job message per marker, on moto: however often the notification
is handled (its delete lost, an invocation that died after its sends, a batch of the fan-out that failed,
two receivers at once, S3 delivering its event again), each marker's job runs once per event."""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from longjobs.engine import cancel
from longjobs.engine.delivery.models import parse_delivery
from longjobs.engine.delivery.types import Delivery, Outcome, send_attributes
from longjobs.engine.extender.service import renew_due
from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog
from longjobs.engine.jobs.triggers import S3Trigger
from longjobs.engine.lease import LeaseStatus
from longjobs.engine.receiver.batch import receive_batch
from longjobs.engine.receiver.fan_out import FanOutFailed
from longjobs.engine.receiver.service import decided, receive
from longjobs.offline.lambdas import s3_notification
from tests.functional.conftest import ACCOUNT, REGION, Flow, running_flow

SOURCE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs"
CATALOG = JobCatalog(BUILTIN_TYPES, [S3Trigger(job_type="wait", params={"seconds": 0})])
DATES = ("2026-11-20", "2026-11-21", "2026-11-22")


@pytest.fixture(scope="module")
def flow() -> Iterator[Flow]:
    # a copy that waits for its job id is sent back with no delay, so a second run shows at once
    with running_flow(CATALOG, job_wait_base_s=0, job_wait_cap_s=0) as made:
        yield made


def markers(*dates: str) -> list[str]:
    return [f"events/date={date}/_SUCCESS" for date in dates]


def receive_all(flow: Flow, *, visibility_s: int | None = None) -> list[Delivery]:
    """Receive as the event source mapping does, message attributes included (a copy carries its own)."""
    request: dict[str, Any] = {
        "QueueUrl": flow.harness.queue_url,
        "MaxNumberOfMessages": 10,
        "AttributeNames": ["All"],
        "MessageAttributeNames": ["All"],
    }
    if visibility_s is not None:
        request["VisibilityTimeout"] = visibility_s
    messages = flow.sqs.receive_message(**request).get("Messages", [])
    return [
        Delivery(
            message_id=m["MessageId"],
            receipt_handle=m["ReceiptHandle"],
            body=m["Body"],
            receive_count=int(m["Attributes"]["ApproximateReceiveCount"]),
            source_arn=SOURCE_ARN,
            message_attributes=send_attributes(
                {
                    name: {"dataType": value["DataType"], "stringValue": value.get("StringValue")}
                    for name, value in m.get("MessageAttributes", {}).items()
                }
            ),
        )
        for m in messages
    ]


def deliver(flow: Flow) -> dict[str, Outcome]:
    """One mapping poll: each record through the receiver; records not deferred are deleted."""
    outcomes: dict[str, Outcome] = {}
    deliveries = receive_all(flow)
    with receive_batch(flow.receiver, deliveries) as unsent:
        for delivery in deliveries:
            outcomes[delivery.message_id] = receive(flow.receiver, delivery)
    for delivery in deliveries:
        if not outcomes[delivery.message_id].deferred and delivery.message_id not in unsent:
            flow.sqs.delete_message(QueueUrl=flow.harness.queue_url, ReceiptHandle=delivery.receipt_handle)
    return outcomes


def queue_empty(flow: Flow) -> bool:
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    got = flow.sqs.get_queue_attributes(QueueUrl=flow.harness.queue_url, AttributeNames=names)["Attributes"]
    return all(int(got[name]) == 0 for name in names)


def run_to_the_end(flow: Flow, bucket: str, timeout_s: float = 60) -> Counter[str]:
    """Deliver every message until the queue is empty and nothing runs; the successful runs per job id
    of the partitions of `bucket` (each test has its own)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        deliver(flow)
        renew_due(flow.extender, deadline=time.time() + 0.2)
        running = [e for e in flow.executions() if e["status"] == "RUNNING"]
        if not running and queue_empty(flow):
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the queue did not drain")
    runs: Counter[str] = Counter()
    for execution in flow.executions():
        if execution["status"] == "SUCCEEDED":
            described = flow.harness.stepfunctions.describe_execution(executionArn=execution["executionArn"])
            job_id = json.loads(described["input"])["job"]["job_id"]
            if job_id.startswith(f"wait:{bucket}/"):
                runs[job_id] += 1
    return runs


def job_ids(bucket: str, *dates: str) -> dict[str, int]:
    return {f"wait:{bucket}/events/date={date}/": 1 for date in dates}


class Crash(BaseException):
    """The Lambda dies here (timeout, out of memory): no code of ours runs after it."""


def server_error(operation: str) -> ClientError:
    return ClientError({"Error": {"Code": "InternalError", "Message": "We encountered an internal error."}}, operation)


def notification(flow: Flow, bucket: str, dates: tuple[str, ...] = DATES) -> Delivery:
    """Send an S3 notification of `dates`' markers in `bucket` and receive it."""
    sent = flow.harness.send(s3_notification(bucket, markers(*dates), region=REGION))
    return receive_only(flow, sent)


def receive_only(flow: Flow, message_id: str) -> Delivery:
    """Receive `message_id`; any other message received with it is made visible again at once (left
    invisible, a job message the fan-out sent would wait out the queue's 30 s visibility timeout)."""
    deliveries = receive_all(flow)
    for other in deliveries:
        if other.message_id != message_id:
            flow.sqs.change_message_visibility(
                QueueUrl=flow.harness.queue_url, ReceiptHandle=other.receipt_handle, VisibilityTimeout=0
            )
    [delivery] = [d for d in deliveries if d.message_id == message_id]
    return delivery


def handled_again(flow: Flow, first: Delivery) -> Delivery:
    """The notification handed out again (its visibility ran out: the first handling did not delete it)."""
    flow.sqs.change_message_visibility(
        QueueUrl=flow.harness.queue_url, ReceiptHandle=first.receipt_handle, VisibilityTimeout=0
    )
    again = receive_only(flow, first.message_id)
    assert again.receive_count == first.receive_count + 1
    return again


def acknowledged(flow: Flow, delivery: Delivery) -> None:
    flow.sqs.delete_message(QueueUrl=flow.harness.queue_url, ReceiptHandle=delivery.receipt_handle)


def job_messages_sent(calls: list[dict[str, Any]]) -> int:
    return sum(len(call["Entries"]) for call in calls)


def spy_sends(
    flow: Flow, monkeypatch: pytest.MonkeyPatch, around: Callable[[int, Callable[[], Any]], Any] | None = None
) -> list[dict[str, Any]]:
    """Record the receiver's SendMessageBatch calls; `around(n, send)` wraps the n-th (from 0)."""
    real = flow.sqs.send_message_batch
    calls: list[dict[str, Any]] = []

    def send(**request: Any) -> Any:
        calls.append(request)
        if around is None:
            return real(**request)
        return around(len(calls) - 1, lambda: real(**request))

    monkeypatch.setattr(flow.sqs, "send_message_batch", send)
    return calls


def handled_after_a_failure(
    flow: Flow,
    monkeypatch: pytest.MonkeyPatch,
    bucket: str,
    around: Callable[[int, Callable[[], Any]], Any],
    error: type[BaseException],
    dates: tuple[str, ...] = DATES,
) -> list[dict[str, Any]]:
    """The notification's first handling, its sends wrapped by `around`, ends in `error`; SQS hands it out
    again and the second handling fans out. Returns the second handling's sends."""
    spy_sends(flow, monkeypatch, around)
    first = notification(flow, bucket, dates)
    with pytest.raises(error):
        receive(flow.receiver, first)
    monkeypatch.undo()
    calls = spy_sends(flow, monkeypatch)
    again = handled_again(flow, first)
    assert receive(flow.receiver, again) is Outcome.FANNED_OUT
    acknowledged(flow, again)
    monkeypatch.undo()
    return calls


def test_fan_out_a_notification_handled_twice_runs_each_marker_s_job_once(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first handling's sends land and its acknowledgement is lost: SQS hands the notification out
    again, and its second handling must not send the jobs again."""
    calls = spy_sends(flow, monkeypatch)
    first = notification(flow, "lost-delete")
    assert receive(flow.receiver, first) is Outcome.FANNED_OUT  # its delete is lost
    again = handled_again(flow, first)
    assert receive(flow.receiver, again) is Outcome.FANNED_OUT
    acknowledged(flow, again)
    monkeypatch.undo()

    assert job_messages_sent(calls) == len(DATES), "the second handling finds every copy noted and sends none"
    assert run_to_the_end(flow, "lost-delete") == job_ids("lost-delete", *DATES)


def test_fan_out_a_fan_out_that_died_half_way_sends_the_rest_and_runs_each_job_once(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twelve markers are two batches: the invocation dies in the second, after the first landed and
    before anything was noted. The retry finds no copy noted and sends all twelve: the first ten are
    twins, of which the claims run one."""
    dates = tuple(f"2026-12-{day:02d}" for day in range(1, 13))

    def die_at_second(n: int, send: Callable[[], Any]) -> Any:
        if n == 1:
            raise Crash
        return send()

    calls = handled_after_a_failure(flow, monkeypatch, "half-way", die_at_second, Crash, dates)

    assert job_messages_sent(calls) == 12
    assert run_to_the_end(flow, "half-way") == job_ids("half-way", *dates)


def test_fan_out_a_failed_batch_is_reported_and_its_retry_sends_only_what_was_not_sent(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second batch is refused (5xx before it landed): the first batch's copies are noted and the
    record is reported failed; its retry sends the two job messages not sent."""
    dates = tuple(f"2027-01-{day:02d}" for day in range(1, 13))

    def refuse_second(n: int, send: Callable[[], Any]) -> Any:
        if n == 1:
            raise server_error("SendMessageBatch")
        return send()

    calls = handled_after_a_failure(flow, monkeypatch, "failed-batch", refuse_second, FanOutFailed, dates)

    assert job_messages_sent(calls) == 2
    assert run_to_the_end(flow, "failed-batch") == job_ids("failed-batch", *dates)


def test_fan_out_a_send_answered_5xx_after_it_landed_makes_twins_that_run_once(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    def lose_the_answer(n: int, send: Callable[[], Any]) -> Any:
        send()
        raise server_error("SendMessageBatch")

    calls = handled_after_a_failure(flow, monkeypatch, "answer-lost", lose_the_answer, FanOutFailed)

    assert job_messages_sent(calls) == len(DATES), "nothing was noted: each job message is sent again"
    assert run_to_the_end(flow, "answer-lost") == job_ids("answer-lost", *DATES)


def test_fan_out_two_receivers_handling_one_notification_at_once_run_each_job_once(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A duplicate delivery on a standard queue: the second receiver handles the notification whole
    between the first one's marker writes and its sends; both send every job message."""
    first = notification(flow, "side-by-side")
    twin_outcomes: list[Outcome] = []

    def other_receiver_first(n: int, send: Callable[[], Any]) -> Any:
        if n == 0:
            real_send.undo()
            twin_outcomes.append(receive(flow.receiver, first))
        return send()

    real_send = pytest.MonkeyPatch()
    calls = spy_sends(flow, real_send, other_receiver_first)
    assert receive(flow.receiver, first) is Outcome.FANNED_OUT
    real_send.undo()
    acknowledged(flow, first)

    assert twin_outcomes == [Outcome.FANNED_OUT]
    assert job_messages_sent(calls) == len(DATES)  # the first receiver's (the second's went past the spy)
    assert run_to_the_end(flow, "side-by-side") == job_ids("side-by-side", *DATES)


def test_fan_out_a_failed_marker_write_sends_nothing_and_the_retry_fans_out(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    def throttled(**request: Any) -> Any:
        raise ClientError(
            {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "throttled"}},
            "TransactWriteItems",
        )

    calls = spy_sends(flow, monkeypatch)
    monkeypatch.setattr(flow.harness.dynamodb, "transact_write_items", throttled)
    first = notification(flow, "write-failed")
    with pytest.raises(ClientError):
        receive(flow.receiver, first)
    assert calls == [], "no job message is sent before its marker is written"
    monkeypatch.undo()
    again = handled_again(flow, first)
    assert receive(flow.receiver, again) is Outcome.FANNED_OUT
    acknowledged(flow, again)

    assert run_to_the_end(flow, "write-failed") == job_ids("write-failed", *DATES)


def test_s3_delivering_one_event_twice_runs_each_job_once(flow: Flow, monkeypatch: pytest.MonkeyPatch) -> None:
    """S3 delivers an event at least once: the same object creations (same sequencers) come again as a
    new message, which finds their markers and sends nothing."""
    first = notification(flow, "s3-twice")
    assert receive(flow.receiver, first) is Outcome.FANNED_OUT
    acknowledged(flow, first)
    calls = spy_sends(flow, monkeypatch)
    second = notification(flow, "s3-twice")
    assert second.message_id != first.message_id
    assert receive(flow.receiver, second) is Outcome.FANNED_OUT
    acknowledged(flow, second)
    monkeypatch.undo()

    assert calls == []
    markers_found = flow.receiver.store.get_many([f"s3:s3-twice/{key}@0A{i}" for i, key in enumerate(markers(*DATES))])
    assert {m.status for m in markers_found.values()} == {LeaseStatus.REQUEUED} and len(markers_found) == 3
    assert run_to_the_end(flow, "s3-twice") == job_ids("s3-twice", *DATES)


def test_s3_delivering_a_one_marker_event_twice_runs_its_job_once(flow: Flow, monkeypatch: pytest.MonkeyPatch) -> None:
    """A notification of one marker is fanned out too: S3's second delivery of its event finds the marker
    and sends nothing, so the partition runs once."""
    one = DATES[:1]
    first = notification(flow, "one-twice", one)
    assert receive(flow.receiver, first) is Outcome.FANNED_OUT
    acknowledged(flow, first)
    calls = spy_sends(flow, monkeypatch)
    second = notification(flow, "one-twice", one)
    assert receive(flow.receiver, second) is Outcome.FANNED_OUT
    acknowledged(flow, second)
    monkeypatch.undo()

    assert calls == []
    assert run_to_the_end(flow, "one-twice") == job_ids("one-twice", *one)


def test_fan_out_a_one_marker_notification_that_runs_in_place_goes_on_in_place(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A receiver that ran a one-marker notification under its own message id wrote its lease before a
    deploy replaced it: a redelivery of that notification adopts the attempt, and writes no marker and
    sends no job message beside the running one."""
    one = DATES[:1]
    first = notification(flow, "in-place", one)
    [job] = parse_delivery(first, flow.receiver.settings, flow.receiver.catalog).jobs
    assert decided(flow.receiver, first, job) is Outcome.STARTED  # as such a receiver ran it
    calls = spy_sends(flow, monkeypatch)
    again = handled_again(flow, first)
    assert receive(flow.receiver, again) in (Outcome.RUNNING, Outcome.SETTLED)
    monkeypatch.undo()

    assert calls == []
    assert flow.receiver.store.get(f"s3:in-place/{markers(*one)[0]}@0A0") is None
    assert run_to_the_end(flow, "in-place") == job_ids("in-place", *one)


def test_fan_out_a_copy_a_previous_release_made_of_a_one_marker_notification_claims_its_marker(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A receiver that ran a one-marker notification in place found its job id busy: it wrote a REQUEUED
    marker under the notification's id and sent a copy of the notification back to wait, and an operator
    then cancelled it. The copy, received after a deploy, claims that marker as any copy does: the cancel
    refuses it, it goes to the DLQ, and no job message is sent beside it."""
    one = ("2026-11-23",)
    job_id = f"wait:copy-of-one/events/date={one[0]}/"
    holder = flow.send_job(job_id, seconds=1)
    assert receive(flow.receiver, receive_only(flow, holder)) is Outcome.STARTED
    first = notification(flow, "copy-of-one", one)
    [job] = parse_delivery(first, flow.receiver.settings, flow.receiver.catalog).jobs
    assert decided(flow.receiver, first, job) is Outcome.WAITING  # as such a receiver ran it
    acknowledged(flow, first)
    marker = flow.receiver.store.get(first.message_id)
    assert marker is not None and marker.status is LeaseStatus.REQUEUED and marker.copy_id is not None
    assert cancel.cancel(flow.canceller(), first.message_id, "wrong partition").outcome is cancel.Outcome.CANCELLED

    calls = spy_sends(flow, monkeypatch)
    copy = receive_only(flow, marker.copy_id)
    assert receive(flow.receiver, copy) is Outcome.CANCELLED
    acknowledged(flow, copy)  # as the mapping deletes a record that is done
    monkeypatch.undo()

    assert calls == [], "no job message is sent for a cancelled copy"
    assert flow.receiver.store.get(f"s3:copy-of-one/{markers(*one)[0]}@0A0") is None
    letters = [m["MessageAttributes"] for m in flow.dlq_messages()]
    assert any(a["ErrorType"]["StringValue"] == cancel.CANCELLED for a in letters), "the copy is in the DLQ"
    assert run_to_the_end(flow, "copy-of-one") == {job_id: 1}, "the holder's run only"


def test_fan_out_a_duplicate_of_a_notification_running_in_place_is_not_fanned_out(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQS may hand out a copy of a message kept on a server that missed a receive, its receive count not
    showing the receives before (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/standard-queues-at-least-once-delivery.html):
    a notification that runs in place is known by its lease whatever the count, and nothing is sent."""
    one = DATES[1:2]
    first = notification(flow, "duplicate-in-place", one)
    [job] = parse_delivery(first, flow.receiver.settings, flow.receiver.catalog).jobs
    assert decided(flow.receiver, first, job) is Outcome.STARTED  # as a receiver of the earlier code ran it
    calls = spy_sends(flow, monkeypatch)
    duplicate = dataclasses.replace(first, receipt_handle=first.receipt_handle + "-copy")  # its count still 1
    assert receive(flow.receiver, duplicate) is not Outcome.FANNED_OUT
    monkeypatch.undo()

    assert calls == []
    assert flow.receiver.store.get(f"s3:duplicate-in-place/{markers(*one)[0]}@0A0") is None
    assert run_to_the_end(flow, "duplicate-in-place") == job_ids("duplicate-in-place", *one)


def test_fan_out_a_failed_lease_read_fails_the_record_and_the_retry_fans_out(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one-marker notification's lease read is throttled: the record fails before anything is written
    or sent, SQS hands it out again, and that handling fans it out; the partition runs once."""
    one = DATES[2:]
    first = notification(flow, "read-failed", one)

    def throttled(*args: Any, **kwargs: Any) -> Any:
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "throttled"}}, "GetItem")

    calls = spy_sends(flow, monkeypatch)
    monkeypatch.setattr(flow.receiver.store, "get", throttled)
    with pytest.raises(ClientError):
        receive(flow.receiver, first)
    assert calls == [], "nothing is sent before the lease is read"
    monkeypatch.undo()
    assert flow.receiver.store.get(f"s3:read-failed/{markers(*one)[0]}@0A0") is None, "no marker written"
    again = handled_again(flow, first)
    assert receive(flow.receiver, again) is Outcome.FANNED_OUT
    acknowledged(flow, again)

    assert run_to_the_end(flow, "read-failed") == job_ids("read-failed", *one)


def test_fan_out_a_marker_put_into_moto_s3_runs_its_partition(flow: Flow) -> None:
    """The offline runtime's S3 (moto) notifies the jobs queue of a created marker with a record that has
    only what the receiver reads (no `userIdentity`, `requestParameters`, `responseElements`, sequencer):
    its partition runs, where a strict parse of every field AWS documents sent it to the DLQ unrun."""
    import boto3

    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="moto-raw")
    s3.put_bucket_notification_configuration(
        Bucket="moto-raw",
        NotificationConfiguration={
            "QueueConfigurations": [
                {
                    "QueueArn": SOURCE_ARN,
                    "Events": ["s3:ObjectCreated:*"],
                    "Filter": {"Key": {"FilterRules": [{"Name": "suffix", "Value": "_SUCCESS"}]}},
                }
            ]
        },
    )
    s3.put_object(Bucket="moto-raw", Key="events/date=2026-11-20/_SUCCESS", Body=b"")

    assert run_to_the_end(flow, "moto-raw") == job_ids("moto-raw", "2026-11-20")
    # this bucket's notification alone: a message a thread of an earlier test sends late lands here too
    dead = flow.sqs.receive_message(QueueUrl=flow.dlq_url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
    assert not [m for m in dead.get("Messages", []) if "moto-raw" in m["Body"]]
