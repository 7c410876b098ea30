"""A StopExecution that took effect ends the execution ABORTED on moto's engine, wherever it lands
(`longjobs.offline.stops`), as on Step Functions
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_StopExecution.html).

Each test forces one interleaving of the stop with the execution's own thread, by a hook in moto's engine that
stops the execution (through the API) just before the step that met the stop, in that thread: no sleep races
the engine. Without `keep_stops`, the first two end FAILED (`States.Runtime`, "Could not set NextState value
when in state ProgramStopped" and its NextField twin), the third stays RUNNING for good (the branch's thread
died on that error), and the fourth ends FAILED (the stop woke the waiting task as a timeout).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.stepfunctions.parser.asl.component.state.exec.state_parallel.branch_worker import BranchWorker
from moto.stepfunctions.parser.asl.eval.environment import Environment

from longjobs.offline.stops import keep_stops

ROLE = "arn:aws:iam::123456789012:role/workflow"
REGION = "us-east-1"
END_S = 30
"""How long an execution gets to end once stopped (it ends within a second; a generous bound for a busy machine)."""


@pytest.fixture
def sfn() -> Iterator[Any]:
    keep_stops()  # as `longjobs.offline.resources.create_resources` does for the runtime and the flows
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        yield boto3.client("stepfunctions", region_name=REGION)


@pytest.mark.parametrize(
    ("setter", "value"),
    [
        ("next_state_name", "Pick"),  # the Pass state `Start` moves on (CommonStateField._set_next)
        ("next_state_name", "Done"),  # the Choice state `Pick` moves on (StateChoice._eval_state)
        ("next_field_name", "picked.$"),  # `Start`'s parameter is evaluated (EvalComponent.eval)
    ],
)
def test_offline_stops_a_stop_as_a_state_moves_on_ends_the_execution_aborted(
    sfn: Any, monkeypatch: pytest.MonkeyPatch, setter: str, value: str
) -> None:
    definition = {
        "StartAt": "Start",
        "States": {
            "Start": {"Type": "Pass", "Parameters": {"picked.$": "$.pick"}, "Next": "Pick"},
            "Pick": {
                "Type": "Choice",
                "Choices": [{"Variable": "$.picked", "StringEquals": "yes", "Next": "Done"}],
                "Default": "Done",
            },
            "Done": {"Type": "Pass", "End": True},
        },
    }
    moto_setter: property = getattr(Environment, setter)
    stopped: list[str] = []

    def stop_then_set(env: Any, new: str) -> None:
        if new == value and not stopped:  # the stop lands after the state's check that the program runs
            stopped.append(_stop(sfn, env))
        moto_setter.__set__(env, new)

    monkeypatch.setattr(Environment, setter, moto_setter.setter(stop_then_set))

    execution = _start(sfn, definition, {"pick": "yes"})

    assert _ended(sfn, execution) == "ABORTED"
    assert stopped == [execution]
    assert _events(sfn, execution)[-1] == "ExecutionAborted"


def test_offline_stops_a_stop_as_a_parallel_branch_starts_ends_the_execution_aborted(
    sfn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The branch's frame is open (so the stop reaches it) and its thread not yet started: the shape of the
    offline workflow's job step, stopped as the job begins."""
    branch = {"StartAt": "Work", "States": {"Work": {"Type": "Pass", "End": True}}}
    definition = {
        "StartAt": "Job",
        "States": {
            "Job": {"Type": "Parallel", "Branches": [branch], "Next": "After"},
            "After": {"Type": "Pass", "End": True},
        },
    }
    moto_start = BranchWorker.start
    stopped: list[str] = []

    def stop_then_start(worker: Any) -> None:
        stopped.append(_stop(sfn, worker.env))
        moto_start(worker)

    monkeypatch.setattr(BranchWorker, "start", stop_then_start)

    execution = _start(sfn, definition, {})

    assert _ended(sfn, execution) == "ABORTED"
    assert stopped == [execution]
    assert _events(sfn, execution)[-1] == "ExecutionAborted"


def test_offline_stops_a_stop_while_a_task_waits_for_its_token_ends_the_execution_aborted(sfn: Any) -> None:
    """The offline workflow's job step: a Parallel state around a task that waits for its token with a
    heartbeat, each with a catcher. The stop lands while the task waits (its token was sent); the heartbeat
    after it wakes the wait at once instead of at its timeout."""
    sqs = boto3.client("sqs", region_name=REGION)
    queue_url = sqs.create_queue(QueueName="tokens")["QueueUrl"]
    run = {
        "Type": "Task",
        "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
        "Parameters": {"QueueUrl": queue_url, "MessageBody": {"token.$": "$$.Task.Token"}},
        "HeartbeatSeconds": 60,
        "TimeoutSeconds": 120,
        "Catch": [{"ErrorEquals": ["States.HeartbeatTimeout", "States.Timeout"], "Next": "TimedOut"}],
        "End": True,
    }
    branch = {"StartAt": "Run", "States": {"Run": run, "TimedOut": {"Type": "Fail", "Error": "JobTimedOut"}}}
    definition = {
        "StartAt": "Job",
        "States": {
            "Job": {
                "Type": "Parallel",
                "Branches": [branch],
                "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Release"}],
                "Next": "Done",
            },
            "Release": {"Type": "Pass", "End": True},
            "Done": {"Type": "Pass", "End": True},
        },
    }
    execution = _start(sfn, definition, {})
    token = _token(sqs, queue_url)

    sfn.stop_execution(executionArn=execution, cause="stopped while its job ran")
    sfn.send_task_heartbeat(taskToken=token)

    assert _ended(sfn, execution) == "ABORTED"
    assert _events(sfn, execution)[-1] == "ExecutionAborted"


def _start(sfn: Any, definition: dict[str, Any], execution_input: dict[str, Any]) -> str:
    machine = sfn.create_state_machine(name="machine", definition=json.dumps(definition), roleArn=ROLE)
    started = sfn.start_execution(stateMachineArn=machine["stateMachineArn"], input=json.dumps(execution_input))
    return str(started["executionArn"])


def _stop(sfn: Any, env: Any) -> str:
    """StopExecution of the execution `env` (moto's engine environment, or a frame of it) belongs to."""
    arn = str(env.states.context_object.context_object_data["Execution"]["Id"])
    sfn.stop_execution(executionArn=arn, cause="stopped as it moved on")
    return arn


def _ended(sfn: Any, execution: str) -> str:
    """The execution's status once it is no longer RUNNING, with its error and cause when it FAILED."""
    deadline = time.monotonic() + END_S
    described = sfn.describe_execution(executionArn=execution)
    while described["status"] == "RUNNING":
        assert time.monotonic() < deadline, f"still RUNNING {END_S} s after the stop: {_events(sfn, execution)}"
        time.sleep(0.05)
        described = sfn.describe_execution(executionArn=execution)
    if described["status"] == "FAILED":
        return f"FAILED {described.get('error')}: {described.get('cause')}"
    return str(described["status"])


def _events(sfn: Any, execution: str) -> list[str]:
    return [event["type"] for event in sfn.get_execution_history(executionArn=execution)["events"]]


def _token(sqs: Any, queue_url: str) -> str:
    """The task token the waiting task sent (the task then waits for it)."""
    deadline = time.monotonic() + END_S
    while time.monotonic() < deadline:
        messages = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1).get("Messages", [])
        if messages:
            return str(json.loads(messages[0]["Body"])["token"])
    raise AssertionError(f"no task token within {END_S} s")
