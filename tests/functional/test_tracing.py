"""Trace context without the X-Ray SDK: in Lambda, botocore itself sends the function's trace header
(`_X_AMZN_TRACE_ID`) as `X-Amzn-Trace-Id` on every AWS call (its recursion-detection handler), and
Step Functions continues the trace of the StartExecution request in the execution ("For X-Ray traces,
all AWS services use the X-Amzn-Trace-Id header from the HTTP request", StartExecution, AWS Step
Functions API Reference: https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html).
So the default `tracing=service` links the receiver's trace to the execution's with no SDK imported."""

from __future__ import annotations

import json
from typing import Any

import pytest
from moto import mock_aws

from longjobs.engine import aws
from longjobs.engine.execution import ExecutionInput, start_execution

TRACE = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
PASS_MACHINE = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}})


def test_tracing_start_execution_carries_the_functions_trace_into_the_execution(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "receiver")
    monkeypatch.setenv("_X_AMZN_TRACE_ID", TRACE)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        stepfunctions = aws.stepfunctions()  # the client the handlers build
        arn = stepfunctions.create_state_machine(
            name="long-jobs", definition=PASS_MACHINE, roleArn="arn:aws:iam::123456789012:role/sfn"
        )["stateMachineArn"]
        headers: list[Any] = []
        stepfunctions.meta.events.register(
            "before-send.states.StartExecution", lambda request, **_: headers.append(request.headers)
        )
        payload = ExecutionInput(message_id="m-1", attempt=1, queue_url="q", release_delay_s=0, job={"type": "wait"})
        start_execution(stepfunctions, arn, payload)

    [sent] = headers
    assert sent["X-Amzn-Trace-Id"] == TRACE.encode()
