"""FIFO queues on moto, what needs moto's wiring: the handler's batch of several messages of one group
(each group's head started, the rest of a deferred group skipped), the FIFO DLQ and the queue's redrive,
sends with group and deduplication ids (S3 fan-out, a producer's retry, `longjobs submit`, `longjobs dlq`),
and a lapse that is final (an expired handle, stubbed as AWS answers it: moto accepts stale handles).

The protocol on FIFO (order within a group, groups side by side, a group blocked while its head runs, is
redelivered, waits for its job id or for its release delay, a poison message and a failed head taken alone
to the FIFO DLQ) is checked on virtual time: tests/sim/test_fifo.py."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from longjobs.cli import dlq, submit
from longjobs.cli.catalog import Catalog
from longjobs.cli.errors import CliError
from longjobs.engine.clock import SystemClock
from longjobs.engine.delivery.types import Delivery, Outcome
from longjobs.engine.extender.service import renew_due
from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog
from longjobs.engine.jobs.triggers import S3Trigger
from longjobs.engine.lease import LeaseStatus
from longjobs.engine.receiver.service import receive
from longjobs.engine.settings import FIFO_BATCH_SIZE, SQS_MAX_RETENTION_S
from longjobs.engine.visibility import FailureClass, VisibilityChange, VisibilityClient
from longjobs.offline.lambdas import LambdaContext, s3_notification, sqs_event
from tests.functional.conftest import (
    ACCOUNT,
    REGION,
    STATE_MACHINE_ARN,
    TABLE,
    Flow,
    OffsetClock,
    load_handler,
    running_flow,
)

SOURCE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs.fifo"
SKIPPED_BACK_S = 2
"""The queue's VT in the test of a batch of several messages of a group: records reported not done
(skipped behind their group's head) come back this soon. Elsewhere the queue's VT is the harness's 30 s, so
nothing comes back while a test looks."""
EXPIRED = "Value {} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."
"""What SQS answers for a FIFO message's handle once its visibility timeout has run out."""


@pytest.fixture
def fifo() -> Iterator[Flow]:
    with running_flow(fifo=True, max_attempts=5) as made:
        yield made


def send(
    flow: Flow, group: str, job_id: str, job_type: str = "wait", dedup_id: str | None = None, **params: Any
) -> str:
    body = json.dumps({"job_id": job_id, "type": job_type, "params": params})
    extra = {"MessageDeduplicationId": dedup_id} if dedup_id else {}
    sent = flow.sqs.send_message(QueueUrl=flow.harness.queue_url, MessageBody=body, MessageGroupId=group, **extra)
    return str(sent["MessageId"])


def send_raw(flow: Flow, group: str, body: str) -> str:
    return str(
        flow.sqs.send_message(QueueUrl=flow.harness.queue_url, MessageBody=body, MessageGroupId=group)["MessageId"]
    )


def fifo_handler(monkeypatch: pytest.MonkeyPatch, flow: Flow) -> ModuleType:
    return load_handler(
        monkeypatch,
        "longjobs.functions.receiver",
        TABLE_NAME=TABLE,
        QUEUE_URL=flow.harness.queue_url,
        DLQ_URL=flow.dlq_url,
        STATE_MACHINE_ARN=STATE_MACHINE_ARN,
        FIFO="true",
        POLICY="threshold",
        VISIBILITY_TIMEOUT_S="5",
        THRESHOLD_S="2.5",
        HEARTBEAT_S="0.5",
        EXTENDER_PERIOD_S="1",
        RECEIVER_TIMEOUT_S="1",
        RECONCILE_GRACE_S="2",
    )


class Mapping:
    """The event source mapping on the FIFO queue: receive a batch (the stack's size) with the queue's VT,
    call the handler, delete what it did not report."""

    def __init__(self, flow: Flow, handler: ModuleType, batch_size: int = FIFO_BATCH_SIZE) -> None:
        self.flow = flow
        self.handler = handler
        self.batch_size = batch_size
        self.batches: list[list[str]] = []

    def poll(self) -> dict[str, Any]:
        messages = self.flow.sqs.receive_message(
            QueueUrl=self.flow.harness.queue_url,
            MaxNumberOfMessages=self.batch_size,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            return {"batchItemFailures": []}
        self.batches.append([m["MessageId"] for m in messages])
        response: dict[str, Any] = self.handler.handler(
            sqs_event(messages, source_arn=SOURCE_ARN, region=REGION), LambdaContext(function_name="receiver")
        )
        failed = {item["itemIdentifier"] for item in response["batchItemFailures"]}
        for message in messages:
            if message["MessageId"] not in failed:
                self.flow.sqs.delete_message(
                    QueueUrl=self.flow.harness.queue_url, ReceiptHandle=message["ReceiptHandle"]
                )
        return response


def reported(response: dict[str, Any]) -> list[str]:
    return [item["itemIdentifier"] for item in response["batchItemFailures"]]


def executions_of(flow: Flow) -> dict[str, dict[str, Any]]:
    """Each message's execution (one each here), by message id."""
    return {e["name"].rsplit("-", 1)[0]: e for e in flow.executions()}


def run_until_settled(flow: Flow, mapping: Mapping, message_ids: list[str], timeout_s: float = 60) -> None:
    """Poll like the mapping and run the extender, until every message is gone from the queue."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        mapping.poll()
        renew_due(flow.extender, deadline=time.time() + 1)
        attributes = flow.sqs.get_queue_attributes(QueueUrl=flow.harness.queue_url, AttributeNames=["All"])
        counts = attributes["Attributes"]
        if counts["ApproximateNumberOfMessages"] == "0" and counts["ApproximateNumberOfMessagesNotVisible"] == "0":
            return
        time.sleep(0.3)
    raise AssertionError(f"messages {message_ids} not settled after {timeout_s} s")


def test_fifo_batch_starts_each_groups_head_and_leaves_the_rest_of_a_deferred_group(
    fifo: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    handler = fifo_handler(monkeypatch, fifo)
    a1 = send(fifo, "A", "a1", seconds=30)
    a2 = send(fifo, "A", "a2", seconds=1)
    b1 = send(fifo, "B", "b1", "echo", text="inline")
    a3 = send(fifo, "A", "a3", seconds=1)
    b2 = send(fifo, "B", "b2", seconds=1)

    response = Mapping(fifo, handler, batch_size=10).poll()

    assert reported(response) == [a1, a2, a3, b2], "a1 and b2 deferred; a2 and a3 not done behind a1"
    assert set(executions_of(fifo)) == {a1, b2}, "nothing of group A starts behind a1; group B goes on"
    assert fifo.receiver.store.get(a2) is None and fifo.receiver.store.get(a3) is None
    assert fifo.lease(a1).active and fifo.lease(b2).active
    assert fifo.receiver.store.get(b1) is None, "the inline job ran and was deleted"


def test_fifo_failing_job_in_a_batch_of_its_group_takes_none_of_the_jobs_behind_it_to_the_dlq(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch of 3 (not the stack's FIFO batch of 1: the simulation hands out one message of a group at a
    time, and checks that case in tests/sim/test_fifo.py): each retry of a group's head spends a receive of
    every record received with it (skipped, reported not done). The processor counts attempts, not
    receives, and the queue's redrive is a backstop far above them, so a1 alone goes to the DLQ after its
    attempts, and a2 and a3 run. The records skipped come back after the queue's short VT; the bound on
    the whole run is generous (it only ends a run that would never settle)."""
    with running_flow(fifo=True, queue_vt_s=SKIPPED_BACK_S, max_attempts=3) as flow:
        handler = fifo_handler(monkeypatch, flow)
        a1 = send(flow, "A", "a1", seconds=0, fail=True)
        followers = [send(flow, "A", f"a{i}", seconds=0) for i in (2, 3)]

        run_until_settled(flow, Mapping(flow, handler, batch_size=3), [a1, *followers], timeout_s=300)

        dead = flow.sqs.receive_message(QueueUrl=flow.dlq_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
        # The queue is empty once the last workflow deleted its message; that execution may still be
        # closing its lease: each is waited for before its status is read.
        ended = {m: flow.wait_for_execution(e["executionArn"]) for m, e in executions_of(flow).items()}
        ran = {m for m, e in ended.items() if e["status"] == "SUCCEEDED"}
        [copy] = dead["Messages"]
        attributes = {name: value["StringValue"] for name, value in copy["MessageAttributes"].items()}
        assert (attributes["OriginalMessageId"], attributes["ErrorType"]) == (a1, "AttemptsExhausted")
        assert ran == set(followers)
        record = flow.receiver.store.get(a1)
        assert record is not None and (record.status, record.group_id) == (LeaseStatus.REJECTED, "A")


def test_fifo_redrive_moves_a_group_head_past_its_receives_to_the_fifo_dlq_and_the_group_goes_on(fifo: Flow) -> None:
    """The queue's own redrive, the backstop behind the processor's attempts, keeps working on FIFO."""
    a1 = send(fifo, "A", "a1", seconds=1)
    a2 = send(fifo, "A", "a2", seconds=1)
    for _ in range(fifo.settings.redrive_max_receives(SQS_MAX_RETENTION_S)):
        got = fifo.sqs.receive_message(QueueUrl=fifo.harness.queue_url, MaxNumberOfMessages=1, VisibilityTimeout=0)
        assert [m["MessageId"] for m in got["Messages"]] == [a1], "the group's head, every time"

    got = fifo.sqs.receive_message(QueueUrl=fifo.harness.queue_url, MaxNumberOfMessages=10)

    assert [m["MessageId"] for m in got["Messages"]] == [a2], "a1 went to the DLQ; a2 is the head now"
    [dead] = fifo.sqs.receive_message(QueueUrl=fifo.dlq_url, AttributeNames=["All"])["Messages"]
    assert (dead["MessageId"], dead["Attributes"]["MessageGroupId"]) == (a1, "A")


def test_fifo_fan_out_keeps_the_group_and_a_retry_sends_no_second_copy(fifo: Flow) -> None:
    notification = send_raw(
        fifo,
        "tenant-1",
        s3_notification("raw", ["events/date=2026-11-20/_SUCCESS", "events/date=2026-11-21/_SUCCESS"], region=REGION),
    )
    [delivery] = fifo.receive_batch()
    delivery = replace(delivery, group_id="tenant-1")  # as the event's record carries it
    fifo.receiver.settings = fifo.settings.model_copy(
        update={"curated_uri": "s3://curated/", "quarantine_uri": "s3://quarantine/"}
    )

    assert receive(fifo.receiver, delivery) is Outcome.FANNED_OUT
    assert receive(fifo.receiver, delivery) is Outcome.FANNED_OUT  # the record retried: its delete was lost
    fifo.sqs.delete_message(QueueUrl=fifo.harness.queue_url, ReceiptHandle=delivery.receipt_handle)

    copies = fifo.sqs.receive_message(QueueUrl=fifo.harness.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"])
    jobs = [(json.loads(m["Body"])["params"]["date"], m["Attributes"]) for m in copies["Messages"]]
    assert [date for date, _ in jobs] == ["2026-11-20", "2026-11-21"], "one job per partition, in order, once"
    assert [a["MessageGroupId"] for _, a in jobs] == ["tenant-1", "tenant-1"]
    assert [a["MessageDeduplicationId"] for _, a in jobs] == [f"{notification}-0", f"{notification}-1"]


def test_fifo_producer_duplicate_is_dropped(fifo: Flow) -> None:
    first = send(fifo, "A", "once", dedup_id="order-17", seconds=1)
    send(fifo, "A", "once-again", dedup_id="order-17", seconds=1)  # a producer's retry

    assert [d.message_id for d in fifo.receive_batch()] == [first]


def test_fifo_offline_queue_deduplicates_for_5_minutes_after_the_delete_and_per_group(fifo: Flow) -> None:
    """As SQS in high-throughput mode: a body sent again within 5 minutes is dropped though the first was
    received and deleted, and only in its own group (moto dropped it only while the first was queued, in
    any group: `longjobs submit` of one job twice ran it twice, and the same job in another group never)."""
    url = fifo.harness.queue_url
    first = send(fifo, "A", "nightly", seconds=1)
    [got] = fifo.sqs.receive_message(QueueUrl=url)["Messages"]
    fifo.sqs.delete_message(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"])
    assert got["MessageId"] == first

    send(fifo, "A", "nightly", seconds=1)  # the same body, in its group: a duplicate
    other = send(fifo, "B", "nightly", seconds=1)  # the same body, in another group: a message of its own

    assert [m["MessageId"] for m in fifo.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]] == [
        other
    ]


def test_fifo_offline_queue_gives_a_message_moved_to_the_fifo_dlq_its_id_as_deduplication_id(fifo: Flow) -> None:
    """SQS's own redrive to a FIFO DLQ replaces the deduplication id by the message id, so the body's hash
    does not make a message move task's copy back a duplicate of the message sent a moment before."""
    a1 = send(fifo, "A", "a1", seconds=1)
    for _ in range(fifo.settings.redrive_max_receives(SQS_MAX_RETENTION_S) + 1):
        fifo.sqs.receive_message(QueueUrl=fifo.harness.queue_url, VisibilityTimeout=0)

    [dead] = fifo.sqs.receive_message(QueueUrl=fifo.dlq_url, AttributeNames=["All"])["Messages"]

    assert (dead["MessageId"], dead["Attributes"]["MessageDeduplicationId"]) == (a1, a1)


def test_fifo_expired_handle_is_lost_and_the_extender_stops_the_execution_before_closing(
    fifo: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lapse is final on FIFO: SQS refuses a handle whose visibility ran out (moto accepts it: the
    answer is stubbed as AWS sends it). The extender stops the execution, then closes the lease LOST."""
    a1 = send(fifo, "A", "lapsed", seconds=30)
    assert fifo.deliver() == {a1: Outcome.STARTED}
    lease = fifo.lease(a1)
    assert lease.execution_arn is not None
    fifo.wait_for_job(lease.execution_arn)  # moto loses a stop that lands before the job's branch opens
    sqs = boto3.client("sqs", region_name=REGION)
    stubber = Stubber(sqs)
    stubber.add_response(
        "change_message_visibility_batch",
        {
            "Successful": [],
            "Failed": [
                {
                    "Id": "0",
                    "SenderFault": True,
                    "Code": "InvalidParameterValue",
                    "Message": EXPIRED.format(lease.receipt_handle),
                }
            ],
        },
    )
    clock = OffsetClock(3)  # the lease is due
    extender = fifo.harness.extender(fifo.settings, clock, sqs=sqs)
    order: list[str] = []
    real_stop, real_close = extender.stepfunctions.stop_execution, extender.store.close

    def stop(**kwargs: Any) -> Any:
        order.append("stop")
        return real_stop(**kwargs)

    def close(*args: Any, **kwargs: Any) -> Any:
        order.append("close")
        return real_close(*args, **kwargs)

    monkeypatch.setattr(extender.stepfunctions, "stop_execution", stop)
    monkeypatch.setattr(extender.store, "close", close)
    with stubber:
        report = renew_due(extender, deadline=time.time() + 5)
        stubber.assert_no_pending_responses()

    assert (report.lost, report.stopped) == (1, 1)
    assert order == ["stop", "close"], "stopped before the lease is let go"
    lost = fifo.lease(a1)
    assert lost.status is LeaseStatus.LOST and "expired" in str(lost.last_error)
    deadline = time.monotonic() + 60
    while fifo.harness.stepfunctions.describe_execution(executionArn=lease.execution_arn)["status"] == "RUNNING":
        assert time.monotonic() < deadline, "the execution was not stopped"
        time.sleep(0.1)
    assert fifo.harness.stepfunctions.describe_execution(executionArn=lease.execution_arn)["status"] == "ABORTED"


BUILTINS = Catalog(JobCatalog(BUILTIN_TYPES), origin="the test")


def test_fifo_longjobs_submit_sends_into_a_group_and_needs_one(fifo: Flow) -> None:
    body = json.dumps({"job_id": "cli", "type": "wait", "params": {"seconds": 1}})
    settings = submit.validation_settings()
    with pytest.raises(CliError, match="a FIFO queue needs --message-group-id"):
        submit.submit(fifo.sqs, fifo.harness.queue_url, body, settings, BUILTINS)

    sent = submit.submit(
        fifo.sqs, fifo.harness.queue_url, body, settings, BUILTINS, group_id="ops", deduplication_id="cli-1"
    )

    got = fifo.sqs.receive_message(QueueUrl=fifo.harness.queue_url, AttributeNames=["All"])["Messages"]
    assert [(m["MessageId"], m["Attributes"]["MessageGroupId"]) for m in got] == [(sent.message_id, "ops")]
    assert got[0]["Attributes"]["MessageDeduplicationId"] == "cli-1"


def test_fifo_longjobs_dlq_copy_puts_messages_back_into_their_group(fifo: Flow) -> None:
    """`longjobs dlq redrive` copies where the endpoint has no message move task (moto)."""
    for n in range(2):
        fifo.sqs.send_message(QueueUrl=fifo.dlq_url, MessageBody=f"job-{n}", MessageGroupId="tenant-9")

    result = dlq.copy_messages(fifo.sqs, fifo.dlq_url, fifo.harness.queue_url, hold_s=0)

    assert (result.moved, result.failed, result.errors) == (2, 0, [])
    got = fifo.sqs.receive_message(QueueUrl=fifo.harness.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"])
    assert [(m["Body"], m["Attributes"]["MessageGroupId"]) for m in got["Messages"]] == [
        ("job-0", "tenant-9"),
        ("job-1", "tenant-9"),
    ], "in its group, in order"


def test_fifo_offline_queue_refuses_a_handle_whose_visibility_ended_as_sqs_does(fifo: Flow) -> None:
    """moto accepts old FIFO handles; the offline runtime's FIFO queues refuse them as SQS does, so a retried
    release that lands after the next receive does not show that receive's message (chaos, seed 1, FIFO run 3)."""
    a1 = send(fifo, "A", "a1", seconds=1)
    url = fifo.harness.queue_url
    [first] = fifo.sqs.receive_message(QueueUrl=url, VisibilityTimeout=30)["Messages"]
    fifo.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0)
    [second] = fifo.sqs.receive_message(QueueUrl=url, VisibilityTimeout=30)["Messages"]
    assert second["MessageId"] == a1

    with pytest.raises(ClientError, match="The receipt handle has expired"):
        fifo.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0)
    outcome = VisibilityClient(fifo.sqs, clock=SystemClock()).change(
        VisibilityChange(a1, url, first["ReceiptHandle"], 0)
    )
    assert outcome.failure is FailureClass.LOST
    assert not fifo.sqs.receive_message(QueueUrl=url).get("Messages"), "the second receive's message stays hidden"


def object_created(bucket: str, key: str, sequencer: str) -> str:
    """An S3 "Object Created" event as an EventBridge rule delivers it to the queue (S3 cannot notify a FIFO
    queue: docs/fifo.md)."""
    detail = {
        "version": "0",
        "bucket": {"name": bucket},
        "object": {"key": key, "size": 0, "etag": "d41d8cd98f00b204e9800998ecf8427e", "sequencer": sequencer},
        "request-id": "N4N7GDK58NMKJ12R",
        "requester": ACCOUNT,
        "reason": "PutObject",
    }
    return json.dumps(
        {
            "version": "0",
            "id": f"event-{sequencer}",
            "detail-type": "Object Created",
            "source": "aws.s3",
            "account": ACCOUNT,
            "time": "2026-11-20T10:00:00Z",
            "region": REGION,
            "resources": [f"arn:aws:s3:::{bucket}"],
            "detail": detail,
        }
    )


def test_fifo_an_eventbridge_s3_event_runs_its_job_before_the_messages_sent_after_it() -> None:
    """EventBridge delivers one object a message, so every S3 event on a FIFO queue names one marker. Sent
    as a job message of its own, its job would go to the back of the group, behind a message sent after
    the event; it runs in its place instead, as any message of the group does."""
    catalog = JobCatalog(BUILTIN_TYPES, [S3Trigger(job_type="wait", params={"seconds": 0})])
    with running_flow(catalog, fifo=True) as flow:
        send_raw(flow, "tenant-1", object_created("raw", "events/date=2026-11-20/_SUCCESS", "0A1"))
        send(flow, "tenant-1", "tenant-1-compact", seconds=0)  # sent after the event: runs after its job

        started: list[str | None] = []
        for _ in range(4):  # one record at a time, as the stack's FIFO mapping hands them out
            [message] = flow.sqs.receive_message(
                QueueUrl=flow.harness.queue_url,
                MaxNumberOfMessages=1,
                AttributeNames=["ApproximateReceiveCount"],
                MessageAttributeNames=["All"],
            )["Messages"]
            delivery = Delivery(
                message_id=message["MessageId"],
                receipt_handle=message["ReceiptHandle"],
                body=message["Body"],
                receive_count=int(message["Attributes"]["ApproximateReceiveCount"]),
                source_arn=SOURCE_ARN,
                message_attributes=dict(message.get("MessageAttributes", {})),
                group_id="tenant-1",
            )
            outcome = receive(flow.receiver, delivery)
            if outcome is Outcome.STARTED:
                lease = flow.lease(delivery.message_id)
                started.append(lease.job_id)
                flow.wait_for_execution(lease.execution_arn or "")  # a zero-second job: nothing left running
                break
            assert not outcome.deferred
            flow.sqs.delete_message(QueueUrl=flow.harness.queue_url, ReceiptHandle=delivery.receipt_handle)

        assert started == ["wait:raw/events/date=2026-11-20/"], "the group's first message runs first"


def test_fifo_cancel_of_a_running_job_dead_letters_it_in_its_group_and_redrive_keeps_it(
    fifo: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancelled FIFO job's DLQ copy keeps its message group, as the receiver's DLQ copies do, so
    `longjobs dlq redrive` puts it back into that group, in its order (docs/operate.md), not into a group of
    its own that runs beside the jobs sent after it."""
    from longjobs.engine import cancel

    handler = fifo_handler(monkeypatch, fifo)
    a1 = send(fifo, "tenant-9", "a1", seconds=60)
    Mapping(fifo, handler).poll()
    lease = fifo.lease(a1)
    assert lease.status is LeaseStatus.ACTIVE
    fifo.wait_for_job(lease.execution_arn or "")

    report = cancel.cancel(fifo.canceller(), a1, "wrong date")

    assert report.outcome is cancel.Outcome.CANCELLED
    [letter] = fifo.sqs.receive_message(QueueUrl=fifo.dlq_url, AttributeNames=["All"], VisibilityTimeout=0)["Messages"]
    assert letter["Attributes"]["MessageGroupId"] == "tenant-9", "its group, not its message id"
    result = dlq.copy_messages(fifo.sqs, fifo.dlq_url, fifo.harness.queue_url, hold_s=0)
    assert result.moved == 1
    [copy] = fifo.sqs.receive_message(QueueUrl=fifo.harness.queue_url, AttributeNames=["All"])["Messages"]
    assert copy["Attributes"]["MessageGroupId"] == "tenant-9"
