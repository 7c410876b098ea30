"""The bundled app's stack: a `LongJobProcessor` and the outputs an operator needs, nothing else."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from longjobs.construct.config import StackConfig
from longjobs.construct.constants import APP_NAME
from longjobs.construct.processor import LongJobProcessor
from longjobs.engine.jobs import JobCatalog

PROCESSOR_ID = "Default"
"""The processor's id in the stack. CDK leaves a `Default` id out of logical ids, so each resource's logical
id is the one it would have as a direct child of the stack. A stack deployed with the resources as its direct
children therefore updates to this one without replacing any."""


def stack_name(config: StackConfig) -> str:
    return f"{APP_NAME}-{config.infra.stage}"


class LongJobsStack(cdk.Stack):
    """The processor from one validated `StackConfig` and the job catalog (`jobs.json`), with outputs.

    cdk-nag runs on the whole app (`app.py`), which covers CDK's stack-wide singletons as well, so the
    processor does not check itself a second time."""

    def __init__(
        self, scope: Construct, construct_id: str, *, config: StackConfig, catalog: JobCatalog, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        dashboard_name = f"{APP_NAME}-{config.infra.stage}"
        self.processor = processor = LongJobProcessor(
            self,
            PROCESSOR_ID,
            job_types=list(catalog),
            s3_triggers=list(catalog.s3_triggers),
            include_builtin_job_types=False,  # the catalog already holds them (jobs.json lists them)
            infra=config.infra,
            engine=_engine_values(config),
            dashboard_name=dashboard_name,
            nag=False,
        )
        buckets = processor.buckets
        outputs = [
            ("QueueUrl", processor.queue.queue_url, "Send job messages here"),
            ("DeadLetterQueueUrl", processor.dead_letter_queue.queue_url, "Rejected and exhausted jobs"),
            ("LeaseTableName", processor.table.table_name, "One lease per in-flight message"),
            ("StateMachineArn", processor.state_machine.state_machine_arn, "The long-job workflow"),
            ("DashboardName", dashboard_name, "CloudWatch dashboard"),
            ("AlarmTopicArn", processor.alarm_topic.topic_arn, "Alarm notifications"),
            ("RawBucketName", buckets.raw.bucket_name, "Raw input"),
            ("CuratedBucketName", buckets.curated.bucket_name, "Curated output"),
            ("QuarantineBucketName", buckets.quarantine.bucket_name, "Rejected rows"),
            ("GlueBucketName", buckets.glue.bucket_name, "Glue temporary files and run summaries"),
        ]
        if "spark" in processor.glue_jobs:
            outputs.append(("GlueJobName", processor.glue_jobs["spark"].job_name, "The events pipeline (spark)"))
        for name, value, description in outputs:
            cdk.CfnOutput(self, name, value=value, description=description)
        for job_type, job in processor.glue_jobs.items():
            cdk.CfnOutput(
                self,
                f"GlueJob{job_type.replace('-', '').replace('_', '')}",
                value=job.job_name,
                description=f"The Glue job of the {job_type} job type",
            )


def _engine_values(config: StackConfig) -> dict[str, Any]:
    """The engine settings chosen in context (the processor fills in the rest with their defaults)."""
    fixed = {"extender_period_s", "receiver_timeout_s"}
    return {name: getattr(config.engine, name) for name in config.engine.model_fields_set if name not in fixed}
