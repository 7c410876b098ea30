"""The workflow that runs each long job: the state machine, a Glue job per pyspark job type, and their buckets."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
from aws_cdk import custom_resources as cr
from constructs import Construct

from longjobs.construct.assets import staged_package
from longjobs.construct.compliance import log_group_rules, suppress_checkov, suppress_guard
from longjobs.construct.config import InfraSettings
from longjobs.construct.constants import (
    ABORT_UPLOADS_AFTER,
    ACCESS_LOG_EXPIRATION,
    GLUE_SCRIPT,
    GLUE_TEMP_PREFIX,
    GLUE_VERSIONS,
    NONCURRENT_EXPIRATION,
    STATE_MACHINE_TIMEOUT,
    SUMMARY_EXPIRATION,
    SUMMARY_PREFIX,
    TEMP_EXPIRATION,
)
from longjobs.construct.deploy_calls import DeployCalls
from longjobs.construct.emr_serverless import EMR_LOG_PREFIX, EmrRun, EmrServerlessRunner, emr_serverless_step
from longjobs.construct.glue_runtime import EMR_RUNTIMES, GLUE_RUNTIMES
from longjobs.construct.job_code import StagedWheels, check_imports, stage_code, stage_wheels
from longjobs.construct.keys import allow_log_groups, key_user_statement, log_group_arn, service_key
from longjobs.construct.nag import acknowledge, rendered
from longjobs.construct.workflow import build_workflow, by_platform, glue_pyspark_step, summary_objects_arn
from longjobs.engine.jobs import JobCatalog, JobType, JobTypeError
from longjobs.engine.jobs.names import glue_job_id, state_prefix
from longjobs.engine.runs import RunPlace


class DataBuckets(Construct):
    """Raw input, curated output, quarantine and the Glue job's own files, plus their access logs.

    Every bucket: SSE-S3 (or SSE-KMS with `key`, the `kms_key` setting, and S3 Bucket Keys, so S3 asks
    KMS for a data key per bucket rather than per object), public access blocked, TLS only, server
    access logs, incomplete uploads aborted, versioning. An object of raw or curated overwritten (a
    producer writing a partition again, a job overwriting its output) can be recovered until its old
    version expires after `NONCURRENT_EXPIRATION`; the temporary data's old versions go with the data.
    The quarantine's objects expire (they are for inspection, not for keeping). The Glue bucket holds
    the jobs' temporary files and the run summaries the workflow reads back, both short-lived, and each
    type's zip of wheels (`job-code/`, copied there on deploy). (The jobs' scripts, code and the
    `pipeline` zip are CDK assets, uploaded by `cdk deploy` to the bootstrap bucket and versioned by
    content hash.) Data buckets are retained when the stack is deleted.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        quarantine_expiration: cdk.Duration,
        key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._key = key
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            # S3 server access logging delivers to SSE-S3 buckets and to customer-managed keys (CDK then
            # lets the logging service encrypt with the key), not to SSE-KMS with S3's AWS-managed key.
            **self._encryption(),
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=cdk.RemovalPolicy.RETAIN,
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    expiration=ACCESS_LOG_EXPIRATION,
                    noncurrent_version_expiration=TEMP_EXPIRATION,
                    abort_incomplete_multipart_upload_after=ABORT_UPLOADS_AFTER,
                )
            ],
        )
        acknowledge(self.access_logs, "AwsSolutions-S1", "The access-log bucket itself: logging it would loop.")
        suppress_guard(self.access_logs, "s3_bucket_logging_enabled_check", *self._guard_rules())
        suppress_checkov(self.access_logs, "CKV_AWS_18")
        self.raw = self._bucket("Raw", NONCURRENT_EXPIRATION)
        self.curated = self._bucket("Curated", NONCURRENT_EXPIRATION)
        # Temporary data: its old versions go as soon as the data itself would.
        self.quarantine = self._bucket(
            "Quarantine", quarantine_expiration, s3.LifecycleRule(expiration=quarantine_expiration)
        )
        self.glue = self._bucket(
            "Glue",
            TEMP_EXPIRATION,
            s3.LifecycleRule(prefix=GLUE_TEMP_PREFIX, expiration=TEMP_EXPIRATION),
            s3.LifecycleRule(prefix=SUMMARY_PREFIX, expiration=SUMMARY_EXPIRATION),
        )

    def _bucket(self, name: str, old_versions_kept: cdk.Duration, *rules: s3.LifecycleRule) -> s3.Bucket:
        """A versioned data bucket (an overwrite or delete can be undone for `old_versions_kept`)."""
        rules = (*rules, s3.LifecycleRule(noncurrent_version_expiration=old_versions_kept))
        bucket = s3.Bucket(
            self,
            name,
            **self._encryption(),
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix=f"{name.lower()}/",
            removal_policy=cdk.RemovalPolicy.RETAIN,
            versioned=True,
            lifecycle_rules=[s3.LifecycleRule(abort_incomplete_multipart_upload_after=ABORT_UPLOADS_AFTER), *rules],
        )
        suppress_guard(bucket, *self._guard_rules())
        return bucket

    def _encryption(self) -> dict[str, Any]:
        """SSE-S3, or the customer-managed key with S3 Bucket Keys."""
        if self._key is None:
            return {"encryption": s3.BucketEncryption.S3_MANAGED}
        return {"encryption": s3.BucketEncryption.KMS, "encryption_key": self._key, "bucket_key_enabled": True}

    def _guard_rules(self) -> tuple[str, ...]:
        """The Control Tower rules every bucket is exempt from (the KMS rule only without the customer key)."""
        return (
            *(("s3_bucket_default_encryption_kms_check",) if self._key is None else ()),
            "s3_bucket_object_lock_enabled_check",
            "s3_event_notifications_enabled_check",
        )


