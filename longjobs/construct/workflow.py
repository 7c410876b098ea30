"""The long-job workflow (DESIGN section 7), built once for the stack and for the offline runtime.

    Self -> ReadLeaseAtStart -> HeldAtStart: the lease is ACTIVE and names this execution? else NotHeld
    RunJob (Parallel, so every failure inside is caught in one place)
      └ JobType: one branch per declared job type (inline types never reach the workflow):
                 pyspark -> the type's Spark step (a parameter: Glue, or the offline token queue)
                 | wait -> Wait N s (-> fail on request)
                 | state_machine -> the user's state machine, a nested `.sync` execution
                 (timeouts of a step -> JobTimedOut)
    success: HoldsSlotAtSuccess -> SucceededAndFreed[WithSlot]: MarkSucceeded(summary) + ReleaseJobLock
             [+ ReleaseSlot] in one transaction, on condition of the handle the start read -> DeleteMessage
             -> FreedAtOnce -> JobSucceeded; the transaction refused or failed: the same one by one,
             MarkSucceeded -> DeleteMessage -> ReleaseJobLock -> (holds a slot?) ReleaseSlot -> JobSucceeded
             (a MarkSucceeded refused by its condition reads the lease: ReadLease -> LeaseOpen -> OwnsLease
             -> AlreadySettled: SUCCEEDED by us -> DeleteMessage; CANCELLED meanwhile by an operator ->
             CancelledMeanwhile, the cancel settles the message; another execution's -> Superseded)
    failure: ReadLeaseForRelease -> (ours and ACTIVE?) MarkReleased(error) -> ReleaseJobLockOnFailure
             -> (holds a slot?) ReleaseSlotOnFailure -> ReleaseMessage(release delay) -> JobFailed;
             (already RELEASED by us, a MarkReleased that landed unanswered -> ReleaseJobLockOnFailure);
             a handle SQS refuses for good -> MarkLost -> JobFailed
    a read of either path that fails after its retries -> the lock and slot releases -> JobSucceeded | JobFailed

Every branch ends in the same fenced success and failure paths, after the `RunJob` Parallel: adding a
job type adds a Choice rule and its branch, nothing else. The job lock (`longjobs.engine.lease.lock`) and the
admission slot of a limited type (`$.slot`, `longjobs.engine.admission.slots`) are released only by the
execution they name, once the lease is closed.

The rule: an execution runs only while its message is held, and touches the message and its lease
only while the lease names it (`execution_arn` = `$$.Execution.Id`), never by the receipt handle alone:
an older attempt that outlived its lease (capped, lost, released) settles nothing of a newer one.
An execution whose lease does not name it at the start (it was started after its lease had been
released, by a StartExecution whose answer got lost) ends at once without running its job.

Completion and release use the lease's current receipt handle. Each lease update is conditional on the
execution and the handle it will use: the success's close on the handle the start read, the release on
the one it reads. When a redelivery has swapped the handle in between, the update fails and the path
reads the lease again.
The release closes the lease before it changes the message's visibility, so a renewal that read the
lease earlier finds it closed and re-applies the release (see `longjobs.engine.settle.release`). (Task
results land in throwaway paths rather than `ResultPath: null`, which moto's engine turns into an
empty state.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from longjobs.construct.constants import SUMMARY_PREFIX
from longjobs.engine.execution import JOB_FAILED_CAUSE
from longjobs.engine.execution import STOP_ERROR as NOT_HELD_ERROR
from longjobs.engine.jobs import JobType
from longjobs.engine.jobs.builtin import BUILTIN_TYPES
from longjobs.engine.jobs.names import state_prefix, wait_prefix
from longjobs.engine.lease import LeaseStatus
from longjobs.engine.lease.lock import (
    FREE,
    HELD,
    JOB_LOCK_PREFIX,
    LOCK_EXECUTION_ATTR,
    LOCK_STATE_ATTR,
    RELEASED_AT_ATTR,
)
from longjobs.engine.lease.schema import (
    ERROR_ATTR,
    EXECUTION_ATTR,
    HANDLE_ATTR,
    PARTITION_KEY,
    RENEW_AT_ATTR,
    RESULT_ATTR,
    SHARD_ATTR,
    STATUS_ATTR,
    VERSION_ATTR,
    WORKFLOW_CLOSED_AT_ATTR,
)
from longjobs.engine.runs import EXECUTION_ARGUMENT

CANCELLED_ERROR = "Cancelled"
"""The error an execution ends with when its lease was cancelled while its job ran (as `longjobs cancel`
stops one: `longjobs.engine.cancel.CANCELLED`)."""

PysparkStep = Callable[[Construct, JobType], sfn.TaskStateBase | sfn.CustomState]
"""Builds the first state of a pyspark type's branch, which runs its entry on `$.job.params`; the
branch's result is the job's summary."""


def by_platform(steps: dict[str, PysparkStep]) -> PysparkStep:
    """One pyspark step for every type: the step of the type's `platform` (`glue`, `emr_serverless`)."""

    def build(scope: Construct, job_type: JobType) -> sfn.TaskStateBase | sfn.CustomState:
        if job_type.platform not in steps:
            raise ValueError(f"job type {job_type.name!r}: no step runs platform {job_type.platform!r} here")
        return steps[job_type.platform](scope, job_type)

    return build


