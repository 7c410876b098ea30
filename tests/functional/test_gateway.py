"""The offline runtime's AWS endpoint (`longjobs.offline.gateway` in front of moto's server): an operation it
lacks answers an AWS-shaped error naming it, and a task failure's cause reaches the execution history."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from botocore.exceptions import ClientError

from longjobs.offline.emulator import ACCOUNT, REGION, Emulator
from tests.polling import eventually

SIGNED = f"AWS4-HMAC-SHA256 Credential=local/20260101/{REGION}/sqs/aws4_request, SignedHeaders=host, Signature=x"


def _post(emulator: Emulator, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(emulator.endpoint + "/", data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_gateway_answers_an_operation_it_lacks_with_sqs_json_error_naming_it(emulator: Emulator) -> None:
    """SQS's JSON protocol error: the shape in `__type`, the query code in `x-amzn-query-error`
    (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-json-api-responses.html)."""
    status, headers, body = _post(
        emulator,
        b"{}",
        {"X-Amz-Target": "AmazonSQS.StartXyz", "Content-Type": "application/x-amz-json-1.0", "Authorization": SIGNED},
    )

    assert status == 400
    assert headers["Content-Type"] == "application/x-amz-json-1.0"
    assert headers["x-amzn-query-error"] == "AWS.SimpleQueueService.UnsupportedOperation;Sender"
    error = json.loads(body)
    assert error["__type"] == "com.amazonaws.sqs#UnsupportedOperation" and "StartXyz" in error["message"]


def test_gateway_answers_a_query_protocol_request_it_lacks_with_an_xml_error(emulator: Emulator) -> None:
    status, _, body = _post(
        emulator,
        b"Action=StartXyz&Version=2012-11-05",
        {"Content-Type": "application/x-www-form-urlencoded", "Authorization": SIGNED},
    )

    assert status == 400
    text = body.decode()
    assert text.startswith("<ErrorResponse>") and "<Code>AWS.SimpleQueueService.UnsupportedOperation</Code>" in text
    assert "StartXyz" in text


def test_gateway_error_reaches_boto3_as_a_client_error_without_retries(emulator: Emulator) -> None:
    sfn = emulator.stepfunctions()
    arn = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:nothing:here"

    with pytest.raises(ClientError) as refused:
        sfn.redrive_execution(executionArn=arn)

    error = refused.value.response
    assert (error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]) == ("UnsupportedOperation", 400)
    assert "RedriveExecution" in error["Error"]["Message"]
    assert error["ResponseMetadata"]["RetryAttempts"] == 0, "a 400 is final: no retry of an HTML 500"


def test_gateway_keeps_a_task_failures_cause_in_the_execution_history(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`SendTaskFailure`'s error and cause are the task's failure, in its `TaskFailed` event and (not
    caught) the execution's own (https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskFailure.html)."""
    monkeypatch.setenv("MOTO_PORT", str(emulator.port))  # where moto's workflow engine sends its SQS calls
    sqs, sfn = emulator.sqs(), emulator.stepfunctions()
    queue_url = sqs.create_queue(QueueName="cause-tokens")["QueueUrl"]
    definition = {
        "StartAt": "Run",
        "States": {
            "Run": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                "Parameters": {"QueueUrl": queue_url, "MessageBody": {"token.$": "$$.Task.Token"}},
                "End": True,
            }
        },
    }
    machine = sfn.create_state_machine(
        name="cause", definition=json.dumps(definition), roleArn=f"arn:aws:iam::{ACCOUNT}:role/any"
    )["stateMachineArn"]
    execution = sfn.start_execution(stateMachineArn=machine)["executionArn"]
    token = _token(sqs, queue_url)
    cause = "[PATH_NOT_FOUND] Path does not exist: file:/data/missing."

    sfn.send_task_failure(taskToken=token, error="AnalysisException", cause=cause)

    ended = _ended(sfn, execution)
    assert (ended["status"], ended.get("error"), ended.get("cause")) == ("FAILED", "AnalysisException", cause)
    events = sfn.get_execution_history(executionArn=execution)["events"]
    [failed] = [e["taskFailedEventDetails"] for e in events if e["type"] == "TaskFailed"]
    assert (failed["error"], failed["cause"]) == ("AnalysisException", cause)


def test_gateway_keeps_a_stopped_executions_error_and_cause(emulator: Emulator) -> None:
    """`StopExecution`'s error and cause are the abort's: its `ExecutionAborted` event carries them
    (https://docs.aws.amazon.com/step-functions/latest/apireference/API_ExecutionAbortedEventDetails.html),
    and `DescribeExecution` answers them, as the simulation's Step Functions does. A cancel stops a job's
    execution with error `Cancelled` and its reason. An execution that does not exist gets moto's answer."""
    sfn = emulator.stepfunctions()
    execution = _waiting(sfn, "stopped")

    sfn.stop_execution(executionArn=execution, error="Cancelled", cause="cancelled: wrong date")

    ended = _ended(sfn, execution)
    assert (ended["status"], ended.get("error"), ended.get("cause")) == (
        "ABORTED",
        "Cancelled",
        "cancelled: wrong date",
    )

    # The status and the history are two reads: the workflow's thread may write the event just after.
    def aborted_events() -> list[dict[str, Any]]:
        events = sfn.get_execution_history(executionArn=execution)["events"]
        return [e.get("executionAbortedEventDetails", {}) for e in events if e["type"] == "ExecutionAborted"]

    [aborted] = eventually(aborted_events, "the ExecutionAborted event", 30)
    assert (aborted.get("error"), aborted.get("cause")) == ("Cancelled", "cancelled: wrong date")
    with pytest.raises(ClientError, match="ExecutionDoesNotExist"):
        sfn.stop_execution(executionArn=execution + "-none", error="Cancelled")