class JobWorkflow(Construct):
    """A Glue job per pyspark job type and the Standard state machine from the shared builder.

    Each Glue job uses the stable `PySparkEtlJob` L2 of aws-cdk-lib, with the project's entry script
    (`longjobs/pipeline/glue_entry.py`) and the type's entry file and the `longjobs.pipeline` zip as extra
    Python files.
    The jobs share one role: it reads raw input, writes curated and quarantine output (a partition
    overwrite deletes what it replaces) and the run summaries, and nothing else. A security
    configuration encrypts their CloudWatch logs and job bookmarks with a customer key: their own, or
    `key` (the `kms_key` setting), which then also encrypts what they write to S3, the buckets, the state
    machine's executions and its log group (named under `log_group_prefix`, which the key policy names).
    The state machine has a branch per job type, logs every event and is traced with X-Ray.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: InfraSettings,
        catalog: JobCatalog,
        table: dynamodb.ITable,
        queue: sqs.IQueue,
        log_retention: logs.RetentionDays,
        waiting_queues: Sequence[sqs.IQueue] = (),
        key: kms.IKey | None = None,
        log_group_prefix: str | None = None,
        deploy_calls: DeployCalls,
    ) -> None:
        super().__init__(scope, construct_id)
        self._key = key
        self._key_setting = settings.kms_key
        self._deploy_calls = deploy_calls
        self.buckets = DataBuckets(
            self, "Buckets", quarantine_expiration=cdk.Duration.days(settings.quarantine_expiration_days), key=key
        )
        pyspark = catalog.of_runner("pyspark")
        on_glue = [t for t in pyspark if t.platform == "glue"]
        on_emr = [t for t in pyspark if t.platform == "emr_serverless"]
        self.glue_jobs: dict[str, glue.PySparkEtlJob] = {}
        self.emr_serverless: EmrServerlessRunner | None = None
        pipeline_zip = (
            s3_assets.Asset(self, "PipelinePackage", path=str(staged_package("pipeline"))) if pyspark else None
        )
        emr_runs: dict[str, EmrRun] = {}
        if on_glue and pipeline_zip is not None:
            shared = self._glue_shared(pipeline_zip)
            for job_type in on_glue:
                self.glue_jobs[job_type.name] = self._glue_job(job_type, settings, shared)
        if on_emr and pipeline_zip is not None:
            self.emr_serverless = EmrServerlessRunner(self, "EmrServerless", job_types=on_emr)
            emr_runs = self._emr_runs(self.emr_serverless, on_emr, pipeline_zip)
        pyspark_step = by_platform(
            {
                "glue": glue_pyspark_step(
                    {name: job.job_name for name, job in self.glue_jobs.items()},
                    timeouts={t.name: cdk.Duration.minutes(settings.run_timeout_minutes(t) or 0) for t in on_glue},
                    summary_bucket=self.buckets.glue.bucket_name,
                ),
                "emr_serverless": emr_serverless_step(emr_runs, summary_bucket=self.buckets.glue.bucket_name),
            }
        )
        start = build_workflow(
            self,
            table=table,
            # an unparked message runs from its type's waiting queue: the workflow settles it there
            queue_arns=[queue.queue_arn, *(waiting.queue_arn for waiting in waiting_queues)],
            pyspark_step=pyspark_step,
            job_types=list(catalog),
        )
        state_machine_logs = logs.LogGroup(
            self,
            "StateMachineLogs",
            retention=log_retention,
            removal_policy=cdk.RemovalPolicy.DESTROY,
            encryption_key=key,
            log_group_name=f"{log_group_prefix}/state-machine" if log_group_prefix else None,
        )
        suppress_guard(state_machine_logs, *log_group_rules(settings.log_retention_days, customer_key=key is not None))
        if key is None:
            suppress_checkov(state_machine_logs, "CKV_AWS_158")
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(start),
            state_machine_type=sfn.StateMachineType.STANDARD,
            timeout=STATE_MACHINE_TIMEOUT,
            tracing_enabled=settings.tracing != "off",  # Step Functions' own X-Ray trace of each execution
            logs=sfn.LogOptions(
                destination=state_machine_logs,
                level=sfn.LogLevel.ALL,
                include_execution_data=False,  # receipt handles and job parameters stay out of the logs
            ),
            encryption_configuration=None if key is None else sfn.CustomerManagedEncryptionConfiguration(key),
        )
        if key is not None:
            # Its lease reads and writes (DynamoDB) and the run summaries it reads (S3) use the key too.
            self.state_machine.add_to_role_policy(key_user_statement(key))
        if self.emr_serverless is not None:
            self.emr_serverless.grant_start(self.state_machine.role)
        acknowledge(
            self.state_machine,
            "AwsSolutions-IAM5",
            "CDK's grants for Step Functions logging and X-Ray: CloudWatch Logs delivery and X-Ray actions take "
            "no resource ARN.",
            findings=("Resource::*",),
        )
        if settings.tracing == "off":
            suppress_guard(self.state_machine, "step_functions_state_machine_tracing_enabled_check")
            acknowledge(
                self.state_machine,
                "AwsSolutions-SF2",
                "The deployer chose tracing=off: no X-Ray trace of the functions or the executions (logs and the "
                "execution history remain).",
            )
        if pyspark:
            acknowledge(
                self.state_machine,
                "AwsSolutions-IAM5",
                "Each execution reads the summary its own Glue run wrote, named after the execution.",
                findings=("Resource::" + rendered(self, summary_objects_arn(self, self.buckets.glue.bucket_name)),),
            )
            suppress_checkov(self.state_machine.role.node.find_child("DefaultPolicy"), "CKV_AWS_108")
        for job_type in catalog.of_runner("state_machine"):
            self._acknowledge_nested(job_type)

    @property
    def job_runs(self) -> dict[str, RunPlace]:
        """Where each pyspark type's runs are: its Glue job, or its EMR Serverless application."""
        places = {name: RunPlace("glue", name=job.job_name) for name, job in self.glue_jobs.items()}
        if self.emr_serverless is not None:
            places |= {
                name: RunPlace("emr_serverless", name=app) for name, app in self.emr_serverless.application_ids.items()
            }
        return places

    @property
    def job_run_arns(self) -> dict[str, list[str]]:
        """The IAM resources of the calls that ask about those runs and stop them, by action: an EMR Serverless
        run is read by its id (GetJobRun), or looked for among the application's (ListJobRuns)."""
        arns: dict[str, list[str]] = {}
        if self.glue_jobs:
            jobs = [job.job_arn for _, job in sorted(self.glue_jobs.items())]
            arns |= {"glue:GetJobRuns": jobs, "glue:BatchStopJobRun": jobs}
        if self.emr_serverless is not None:
            applications = [arn for _, arn in sorted(self.emr_serverless.application_arns.items())]
            job_runs = [f"{arn}/jobruns/*" for arn in applications]
            arns |= {
                "emr-serverless:GetJobRun": job_runs,
                "emr-serverless:ListJobRuns": applications,
                "emr-serverless:CancelJobRun": job_runs,
            }
        return arns

    @property
    def glue_job(self) -> glue.PySparkEtlJob | None:
        """The built-in `spark` type's Glue job (the events pipeline), when it is declared."""
        return self.glue_jobs.get("spark")

    def _acknowledge_nested(self, job_type: JobType) -> None:
        """A `.sync` nested execution: CDK grants Describe/StopExecution on the user's machine's executions."""
        if job_type.state_machine is None:
            return
        arn = job_type.state_machine.arn
        stack = cdk.Stack.of(self)
        # As CDK's grant names them: in this stack's account and region (the machine must be there too).
        name = stack.split_arn(arn, cdk.ArnFormat.COLON_RESOURCE_NAME).resource_name
        executions = stack.format_arn(
            service="states",
            resource="execution",
            resource_name=f"{name}*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        try:
            finding = rendered(self, executions)
        except ValueError:  # a token of the user's app: the finding cannot be named before synthesis
            finding = None
        acknowledge(
            self.state_machine,
            "AwsSolutions-IAM5",
            f"Job type {job_type.name!r} runs the user's state machine and waits for it (.sync): its executions "
            "are named per run.",
            findings=(f"Resource::{finding}",) if finding else (),
        )

    def _grant_data(self, role: iam.Role) -> None:
        """What a run of any platform reads and writes: raw input, curated and quarantine output (a partition
        overwrite deletes the files it replaces), the Glue bucket's temporary files and the run summaries."""
        buckets = self.buckets
        data = (buckets.raw, buckets.curated, buckets.quarantine)
        role.add_to_policy(iam.PolicyStatement(actions=["s3:ListBucket"], resources=[b.bucket_arn for b in data]))
        role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[buckets.raw.arn_for_objects("*")]))
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
                resources=self._writable(),
            )
        )
        role.add_to_policy(iam.PolicyStatement(actions=["s3:PutObject"], resources=[self._summaries()]))

    def _writable(self) -> list[str]:
        buckets = self.buckets
        return [
            buckets.curated.arn_for_objects("*"),
            buckets.quarantine.arn_for_objects("*"),
            buckets.glue.arn_for_objects(GLUE_TEMP_PREFIX + "*"),
        ]

    def _summaries(self) -> str:
        return self.buckets.glue.arn_for_objects(SUMMARY_PREFIX + "*")

    def _acknowledge_data(self, role: iam.Role) -> None:
        acknowledge(
            role,
            "AwsSolutions-IAM5",
            "The jobs read and replace partitions whose keys depend on the data (date=/hour=), so they need "
            "every object of their data buckets, and only their own prefixes of the Glue bucket.",
            findings=tuple(
                "Resource::" + rendered(self, arn)
                for arn in (self.buckets.raw.arn_for_objects("*"), *self._writable(), self._summaries())
            ),
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5",
            "CDK's read grant on the jobs' scripts, entries and pipeline zip, which are assets in the bootstrap "
            "bucket.",
            findings=(
                "Action::s3:GetBucket*",
                "Action::s3:GetObject*",
                "Action::s3:List*",
                "Resource::" + rendered(self, _asset_objects(cdk.Stack.of(self))),
            ),
        )

    def _emr_runs(
        self, runner: EmrServerlessRunner, job_types: Sequence[JobType], pipeline_zip: s3_assets.Asset
    ) -> dict[str, EmrRun]:
        """Each emr_serverless type's run: the shared entry script, the `pipeline` zip and the type's code,
        its imports checked against its release, logs in the Glue bucket."""
        role = runner.role
        self._grant_data(role)
        logs_prefix = self.buckets.glue.arn_for_objects(EMR_LOG_PREFIX + "*")
        role.add_to_policy(iam.PolicyStatement(actions=["s3:PutObject"], resources=[logs_prefix]))
        if self._key is not None:
            self._key.grant_encrypt_decrypt(role)
        script = s3_assets.Asset(self, "EmrEntry", path=str(GLUE_SCRIPT))
        for asset in (script, pipeline_zip):
            asset.grant_read(role)
        self._acknowledge_data(role)
        acknowledge(
            role,
            "AwsSolutions-IAM5",
            "The runs write their driver and executor logs under their own prefix of the Glue bucket, named per "
            "run by EMR Serverless"
            + ("; kms:GenerateDataKey*/ReEncrypt* are CDK's encrypt/decrypt grant on the key." if self._key else "."),
            findings=(
                "Resource::" + rendered(self, logs_prefix),
                *(("Action::kms:GenerateDataKey*", "Action::kms:ReEncrypt*") if self._key else ()),
            ),
        )
        runs: dict[str, EmrRun] = {}
        for job_type in job_types:
            runtime = EMR_RUNTIMES[job_type.emr.release_label]
            checked = check_imports(job_type, runtime)
            if checked.problems:
                raise JobTypeError(f"job type {job_type.name!r}: " + "; ".join(checked.problems))
            for warning in checked.warnings:
                cdk.Annotations.of(self).add_warning_v2(f"longjobs:job-code:{job_type.name}", warning)
            code = s3_assets.Asset(self, f"{state_prefix(job_type)}EmrEntry", path=str(stage_code(job_type)))
            code.grant_read(role)
            runs[job_type.name] = EmrRun(
                application_id=runner.application_ids[job_type.name],
                execution_role_arn=role.role_arn,
                entry_point=script.s3_object_url,
                py_files=(pipeline_zip.s3_object_url, code.s3_object_url),
                log_uri=self.buckets.glue.s3_url_for_object(EMR_LOG_PREFIX),
                log_key_arn=self._key.key_arn if self._key is not None else None,
            )
        return runs

    def _security_configuration_name(self) -> str | None:
        """The Glue security configuration's name: CDK's generated one without `kms_key`, else one that names
        the key setting too. Glue cannot change a security configuration
        (AWS::Glue::SecurityConfiguration has no update handler, so CloudFormation replaces it), and
        CloudFormation refuses to replace a resource of a fixed name: a change of `kms_key` on a deployed
        stack must give a new name, or its deploy fails and rolls back."""
        if self._key_setting is None:
            return None
        digest = hashlib.sha256(self._key_setting.encode()).hexdigest()[:8]
        return f"{cdk.Names.unique_resource_name(self, max_length=200)}GlueSecurityKey{digest}"

    def _glue_shared(self, pipeline_zip: s3_assets.Asset) -> _GlueShared:
        """What every Glue job shares: its role, key and security configuration, and the `pipeline` zip."""
        glue_logs = log_group_arn(self, GLUE_LOG_GROUPS)
        key = self._key
        if key is None:
            key = service_key(self, "GlueKey", description="Glue job logs and bookmarks of the long-jobs pipeline")
            # CloudWatch Logs encrypts the job's log groups with this key (Glue associates it). The processor's
            # key says the same in the statement that names its own log groups.
            allow_log_groups(key, glue_logs)
        security = glue.SecurityConfiguration(
            self,
            "GlueSecurity",
            security_configuration_name=self._security_configuration_name(),
            # It holds no data (the keys, retained, hold what it encrypted), and a retained one would keep its
            # name taken: the next deploy of a destroyed stack, or a return to an earlier `kms_key`, would fail
            # to create it again.
            removal_policy=cdk.RemovalPolicy.DESTROY,
            cloud_watch_encryption=glue.CloudWatchEncryption.kms(key),
            job_bookmarks_encryption=glue.JobBookmarksEncryption.client_side_kms(key),
            s3_encryption=glue.S3Encryption.s3_managed() if self._key is None else glue.S3Encryption.kms(key),
        )
        role = iam.Role(
            self,
            "GlueRole",
            assumed_by=iam.ServicePrincipal("glue.amazonaws.com"),
            description="The job types' Glue jobs: their data buckets, their logs, nothing else",
        )
        self._grant_data(role)
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
        self._acknowledge_data(role)
        acknowledge(
            role,
            "AwsSolutions-IAM5",
            "Glue names the jobs' log groups under /aws-glue/ itself; cloudwatch:PutMetricData takes no resource "
            "(limited to the Glue namespace by a condition); kms:GenerateDataKey*/ReEncrypt* are CDK's "
            "encrypt/decrypt grant on the jobs' own key.",
            findings=(
                "Resource::" + rendered(self, glue_logs),
                "Resource::*",
                "Action::kms:GenerateDataKey*",
                "Action::kms:ReEncrypt*",
            ),
        )
        return _GlueShared(role=role, security=security, pipeline_zip=pipeline_zip)

    def _glue_job(self, job_type: JobType, settings: InfraSettings, shared: _GlueShared) -> glue.PySparkEtlJob:
        sizing = settings.glue_of(job_type)
        version = str(sizing.version)
        runtime = GLUE_RUNTIMES[version]
        construct_id = glue_job_id(job_type)
        code = s3_assets.Asset(self, f"{construct_id}Entry", path=str(stage_code(job_type)))
        arguments = {
            "--TempDir": self.buckets.glue.s3_url_for_object(GLUE_TEMP_PREFIX),
            "--job-module": job_type.entry_module,
            "--job-function": job_type.entry_function,
        }
        wheels = stage_wheels(job_type, runtime)
        copier = None
        if wheels is not None:
            url, copier = self._staged_wheels(construct_id, job_type, wheels, shared)
            arguments["--additional-python-modules"] = url
            arguments["--python-modules-installer-option"] = "--no-index"  # the zip is the only index
        checked = check_imports(job_type, runtime, wheels.modules if wheels is not None else frozenset())
        if checked.problems:
            raise JobTypeError(f"job type {job_type.name!r}: " + "; ".join(checked.problems))
        for warning in checked.warnings:
            cdk.Annotations.of(self).add_warning_v2(f"longjobs:job-code:{job_type.name}", warning)
        job = glue.PySparkEtlJob(
            self,
            construct_id,
            role=shared.role,
            script=glue.Code.from_asset(str(GLUE_SCRIPT)),
            extra_python_files=[
                glue.Code.from_bucket(shared.pipeline_zip.bucket, shared.pipeline_zip.s3_object_key),
                glue.Code.from_bucket(code.bucket, code.s3_object_key),
            ],
            glue_version=getattr(glue.GlueVersion, GLUE_VERSIONS[version]),
            worker_configuration=glue.WorkerConfiguration(
                worker_type=getattr(glue.WorkerType, str(sizing.worker_type).replace(".", "_")),
                number_of_workers=sizing.workers or settings.glue_workers,
            ),
            timeout=cdk.Duration.minutes(sizing.timeout_minutes or settings.glue_timeout_minutes),
            max_retries=0,  # the workflow and the queue retry, with the lease's backoff
            max_concurrent_runs=sizing.max_concurrent_runs,
            job_run_queuing_enabled=True,  # runs past the limit wait in Glue's queue instead of failing
            security_configuration=shared.security,
            enable_metrics=True,
            default_arguments=arguments,
            description=glue_description(job_type),
        )
        if copier is not None:
            job.node.add_dependency(copier)  # the job names the zip only once it is in the Glue bucket
        return job

    def _staged_wheels(
        self, construct_id: str, job_type: JobType, wheels: StagedWheels, shared: _GlueShared
    ) -> tuple[str, cr.AwsCustomResource]:
        """Upload the type's zip of wheels and copy it into the Glue bucket under a name Glue recognises.

        Glue installs a zip of wheels only when its name ends in `.gluewheels.zip`, and a CDK asset's key is
        its content hash with `.zip`: no CloudFormation resource creates an S3 object under a chosen key, so
        an `AwsCustomResource` copies it (CopyObject) on create and on each change of its content.
        """
        asset = s3_assets.Asset(self, f"{construct_id}Wheels", path=str(wheels.folder))
        key = f"{JOB_CODE_PREFIX}{job_type.name}/{asset.asset_hash}.gluewheels.zip"
        bucket = self.buckets.glue
        copy = cr.AwsSdkCall(
            service="S3",
            action="copyObject",
            parameters={
                "Bucket": bucket.bucket_name,
                "Key": key,
                "CopySource": f"{asset.s3_bucket_name}/{asset.s3_object_key}",
            },
            physical_resource_id=cr.PhysicalResourceId.of(key),
        )
        copier = self._deploy_calls.call(
            self,
            f"{construct_id}WheelsCopy",
            copy,
            [
                iam.PolicyStatement(
                    actions=["s3:GetObject"], resources=[asset.bucket.arn_for_objects(asset.s3_object_key)]
                ),
                iam.PolicyStatement(actions=["s3:PutObject"], resources=[bucket.arn_for_objects(key)]),
            ],
            key_actions=("kms:GenerateDataKey", "kms:Decrypt"),  # S3 writes the copy with a data key of the key
        )
        shared.role.add_to_policy(
            iam.PolicyStatement(actions=["s3:GetObject"], resources=[bucket.arn_for_objects(key)])
        )
        return bucket.s3_url_for_object(key), copier


