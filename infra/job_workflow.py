"""The workflow that runs each long job: the state machine, the Glue job it starts, and their buckets."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_glue as glue
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.config import InfraSettings
from infra.constants import (
    ABORT_UPLOADS_AFTER,
    ACCESS_LOG_EXPIRATION,
    GLUE_SCRIPT,
    GLUE_TEMP_PREFIX,
    GLUE_VERSIONS,
    PIPELINE_ZIP_EXCLUDE,
    REPO_ROOT,
    STATE_MACHINE_TIMEOUT,
    SUMMARY_EXPIRATION,
    SUMMARY_PREFIX,
    TEMP_EXPIRATION,
)
from infra.nag import acknowledge, rendered
from infra.workflow import build_workflow, glue_spark_step, summary_objects_arn

EVENTS_PREFIX = "events/"
"""Where the pipeline writes by default (the receiver's SPARK_OUTPUT_URI / SPARK_QUARANTINE_URI)."""


class DataBuckets(Construct):
    """Raw input, curated output, quarantine and the Glue job's own files, plus their access logs.

    Every bucket: SSE-S3, public access blocked, TLS only, server access logs, incomplete uploads
    aborted. The quarantine's objects expire (they are for inspection, not for keeping). The Glue
    bucket holds the job's temporary files and the run summaries the workflow reads back, both
    short-lived. (The job's script and the `pipeline` zip are CDK assets, uploaded by `cdk deploy`
    to the bootstrap bucket and versioned by content hash.) Data buckets are retained when the
    stack is deleted.
    """

    def __init__(self, scope: Construct, construct_id: str, *, quarantine_expiration: cdk.Duration) -> None:
        super().__init__(scope, construct_id)
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,  # S3 server access logging accepts only SSE-S3
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=cdk.RemovalPolicy.RETAIN,
            lifecycle_rules=[
                s3.LifecycleRule(
                    expiration=ACCESS_LOG_EXPIRATION, abort_incomplete_multipart_upload_after=ABORT_UPLOADS_AFTER
                )
            ],
        )
        acknowledge(self.access_logs, "AwsSolutions-S1", "The access-log bucket itself: logging it would loop.")
        self.raw = self._bucket("Raw")
        self.curated = self._bucket("Curated")
        self.quarantine = self._bucket("Quarantine", s3.LifecycleRule(expiration=quarantine_expiration))
        self.glue = self._bucket(
            "Glue",
            s3.LifecycleRule(prefix=GLUE_TEMP_PREFIX, expiration=TEMP_EXPIRATION),
            s3.LifecycleRule(prefix=SUMMARY_PREFIX, expiration=SUMMARY_EXPIRATION),
        )

    def _bucket(self, name: str, *rules: s3.LifecycleRule) -> s3.Bucket:
        return s3.Bucket(
            self,
            name,
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix=f"{name.lower()}/",
            removal_policy=cdk.RemovalPolicy.RETAIN,
            lifecycle_rules=[s3.LifecycleRule(abort_incomplete_multipart_upload_after=ABORT_UPLOADS_AFTER), *rules],
        )