SQS_TRANSIENT_ERRORS = [
    "Sqs.RequestThrottledException",
    "Sqs.ThrottlingException",
    "Sqs.InternalErrorException",
    "Sqs.SdkClientException",
]
DYNAMODB_TRANSIENT_ERRORS = [
    "DynamoDB.ProvisionedThroughputExceededException",
    "DynamoDB.ThrottlingException",
    "DynamoDB.RequestLimitExceeded",
    "DynamoDB.InternalServerErrorException",
    # DynamoDB's error code for a 500 (as the SDKs and moto name it; the integration may use either name)
    "DynamoDB.InternalServerError",
]
CONDITION_FAILED = "DynamoDB.ConditionalCheckFailedException"
LOST_HANDLE_ERRORS = [
    "*.ReceiptHandleIsInvalidException",
    "*.MessageNotInflightException",
    "*.QueueDoesNotExistException",
]
"""SQS's answers to a handle it no longer accepts, as Step Functions names them: `Sqs.<exception>` (moto
writes the service in lower case, hence the wildcard)."""
GENERIC_SQS_ERRORS = ["Sqs.SqsException", "sqs.sqsException"]
"""SQS's generic error (AWS's name, then moto's), whose cause says in words when a handle is gone."""
LOST_HANDLE_CAUSES = ["*expired*", "*does not exist*", "*not available*", "*not a valid receipt handle*"]
GLUE_TIMEOUT_MARGIN = cdk.Duration.minutes(15)
"""The Glue step's own timeout exceeds the run's by this: time for the run to start (Glue queues it)."""
TIMEOUT_ERRORS = ["States.HeartbeatTimeout", "States.Timeout"]  # moto reports a heartbeat timeout as the latter
GLUE_BUSY_ERRORS = ["Glue.ConcurrentRunsExceededException", "Glue.ThrottlingException"]

_NAMES = {
    "#status": STATUS_ATTR,
    "#execution": EXECUTION_ATTR,
    "#handle": HANDLE_ATTR,
    "#version": VERSION_ATTR,
    "#shard": SHARD_ATTR,
    "#renew_at": RENEW_AT_ATTR,
}
_LAST_ERROR = "$.last_error"
"""Where the lease's last error is built as a DynamoDB map before a close writes it."""
_LEASE_HANDLE = "$.lease.Item." + HANDLE_ATTR + ".S"
_LEASE_STATUS = "$.lease.Item." + STATUS_ATTR + ".S"
_LEASE_EXECUTION = "$.lease.Item." + EXECUTION_ATTR + ".S"
_SELF = "$.self.execution"
"""Where the execution keeps its own ARN: `$$.Execution.Id`, copied at the start (Choice rules read the input only)."""


def glue_pyspark_step(
    job_names: dict[str, str],
    *,
    timeouts: dict[str, cdk.Duration],
    summary_bucket: str | None = None,
) -> PysparkStep:
    """The cloud's pyspark step: a run of the type's Glue job (`job_names[type]`), waited for (`.sync`).

    Every pyspark type's Glue job runs the project's entry script (`pipeline/glue_entry.py`), which
    imports the type's entry; the run passes the params as JSON (`--params`). A Glue run returns no
    output of its own. With `summary_bucket`, the entry writes the summary JSON that `run` returned to
    `s3://<bucket>/summaries/<execution name>.json` (`--summary-path`) and the step reads it back, so
    the lease gets the job's own summary (under `summary`) next to the run's id, state and time. A
    summary that cannot be read leaves the run's outcome alone: the job did succeed. Without a bucket
    the summary is the run's outcome only. A run refused because the job already has its maximum of
    concurrent runs is retried with backoff, as it is a queue, not a failure.
    """

    def build(scope: Construct, job_type: JobType) -> sfn.TaskStateBase:
        prefix = state_prefix(job_type)
        arguments: dict[str, Any] = {
            "--params": sfn.JsonPath.json_to_string(sfn.JsonPath.object_at("$.job.params")),
            # Glue runs have no name: the processor finds an execution's run by this (`longjobs.engine.runs`)
            EXECUTION_ARGUMENT: sfn.JsonPath.string_at("$$.Execution.Name"),
        }
        if summary_bucket is not None:
            arguments["--summary-path"] = sfn.JsonPath.format(
                f"s3://{summary_bucket}/{SUMMARY_PREFIX}{{}}.json", sfn.JsonPath.string_at("$$.Execution.Name")
            )
        run = _GlueRunWithStepTimeout(
            scope,
            f"Run{prefix}Job",
            glue_job_name=job_names[job_type.name],
            integration_pattern=sfn.IntegrationPattern.RUN_JOB,
            arguments=sfn.TaskInput.from_object(arguments),
            task_timeout=sfn.Timeout.duration(timeouts[job_type.name]),
            result_selector={
                "glue_job_run_id": sfn.JsonPath.string_at("$.Id"),
                "state": sfn.JsonPath.string_at("$.JobRunState"),
                "execution_time_s": sfn.JsonPath.number_at("$.ExecutionTime"),
            },
            result_path=None if summary_bucket is None else "$.glue",
        )
        run.add_retry(  # longer waits than _retry_transient: a busy job frees up in minutes, not seconds
            errors=GLUE_BUSY_ERRORS,
            interval=cdk.Duration.seconds(60),
            backoff_rate=2,
            max_attempts=5,
            jitter_strategy=sfn.JitterType.FULL,
        )
        if summary_bucket is not None:
            outcome = {
                "glue_job_run_id": sfn.JsonPath.string_at("$.glue.glue_job_run_id"),
                "state": sfn.JsonPath.string_at("$.glue.state"),
                "execution_time_s": sfn.JsonPath.number_at("$.glue.execution_time_s"),
            }
            run.next(read_run_summary(scope, summary_bucket, prefix, outcome))
        return run

    return build


