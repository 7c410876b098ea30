"""The offline faults against moto's server, named as the simulation names a call's faults: an
`answer_lost` call takes effect though its caller gets a 500, a `crash_before` sends nothing, a
`crash_after` takes effect and then the invocation dies, a `timeout` takes no effect and is retried."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.retries.standard
import pytest
from botocore.exceptions import ClientError

from longjobs.engine.aws import CLIENT_CONFIG
from longjobs.offline.emulator import REGION, Emulator
from longjobs.offline.faults import Faults
from longjobs.offline.lambdas import InvocationCrashed
from longjobs.offline.scenario import parse_scenario

WAIT_MACHINE = json.dumps({"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 60, "End": True}}})


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(botocore.retries.standard.ExponentialBackoff, "delay_amount", lambda self, context: 0)


@dataclass
class Service:
    sqs: Any
    stepfunctions: Any


def function_service(emulator: Emulator) -> Service:
    session = boto3.session.Session(aws_access_key_id="a", aws_secret_access_key="b", region_name=REGION)
    return Service(
        sqs=session.client("sqs", endpoint_url=emulator.endpoint, config=CLIENT_CONFIG),  # type: ignore[call-overload]
        stepfunctions=session.client("stepfunctions", endpoint_url=emulator.endpoint, config=CLIENT_CONFIG),  # type: ignore[call-overload]
    )


def faults(*items: dict[str, Any]) -> Faults:
    return Faults(
        parse_scenario(
            {"jobs": [{"id": "a", "type": "wait", "seconds": 1}], "faults": [{"type": "aws_fault", **f} for f in items]}
        )
    )


def queue_depth(emulator: Emulator, url: str) -> int:
    attributes = emulator.sqs().get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


@pytest.mark.parametrize(
    ("mode", "count", "depth"),
    [("answer_lost", 1, 2), ("timeout", 2, 1)],
    ids=["answer lost: took effect, sent again", "timeout: no effect twice, then sent"],
)
def test_offline_faults_call_fault_is_retried_by_botocore(
    emulator: Emulator, mode: str, count: int, depth: int
) -> None:
    """botocore retries a 500 and a read timeout: an `answer_lost` send reached SQS before its caller saw
    the 500 and sent again; a `timeout` send never left, so only the attempt after it lands."""
    url = emulator.sqs().create_queue(QueueName=f"retried-{mode.replace('_', '-')}")["QueueUrl"]
    service = function_service(emulator)
    made = faults({"function": "receiver", "operation": "SendMessage", "mode": mode, "count": count})
    made.install("receiver", service)

    service.sqs.send_message(QueueUrl=url, MessageBody="once")

    assert queue_depth(emulator, url) == depth
    assert made.injected_by_mode() == {mode: count}


def test_offline_faults_answer_lost_start_fails_for_the_caller_yet_the_execution_runs(emulator: Emulator) -> None:
    machine = emulator.stepfunctions().create_state_machine(
        name="answer-lost", definition=WAIT_MACHINE, roleArn="arn:aws:iam::123456789012:role/x"
    )["stateMachineArn"]
    service = function_service(emulator)
    made = faults({"function": "receiver", "operation": "StartExecution", "mode": "answer_lost"})
    made.install("receiver", service)
    try:
        with pytest.raises(ClientError) as caught:
            service.stepfunctions.start_execution(stateMachineArn=machine, name="m-1", input="{}")

        response = caught.value.response
        assert (response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]) == ("InternalFailure", 500)
        runs = emulator.stepfunctions().list_executions(stateMachineArn=machine)["executions"]
        assert [(run["name"], run["status"]) for run in runs] == [("m-1", "RUNNING")]
        assert made.injected_by_mode() == {"answer_lost": 4}, "each retry reached it too: the same name is idempotent"
    finally:
        emulator.stop_executions(machine)


def test_offline_faults_answer_lost_stop_counts_as_the_processors_stop(emulator: Emulator) -> None:
    machine = emulator.stepfunctions().create_state_machine(
        name="stopped", definition=WAIT_MACHINE, roleArn="arn:aws:iam::123456789012:role/x"
    )["stateMachineArn"]
    arn = emulator.stepfunctions().start_execution(stateMachineArn=machine, name="m-1", input="{}")["executionArn"]
    service = function_service(emulator)
    made = faults({"function": "extender", "operation": "StopExecution", "mode": "answer_lost", "count": 4})
    made.install("extender", service)
    try:
        with pytest.raises(ClientError):
            service.stepfunctions.stop_execution(executionArn=arn)

        assert made.processor_stops == {arn}
    finally:
        emulator.stop_executions(machine)


@pytest.mark.parametrize(("mode", "sent"), [("crash_before", 0), ("crash_after", 1)])
def test_offline_faults_crash_before_sends_nothing_and_crash_after_takes_effect(
    emulator: Emulator, mode: str, sent: int
) -> None:
    """The invocation dies at the call: before it leaves, or once it took effect. Either way the dead
    invocation does nothing more."""
    url = emulator.sqs().create_queue(QueueName=mode.replace("_", "-"))["QueueUrl"]
    service = function_service(emulator)
    made = faults({"function": "watcher", "operation": "SendMessage", "mode": mode, "count": 1})
    made.install("watcher", service)
    made.begin_invocation("watcher")

    with pytest.raises(InvocationCrashed):
        service.sqs.send_message(QueueUrl=url, MessageBody="first")
    with pytest.raises(InvocationCrashed):
        service.sqs.send_message(QueueUrl=url, MessageBody="never")

    assert queue_depth(emulator, url) == sent
    assert made.injected_by_mode() == {mode: 1}
