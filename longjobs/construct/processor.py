"""`LongJobProcessor`: the whole processor as one construct, to place in any stack of any CDK app.

    from longjobs.construct import LongJobProcessor

    processor = LongJobProcessor(
        self, "Jobs",
        job_types=[{"name": "wordcount", "runner": "pyspark", "entry": "jobs/wordcount.py:run",
                    "params_schema": {"type": "object", "required": ["input"], ...}}],
        infra={"receiver_max_concurrency": 20},
        engine={"max_attempts": 7},
    )
    processor.queue            # send job messages here

or `LongJobProcessor(self, "Jobs", LongJobProcessorProps(job_types=[...], existing_table=table))`.

It builds the jobs queue and its DLQ, the lease table, the three functions, the workflow with a Choice
branch and (pyspark) a Glue job per job type, the data buckets, and the dashboard and alarms.

The props are `longjobs.construct.props.LongJobProcessorProps`, each with its default documented there:
pass a props object, keywords of the same names, or both (keywords win). The settings (`infra`,
`engine`) are validated together and with the job types: a bad value or declaration raises `ConfigError`
or `JobTypeError` naming it. `existing_queue`, `existing_dead_letter_queue` and `existing_table` bring
resources the application has; what a synth can see of them is checked, and the processor's roles get
the use of their customer-managed keys.

FIFO (`engine={"fifo": True}`, the bundled app's `-c fifo=true`): the jobs queue and its DLQ are FIFO,
jobs run in order per message group, and the event source mapping takes at most
`longjobs.construct.config.StackConfig.mapping_batch_size` records with no batching window. S3 cannot notify a FIFO
queue, so `s3_notifications` is refused with it.

Nothing is added outside the construct's scope, with one exception that CDK makes: S3 notifications
(`infra={"s3_notifications": True}`) are configured by CDK's stack-wide custom-resource function,
whose two cdk-nag findings are acknowledged on that function.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import aws_cdk as cdk
import jsii
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_glue as glue
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_notifications as s3n
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import custom_resources as cr
from aws_cdk.interfaces import aws_s3 as s3_refs
from constructs import Construct

from longjobs.construct.compliance import cdk_handler
from longjobs.construct.config import ConfigError, StackConfig, check_admission, check_region, make_config
from longjobs.construct.constants import FEATURE_FLAGS, LOG_RETENTION
from longjobs.construct.deploy_calls import DeployCalls
from longjobs.construct.functions import LongJobFunctions, Resources
from longjobs.construct.job_workflow import GLUE_LOG_GROUPS, DataBuckets, JobWorkflow
from longjobs.construct.keys import (
    KEY_USER_ACTIONS,
    allow_log_groups,
    key_user_statement,
    log_group_arn,
    processor_key,
)
from longjobs.construct.lease_table import LeaseTable
from longjobs.construct.monitoring import Monitoring, Watched
from longjobs.construct.nag import NagValidation, acknowledge
from longjobs.construct.props import LongJobProcessorProps, check_existing, content_deduplicated, data_keys
from longjobs.construct.queues import JobQueues
from longjobs.engine.jobs import JobCatalog, JobTypeError, load_catalog
from longjobs.engine.jobs.published import CATALOG_KEY, catalog_item, receiver_checks
from longjobs.engine.jobs.triggers import notification_filter

NOTIFICATIONS_HANDLER_ID = "BucketNotificationsHandler050a0587b7544547bf325f094a3db834"
"""The id CDK gives the singleton function that configures bucket notifications."""


class LongJobProcessor(Construct):
    """The processor (see the module's docstring); its parts are attributes."""

    props: LongJobProcessorProps
    queue: sqs.IQueue
    dead_letter_queue: sqs.IQueue
    table: dynamodb.ITable
    state_machine: sfn.StateMachine
    dashboard: cw.Dashboard
    functions: LongJobFunctions
    buckets: DataBuckets
    glue_jobs: dict[str, glue.PySparkEtlJob]
    catalog: JobCatalog
    config: StackConfig

    def __init__(
        self, scope: Construct, construct_id: str, props: LongJobProcessorProps | None = None, /, **fields: Any
    ) -> None:
        super().__init__(scope, construct_id)
        if props is not None and not isinstance(props, LongJobProcessorProps):
            raise TypeError(
                f"props: a LongJobProcessorProps, not a {type(props).__name__}: pass the fields as keyword "
                "arguments, or LongJobProcessorProps(**fields)"
            )
        self.props = props = (props or LongJobProcessorProps()).with_fields(**fields)
        for flag, value in FEATURE_FLAGS.items():  # on this scope only, before any child reads them
            self.node.set_context(flag, value)
        self.catalog = load_catalog(
            job_types=props.job_types,
            s3_triggers=props.s3_triggers,
            include_builtins=props.include_builtin_job_types,
            strict=True,
        )
        self.config = config = make_config(infra=props.infra, engine=props.engine, catalog=self.catalog)
        check_existing(props, config, cdk.Stack.of(self))
        region = cdk.Stack.of(self).region
        if not cdk.Token.is_unresolved(region):  # an environment-agnostic stack's region is known at deploy only
            check_region(config, self.catalog, region)
        settings = config.infra
        if config.engine.fifo and not content_deduplicated(props.existing_queue):
            cdk.Annotations.of(self).add_warning_v2(
                "longjobs:fifo-deduplication",
                "existing_queue has no content-based deduplication: each producer's send must give a "
                "deduplication id (docs/fifo.md's sends give none), and an EventBridge rule cannot target it",
            )
        if config.engine.fifo and (limited := [t.name for t in self.catalog.limited()]):
            cdk.Annotations.of(self).add_warning_v2(
                "longjobs:fifo-max-concurrency",
                f"job types {', '.join(limited)} declare a concurrency limit (max_concurrency, or "
                "glue.max_concurrent_runs), which a FIFO queue does not enforce: "
                "a message group runs one job at a time, so bound how many run at once with groups (docs/fifo.md)",
            )
        # A Glue type runs at most its Glue job's max concurrent runs at once (Glue refuses more): that is
        # its limit unless it declares one, so its backlog waits in SQS, not in Glue's queue. (An EMR
        # Serverless application queues runs past its capacity instead: no limit unless declared.)
        self.catalog = self.catalog.with_limits(
            {
                t.name: settings.glue_of(t).max_concurrent_runs or 1
                for t in self.catalog.of_runner("pyspark")
                if t.platform == "glue"
            }
        )
        check_admission(config, self.catalog)  # before `with_glue`, so a refusal names where the timeout is set
        self.catalog = self.catalog.with_glue(settings.glue_of)
        retention = LOG_RETENTION[settings.log_retention_days]
        # The `kms_key` setting: one customer-managed key for everything that stores data (none by default).
        self.key = key = processor_key(self, "Key", settings.kms_key)
        log_group_prefix = self.log_group_prefix if key is not None else None

        queues = JobQueues(
            self,
            "Queues",
            visibility_timeout=cdk.Duration.seconds(settings.queue_visibility_timeout_s),
            retention=cdk.Duration.seconds(config.engine.queue_retention_s),
            max_receive_count=config.engine.redrive_receives,
            job_types=[t.name for t in self.catalog],
            fifo=config.engine.fifo,
            key=key,
            existing_queue=props.existing_queue,
            existing_dlq=props.existing_dead_letter_queue,
            retain=settings.table_deletion_protection,
        )
        leases = (
            LeaseTable(self, "Leases", deletion_protection=settings.table_deletion_protection, key=key)
            if props.existing_table is None
            else None
        )
        table = props.existing_table or cast(LeaseTable, leases).table
        self.deploy_calls = DeployCalls(
            self,
            "DeployCalls",
            log_retention=retention,
            log_retention_days=settings.log_retention_days,
            key=key,
            log_group_prefix=log_group_prefix,
        )
        workflow = JobWorkflow(
            self,
            "Workflow",
            settings=settings,
            catalog=self.catalog,
            table=table,
            queue=queues.queue,
            log_retention=retention,
            waiting_queues=list(queues.waiting.values()),
            key=key,
            log_group_prefix=log_group_prefix,
            deploy_calls=self.deploy_calls,
        )
        buckets = workflow.buckets
        self.metrics_service = cdk.Names.unique_resource_name(self, allowed_special_characters="-")
        """The `service` dimension of the processor's metrics, and its functions' Powertools service: its stack's
        name (unique in an account and region, unlike the stack's id: one app may deploy its stack under two
        names), and its path in that stack with a hash of both when it is not the stack's `Default`. So two
        processors in one account and region (two stacks, or two processors in one) never share a metric, an
        alarm or a dashboard graph."""
        locations = {  # the buckets a type's defaults name (`{curated}`, ...)
            "curated_uri": buckets.curated.s3_url_for_object(""),
            "quarantine_uri": buckets.quarantine.s3_url_for_object(""),
            "raw_uri": buckets.raw.s3_url_for_object(""),
        }
        self.functions = LongJobFunctions(
            self,
            "Functions",
            config=config,
            catalog=self.catalog,
            resources=Resources(
                queue=queues.queue,
                dlq=queues.dlq,
                table=table,
                state_machine=workflow.state_machine,
                waiting=queues.waiting,
                curated_uri=locations["curated_uri"],
                quarantine_uri=locations["quarantine_uri"],
                raw_uri=locations["raw_uri"],
                key=key,
                log_group_prefix=log_group_prefix,
                job_runs=workflow.job_runs,
                job_run_arns=workflow.job_run_arns,
                metrics_service=self.metrics_service,
            ),
        )
        if key is not None and log_group_prefix is not None:
            # CloudWatch Logs may use the key for the processor's log groups and the Glue jobs' only.
            allow_log_groups(
                key,
                log_group_arn(self, f"{log_group_prefix}/*"),
                *([log_group_arn(self, GLUE_LOG_GROUPS)] if workflow.glue_jobs else []),
            )
        if settings.s3_notifications:
            self._notify_jobs_queue(buckets.raw, queues.queue)
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            dashboard_name=props.dashboard_name,
            watched=Watched(
                queue=queues.queue,
                dlq=queues.dlq,
                receiver=self.functions.receiver,
                extender=self.functions.extender,
                watcher=self.functions.watcher,
                state_machine=workflow.state_machine,
                glue_jobs=workflow.glue_jobs,
                waiting={n: q for n, q in queues.waiting.items() if self.catalog.limit(n) is not None},
                job_types=tuple(t.name for t in self.catalog if t.runner != "inline"),
                service=self.metrics_service,
            ),
            oldest_message_threshold=cdk.Duration.seconds(settings.oldest_message_alarm_threshold_s(self.catalog)),
            alarm_email=settings.alarm_email,
            key=key,
        )
        if props.nag:
            self.node.add_validation(NagValidation(self))
        for data_key in data_keys(props):  # the existing resources' own keys
            functions = (self.functions.receiver, self.functions.extender, self.functions.watcher)
            for grantee in (*functions, workflow.state_machine):
                grantee.add_to_role_policy(key_user_statement(data_key))

        self.catalog_item = self._publish_catalog(table, data_keys(props), locations)

        self.queues, self.leases, self.workflow = queues, leases, workflow
        self.queue, self.dead_letter_queue = queues.queue, queues.dlq
        self.table = table
        self.state_machine = workflow.state_machine
        self.buckets = buckets
        self.glue_jobs = workflow.glue_jobs
        self.dashboard = self.monitoring.dashboard
        self.alarm_topic = self.monitoring.topic
        for producer in props.producers:
            self.grant_send_jobs(producer)

    def _publish_catalog(
        self, table: dynamodb.ITable, data_keys: Sequence[kms.IKey], locations: Mapping[str, str]
    ) -> cr.AwsCustomResource:
        """Write the functions' job catalog, and the settings their receiver checks bodies with (`locations`:
        the buckets whose URIs fill a type's defaults), into the lease table on every deploy that changes
        them, for the operator's command (`longjobs.engine.jobs.published`)."""
        try:
            item = catalog_item(
                self.catalog,
                source=f"stack {cdk.Stack.of(self).stack_name}",
                checks=receiver_checks(self.config.engine, locations),
            )
        except ValueError as exc:
            raise JobTypeError(str(exc)) from None
        put = cr.AwsSdkCall(
            service="DynamoDB",
            action="putItem",
            parameters={"TableName": table.table_name, "Item": item},
            physical_resource_id=cr.PhysicalResourceId.of(CATALOG_KEY),
        )
        published = self.deploy_calls.call(
            self,
            "PublishedCatalog",
            put,
            [iam.PolicyStatement(actions=["dynamodb:PutItem"], resources=[table.table_arn])],
            key_actions=KEY_USER_ACTIONS,  # DynamoDB encrypts the item with the table's key
        )
        for data_key in data_keys:  # an existing table's own key
            published.grant_principal.add_to_principal_policy(key_user_statement(data_key))
        return published

    def grant_send_jobs(self, producer: iam.IGrantable) -> iam.Grant:
        """Let `producer` send job messages: `sqs:SendMessage` and the queue attributes on the jobs queue,
        and, when the queue has a customer-managed key, `SEND_KEY_ACTIONS` on it. CDK's grants write each
        where it must be: on the producer's own policy in this account, on the queue's policy (and the
        key's) for another account's principal. The key actions are the two a send needs, not those of
        CDK's `grant_send_messages` (`kms:ReEncrypt*`, `kms:GenerateDataKey*`), whose wildcards cdk-nag
        (AwsSolutions-IAM5) would find in a policy of the application's, one this construct does not own.
        An imported queue's policy is not the stack's to change, so a producer its own policy cannot let send
        (an account, an ARN, a service, a role of another account) is refused there: CDK would leave its grant
        out without a word."""
        principal = producer.grant_principal
        if not isinstance(self.queue, sqs.Queue) and not _own_policy_grants(self, self.queue, producer):
            raise ConfigError(
                f"producers: {cast(Any, principal).to_string()} can only be let send on the queue's own policy, and "
                "existing_queue is imported, so the stack cannot change that policy: allow it sqs:SendMessage "
                "there yourself, and leave it out of producers"
            )
        grant = self.queue.grant(producer, *SEND_ACTIONS)
        key = self.queue.encryption_master_key
        return grant if key is None else grant.combine(key.grant(producer, *SEND_KEY_ACTIONS))

    @property
    def log_group_prefix(self) -> str:
        """Where the processor's log groups are named with the `kms_key` setting (`<prefix>/receiver`, ...):
        unique to this processor in its account and region, so the key policy can name them, and them only."""
        return f"/longjobs/{cdk.Stack.of(self).stack_name}/{cdk.Names.unique_id(self)}"

    def _notify_jobs_queue(self, raw: s3.Bucket, queue: sqs.IQueue) -> None:
        """The raw bucket's created objects that may be a trigger's completion marker become messages (the
        receiver parses S3 notifications, and acknowledges any object that is no marker). One filter per
        marker name: S3 refuses overlapping filters, so a marker's prefixes are merged into none."""
        if not self.catalog.s3_triggers:
            raise ConfigError(
                "s3_notifications: the job types have no s3_triggers, so no object could start a job: give "
                "s3_triggers, or leave s3_notifications off"
            )
        markers: dict[str, set[str]] = {}
        for trigger in self.catalog.s3_triggers:
            markers.setdefault(trigger.marker, set()).add(trigger.prefix)
        for marker, prefixes in sorted(markers.items()):
            prefix = next(iter(prefixes)) if len(prefixes) == 1 else ""
            raw.add_event_notification(
                s3.EventType.OBJECT_CREATED,
                # The processor's own queue uses its key; the application's queue gets CDK's grants on its own.
                KeyEncryptedQueueDestination(queue, self.key)
                if self.key is not None and self.props.existing_queue is None
                else s3n.SqsDestination(queue),
                s3.NotificationKeyFilter(
                    prefix=notification_filter(prefix) or None, suffix=notification_filter(marker)
                ),
            )
        # CDK configures bucket notifications through its own stack-wide function (a singleton).
        handler = cdk.Stack.of(self).node.try_find_child(NOTIFICATIONS_HANDLER_ID)
        if handler is None:
            raise RuntimeError(f"CDK's bucket-notifications handler is no longer {NOTIFICATIONS_HANDLER_ID!r}")
        cdk_handler(handler, "configures the raw bucket's notifications")
        acknowledge(
            handler,
            "AwsSolutions-IAM5",
            "CDK's own bucket-notifications custom resource grants s3:PutBucketNotification on '*'; it only "
            "configures the processor's raw bucket.",
            findings=("Resource::*",),
        )