class _GlueRunWithStepTimeout(tasks.GlueStartJobRun):
    """A Glue run whose state also has `TimeoutSeconds`. CDK's `task_timeout` on a Glue run becomes the
    run's own `Timeout` (minutes) and no state timeout, so the step's `States.Timeout` catch could never
    fire and a run stuck in Glue's queue would keep its execution (and message) for good."""

    def to_state_json(self, state_machine_query_language: Any = None) -> dict[str, Any]:
        state = dict(super().to_state_json(state_machine_query_language))
        run_minutes = state.get("Parameters", {}).get("Timeout")
        if isinstance(run_minutes, int | float):
            state["TimeoutSeconds"] = int(run_minutes * 60 + GLUE_TIMEOUT_MARGIN.to_seconds())
        return state


def summary_objects_arn(scope: Construct, bucket: str) -> str:
    """The IAM resource of the run summaries in `bucket`."""
    return cdk.Stack.of(scope).format_arn(
        service="s3", region="", account="", resource=bucket, resource_name=SUMMARY_PREFIX + "*"
    )


def read_run_summary(scope: Construct, bucket: str, prefix: str, outcome: dict[str, Any]) -> sfn.IChainable:
    """GetObject of the run's summary, parsed, next to the run's `outcome`; the outcome alone on failure."""
    read = tasks.CallAwsService(
        scope,
        f"Read{prefix}Summary",
        service="s3",
        action="getObject",
        iam_resources=[summary_objects_arn(scope, bucket)],
        parameters={
            "Bucket": bucket,
            "Key": sfn.JsonPath.format(f"{SUMMARY_PREFIX}{{}}.json", sfn.JsonPath.string_at("$$.Execution.Name")),
        },
        result_selector={"body": sfn.JsonPath.string_at("$.Body")},
        result_path="$.summary_object",
    )
    read.add_catch(
        sfn.Pass(scope, f"{prefix}RunOutcome", parameters=outcome), errors=["States.ALL"], result_path="$.summary_error"
    )
    return read.next(
        sfn.Pass(
            scope,
            f"{prefix}Summary",
            parameters={
                **outcome,
                "summary": sfn.JsonPath.string_to_json(sfn.JsonPath.string_at("$.summary_object.body")),
            },
        )
    )


def token_queue_pyspark_step(
    *, queue_arn: str, queue_url: str, heartbeat: cdk.Duration, timeout: cdk.Duration
) -> PysparkStep:
    """The offline pyspark step: a message with a task token on a queue that a local Spark worker serves.
    The message carries the job (its type names the entry to run). The worker answers with
    `SendTaskSuccess(summary)` or `SendTaskFailure`, and heartbeats meanwhile: a worker that dies is
    noticed after one heartbeat timeout. `timeout` bounds the whole job and is always set: a task with
    a heartbeat and no timeout times out after 60 s in moto (AWS waits a year). A type whose Glue job has a
    timeout of its own (`glue.timeout_minutes`) is bounded by that instead, as its Glue run would be, so a
    job too slow for its limit fails offline as in the cloud."""

    def build(scope: Construct, job_type: JobType) -> sfn.TaskStateBase:
        found = scope.node.try_find_child("PysparkTokenQueue")  # one reference, shared by every pyspark type
        queue = (
            cast(sqs.IQueue, found)
            if found is not None
            else sqs.Queue.from_queue_attributes(scope, "PysparkTokenQueue", queue_arn=queue_arn, queue_url=queue_url)
        )
        return tasks.SqsSendMessage(
            scope,
            f"Run{state_prefix(job_type)}Job",
            queue=queue,
            integration_pattern=sfn.IntegrationPattern.WAIT_FOR_TASK_TOKEN,
            message_body=sfn.TaskInput.from_object(
                {
                    "task_token": sfn.JsonPath.task_token,
                    "message_id": sfn.JsonPath.string_at("$.message_id"),
                    "attempt": sfn.JsonPath.number_at("$.attempt"),
                    "job": sfn.JsonPath.object_at("$.job"),
                }
            ),
            heartbeat_timeout=sfn.Timeout.duration(heartbeat),
            task_timeout=sfn.Timeout.duration(_own_glue_timeout(job_type) or timeout),
        )

    return build


def _own_glue_timeout(job_type: JobType) -> cdk.Duration | None:
    """The type's own Glue run timeout (`glue.timeout_minutes`), when it sets one."""
    minutes = job_type.glue.timeout_minutes if job_type.glue is not None else None
    return cdk.Duration.minutes(minutes) if minutes else None


def state_machine_step(scope: Construct, job_type: JobType) -> sfn.TaskStateBase:
    """A `state_machine` type: the user's state machine as a nested execution, waited for (`.sync`),
    with the job's params as its input; the summary is the nested execution's output. CDK grants the
    workflow StartExecution on that machine, and Describe/StopExecution on its executions."""
    settings = job_type.state_machine
    if settings is None:
        raise ValueError(f"job type {job_type.name!r} is not a state_machine type")
    prefix = state_prefix(job_type)
    machine = sfn.StateMachine.from_state_machine_arn(scope, f"{prefix}StateMachineRef", settings.arn)
    return tasks.StepFunctionsStartExecution(
        scope,
        f"Run{prefix}StateMachine",
        state_machine=machine,
        integration_pattern=sfn.IntegrationPattern.RUN_JOB,
        input=sfn.TaskInput.from_json_path_at("$.job.params"),
        task_timeout=sfn.Timeout.duration(cdk.Duration.minutes(settings.timeout_minutes)),
        result_selector={
            "execution_arn": sfn.JsonPath.string_at("$.ExecutionArn"),
            "output": sfn.JsonPath.string_to_json(sfn.JsonPath.string_at("$.Output")),
        },
    )


