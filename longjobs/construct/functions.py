"""The three Lambda functions, each with its own least-privilege role, and what invokes them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as events_targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as lambda_destinations
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as scheduler_targets
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from longjobs.construct.assets import staged_package
from longjobs.construct.compliance import log_group_rules, suppress_checkov, suppress_guard
from longjobs.construct.config import StackConfig, Tracing
from longjobs.construct.constants import (
    DLQ_RETENTION,
    EXTENDER_PERIOD,
    EXTENDER_RESERVED_CONCURRENCY,
    EXTENDER_TIMEOUT,
    HANDLERS,
    JOB_TYPES_FILE,
    LAMBDA_ARCHITECTURE,
    LAMBDA_RUNTIME,
    LOG_RETENTION,
    METRICS_NAMESPACE,
    OTEL_WRAPPER,
    POWERTOOLS_LAYER_PARAMETER,
    SERVICE_NAME,
    WATCHER_RESERVED_CONCURRENCY,
    WATCHER_TIMEOUT,
)
from longjobs.construct.keys import key_user_statement
from longjobs.construct.nag import acknowledge, rendered
from longjobs.construct.queues import queue_encryption
from longjobs.engine.jobs import JobCatalog
from longjobs.engine.lease.schema import DUE_INDEX, RECONCILE_INDEX, WAITING_INDEX
from longjobs.engine.runs import RunPlace, encode_places

WATCHED_STATUSES = ["FAILED", "TIMED_OUT", "ABORTED", "SUCCEEDED"]
"""Every end of an execution: the watcher settles those the workflow's own failure path may not have
(DESIGN section 2, watcher), admits a waiting message into the slot an end freed, and prices each
attempt (`longjobs.engine.cost`)."""


def tracing_environment(tracing: Tracing, service: str = SERVICE_NAME) -> dict[str, str]:
    """The functions' environment for a `tracing` setting. Only xray-sdk lets Powertools' Tracer import the
    X-Ray SDK (a third of a cold start, and in maintenance until its end of support); opentelemetry
    runs the functions under the ADOT layer's wrapper, which instruments boto3's calls."""
    environment: dict[str, str] = {} if tracing == "xray-sdk" else {"POWERTOOLS_TRACE_DISABLED": "true"}
    if tracing == "opentelemetry":
        # TRACING tells the watcher to record a span per job (longjobs.engine.watcher.job_span).
        environment |= {"AWS_LAMBDA_EXEC_WRAPPER": OTEL_WRAPPER, "OTEL_SERVICE_NAME": service, "TRACING": tracing}
    return environment


@dataclass(frozen=True)
class Resources:
    """What the functions work on."""

    queue: sqs.IQueue
    dlq: sqs.IQueue
    table: dynamodb.ITable
    state_machine: sfn.StateMachine
    curated_uri: str
    quarantine_uri: str
    raw_uri: str
    metrics_service: str
    """The `service` the functions publish their metrics and logs under (`POWERTOOLS_SERVICE_NAME`)."""
    waiting: Mapping[str, sqs.IQueue] = field(default_factory=dict)
    """Each limited job type's waiting queue (admission)."""
    key: kms.IKey | None = None
    """The customer-managed key (the `kms_key` setting): the functions' log groups, environments and the
    watcher's failure queue use it, and each role may use it for the encrypted queues, table and executions."""
    log_group_prefix: str | None = None
    """With `key`: the functions' log groups are named `<prefix>/<function>`, which the key policy names."""
    job_runs: Mapping[str, RunPlace] = field(default_factory=dict)
    """Where each pyspark type's runs are (`longjobs.engine.runs`): a job's next attempt waits for its
    previous run to end, and asks one still running to stop."""
    job_run_arns: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """The IAM resources of those runs by action: `emr-serverless:GetJobRun`, `emr-serverless:ListJobRuns`,
    `emr-serverless:CancelJobRun`, `glue:GetJobRuns`, `glue:BatchStopJobRun`. With EMR Serverless's, the
    functions may also read this state machine's execution histories (`states:GetExecutionHistory`)."""


LIVE_ALIAS = "live"
"""The alias that what invokes a function invokes with `snapstart` (its current published version)."""


