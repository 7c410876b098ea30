"""Finding the processor's queue, DLQ, lease table and state machine.

With `--stack NAME` they come from the stack's CloudFormation outputs (`infra/stack.py`); with
`--endpoint-url` they are the local service's fixed names (`longjobs/offline/emulator.py`). Explicit
`--queue-url`, `--dlq-url`, `--table` and `--state-machine-arn` win over both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from botocore.exceptions import ClientError

from longjobs.cli.clients import LOCAL_REGION
from longjobs.cli.errors import CliError
from longjobs.engine.settings import FIFO_SUFFIX, is_fifo_url

if TYPE_CHECKING:
    from mypy_boto3_cloudformation import CloudFormationClient
    from mypy_boto3_sqs import SQSClient

LOCAL_ORIGIN = "local service at"
"""How the answers of the local service (`--endpoint-url`) name where they come from, before its address."""

# The local service's names: the offline runtime creates these (a unit test keeps them equal).
LOCAL_QUEUE = "jobs"
LOCAL_DLQ = "jobs-dlq"
LOCAL_TABLE = "leases"
LOCAL_STATE_MACHINE = "long-jobs"

# The stack's outputs the command reads (infra/stack.py).
OUTPUT_QUEUE_URL = "QueueUrl"
OUTPUT_DLQ_URL = "DeadLetterQueueUrl"
OUTPUT_TABLE = "LeaseTableName"
OUTPUT_METRICS_SERVICE = "MetricsService"
DEFAULT_METRICS_SERVICE = "long-jobs"
"""The `service` of a stack without the `MetricsService` output, and of the local service."""
OUTPUT_STATE_MACHINE = "StateMachineArn"
OUTPUT_CURATED_BUCKET = "CuratedBucketName"
OUTPUT_QUARANTINE_BUCKET = "QuarantineBucketName"

START_LOCAL_SERVICE = "longjobs-offline serve"

QUEUE_MISSING_CODES = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})


@dataclass(frozen=True)
class Overrides:
    queue_url: str | None = None
    dlq_url: str | None = None
    table_name: str | None = None
    state_machine_arn: str | None = None


@dataclass(frozen=True)
class Resources:
    """What the command works on, and where it came from (for messages)."""

    queue_url: str
    dlq_url: str
    table_name: str
    state_machine_arn: str
    origin: str
    curated_uri: str | None = None
    quarantine_uri: str | None = None
    metrics_service: str | None = DEFAULT_METRICS_SERVICE
    """The `service` dimension of the processor's metrics: the stack's `MetricsService` output (None when
    the stack has none: `status` then reads `DEFAULT_METRICS_SERVICE` and says so)."""

    def with_overrides(self, overrides: Overrides) -> Resources:
        return replace(
            self,
            queue_url=overrides.queue_url or self.queue_url,
            dlq_url=overrides.dlq_url or self.dlq_url,
            table_name=overrides.table_name or self.table_name,
            state_machine_arn=overrides.state_machine_arn or self.state_machine_arn,
        )


def stack_outputs(cloudformation: CloudFormationClient, stack_name: str) -> tuple[str, dict[str, str]]:
    """The stack's status and outputs by key. `CliError` when there is no such stack."""
    try:
        stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if error.get("Code") == "ValidationError" and "does not exist" in error.get("Message", ""):
            region = cloudformation.meta.region_name
            raise CliError(f"no stack {stack_name!r} in {region}") from None
        raise
    stack = stacks[0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", []) if "OutputKey" in o}
    return stack["StackStatus"], outputs


def from_stack(cloudformation: CloudFormationClient, stack_name: str, overrides: Overrides | None = None) -> Resources:
    """The resources named by a deployed stack's outputs (overrides fill or replace them)."""
    overrides = overrides or Overrides()
    status, outputs = stack_outputs(cloudformation, stack_name)
    given = {
        OUTPUT_QUEUE_URL: overrides.queue_url,
        OUTPUT_DLQ_URL: overrides.dlq_url,
        OUTPUT_TABLE: overrides.table_name,
        OUTPUT_STATE_MACHINE: overrides.state_machine_arn,
    }
    values = {key: given[key] or outputs.get(key) for key in given}
    missing = [key for key, value in values.items() if not value]
    if missing:
        raise CliError(
            f"stack {stack_name!r} ({status}) has no output {', '.join(missing)}: "
            "is it a sqs-long-jobs stack, and is its deployment complete? A stack of your own declares "
            "them beside its LongJobProcessor (docs/install.md), or pass --queue-url, --dlq-url, --table "
            "and --state-machine-arn"
        )
    curated = outputs.get(OUTPUT_CURATED_BUCKET)
    quarantine = outputs.get(OUTPUT_QUARANTINE_BUCKET)
    return Resources(
        queue_url=str(values[OUTPUT_QUEUE_URL]),
        dlq_url=str(values[OUTPUT_DLQ_URL]),
        table_name=str(values[OUTPUT_TABLE]),
        state_machine_arn=str(values[OUTPUT_STATE_MACHINE]),
        origin=f"stack {stack_name}",
        curated_uri=f"s3://{curated}/" if curated else None,
        quarantine_uri=f"s3://{quarantine}/" if quarantine else None,
        metrics_service=outputs.get(OUTPUT_METRICS_SERVICE),
    )


def _queue_url(sqs: SQSClient, name: str, endpoint: str, region: str, *, fifo_first: bool = False) -> str:
    """The URL of the local service's queue `name`, or of its FIFO twin (`name.fifo`: a service started with
    `{"fifo": true}` has FIFO queues), the FIFO one looked for first when `fifo_first`."""
    names = [name + FIFO_SUFFIX, name] if fifo_first else [name, name + FIFO_SUFFIX]
    for candidate in names:
        try:
            return sqs.get_queue_url(QueueName=candidate)["QueueUrl"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in QUEUE_MISSING_CODES:
                raise
    if region != LOCAL_REGION:  # the service is up, and keeps its queues in one region
        raise CliError(
            f"the local service at {endpoint} has no queue {' or '.join(map(repr, names))} in {region}: its "
            f"resources are in {LOCAL_REGION}; leave --region out, or give --region {LOCAL_REGION}"
        )
    raise CliError(
        f"the local service at {endpoint} has no queue {' or '.join(map(repr, names))}: is the offline runtime "
        f"running ({START_LOCAL_SERVICE})?"
    )


def account_of(queue_url: str) -> str:
    """The account in a queue URL (`.../<account>/<name>`, on AWS and on moto alike)."""
    parts = [part for part in urlparse(queue_url).path.split("/") if part]
    if len(parts) != 2:
        raise CliError(f"not a queue URL: {queue_url!r}")
    return parts[0]


def local(sqs: SQSClient, endpoint: str, region: str, overrides: Overrides | None = None) -> Resources:
    """The local service's resources, by the offline runtime's names (overrides replace them)."""
    overrides = overrides or Overrides()
    queue_url = overrides.queue_url or _queue_url(sqs, LOCAL_QUEUE, endpoint, region)
    dlq_url = overrides.dlq_url or _queue_url(sqs, LOCAL_DLQ, endpoint, region, fifo_first=is_fifo_url(queue_url))
    account = account_of(queue_url)
    state_machine_arn = f"arn:aws:states:{region}:{account}:stateMachine:{LOCAL_STATE_MACHINE}"
    return Resources(
        queue_url=queue_url,
        dlq_url=dlq_url,
        table_name=LOCAL_TABLE,
        state_machine_arn=state_machine_arn,
        origin=f"{LOCAL_ORIGIN} {endpoint}",
    ).with_overrides(overrides)