class JobWorkflow(Construct):
    """The Glue job from `pipeline/` and the Standard state machine from the shared builder.

    The Glue job uses the stable `PySparkEtlJob` L2 of aws-cdk-lib. Its role reads raw input, writes
    curated and quarantine output (a partition overwrite deletes what it replaces) and the run summary,
    and nothing else. A security configuration encrypts its CloudWatch logs and job bookmarks with a
    customer key. The state machine logs every event and is traced with X-Ray.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: InfraSettings,
        table: dynamodb.ITable,
        queue: sqs.IQueue,
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        self.buckets = DataBuckets(
            self, "Buckets", quarantine_expiration=cdk.Duration.days(settings.quarantine_expiration_days)
        )
        self.glue_job = self._glue_job(settings)
        spark_step = glue_spark_step(
            self.glue_job.job_name,
            timeout=cdk.Duration.minutes(settings.glue_timeout_minutes),
            summary_bucket=self.buckets.glue.bucket_name,
        )
        start = build_workflow(self, table=table, queue_arns=[queue.queue_arn], spark_step=spark_step)
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(start),
            state_machine_type=sfn.StateMachineType.STANDARD,
            timeout=STATE_MACHINE_TIMEOUT,
            tracing_enabled=True,
            logs=sfn.LogOptions(
                destination=logs.LogGroup(
                    self, "StateMachineLogs", retention=log_retention, removal_policy=cdk.RemovalPolicy.DESTROY
                ),
                level=sfn.LogLevel.ALL,
                include_execution_data=False,  # receipt handles and job parameters stay out of the logs
            ),
        )
        acknowledge(
            self.state_machine,
            "AwsSolutions-IAM5",
            "CDK's grants for Step Functions logging and X-Ray: CloudWatch Logs delivery and X-Ray actions take "
            "no resource ARN.",
            findings=("Resource::*",),
        )
        acknowledge(
            self.state_machine,
            "AwsSolutions-IAM5",
            "Each execution reads the summary its own Glue run wrote, named after the execution.",
            findings=("Resource::" + rendered(self, summary_objects_arn(self, self.buckets.glue.bucket_name)),),
        )

    def _glue_job(self, settings: InfraSettings) -> glue.PySparkEtlJob:
        buckets = self.buckets
        stack = cdk.Stack.of(self)
        # Glue names the job's log groups itself, all under /aws-glue/.
        glue_logs = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name="/aws-glue/*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        key = kms.Key(
            self,
            "GlueKey",
            enable_key_rotation=True,
            description="Glue job logs and bookmarks of the long-jobs pipeline",
        )
        # CloudWatch Logs encrypts the job's log groups with this key (Glue associates it).
        key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal(f"logs.{cdk.Aws.REGION}.amazonaws.com")],
                actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn": glue_logs}},
            )
        )
        security = glue.SecurityConfiguration(
            self,
            "GlueSecurity",
            cloud_watch_encryption=glue.CloudWatchEncryption.kms(key),
            job_bookmarks_encryption=glue.JobBookmarksEncryption.client_side_kms(key),
            s3_encryption=glue.S3Encryption.s3_managed(),
        )
        role = iam.Role(
            self,
            "GlueRole",
            assumed_by=iam.ServicePrincipal("glue.amazonaws.com"),
            description="The pipeline's Glue job: its data buckets, its logs, nothing else",
        )
        data = (buckets.raw, buckets.curated, buckets.quarantine)
        role.add_to_policy(iam.PolicyStatement(actions=["s3:ListBucket"], resources=[b.bucket_arn for b in data]))
        role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[buckets.raw.arn_for_objects("*")]))
        writable = [
            buckets.curated.arn_for_objects("*"),
            buckets.quarantine.arn_for_objects("*"),
            buckets.glue.arn_for_objects(GLUE_TEMP_PREFIX + "*"),
        ]
        role.add_to_policy(
            iam.PolicyStatement(
                # a partition overwrite deletes the files it replaces
                actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
                resources=writable,
            )
        )
        summaries = buckets.glue.arn_for_objects(SUMMARY_PREFIX + "*")
        role.add_to_policy(iam.PolicyStatement(actions=["s3:PutObject"], resources=[summaries]))
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:AssociateKmsKey"],
                resources=[glue_logs],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": "Glue"}},
            )
        )
        key.grant_encrypt_decrypt(role)
        pipeline_zip = s3_assets.Asset(
            self, "PipelinePackage", path=str(REPO_ROOT), exclude=PIPELINE_ZIP_EXCLUDE, ignore_mode=cdk.IgnoreMode.GIT
        )
        job = glue.PySparkEtlJob(
            self,
            "Job",
            role=role,
            script=glue.Code.from_asset(str(GLUE_SCRIPT)),
            extra_python_files=[glue.Code.from_bucket(pipeline_zip.bucket, pipeline_zip.s3_object_key)],
            glue_version=getattr(glue.GlueVersion, GLUE_VERSIONS[settings.glue_version]),
            worker_configuration=glue.WorkerConfiguration(
                worker_type=getattr(glue.WorkerType, settings.glue_worker_type.replace(".", "_")),
                number_of_workers=settings.glue_workers,
            ),
            timeout=cdk.Duration.minutes(settings.glue_timeout_minutes),
            max_retries=0,  # the workflow and the queue retry, with the lease's backoff
            max_concurrent_runs=settings.glue_max_concurrent_runs,
            job_run_queuing_enabled=True,  # runs past the limit wait in Glue's queue instead of failing
            security_configuration=security,
            enable_metrics=True,
            default_arguments={"--TempDir": buckets.glue.s3_url_for_object(GLUE_TEMP_PREFIX)},
            description="Raw JSON-lines events of one date to curated, partitioned Parquet (pipeline/)",
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5",
            "The job reads and replaces partitions whose keys depend on the data (date=/hour=), so it needs "
            "every object of its data buckets, and only its own prefixes of the Glue bucket.",
            findings=tuple(
                "Resource::" + rendered(self, arn) for arn in (buckets.raw.arn_for_objects("*"), *writable, summaries)
            ),
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5",
            "CDK's read grant on the job's script and pipeline zip, which are assets in the bootstrap bucket.",
            findings=(
                "Action::s3:GetBucket*",
                "Action::s3:GetObject*",
                "Action::s3:List*",
                "Resource::" + rendered(self, _asset_objects(stack)),
            ),
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5",
            "Glue names the job's log groups under /aws-glue/ itself; cloudwatch:PutMetricData takes no resource "
            "(limited to the Glue namespace by a condition); kms:GenerateDataKey*/ReEncrypt* are CDK's "
            "encrypt/decrypt grant on this job's own key.",
            findings=(
                "Resource::" + rendered(self, glue_logs),
                "Resource::*",
                "Action::kms:GenerateDataKey*",
                "Action::kms:ReEncrypt*",
            ),
        )
        return job


def _asset_objects(stack: cdk.Stack) -> str:
    """The objects of the CDK bootstrap bucket, where `cdk deploy` uploads the job's script and zip
    (as CDK's asset grant names them)."""
    qualifier = cdk.DefaultStackSynthesizer.DEFAULT_QUALIFIER
    return f"arn:{stack.partition}:s3:::cdk-{qualifier}-assets-{stack.account}-{stack.region}/*"
