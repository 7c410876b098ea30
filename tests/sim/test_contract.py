"""Contract: the simulated AWS (`longjobs.sim.aws`) answers the processor's calls as AWS does, checked
against moto.

Each scenario is a function of a `Backend` (boto3-shaped clients of SQS, DynamoDB and Step Functions)
and runs once on the fake and once on moto (the `aws` fixture): the same call sequence, the same
expected answer (the fields that matter, the error codes, the items and the queue's counts after it),
so the two are held to one behaviour. Nothing here sleeps: moto reads the real clock, so a message is
made visible again with `VisibilityTimeout=0`, never by waiting; what needs time travel runs on the
fake alone.

Where the fake follows AWS and moto does not, the test runs on the fake alone (`fake` fixture), with
the AWS documentation it follows and a note of what moto does (checked with moto 5.2.5, not asserted,
so a moto upgrade breaks nothing here).
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from longjobs.engine.lease import Lease, LeaseStatus, LeaseStore, table_definition
from longjobs.engine.lease.lock import Locks
from longjobs.engine.lease.renewals import Renewal
from longjobs.engine.runs import EMR_LIVE
from longjobs.engine.visibility.errors import FailureClass, classify
from longjobs.sim.aws import SQS_MAX_VISIBILITY_S, FakeAws
from longjobs.sim.clock import FakeClock
from longjobs.sim.emr import EMR_APPLICATION, EmrServerless
from longjobs.sim.scheduler import Scheduler
from longjobs.sim.trace import Trace
from longjobs.sim.workload import SparkBehaviour

TABLE = "leases"
REGION = "us-east-1"
ROLE_ARN = "arn:aws:iam::123456789012:role/long-jobs"
STATE_MACHINE_ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:long-jobs"
TOKEN_MACHINE = "long-jobs-tokens"  # moto's: a task that sends its token to a queue and waits for it
START = 1_700_000_000.0


# -- the backends ------------------------------------------------------------------------------


@dataclass
class Backend:
    """Boto3-shaped clients of one AWS, and what only a test does: make a queue, get a live task token."""

    name: str
    sqs: Any
    dynamodb: Any
    stepfunctions: Any
    new_queue: Callable[[str, int], str]  # (name, visibility timeout) -> queue URL
    task_token: Callable[[str], str]  # an execution named so, waiting on a task: that task's token
    clock: FakeClock | None = None  # the fake's: moto reads the real clock


@dataclass
class _Task:
    """A task-token task of the fake (what the simulation's workflow model registers)."""

    closed: bool = False
    outcome: list[Any] = field(default_factory=list)

    def succeed(self, output: str) -> None:
        self.outcome.append(("success", output))
        self.closed = True

    def fail(self, error: str, cause: str) -> None:
        self.outcome.append(("failure", error, cause))
        self.closed = True

    def heartbeat(self) -> None:
        self.outcome.append(("heartbeat",))


def _fake_backend() -> Backend:
    clock = FakeClock(START)
    aws = FakeAws(clock, random.Random(1), table=table_definition(TABLE), state_machine_arn=STATE_MACHINE_ARN)

    def new_queue(name: str, visibility_timeout_s: int) -> str:
        return aws.sqs.create_queue(name, visibility_timeout_s=visibility_timeout_s).url

    def task_token(name: str) -> str:
        aws.stepfunctions.start_execution(stateMachineArn=STATE_MACHINE_ARN, name=name, input="{}")
        token = f"token-{name}"
        aws.stepfunctions.tasks[token] = _Task()
        return token

    return Backend("fake", aws.sqs, aws.dynamodb, aws.stepfunctions, new_queue, task_token, clock)


@contextlib.contextmanager
def _moto_backend(*, execute: bool = False) -> Iterator[Backend]:
    """moto, with the lease table and the state machine (`execute`: moto runs executions, which the
    task-token scenarios need; the others keep every execution RUNNING until stopped)."""
    with mock_aws(config={"stepfunctions": {"execute_state_machine": execute}}):
        sqs = boto3.client("sqs", region_name=REGION)
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        stepfunctions = boto3.client("stepfunctions", region_name=REGION)
        dynamodb.create_table(**table_definition(TABLE))
        waits = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 86_400, "End": True}}}
        stepfunctions.create_state_machine(name="long-jobs", definition=json.dumps(waits), roleArn=ROLE_ARN)
        tokens: dict[str, str] = {}

        def new_queue(name: str, visibility_timeout_s: int) -> str:
            created = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": str(visibility_timeout_s)})
            return str(created["QueueUrl"])

        def task_token(name: str) -> str:
            if "machine" not in tokens:
                tokens["queue"] = new_queue("task-tokens", 30)
                task = {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                    "Parameters": {"QueueUrl": tokens["queue"], "MessageBody": {"token.$": "$$.Task.Token"}},
                    "HeartbeatSeconds": 600,
                    "End": True,
                }
                definition = json.dumps({"StartAt": "Run", "States": {"Run": task}})
                tokens["machine"] = stepfunctions.create_state_machine(
                    name=TOKEN_MACHINE, definition=definition, roleArn=ROLE_ARN
                )["stateMachineArn"]
            stepfunctions.start_execution(stateMachineArn=tokens["machine"], name=name, input="{}")
            # moto runs the execution on a thread: the receive returns as soon as its message is sent
            messages = sqs.receive_message(QueueUrl=tokens["queue"], WaitTimeSeconds=10).get("Messages", [])
            assert messages, "moto's execution sent no task token"
            sqs.delete_message(QueueUrl=tokens["queue"], ReceiptHandle=messages[0]["ReceiptHandle"])
            return str(json.loads(messages[0]["Body"])["token"])

        yield Backend("moto", sqs, dynamodb, stepfunctions, new_queue, task_token)


@pytest.fixture(params=["fake", "moto"])
def aws(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Each backend in turn: a contract scenario runs on both."""
    if request.param == "fake":
        yield _fake_backend()
    else:
        with _moto_backend() as backend:
            yield backend


@pytest.fixture(params=["fake", "moto"])
def aws_executing(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Each backend in turn, moto running its executions (task tokens)."""
    if request.param == "fake":
        yield _fake_backend()
    else:
        with _moto_backend(execute=True) as backend:
            yield backend


@pytest.fixture
def fake() -> Backend:
    """The fake alone: where it follows AWS and moto does not."""
    return _fake_backend()


# -- helpers -----------------------------------------------------------------------------------


def error_code(call: Callable[..., Any], **request: Any) -> str | None:
    """The error code of a call (None when it succeeded)."""
    try:
        call(**request)
    except ClientError as exc:
        return str(exc.response["Error"]["Code"])
    return None


def client_error(call: Callable[..., Any], **request: Any) -> ClientError:
    with pytest.raises(ClientError) as raised:
        call(**request)
    return raised.value


def plain(item: dict[str, Any] | None) -> dict[str, Any] | None:
    """An item's values, numbers compared as numbers (`1.500` is `1.5`)."""
    if item is None:
        return None
    return {name: Decimal(value["N"]) if "N" in value else next(iter(value.values())) for name, value in item.items()}


def get(aws: Backend, key: str) -> dict[str, Any] | None:
    return plain(aws.dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": key}}, ConsistentRead=True).get("Item"))


def put(aws: Backend, key: str, **attributes: Any) -> None:
    item = {"pk": {"S": key}}
    for name, value in attributes.items():
        item[name] = {"S": value} if isinstance(value, str) else {"N": str(value)}
    aws.dynamodb.put_item(TableName=TABLE, Item=item)


def n(value: Any) -> dict[str, str]:
    return {"N": str(value)}


def s(value: str) -> dict[str, str]:
    return {"S": value}


def counts(aws: Backend, url: str) -> tuple[int, int]:
    """(visible, in flight) as GetQueueAttributes counts them."""
    attributes = aws.sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"])


def receive(aws: Backend, url: str, count: int = 1, **request: Any) -> list[dict[str, Any]]:
    """A receive as the processor's (`AttributeNames=["ApproximateReceiveCount"]`)."""
    response = aws.sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=count, AttributeNames=["ApproximateReceiveCount"], **request
    )
    return list(response.get("Messages", []))


def receive_count(message: dict[str, Any]) -> int:
    return int(message["Attributes"]["ApproximateReceiveCount"])


# -- SQS ---------------------------------------------------------------------------------------


def test_contract_sqs_receive_count_and_new_handle_per_receive(aws: Backend) -> None:
    url = aws.new_queue("jobs", 180)
    sent = aws.sqs.send_message(QueueUrl=url, MessageBody='{"job_id": "j1"}')["MessageId"]

    [first] = receive(aws, url)
    assert (first["MessageId"], first["Body"], receive_count(first)) == (sent, '{"job_id": "j1"}', 1)
    response = aws.sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])
    assert "Messages" not in response  # in flight: nothing to receive, and SQS then leaves `Messages` out

    aws.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0)
    [second] = receive(aws, url)
    assert (second["MessageId"], receive_count(second)) == (sent, 2)
    assert second["ReceiptHandle"] != first["ReceiptHandle"]  # a new handle per receive


def test_contract_sqs_change_visibility_current_handle(aws: Backend) -> None:
    url = aws.new_queue("jobs", 180)
    aws.sqs.send_message(QueueUrl=url, MessageBody="{}")
    [message] = receive(aws, url)
    handle = message["ReceiptHandle"]

    aws.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=900)
    assert counts(aws, url) == (0, 1)
    aws.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
    assert counts(aws, url) == (1, 0)
    [again] = receive(aws, url, VisibilityTimeout=60)
    assert receive_count(again) == 2
    assert counts(aws, url) == (0, 1)