PATIENT_ATTEMPTS = 12
PATIENT_MAX_DELAY = cdk.Duration.seconds(60)
"""The retries of the success path's read, close and releases: a job that ran is not run again, nor its
lock left held, for a DynamoDB that failed for a minute (6 attempts ride out about 30 s; these about 6
minutes, the lease renewed meanwhile, since the execution runs). With fewer, a success whose reads all
fail would end the execution FAILED, and its message would go to the DLQ with its job done."""


def _retry_transient(task: sfn.TaskStateBase, errors: list[str], *, patient: bool = False) -> sfn.TaskStateBase:
    task.add_retry(
        errors=errors,
        interval=cdk.Duration.seconds(1),
        backoff_rate=2,
        max_attempts=PATIENT_ATTEMPTS if patient else 6,
        max_delay=PATIENT_MAX_DELAY if patient else None,
        jitter_strategy=sfn.JitterType.FULL,
    )
    return task


def _read_lease(scope: Construct, state_id: str, table: dynamodb.ITable, *, patient: bool = False) -> sfn.TaskStateBase:
    return _retry_transient(
        tasks.DynamoGetItem(
            scope,
            state_id,
            table=table,
            key={PARTITION_KEY: tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$.message_id"))},
            consistent_read=True,
            result_path="$.lease",
        ),
        DYNAMODB_TRANSIENT_ERRORS,
        patient=patient,
    )


@dataclass(frozen=True)
class _Update:
    """One conditional UpdateItem of the table: a task of its own, or an item of a transaction."""

    key: tasks.DynamoAttributeValue
    update: str
    condition: str
    names: dict[str, str]
    values: dict[str, tasks.DynamoAttributeValue]
    result_path: str

    def task(
        self, scope: Construct, state_id: str, table: dynamodb.ITable, *, patient: bool = False
    ) -> sfn.TaskStateBase:
        return _retry_transient(
            tasks.DynamoUpdateItem(
                scope,
                state_id,
                table=table,
                key={PARTITION_KEY: self.key},
                update_expression=self.update,
                condition_expression=self.condition,
                expression_attribute_names=self.names,
                expression_attribute_values=self.values,
                result_path=self.result_path,
            ),
            DYNAMODB_TRANSIENT_ERRORS,
            patient=patient,
        )

    def transact_item(self, table: dynamodb.ITable) -> dict[str, Any]:
        """The same update as a `TransactItems` entry of TransactWriteItems (the aws-sdk integration's shape)."""
        return {
            "Update": {
                "TableName": table.table_name,
                "Key": {PARTITION_KEY: self.key.to_object()},
                "UpdateExpression": self.update,
                "ConditionExpression": self.condition,
                "ExpressionAttributeNames": self.names,
                "ExpressionAttributeValues": {name: value.to_object() for name, value in self.values.items()},
            }
        }


def _lease_close(status: LeaseStatus, attribute: str, value: tasks.DynamoAttributeValue, condition: str) -> _Update:
    """Set the lease's final status, one more attribute and when it closed (`workflow_closed_at`: the state's
    entered time, ISO 8601; the processor's own closes write `closed_at` in epoch seconds, with the
    `visible_until` they set), leave the due-index, bump the version.

    `condition` may use `:self` (this execution), `:handle` (the handle just read) and a status in
    lower case (`:active`, `:succeeded`, `:released`); only the names and values the expressions use
    are sent, since DynamoDB refuses the others.
    """
    update = (
        "SET #status = :status, #attr = :value, #closed = :now, #version = #version + :one REMOVE #shard, #renew_at"
    )
    expressions = f"{update} {condition}"
    names = {**_NAMES, "#attr": attribute, "#closed": WORKFLOW_CLOSED_AT_ATTR}
    values = {
        ":status": tasks.DynamoAttributeValue.from_string(status.value),
        ":value": value,
        ":now": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$$.State.EnteredTime")),
        ":one": tasks.DynamoAttributeValue.from_number(1),
        ":self": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at(_SELF)),
        ":handle": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at(_LEASE_HANDLE)),
        **{f":{s.value.lower()}": tasks.DynamoAttributeValue.from_string(s.value) for s in LeaseStatus},
    }
    return _Update(
        key=tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$.message_id")),
        update=update,
        condition=condition,
        names={k: v for k, v in names.items() if re.search(rf"{k}\b", expressions)},
        values={k: v for k, v in values.items() if re.search(rf"{k}\b", expressions)},
        result_path="$.update",
    )


def _close_lease(
    scope: Construct,
    state_id: str,
    table: dynamodb.ITable,
    *,
    status: LeaseStatus,
    attribute: str,
    value: tasks.DynamoAttributeValue,
    condition: str,
) -> sfn.TaskStateBase:
    """The lease's close (`_lease_close`) as a task."""
    return _lease_close(status, attribute, value, condition).task(scope, state_id, table)


def _last_error_then(scope: Construct, state_id: str, error_path: str, then: sfn.IChainable) -> sfn.Choice:
    """Build the lease's last error from the error a Catch put at `error_path`, at `_LAST_ERROR`, then go
    to `then` (a close that writes it with `_last_error_value`): the map `{"Error": {"S": ...}, "Cause":
    {"S": ...}}`, as `longjobs.engine.lease.LastError` reads it.

    `Cause` is left out when the error has none: `SendTaskFailure` takes no cause at will, and Step
    Functions then binds an empty one (moto binds an empty string too, and the simulation's interpreter
    may find none at all). A Parameters path that matches nothing would be a `States.Runtime` error,
    which no Catch catches, so the path is tested first."""
    cause = f"{error_path}.Cause"
    has_cause = sfn.Condition.and_(
        sfn.Condition.is_present(cause),
        sfn.Condition.is_string(cause),
        sfn.Condition.not_(sfn.Condition.string_equals(cause, "")),
    )
    error = {"S": sfn.JsonPath.string_at(f"{error_path}.Error")}
    with_cause = sfn.Pass(
        scope,
        f"{state_id}WithCause",
        parameters={"Error": error, "Cause": {"S": sfn.JsonPath.string_at(cause)}},
        result_path=_LAST_ERROR,
    )
    without_cause = sfn.Pass(scope, f"{state_id}WithoutCause", parameters={"Error": error}, result_path=_LAST_ERROR)
    return (
        sfn.Choice(scope, f"{state_id}HasCause")
        .when(has_cause, with_cause.next(then))
        .otherwise(without_cause.next(then))
    )


