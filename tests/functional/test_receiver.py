"""The receiver on moto: the Lambda handler's partial batch response, poison to the DLQ, and every crash
window between lease, visibility change and StartExecution ending in a released or completed message."""

from __future__ import annotations

import json
import string
import time
from types import ModuleType
from typing import Any, cast

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from longjobs.engine import aws
from longjobs.engine.clock import SystemClock
from longjobs.engine.delivery.attempt import START_REFUSED, START_REFUSED_EVERY_ATTEMPT
from longjobs.engine.delivery.types import Delivery, Outcome
from longjobs.engine.extender.reconcile import reconcile
from longjobs.engine.lease import LastError, LeaseStatus, job_lock_key
from longjobs.engine.receiver.service import InlineJobFailed, receive
from longjobs.engine.visibility import ChangeOutcome, FailureClass
from longjobs.offline.lambdas import LambdaContext
from tests.functional.conftest import (
    ACCOUNT,
    REGION,
    STATE_MACHINE_ARN,
    TABLE,
    Flow,
    emitted_metrics,
    load_handler,
    running_flow,
)

SOURCE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs"


class Crash(BaseException):
    """The Lambda dies here (timeout, out of memory): no code of ours runs after it."""


def sqs_event(flow: Flow, deliveries: list[Delivery]) -> dict[str, Any]:
    """A real-shaped SQS event, as the event source mapping sends it."""
    return {
        "Records": [
            {
                "messageId": d.message_id,
                "receiptHandle": d.receipt_handle,
                "body": d.body,
                "attributes": {
                    "ApproximateReceiveCount": str(d.receive_count),
                    "SentTimestamp": str(int(time.time() * 1000)),  # sent just now, as the queue's messages were
                    "SenderId": "AIDAEXAMPLE",
                    "ApproximateFirstReceiveTimestamp": str(int(time.time() * 1000)),
                },
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": d.source_arn,
                "awsRegion": REGION,
            }
            for d in deliveries
        ]
    }


def receiver_handler(monkeypatch: pytest.MonkeyPatch, flow: Flow) -> ModuleType:
    return load_handler(
        monkeypatch,
        "longjobs.functions.receiver",
        TABLE_NAME=TABLE,
        QUEUE_URL=flow.harness.queue_url,
        DLQ_URL=flow.dlq_url,
        STATE_MACHINE_ARN=STATE_MACHINE_ARN,
        POLICY="threshold",
        VISIBILITY_TIMEOUT_S="5",
        THRESHOLD_S="2.5",
        HEARTBEAT_S="0.5",
        EXTENDER_PERIOD_S="1",
    )


