"""The processor's local resources, created once, by one function, for every local use.

`create_resources` makes the jobs queue with its DLQ and redrive (both FIFO, named `.fifo`, when the
settings say `fifo`, as the stack makes them: see `longjobs.offline.fifo`; the redrive is a backstop:
`maxReceiveCount` is `Settings.redrive_max_receives`, far above what attempts and waiting for a slot
use), a waiting queue per job type (`jobs-waiting-<type>`, as the stack's: the jobs queue's VT,
retention and redrive to the DLQ, no event source mapping; none on FIFO queues, which have no admission),
passed to the functions as the `waiting_queues` setting, the Spark token queue, the lease table and
the state machine, from the same `Settings` as the functions and the same workflow builder as the stack.
Settings that name their own `waiting_queues` keep them (none is created). It takes ordinary boto3
clients, so the offline runtime (moto's server: `run`, `demo`, `chaos`, `serve`) and the functional
tests (moto in-process) build exactly the same things.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog
from longjobs.engine.lease import table_definition
from longjobs.engine.runs import RunPlace, place_setting
from longjobs.engine.settings import FIFO_SUFFIX, MESSAGE_MAX_BYTES, SQS_MAX_RETENTION_S, Settings
from longjobs.offline.fifo import FIFO_ATTRIBUTES, keep_group_order
from longjobs.offline.stops import keep_stops

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.literals import QueueAttributeNameType
    from mypy_boto3_stepfunctions import SFNClient

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"
QUEUE = "jobs"
DLQ = "jobs-dlq"
TOKEN_QUEUE = "spark-tokens"
WAITING_QUEUE_PREFIX = "jobs-waiting-"
"""A job type's waiting queue is named this prefix and the type's name."""
TABLE = "leases"
STATE_MACHINE = "long-jobs"
DEFAULT_QUEUE_VT_S = 30
"""The jobs queue's VT when no `visibility_timeout_s` is set (SQS's own default)."""
SPARK_TASK_TIMEOUT_S = 6 * 3_600
"""The Spark step's whole-job limit offline, as the stack's default Glue run timeout, for a type that sets no
`glue.timeout_minutes` of its own."""
QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{QUEUE}"
STATE_MACHINE_ARN = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{STATE_MACHINE}"
RUNTIME_SETTINGS = frozenset({"table_name", "queue_url", "dlq_url", "state_machine_arn", "waiting_queues"})
"""Settings the offline runtime fills in from the resources it creates (`create_resources`): given ones
are refused, never silently replaced."""


@dataclass(frozen=True)
class Resources:
    """What was created, and the settings the functions run with (completed with the names)."""

    queue_url: str
    queue_arn: str
    queue_visibility_timeout_s: int
    dlq_url: str
    token_queue_url: str
    table_name: str
    state_machine_arn: str
    settings: Settings
    queue_name: str = QUEUE
    dlq_name: str = DLQ
    waiting_queue_urls: Mapping[str, str] = field(default_factory=dict)
    """The waiting queues created here: job type -> URL (also in `settings.waiting_queues`)."""

    @property
    def waiting_queue_names(self) -> dict[str, str]:
        """Job type -> its waiting queue's name (the emulator's own view reads queues by name)."""
        return {job_type: url.rsplit("/", 1)[-1] for job_type, url in self.waiting_queue_urls.items()}


def create_resources(
    sqs: SQSClient,
    dynamodb: DynamoDBClient,
    stepfunctions: SFNClient,
    settings: Settings,
    *,
    spark_heartbeat_s: int,
    catalog: JobCatalog | None = None,
    table_stream: bool = False,
    queue_visibility_timeout_s: int | None = None,
) -> Resources:
    """Queue + DLQ with redrive, a waiting queue per type of `catalog` (unless the settings name
    their own), token queue, lease table (`table_stream`: with the stream an observer reads), state
    machine (a branch per job type of `catalog`, the built-ins when None). The queue's VT is
    `queue_visibility_timeout_s`, else the settings' `visibility_timeout_s`, else SQS's 30 s."""
    # FIFO: both queues FIFO, named `.fifo`, and moto's receive made to keep a group's order (longjobs.offline.fifo).
    queue_name, dlq_name = QUEUE, DLQ
    fifo_attributes: dict[QueueAttributeNameType, str] = {}
    if settings.fifo:
        keep_group_order()
        queue_name, dlq_name, fifo_attributes = QUEUE + FIFO_SUFFIX, DLQ + FIFO_SUFFIX, FIFO_ATTRIBUTES
    size: dict[QueueAttributeNameType, str] = {"MaximumMessageSize": str(MESSAGE_MAX_BYTES)}  # as the stack's
    retention: dict[QueueAttributeNameType, str] = {
        "MessageRetentionPeriod": str(settings.queue_retention_s),
        **size,
    }
    dlq_retention: dict[QueueAttributeNameType, str] = {"MessageRetentionPeriod": str(SQS_MAX_RETENTION_S), **size}
    dlq_url = sqs.create_queue(QueueName=dlq_name, Attributes={**fifo_attributes, **dlq_retention})["QueueUrl"]
    dlq_arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{dlq_name}"
    queue_vt = queue_visibility_timeout_s or settings.visibility_timeout_s or DEFAULT_QUEUE_VT_S
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": settings.redrive_receives})
    queue_url = sqs.create_queue(
        QueueName=queue_name,
        Attributes={**fifo_attributes, **retention, "VisibilityTimeout": str(queue_vt), "RedrivePolicy": redrive},
    )["QueueUrl"]
    # The stack's waiting queues (`JobQueues`): one per type, the jobs queue's VT, retention and
    # redrive; only the functions receive from them. FIFO has no admission, so none.
    types = list(catalog or JobCatalog(BUILTIN_TYPES))
    waiting: dict[str, str] = {}
    if not settings.fifo and not settings.waiting_queues:
        waiting = {
            job_type.name: sqs.create_queue(
                QueueName=WAITING_QUEUE_PREFIX + job_type.name,
                Attributes={**retention, "VisibilityTimeout": str(queue_vt), "RedrivePolicy": redrive},
            )["QueueUrl"]
            for job_type in types
        }
    token_queue_url = sqs.create_queue(QueueName=TOKEN_QUEUE)["QueueUrl"]
    stream: dict[str, Any] = (
        {"StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}} if table_stream else {}
    )
    dynamodb.create_table(**table_definition(TABLE), **stream)
    # moto's engine made to end a stopped execution ABORTED, as Step Functions does (longjobs.offline.stops).
    keep_stops()
    state_machine_arn = stepfunctions.create_state_machine(
        name=STATE_MACHINE,
        definition=workflow_definition(spark_heartbeat_s, catalog.to_json() if catalog else None),
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/{STATE_MACHINE}",
    )["stateMachineArn"]
    # Every pyspark type runs on the local Spark workers: a run ends within the step's heartbeat timeout
    # of its task's end (`longjobs.offline.worker`), which a job's next attempt waits out.
    workers = {
        t.name: RunPlace("worker", heartbeat_s=spark_heartbeat_s)
        for t in (catalog or JobCatalog(BUILTIN_TYPES))
        if t.runner == "pyspark"
    }
    completed = Settings.load(
        {
            **settings.model_dump(exclude_unset=True),
            "table_name": TABLE,
            "queue_url": queue_url,
            "dlq_url": dlq_url,
            "state_machine_arn": state_machine_arn,
            **({"waiting_queues": json.dumps(dict(sorted(waiting.items())))} if waiting else {}),
            **({"job_runs": place_setting(workers)} if workers and not settings.job_runs else {}),
        }
    )
    return Resources(
        queue_url=queue_url,
        queue_arn=f"arn:aws:sqs:{REGION}:{ACCOUNT}:{queue_name}",
        queue_visibility_timeout_s=queue_vt,
        dlq_url=dlq_url,
        token_queue_url=token_queue_url,
        table_name=TABLE,
        state_machine_arn=state_machine_arn,
        settings=completed,
        queue_name=queue_name,
        dlq_name=dlq_name,
        waiting_queue_urls=waiting,
    )


@cache
def workflow_definition(
    spark_heartbeat_s: int, catalog_json: str | None = None, *, emr_serverless: bool = False
) -> str:
    """The stack's workflow, rendered with the pyspark steps on the token queue and a branch per job type
    of the catalog (the built-ins when None; the CDK loads in seconds, so each rendering is kept).
    `emr_serverless`: an emr_serverless type's step is the cloud's `.sync` run instead (the simulation
    answers it; moto's engine cannot), on `EMR_APPLICATION_ID` with `EMR_JOB_ROLE_ARN`."""
    import aws_cdk as cdk

    from longjobs.construct.emr_serverless import EmrRun, emr_serverless_step
    from longjobs.construct.workflow import by_platform, render_definition, token_queue_pyspark_step
    from longjobs.engine.jobs import BUILTIN_TYPES, load_catalog

    job_types = list(load_catalog(json.loads(catalog_json))) if catalog_json else list(BUILTIN_TYPES)
    token_step = token_queue_pyspark_step(
        queue_arn=f"arn:aws:sqs:{REGION}:{ACCOUNT}:{TOKEN_QUEUE}",
        queue_url=f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{TOKEN_QUEUE}",
        heartbeat=cdk.Duration.seconds(spark_heartbeat_s),
        timeout=cdk.Duration.seconds(SPARK_TASK_TIMEOUT_S),
    )
    runs = {
        job_type.name: EmrRun(
            application_id=EMR_APPLICATION_ID,
            execution_role_arn=EMR_JOB_ROLE_ARN,
            entry_point="s3://assets/glue_entry.py",
            py_files=("s3://assets/pipeline.zip", f"s3://assets/{job_type.name}.zip"),
        )
        for job_type in job_types
        if job_type.runner == "pyspark" and job_type.platform == "emr_serverless"
    }
    steps = {"glue": token_step, "emr_serverless": emr_serverless_step(runs) if emr_serverless else token_step}
    return render_definition(
        table_name=TABLE,
        queue_arns=[QUEUE_ARN],
        job_types=job_types,
        pyspark_step=by_platform(steps),
        region=REGION,
        account=ACCOUNT,
    )


EMR_APPLICATION_ID = "00simulated"
EMR_JOB_ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/emr-serverless-job"
"""What the simulation's rendering names for EMR Serverless (the application and role are the stack's)."""
