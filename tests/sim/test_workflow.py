"""The ASL interpreter: the semantics the deployed workflow relies on, on virtual time, and its refusal of
anything it does not model. Expected values are written out from the Amazon States Language
specification (states-language.net/spec.html), not computed by the interpreter."""

from __future__ import annotations

import random
from collections import deque
from typing import Any

import pytest

from longjobs.sim.scheduler import Scheduler
from longjobs.sim.workflow import DefinitionError, ExecutionContext, Interpreter, Outcome, StatesError

START = 1_700_000_000.0
GET = "arn:aws:states:::dynamodb:getItem"
UPDATE = "arn:aws:states:::dynamodb:updateItem"


class Scripted:
    """Integrations answering each resource from a script: a value, or a StatesError to raise."""

    def __init__(self, scheduler: Scheduler, **script: list[Any]) -> None:
        self._scheduler = scheduler
        self._script = {GET if name == "get" else UPDATE: deque(answers) for name, answers in script.items()}
        self.calls: list[tuple[float, str, Any]] = []

    def resources(self) -> set[str]:
        return {GET, UPDATE}

    def invoke(self, resource: str, parameters: Any, context: ExecutionContext) -> Any:
        self.calls.append((self._scheduler.now() - START, resource, parameters))
        answer = self._script[resource].popleft()
        if isinstance(answer, StatesError):
            raise answer
        return answer


def run(definition: dict[str, Any], execution_input: Any, **script: list[Any]) -> tuple[Outcome, Scripted, float]:
    scheduler = Scheduler(START)
    integrations = Scripted(scheduler, **script)
    interpreter = Interpreter(definition, integrations, scheduler)
    outcomes: list[Outcome] = []
    context = ExecutionContext("arn:aws:states:us-east-1:1:execution:m:e-1", START)
    scheduler.spawn(lambda: outcomes.append(interpreter.run(execution_input, context, random.Random(1))))
    scheduler.run(until=START + 86_400)
    return outcomes[0], integrations, scheduler.now() - START


def task(**fields: Any) -> dict[str, Any]:
    return {"Type": "Task", "Resource": GET, "Parameters": {"Key.$": "$.key"}, **fields}


THROTTLED = StatesError("DynamoDB.ThrottlingException", "slow down")


def test_workflow_retry_backs_off_then_succeeds() -> None:
    retry = [{"ErrorEquals": ["DynamoDB.ThrottlingException"], "IntervalSeconds": 2, "MaxAttempts": 3}]
    definition = {"StartAt": "Read", "States": {"Read": task(Retry=retry, ResultPath="$.item", End=True)}}
    outcome, calls, elapsed = run(definition, {"key": "k"}, get=[THROTTLED, THROTTLED, {"Item": 1}])
    assert outcome == Outcome("SUCCEEDED", output={"key": "k", "item": {"Item": 1}})
    assert [at for at, _, _ in calls.calls] == [0.0, 2.0, 6.0]  # intervals 2, then 2 x BackoffRate 2.0
    assert elapsed == 6.0