def _last_error_value() -> tasks.DynamoAttributeValue:
    """The map `_last_error_then` built, as a DynamoDB attribute value."""
    return tasks.DynamoAttributeValue.map_from_json_path(_LAST_ERROR)


def _owned(scope: Construct, state_id: str, then: sfn.IChainable, otherwise: sfn.IChainable) -> sfn.Choice:
    """A Choice: does the lease just read name this execution? (`IsPresent` first: a missing attribute
    is not compared.)"""
    return (
        sfn.Choice(scope, state_id)
        .when(
            sfn.Condition.and_(
                sfn.Condition.is_present(_LEASE_EXECUTION),
                sfn.Condition.string_equals_json_path(_LEASE_EXECUTION, _SELF),
            ),
            then,
        )
        .otherwise(otherwise)
    )


def _lease_is(status: LeaseStatus) -> sfn.Condition:
    return sfn.Condition.and_(
        sfn.Condition.is_present("$.lease.Item"), sfn.Condition.string_equals(_LEASE_STATUS, status.value)
    )


def _sqs_call(scope: Construct, state_id: str, action: str, queue_arns: list[str], **params: Any) -> sfn.TaskStateBase:
    return _retry_transient(
        tasks.CallAwsService(
            scope,
            state_id,
            service="sqs",
            action=action,
            iam_resources=queue_arns,
            parameters={
                "QueueUrl": sfn.JsonPath.string_at("$.queue_url"),
                "ReceiptHandle": sfn.JsonPath.string_at(_LEASE_HANDLE),
                **params,
            },
            result_path="$.sqs",
        ),
        SQS_TRANSIENT_ERRORS,
    )


def _wait_branch(scope: Construct, choice: sfn.Choice, job_type: JobType, is_type: sfn.Condition) -> None:
    """A wait type's two rules: wait then fail (`params.fail` true), or wait then answer the time waited.
    The built-in `wait` keeps its state names (`Wait`, `WaitThenFail`, ...); others are prefixed."""
    prefix = wait_prefix(job_type)
    seconds = sfn.WaitTime.seconds_path("$.job.params.seconds")
    wait_then_fail = sfn.Wait(scope, f"{prefix}WaitThenFail", time=seconds).next(
        sfn.Fail(scope, f"{prefix}WaitJobFailed", error="WaitJobFailed", cause="the wait job was asked to fail")
    )
    wait = sfn.Wait(scope, f"{prefix}Wait", time=seconds).next(
        sfn.Pass(scope, f"{prefix}WaitSummary", parameters={"waited_s": sfn.JsonPath.number_at("$.job.params.seconds")})
    )
    fail_asked = sfn.Condition.and_(
        is_type,
        sfn.Condition.is_present("$.job.params.fail"),
        sfn.Condition.boolean_equals("$.job.params.fail", True),
    )
    choice.when(fail_asked, wait_then_fail).when(is_type, wait)


_JOB_LOCK_RELEASE = _Update(
    key=tasks.DynamoAttributeValue.from_string(
        sfn.JsonPath.format(JOB_LOCK_PREFIX + "{}", sfn.JsonPath.string_at("$.job.job_id"))
    ),
    update="SET #state = :free, #released = :now",
    condition="#state = :held AND #execution = :self",
    names={"#state": LOCK_STATE_ATTR, "#execution": LOCK_EXECUTION_ATTR, "#released": RELEASED_AT_ATTR},
    values={
        ":free": tasks.DynamoAttributeValue.from_string(FREE),
        ":held": tasks.DynamoAttributeValue.from_string(HELD),
        ":self": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at(_SELF)),
        ":now": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$$.State.EnteredTime")),
    },
    result_path="$.lock_release",
)
"""Free the job's lock if it names this execution (`longjobs.engine.lease.lock`), noting when: the job's
next attempt waits that long for the offline worker's run to end (`longjobs.engine.runs`). Best effort: a
lock it does not name, or one that stays held after the retries, is left (a later message of the job id
takes it over once it sees this execution ended)."""
_SLOT_RELEASE = _Update(
    key=tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$.slot")),
    update="SET #state = :free, #released = :now",
    condition="#state = :held AND #execution = :self",
    names={"#state": LOCK_STATE_ATTR, "#execution": LOCK_EXECUTION_ATTR, "#released": RELEASED_AT_ATTR},
    values={
        ":free": tasks.DynamoAttributeValue.from_string(FREE),
        ":held": tasks.DynamoAttributeValue.from_string(HELD),
        ":self": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at(_SELF)),
        ":now": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$$.State.EnteredTime")),
    },
    result_path="$.slot_release",
)
"""Free the admission slot `$.slot` if it names this execution, noting when (the slot's holding time is
the estimate's data). Best effort, like the lock: a slot left held is freed by the extender's sweep once
this execution is seen ended."""


def _release_job_lock(
    scope: Construct, state_id: str, table: dynamodb.ITable, *, patient: bool = False
) -> sfn.TaskStateBase:
    return _JOB_LOCK_RELEASE.task(scope, state_id, table, patient=patient)


