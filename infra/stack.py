"""The one stack: composes the constructs of `infra/` and wires what each may use."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_notifications as s3n
from constructs import Construct

from infra.config import StackConfig
from infra.constants import APP_NAME, LOG_RETENTION
from infra.functions import LongJobFunctions, Resources
from infra.job_workflow import EVENTS_PREFIX, JobWorkflow
from infra.lease_table import LeaseTable
from infra.monitoring import Monitoring, Watched
from infra.nag import acknowledge, rendered
from infra.queues import JobQueues

NOTIFICATIONS_HANDLER_ID = "BucketNotificationsHandler050a0587b7544547bf325f094a3db834"
"""The id CDK gives the singleton function that configures bucket notifications."""


def stack_name(config: StackConfig) -> str:
    return f"{APP_NAME}-{config.infra.stage}"


class LongJobsStack(cdk.Stack):
    """Queue + DLQ, lease table, workflow with its Glue job and buckets, the three functions and
    monitoring, built from one validated `StackConfig`."""

    def __init__(self, scope: Construct, construct_id: str, *, config: StackConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        infra = config.infra
        queues = JobQueues(
            self,
            "Queues",
            visibility_timeout=cdk.Duration.seconds(infra.queue_visibility_timeout_s),
            max_receive_count=config.engine.max_receive_count,
        )
        leases = LeaseTable(self, "Leases", deletion_protection=infra.table_deletion_protection)
        workflow = JobWorkflow(
            self,
            "Workflow",
            settings=infra,
            table=leases.table,
            queue=queues.queue,
            log_retention=LOG_RETENTION[infra.log_retention_days],
        )
        buckets = workflow.buckets
        functions = LongJobFunctions(
            self,
            "Functions",
            config=config,
            resources=Resources(
                queue=queues.queue,
                dlq=queues.dlq,
                table=leases.table,
                state_machine=workflow.state_machine,
                spark_output_uri=buckets.curated.s3_url_for_object(EVENTS_PREFIX),
                spark_quarantine_uri=buckets.quarantine.s3_url_for_object(EVENTS_PREFIX),
            ),
        )
        if infra.s3_notifications:
            self._notify_jobs_queue(buckets.raw, queues)
        dashboard_name = f"{APP_NAME}-{infra.stage}"
        monitoring = Monitoring(
            self,
            "Monitoring",
            dashboard_name=dashboard_name,
            watched=Watched(
                queue=queues.queue,
                dlq=queues.dlq,
                receiver=functions.receiver,
                extender=functions.extender,
                watcher=functions.watcher,
                state_machine=workflow.state_machine,
                glue_job=workflow.glue_job,
            ),
            oldest_message_threshold=cdk.Duration.seconds(infra.oldest_message_alarm_threshold_s),
            alarm_email=infra.alarm_email,
        )

        for name, value, description in (
            ("QueueUrl", queues.queue.queue_url, "Send job messages here"),
            ("DeadLetterQueueUrl", queues.dlq.queue_url, "Rejected and exhausted jobs"),
            ("LeaseTableName", leases.table.table_name, "One lease per in-flight message"),
            ("StateMachineArn", workflow.state_machine.state_machine_arn, "The long-job workflow"),
            ("GlueJobName", workflow.glue_job.job_name, "The Spark pipeline"),
            ("DashboardName", dashboard_name, "CloudWatch dashboard"),
            ("AlarmTopicArn", monitoring.topic.topic_arn, "Alarm notifications"),
            ("RawBucketName", buckets.raw.bucket_name, "Raw JSON-lines input"),
            ("CuratedBucketName", buckets.curated.bucket_name, "Curated Parquet output"),
            ("QuarantineBucketName", buckets.quarantine.bucket_name, "Rejected rows"),
            ("GlueBucketName", buckets.glue.bucket_name, "Glue temporary files and run summaries"),
        ):
            cdk.CfnOutput(self, name, value=value, description=description)

    def _notify_jobs_queue(self, raw: s3.Bucket, queues: JobQueues) -> None:
        """Each object created in the raw bucket becomes a job (the receiver parses S3 notifications).
        CDK configures bucket notifications through its own custom-resource function."""
        raw.add_event_notification(s3.EventType.OBJECT_CREATED, s3n.SqsDestination(queues.queue))
        handler = self.node.try_find_child(NOTIFICATIONS_HANDLER_ID)
        if handler is None:
            raise RuntimeError(f"CDK's bucket-notifications handler is no longer {NOTIFICATIONS_HANDLER_ID!r}")
        basic = iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSLambdaBasicExecutionRole")
        acknowledge(
            handler,
            "AwsSolutions-IAM4",
            "CDK's own bucket-notifications custom resource: its role uses the Lambda basic execution policy.",
            findings=("Policy::" + rendered(handler, basic.managed_policy_arn),),
        )
        acknowledge(
            handler,
            "AwsSolutions-IAM5",
            "CDK's own bucket-notifications custom resource grants s3:PutBucketNotification on '*'; it only "
            "configures this stack's raw bucket.",
            findings=("Resource::*",),
        )
