"""Helpers of the `longjobs` tests: run the command, seed leases, create the processor's resources."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from longjobs.cli.__main__ import main
from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog
from longjobs.engine.jobs.published import publish
from longjobs.engine.lease import Lease, LeaseStatus
from longjobs.engine.lease.codec import lease_to_item
from longjobs.engine.lease.schema import table_definition

PASS_DEFINITION = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}})
ROLE_ARN = "arn:aws:iam::123456789012:role/long-jobs"


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> Result:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return Result(code, out, err)


def succeeded(story: dict[str, Any]) -> dict[str, Any] | None:
    """`longjobs lease --json`'s story once its job succeeded and its execution ended, else None: the
    workflow closes the lease before it deletes the message, so SUCCEEDED comes a step before the end."""
    ended = all(execution["status"] != "RUNNING" for execution in story["executions"])
    return story if story["lease"]["status"] == "SUCCEEDED" and ended else None


def assert_one_line_error(result: Result, code: int, *fragments: str) -> None:
    """The command failed with `code`, saying one line `longjobs: ...` that contains each fragment."""
    assert result.code == code, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("longjobs: "), lines[0]
    assert "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@dataclass(frozen=True)
class Processor:
    """The processor's resources on moto and clients on them."""

    sqs: Any
    dynamodb: Any
    stepfunctions: Any
    queue_url: str
    dlq_url: str
    table_name: str
    state_machine_arn: str

    def put_lease(self, message_id: str, *, status: LeaseStatus = LeaseStatus.ACTIVE, **fields: Any) -> Lease:
        now = fields.pop("now", 1_800_000_000.0)
        values: dict[str, Any] = {
            "message_id": message_id,
            "queue_url": self.queue_url,
            "receipt_handle": f"handle-{message_id}",
            "receive_count": 1,
            "received_at": now,
            "visible_until": now + 300,
            "renew_until": now + 3_600,
            "status": status,
            "renew_at": now + 200 if status is LeaseStatus.ACTIVE else None,
            "job_type": "wait",
        }
        values.update(fields)
        lease = Lease(**values)
        self.dynamodb.put_item(TableName=self.table_name, Item=lease_to_item(lease, shard=0))
        return lease

    def dead_letter(self, body: str = "{not json", **attributes: str) -> str:
        """A message in the DLQ; `attributes` as String message attributes (`ReceiveCount` as a Number)."""
        message_attributes = {
            name: {"DataType": "Number" if name == "ReceiveCount" else "String", "StringValue": value}
            for name, value in attributes.items()
        }
        return str(
            self.sqs.send_message(QueueUrl=self.dlq_url, MessageBody=body, MessageAttributes=message_attributes)[
                "MessageId"
            ]
        )

    def bodies(self, queue_url: str) -> list[str]:
        """Every message body of a queue, taking each (receive and delete)."""
        bodies: list[str] = []
        while True:
            got = self.sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=30)
            messages = got.get("Messages", [])
            if not messages:
                return bodies
            for message in messages:
                bodies.append(message["Body"])
                self.sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])


def create_processor(
    sqs: Any,
    dynamodb: Any,
    stepfunctions: Any,
    *,
    queue: str = "jobs",
    dlq: str = "jobs-dlq",
    table: str = "leases",
    state_machine: str = "long-jobs",
    published_by: str | None = None,
) -> Processor:
    """The processor's resources; `published_by`: the built-in job types published in the lease table as that
    deployment (the stack's custom resource, or the offline runtime at start) writes them."""
    fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "true"} if queue.endswith(".fifo") else {}
    dlq_url = sqs.create_queue(QueueName=dlq, Attributes=fifo)["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue_url = sqs.create_queue(
        QueueName=queue,
        Attributes={
            **fifo,
            "VisibilityTimeout": "30",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5}),
        },
    )["QueueUrl"]
    dynamodb.create_table(**table_definition(table))
    if published_by is not None:
        publish(dynamodb, table, JobCatalog(BUILTIN_TYPES), published_by)
    state_machine_arn = stepfunctions.create_state_machine(
        name=state_machine, definition=PASS_DEFINITION, roleArn=ROLE_ARN
    )["stateMachineArn"]
    return Processor(sqs, dynamodb, stepfunctions, queue_url, dlq_url, table, state_machine_arn)
