"""The offline faults against moto's server: an `ambiguous` call takes effect though its caller gets a 500,
and a `crash` sends nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
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


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    server = Emulator()
    try:
        yield server
    finally:
        server.stop()


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


def test_ambiguous_call_takes_effect_and_botocore_retries_it(emulator: Emulator) -> None:
    url = emulator.sqs().create_queue(QueueName="ambiguous")["QueueUrl"]
    service = function_service(emulator)
    made = faults({"function": "receiver", "operation": "SendMessage", "mode": "ambiguous", "count": 1})
    made.install("receiver", service)

    service.sqs.send_message(QueueUrl=url, MessageBody="once")

    assert queue_depth(emulator, url) == 2, "the first send reached SQS; the caller saw a 500 and sent again"
    assert made.injected_by_mode() == {"ambiguous": 1}


def test_ambiguous_start_fails_for_the_caller_yet_the_execution_runs(emulator: Emulator) -> None:
    machine = emulator.stepfunctions().create_state_machine(
        name="ambiguous", definition=WAIT_MACHINE, roleArn="arn:aws:iam::123456789012:role/x"
    )["stateMachineArn"]
    service = function_service(emulator)
    made = faults({"function": "receiver", "operation": "StartExecution", "mode": "ambiguous"})
    made.install("receiver", service)
    try:
        with pytest.raises(ClientError) as caught:
            service.stepfunctions.start_execution(stateMachineArn=machine, name="m-1", input="{}")

        response = caught.value.response
        assert (response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]) == ("InternalFailure", 500)
        runs = emulator.stepfunctions().list_executions(stateMachineArn=machine)["executions"]
        assert [(run["name"], run["status"]) for run in runs] == [("m-1", "RUNNING")]
        assert made.injected_by_mode() == {"ambiguous": 4}, "each retry reached it too: the same name is idempotent"
    finally:
        emulator.stop_executions(machine)


def test_ambiguous_stop_counts_as_the_processors_stop(emulator: Emulator) -> None:
    machine = emulator.stepfunctions().create_state_machine(
        name="stopped", definition=WAIT_MACHINE, roleArn="arn:aws:iam::123456789012:role/x"
    )["stateMachineArn"]
    arn = emulator.stepfunctions().start_execution(stateMachineArn=machine, name="m-1", input="{}")["executionArn"]
    service = function_service(emulator)
    made = faults({"function": "extender", "operation": "StopExecution", "mode": "ambiguous", "count": 4})
    made.install("extender", service)
    try:
        with pytest.raises(ClientError):
            service.stepfunctions.stop_execution(executionArn=arn)

        assert made.processor_stops == {arn}
    finally:
        emulator.stop_executions(machine)


def test_crash_sends_nothing(emulator: Emulator) -> None:
    url = emulator.sqs().create_queue(QueueName="crash")["QueueUrl"]
    service = function_service(emulator)
    made = faults({"function": "watcher", "operation": "*", "mode": "crash", "count": 1})
    made.install("watcher", service)
    made.begin_invocation("watcher")

    with pytest.raises(InvocationCrashed):
        service.sqs.send_message(QueueUrl=url, MessageBody="never")

    assert queue_depth(emulator, url) == 0
    assert made.injected_by_mode() == {"crash": 1}