def _release_slot(
    scope: Construct, state_id: str, table: dynamodb.ITable, *, patient: bool = False
) -> sfn.TaskStateBase:
    return _SLOT_RELEASE.task(scope, state_id, table, patient=patient)


def _succeeded_at_once(
    scope: Construct, table: dynamodb.ITable, close: _Update, *, then: sfn.IChainable, step_by_step: sfn.IChainable
) -> sfn.Choice:
    """Close the lease SUCCEEDED and free the job lock and the slot (when `$.slot`) in one TransactWriteItems:
    one request instead of three. The transaction is all or nothing, so any refusal (a lock or slot no
    longer this execution's, a handle a redelivery replaced, a close that already landed behind a lost
    answer) or error goes to `step_by_step`, the same three writes one at a time, each settling what is
    still this execution's; it has the retries, so the transaction has none."""

    def transaction(state_id: str, updates: list[_Update]) -> sfn.IChainable:
        task = tasks.CallAwsService(
            scope,
            state_id,
            service="dynamodb",
            action="transactWriteItems",
            iam_action="dynamodb:UpdateItem",  # a transaction needs each item's own action
            # the table's ARN as the optimized DynamoDB tasks' grants name it (one statement's resource)
            iam_resources=[
                cdk.Stack.of(scope).format_arn(service="dynamodb", resource="table", resource_name=table.table_name)
            ],
            parameters={"TransactItems": [update.transact_item(table) for update in updates]},
            result_path="$.settled",
        )
        task.add_catch(step_by_step, errors=["States.ALL"], result_path="$.settle_error")
        return task.next(then)

    return (
        sfn.Choice(scope, "HoldsSlotAtSuccess")
        .when(
            sfn.Condition.is_present("$.slot"),
            transaction("SucceededAndFreedWithSlot", [close, _JOB_LOCK_RELEASE, _SLOT_RELEASE]),
        )
        .otherwise(transaction("SucceededAndFreed", [close, _JOB_LOCK_RELEASE]))
    )


def _slot_released_then(
    scope: Construct, suffix: str, table: dynamodb.ITable, then: sfn.IChainable, *, patient: bool = False
) -> sfn.Choice:
    """A Choice: the execution holds a slot (`$.slot` is in its input)? release it, then `then`."""
    release = _release_slot(scope, f"ReleaseSlot{suffix}", table, patient=patient)
    release.add_catch(then, errors=["States.ALL"], result_path="$.slot_error")
    return (
        sfn.Choice(scope, f"HoldsSlot{suffix}")
        .when(sfn.Condition.is_present("$.slot"), release.next(then))
        .otherwise(then)
    )


def build_workflow(
    scope: Construct,
    *,
    table: dynamodb.ITable,
    queue_arns: list[str],
    pyspark_step: PysparkStep,
    job_types: Sequence[JobType] = BUILTIN_TYPES,
) -> sfn.IChainable:
    """The workflow's first state, in the order it runs: the start's check of the lease, the job, then
    the success path or the failure path. `queue_arns` are the queues whose messages it settles (IAM
    only); `job_types` get one Choice branch each, in their order (inline types run in the receiver)."""
    run_job = _run_job(scope, pyspark_step, job_types)
    run_job.next(_success_path(scope, table, queue_arns))
    run_job.add_catch(_failure_path(scope, table, queue_arns), errors=["States.ALL"], result_path="$.error")
    return _start(scope, table, run_job)


def _start(scope: Construct, table: dynamodb.ITable, run_job: sfn.IChainable) -> sfn.IChainable:
    """The start: the execution's own ARN, then the lease must be ACTIVE and name it, or nothing runs."""
    not_held = sfn.Fail(scope, "NotHeld", error=NOT_HELD_ERROR, cause="its lease is closed or names another execution")
    held_at_start = (
        sfn.Choice(scope, "HeldAtStart")
        .when(_lease_is(LeaseStatus.ACTIVE), _owned(scope, "OwnsLeaseAtStart", run_job, not_held))
        .otherwise(not_held)
    )
    return (
        sfn.Pass(
            scope, "Self", parameters={"execution": sfn.JsonPath.string_at("$$.Execution.Id")}, result_path="$.self"
        )
        .next(_read_lease(scope, "ReadLeaseAtStart", table))
        .next(held_at_start)
    )


def _run_job(scope: Construct, pyspark_step: PysparkStep, job_types: Sequence[JobType]) -> sfn.Parallel:
    """The job: a Parallel of one branch, so every failure inside is caught in one place, holding a Choice
    with one branch per job type that runs in the workflow."""
    # A silent Spark worker (no heartbeat) or an overrun ends a step with a timeout, named one way
    # or the other by different engines. It becomes the branch's own error: moto's Parallel cannot
    # pass a `States.*` error on to its Catch, while AWS's can; this shape works on both.
    timed_out = sfn.Fail(
        scope, "JobTimedOut", error="JobTimedOut", cause="the job stopped sending heartbeats or ran past its timeout"
    )
    choice = sfn.Choice(scope, "JobType")
    prefixes: dict[str, str] = {}
    for job_type in job_types:
        if job_type.runner == "inline":
            continue
        prefix = state_prefix(job_type)
        if prefix in prefixes:
            raise ValueError(
                f"job types {prefixes[prefix]!r} and {job_type.name!r} have the same state names ({prefix}): rename one"
            )
        prefixes[prefix] = job_type.name
        is_type = sfn.Condition.string_equals("$.job.type", job_type.name)
        if job_type.runner == "wait":
            _wait_branch(scope, choice, job_type, is_type)
            continue
        step = pyspark_step(scope, job_type) if job_type.runner == "pyspark" else state_machine_step(scope, job_type)
        step.add_catch(timed_out, errors=TIMEOUT_ERRORS)
        choice.when(is_type, step)
    job_choice = choice.otherwise(
        sfn.Fail(scope, "UnknownJobType", error="UnknownJobType", cause="no branch runs this job type")
    )
    return sfn.Parallel(
        scope, "RunJob", result_selector={"summary": sfn.JsonPath.object_at("$[0]")}, result_path="$.outcome"
    ).branch(job_choice)


