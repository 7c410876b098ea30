"""`leases` and `lease ID`: the lease table, newest first, and one lease's whole story."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from longjobs.cli.errors import CliError, UsageError
from longjobs.engine.cost import AttemptUsage, attempt_usage
from longjobs.engine.execution import JOB_FAILED_CAUSE, execution_arn, execution_name
from longjobs.engine.jobs import JobCatalog, JobType
from longjobs.engine.lease import Lease, LeaseStatus, is_lease_key
from longjobs.engine.lease.codec import item_to_lease
from longjobs.engine.lease.schema import PARTITION_KEY
from longjobs.engine.watcher.models import run_outcome

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_stepfunctions import SFNClient

STATUSES = tuple(status.value for status in LeaseStatus)


def list_leases(
    dynamodb: DynamoDBClient, table_name: str, *, status: str | None = None, limit: int | None = None
) -> list[Lease]:
    """Leases newest first (by received-at). A Scan of the whole table: sorting needs every item."""
    if status is not None and status not in STATUSES:
        raise UsageError(f"--status {status}: expected one of {', '.join(STATUSES)}")
    if limit is not None and limit < 1:
        raise UsageError(f"--limit {limit}: expected a positive number")
    kwargs: dict[str, Any] = {"TableName": table_name}
    if status is not None:
        kwargs["FilterExpression"] = "#status = :status"
        kwargs["ExpressionAttributeNames"] = {"#status": "status"}
        kwargs["ExpressionAttributeValues"] = {":status": {"S": status}}
    leases = [
        item_to_lease(item)
        for page in dynamodb.get_paginator("scan").paginate(**kwargs)
        for item in page.get("Items", [])
        if is_lease_key(item[PARTITION_KEY]["S"])  # job locks and the published catalog live there too
    ]
    leases.sort(key=lambda lease: (lease.received_at, lease.message_id), reverse=True)
    return leases if limit is None else leases[:limit]


@dataclass(frozen=True)
class Execution:
    """One attempt's Step Functions execution."""

    name: str
    attempt: int
    arn: str
    status: str
    started_at: datetime | None
    stopped_at: datetime | None
    error: str | None
    cause: str | None
    output: str | None = None
    usage: AttemptUsage | None = None  # what the attempt cost, or so far while it runs (job types known)


@dataclass(frozen=True)
class LeaseStory:
    lease: Lease
    executions: list[Execution] = field(default_factory=list)


def get_lease(dynamodb: DynamoDBClient, table_name: str, message_id: str) -> Lease:
    """The message's lease. `CliError` when the table has none: also for the key of an item that is not a
    lease (a job lock, a slot, the published job types), which the lease table holds too."""
    if not is_lease_key(message_id):
        raise CliError(f"no lease for message {message_id}")
    item = dynamodb.get_item(TableName=table_name, Key={PARTITION_KEY: {"S": message_id}}, ConsistentRead=True).get(
        "Item"
    )
    if not item:
        raise CliError(f"no lease for message {message_id}")
    return item_to_lease(item)


def attempts(
    stepfunctions: SFNClient,
    state_machine_arn: str,
    lease: Lease,
    job_type: JobType | None = None,
    now: float | None = None,
) -> list[Execution]:
    """The executions named `<message id>-<n>` for n in 1..receive count (an attempt is named after the
    receive that started it); attempts that never started an execution are left out. With the lease's
    `job_type`, each is priced (`longjobs.engine.cost`): from its start to its stop, or to `now`."""
    now = time.time() if now is None else now
    # A failed attempt's execution names no cause of its own (`JOB_FAILED_CAUSE` points at the lease's
    # last_error, which the message's next receive clears): its lease's record of the attempt has it.
    recorded = {ended.execution: ended.error for ended in lease.history_with_this() if ended.error is not None}
    found = []
    for attempt in range(1, lease.receive_count + 1):
        name = execution_name(lease.message_id, attempt)
        arn = execution_arn(state_machine_arn, name)
        try:
            described = stepfunctions.describe_execution(executionArn=arn)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ExecutionDoesNotExist":
                continue
            raise
        started, stopped = described.get("startDate"), described.get("stopDate")
        usage = None
        if job_type is not None and started is not None:
            end = stopped.timestamp() if stopped is not None else now
            outcome = run_outcome(described.get("output")) if described["status"] == "SUCCEEDED" else None
            usage = attempt_usage(job_type, end - started.timestamp(), outcome)
        error, cause = described.get("error"), described.get("cause")
        if cause == JOB_FAILED_CAUSE and (record := recorded.get(name)) is not None and record.error == error:
            cause = record.cause
        found.append(
            Execution(
                name=name,
                attempt=attempt,
                arn=arn,
                status=described["status"],
                started_at=started,
                stopped_at=stopped,
                error=error,
                cause=cause,
                output=described.get("output"),
                usage=usage,
            )
        )
    return found


def lease_story(
    dynamodb: DynamoDBClient,
    stepfunctions: SFNClient,
    table_name: str,
    state_machine_arn: str,
    message_id: str,
    job_types: JobCatalog | None = None,
) -> LeaseStory:
    """The lease and its executions, each priced when `job_types` are known. `CliError` when the table has
    no lease for the message."""
    lease = get_lease(dynamodb, table_name, message_id)
    job_type = job_types.get(lease.job_type) if job_types is not None and lease.job_type else None
    return LeaseStory(lease=lease, executions=attempts(stepfunctions, state_machine_arn, lease, job_type))