def test_contract_sqs_change_visibility_beyond_12_hours_refused(aws: Backend) -> None:
    url = aws.new_queue("jobs", 180)
    aws.sqs.send_message(QueueUrl=url, MessageBody="{}")
    [message] = receive(aws, url)
    handle = message["ReceiptHandle"]
    refused = client_error(
        aws.sqs.change_message_visibility,
        QueueUrl=url,
        ReceiptHandle=handle,
        VisibilityTimeout=SQS_MAX_VISIBILITY_S + 1,
    )
    assert refused.response["Error"]["Code"] == "InvalidParameterValue"
    assert (
        error_code(aws.sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=600) is None
    )


def test_contract_sqs_delete_message(aws: Backend) -> None:
    url = aws.new_queue("jobs", 180)
    aws.sqs.send_message(QueueUrl=url, MessageBody="{}")
    [message] = receive(aws, url)
    handle = message["ReceiptHandle"]

    assert error_code(aws.sqs.delete_message, QueueUrl=url, ReceiptHandle=handle) is None
    assert counts(aws, url) == (0, 0)
    assert receive(aws, url) == []
    # The handle SQS issued for a message it has since deleted: accepted again (a retried delete whose
    # first answer was lost must not fail); a handle never issued is refused.
    assert error_code(aws.sqs.delete_message, QueueUrl=url, ReceiptHandle=handle) is None
    assert error_code(aws.sqs.delete_message, QueueUrl=url, ReceiptHandle="not-a-handle") == "ReceiptHandleIsInvalid"
    assert (
        error_code(aws.sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=30)
        == "ReceiptHandleIsInvalid"
    )


def test_contract_sqs_delete_with_older_handle_succeeds(aws: Backend) -> None:
    # DeleteMessage: "If you use an old ReceiptHandle, the request will succeed, but the message might not
    # be deleted." (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html)
    # Whether it is deleted is not part of the contract: moto deletes it, the fake keeps it (see
    # test_contract_sqs_delete_with_older_handle_keeps_message).
    url = aws.new_queue("jobs", 180)
    aws.sqs.send_message(QueueUrl=url, MessageBody="{}")
    [first] = receive(aws, url)
    aws.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0)
    [second] = receive(aws, url)
    assert receive_count(second) == 2
    assert error_code(aws.sqs.delete_message, QueueUrl=url, ReceiptHandle=first["ReceiptHandle"]) is None
    assert error_code(aws.sqs.delete_message, QueueUrl=url, ReceiptHandle=second["ReceiptHandle"]) is None
    assert counts(aws, url) == (0, 0)


def _failed(response: dict[str, Any]) -> list[dict[str, Any]]:
    """A batch answer's failed entries: Id, Code and SenderFault, and that a Message is there."""
    return [
        {"Id": entry["Id"], "Code": entry["Code"], "SenderFault": entry["SenderFault"], "Message": "Message" in entry}
        for entry in response.get("Failed", [])
    ]


def test_contract_sqs_batch_entry_failures(aws: Backend) -> None:
    url = aws.new_queue("jobs", 180)
    for body in ("a", "b"):
        aws.sqs.send_message(QueueUrl=url, MessageBody=body)
    messages = receive(aws, url, 10)
    assert sorted(message["Body"] for message in messages) == ["a", "b"]
    handles = [message["ReceiptHandle"] for message in messages]
    invalid = {"Id": "x", "Code": "ReceiptHandleIsInvalid", "SenderFault": True, "Message": True}

    changed = aws.sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "0", "ReceiptHandle": handles[0], "VisibilityTimeout": 600},
            {"Id": "x", "ReceiptHandle": "not-a-handle", "VisibilityTimeout": 600},
            {"Id": "1", "ReceiptHandle": handles[1], "VisibilityTimeout": 600},
        ],
    )
    assert sorted(entry["Id"] for entry in changed["Successful"]) == ["0", "1"]
    assert _failed(changed) == [invalid]

    deleted = aws.sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[{"Id": "0", "ReceiptHandle": handles[0]}, {"Id": "x", "ReceiptHandle": "not-a-handle"}],
    )
    assert [entry["Id"] for entry in deleted["Successful"]] == ["0"]
    assert _failed(deleted) == [invalid]
    assert counts(aws, url) == (0, 1)

    # Every entry of a deleted message: a failed entry each, nothing raised for the batch.
    changed = aws.sqs.change_message_visibility_batch(
        QueueUrl=url, Entries=[{"Id": "x", "ReceiptHandle": handles[0], "VisibilityTimeout": 60}]
    )
    assert changed["Successful"] == []
    assert _failed(changed) == [invalid]


def test_contract_sqs_send_message_batch(aws: Backend) -> None:
    """A batch of copies (the receiver's parked copies, sent at its batch's end): each entry answered by
    its id, sent with its attributes; a batch SQS refuses as a whole raises."""
    url = aws.new_queue("waiting", 180)
    carried = {"LongJobsAdmission": {"DataType": "String", "StringValue": '{"parked":"m1"}'}}
    sent = aws.sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "0", "MessageBody": "a", "MessageAttributes": carried},
            {"Id": "1", "MessageBody": "b"},
        ],
    )
    assert sorted(entry["Id"] for entry in sent["Successful"]) == ["0", "1"] and not sent.get("Failed")
    ids = {entry["Id"]: entry["MessageId"] for entry in sent["Successful"]}
    got = aws.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])["Messages"]
    by_body = {message["Body"]: message for message in got}
    assert {body: by_body[body]["MessageId"] for body in ("a", "b")} == {"a": ids["0"], "b": ids["1"]}
    assert by_body["a"]["MessageAttributes"]["LongJobsAdmission"]["StringValue"] == '{"parked":"m1"}'
    for entries, code in (
        ([], "AWS.SimpleQueueService.EmptyBatchRequest"),
        (
            [{"Id": str(i), "MessageBody": "x"} for i in range(11)],
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        ),
        (
            [{"Id": "0", "MessageBody": "x"}, {"Id": "0", "MessageBody": "y"}],
            "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
        ),
    ):
        assert error_code(aws.sqs.send_message_batch, QueueUrl=url, Entries=entries) == code


def test_contract_sqs_send_message_batch_longer_than_a_message_refused_on_aws(fake: Backend) -> None:
    """AWS refuses a batch whose messages together are longer than one message may be: "The maximum total
    payload size (the sum of the individual lengths of all of the batched messages)" is the message size
    limit (SendMessageBatch; `BatchRequestTooLong`, "The length of all the messages put together is more
    than the limit"). moto takes it (moto 5.2.5): the simulation follows AWS, and the receiver sends its
    copies in batches within the limit (`longjobs.engine.delivery.copies._send_batches`)."""
    url = fake.new_queue("waiting", 180)
    half = "x" * 150_000
    entries = [{"Id": "0", "MessageBody": half}, {"Id": "1", "MessageBody": half}]
    assert error_code(fake.sqs.send_message_batch, QueueUrl=url, Entries=entries) == (
        "AWS.SimpleQueueService.BatchRequestTooLong"
    )
    assert fake.sqs.send_message_batch(QueueUrl=url, Entries=entries[:1])["Successful"][0]["Id"] == "0"


def test_contract_sqs_queue_attributes(aws: Backend) -> None:
    url = aws.new_queue("jobs", 180)
    for _ in range(3):
        aws.sqs.send_message(QueueUrl=url, MessageBody="{}")
    aws.sqs.send_message(QueueUrl=url, MessageBody="{}", DelaySeconds=600)
    receive(aws, url)

    everything = aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert {name: everything[name] for name in _QUEUE_ATTRIBUTES} == {
        "ApproximateNumberOfMessages": "2",
        "ApproximateNumberOfMessagesNotVisible": "1",
        "ApproximateNumberOfMessagesDelayed": "1",
        "VisibilityTimeout": "180",
        "QueueArn": "arn:aws:sqs:us-east-1:123456789012:jobs",
    }
    # Only what was asked for (the admission's parked count asks for two).
    asked = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"]
    assert aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=asked)["Attributes"] == {
        "ApproximateNumberOfMessages": "2",
        "ApproximateNumberOfMessagesDelayed": "1",
    }
    assert aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])["Attributes"] == {
        "VisibilityTimeout": "180"
    }


_QUEUE_ATTRIBUTES = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "VisibilityTimeout",
    "QueueArn",
)


def test_contract_sqs_queue_that_does_not_exist(aws: Backend) -> None:
    url = aws.new_queue("jobs", 180).replace("/jobs", "/gone")
    for call, request in (
        (aws.sqs.get_queue_attributes, {"AttributeNames": ["All"]}),
        (aws.sqs.send_message, {"MessageBody": "{}"}),
        (aws.sqs.receive_message, {}),
    ):
        assert error_code(call, QueueUrl=url, **request) == "AWS.SimpleQueueService.NonExistentQueue"


# -- DynamoDB: conditional writes --------------------------------------------------------------


def test_contract_dynamodb_put_if_absent(aws: Backend) -> None:
    absent = {"ConditionExpression": "attribute_not_exists(#pk)", "ExpressionAttributeNames": {"#pk": "pk"}}
    item = {"pk": s("m1"), "status": s("ACTIVE"), "version": n(0), "renew_at": n("1700000100.500")}
    assert error_code(aws.dynamodb.put_item, TableName=TABLE, Item=item, **absent) is None
    other = {**item, "version": n(7)}
    assert error_code(aws.dynamodb.put_item, TableName=TABLE, Item=other, **absent) == "ConditionalCheckFailedException"
    assert get(aws, "m1") == {"pk": "m1", "status": "ACTIVE", "version": 0, "renew_at": Decimal("1700000100.5")}
    assert get(aws, "missing") is None


