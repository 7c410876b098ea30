"""EMR Serverless, the second platform of pyspark job types: a Spark application per type (or the user's
own, by ARN), one job role for every type's runs, and the workflow's `emr-serverless:startJobRun.sync`
state.

aws-cdk-lib has only the L1 `CfnApplication` and no Step Functions task for EMR Serverless, so the state
is a `CustomState` built from the optimized integration's page
(https://docs.aws.amazon.com/step-functions/latest/dg/connect-emr-serverless.html), whose request is
StartJobRun's (https://docs.aws.amazon.com/emr-serverless/latest/APIReference/API_StartJobRun.html):

| field | value | why |
| --- | --- | --- |
| `ClientToken`, `Name` | the execution's name | a StartJobRun retried after a lost answer finds its run |
| `JobDriver.SparkSubmit` | the Glue entry script; the `pipeline` zip and the type's code | one entry, two platforms |
| `ExecutionTimeoutMinutes` | the type's `timeout_minutes` (at most 12 h) | EMR Serverless cancels a run past it |
| `RetryPolicy.MaxAttempts` | 1 | the processor owns attempts (the batch default, said out loud) |
| `TimeoutSeconds` (the state's) | the run's limit and 15 minutes to start | a run stuck queued still ends its step |

When the execution is stopped (a cancel, a lost lease, the state machine's timeout), Step Functions makes a
best-effort attempt to cancel the run (https://docs.aws.amazon.com/step-functions/latest/dg/connect-to-resource.html,
"Run a Job"): it calls CancelJobRun, and the run goes CANCELLING, then CANCELLED. A cancel that does not
happen leaves the run to its own `ExecutionTimeoutMinutes`, which is why that limit is always set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_emrserverless as emrserverless
from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from longjobs.construct.constants import SUMMARY_PREFIX
from longjobs.construct.nag import acknowledge, rendered
from longjobs.construct.workflow import read_run_summary
from longjobs.engine.jobs import JobType
from longjobs.engine.jobs.names import state_prefix

EMR_SYNC_RESOURCE = "emr-serverless:startJobRun.sync"
"""The optimized integration's resource, after `arn:<partition>:states:::`."""
EMR_TIMEOUT_MARGIN_S = 15 * 60
"""The state's own timeout exceeds the run's limit by this: time for the run to be scheduled."""
EMR_TRANSIENT_ERRORS = ["EMRServerless.InternalServerException", "EMRServerless.ThrottlingException"]
"""StartJobRun's errors worth another try (the integration names a service error `EMRServerless.<code>`)."""
EVENTS_RULE = "StepFunctionsGetEventsForEMRServerlessJobRule"
"""The EventBridge rule Step Functions manages to learn when a `.sync` run ends."""
EMR_LOG_PREFIX = "emr-logs/"
"""Where the Glue bucket keeps the runs' driver and executor logs."""
APPLICATION_IDLE_STOP_MINUTES = 15


@dataclass(frozen=True)
class EmrRun:
    """What a type's StartJobRun names: its application, the job role, the entry and the files it imports."""

    application_id: str
    execution_role_arn: str
    entry_point: str
    py_files: tuple[str, ...]
    log_uri: str | None = None
    log_key_arn: str | None = None


def emr_serverless_step(runs: Mapping[str, EmrRun], *, summary_bucket: str | None = None) -> Any:
    """The cloud's pyspark step of an emr_serverless type: a run on its application, waited for (`.sync`).

    The run's arguments are the Glue entry's (`longjobs.pipeline.glue_entry`, which parses them with
    argparse off Glue). With `summary_bucket`, the entry writes the summary that `run` returned where the
    step reads it back, as on Glue; the branch's result then holds the run (`emr_job_run`) and the
    summary."""

    def build(scope: Construct, job_type: JobType) -> sfn.CustomState:
        run = runs[job_type.name]
        settings = job_type.emr
        prefix = state_prefix(job_type)
        arguments = [
            "'--job-module'",
            f"'{job_type.entry_module}'",
            "'--job-function'",
            f"'{job_type.entry_function}'",
            "'--params'",
            "States.JsonToString($.job.params)",
        ]
        if summary_bucket is not None:
            arguments += [
                "'--summary-path'",
                f"States.Format('s3://{summary_bucket}/{SUMMARY_PREFIX}{{}}.json', $$.Execution.Name)",
            ]
        memory = f"{settings.executor_memory_gb}g"
        submit = " ".join(
            [
                f"--py-files {','.join(run.py_files)}",
                f"--conf spark.driver.cores={settings.executor_cores} --conf spark.driver.memory={memory}",
                f"--conf spark.executor.cores={settings.executor_cores} --conf spark.executor.memory={memory}",
            ]
        )
        parameters: dict[str, Any] = {
            "ApplicationId": run.application_id,
            "ExecutionRoleArn": run.execution_role_arn,
            "ClientToken.$": "$$.Execution.Name",
            "Name.$": "$$.Execution.Name",
            "ExecutionTimeoutMinutes": settings.timeout_minutes,
            "RetryPolicy": {"MaxAttempts": 1},
            "JobDriver": {
                "SparkSubmit": {
                    "EntryPoint": run.entry_point,
                    "EntryPointArguments.$": f"States.Array({', '.join(arguments)})",
                    "SparkSubmitParameters": submit,
                }
            },
        }
        if run.log_uri is not None:
            monitoring: dict[str, Any] = {"LogUri": run.log_uri}
            if run.log_key_arn is not None:
                monitoring["EncryptionKeyArn"] = run.log_key_arn
            parameters["ConfigurationOverrides"] = {
                "MonitoringConfiguration": {"S3MonitoringConfiguration": monitoring}
            }
        state = sfn.CustomState(
            scope,
            f"Run{prefix}Job",
            state_json={
                "Type": "Task",
                "Resource": f"arn:{cdk.Aws.PARTITION}:states:::{EMR_SYNC_RESOURCE}",
                "Parameters": parameters,
                "TimeoutSeconds": settings.timeout_minutes * 60 + EMR_TIMEOUT_MARGIN_S,
                **({"ResultPath": "$.emr"} if summary_bucket is not None else {}),
            },
        )
        state.add_retry(
            errors=EMR_TRANSIENT_ERRORS,
            interval=cdk.Duration.seconds(5),
            backoff_rate=2,
            max_attempts=4,
            jitter_strategy=sfn.JitterType.FULL,
        )
        if summary_bucket is not None:
            outcome = {"emr_job_run": sfn.JsonPath.object_at("$.emr")}
            state.next(read_run_summary(scope, summary_bucket, prefix, outcome))
        return state

    return build