def test_receiver_handler_sends_poison_to_dlq_and_keeps_the_rest_of_the_batch(
    flow: Flow, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    handler = receiver_handler(monkeypatch, flow)
    poison = flow.harness.send("{not json")
    inline = flow.harness.send(json.dumps({"job_id": "hello", "type": "echo", "params": {"text": "hi"}}))
    long_job = flow.send_job("long", seconds=30)
    batch = flow.receive_batch()
    assert len(batch) == 3

    response = handler.handler(sqs_event(flow, batch), LambdaContext(function_name="receiver"))

    assert response == {"batchItemFailures": [{"itemIdentifier": long_job}]}, "only the long job is deferred"
    [dead] = flow.dlq_messages()
    assert dead["Body"] == "{not json"
    attributes = {name: value["StringValue"] for name, value in dead["MessageAttributes"].items()}
    assert attributes["ErrorType"] == "NotJson"
    assert attributes["ErrorMessage"].startswith("body is not JSON")
    assert attributes["SourceQueue"] == SOURCE_ARN
    assert attributes["OriginalMessageId"] == poison
    assert attributes["ReceiveCount"] == "1"
    rejected = flow.lease(poison)
    assert rejected.status is LeaseStatus.REJECTED and "NotJson" in str(rejected.last_error)
    assert rejected.job_type is None, "a body that is not JSON names no type"
    assert flow.receiver.store.get(inline) is None, "inline jobs keep no lease"
    assert flow.lease(long_job).status is LeaseStatus.ACTIVE
    metrics = emitted_metrics(capsys.readouterr().out)
    assert metrics["JobsRejected"] == 1 and metrics["JobsInline"] == 1 and metrics["JobsStarted"] == 1


def test_receiver_handler_sends_a_body_nested_too_deep_to_the_dlq_and_keeps_the_rest_of_the_batch(
    flow: Flow,
) -> None:
    """A body nested deeper than Python's JSON reader goes (RFC 8259, section 9, lets a parser limit
    nesting), well inside the size limit: `NotJson` on its first receive. Its `RecursionError` failed the
    batch's read ahead, so no record of its batch was handled, on every receive."""
    from longjobs.functions.receiver import batch_processor, receive_records

    depth = 30_000
    poison = flow.harness.send("[" * depth + "]" * depth)
    inline = flow.harness.send(json.dumps({"job_id": "hello", "type": "echo", "params": {"text": "hi"}}))
    batch = flow.receive_batch()
    assert len(batch[0].body) <= flow.settings.max_body_bytes and len(batch) == 2

    response = receive_records(flow.receiver, sqs_event(flow, batch), batch_processor(False))

    assert response == {"batchItemFailures": []}, f"both done: {inline} ran inline, the poison went to the DLQ"
    [dead] = flow.dlq_messages()
    attributes = {name: value["StringValue"] for name, value in dead["MessageAttributes"].items()}
    assert attributes["ErrorType"] == "NotJson" and attributes["OriginalMessageId"] == poison
    assert "nested deeper" in attributes["ErrorMessage"]


def test_receiver_sends_a_wait_longer_than_renewal_lasts_to_the_dlq_unrun_naming_the_limit() -> None:
    """A wait past `max_renewal_s` would be stopped at that hard stop on every attempt: it goes to the DLQ on
    its first receive, with the limit in its reason, and no execution starts."""
    with running_flow(max_renewal_s=60) as flow:
        too_long = flow.send_job("too-long", seconds=61)

        assert flow.deliver() == {too_long: Outcome.REJECTED}

        [dead] = flow.dlq_messages()
        attributes = {name: value["StringValue"] for name, value in dead["MessageAttributes"].items()}
        assert attributes["ErrorType"] == "InvalidParameters"
        assert attributes["ErrorMessage"].startswith(
            "params.seconds: 61 s does not end within renewal (60 s from the receive"
        )
        assert attributes["OriginalMessageId"] == too_long
        rejected = flow.lease(too_long)
        assert (rejected.status, rejected.job_type) == (LeaseStatus.REJECTED, "wait"), "its type, for `leases`"
        assert flow.executions() == []


def test_receiver_refuses_a_wait_of_all_of_renewal_which_begins_after_the_receive() -> None:
    """Renewal's hard stop counts from the receive (`renew_until`), and the wait begins after it (the lease,
    the start, the workflow's first states): a wait of exactly `max_renewal_s` runs past the hard stop and is
    stopped there on every attempt (CAPPED). It is refused on its first receive; one second less starts."""
    with running_flow(max_renewal_s=6) as flow:
        all_of_it = flow.send_job("all-of-renewal", seconds=6)

        assert flow.deliver() == {all_of_it: Outcome.REJECTED}

        [dead] = flow.dlq_messages()
        assert dead["MessageAttributes"]["ErrorType"]["StringValue"] == "InvalidParameters"
        assert "give seconds of 5 or less" in dead["MessageAttributes"]["ErrorMessage"]["StringValue"]
        assert flow.executions() == []
        fits = flow.send_job("fits", seconds=5)

        assert flow.deliver() == {fits: Outcome.STARTED}


def test_receiver_runs_a_short_wait_with_renewal_disabled() -> None:
    """`max_renewal_s=0` disables renewal: the job has its first chunk (20 s here, falling due 2.5 s before
    its end), and a 1 s wait succeeds in it. The receiver's check of a wait against renewal must not read
    that as a limit of 0 s and send every wait to the DLQ unrun."""
    with running_flow(max_renewal_s=0, visibility_timeout_s=20) as flow:
        short = flow.send_job("short", seconds=1)

        assert flow.deliver() == {short: Outcome.STARTED}

        arn = flow.lease(short).execution_arn
        assert arn is not None
        assert flow.wait_for_execution(arn)["status"] == "SUCCEEDED"
        assert flow.lease(short).status is LeaseStatus.SUCCEEDED
        assert flow.dlq_messages() == []


def test_receiver_reports_record_failed_when_dlq_send_fails(flow: Flow) -> None:
    poison = flow.harness.send('{"job_id": "x", "type": "nope", "params": {}}')
    [delivery] = flow.receive_batch()
    flow.receiver.settings = flow.receiver.settings.model_copy(
        update={"dlq_url": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/missing-dlq"}
    )

    with pytest.raises(Exception, match=r"NonExistentQueue|does not exist"):
        receive(flow.receiver, delivery)

    assert flow.dlq_messages() == []
    assert flow.receiver.store.get(poison) is None


def test_receiver_inline_failure_is_retried_by_sqs_then_dead_lettered_after_max_attempts() -> None:
    """An inline job keeps no lease: its receives count its attempts. A failure fails the record, so SQS
    delivers it again; at `max_attempts` receives it goes to the DLQ with the failure, as a long job's last
    attempt does, instead of until the queue's redrive count (hundreds of receives, sized for waits)."""
    with running_flow(max_attempts=2) as flow:
        message_id = flow.harness.send(json.dumps({"job_id": "boom", "type": "echo", "params": {"fail": True}}))
        [first] = flow.receive_batch()
        with pytest.raises(InlineJobFailed, match="asked to fail"):
            receive(flow.receiver, first)
        flow.sqs.change_message_visibility(
            QueueUrl=flow.harness.queue_url, ReceiptHandle=first.receipt_handle, VisibilityTimeout=0
        )
        [second] = flow.receive_batch()

        assert (second.receive_count, receive(flow.receiver, second)) == (2, Outcome.REJECTED)
        [dead] = flow.dlq_messages()
        attributes = {name: value["StringValue"] for name, value in dead["MessageAttributes"].items()}
        assert attributes["ErrorType"] == "AttemptsExhausted"
        assert "echo job boom was asked to fail" in attributes["ErrorMessage"], attributes
        lease = flow.receiver.store.get(message_id)
        assert lease is not None and lease.status is LeaseStatus.REJECTED, "longjobs lease tells where it went"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.one_of(
        st.text(alphabet=string.printable, min_size=1, max_size=200),
        st.dictionaries(st.sampled_from(["job_id", "type", "params", "Records", "x"]), st.text(max_size=20)).map(
            json.dumps
        ),
        st.fixed_dictionaries(
            {
                "job_id": st.text(min_size=0, max_size=5),
                "type": st.sampled_from(["wait", "spark", "echo", "bogus"]),
                "params": st.dictionaries(
                    st.sampled_from(["seconds", "fail", "input", "date", "text", "extra"]),
                    st.one_of(st.integers(-10, 10**6), st.text(max_size=12), st.booleans()),
                ),
            }
        ).map(json.dumps),
    )
)
def test_receiver_fuzz_every_body_is_rejected_with_a_reason_or_accepted(flow: Flow, body: str) -> None:
    message_id = flow.harness.send(body)
    [delivery] = flow.receive_batch()
    try:
        outcome: Outcome | None = receive(flow.receiver, delivery)
    except InlineJobFailed:  # an echo job asked to fail: its record fails, SQS hands it out again
        outcome = None
    flow.sqs.delete_message(QueueUrl=flow.harness.queue_url, ReceiptHandle=delivery.receipt_handle)  # as the mapping
    dead = flow.dlq_messages()
    for message in dead:  # each example starts with an empty DLQ
        flow.sqs.delete_message(QueueUrl=flow.dlq_url, ReceiptHandle=message["ReceiptHandle"])
    if outcome is Outcome.REJECTED:
        [message] = dead
        attributes = {name: value["StringValue"] for name, value in message["MessageAttributes"].items()}
        assert message["Body"] == body and attributes["OriginalMessageId"] == message_id
        assert attributes["ErrorType"] in {"NotJson", "InvalidShape", "UnknownJobType", "InvalidParameters"}
        assert attributes["ErrorMessage"]
    else:
        assert dead == []
        # WAITING: an earlier example's job of the same job id still runs
        assert outcome in {Outcome.STARTED, Outcome.INLINE_DONE, Outcome.IGNORED, Outcome.WAITING, None}


# -- crash windows --------------------------------------------------------------------------------


def make_visible(flow: Flow, handle: str) -> None:
    flow.sqs.change_message_visibility(QueueUrl=flow.harness.queue_url, ReceiptHandle=handle, VisibilityTimeout=0)


def crash_visibility_change(flow: Flow, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(change: Any) -> ChangeOutcome:
        raise Crash

    monkeypatch.setattr(flow.receiver.visibility, "change", crash)


def crash_start(flow: Flow, monkeypatch: pytest.MonkeyPatch, *, after: bool) -> None:
    real = flow.receiver.stepfunctions.start_execution

    def start(**kwargs: Any) -> Any:
        if after:
            real(**kwargs)
        raise Crash

    monkeypatch.setattr(flow.receiver.stepfunctions, "start_execution", start)


def crash_before_start(flow: Flow, monkeypatch: pytest.MonkeyPatch, window: str) -> tuple[str, Delivery]:
    """Send a job and let the receiver die in `window`: after the lease, or after the visibility change."""
    message_id = flow.send_job("crashy", seconds=1)
    with monkeypatch.context() as patch:
        if window == "after_lease":
            crash_visibility_change(flow, patch)
        else:
            crash_start(flow, patch, after=False)
        [delivery] = flow.receive_batch()
        with pytest.raises(Crash):
            receive(flow.receiver, delivery)
    return message_id, delivery


@pytest.mark.parametrize(
    "window", ["after_lease", "after_visibility_change"], ids=["after-lease", "after-visibility-change"]
)
def test_receiver_crash_before_start_is_resumed_by_redelivery(
    flow: Flow, monkeypatch: pytest.MonkeyPatch, window: str
) -> None:
    message_id, delivery = crash_before_start(flow, monkeypatch, window)
    assert flow.lease(message_id).active and flow.executions() == []

    make_visible(flow, delivery.receipt_handle)  # the queue's VT (or the first chunk) runs out
    assert flow.deliver() == {message_id: Outcome.STARTED}

    lease = flow.lease(message_id)
    assert lease.receive_count == 2
    assert lease.execution_arn is not None and lease.execution_arn.endswith(f"{message_id}-1"), "the attempt's name"
    assert flow.wait_for_execution(lease.execution_arn)["status"] == "SUCCEEDED"
    assert flow.lease(message_id).status is LeaseStatus.SUCCEEDED


@pytest.mark.parametrize(
    "window", ["after_lease", "after_visibility_change"], ids=["after-lease", "after-visibility-change"]
)
def test_receiver_crash_before_start_is_released_by_reconciliation(
    flow: Flow, monkeypatch: pytest.MonkeyPatch, window: str
) -> None:
    message_id, _ = crash_before_start(flow, monkeypatch, window)

    report = reconcile(flow.later(), deadline=time.time() + 65)

    assert report.released == 1
    released = flow.lease(message_id)
    assert released.status is LeaseStatus.RELEASED and released.last_error == LastError("execution never started")
    assert flow.harness.visible_messages() == [message_id]
    lock = flow.receiver.store.locks.get(job_lock_key("crashy"))
    assert lock is not None and not lock.held, "reconciliation frees the job lock with the lease"


def test_receiver_crash_after_start_is_completed_by_the_workflow(flow: Flow, monkeypatch: pytest.MonkeyPatch) -> None:
    message_id = flow.send_job("crash-after-start", seconds=1)
    with monkeypatch.context() as patch:
        crash_start(flow, patch, after=True)
        [delivery] = flow.receive_batch()
        with pytest.raises(Crash):
            receive(flow.receiver, delivery)

    [execution] = flow.executions()
    assert flow.wait_for_execution(execution["executionArn"])["status"] == "SUCCEEDED"
    assert flow.lease(message_id).status is LeaseStatus.SUCCEEDED
    assert flow.harness.visible_messages() == []


def test_receiver_start_refused_gives_the_message_back_at_once(flow: Flow) -> None:
    """A start Step Functions refuses, whose execution DescribeExecution then finds missing, gives its
    message back after a short backoff (none for the first refusal), not at the next reconciliation. The
    lease closes RELEASED as never started, so no attempt is spent; a start that still landed later would
    meet its lease closed and end before its job."""
    message_id = flow.send_job("refused", seconds=1)
    flow.receiver.settings = flow.receiver.settings.model_copy(
        update={"state_machine_arn": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:missing"}
    )
    assert flow.deliver() == {message_id: Outcome.NOT_STARTED}

    released = flow.lease(message_id)
    assert released.status is LeaseStatus.RELEASED and released.never_started
    assert released.last_error is not None and released.last_error.error == START_REFUSED
    assert "StateMachineDoesNotExist" in (released.last_error.cause or "")
    assert flow.harness.visible_messages() == [message_id], "back at once: the first refusal waits no backoff"


def test_receiver_start_refused_on_every_attempt_is_not_asked_about(flow: Flow) -> None:
    """With its own one-attempt client for starts (as every Lambda container has), a start whose every
    attempt Step Functions refused is known not to have started: StateMachineDoesNotExist is one of the
    errors StartExecution documents (https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html),
    and a refused request is not processed. So the receiver asks no DescribeExecution, which has a
    bucket of its own that a burst of throttled starts would empty. The next receive starts a new
    attempt without asking about the refused one either: no execution of it can appear."""
    flow.receiver.starts = aws.starts()
    asked: list[str] = []
    flow.receiver.stepfunctions.meta.events.register(
        "provide-client-params.states.DescribeExecution", lambda params, **_: asked.append(params["executionArn"])
    )
    message_id = flow.send_job("refused-every-attempt", seconds=1)
    deployed = flow.receiver.settings
    flow.receiver.settings = deployed.model_copy(
        update={"state_machine_arn": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:missing"}
    )
    assert flow.deliver() == {message_id: Outcome.NOT_STARTED}

    released = flow.lease(message_id)
    assert released.status is LeaseStatus.RELEASED and released.never_started
    assert released.last_error is not None and released.last_error.error == START_REFUSED_EVERY_ATTEMPT
    assert flow.harness.visible_messages() == [message_id], "back at once: the first refusal waits no backoff"

    flow.receiver.settings = deployed
    assert flow.deliver() == {message_id: Outcome.STARTED}
    assert asked == [], "neither receive asked Step Functions about a start it refused"
    [execution] = flow.executions()
    assert flow.wait_for_execution(execution["executionArn"])["status"] == "SUCCEEDED"


class NoBackoff(SystemClock):
    """The real clock, the start's backoff between its attempts taken as no wait."""

    def sleep(self, seconds: float) -> None:
        pass


class LandsThenFails:
    """A Step Functions client whose StartExecution lands, then answers a 5xx (the answer lost), and whose
    DescribeExecution lags: it has not yet seen the executions started through `started`."""

    def __init__(self, client: Any, started: list[str] | None = None) -> None:
        self.client, self.meta, self.started = client, client.meta, started if started is not None else []

    def start_execution(self, **params: Any) -> Any:
        try:
            self.started.append(self.client.start_execution(**params)["executionArn"])
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ExecutionAlreadyExists":
                raise
        raise ClientError(
            {"Error": {"Code": "InternalFailure", "Message": "lost"}, "ResponseMetadata": {"HTTPStatusCode": 500}},
            "StartExecution",
        )

    def describe_execution(self, **params: Any) -> Any:
        if params["executionArn"] in self.started:
            raise ClientError({"Error": {"Code": "ExecutionDoesNotExist", "Message": "lagging"}}, "DescribeExecution")
        return self.client.describe_execution(**params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def test_receiver_start_unanswered_keeps_its_lease_when_describe_execution_lags(flow: Flow) -> None:
    """A start whose every answer was a 5xx may have landed; DescribeExecution is eventually consistent, so
    "does not exist" right after it can be stale ("The results are best effort and may not reflect very
    recent updates and changes",
    https://docs.aws.amazon.com/step-functions/latest/apireference/API_DescribeExecution.html). The
    execution may already have read its lease at its start check and be running its job. Released on that
    reading, the message would come back and its job run twice at once. So the lease, with its job lock,
    stays: the execution that did start runs the job once and closes it."""
    started: list[str] = []
    flow.receiver.starts = cast(Any, LandsThenFails(aws.starts(), started))
    flow.receiver.stepfunctions = cast(Any, LandsThenFails(flow.receiver.stepfunctions, started))
    flow.receiver.clock = NoBackoff()
    message_id = flow.send_job("unanswered", seconds=1)
    assert flow.deliver() == {message_id: Outcome.NOT_STARTED}

    lease = flow.lease(message_id)
    assert lease.status is LeaseStatus.ACTIVE, "not released on a reading that may lag"
    lock = flow.receiver.store.locks.get(job_lock_key("unanswered"))
    assert lock is not None and lock.held and lock.execution_arn == lease.execution_arn
    assert started and set(started) == {lease.execution_arn}, "the start landed on every attempt as one"
    assert flow.wait_for_execution(started[0])["status"] == "SUCCEEDED"
    assert flow.lease(message_id).status is LeaseStatus.SUCCEEDED
    assert flow.harness.visible_messages() == [], "the job ran once and its message is gone"


def test_receiver_first_visibility_change_refused_starts_nothing_and_leaves_the_lease_due(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started, the job would be hidden only by the mapping's receive (the queue's visibility timeout),
    which need not outlast the extender runs the settings allow to be lost: a lapse while it runs (the
    simulation's seeds 164, 202 and 611). The due lease is renewed by the extender; reconciliation
    releases the attempt that never started, and the next receive starts it."""
    message_id = flow.send_job("throttled", seconds=1)

    def refused(change: Any) -> ChangeOutcome:
        return ChangeOutcome(change.key, time.time(), FailureClass.THROTTLED, "RequestThrottled")

    with monkeypatch.context() as patch:
        patch.setattr(flow.receiver.visibility, "change", refused)
        [delivery] = flow.receive_batch()
        before = time.time()
        outcome = receive(flow.receiver, delivery)
    assert outcome is Outcome.NOT_STARTED
    lease = flow.lease(message_id)
    # The first chunk was not set: the lease believes no more than the truth, so the next pass renews it.
    assert lease.active and before <= lease.visible_until <= time.time()
    assert lease.renew_at is not None and lease.renew_at <= time.time()
    assert flow.executions() == [], "no execution runs while its message is not hidden by its lease"


def test_receiver_crash_before_lease_leaves_the_message_to_return(flow: Flow, monkeypatch: pytest.MonkeyPatch) -> None:
    message_id = flow.send_job("crash-first", seconds=0)
    with monkeypatch.context() as patch:

        def crash(*args: Any, **kwargs: Any) -> bool:
            raise Crash

        patch.setattr(flow.receiver.store, "take_holds", crash)
        [delivery] = flow.receive_batch()
        with pytest.raises(Crash):
            receive(flow.receiver, delivery)
    assert flow.receiver.store.get(message_id) is None

    make_visible(flow, delivery.receipt_handle)  # the queue's VT runs out
    assert flow.deliver() == {message_id: Outcome.STARTED}
    lease = flow.lease(message_id)
    assert lease.execution_arn is not None and lease.execution_arn.endswith(f"{message_id}-2")
    assert flow.wait_for_execution(lease.execution_arn)["status"] == "SUCCEEDED"


def test_receiver_redelivered_poison_sends_no_second_dlq_copy(flow: Flow) -> None:
    poison = flow.harness.send("{not json")
    [first] = flow.receive_batch()
    assert receive(flow.receiver, first) is Outcome.REJECTED
    # The mapping's delete was lost (its invocation timed out): SQS delivers the message again.
    make_visible(flow, first.receipt_handle)
    [again] = flow.receive_batch()
    assert receive(flow.receiver, again) is Outcome.REJECTED
    assert [m["MessageAttributes"]["OriginalMessageId"]["StringValue"] for m in flow.dlq_messages()] == [poison]


def test_receiver_handler_reads_a_batch_ahead_and_a_malformed_record_fails_alone(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch's leases are read ahead from its records; a record that is not one (no attributes) is
    left out of the read and reported failed by its own handling, and the rest of the batch starts."""
    handler = receiver_handler(monkeypatch, flow)
    jobs = [flow.send_job(name, seconds=30) for name in ("one", "two")]
    event = sqs_event(flow, flow.receive_batch())
    broken = {**event["Records"][0], "messageId": "broken", "attributes": {}}
    event["Records"].append(broken)

    response = handler.handler(event, LambdaContext(function_name="receiver"))

    failed = {item["itemIdentifier"] for item in response["batchItemFailures"]}
    assert failed == {*jobs, "broken"}, "the long jobs deferred, the broken record failed"
    assert all(flow.lease(job).status is LeaseStatus.ACTIVE for job in jobs)


def test_receiver_handler_parses_each_body_once_per_receive(flow: Flow, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch's read-ahead and each record's handling share the record's delivery, so each body is
    parsed and validated once per receive, a refused one too."""
    from longjobs.engine.delivery import models

    handler = receiver_handler(monkeypatch, flow)
    for name in ("one", "two", "three"):
        flow.send_job(name, seconds=30)
    flow.harness.send(json.dumps({"job_id": "bad", "type": "wait", "params": {"seconds": "soon"}}))
    batch = flow.receive_batch()
    assert len(batch) == 4
    parsed: list[str] = []
    real = models.parse_message

    def counted(body: str, *args: Any, **kwargs: Any) -> Any:
        parsed.append(body)
        return real(body, *args, **kwargs)

    monkeypatch.setattr(models, "parse_message", counted)
    handler.handler(sqs_event(flow, batch), LambdaContext(function_name="receiver"))

    assert sorted(parsed) == sorted(delivery.body for delivery in batch)


def test_receiver_decides_a_new_attempt_once_when_its_reads_need_no_call(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new job with no lock on its id, of a type without a limit, is decided in one call: the lock read
    with the lease answers `READ_JOB_LOCK` and the type answers `FIND_SLOT`. A lock another execution holds
    is still asked about, after the decision's first answer."""
    from longjobs.engine.delivery.decision import Action
    from longjobs.engine.receiver import service

    actions: list[Action] = []
    real = service.decide

    def counted(*args: Any) -> Action:
        actions.append(real(*args))
        return actions[-1]

    monkeypatch.setattr(service, "decide", counted)
    flow.send_job("first", seconds=60)
    assert flow.deliver() != {}
    assert actions == [Action.START]

    actions.clear()
    flow.send_job("first", seconds=60)  # the job id's lock is held by the first message's execution
    assert list(flow.deliver().values()) == [Outcome.WAITING]
    assert actions == [Action.READ_JOB_LOCK, Action.WAIT_FOR_JOB]


def test_receiver_handler_reports_the_records_whose_parked_copy_was_not_sent_failed(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's parked copies are sent at its end (`longjobs.engine.receiver.batch`): a record whose copy
    was not sent is added to the partial batch response, so the mapping does not delete it; one already
    reported (deferred) is not listed twice."""
    handler = receiver_handler(monkeypatch, flow)
    response = {"batchItemFailures": [{"itemIdentifier": "deferred"}]}

    reported = handler.with_unsent(handler.receiver(), response, {"parked-b", "deferred", "parked-a"})

    assert reported == {
        "batchItemFailures": [
            {"itemIdentifier": "deferred"},
            {"itemIdentifier": "parked-a"},
            {"itemIdentifier": "parked-b"},
        ]
    }


def test_receiver_inline_job_dead_lettered_keeps_its_job_id_and_type_on_its_rejected_lease() -> None:
    """docs/operate.md: `lease` reads `REJECTED (AttemptsExhausted)` "for a job whose attempts ran out (its job
    id kept)", and `leases` finds a job by it. An inline job has no lease to take them from: its record takes
    them from the job."""
    with running_flow(max_attempts=1) as flow:
        message_id = flow.harness.send(json.dumps({"job_id": "boom", "type": "echo", "params": {"fail": True}}))
        [first] = flow.receive_batch()
        assert receive(flow.receiver, first) == Outcome.REJECTED

        lease = flow.receiver.store.get(message_id)
        assert lease is not None and lease.status is LeaseStatus.REJECTED
        assert (lease.job_type, lease.job_id) == ("echo", "boom"), lease