def test_contract_dynamodb_put_replacing_a_closed_lease(aws: Backend) -> None:
    # LeaseStore.create(replacing=...): the closed lease of an older receive, still that version.
    put(aws, "m1", status="RELEASED", version=3, receive_count=1)
    replace_if = {
        "ConditionExpression": "version = :version AND #status = :status AND receive_count < :rc",
        "ExpressionAttributeNames": {"#status": "status"},
    }
    newer = {"pk": s("m1"), "status": s("ACTIVE"), "version": n(0), "receive_count": n(2)}

    def values(version: int, status: str, rc: int) -> dict[str, Any]:
        return {":version": n(version), ":status": s(status), ":rc": n(rc)}

    for stale in (values(2, "RELEASED", 2), values(3, "LOST", 2), values(3, "RELEASED", 1)):
        code = error_code(
            aws.dynamodb.put_item, TableName=TABLE, Item=newer, ExpressionAttributeValues=stale, **replace_if
        )
        assert code == "ConditionalCheckFailedException"
    assert get(aws, "m1") == {"pk": "m1", "status": "RELEASED", "version": 3, "receive_count": 1}
    ok = values(3, "RELEASED", 2)
    assert (
        error_code(aws.dynamodb.put_item, TableName=TABLE, Item=newer, ExpressionAttributeValues=ok, **replace_if)
        is None
    )
    assert get(aws, "m1") == {"pk": "m1", "status": "ACTIVE", "version": 0, "receive_count": 2}


def test_contract_dynamodb_lock_conditions(aws: Backend) -> None:
    """Locks.take's conditions: of a free, absent or own lock (`OR`), and the take-over of one holding."""
    take = "attribute_not_exists(#pk) OR #state = :free OR #execution = :mine"
    names = {"#pk": "pk", "#state": "lock_state", "#execution": "execution_arn"}

    def take_for(arn: str, acquired: str) -> str | None:
        item = {"pk": s("job#1"), "lock_state": s("held"), "execution_arn": s(arn), "acquired_at": n(acquired)}
        values = {":free": s("free"), ":mine": s(arn)}
        return error_code(
            aws.dynamodb.put_item,
            TableName=TABLE,
            Item=item,
            ConditionExpression=take,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    assert take_for("arn:a", "10.000") is None  # absent
    assert take_for("arn:a", "11.000") is None  # its own
    assert take_for("arn:b", "12.000") == "ConditionalCheckFailedException"  # held by another
    over = {
        "ConditionExpression": "#execution = :theirs AND #acquired = :acquired",
        "ExpressionAttributeNames": {"#execution": "execution_arn", "#acquired": "acquired_at"},
    }
    item = {"pk": s("job#1"), "lock_state": s("held"), "execution_arn": s("arn:b"), "acquired_at": n("13.000")}
    for acquired, expected in (("10", "ConditionalCheckFailedException"), ("11.0", None)):
        values = {":theirs": s("arn:a"), ":acquired": n(acquired)}
        code = error_code(aws.dynamodb.put_item, TableName=TABLE, Item=item, ExpressionAttributeValues=values, **over)
        assert code == expected
    assert get(aws, "job#1") == {"pk": "job#1", "lock_state": "held", "execution_arn": "arn:b", "acquired_at": 13}


def test_contract_dynamodb_update_set_remove_arithmetic(aws: Backend) -> None:
    """LeaseStore.close's update: SET with `+`, REMOVE of the index keys, on condition of version and status."""
    put(
        aws,
        "m1",
        status="ACTIVE",
        version=4,
        shard=1,
        renew_at=Decimal("100.250"),
        renewal_count=2,
        visible_until=Decimal("99.5"),
    )
    request = {
        "TableName": TABLE,
        "Key": {"pk": s("m1")},
        "UpdateExpression": "SET #status = :status, closed_at = :now, version = version + :one, "
        "renewal_count = renewal_count - :one REMOVE #shard, #renew_at",
        "ConditionExpression": "version = :version AND #status = :active",
        "ExpressionAttributeNames": {"#status": "status", "#shard": "shard", "#renew_at": "renew_at"},
        "ExpressionAttributeValues": {
            ":status": s("SUCCEEDED"),
            ":now": n("120.125"),
            ":one": n(1),
            ":version": n(4),
            ":active": s("ACTIVE"),
        },
    }
    assert aws.dynamodb.update_item(**request).get("Attributes") is None
    assert get(aws, "m1") == {
        "pk": "m1",
        "status": "SUCCEEDED",
        "version": 5,
        "renewal_count": 1,
        "visible_until": Decimal("99.5"),
        "closed_at": Decimal("120.125"),
    }
    # The same update again: the version moved on, the status too.
    assert error_code(aws.dynamodb.update_item, **request) == "ConditionalCheckFailedException"
    assert get(aws, "m1")["version"] == 5  # type: ignore[index]


def test_contract_dynamodb_update_conditions_of_the_store(aws: Backend) -> None:
    """claim_parked's `attribute_not_exists(...) OR ...` in parentheses, refresh_handle's `<>`, mark_checked's
    `attribute_exists`."""
    put(aws, "p1", status="PARKED", version=1)
    claim = {
        "TableName": TABLE,
        "Key": {"pk": s("p1")},
        "UpdateExpression": "SET claimed_by = :copy, version = version + :one",
        "ConditionExpression": "#status = :parked AND (attribute_not_exists(claimed_by) OR claimed_by = :copy)",
        "ExpressionAttributeNames": {"#status": "status"},
    }

    def values(copy: str) -> dict[str, Any]:
        return {":copy": s(copy), ":one": n(1), ":parked": s("PARKED")}

    assert error_code(aws.dynamodb.update_item, ExpressionAttributeValues=values("c1"), **claim) is None
    assert error_code(aws.dynamodb.update_item, ExpressionAttributeValues=values("c1"), **claim) is None
    code = error_code(aws.dynamodb.update_item, ExpressionAttributeValues=values("c2"), **claim)
    assert code == "ConditionalCheckFailedException"
    assert get(aws, "p1") == {"pk": "p1", "status": "PARKED", "version": 3, "claimed_by": "c1"}

    put(aws, "m1", status="ACTIVE", version=2, receive_count=2, receipt_handle="h2", shard=0)
    adopt = {
        "TableName": TABLE,
        "Key": {"pk": s("m1")},
        "UpdateExpression": "SET receipt_handle = :handle, receive_count = :rc, version = version + :one",
        "ConditionExpression": "#status = :active AND version = :version"
        " AND (receive_count < :rc OR (receive_count = :rc AND receipt_handle <> :handle))",
        "ExpressionAttributeNames": {"#status": "status"},
    }

    def newer(handle: str, rc: int) -> dict[str, Any]:
        return {":handle": s(handle), ":rc": n(rc), ":one": n(1), ":active": s("ACTIVE"), ":version": n(2)}

    failed = "ConditionalCheckFailedException"
    assert error_code(aws.dynamodb.update_item, ExpressionAttributeValues=newer("h2", 2), **adopt) == failed
    assert error_code(aws.dynamodb.update_item, ExpressionAttributeValues=newer("h1", 1), **adopt) == failed
    assert error_code(aws.dynamodb.update_item, ExpressionAttributeValues=newer("h2b", 2), **adopt) is None
    assert get(aws, "m1") == {
        "pk": "m1",
        "status": "ACTIVE",
        "version": 3,
        "receive_count": 2,
        "receipt_handle": "h2b",
        "shard": 0,
    }

    checked = {
        "TableName": TABLE,
        "UpdateExpression": "SET checked_at = :now",
        "ConditionExpression": "#status = :active AND attribute_exists(#shard)",
        "ExpressionAttributeNames": {"#status": "status", "#shard": "shard"},
        "ExpressionAttributeValues": {":now": n(50), ":active": s("ACTIVE")},
    }
    assert error_code(aws.dynamodb.update_item, Key={"pk": s("m1")}, **checked) is None
    assert error_code(aws.dynamodb.update_item, Key={"pk": s("p1")}, **checked) == failed
    assert get(aws, "m1")["checked_at"] == 50  # type: ignore[index]


def test_contract_dynamodb_update_of_an_absent_item(aws: Backend) -> None:
    conditional = {
        "TableName": TABLE,
        "Key": {"pk": s("m1")},
        "UpdateExpression": "SET last_error = :error",
        "ConditionExpression": "version = :version AND #status = :active",
        "ExpressionAttributeNames": {"#status": "status"},
        "ExpressionAttributeValues": {":error": s("e"), ":version": n(0), ":active": s("ACTIVE")},
    }
    assert error_code(aws.dynamodb.update_item, **conditional) == "ConditionalCheckFailedException"
    assert get(aws, "m1") is None
    aws.dynamodb.update_item(
        TableName=TABLE, Key={"pk": s("m1")}, UpdateExpression="SET a = :a", ExpressionAttributeValues={":a": n(1)}
    )
    assert get(aws, "m1") == {"pk": "m1", "a": 1}  # an update without condition creates the item


def test_contract_dynamodb_update_reads_the_item_before_the_update(aws: Backend) -> None:
    # "When an update expression contains multiple actions, DynamoDB evaluates every action against the
    # item's attribute values as they were before the update."
    # (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.UpdateExpressions.html)
    put(aws, "m1", a=1)
    aws.dynamodb.update_item(
        TableName=TABLE,
        Key={"pk": s("m1")},
        UpdateExpression="SET a = :ten, b = a + :one",
        ExpressionAttributeValues={":ten": n(10), ":one": n(1)},
    )
    assert get(aws, "m1") == {"pk": "m1", "a": 10, "b": 2}


def test_contract_dynamodb_update_refused_requests(aws: Backend) -> None:
    """ValidationException, the item untouched: arithmetic on an absent attribute, a placeholder defined
    and not used, one used and not defined, an update of the table's key."""
    put(aws, "m1", version=1)
    refused: list[dict[str, Any]] = [
        {"UpdateExpression": "SET n = n + :one", "ExpressionAttributeValues": {":one": n(1)}},
        {
            "UpdateExpression": "SET version = :v",
            "ExpressionAttributeNames": {"#unused": "status"},
            "ExpressionAttributeValues": {":v": n(2)},
        },
        {"UpdateExpression": "SET version = :undefined"},
        {"UpdateExpression": "SET pk = :other", "ExpressionAttributeValues": {":other": s("m2")}},
    ]
    for request in refused:
        assert error_code(aws.dynamodb.update_item, TableName=TABLE, Key={"pk": s("m1")}, **request) == (
            "ValidationException"
        ), request
    assert get(aws, "m1") == {"pk": "m1", "version": 1}


# -- DynamoDB: transactions --------------------------------------------------------------------


def _renewal(key: str, version: int) -> dict[str, Any]:
    """Renewals._renewal_update's shape."""
    return {
        "Update": {
            "TableName": TABLE,
            "Key": {"pk": s(key)},
            "UpdateExpression": "SET visible_until = :visible, renewal_count = renewal_count + :one, "
            "version = version + :one",
            "ConditionExpression": "version = :version AND #status = :active",
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": {
                ":visible": n("500.000"),
                ":one": n(1),
                ":version": n(version),
                ":active": s("ACTIVE"),
            },
        }
    }