SEND_ACTIONS = ("sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl")
"""The actions of CDK's `grant_send_messages`, in its order (so its own statement is the same one)."""
SEND_KEY_ACTIONS = ("kms:GenerateDataKey", "kms:Decrypt")
"""What a send to a queue encrypted with a customer-managed key needs of that key, as the SQS Developer Guide's
"Amazon SQS key management" says, and what docs/operate.md gives `longjobs submit`."""


def _own_policy_grants(scope: Construct, queue: sqs.IQueue, producer: iam.IGrantable) -> bool:
    """Whether the stack can let `producer` send to `queue` on the producer's own policy, as CDK's grant writes
    it: a principal that takes a policy statement (a role, a user, a role wrapped with conditions) of the
    stack's account, or of one the synth cannot tell. An account, an ARN or a service takes none, and CDK adds
    none to a role of another account. The look adds the very statement CDK's grant then adds to the principal."""
    account, ours = producer.grant_principal.principal_account, cdk.Stack.of(scope).account
    if account is None:
        return False
    if not cdk.Token.is_unresolved(account) and not cdk.Token.is_unresolved(ours) and account != ours:
        return False
    return iam.Grant.add_to_principal(
        grantee=producer, actions=list(SEND_ACTIONS), resource_arns=[queue.queue_arn]
    ).success