def _success_path(scope: Construct, table: dynamodb.ITable, queue_arns: list[str]) -> sfn.IChainable:
    """The success path's first state: close the lease SUCCEEDED and free the holds, then delete the
    message."""
    # Success: close the lease with the job's summary and free the holds in one transaction, on condition
    # of the handle the start read (the success path reads nothing in the common case), then delete the
    # message with that handle. Any refusal (a newer handle adopted by a redelivery, a hold not this
    # execution's, an answer lost) goes step by step, and a close refused on its condition reads the lease.
    read_lease = _read_lease(scope, "ReadLease", table, patient=True)
    success_close = _lease_close(
        LeaseStatus.SUCCEEDED,
        RESULT_ATTR,
        tasks.DynamoAttributeValue.from_string(
            sfn.JsonPath.json_to_string(sfn.JsonPath.object_at("$.outcome.summary"))
        ),
        "#execution = :self AND #handle = :handle AND #status <> :succeeded AND #status <> :cancelled",
    )
    mark_succeeded = success_close.task(scope, "MarkSucceeded", table, patient=True)
    mark_succeeded.add_catch(read_lease, errors=[CONDITION_FAILED], result_path="$.conflict")
    succeeded = sfn.Succeed(scope, "JobSucceeded", output_path="$.outcome")
    # Patient too: after a success nothing else frees them but a redelivery (the watcher and reconciliation
    # settle unsuccessful ends), and the delete usually means there is none.
    release_slot = _slot_released_then(scope, "", table, succeeded, patient=True)
    release_lock = _release_job_lock(scope, "ReleaseJobLock", table, patient=True)
    release_lock.add_catch(release_slot, errors=["States.ALL"], result_path="$.lock_error")
    release_lock.next(release_slot)
    # After the lease is closed SUCCEEDED: the transaction freed the holds (`$.settled`), else they are
    # freed one by one. A delete SQS refuses (a handle gone stale) changes nothing: a redelivery finds the
    # lease SUCCEEDED and is deleted without running the job again.
    freed = (
        sfn.Choice(scope, "FreedAtOnce").when(sfn.Condition.is_present("$.settled"), succeeded).otherwise(release_lock)
    )
    delete_message = _sqs_call(scope, "DeleteMessage", "deleteMessage", queue_arns)
    delete_message.add_catch(freed, result_path="$.delete_error")
    delete_message.next(freed)
    mark_succeeded.next(delete_message)
    # A close that still fails after its retries: the job succeeded, so its message is deleted all the
    # same (by the start's handle) and the holds freed; the execution ends SUCCEEDED and reconciliation
    # completes the lease left ACTIVE. Ending FAILED instead would have the message released and its job
    # run a second time.
    mark_succeeded.add_catch(delete_message, errors=["States.ALL"], result_path="$.close_error")
    settle = _succeeded_at_once(scope, table, success_close, then=delete_message, step_by_step=mark_succeeded)
    # A read that still fails after its retries frees the holds (each release conditional on this
    # execution) and ends the execution SUCCEEDED, as its job did: reconciliation completes a lease left
    # ACTIVE (it deletes the message), and one already closed by this execution (a MarkSucceeded that
    # landed unanswered) is in no index, so nothing else would free them when the status event is lost.
    read_lease.add_catch(release_lock, errors=["States.ALL"], result_path="$.read_error")
    # The job ran, but the lease now belongs to another attempt: settle nothing of it.
    superseded = sfn.Fail(scope, "Superseded", error=NOT_HELD_ERROR, cause="the lease names another execution")
    # An operator cancelled the message while its job ran (its stop refused, or not reached yet): the success
    # is not recorded and the message not deleted as succeeded; the cancel (or the extender finishing it)
    # sends it to the DLQ, frees the holds and deletes it.
    cancelled = sfn.Fail(
        scope,
        "CancelledMeanwhile",
        error=CANCELLED_ERROR,
        cause="the message was cancelled while its job ran: the cancel settles it, not this success",
    )
    read_lease.next(
        sfn.Choice(scope, "LeaseOpen")
        .when(sfn.Condition.is_not_present("$.lease.Item"), sfn.Succeed(scope, "NoLease"))
        .otherwise(
            _owned(
                scope,
                "OwnsLease",
                # SUCCEEDED and ours: our MarkSucceeded landed though its answer was an error (a 5xx,
                # then a retry whose condition failed): the delete, the lock and the slot are still to do.
                sfn.Choice(scope, "AlreadySettled")
                .when(_lease_is(LeaseStatus.SUCCEEDED), delete_message)
                .when(_lease_is(LeaseStatus.CANCELLED), cancelled)
                .otherwise(settle),
                superseded,
            )
        )
    )
    return settle