def test_contract_dynamodb_transaction_all_or_nothing(aws: Backend) -> None:
    for key in ("a", "b", "c"):
        put(aws, key, status="ACTIVE", version=1, renewal_count=0, visible_until=100)
    cancelled = client_error(
        aws.dynamodb.transact_write_items, TransactItems=[_renewal("a", 1), _renewal("b", 0), _renewal("c", 1)]
    )
    assert cancelled.response["Error"]["Code"] == "TransactionCanceledException"
    reasons = cancelled.response["CancellationReasons"]
    assert [reason["Code"] for reason in reasons] == ["None", "ConditionalCheckFailed", "None"]
    assert "[None, ConditionalCheckFailed, None]" in cancelled.response["Error"]["Message"]
    for key in ("a", "b", "c"):  # nothing written
        assert get(aws, key) == {"pk": key, "status": "ACTIVE", "version": 1, "renewal_count": 0, "visible_until": 100}

    aws.dynamodb.transact_write_items(TransactItems=[_renewal("a", 1), _renewal("b", 1), _renewal("c", 1)])
    for key in ("a", "b", "c"):
        assert get(aws, key) == {"pk": key, "status": "ACTIVE", "version": 2, "renewal_count": 1, "visible_until": 500}


def test_contract_dynamodb_transaction_one_item_twice_refused(aws: Backend) -> None:
    put(aws, "a", status="ACTIVE", version=1, renewal_count=0, visible_until=100)
    code = error_code(aws.dynamodb.transact_write_items, TransactItems=[_renewal("a", 1), _renewal("a", 1)])
    assert code == "ValidationException"
    assert get(aws, "a")["version"] == 1  # type: ignore[index]


def test_contract_dynamodb_transaction_of_puts_and_a_condition_check(aws: Backend) -> None:
    """The shape of `LeaseStore.take_holds`: a lease written (or checked unchanged) with a lock and a slot
    taken, all or nothing; a cancelled one names the failed action by its place in the request."""
    put(aws, "lease", status="ACTIVE", version=3)
    put(aws, "job#j", lock_state="HELD", execution_arn="other")

    def take(key: str) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": TABLE,
                "Item": {"pk": s(key), "lock_state": s("HELD"), "execution_arn": s("mine")},
                "ConditionExpression": "attribute_not_exists(#pk) OR lock_state = :free OR execution_arn = :mine",
                "ExpressionAttributeNames": {"#pk": "pk"},
                "ExpressionAttributeValues": {":free": s("FREE"), ":mine": s("mine")},
            }
        }

    unchanged = {
        "ConditionCheck": {
            "TableName": TABLE,
            "Key": {"pk": s("lease")},
            "ConditionExpression": "version = :version",
            "ExpressionAttributeValues": {":version": n(3)},
        }
    }
    cancelled = client_error(
        aws.dynamodb.transact_write_items, TransactItems=[unchanged, take("job#j"), take("slot#t#0")]
    )
    assert [reason["Code"] for reason in cancelled.response["CancellationReasons"]] == [
        "None",
        "ConditionalCheckFailed",
        "None",
    ]
    assert get(aws, "slot#t#0") is None  # nothing taken
    put(aws, "job#j", lock_state="FREE", execution_arn="other")
    aws.dynamodb.transact_write_items(TransactItems=[unchanged, take("job#j"), take("slot#t#0")])
    assert get(aws, "job#j") == {"pk": "job#j", "lock_state": "HELD", "execution_arn": "mine"}
    assert get(aws, "slot#t#0") == {"pk": "slot#t#0", "lock_state": "HELD", "execution_arn": "mine"}
    assert get(aws, "lease") == {"pk": "lease", "status": "ACTIVE", "version": 3}  # checked, not written


# -- DynamoDB: queries of the indexes and BatchGetItem -----------------------------------------


def _leases(aws: Backend) -> None:
    """Two shards of ACTIVE leases (the `due` and `reconcile` indexes), WAITING ones of two types (the
    `waiting` index), and items in no index (closed, locks)."""
    put(aws, "a1", status="ACTIVE", shard=0, renew_at=Decimal("100.5"), checked_at=30, visible_until=200)
    put(aws, "a2", status="ACTIVE", shard=0, renew_at=Decimal("90.25"), checked_at=10, visible_until=200)
    put(aws, "a3", status="ACTIVE", shard=0, renew_at=300, checked_at=20, visible_until=400)
    put(aws, "a4", status="ACTIVE", shard=1, renew_at=95, checked_at=5, visible_until=200)
    put(aws, "a5", status="ACTIVE", shard=0, renew_at=Decimal("90.250"), checked_at=40, visible_until=200)
    put(aws, "closed", status="SUCCEEDED", closed_at=50)
    put(aws, "job#x", lock_state="held", execution_arn="arn:x")
    for key, order, visible in (("w1", 10, 500), ("w2", 20, 50), ("w3", 30, 500), ("w4", 40, 500), ("w5", 30, 60)):
        put(aws, key, status="WAITING", waiting_type="etl", waiting_order=order, visible_until=visible)
    put(aws, "v1", status="WAITING", waiting_type="ml", waiting_order=5, visible_until=500)


def _keys(page: dict[str, Any]) -> list[str]:
    return [item["pk"]["S"] for item in page.get("Items", [])]


