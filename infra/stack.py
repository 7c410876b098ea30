"""The bundled app's stack: a `LongJobProcessor` and the outputs an operator needs, nothing else."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from longjobs.construct.config import StackConfig
from longjobs.construct.constants import APP_NAME
from longjobs.construct.processor import LongJobProcessor
from longjobs.engine.jobs import JobCatalog, JobTypeError

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
        check_output_ids(catalog)
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
            ("MetricsService", processor.metrics_service, "The service dimension of the processor's metrics"),
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
                glue_output_id(job_type),
                value=job.job_name,
                description=f"The Glue job of the {job_type} job type",
            )


def glue_output_id(job_type: str) -> str:
    """The output naming a Glue type's job: `GlueJob` and the type's name without '-' and '_', case kept."""
    return f"GlueJob{job_type.replace('-', '').replace('_', '')}"


def check_output_ids(catalog: JobCatalog) -> None:
    """Refuse two Glue types whose outputs would share an id (`wordcount`, `word_count`). The catalog's own id
    check compares the construct's CamelCase ids, which differ for them; CDK would stop on the second output
    with a traceback that names no type."""
    owners: dict[str, str] = {}
    problems = []
    for job_type in catalog:
        if job_type.runner != "pyspark" or job_type.platform != "glue":
            continue
        output = glue_output_id(job_type.name)
        first = owners.setdefault(output, job_type.name)
        if first != job_type.name:
            problems.append(
                f"{first!r} and {job_type.name!r} would both give the stack the output {output!r} (a Glue type's "
                "output is GlueJob and its name without '-' and '_'): rename one of them"
            )
    if problems:
        raise JobTypeError("invalid job types: " + "; ".join(problems))


def _engine_values(config: StackConfig) -> dict[str, Any]:
    """The engine settings chosen in context (the processor fills in the rest with their defaults)."""
    fixed = {"extender_period_s", "receiver_timeout_s"}
    return {name: getattr(config.engine, name) for name in config.engine.model_fields_set if name not in fixed}