def test_gateway_stop_of_an_execution_still_stopping_keeps_the_first_stops_error(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopped execution is RUNNING until its workflow's thread sees the stop. A second `StopExecution`
    meanwhile (a cancel racing the lease's settle, or two cancels) stops nothing: the `ExecutionAborted`
    event keeps the first's error and cause, and `DescribeExecution` must answer the same ones, with the
    first stop's date."""
    from moto.stepfunctions.parser.backend import execution as moto_execution

    answered = threading.Event()
    terminated = moto_execution.BaseExecutionWorkerCommunication.terminated

    def held(comm: object) -> None:  # the workflow's thread ends the execution once both stops are answered
        answered.wait(30)
        terminated(comm)  # type: ignore[arg-type]

    monkeypatch.setattr(moto_execution.BaseExecutionWorkerCommunication, "terminated", held)
    sfn = emulator.stepfunctions()
    execution = _waiting(sfn, "stopped-twice")

    first = sfn.stop_execution(executionArn=execution, error="Cancelled", cause="cancelled: wrong date")
    second = sfn.stop_execution(executionArn=execution, error="LeaseNotHeld", cause="lease lost")
    answered.set()

    ended = _ended(sfn, execution)

    # The status and the history are two reads: the workflow's thread may write the event just after.
    def aborted_events() -> list[dict[str, Any]]:
        events = sfn.get_execution_history(executionArn=execution)["events"]
        return [e.get("executionAbortedEventDetails", {}) for e in events if e["type"] == "ExecutionAborted"]

    [aborted] = eventually(aborted_events, "the ExecutionAborted event", 30)
    assert (aborted.get("error"), aborted.get("cause")) == ("Cancelled", "cancelled: wrong date")
    assert (ended["status"], ended.get("error"), ended.get("cause")) == (
        "ABORTED",
        "Cancelled",
        "cancelled: wrong date",
    )
    assert second["stopDate"] == first["stopDate"]


def _waiting(sfn: Any, name: str) -> str:
    """A running execution of a state machine `name` that waits 10 minutes: one to stop."""
    definition = {"StartAt": "Job", "States": {"Job": {"Type": "Wait", "Seconds": 600, "End": True}}}
    machine = sfn.create_state_machine(
        name=name, definition=json.dumps(definition), roleArn=f"arn:aws:iam::{ACCOUNT}:role/any"
    )["stateMachineArn"]
    return str(sfn.start_execution(stateMachineArn=machine)["executionArn"])


def _token(sqs: object, queue_url: str, timeout_s: float = 30) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        messages = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1).get("Messages", [])  # type: ignore[attr-defined]
        if messages:
            return str(json.loads(messages[0]["Body"])["token"])
    raise AssertionError(f"no task token within {timeout_s} s")


def _ended(sfn: object, execution: str, timeout_s: float = 30) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        described: dict[str, object] = sfn.describe_execution(executionArn=execution)  # type: ignore[attr-defined]
        if described["status"] != "RUNNING":
            return described
        time.sleep(0.1)
    raise AssertionError(f"{execution} still running after {timeout_s} s")


def test_gateway_answers_dynamodb_one_request_at_a_time() -> None:
    """moto's cancelled transaction restores the table copy it took when it began, erasing another client's
    write made meanwhile (docs/moto.md): the gateway lets no DynamoDB request overlap another, so a
    transaction is atomic with every other request. Other services still overlap."""
    import threading

    from longjobs.offline.gateway import Gateway

    inside = {"now": 0, "most": 0}
    lock = threading.Lock()

    def app(environ: dict[str, object], start_response: object) -> list[bytes]:
        with lock:
            inside["now"] += 1
            inside["most"] = max(inside["most"], inside["now"])
        time.sleep(0.05)
        with lock:
            inside["now"] -= 1
        return [b"{}"]

    gateway = Gateway(app)

    def call(target: str) -> None:
        list(gateway({"HTTP_X_AMZ_TARGET": target, "PATH_INFO": "/"}, lambda *_: None))

    def most_at_once(target: str) -> int:
        inside["most"] = 0
        threads = [threading.Thread(target=call, args=(target,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return inside["most"]

    assert most_at_once("DynamoDB_20120810.TransactWriteItems") == 1
    assert most_at_once("AWSStepFunctions.DescribeExecution") > 1