def test_contract_dynamodb_query_due_index(aws: Backend) -> None:
    """LeaseIndex._query_shard: a shard's leases due by a time, soonest first (ties by key)."""
    _leases(aws)

    def due(shard: int, before: str | None) -> dict[str, Any]:
        names = {"#shard": "shard"}
        values = {":shard": n(shard)}
        condition = "#shard = :shard"
        if before is not None:
            names["#renew_at"] = "renew_at"
            values[":before"] = n(before)
            condition += " AND #renew_at <= :before"
        return aws.dynamodb.query(  # type: ignore[no-any-return]
            TableName=TABLE,
            IndexName="due",
            KeyConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    page = due(0, "100.500")
    assert _keys(page) in (["a2", "a5", "a1"], ["a5", "a2", "a1"])  # a2 and a5 tie on renew_at
    assert (page["Count"], page["ScannedCount"], "LastEvaluatedKey" in page) == (3, 3, False)
    assert sorted(_keys(due(0, None))) == ["a1", "a2", "a3", "a5"]
    assert _keys(due(1, None)) == ["a4"]
    assert _keys(due(2, None)) == []

    # Closing a lease (REMOVE its shard) takes it out of the index.
    aws.dynamodb.update_item(
        TableName=TABLE,
        Key={"pk": s("a1")},
        UpdateExpression="SET #status = :closed REMOVE #shard, #renew_at",
        ExpressionAttributeNames={"#status": "status", "#shard": "shard", "#renew_at": "renew_at"},
        ExpressionAttributeValues={":closed": s("RELEASED")},
    )
    assert sorted(_keys(due(0, None))) == ["a2", "a3", "a5"]


def test_contract_dynamodb_query_reconcile_index_pages(aws: Backend) -> None:
    """LeaseIndex.reconcile_due: a shard's least recently checked, a page at a time (`Limit` here, 1 MB in
    AWS), up to a checked-at."""
    _leases(aws)
    request = {
        "TableName": TABLE,
        "IndexName": "reconcile",
        "KeyConditionExpression": "#shard = :shard",
        "ExpressionAttributeNames": {"#shard": "shard"},
        "ExpressionAttributeValues": {":shard": n(0)},
        "Limit": 3,
    }
    page = aws.dynamodb.query(**request)
    assert _keys(page) == ["a2", "a3", "a1"]
    assert (page["Count"], page["ScannedCount"]) == (3, 3)
    # An index's paging key: the table's key and the index's.
    assert plain(page["LastEvaluatedKey"]) == {"pk": "a1", "shard": 0, "checked_at": 30}
    rest = aws.dynamodb.query(ExclusiveStartKey=page["LastEvaluatedKey"], **request)
    assert (_keys(rest), "LastEvaluatedKey" in rest) == (["a5"], False)
    checked_by = {
        **request,
        "KeyConditionExpression": "#shard = :shard AND #checked <= :before",
        "ExpressionAttributeNames": {"#shard": "shard", "#checked": "checked_at"},
        "ExpressionAttributeValues": {":shard": n(0), ":before": n("30.000")},
    }
    del checked_by["Limit"]
    assert _keys(aws.dynamodb.query(**checked_by)) == ["a2", "a3", "a1"]


def test_contract_dynamodb_query_waiting_index_filter_and_limit(aws: Backend) -> None:
    """LeaseIndex.waiting: a type's WAITING leases still hidden, in line order; `Limit` counts the items
    read before the filter, so a page may hold fewer, and `ScannedCount` counts them all."""
    _leases(aws)
    request: dict[str, Any] = {
        "TableName": TABLE,
        "IndexName": "waiting",
        "KeyConditionExpression": "#type = :type",
        "FilterExpression": "#visible > :after",
        "ExpressionAttributeNames": {"#type": "waiting_type", "#visible": "visible_until"},
        "ExpressionAttributeValues": {":type": s("etl"), ":after": n(100)},
        "Limit": 2,
    }
    pages = []
    while True:
        page = aws.dynamodb.query(**request)
        pages.append((_keys(page), page["Count"], page["ScannedCount"]))
        if "LastEvaluatedKey" not in page:
            break
        assert set(page["LastEvaluatedKey"]) == {"pk", "waiting_type", "waiting_order"}
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    # Line order: w1 (10), w2 (20), w3 / w5 (30, by key), w4 (40); w2 and w5 show again (filtered out).
    assert pages == [(["w1"], 1, 2), (["w3"], 1, 2), (["w4"], 1, 1)]


def test_contract_dynamodb_query_waiting_index_count(aws: Backend) -> None:
    """LeaseIndex.count_waiting: `Select=COUNT`, with and without a place in line."""
    _leases(aws)
    names = {"#type": "waiting_type", "#visible": "visible_until"}
    values: dict[str, Any] = {":type": s("etl"), ":now": n(100)}
    counted = aws.dynamodb.query(
        TableName=TABLE,
        IndexName="waiting",
        KeyConditionExpression="#type = :type",
        FilterExpression="#visible > :now",
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
        Select="COUNT",
    )
    assert (counted["Count"], counted["ScannedCount"], "Items" in counted) == (3, 5, False)

    # Ahead of (30, "w5"): w1 and w3 (w3 < w5 at the same order), not w2 (shown again).
    ahead = aws.dynamodb.query(
        TableName=TABLE,
        IndexName="waiting",
        KeyConditionExpression="#type = :type AND #since <= :since",
        FilterExpression="#visible > :now AND (#since < :since OR #pk < :pk)",
        ExpressionAttributeNames={**names, "#since": "waiting_order", "#pk": "pk"},
        ExpressionAttributeValues={**values, ":since": n(30), ":pk": s("w5")},
        Select="COUNT",
    )
    assert (ahead["Count"], ahead["ScannedCount"], "Items" in ahead) == (2, 4, False)


def test_contract_dynamodb_batch_get_item(aws: Backend) -> None:
    """lock.batch_get: consistent reads of keys, the absent ones left out."""
    _leases(aws)
    keys = ["job#x", "slot#etl#0", "a4", "closed"]
    response = aws.dynamodb.batch_get_item(
        RequestItems={TABLE: {"Keys": [{"pk": s(key)} for key in keys], "ConsistentRead": True}}
    )
    found = sorted((plain(item) or {})["pk"] for item in response["Responses"][TABLE])
    assert found == ["a4", "closed", "job#x"]
    assert not response.get("UnprocessedKeys")
    assert plain(next(item for item in response["Responses"][TABLE] if item["pk"]["S"] == "a4")) == get(aws, "a4")


def test_contract_dynamodb_lease_store_parked_line(aws: Backend) -> None:
    """A type's parked line (a partition of the `waiting` index) on each backend: a marker joins it with
    its copy's send time, a noted copy moves it, a claim keeps it at the claimant's send time, a marker
    taken out leaves it; a WAITING lease of the type stays in the type's own line, apart."""
    store = LeaseStore(aws.dynamodb, TABLE, shards=2, closed_ttl_s=86_400)
    marker = Lease(
        message_id="p-1",
        queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/jobs",
        receipt_handle="h1",
        receive_count=1,
        received_at=1000.0,
        visible_until=1000.0,
        renew_until=1000.0 + 14 * 86_400,
        status=LeaseStatus.PARKED,
        job_type="etl",
        job_id="j1",
        copy_sent_at=1000.0,
        parked_message='{"body":"{}","attributes":{},"original":"p-1"}',
    )
    waiting = replace(
        marker,
        message_id="w-1",
        status=LeaseStatus.WAITING,
        waiting_order=900.0,
        copy_sent_at=None,
        parked_message=None,
    )
    assert store.create(marker) and store.create(waiting)
    assert [one.message_id for one in store.markers.parked_due("etl", sent_before=1000.0, limit=10)] == ["p-1"]
    assert store.markers.parked_due("etl", sent_before=999.0, limit=10) == []
    assert [one.message_id for one in store.index.waiting("etl", 10, hidden_after=0.0)] == ["w-1"], "its own line"

    assert store.markers.note_copy(marker, "c-1", sent_at=1100.0, kept_until=1100.0 + 14 * 86_400) is True
    [noted] = store.markers.parked_due("etl", sent_before=None, limit=10)
    assert (noted.copy_id, noted.copy_sent_at, noted.waiting_order) == ("c-1", 1100.0, None)
    assert store.markers.claim_parked("p-1", "c-1", sent_at=1100.5, now=1200.0) is True
    assert store.markers.claim_parked("p-1", "c-2", sent_at=1300.0, now=1300.0) is False
    claimed = store.get("p-1")
    assert claimed is not None
    assert (claimed.claimed_by, claimed.claimed_at, claimed.copy_sent_at) == ("c-1", 1200.0, 1100.5)
    assert [one.message_id for one in store.markers.parked_due("etl", sent_before=1100.5, limit=10)] == ["p-1"]

    assert store.markers.move_in_parked_line(marker, sent_at=None) is False, "an older version: it changed meanwhile"
    assert store.markers.move_in_parked_line(claimed, sent_at=None) is True
    assert store.markers.parked_due("etl", sent_before=None, limit=10) == []
    assert store.get("p-1") is not None


def test_contract_dynamodb_lease_store_and_locks(aws: Backend) -> None:
    """The processor's own store and locks (their exact expressions) on each backend: creates, renewals in
    a transaction with one lost race, a close, the due and reconcile reads, a job lock."""
    store = LeaseStore(aws.dynamodb, TABLE, shards=2, closed_ttl_s=86_400)
    lease = Lease(
        message_id="m-1",
        queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/jobs",
        receipt_handle="h1",
        receive_count=1,
        received_at=1000.0,
        visible_until=1180.0,
        renew_until=5000.0,
        renew_at=1150.0,
        job_type="etl",
        job_id="j1",
    )
    others = [replace(lease, message_id=f"m-{i}", renew_at=1150.0 + i) for i in (2, 3)]
    assert store.create(lease) is True
    assert store.create(lease) is False
    assert all(store.create(other) for other in others)

    stale = replace(others[0], version=5)  # another writer got there first
    renewals = [
        Renewal(one, sent_at=1140.0, visibility_timeout_s=300, renew_at=1400.0) for one in (lease, stale, others[1])
    ]
    recorded = store.renewals.record_many(renewals)
    assert [None if one is None else one.version for one in recorded] == [1, None, 1]
    assert [one.message_id for one in store.index.due(before=1200.0)] == ["m-2"]
    assert sorted(one.message_id for one in store.index.due()) == ["m-1", "m-2", "m-3"]

    renewed = recorded[0]
    assert renewed is not None
    closed = store.close(renewed, LeaseStatus.SUCCEEDED, now=1500.0, result={"rows": 3})
    assert closed is not None and closed.version == 2
    assert store.close(renewed, LeaseStatus.SUCCEEDED, now=1501.0) is None, "another writer's close came first"
    # the same close sent again (a retry of one that landed with its answer lost) is recognised as landed
    assert store.close(renewed, LeaseStatus.SUCCEEDED, now=1500.0, result={"rows": 3}) == closed
    assert store.get("m-1") == replace(closed, checked_at=None)
    assert sorted(one.message_id for one in store.index.due()) == ["m-2", "m-3"]
    assert sorted(one.message_id for one in store.index.reconcile_due(checked_before=1000.0)) == ["m-2", "m-3"]
    assert store.index.reconcile_due(checked_before=999.0) == []  # checked-at is the receive until a look
    assert sorted(store.get_many(["m-1", "m-3", "m-9"])) == ["m-1", "m-3"]

    locks = Locks(aws.dynamodb, TABLE, closed_ttl_s=86_400)
    arn_a, arn_b = (f"arn:aws:states:us-east-1:123456789012:execution:long-jobs:{x}" for x in ("a", "b"))
    assert locks.take("job#j1", holder="m-1", execution_arn=arn_a, now=1.0, hold_until=10.0) is True
    assert locks.take("job#j1", holder="m-2", execution_arn=arn_b, now=2.0, hold_until=10.0) is False
    held = locks.get("job#j1")
    assert held is not None and held.held and held.execution_arn == arn_a
    assert locks.release("job#j1", arn_b, now=3.0) is False
    assert locks.release("job#j1", arn_a, now=3.0) is True
    assert locks.take("job#j1", holder="m-2", execution_arn=arn_b, now=4.0, hold_until=10.0, last_duration_s=2.0)
    assert {key: (lock.execution_arn, lock.held) for key, lock in locks.get_many(["job#j1", "job#j9"]).items()} == {
        "job#j1": (arn_b, True)
    }


# -- Step Functions ----------------------------------------------------------------------------


def test_contract_stepfunctions_start_execution_idempotent(aws: Backend) -> None:
    started = aws.stepfunctions.start_execution(stateMachineArn=STATE_MACHINE_ARN, name="m-1-1", input='{"a": 1}')
    arn = started["executionArn"]
    assert arn == "arn:aws:states:us-east-1:123456789012:execution:long-jobs:m-1-1"
    # The same name and input while it runs: the same execution.
    again = aws.stepfunctions.start_execution(stateMachineArn=STATE_MACHINE_ARN, name="m-1-1", input='{"a": 1}')
    assert again["executionArn"] == arn
    # The same name, another input: the name is taken.
    other = client_error(
        aws.stepfunctions.start_execution, stateMachineArn=STATE_MACHINE_ARN, name="m-1-1", input='{"a": 2}'
    )
    assert other.response["Error"]["Code"] == "ExecutionAlreadyExists"

    described = aws.stepfunctions.describe_execution(executionArn=arn)
    assert {key: described[key] for key in ("executionArn", "stateMachineArn", "name", "status", "input")} == {
        "executionArn": arn,
        "stateMachineArn": STATE_MACHINE_ARN,
        "name": "m-1-1",
        "status": "RUNNING",
        "input": '{"a": 1}',
    }


def test_contract_stepfunctions_stop_execution(aws: Backend) -> None:
    arn = aws.stepfunctions.start_execution(stateMachineArn=STATE_MACHINE_ARN, name="m-1-1", input="{}")["executionArn"]
    assert "stopDate" in aws.stepfunctions.stop_execution(executionArn=arn, error="Stopped", cause="lost")
    assert aws.stepfunctions.describe_execution(executionArn=arn)["status"] == "ABORTED"

    never = arn.replace("m-1-1", "m-9-1")
    assert error_code(aws.stepfunctions.describe_execution, executionArn=never) == "ExecutionDoesNotExist"
    assert error_code(aws.stepfunctions.stop_execution, executionArn=never, cause="x") == "ExecutionDoesNotExist"


def _names(page: dict[str, Any]) -> list[str]:
    return [execution["name"] for execution in page["executions"]]


def test_contract_stepfunctions_list_executions_by_status_newest_first_in_pages(aws: Backend) -> None:
    """Reconciliation's list of the running executions (`reconcile._running_executions`): `statusFilter`,
    newest first, `maxResults` a page and `nextToken` to go on; a token not issued, or another machine,
    refused."""
    arns = []
    for index in range(5):
        if aws.clock is not None:
            aws.clock.advance(1.0)  # moto stamps each start with the real clock's microseconds
        arns.append(
            aws.stepfunctions.start_execution(stateMachineArn=STATE_MACHINE_ARN, name=f"m-{index}-1", input="{}")[
                "executionArn"
            ]
        )
    aws.stepfunctions.stop_execution(executionArn=arns[2], error="Stopped", cause="gone")

    request = {"stateMachineArn": STATE_MACHINE_ARN, "statusFilter": "RUNNING", "maxResults": 2}
    first = aws.stepfunctions.list_executions(**request)
    assert _names(first) == ["m-4-1", "m-3-1"] and first.get("nextToken")
    item = first["executions"][0]
    assert {key: item[key] for key in ("executionArn", "stateMachineArn", "name", "status")} == {
        "executionArn": arns[4],
        "stateMachineArn": STATE_MACHINE_ARN,
        "name": "m-4-1",
        "status": "RUNNING",
    }
    assert "startDate" in item
    rest = aws.stepfunctions.list_executions(nextToken=first["nextToken"], **request)
    assert (_names(rest), rest.get("nextToken")) == (["m-1-1", "m-0-1"], None)

    every = aws.stepfunctions.list_executions(stateMachineArn=STATE_MACHINE_ARN, maxResults=1000)
    assert _names(every) == ["m-4-1", "m-3-1", "m-2-1", "m-1-1", "m-0-1"] and "nextToken" not in every
    aborted = aws.stepfunctions.list_executions(stateMachineArn=STATE_MACHINE_ARN, statusFilter="ABORTED")
    assert [(e["name"], e["status"]) for e in aborted["executions"]] == [("m-2-1", "ABORTED")]
    assert "stopDate" in aborted["executions"][0]

    assert error_code(aws.stepfunctions.list_executions, nextToken="not-a-token", **request) == "InvalidToken"
    other = STATE_MACHINE_ARN.replace("long-jobs", "other")
    assert error_code(aws.stepfunctions.list_executions, stateMachineArn=other) == "StateMachineDoesNotExist"


def test_contract_stepfunctions_list_executions_is_eventually_consistent(fake: Backend) -> None:
    """ListExecutions "is eventually consistent. The results are best effort and may not reflect very
    recent updates and changes" (https://docs.aws.amazon.com/step-functions/latest/apireference/API_ListExecutions.html),
    while DescribeExecution answers the execution as it is. The fake's `ListLag` shows a start, and an
    end, a seeded delay late: a new execution missing, an ended one still RUNNING. moto (5.2.5) lists
    every change at once, so this runs on the fake alone, with a lag of 30 s."""
    from longjobs.sim.aws import ListLag

    assert fake.clock is not None
    sfn = fake.stepfunctions
    sfn.list_lag = ListLag(30.0, random.Random(4))
    arn = sfn.start_execution(stateMachineArn=STATE_MACHINE_ARN, name="m-1-1", input="{}")["executionArn"]
    execution = sfn.executions[arn]

    def running() -> list[str]:
        page = sfn.list_executions(stateMachineArn=STATE_MACHINE_ARN, statusFilter="RUNNING")
        return [e["executionArn"] for e in page["executions"]]

    assert 0.0 < execution.listed_from - START <= 30.0
    assert running() == [] and sfn.describe_execution(executionArn=arn)["status"] == "RUNNING"
    fake.clock.advance(execution.listed_from - fake.clock.now())
    assert running() == [arn]
    sfn.stop_execution(executionArn=arn)
    assert execution.listed_ended_from is not None and execution.listed_ended_from > fake.clock.now()
    assert running() == [arn], "a closed execution still listed RUNNING"
    assert sfn.describe_execution(executionArn=arn)["status"] == "ABORTED"
    fake.clock.advance(execution.listed_ended_from - fake.clock.now())
    assert running() == []
    aborted = sfn.list_executions(stateMachineArn=STATE_MACHINE_ARN, statusFilter="ABORTED")["executions"]
    assert [e["executionArn"] for e in aborted] == [arn]


def test_contract_stepfunctions_list_executions_page_size_and_token_lifetime(fake: Backend) -> None:
    """`maxResults`: "The default is 100 and the maximum allowed page size is 1000. A value of 0 uses the
    default" (ValidationException beyond it; moto 5.2.5 answers a page of any size); a token "expires
    after 24 hours. Using an expired pagination token will return an HTTP 400 InvalidToken error"
    (https://docs.aws.amazon.com/step-functions/latest/apireference/API_ListExecutions.html; moto's never
    expires). Reconciliation asks for pages of 1,000."""
    assert fake.clock is not None
    sfn = fake.stepfunctions
    sfn.set_quota("StartExecution", None)
    for index in range(1_001):
        sfn.start_execution(stateMachineArn=STATE_MACHINE_ARN, name=f"m-{index}-1", input="{}")
    request = {"stateMachineArn": STATE_MACHINE_ARN, "statusFilter": "RUNNING"}
    assert len(sfn.list_executions(maxResults=0, **request)["executions"]) == 100
    page = sfn.list_executions(maxResults=1000, **request)
    assert len(page["executions"]) == 1000
    assert len(sfn.list_executions(maxResults=1000, nextToken=page["nextToken"], **request)["executions"]) == 1
    assert error_code(sfn.list_executions, maxResults=1001, **request) == "ValidationException"
    assert error_code(sfn.list_executions, statusFilter="BOGUS", stateMachineArn=STATE_MACHINE_ARN) == (
        "ValidationException"
    )
    fake.clock.advance(86_401)
    assert error_code(sfn.list_executions, maxResults=1000, nextToken=page["nextToken"], **request) == "InvalidToken"


def test_contract_stepfunctions_task_token_callbacks(aws_executing: Backend) -> None:
    aws = aws_executing
    succeeding, failing = aws.task_token("m-1-1"), aws.task_token("m-2-1")
    assert error_code(aws.stepfunctions.send_task_heartbeat, taskToken=succeeding) is None
    assert error_code(aws.stepfunctions.send_task_success, taskToken=succeeding, output='{"rows": 1}') is None
    assert error_code(aws.stepfunctions.send_task_failure, taskToken=failing, error="SparkFailed", cause="x") is None
    for call, request in (
        (aws.stepfunctions.send_task_success, {"output": "{}"}),
        (aws.stepfunctions.send_task_failure, {"error": "E", "cause": "c"}),
        (aws.stepfunctions.send_task_heartbeat, {}),
    ):
        assert error_code(call, taskToken="never-issued", **request) == "InvalidToken"


def test_contract_stepfunctions_execution_history(aws_executing: Backend) -> None:
    """GetExecutionHistory, as the receiver reads it before a job's next attempt (`longjobs.engine.runs`):
    the events oldest first, numbered from 1, opening with the execution's start and closing with its end
    (https://docs.aws.amazon.com/step-functions/latest/apireference/API_GetExecutionHistory.html,
    API_HistoryEvent.html). moto (5.2.5) runs no EMR Serverless task, so the task's own events are the
    fake's alone (`tests/sim/test_emr_serverless.py`)."""
    sfn = aws_executing.stepfunctions
    arn = sfn.start_execution(stateMachineArn=STATE_MACHINE_ARN, name="m-1-1", input='{"a": 1}')["executionArn"]
    deadline = time.monotonic() + 10  # moto's executing backend runs the execution on its own thread
    if aws_executing.name == "moto":  # it records no end of an execution stopped before its first state
        while len(sfn.get_execution_history(executionArn=arn)["events"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    sfn.stop_execution(executionArn=arn, error="Stopped", cause="lost")
    answer = sfn.get_execution_history(executionArn=arn, maxResults=1000)
    while answer["events"][-1]["type"] != "ExecutionAborted" and time.monotonic() < deadline:
        time.sleep(0.05)
        answer = sfn.get_execution_history(executionArn=arn, maxResults=1000)
    events = answer["events"]
    assert events[0]["type"] == "ExecutionStarted" and events[0]["executionStartedEventDetails"]["input"] == '{"a": 1}'
    assert events[-1]["type"] == "ExecutionAborted"
    assert [event["id"] for event in events] == list(range(1, len(events) + 1)) and "nextToken" not in answer
    assert all(isinstance(event["timestamp"], datetime) for event in events)
    never = arn.replace("m-1-1", "m-9-1")
    assert error_code(sfn.get_execution_history, executionArn=never) == "ExecutionDoesNotExist"


# -- EMR Serverless ----------------------------------------------------------------------------


@dataclass
class EmrBackend:
    """A boto3-shaped EMR Serverless client, its application, and what only a test does: start a run."""

    name: str
    emr: Any
    application: str
    start: Callable[[str], str]  # a run named so, started: its id


def _fake_emr() -> EmrBackend:
    scheduler = Scheduler(START)
    emr = EmrServerless(scheduler, Trace(scheduler.now, START), 1, faults_active=lambda _: False, reach=lambda _: None)

    def start(name: str) -> str:
        parameters = {
            "ClientToken": name,
            "Name": name,
            "ExecutionTimeoutMinutes": 60,
            "RetryPolicy": {"MaxAttempts": 1},
        }
        behaviour = SparkBehaviour("ok", 600.0)
        scheduler.spawn(lambda: emr.run_job(parameters, f"arn:{name}", behaviour, None, 3_600.0))
        scheduler.run(until=scheduler.now() + 0.001)  # the start; the run then waits to be scheduled
        return next(run.run_id for run in emr.runs.values() if run.token == name)

    return EmrBackend("fake", emr, EMR_APPLICATION, start)


@contextlib.contextmanager
def _moto_emr() -> Iterator[EmrBackend]:
    with mock_aws():
        emr = boto3.client("emr-serverless", region_name=REGION)
        application = emr.create_application(name="jobs", releaseLabel="emr-7.5.0", type="SPARK")["applicationId"]

        def start(name: str) -> str:
            driver = {"sparkSubmit": {"entryPoint": "s3://assets/glue_entry.py"}}
            started = emr.start_job_run(
                applicationId=application, clientToken=name, name=name, executionRoleArn=ROLE_ARN, jobDriver=driver
            )
            return str(started["jobRunId"])

        yield EmrBackend("moto", emr, application, start)


@pytest.fixture(params=["fake", "moto"])
def emr(request: pytest.FixtureRequest) -> Iterator[EmrBackend]:
    if request.param == "fake":
        yield _fake_emr()
    else:
        with _moto_emr() as backend:
            yield backend


def test_contract_emr_serverless_get_job_run(emr: EmrBackend) -> None:
    """GetJobRun, as the receiver reads a run named by its execution's history: the run's ids, its name and
    its state (https://docs.aws.amazon.com/emr-serverless/latest/APIReference/API_GetJobRun.html); a run the
    application does not hold is ResourceNotFoundException (AWS answers HTTP 404, moto 5.2.5 400). A moto
    run is SUCCESS at once, the fake's goes through the live states: only the state's values are held."""
    run_id = emr.start("m-1-1")
    run = emr.emr.get_job_run(applicationId=emr.application, jobRunId=run_id)["jobRun"]
    assert (run["applicationId"], run["jobRunId"], run["name"]) == (emr.application, run_id, "m-1-1")
    assert run["arn"].endswith(f":/applications/{emr.application}/jobruns/{run_id}")
    assert run["state"] in (*EMR_LIVE, "SUCCESS", "FAILED", "CANCELLED")
    unknown = client_error(emr.emr.get_job_run, applicationId=emr.application, jobRunId="00nosuchrun")
    assert unknown.response["Error"]["Code"] == "ResourceNotFoundException"


def test_contract_emr_serverless_list_job_runs_by_name_and_state(emr: EmrBackend) -> None:
    """ListJobRuns in states, created after a time, as the receiver's fallback lists the live runs. moto
    keeps only the day a run was created, so the bounds here span the day."""
    run_id = emr.start("m-1-1")
    state = emr.emr.get_job_run(applicationId=emr.application, jobRunId=run_id)["jobRun"]["state"]
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) if emr.name == "moto" else None
    after = (day - timedelta(seconds=1)) if day else datetime.fromtimestamp(START - 60, UTC)
    before = (day + timedelta(days=1)) if day else datetime.fromtimestamp(START + 60, UTC)
    request = {"applicationId": emr.application, "createdAtAfter": after, "createdAtBefore": before}
    listed = emr.emr.list_job_runs(states=[state], **request)["jobRuns"]
    assert [(run["id"], run["name"], run["state"]) for run in listed] == [(run_id, "m-1-1", state)]
    other = "CANCELLING" if state != "CANCELLING" else "RUNNING"
    assert emr.emr.list_job_runs(states=[other], **request)["jobRuns"] == []


# -- where the fake follows AWS and moto does not ----------------------------------------------


def test_contract_sqs_12h_limit_counts_from_the_receive(fake: Backend) -> None:
    # AWS counts a message's 12 h of visibility from its receive: "you have a message and its default
    # message visibility timeout is 30 minutes. You could call ChangeMessageVisibility with a value of two
    # hours and the effective timeout would be two hours and 30 minutes. When that time comes near you could
    # again extend the time out by calling ChangeMessageVisibility, but this time the maximum allowed timeout
    # would be 9 hours and 30 minutes." and "you can't extend the timeout of a message in an existing queue
    # to more than a total visibility timeout of 12 hours"
    # (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html).
    # moto counts from the send (`given_visibility_timeout - message.sent_timestamp > 43200 * 1000` in
    # moto/sqs/models.py): it would refuse the first change below, the message having waited 6 h unreceived.
    assert fake.clock is not None
    url = fake.new_queue("jobs", 180)
    fake.sqs.send_message(QueueUrl=url, MessageBody="{}")
    fake.clock.advance(6 * 3_600)
    [message] = receive(fake, url)
    handle = message["ReceiptHandle"]

    assert (
        error_code(fake.sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=43_000)
        is None
    )
    fake.clock.advance(1_000)
    refused = client_error(
        fake.sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=43_000
    )
    error = refused.response["Error"]
    assert error["Code"] == "InvalidParameterValue"
    assert classify(error["Code"], error["Message"]) is FailureClass.CAPPED
    # Up to 12 h after the receive is still allowed.
    assert (
        error_code(fake.sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=42_200)
        is None
    )


def test_contract_sqs_change_visibility_stale_handle_refused(fake: Backend) -> None:
    # A receipt handle is "An identifier associated with the act of receiving the message. A new receipt
    # handle is returned every time you receive a message."
    # (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_Message.html); SQS refuses a
    # visibility change by an older receive's handle ("Value ... for parameter ReceiptHandle is invalid.
    # Reason: Message does not exist or is not available for visibility timeout change." / "The receipt
    # handle has expired.", as reported in mapbox/ecs-watchbot#135 and aws/aws-sdk-java#2164). No AWS page
    # says so in as many words, and moto's getmoto/moto#4655 reports the opposite from its own AWS runs:
    # the fake keeps the refusal, the stricter of the two, which the processor must survive either way.
    # moto accepts any handle the message ever had (moto/sqs/models.py `had_receipt_handle`), and changes
    # the visibility under the newer receive.
    url = fake.new_queue("jobs", 180)
    fake.sqs.send_message(QueueUrl=url, MessageBody="{}")
    [first] = receive(fake, url)
    fake.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0)
    [second] = receive(fake, url)

    refused = client_error(
        fake.sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=600
    )
    error = refused.response["Error"]
    assert error["Code"] == "InvalidParameterValue"
    assert classify(error["Code"], error["Message"]) is FailureClass.LOST
    batch = fake.sqs.change_message_visibility_batch(
        QueueUrl=url, Entries=[{"Id": "0", "ReceiptHandle": first["ReceiptHandle"], "VisibilityTimeout": 600}]
    )
    assert [(entry["Id"], entry["Code"], entry["SenderFault"]) for entry in batch["Failed"]] == [
        ("0", "InvalidParameterValue", True)
    ]
    # The newer receive's handle still holds it.
    fake.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"], VisibilityTimeout=600)
    assert counts(fake, url) == (0, 1)


def test_contract_sqs_change_visibility_not_in_flight_refused(fake: Backend) -> None:
    # ChangeMessageVisibility's error MessageNotInflight: "The specified message isn't in flight."
    # (https://docs.aws.amazon.com/botocore/latest/reference/services/sqs/client/exceptions/MessageNotInflight.html;
    # "When you change Amazon SQS message visibility, check for MessageNotInFlight exceptions that signify
    # that the specified message is not in flight.",
    # https://docs.aws.amazon.com/codeguru/detector-library/java/amazon-sqs-change-message-visibility-check-status/).
    # moto accepts the change of a message visible again (and hides it): getmoto/moto#4655 dropped the
    # error, its author finding no way to make AWS raise it.
    url = fake.new_queue("jobs", 180)
    fake.sqs.send_message(QueueUrl=url, MessageBody="{}")
    [message] = receive(fake, url)
    handle = message["ReceiptHandle"]
    fake.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)

    refused = client_error(fake.sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=60)
    assert refused.response["Error"]["Code"] == "AWS.SimpleQueueService.MessageNotInflight"
    assert classify(refused.response["Error"]["Code"]) is FailureClass.LOST
    assert counts(fake, url) == (1, 0)  # still visible