class EmrServerlessRunner(Construct):
    """The applications of the emr_serverless types and the role their runs assume.

    Each type without `application_arn` gets its own Spark application of its `release_label`
    (x86_64, started on the first run, stopped after 15 idle minutes, capped at `max_vcpu`). The job role
    starts with no grant: the workflow gives it the Glue jobs' data access, its logs prefix and its
    assets. `applications`: the created ones, by type; `application_arns` and `application_ids`: every
    type's; `role`: the job role; `grant_start`: what the state machine's role needs.
    """

    def __init__(self, scope: Construct, construct_id: str, *, job_types: Sequence[JobType]) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        self.role = iam.Role(
            self,
            "JobRole",
            assumed_by=iam.ServicePrincipal(
                "emr-serverless.amazonaws.com",
                conditions={"StringEquals": {"aws:SourceAccount": stack.account}},  # no confused deputy
            ),
            description="The EMR Serverless runs of the job types: their data buckets, their logs, nothing else",
        )
        self.applications: dict[str, emrserverless.CfnApplication] = {}
        self.application_arns: dict[str, str] = {}
        self.application_ids: dict[str, str] = {}
        for job_type in job_types:
            settings = job_type.emr
            if settings.application_arn is not None:
                arn = settings.application_arn
                self.application_ids[job_type.name] = _application_id(arn)
            else:
                application = emrserverless.CfnApplication(
                    self,
                    f"{state_prefix(job_type)}Application",
                    release_label=settings.release_label,
                    type="SPARK",
                    architecture="X86_64",
                    auto_start_configuration=emrserverless.CfnApplication.AutoStartConfigurationProperty(enabled=True),
                    auto_stop_configuration=emrserverless.CfnApplication.AutoStopConfigurationProperty(
                        enabled=True, idle_timeout_minutes=APPLICATION_IDLE_STOP_MINUTES
                    ),
                    maximum_capacity=emrserverless.CfnApplication.MaximumAllowedResourcesProperty(
                        cpu=f"{settings.max_vcpu} vCPU",
                        # the most memory its workers may hold: 8 GB per vCPU (EMR Serverless's largest ratio)
                        memory=f"{settings.max_vcpu * 8} GB",
                    ),
                )
                self.applications[job_type.name] = application
                arn = application.attr_arn
                self.application_ids[job_type.name] = application.attr_application_id
            self.application_arns[job_type.name] = arn

    def grant_start(self, role: iam.IRole) -> None:
        """What the state machine's role needs for `.sync` runs on these applications (the integration's
        IAM page): start runs, read and cancel them, pass the job role, and Step Functions' managed rule."""
        arns = sorted(set(self.application_arns.values()))
        role.add_to_principal_policy(iam.PolicyStatement(actions=["emr-serverless:StartJobRun"], resources=arns))
        runs = [f"{arn}/jobruns/*" for arn in arns]
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["emr-serverless:GetJobRun", "emr-serverless:CancelJobRun"], resources=runs)
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[self.role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "emr-serverless.amazonaws.com"}},
            )
        )
        rule = cdk.Stack.of(self).format_arn(service="events", resource="rule", resource_name=EVENTS_RULE)
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["events:PutTargets", "events:PutRule", "events:DescribeRule"], resources=[rule]
            )
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5",
            "The workflow reads and cancels the EMR Serverless runs it starts; each run's id is made by the "
            "service, under the application.",
            findings=tuple(_finding(self, arn) for arn in runs),
        )


def _application_id(arn: str) -> str:
    """The application's id, the last part of its ARN (`.../applications/<id>`), also for a token."""
    if cdk.Token.is_unresolved(arn):
        return cdk.Fn.select(2, cdk.Fn.split("/", arn))
    return arn.rsplit("/", 1)[-1]


def _finding(scope: Construct, arn: str) -> str:
    try:
        return "Resource::" + rendered(scope, arn)
    except ValueError:  # a token cdk-nag renders its own way
        return "Resource::*"