GLUE_DESCRIPTION_MAX_BYTES = 2_048
"""The longest Glue job description, in UTF-8 bytes
(https://docs.aws.amazon.com/glue/latest/dg/aws-glue-api-jobs-job.html, `Description`)."""


def glue_description(job_type: JobType) -> str:
    """The type's description as its Glue job's, cut to Glue's limit in UTF-8 bytes (a declaration's 1,024
    characters may take up to 4,096 bytes), never inside a character."""
    text = job_type.description or f"The {job_type.name} job type"
    return text.encode()[:GLUE_DESCRIPTION_MAX_BYTES].decode(errors="ignore")


GLUE_LOG_GROUPS = "/aws-glue/*"
"""Glue names the jobs' log groups itself, all under /aws-glue/."""

JOB_CODE_PREFIX = "job-code/"
"""Where the Glue bucket keeps each type's zip of wheels (`job-code/<type>/<hash>.gluewheels.zip`)."""


@dataclass(frozen=True)
class _GlueShared:
    role: iam.Role
    security: glue.SecurityConfiguration
    pipeline_zip: s3_assets.Asset


def _asset_objects(stack: cdk.Stack) -> str:
    """The objects of the CDK bootstrap bucket, where `cdk deploy` uploads the job's script and zip
    (as CDK's asset grant names them)."""
    qualifier = cdk.DefaultStackSynthesizer.DEFAULT_QUALIFIER
    return f"arn:{stack.partition}:s3:::cdk-{qualifier}-assets-{stack.account}-{stack.region}/*"