def test_contract_sqs_sent_timestamp_when_asked(aws: Backend) -> None:
    # SentTimestamp: "the time the message was sent to the queue (epoch time in milliseconds)", returned
    # when asked for by name or by All
    # (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html).
    url = aws.new_queue("jobs", 180)
    before = aws.clock.now() if aws.clock is not None else time.time()
    aws.sqs.send_message(QueueUrl=url, MessageBody="{}")
    after = aws.clock.now() if aws.clock is not None else time.time()
    [message] = receive(aws, url)
    assert "SentTimestamp" not in message["Attributes"], "not asked for"
    aws.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
    [message] = aws.sqs.receive_message(QueueUrl=url, AttributeNames=["SentTimestamp"])["Messages"]
    # Bracketed by the clock's reads around the send (milliseconds, so a thousandth either side).
    assert before - 0.001 <= int(message["Attributes"]["SentTimestamp"]) / 1000 <= after + 0.001


def test_contract_sqs_retention_deletes_messages_received_or_not(fake: Backend) -> None:
    # MessageRetentionPeriod: "The length of time, in seconds, for which Amazon SQS retains a message"
    # (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SetQueueAttributes.html),
    # counted from its send, in flight or not; a standard queue's DLQ copy keeps "its original enqueue
    # timestamp", a FIFO queue's is reset
    # (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html).
    # moto keeps an expired message and only leaves it out of a receive (`is_message_valid_based_on_
    # retention_period` in moto/sqs/models.py), on the real clock.
    assert fake.clock is not None
    queue = fake.sqs.create_queue("short", visibility_timeout_s=30, retention_s=600)
    redriven = fake.sqs.create_queue("redriven", visibility_timeout_s=30, retention_s=600)
    dlq = fake.sqs.create_queue("short-dlq", visibility_timeout_s=30, retention_s=600)
    redriven.redrive = (dlq, 1)
    fake.sqs.send_message(QueueUrl=queue.url, MessageBody="in flight")
    [in_flight] = fake.sqs.receive_message(QueueUrl=queue.url, VisibilityTimeout=3_600)["Messages"]
    fake.sqs.send_message(QueueUrl=queue.url, MessageBody="never received")
    fake.sqs.send_message(QueueUrl=redriven.url, MessageBody="dead")
    [dead] = fake.sqs.receive_message(QueueUrl=redriven.url)["Messages"]
    fake.sqs.change_message_visibility(QueueUrl=redriven.url, ReceiptHandle=dead["ReceiptHandle"], VisibilityTimeout=0)
    fake.clock.advance(100)
    assert fake.sqs.receive_message(QueueUrl=redriven.url).get("Messages") is None, "moved to the DLQ"
    assert counts(fake, queue.url) == (1, 1) and counts(fake, dlq.url) == (1, 0)

    fake.clock.advance(501)  # 601 s after the sends
    assert counts(fake, queue.url) == (0, 0), "the one in flight too"
    assert counts(fake, dlq.url) == (0, 0), "the DLQ copy kept its first send time: not 600 s after its move"
    deleted = fake.sqs.delete_message(QueueUrl=queue.url, ReceiptHandle=in_flight["ReceiptHandle"])
    assert deleted == {}, "a handle it issued is still accepted, deleting nothing"