def test_workflow_retries_exhausted_go_to_the_catch_with_the_error_at_its_result_path() -> None:
    definition = {
        "StartAt": "Read",
        "States": {
            "Read": task(
                Retry=[{"ErrorEquals": ["States.ALL"], "MaxAttempts": 1}],
                Catch=[{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Failed"}],
                End=True,
            ),
            "Failed": {"Type": "Fail", "ErrorPath": "$.error.Error", "Cause": "read failed"},
        },
    }
    outcome, calls, _ = run(definition, {"key": "k"}, get=[THROTTLED, THROTTLED])
    assert outcome == Outcome("FAILED", error="DynamoDB.ThrottlingException", cause="read failed")
    assert len(calls.calls) == 2


def test_workflow_states_all_does_not_catch_a_runtime_error() -> None:
    definition = {
        "StartAt": "Choose",
        "States": {
            "Choose": {
                "Type": "Choice",
                "Choices": [{"Variable": "$.missing", "StringEquals": "x", "Next": "Done"}],
                "Default": "Done",
            },
            "Done": {"Type": "Succeed"},
        },
    }
    outcome, _, _ = run(definition, {})
    assert outcome.status == "FAILED" and outcome.error == "States.Runtime"


def test_workflow_choice_rules_and_paths() -> None:
    definition = {
        "StartAt": "Self",
        "States": {
            "Self": {"Type": "Pass", "Parameters": {"id.$": "$$.Execution.Id"}, "ResultPath": "$.self", "Next": "Is"},
            "Is": {
                "Type": "Choice",
                "Choices": [
                    {
                        "And": [
                            {"Variable": "$.lease.owner", "IsPresent": True},
                            {"Variable": "$.lease.owner", "StringEqualsPath": "$.self.id"},
                            {"Not": {"Variable": "$.lease.error", "StringMatches": "*.Invalid*"}},
                        ],
                        "Next": "Mine",
                    }
                ],
                "Default": "Theirs",
            },
            "Mine": {"Type": "Pass", "Result": "mine", "End": True},
            "Theirs": {"Type": "Pass", "Result": "theirs", "End": True},
        },
    }
    arn = "arn:aws:states:us-east-1:1:execution:m:e-1"
    mine, _, _ = run(definition, {"lease": {"owner": arn, "error": "Sqs.OtherException"}})
    theirs, _, _ = run(definition, {"lease": {"owner": arn, "error": "Sqs.InvalidHandle"}})
    absent, _, _ = run(definition, {"lease": {}})
    assert (mine.output, theirs.output, absent.output) == ("mine", "theirs", "theirs")


@pytest.mark.parametrize(
    ("caught", "written"),
    [
        (
            StatesError("AnalysisException", "[PATH_NOT_FOUND]"),
            {"Error": {"S": "AnalysisException"}, "Cause": {"S": "[PATH_NOT_FOUND]"}},
        ),
        (StatesError("WaitJobFailed"), {"Error": {"S": "WaitJobFailed"}}),  # no cause: bound as "" (spec)
    ],
)
def test_workflow_is_string_and_a_map_attribute_value_built_from_paths(
    caught: StatesError, written: dict[str, Any]
) -> None:
    """The lease's last error as the workflow writes it: a Catch's `{"Error", "Cause"}`, tested with
    `IsString` before a Parameters path reads the cause, then passed whole as a DynamoDB map (`M.$`)."""
    cause = "$.error.Cause"
    has_cause = [
        {"Variable": cause, "IsPresent": True},
        {"Variable": cause, "IsString": True},
        {"Not": {"Variable": cause, "StringEquals": ""}},
    ]
    error = {"S.$": "$.error.Error"}
    definition = {
        "StartAt": "Read",
        "States": {
            "Read": task(
                Catch=[{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "HasCause"}], End=True
            ),
            "HasCause": {
                "Type": "Choice",
                "Choices": [{"And": has_cause, "Next": "WithCause"}],
                "Default": "WithoutCause",
            },
            "WithCause": {
                "Type": "Pass",
                "Parameters": {"Error": error, "Cause": {"S.$": cause}},
                "ResultPath": "$.last_error",
                "Next": "Close",
            },
            "WithoutCause": {
                "Type": "Pass",
                "Parameters": {"Error": error},
                "ResultPath": "$.last_error",
                "Next": "Close",
            },
            "Close": {
                "Type": "Task",
                "Resource": UPDATE,
                "Parameters": {"ExpressionAttributeValues": {":value": {"M.$": "$.last_error"}}},
                "End": True,
            },
        },
    }

    outcome, integrations, _ = run(definition, {"key": "m-1"}, get=[caught], update=[{}])

    assert outcome.status == "SUCCEEDED"
    [_, (_, resource, parameters)] = integrations.calls
    assert resource == UPDATE and parameters == {"ExpressionAttributeValues": {":value": {"M": written}}}


def test_workflow_intrinsics_wait_and_one_branch_parallel() -> None:
    definition = {
        "StartAt": "Job",
        "States": {
            "Job": {
                "Type": "Parallel",
                "Branches": [
                    {
                        "StartAt": "Wait",
                        "States": {
                            "Wait": {"Type": "Wait", "SecondsPath": "$.seconds", "Next": "Summary"},
                            "Summary": {"Type": "Pass", "Parameters": {"waited_s.$": "$.seconds"}, "End": True},
                        },
                    }
                ],
                "ResultSelector": {"summary.$": "$[0]"},
                "ResultPath": "$.outcome",
                "Next": "Mark",
            },
            "Mark": {
                "Type": "Task",
                "Resource": UPDATE,
                "Parameters": {
                    "Key.$": "States.Format('job#{}', $.id)",
                    "Value.$": "States.JsonToString($.outcome.summary)",
                    "At.$": "$$.State.EnteredTime",
                },
                "ResultPath": None,
                "End": True,
            },
        },
    }
    outcome, calls, elapsed = run(definition, {"id": "j1", "seconds": 90}, update=[{}])
    assert elapsed == 90.0
    assert calls.calls == [
        (90.0, UPDATE, {"Key": "job#j1", "Value": '{"waited_s":90}', "At": "2023-11-14T22:14:50.000Z"}),
    ]
    assert outcome.output == {"id": "j1", "seconds": 90, "outcome": {"summary": {"waited_s": 90}}}


@pytest.mark.parametrize(
    ("definition", "named"),
    [
        ({"StartAt": "M", "States": {"M": {"Type": "Map", "End": True}}}, "state type 'Map'"),
        ({"StartAt": "T", "States": {"T": task(End=True, Credentials={})}}, "['Credentials']"),
        ({"StartAt": "T", "States": {"T": {**task(End=True), "Resource": "arn:aws:states:::lambda:invoke"}}}, "lambda"),
        ({"StartAt": "T", "States": {"T": task(End=True, Parameters={"x.$": "States.Hash($.a, 'MD5')"})}}, "Hash"),
        (
            {
                "StartAt": "C",
                "States": {
                    "C": {"Type": "Choice", "Choices": [{"Variable": "$.a", "TimestampEquals": "x", "Next": "C"}]}
                },
            },
            "TimestampEquals",
        ),
        (
            {"StartAt": "P", "States": {"P": {"Type": "Parallel", "Branches": [{}, {}], "End": True}}},
            "2 branches",
        ),
    ],
)
def test_workflow_refuses_what_it_does_not_model(definition: dict[str, Any], named: str) -> None:
    with pytest.raises(DefinitionError, match=named.replace("[", r"\[").replace("]", r"\]")):
        Interpreter(definition, Scripted(Scheduler(START)), Scheduler(START))