@jsii.implements(s3.IBucketNotificationDestination)
class KeyEncryptedQueueDestination:
    """S3 notifications to a queue encrypted with the processor's key, as CDK's `SqsDestination` sets them up
    (the queue policy lets S3 send for this bucket only; the key policy lets S3 make and read data keys)
    but without CDK's second, bucket-conditioned key grant: naming the raw bucket in the key policy would
    close a loop (key -> raw bucket -> its access-log bucket -> key) that CloudFormation refuses."""

    def __init__(self, queue: sqs.IQueue, key: kms.IKey) -> None:
        self._queue = queue
        self._key = key

    def bind(self, scope: Construct, bucket: s3_refs.IBucketRef) -> s3.BucketNotificationDestinationConfig:
        self._queue.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("s3.amazonaws.com")],
                actions=["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"],
                resources=[self._queue.queue_arn],
                conditions={"ArnLike": {"aws:SourceArn": bucket.bucket_ref.bucket_arn}},
            )
        )
        self._key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("s3.amazonaws.com")],
                actions=["kms:GenerateDataKey", "kms:Decrypt"],
                resources=["*"],  # in a key policy, "*" is this key
            )
        )
        return s3.BucketNotificationDestinationConfig(
            arn=self._queue.queue_arn, type=s3.BucketNotificationDestinationType.QUEUE, dependencies=[self._queue]
        )