def test_contract_sqs_delete_with_older_handle_keeps_message(fake: Backend) -> None:
    # DeleteMessage: "If you use an old ReceiptHandle, the request will succeed, but the message might not be
    # deleted." (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html)
    # The fake takes the "might not": the message stays with its newer receive. moto deletes it.
    url = fake.new_queue("jobs", 180)
    fake.sqs.send_message(QueueUrl=url, MessageBody="{}")
    [first] = receive(fake, url)
    fake.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0)
    [second] = receive(fake, url)

    assert fake.sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"]) == {}
    assert counts(fake, url) == (0, 1)
    fake.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"], VisibilityTimeout=60)
    fake.sqs.delete_message(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"])
    assert counts(fake, url) == (0, 0)


def test_contract_stepfunctions_closed_name_taken(fake: Backend) -> None:
    # StartExecution: "If StartExecution is called with the same name and input as a running execution,
    # the call succeeds and return the same response as the original request. If the execution is closed or
    # if the input is different, it returns a 400 ExecutionAlreadyExists error. You can reuse names after
    # 90 days." (Standard workflows;
    # https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html)
    # The same rule is in the service model's doc of `name`: "When the original execution is closed, the
    # ExecutionAlreadyExists message is returned regardless of input." moto (5.2.5) agrees since
    # getmoto/moto#9500 ("start_execution() is only idempotent for running executions"), so this is no longer
    # a moto deviation; it stays here, fake only, as the simulation depends on it.
    request = {"stateMachineArn": STATE_MACHINE_ARN, "name": "m-1-1", "input": "{}"}
    arn = fake.stepfunctions.start_execution(**request)["executionArn"]
    fake.stepfunctions.stop_execution(executionArn=arn, cause="lost")
    assert error_code(fake.stepfunctions.start_execution, **request) == "ExecutionAlreadyExists"
    assert fake.stepfunctions.describe_execution(executionArn=arn)["status"] == "ABORTED"


def test_contract_stepfunctions_closed_task_token_timed_out(fake: Backend) -> None:
    # SendTask*: TaskTimedOut, "The task token has either expired or the task associated with the token has
    # already been closed."
    # (https://docs.aws.amazon.com/botocore/latest/reference/services/stepfunctions/client/exceptions/TaskTimedOut.html)
    # moto's executing backend answers InvalidToken once the execution has ended.
    token = fake.task_token("m-1-1")
    fake.stepfunctions.send_task_success(taskToken=token, output="{}")
    for call, request in (
        (fake.stepfunctions.send_task_success, {"output": "{}"}),
        (fake.stepfunctions.send_task_heartbeat, {}),
    ):
        assert error_code(call, taskToken=token, **request) == "TaskTimedOut"


def test_contract_dynamodb_unused_value_refused(fake: Backend) -> None:
    # DynamoDB refuses a request whose ExpressionAttributeValues hold a value no expression uses
    # ("Value provided in ExpressionAttributeValues unused in expressions: keys: {:v}"), as it refuses an
    # unused name (which moto checks too, see test_contract_dynamodb_update_refused_requests). moto does not
    # check the values.
    refused = client_error(
        fake.dynamodb.put_item,
        TableName=TABLE,
        Item={"pk": s("m1")},
        ConditionExpression="attribute_not_exists(#pk)",
        ExpressionAttributeNames={"#pk": "pk"},
        ExpressionAttributeValues={":v": n(1)},
    )
    assert refused.response["Error"]["Code"] == "ValidationException"
    assert "unused" in refused.response["Error"]["Message"]
    assert get(fake, "m1") is None


def test_contract_dynamodb_malformed_condition_refused_every_time(fake: Backend) -> None:
    # A condition that does not parse is a ValidationException each time it is sent (the fake once kept a
    # partial parse of it and took it the second time: a seed then behaved differently in a process that
    # had run it before). moto refuses it too, with another message.
    put(fake, "a", status="ACTIVE", version=1)
    malformed = "#status = :active  (version = :version)"
    request = {
        "ConditionExpression": malformed,
        "ExpressionAttributeNames": {"#status": "status"},
        "ExpressionAttributeValues": {":active": s("ACTIVE"), ":version": n(1)},
    }
    for _ in range(2):
        code = error_code(fake.dynamodb.put_item, TableName=TABLE, Item={"pk": s("a"), "version": n(2)}, **request)
        assert code == "ValidationException"
    assert get(fake, "a")["version"] == 1  # type: ignore[index]


def test_contract_dynamodb_transaction_validation_error_cancels(fake: Backend) -> None:
    # An action that fails validation on the item it meets cancels the transaction, with a ValidationError
    # reason in its place ("A ValidationError occurs ... changes made by the transaction might also cause a
    # validation error", https://repost.aws/knowledge-center/dynamodb-transactwriteitems; reasons are "An
    # ordered list of errors for each item in the request which caused the transaction to get cancelled",
    # https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CancellationReason.html).
    # moto raises a plain ValidationException.
    put(fake, "a", status="ACTIVE", version=1, renewal_count=0, visible_until=100)
    put(fake, "b", status="ACTIVE", version=1, visible_until=100)  # no renewal_count to add to
    cancelled = client_error(fake.dynamodb.transact_write_items, TransactItems=[_renewal("a", 1), _renewal("b", 1)])
    assert cancelled.response["Error"]["Code"] == "TransactionCanceledException"
    assert [reason["Code"] for reason in cancelled.response["CancellationReasons"]] == ["None", "ValidationError"]
    assert get(fake, "a")["version"] == 1  # type: ignore[index]


def test_contract_stepfunctions_execution_history_pages(fake: Backend) -> None:
    # GetExecutionHistory: "maxResults: The maximum number of results that are returned per call ... The
    # default is 100 and the maximum allowed page size is 1000", a `nextToken` to go on, `reverseOrder` for
    # the newest first, and `includeExecutionData` false leaves out input and output
    # (https://docs.aws.amazon.com/step-functions/latest/apireference/API_GetExecutionHistory.html).
    # moto (5.2.5) answers every event in one page, ignoring these.
    sfn = fake.stepfunctions
    arn = sfn.start_execution(stateMachineArn=STATE_MACHINE_ARN, name="m-1-1", input='{"a": 1}')["executionArn"]
    sfn.stop_execution(executionArn=arn, error="Stopped", cause="lost")
    first = sfn.get_execution_history(executionArn=arn, maxResults=1)
    assert [event["type"] for event in first["events"]] == ["ExecutionStarted"] and first["nextToken"]
    rest = sfn.get_execution_history(executionArn=arn, maxResults=1, nextToken=first["nextToken"])
    assert [event["type"] for event in rest["events"]] == ["ExecutionAborted"] and "nextToken" not in rest
    assert rest["events"][0]["executionAbortedEventDetails"] == {"error": "Stopped", "cause": "lost"}
    newest = sfn.get_execution_history(executionArn=arn, reverseOrder=True)["events"]
    assert [event["id"] for event in newest] == [2, 1]
    bare = sfn.get_execution_history(executionArn=arn, includeExecutionData=False)["events"][0]
    assert "input" not in bare["executionStartedEventDetails"]
    assert error_code(sfn.get_execution_history, executionArn=arn, maxResults=1001) == "ValidationException"