class LongJobFunctions(Construct):
    """Receiver (event source mapping on the jobs queue), extender (every minute, one at a time) and
    watcher (this state machine's failed, timed-out and aborted executions).

    Code: the installed package's `engine/` as a plain asset (no Docker, no dependencies: boto3 is in
    the runtime, Powertools, pydantic and fastjsonschema in the Powertools layer), with the job catalog
    written into it as `engine/job_types.json` (see `staged_functions`). Each function has its own
    role with the actions its code calls, on its resources only, and writes to its own log group.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StackConfig,
        resources: Resources,
        catalog: JobCatalog,
    ) -> None:
        super().__init__(scope, construct_id)
        infra = config.infra
        res = resources
        self._retention = LOG_RETENTION[infra.log_retention_days]
        self._retention_days = infra.log_retention_days
        self._tracing = infra.tracing
        self._service = res.metrics_service
        self._snapstart = infra.snapstart
        self._key = res.key
        self._log_group_prefix = res.log_group_prefix
        self._code = lambda_.Code.from_asset(str(staged_functions(catalog)))
        self._layer = lambda_.LayerVersion.from_layer_version_arn(
            self,
            "Powertools",
            infra.powertools_layer_arn
            or cdk.CfnDynamicReference(cdk.CfnDynamicReferenceService.SSM, POWERTOOLS_LAYER_PARAMETER).to_string(),
        )
        self._layers = [self._layer]
        if infra.tracing == "opentelemetry" and infra.otel_layer_arn:
            self._layers.append(lambda_.LayerVersion.from_layer_version_arn(self, "Otel", infra.otel_layer_arn))
        engine_env = config.engine_environment()
        limited = bool(catalog.limited()) and not config.engine.fifo  # FIFO: no admission (the receiver's rule)
        # Every type of a standard queue has a waiting queue (`JobQueues`): a limit removed leaves messages
        # there, which the extender's pass starts and the receiver may park again (a redelivered original).
        waits = bool(res.waiting)
        waiting_arns = [queue.queue_arn for queue in res.waiting.values()]
        if res.waiting:
            engine_env["WAITING_QUEUES"] = cdk.Stack.of(self).to_json_string(
                {name: queue.queue_url for name, queue in sorted(res.waiting.items())}
            )
        if res.job_runs:
            engine_env["JOB_RUNS"] = cdk.Stack.of(self).to_json_string(encode_places(res.job_runs))
        # Executions of this state machine: `...:execution:<state machine name>:<execution name>`.
        execution_arns = cdk.Stack.of(self).format_arn(
            service="states",
            resource="execution",
            resource_name=f"{res.state_machine.state_machine_name}:*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        # A job's next attempt asks its runner whether the previous run ended, and stops one still running:
        # the receiver, and the extender and the watcher when admission runs a receiver in them. An EMR
        # Serverless run is read by the id its execution's history holds (`longjobs.engine.runs`).
        job_run_statements = [_allow(action, on=list(arns)) for action, arns in sorted(res.job_run_arns.items())]
        if "emr-serverless:GetJobRun" in res.job_run_arns:
            job_run_statements.append(_allow("states:GetExecutionHistory", on=[execution_arns]))
        # What an admission pass calls, in the extender and the watcher (a receiver of their own).
        admitting = self._admission_statements(res, execution_arns, waiting_arns) + job_run_statements

        self.receiver = self._function(
            "Receiver",
            handler=HANDLERS["receiver"],
            timeout=cdk.Duration.seconds(infra.receiver_timeout_s),
            memory_mb=infra.lambda_memory_mb,
            environment={
                **engine_env,
                "TABLE_NAME": res.table.table_name,
                "QUEUE_URL": res.queue.queue_url,
                "DLQ_URL": res.dlq.queue_url,
                "STATE_MACHINE_ARN": res.state_machine.state_machine_arn,
                "CURATED_URI": res.curated_uri,
                "QUARANTINE_URI": res.quarantine_uri,
                "RAW_URI": res.raw_uri,
            },
            statements=[
                # The event source mapping receives and deletes; the code hides, re-sends S3 fan-outs and
                # messages waiting for their job id, deletes settled redeliveries and reads the queue's VT
                # (fixed-VT policies). Job locks are items of the lease table.
                _allow(
                    "sqs:ReceiveMessage",
                    "sqs:DeleteMessage",
                    "sqs:GetQueueAttributes",
                    "sqs:ChangeMessageVisibility",
                    "sqs:SendMessage",
                    on=[res.queue.queue_arn],
                ),
                _allow("sqs:SendMessage", on=[res.dlq.queue_arn]),
                # ConditionCheckItem: an attempt taking its holds again checks its lease in the transaction
                # (`LeaseStore.unchanged_request`); a transaction needs each of its actions' item actions.
                _allow(
                    "dynamodb:GetItem",
                    "dynamodb:PutItem",
                    "dynamodb:UpdateItem",
                    "dynamodb:ConditionCheckItem",
                    on=[res.table.table_arn],
                ),
                _allow("states:StartExecution", on=[res.state_machine.state_machine_arn]),
                _allow("states:DescribeExecution", on=[execution_arns]),
                *job_run_statements,
                # Admission: parks in the waiting queues, counts what waits, reads a type's slots at once.
                *(
                    [
                        # ChangeMessageVisibility: it admits waiting messages in place, unparked ones too;
                        # ReceiveMessage and DeleteMessage: a new arrival that finds a slot free while messages
                        # are parked unparks them first (`admission.line.claim`), and deletes those it handled
                        _allow(
                            "sqs:SendMessage",
                            "sqs:GetQueueAttributes",
                            "sqs:ChangeMessageVisibility",
                            "sqs:ReceiveMessage",
                            "sqs:DeleteMessage",
                            on=waiting_arns,
                        ),
                        _allow("dynamodb:BatchGetItem", on=[res.table.table_arn]),
                        _allow("dynamodb:Query", on=[f"{res.table.table_arn}/index/{WAITING_INDEX}"]),
                    ]
                    if waits
                    else []
                ),
            ],
        )
        self.targets: dict[str, lambda_.IFunction] = {}
        """What invokes each function invokes this: the function, or with `snapstart` its alias `live`."""
        self.target(self.receiver).add_event_source(
            event_sources.SqsEventSource(
                res.queue,
                batch_size=config.mapping_batch_size,  # no batching window: a batch never waits to fill
                report_batch_item_failures=True,
                max_concurrency=infra.receiver_max_concurrency,
            )
        )

        self.extender = self._function(
            "Extender",
            handler=HANDLERS["extender"],
            timeout=EXTENDER_TIMEOUT,
            memory_mb=infra.lambda_memory_mb,
            environment={
                **engine_env,
                "TABLE_NAME": res.table.table_name,
                "QUEUE_URL": res.queue.queue_url,
                # reconciliation lists the state machine's running executions (and admission starts them)
                "STATE_MACHINE_ARN": res.state_machine.state_machine_arn,
                # a cancel cut short after its mark is finished by the extender: its DLQ copy is sent here
                "DLQ_URL": res.dlq.queue_url,
            },
            # With no reservation a late run may overlap the next: they race on the same leases, every write
            # conditional (the simulation runs half its seeds so: `Workload.extender_reserved`).
            reserved_concurrency=EXTENDER_RESERVED_CONCURRENCY if infra.reserve_concurrency else None,
            statements=[
                _allow(
                    "sqs:ChangeMessageVisibility",
                    "sqs:DeleteMessage",
                    "sqs:GetQueueAttributes",
                    on=[res.queue.queue_arn],
                ),
                _allow(
                    "dynamodb:Query",
                    on=[f"{res.table.table_arn}/index/{DUE_INDEX}", f"{res.table.table_arn}/index/{RECONCILE_INDEX}"],
                ),
                # GetItem: leases are read again before acting on what an index (eventually consistent) showed.
                _allow(
                    "dynamodb:GetItem", "dynamodb:UpdateItem", on=[res.table.table_arn]
                ),  # UpdateItem: also transactions
                # StopExecution: a lease that can no longer be held has its execution stopped first (invariant 8).
                _allow("states:DescribeExecution", "states:StopExecution", on=[execution_arns]),
                # A cancel the extender finishes (`longjobs.engine.cancel.finish`) sends its message to the DLQ.
                _allow("sqs:SendMessage", on=[res.dlq.queue_arn]),
                # Reconciliation: one list of the running executions vouches for their leases (on the
                # state machine, not its executions: the service authorization reference's resource for it).
                _allow("states:ListExecutions", on=[res.state_machine.state_machine_arn]),
                # Admission's pass: the limited types, and the waiting queues of the others, which a removed
                # limit may have left messages in (`longjobs.engine.admission.admit.unpark_unlimited`).
                *(admitting if waits else []),
            ],
        )
        # A run that could not start within two periods (throttled behind a long sub-minute run) is
        # dropped rather than run late: the next scheduled one is already on its way.
        self.target(self.extender).configure_async_invoke(
            max_event_age=cdk.Duration.seconds(2 * EXTENDER_PERIOD.to_seconds()), retry_attempts=0
        )
        # The schedule's own role, in this scope (CDK's default is one shared by the whole stack).
        schedule_role = iam.Role(
            self,
            "ExtenderScheduleRole",
            assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com"),
            description="The extender's schedule: invoke the extender, nothing else",
        )
        self.schedule = scheduler.Schedule(
            self,
            "ExtenderSchedule",
            schedule=scheduler.ScheduleExpression.rate(EXTENDER_PERIOD),
            target=scheduler_targets.LambdaInvoke(
                self.target(self.extender),
                role=schedule_role,
                retry_attempts=0,  # a missed run is covered by the next one a minute later
                max_event_age=EXTENDER_PERIOD,
            ),
            description="Renew the visibility of due leases (the extender's floor is one minute)",
        )

        self.watcher = self._function(
            "Watcher",
            handler=HANDLERS["watcher"],
            timeout=WATCHER_TIMEOUT,
            memory_mb=infra.lambda_memory_mb,
            environment={
                **engine_env,
                "TABLE_NAME": res.table.table_name,
                "STATE_MACHINE_ARN": res.state_machine.state_machine_arn,
                **({"QUEUE_URL": res.queue.queue_url, "DLQ_URL": res.dlq.queue_url} if limited else {}),
            },
            statements=[
                _allow("sqs:ChangeMessageVisibility", on=[res.queue.queue_arn]),
                _allow("dynamodb:GetItem", "dynamodb:UpdateItem", on=[res.table.table_arn]),
                *(admitting if limited else []),
            ],
            reserved_concurrency=WATCHER_RESERVED_CONCURRENCY if infra.reserve_concurrency else None,
        )
        # The extender is updated after the functions that write leases: when its new code first runs, no
        # invocation of their replaced code starts any more, so a lease on a shard of a larger previous
        # `shards` can only come from one still running, within Lambda's longest timeout, which the new
        # extender's legacy-shard window outlasts (`longjobs.engine.lease.legacy`).
        self.extender.node.add_dependency(self.receiver, self.watcher)
        # An event the watcher failed on after Lambda's retries lands here, with its error; the extender's
        # reconciliation settles that execution's lease anyway, so this is a record, not the only path.
        self.watcher_failures = sqs.Queue(
            self,
            "WatcherFailures",
            **queue_encryption(self._key),
            enforce_ssl=True,
            retention_period=DLQ_RETENTION,  # a record, kept as long as the DLQ's
            redrive_allow_policy=sqs.RedriveAllowPolicy(redrive_permission=sqs.RedrivePermission.ALLOW_ALL),
        )
        acknowledge(self.watcher_failures, "AwsSolutions-SQS3", "It is the watcher's on-failure destination itself.")
        if self._key is None:
            suppress_checkov(self.watcher_failures, "CKV_AWS_27")
        else:
            acknowledge(
                self.node.find_child("WatcherRole"),
                "AwsSolutions-IAM5",
                "CDK's send grant to the watcher's on-failure queue, encrypted with the customer-managed key: "
                "kms:GenerateDataKey*/ReEncrypt* on that key only.",
                findings=("Action::kms:GenerateDataKey*", "Action::kms:ReEncrypt*"),
            )
        self.target(self.watcher).configure_async_invoke(
            on_failure=lambda_destinations.SqsDestination(self.watcher_failures), retry_attempts=2
        )
        self.watcher_rule = events.Rule(
            self,
            "ExecutionEnded",
            description="Every end of this state machine's executions",
            event_pattern=events.EventPattern(
                source=["aws.states"],
                detail_type=["Step Functions Execution Status Change"],
                detail={
                    "status": WATCHED_STATUSES,
                    "stateMachineArn": [res.state_machine.state_machine_arn],
                },
            ),
            targets=[
                events_targets.LambdaFunction(
                    self.target(self.watcher), retry_attempts=8, max_event_age=cdk.Duration.hours(2)
                )
            ],
        )

        acknowledge(
            self,
            "AwsSolutions-IAM5",
            "Executions are named per message and attempt (<message id>-<receive count>); the pattern covers "
            "this state machine's executions only.",
            findings=("Resource::" + rendered(self, execution_arns),),
        )
        cancellable = res.job_run_arns.get("emr-serverless:CancelJobRun", ())
        if cancellable:
            acknowledge(
                self,
                "AwsSolutions-IAM5",
                "GetJobRun and CancelJobRun name a run by its id, which its StartJobRun chose: the pattern covers "
                "the runs of this stack's EMR Serverless applications only.",
                findings=tuple("Resource::" + rendered(self, arn) for arn in cancellable),
            )
        acknowledge(
            schedule_role,
            "AwsSolutions-IAM5",
            "CDK's scheduler target grant: lambda:InvokeFunction on the extender and its versions only.",
            findings=("Resource::" + rendered(self, f"{self.extender.function_arn}:*"),),
        )

    @staticmethod
    def _admission_statements(
        res: Resources, execution_arns: str, waiting_arns: list[str]
    ) -> list[iam.PolicyStatement]:
        """What an admission pass calls (`longjobs.engine.admission.admit.admit_all`, in the extender and the
        watcher): it starts a waiting message's attempt in place (its lease, slot and job lock, the first
        visibility change, the start), frees slots of dead holders, unparks from the waiting queues, and
        sends a message whose attempts are used up to the DLQ. An unparked message is handled as the
        receiver handles it, so it may also be sent back to the jobs queue to wait for its job id, or parked
        again: without those sends SQS refuses it, and the copy bounces in its waiting queue to the DLQ
        unrun."""
        table = res.table.table_arn
        return [
            _allow(
                "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes", "sqs:SendMessage", on=[res.queue.queue_arn]
            ),
            _allow(
                "sqs:ReceiveMessage",
                "sqs:DeleteMessage",
                "sqs:ChangeMessageVisibility",
                "sqs:GetQueueAttributes",
                "sqs:SendMessage",
                on=waiting_arns,
            ),
            _allow("sqs:SendMessage", on=[res.dlq.queue_arn]),
            _allow(
                "dynamodb:GetItem",
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
                "dynamodb:BatchGetItem",
                "dynamodb:ConditionCheckItem",  # an attempt taking its holds again (see the receiver's)
                on=[table],
            ),
            _allow("dynamodb:Query", on=[f"{table}/index/{WAITING_INDEX}"]),
            _allow("states:StartExecution", on=[res.state_machine.state_machine_arn]),
            _allow("states:DescribeExecution", on=[execution_arns]),
        ]

    def target(self, function: lambda_.Function) -> lambda_.IFunction:
        """What invokes `function`: itself, or with `snapstart` its alias `live` on its current version (a
        snapshot is taken of a published version only; `$LATEST` would start every container afresh)."""
        name = function.node.id
        if name not in self.targets:
            self.targets[name] = function.add_alias(LIVE_ALIAS) if self._snapstart else function
            if self._snapstart:
                cdk.Annotations.of(function).acknowledge_warning(
                    "@aws-cdk/aws-lambda:snapStartRequirePublish",
                    "Published: its alias `live` on its current version is what invokes it.",
                )
        return self.targets[name]

    def _function(
        self,
        name: str,
        *,
        handler: str,
        timeout: cdk.Duration,
        memory_mb: int,
        environment: dict[str, str],
        statements: list[iam.PolicyStatement],
        reserved_concurrency: int | None = None,
    ) -> lambda_.Function:
        log_group = logs.LogGroup(
            self,
            f"{name}Logs",
            retention=self._retention,
            removal_policy=cdk.RemovalPolicy.DESTROY,
            encryption_key=self._key,
            log_group_name=f"{self._log_group_prefix}/{name.lower()}" if self._log_group_prefix else None,
        )
        suppress_guard(log_group, *log_group_rules(self._retention_days, customer_key=self._key is not None))
        role = iam.Role(
            self,
            f"{name}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"The {name.lower()} function: only the calls its code makes",
        )
        for statement in statements:
            role.add_to_policy(statement)
        if self._key is not None:
            role.add_to_policy(key_user_statement(self._key))
        log_group.grant_write(role)
        function = lambda_.Function(
            self,
            name,
            runtime=LAMBDA_RUNTIME,
            architecture=LAMBDA_ARCHITECTURE,
            handler=handler,
            code=self._code,
            layers=self._layers,
            role=role,
            log_group=log_group,
            timeout=timeout,
            memory_size=memory_mb,
            tracing=lambda_.Tracing.DISABLED if self._tracing == "off" else lambda_.Tracing.ACTIVE,
            reserved_concurrent_executions=reserved_concurrency,
            snap_start=lambda_.SnapStartConf.ON_PUBLISHED_VERSIONS if self._snapstart else None,
            environment_encryption=self._key,
            environment={
                "POWERTOOLS_SERVICE_NAME": self._service,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                # No pydantic plugins: spares the first model's scan of every installed package's entry points.
                "PYDANTIC_DISABLE_PLUGINS": "__all__",
                **tracing_environment(self._tracing, self._service),
                **environment,
            },
        )
        suppress_guard(function, "lambda_inside_vpc_check")
        suppress_checkov(
            function,
            "CKV_AWS_116",
            "CKV_AWS_117",
            *(("CKV_AWS_115",) if reserved_concurrency is None else ()),
            *(("CKV_AWS_173",) if self._key is None else ()),
        )
        if self._key is None:
            suppress_checkov(log_group, "CKV_AWS_158")
        if self._tracing != "off":
            acknowledge(
                role,
                "AwsSolutions-IAM5",
                "X-Ray's PutTraceSegments and PutTelemetryRecords take no resource ARN (active tracing).",
                findings=("Resource::*",),
            )
        acknowledge(
            function,
            "AwsSolutions-L1",
            "Python 3.13 on purpose, not the newest runtime: the project's Python (pyproject, mypy, the tests), "
            "the Powertools layer built for it and Glue 6.0's Python, so Lambda runs what the tests run.",
        )
        return function


def staged_functions(catalog: JobCatalog) -> Path:
    """The package's `functions/` and `engine/`, with the job catalog in it as `engine/job_types.json`,
    for the asset.

    The functions read the job types (and the S3 triggers) from that file at their first record, not
    from an environment variable: Lambda caps all of a function's variables at 4 KB together, which a
    few JSON Schemas pass, while a file in the asset has no such limit.
    """
    stage = staged_package("functions", "engine", extra_files={f"engine/{JOB_TYPES_FILE}": catalog.to_json() + "\n"})
    compile_for_lambda(stage)
    return stage


LAMBDA_TASK_ROOT = "/var/task"
"""Where Lambda puts a function's code: the path the asset's compiled modules name as their source."""


def compile_for_lambda(stage: Path) -> None:
    """Ship `stage`'s modules compiled: Lambda's code folder is read-only, so a module without its `.pyc`
    is compiled again at every cold start (half a handler's import, `benchmarks.cold_start`). The `.pyc`
    are unchecked-hash (PEP 552): Python loads them without looking at the source's time or content,
    which the asset's zip does not keep (CDK normalizes file times). They are compiled by a fresh
    interpreter, so the same source gives the same bytes and the same asset hash, and only by the
    runtime's Python version: another would write files the runtime never reads."""
    if LAMBDA_RUNTIME.name != f"python{sys.version_info.major}.{sys.version_info.minor}":
        return
    subprocess.run(
        [
            sys.executable,
            "-I",
            "-m",
            "compileall",
            "-q",
            "-o",
            "0",
            "--invalidation-mode",
            "unchecked-hash",
            "-d",
            LAMBDA_TASK_ROOT,
            str(stage),
        ],
        check=True,
        capture_output=True,
    )


def _allow(*actions: str, on: list[str]) -> iam.PolicyStatement:
    return iam.PolicyStatement(actions=list(actions), resources=on)
