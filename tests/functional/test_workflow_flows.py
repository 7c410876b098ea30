"""Whole flows on moto with state-machine execution on: receiver -> rendered workflow -> extender/watcher."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from longjobs.engine.delivery.types import Outcome
from longjobs.engine.extender.reconcile import reconcile
from longjobs.engine.lease import LastError, LeaseStatus
from longjobs.engine.receiver.service import receive
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


@pytest.fixture
def renewing_flow() -> Iterator[Flow]:
    """The flows' 5 s visibility chunks, renewed 4 s before they run out (rather than 2.5 s): a renewal falls
    due 1 s after the last, so a 10 s job is renewed several times even when the test's polling, which runs
    the extender, looks only every 3 s on a busy machine (due 2.5 s after the last, renewals looked at every
    2 s came 4 s apart and the job was renewed twice); its message would lapse only after a 4 s stall."""
    with running_flow(threshold_s=4) as made:
        yield made


def test_wait_job_renewed_across_short_timeouts_and_deleted_on_success(renewing_flow: Flow) -> None:
    flow = renewing_flow
    message_id = flow.send_job("long-wait", seconds=10)
    assert flow.deliver() == {message_id: Outcome.STARTED}
    lease = flow.lease(message_id)
    assert lease.receive_count == 1 and lease.execution_arn is not None

    # No lapse while it runs is the simulation's to show, on virtual time
    # (tests/sim/test_scenarios.py::test_scenario_renewal_keeps_long_job_hidden_across_several_timeouts):
    # here, the rendered workflow on moto's engine and the real clock, renewed, settles its message.
    described = flow.wait_for_execution(lease.execution_arn, timeout_s=90)  # a busy machine's bound, not 3x the job

    assert described["status"] == "SUCCEEDED"
    done = flow.lease(message_id)
    assert done.status is LeaseStatus.SUCCEEDED
    assert done.result == {"waited_s": 10}
    assert done.renewal_count >= 3, "a 10 s job on 5 s chunks, each due 1 s after the last, is renewed several times"
    assert flow.harness.visible_messages() == []
    attributes = flow.sqs.get_queue_attributes(QueueUrl=flow.harness.queue_url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "0", "the message must be deleted"


def test_workflow_failing_job_released_retried_with_new_executions_then_dead_lettered(flow: Flow) -> None:
    message_id = flow.send_job("always-fails", seconds=0, fail=True)
    max_attempts = flow.settings.max_attempts
    for attempt in range(1, max_attempts + 1):
        assert flow.deliver() == {message_id: Outcome.STARTED}, f"attempt {attempt}"
        lease = flow.lease(message_id)
        assert lease.receive_count == attempt
        assert lease.execution_arn is not None and lease.execution_arn.endswith(f"{message_id}-{attempt}")
        described = flow.wait_for_execution(lease.execution_arn)
        assert described["status"] == "FAILED" and described["error"] == "WaitJobFailed"
        released = flow.lease(message_id)
        assert released.status is LeaseStatus.RELEASED
        assert released.last_error == LastError("WaitJobFailed", "the wait job was asked to fail")
        # The workflow notes when it closed the lease (its state's entered time; it has no epoch seconds),
        # apart from `closed_at`, which the processor's code writes with the `visible_until` it sets.
        # It falls within the execution's run: an order, not a duration, so a busy machine cannot fail it.
        ran = (described["startDate"].timestamp() - 0.001, described["stopDate"].timestamp() + 0.001)
        assert released.closed_at is None and released.workflow_closed_at is not None, released
        assert ran[0] <= released.workflow_closed_at <= ran[1], (released.workflow_closed_at, ran)

    assert flow.deliver() == {message_id: Outcome.REJECTED}, "the processor counts attempts, not SQS"
    [dead] = flow.dlq_messages()
    assert json.loads(dead["Body"])["job_id"] == "always-fails"
    assert dead["MessageAttributes"]["ErrorType"]["StringValue"] == "AttemptsExhausted"
    reason = "WaitJobFailed: the wait job was asked to fail"  # the Fail state's error and cause, as caught
    assert dead["MessageAttributes"]["ErrorMessage"]["StringValue"] == reason
    assert flow.lease(message_id).last_error == LastError("AttemptsExhausted", reason)
    attempts = json.loads(dead["MessageAttributes"]["Attempts"]["StringValue"])
    assert len(attempts) == max_attempts
    assert all(attempt["ended_at"] is not None for attempt in attempts), "each attempt says when it ended"
    names = sorted(execution["name"] for execution in flow.executions())
    assert names == [f"{message_id}-{n}" for n in range(1, max_attempts + 1)]


def status_change_event(
    described: dict[str, Any], state_machine_arn: str = STATE_MACHINE_ARN, **reason: str
) -> dict[str, Any]:
    """The EventBridge event Step Functions sends when an execution ends."""
    return {
        "version": "0",
        "id": "315c1398-40ff-a850-213b-158f73e60175",
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "account": ACCOUNT,
        "time": "2026-11-22T10:00:00Z",
        "region": REGION,
        "resources": [described["executionArn"]],
        "detail": {
            "executionArn": described["executionArn"],
            "stateMachineArn": state_machine_arn,
            "name": described["name"],
            "status": described["status"],
            "startDate": 1795000000000,
            "stopDate": 1795000060000,
            "input": "{}",
            "output": None,
            "error": reason.get("error"),
            "cause": reason.get("cause"),
        },
    }


def aborted_by_operator(flow: Flow) -> tuple[str, Any, dict[str, Any]]:
    """A job received and started, then its execution aborted: (message id, lease, DescribeExecution)."""
    message_id = flow.send_job("aborted", seconds=60)
    flow.deliver()
    lease = flow.lease(message_id)
    assert lease.execution_arn is not None
    flow.abort(lease.execution_arn, error="Operator", cause="test")
    return message_id, lease, dict(flow.harness.stepfunctions.describe_execution(executionArn=lease.execution_arn))


def test_aborted_execution_released_by_watcher_once(
    flow: Flow, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    watcher = load_handler(
        monkeypatch, "longjobs.functions.watcher", TABLE_NAME=TABLE, STATE_MACHINE_ARN=STATE_MACHINE_ARN
    )
    message_id, _, described = aborted_by_operator(flow)
    context = LambdaContext(function_name="watcher")

    other = status_change_event(described, state_machine_arn=STATE_MACHINE_ARN + "-other")
    capsys.readouterr()
    assert watcher.handler(other, context) == {"outcome": "unchanged"}, "another state machine's event"
    assert "ExecutionsEnded" not in capsys.readouterr().out, "an event that changed nothing is not counted"
    assert flow.lease(message_id).active

    event = status_change_event(described, error="Operator", cause="test")
    assert watcher.handler(event, context) == {"outcome": "released"}
    assert emitted_metrics(capsys.readouterr().out)["ExecutionsEnded"] == 1
    released = flow.lease(message_id)
    assert released.status is LeaseStatus.RELEASED
    assert released.last_error == LastError("execution aborted", "Operator: test")
    assert flow.harness.visible_messages() == [message_id], "release delay 0: visible at once"
    assert watcher.handler(event, context) == {"outcome": "unchanged"}, "a duplicate"
    assert "ExecutionsEnded" not in capsys.readouterr().out, "a duplicate is not counted again"
    assert flow.lease(message_id).version == released.version


def test_aborted_execution_recorded_as_a_job_span_under_opentelemetry(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer", provider.get_tracer)  # the ADOT layer's global provider, here
    watcher = load_handler(
        monkeypatch,
        "longjobs.functions.watcher",
        TABLE_NAME=TABLE,
        STATE_MACHINE_ARN=STATE_MACHINE_ARN,
        TRACING="opentelemetry",
    )
    message_id, lease, described = aborted_by_operator(flow)
    event = status_change_event(described, error="Operator", cause="test")

    assert watcher.handler(event, LambdaContext(function_name="watcher")) == {"outcome": "released"}
    [span] = exporter.get_finished_spans()
    assert (span.attributes or {})["longjobs.message_id"] == message_id
    assert (span.attributes or {})["longjobs.execution_arn"] == lease.execution_arn
    assert span.status.description == "Operator: test"


def test_aborted_execution_released_by_reconciliation_without_event(flow: Flow) -> None:
    message_id = flow.send_job("aborted-silently", seconds=60)
    flow.deliver()
    lease = flow.lease(message_id)
    assert lease.execution_arn is not None
    flow.abort(lease.execution_arn)

    report = reconcile(flow.later(), deadline=time.time() + 65)

    assert report.released == 1
    assert flow.lease(message_id).status is LeaseStatus.RELEASED
    assert flow.harness.visible_messages() == [message_id]


@pytest.fixture
def unhurried_flow() -> Iterator[Flow]:
    """A flow whose visibility chunk (30 s) outlasts its short jobs: no renewal is due while they run, so a
    late extender thread on a busy machine cannot turn a test of the workflow into a test of timing."""
    with running_flow(visibility_timeout_s=30, threshold_s=10) as made:
        yield made


def test_duplicate_delivery_starts_no_second_execution(unhurried_flow: Flow) -> None:
    flow = unhurried_flow
    message_id = flow.send_job("duplicated", seconds=4)
    flow.deliver()
    first = flow.lease(message_id)
    # A lapse: the message shows up again while its job runs (here forced by a visibility of 0).
    flow.sqs.change_message_visibility(
        QueueUrl=flow.harness.queue_url, ReceiptHandle=first.receipt_handle, VisibilityTimeout=0
    )

    assert flow.deliver() == {message_id: Outcome.RUNNING}
    refreshed = flow.lease(message_id)
    assert refreshed.receive_count == 2
    assert refreshed.receipt_handle != first.receipt_handle
    assert refreshed.execution_arn == first.execution_arn
    assert [execution["name"] for execution in flow.executions()] == [f"{message_id}-1"]

    assert refreshed.execution_arn is not None
    assert flow.wait_for_execution(refreshed.execution_arn)["status"] == "SUCCEEDED"
    history = flow.harness.stepfunctions.get_execution_history(executionArn=refreshed.execution_arn)["events"]
    deletes = [
        json.loads(event["taskScheduledEventDetails"]["parameters"])
        for event in history
        if event.get("taskScheduledEventDetails", {}).get("resource") == "deleteMessage"
    ]
    assert [d["ReceiptHandle"] for d in deletes] == [refreshed.receipt_handle], "deleted with the newer handle"
    assert flow.lease(message_id).status is LeaseStatus.SUCCEEDED


def test_redelivery_of_succeeded_job_is_acknowledged_without_rerun(flow: Flow) -> None:
    message_id = flow.send_job("done-once", seconds=0)
    [delivery] = flow.receive_batch()
    assert receive(flow.receiver, delivery) is Outcome.STARTED
    arn = flow.lease(message_id).execution_arn
    assert arn is not None
    assert flow.wait_for_execution(arn)["status"] == "SUCCEEDED"

    # SQS may deliver a message again after its delete (at-least-once): the same id, a newer receive.
    again = replace(delivery, receipt_handle="newer-handle", receive_count=2)
    assert receive(flow.receiver, again) is Outcome.ALREADY_SUCCEEDED
    assert not Outcome.ALREADY_SUCCEEDED.deferred, "the mapping deletes it"
    assert len(flow.executions()) == 1


def test_spark_step_without_heartbeats_is_released_after_the_heartbeat_timeout(flow: Flow) -> None:
    # Nobody serves the token queue: the heartbeat timeout (3 s here) ends the step.
    message_id = flow.send_job(
        "no-worker", "spark", input="/data/raw/date=2026-11-20", date="2026-11-20", output="/data/out", quarantine="/q"
    )
    assert flow.deliver() == {message_id: Outcome.STARTED}
    arn = flow.lease(message_id).execution_arn
    assert arn is not None

    described = flow.wait_for_execution(arn, timeout_s=20)

    assert described["status"] == "FAILED"
    released = flow.lease(message_id)
    assert released.status is LeaseStatus.RELEASED
    assert released.last_error == LastError("JobTimedOut", "the job stopped sending heartbeats or ran past its timeout")
    assert flow.harness.visible_messages() == [message_id]