def _failure_path(scope: Construct, table: dynamodb.ITable, queue_arns: list[str]) -> sfn.IChainable:
    """The failure path's first state: read the lease, close it RELEASED and free the holds, then give
    the message back after its release delay."""
    # Failure: close the lease RELEASED (so no renewal can outlive the release), then give the message
    # back after the release delay; a handle SQS refuses for good makes the lease LOST instead.
    job_failed = sfn.Fail(scope, "JobFailed", error_path="$.error.Error", cause=JOB_FAILED_CAUSE)
    read_for_release = _read_lease(scope, "ReadLeaseForRelease", table)
    mark_released = _close_lease(
        scope,
        "MarkReleased",
        table,
        status=LeaseStatus.RELEASED,
        attribute=ERROR_ATTR,
        value=_last_error_value(),
        condition="#execution = :self AND #handle = :handle AND #status = :active",
    )
    mark_released.add_catch(read_for_release, errors=[CONDITION_FAILED], result_path="$.conflict")
    release_lock_on_failure = _release_job_lock(scope, "ReleaseJobLockOnFailure", table)
    release_message = _sqs_call(
        scope,
        "ReleaseMessage",
        "changeMessageVisibility",
        queue_arns,
        VisibilityTimeout=sfn.JsonPath.number_at("$.release_delay_s"),
    )
    release_message.next(job_failed)
    # After a read that failed (`$.read_error`) the handle is unknown: the holds are freed, and the message
    # comes back when its chunk ends (reconciliation releases a lease left ACTIVE).
    read_failed = (
        sfn.Choice(scope, "ReadForRelease")
        .when(sfn.Condition.is_present("$.read_error"), job_failed)
        .otherwise(release_message)
    )
    release_slot_on_failure = _slot_released_then(scope, "OnFailure", table, read_failed)
    release_lock_on_failure.add_catch(release_slot_on_failure, errors=["States.ALL"], result_path="$.lock_error")
    mark_lost = _close_lease(
        scope,
        "MarkLost",
        table,
        status=LeaseStatus.LOST,
        attribute=ERROR_ATTR,
        value=_last_error_value(),
        condition="#execution = :self AND #status = :released",
    )
    mark_lost.add_catch(job_failed, errors=[CONDITION_FAILED], result_path="$.conflict")
    error_name, cause = "$.release_error.Error", "$.release_error.Cause"
    handle_refused = sfn.Condition.or_(
        *[sfn.Condition.string_matches(error_name, pattern) for pattern in LOST_HANDLE_ERRORS],
        sfn.Condition.and_(
            sfn.Condition.or_(*[sfn.Condition.string_equals(error_name, name) for name in GENERIC_SQS_ERRORS]),
            sfn.Condition.is_present(cause),
            sfn.Condition.or_(*[sfn.Condition.string_matches(cause, pattern) for pattern in LOST_HANDLE_CAUSES]),
        ),
    )
    # Any other refusal (still throttled after the retries) leaves the lease RELEASED: the message
    # comes back when its current chunk ends.
    release_message.add_catch(
        sfn.Choice(scope, "ReleaseRefused")
        .when(handle_refused, _last_error_then(scope, "LostError", "$.release_error", mark_lost.next(job_failed)))
        .otherwise(job_failed),
        result_path="$.release_error",
    )
    read_for_release.next(
        sfn.Choice(scope, "LeaseActive")
        .when(
            _lease_is(LeaseStatus.ACTIVE),
            _owned(
                scope,
                "OwnsLeaseForRelease",
                _last_error_then(
                    scope,
                    "ReleasedError",
                    "$.error",
                    mark_released.next(release_lock_on_failure).next(release_slot_on_failure),
                ),
                job_failed,
            ),
        )
        # RELEASED and ours: our MarkReleased landed though its answer was an error (a 5xx, then a retry
        # whose condition failed): the lock, the slot and the message's release delay are still to do.
        .when(
            _lease_is(LeaseStatus.RELEASED),
            _owned(scope, "ReleasedByThisExecution", release_lock_on_failure, job_failed),
        )
        .otherwise(job_failed)
    )
    read_for_release.add_catch(release_lock_on_failure, errors=["States.ALL"], result_path="$.read_error")
    return read_for_release


def render_definition(
    *,
    table_name: str,
    queue_arns: list[str],
    pyspark_step: PysparkStep,
    region: str,
    account: str,
    job_types: Sequence[JobType] = BUILTIN_TYPES,
) -> str:
    """The workflow as Amazon States Language JSON, for engines CloudFormation does not feed (the
    offline runtime's emulator). Built by the same function the stack uses."""
    stack = cdk.Stack(cdk.App(), "WorkflowDefinition")
    table = dynamodb.Table.from_table_name(stack, "Leases", table_name)
    start = build_workflow(stack, table=table, queue_arns=queue_arns, pyspark_step=pyspark_step, job_types=job_types)
    graph = sfn.StateGraph(start.start_state, "long-job workflow")
    pseudo = {
        "AWS::Partition": "aws",
        "AWS::Region": region,
        "AWS::AccountId": account,
        "AWS::URLSuffix": "amazonaws.com",
    }
    return json.dumps(_resolve_intrinsics(stack.resolve(graph.to_graph_json()), pseudo))


def _resolve_intrinsics(value: Any, pseudo: dict[str, str]) -> Any:
    """Resolve the few CloudFormation intrinsics a rendered definition holds (`Fn::Join` of strings and
    `Ref` of pseudo parameters, as in task ARNs). Anything else is refused: it needs a deployment."""
    if isinstance(value, list):
        return [_resolve_intrinsics(item, pseudo) for item in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Ref"}:
        if value["Ref"] not in pseudo:
            raise ValueError(f"the definition refers to {value['Ref']!r}, which exists only in a deployed stack")
        return pseudo[value["Ref"]]
    if set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join(str(_resolve_intrinsics(part, pseudo)) for part in parts)
    if any(key.startswith("Fn::") for key in value):
        raise ValueError(f"cannot resolve {sorted(value)} outside CloudFormation")
    return {key: _resolve_intrinsics(item, pseudo) for key, item in value.items()}
