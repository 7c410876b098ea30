"""`LongJobProcessorProps`: everything a `LongJobProcessor` is built from, each field with its default.

`LongJobProcessorProps()` is the bundled app's default stack: the built-in job types, a new jobs queue, DLQ
and lease table, and the default settings. The `existing_*` fields bring resources the application
already has; `check_existing` holds them to what the processor needs, as far as a synth can see.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from constructs import IConstruct

from longjobs.construct.config import ConfigError, InfraSettings, StackConfig
from longjobs.engine.jobs import JobType, S3Trigger
from longjobs.engine.lease.schema import INDEXES, KEY_TYPES, PARTITION_KEY, TTL_ATTR
from longjobs.engine.settings import MESSAGE_MAX_BYTES, Settings

SQS_DEFAULT_VISIBILITY_S = 30
SQS_DEFAULT_RETENTION_S = 345_600  # 4 days
SQS_DEFAULT_MAX_MESSAGE_BYTES = 262_144
"""What SQS gives a queue that does not set them (CreateQueue's `VisibilityTimeout`, `MessageRetentionPeriod`
and `MaximumMessageSize`): https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_CreateQueue.html"""
AWS_MANAGED_SQS_KEY = "alias/aws/sqs"
"""The key of `sqs.QueueEncryption.KMS_MANAGED`: SQS's AWS managed key, whose policy no one can change."""


@dataclass(frozen=True, kw_only=True)
class LongJobProcessorProps:
    """What a `LongJobProcessor` is built from. Every field is optional."""

    job_types: Sequence[JobType | Mapping[str, Any]] = ()
    """Job type declarations (dicts as in `jobs.json`, or `JobType`), added to the built-in `spark`, `wait`
    and `echo`; a declaration of a built-in's name replaces it. Relative entries are read from the current
    directory. Default: none, so the built-ins only."""

    s3_triggers: Sequence[S3Trigger | Mapping[str, Any]] | None = None
    """Which completion markers start which job type. Default: a `_SUCCESS` object starts `spark`."""

    include_builtin_job_types: bool = True
    """False keeps only `job_types`. Default: the built-ins are included."""

    infra: InfraSettings | Mapping[str, Any] | None = None
    """`longjobs.construct.config.InfraSettings`, or its values as a mapping (the bundled app's context
    keys). Default: every setting's own default (docs/deploy.md lists them)."""

    engine: Settings | Mapping[str, Any] | None = None
    """`longjobs.engine.settings.Settings`, or its values as a mapping. Default: every setting's default."""

    dashboard_name: str | None = None
    """The CloudWatch dashboard's name. Default: a name CloudFormation makes unique."""

    nag: bool = True
    """cdk-nag's AwsSolutions pack checks the construct's own tree at synth, and an unacknowledged finding
    fails it. Default: on; pass False when the application runs the pack on everything already."""

    producers: Sequence[iam.IGrantable] = ()
    """Principals that send job messages (a role of the app, `iam.AccountPrincipal` for another account):
    each gets `grant_send_jobs`. Default: none."""

    existing_queue: sqs.IQueue | None = None
    """A jobs queue the application already has, instead of a new one. Its visibility timeout must be
    `queue_visibility_timeout_s`, its retention `queue_retention_s`, its maximum message size 256 KiB or
    more, and it must redrive to `existing_dead_letter_queue`, which must be given with it, after at least
    `Settings.redrive_max_receives` receives. Default: a new queue."""

    existing_dead_letter_queue: sqs.IQueue | None = None
    """The DLQ of `existing_queue` (or the one a new jobs queue redrives to). It must keep a message at
    least as long as the jobs queue does, take messages of 256 KiB, and let the processor's queues redrive
    to it (its redrive allow policy). Default: a new DLQ that keeps messages 14 days, SQS's maximum."""

    existing_table: dynamodb.ITable | None = None
    """A lease table the application already has (`Table` or `TableV2`): partition key `pk` (string), TTL on
    `expires_at`, and the indexes of `longjobs.engine.lease.schema.INDEXES`, each projecting all
    attributes. Default: a new table (on demand, point-in-time recovery)."""

    def __post_init__(self) -> None:
        """Refuse a prop of the wrong kind here, naming it, rather than deeper in the build with an
        `AttributeError` naming none (a string for a queue, a `DeadLetterQueue` for a DLQ, one role for
        `producers`, a dict for `job_types`, a string for a flag)."""
        for name in ("job_types", "s3_triggers", "producers"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, str | bytes | Mapping) or not hasattr(value, "__iter__")):
                raise TypeError(f"{name}: a list, not a {type(value).__name__}: pass [{name[:-1]}, ...]")
            if value is not None and not isinstance(value, Sequence):  # a generator is read once: keep what it gave
                object.__setattr__(self, name, tuple(value))
        for name in ("include_builtin_job_types", "nag"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}: True or False, not {getattr(self, name)!r}")
        for name, model in (("infra", InfraSettings), ("engine", Settings)):
            value = getattr(self, name)
            if value is not None and not isinstance(value, model | Mapping):
                raise TypeError(f"{name}: a mapping of settings or a {model.__name__}, not a {type(value).__name__}")
        for producer in self.producers:
            if not hasattr(producer, "grant_principal"):
                raise TypeError(
                    f"producers: each an iam.IGrantable (a role, an iam.AccountPrincipal), not {producer!r}"
                )
        for name, attributes, kind in (
            (
                "existing_queue",
                ("queue_arn", "queue_url", "fifo"),
                "an sqs.IQueue (sqs.Queue, sqs.Queue.from_queue_arn)",
            ),
            (
                "existing_dead_letter_queue",
                ("queue_arn", "queue_url", "fifo"),
                "an sqs.IQueue (sqs.Queue, sqs.Queue.from_queue_arn)",
            ),
            (
                "existing_table",
                ("table_arn", "table_name"),
                "a dynamodb.ITable (Table, TableV2, Table.from_table_name)",
            ),
        ):
            value = getattr(self, name)
            if value is not None and not all(hasattr(value, attribute) for attribute in attributes):
                hint = ": pass its queue (.queue)" if isinstance(value, sqs.DeadLetterQueue) else ""
                raise TypeError(f"{name}: {kind}, not a {type(value).__name__}{hint}")

    def with_fields(self, **values: Any) -> LongJobProcessorProps:
        """A copy with `values` set; an unknown name is refused with the names there are."""
        known = {field.name for field in fields(self)}
        unknown = sorted(set(values) - known)
        if unknown:
            names = ", ".join(sorted(known))
            raise TypeError(f"LongJobProcessor has no prop {', '.join(unknown)}; its props are {names}")
        return replace(self, **values)


def check_existing(props: LongJobProcessorProps, config: StackConfig, stack: cdk.Stack) -> None:
    """Refuse, with what to change, existing resources that do not fit the processor in `stack`. A value a
    synth cannot see (an imported resource, or a token) is not checked: docs/deploy.md lists what each must
    have."""
    queue, dlq, table = props.existing_queue, props.existing_dead_letter_queue, props.existing_table
    if queue is not None:
        _check_place("existing_queue", queue, queue.queue_arn, stack)
        _check_queue(queue, dlq, config)
    if queue is not None and dlq is not None and _same_queue(queue, dlq):
        raise ConfigError(
            f"existing_dead_letter_queue is existing_queue itself ({_named(queue)}): a dead-lettered message would "
            "be received again as a job; pass the queue's own DLQ"
        )
    if dlq is not None:
        _check_place("existing_dead_letter_queue", dlq, dlq.queue_arn, stack)
        _check_fifo("existing_dead_letter_queue", dlq, fifo=config.engine.fifo)
        _check_size("existing_dead_letter_queue", dlq)
        _check_redrive_allowed(dlq, queue, fifo=config.engine.fifo)
        retention = _property(dlq, "message_retention_period", SQS_DEFAULT_RETENTION_S)
        if retention is not None and retention < config.engine.queue_retention_s:
            raise ConfigError(
                f"existing_dead_letter_queue keeps a message {retention} s, less than the jobs queue's "
                f"queue_retention_s={config.engine.queue_retention_s}: a dead-lettered message would be lost "
                "before its owner saw it; raise its retention period"
            )
    if table is not None:
        _check_place("existing_table", table, table.table_arn, stack)
        _check_table(table)
    if queue is not None and config.infra.s3_notifications:
        _check_s3_can_send(queue)
        _check_s3_grants_in(queue, stack)


def content_deduplicated(queue: sqs.IQueue | None) -> bool:
    """Whether a FIFO `existing_queue` deduplicates by content (a new queue does; an imported one cannot be
    read, so it is taken to). Without it, SQS refuses a send with no deduplication id, and EventBridge
    refuses it as a target
    (https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_SqsParameters.html)."""
    if not isinstance(queue, sqs.Queue):
        return True
    return bool(_resolved(queue, queue.node.default_child.content_based_deduplication))  # type: ignore[union-attr]


def data_keys(props: LongJobProcessorProps) -> list[kms.IKey]:
    """The customer-managed keys of the existing resources: the processor's roles need each one's use."""
    keys = [
        props.existing_queue.encryption_master_key if props.existing_queue else None,
        props.existing_dead_letter_queue.encryption_master_key if props.existing_dead_letter_queue else None,
        props.existing_table.encryption_key if props.existing_table else None,
    ]
    return [key for index, key in enumerate(keys) if key is not None and key not in keys[:index]]


def _check_queue(queue: sqs.IQueue, dlq: sqs.IQueue | None, config: StackConfig) -> None:
    _check_fifo("existing_queue", queue, fifo=config.engine.fifo)
    vt = _property(queue, "visibility_timeout", SQS_DEFAULT_VISIBILITY_S)
    wanted_vt = config.infra.queue_visibility_timeout_s
    if vt is not None and vt != wanted_vt:
        raise ConfigError(
            f"existing_queue has a visibility timeout of {vt} s, but queue_visibility_timeout_s={wanted_vt}: "
            "the receiver and the extender rely on the setting; make them equal"
        )
    retention = _property(queue, "message_retention_period", SQS_DEFAULT_RETENTION_S)
    wanted_retention = config.engine.queue_retention_s
    if retention is not None and retention != wanted_retention:
        raise ConfigError(
            f"existing_queue keeps a message {retention} s, but queue_retention_s={wanted_retention}: admission "
            "sends a waiting message again before the queue would drop it; make them equal"
        )
    _check_size("existing_queue", queue)
    if isinstance(queue, sqs.Queue) and queue.dead_letter_queue is None:
        raise ConfigError(
            "existing_queue has no dead-letter queue: give it a redrive policy to existing_dead_letter_queue"
        )
    if dlq is None:  # the processor's own DLQ would be one nothing redrives to
        raise ConfigError("existing_queue is given without existing_dead_letter_queue: pass its DLQ as well")
    if not isinstance(queue, sqs.Queue):
        return  # an imported queue: its redrive policy cannot be read at synth
    own_dlq = queue.dead_letter_queue
    assert own_dlq is not None
    # By ARN: CDK hands back a new Python object for an imported queue each time it is read.
    if _resolved(queue, own_dlq.queue.queue_arn) != _resolved(queue, dlq.queue_arn):
        raise ConfigError(
            f"existing_queue redrives to {_named(own_dlq.queue)}, not to existing_dead_letter_queue "
            f"{_named(dlq)}: pass the queue it redrives to as existing_dead_letter_queue, or point its redrive "
            "policy at existing_dead_letter_queue"
        )
    wanted = config.engine.redrive_receives
    if own_dlq.max_receive_count < wanted:
        raise ConfigError(
            f"existing_queue redrives after {own_dlq.max_receive_count} receives; the processor needs at least "
            f"{wanted} (Settings.redrive_max_receives), or SQS would dead-letter messages the processor still "
            "counts as alive"
        )


def _check_fifo(name: str, queue: sqs.IQueue, *, fifo: bool) -> None:
    if queue.fifo == fifo:
        return
    if fifo and not isinstance(queue, sqs.Queue) and cdk.Token.is_unresolved(queue.queue_arn):
        raise ConfigError(
            f"{name} is imported by an ARN a synth cannot read, so CDK takes it for a standard queue, but the "
            "engine's fifo setting is True: import it with sqs.Queue.from_queue_attributes(..., fifo=True)"
        )
    kind = "a FIFO queue" if queue.fifo else "a standard queue"
    raise ConfigError(f"{name} is {kind}, but the engine's fifo setting is {fifo}")


def _check_size(name: str, queue: sqs.IQueue) -> None:
    """The receiver fits the copies it sends (to wait, to park, to the DLQ) to SQS's 256 KiB
    (`MESSAGE_MAX_BYTES`): a queue that takes less would refuse some of them."""
    size = _property(queue, "maximum_message_size", SQS_DEFAULT_MAX_MESSAGE_BYTES)
    if size is not None and size < MESSAGE_MAX_BYTES:
        raise ConfigError(
            f"{name} takes messages of at most {size} bytes; the processor's copies may be {MESSAGE_MAX_BYTES}: "
            "raise its maximum message size"
        )


def _check_redrive_allowed(dlq: sqs.IQueue, queue: sqs.IQueue | None, *, fifo: bool) -> None:
    """SQS refuses a redrive policy naming a DLQ whose redrive allow policy leaves the source queue out
    (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SetQueueAttributes.html,
    `RedriveAllowPolicy`). The processor makes a queue that redrives to the DLQ unless the jobs queue is
    the application's and FIFO (no waiting queues): then that queue alone must be allowed."""
    if not isinstance(dlq, sqs.Queue):
        return
    stack = cdk.Stack.of(dlq)
    policy = stack.resolve(dlq.node.default_child.redrive_allow_policy) or {}  # type: ignore[union-attr]
    permission = policy.get("redrivePermission", "allowAll")
    if permission == "allowAll":
        return
    allowed = policy.get("sourceQueueArns", [])
    if permission == "byQueue" and fifo and queue is not None and stack.resolve(queue.queue_arn) in allowed:
        return  # the application's FIFO jobs queue is the one queue that redrives to it
    raise ConfigError(
        f"existing_dead_letter_queue's redrive allow policy is {permission!r}: SQS would refuse the redrive of "
        "the processor's queues (the jobs queue, or the waiting queues) to it; allow all source queues "
        "(sqs.RedrivePermission.ALLOW_ALL)"
    )


def _check_s3_can_send(queue: sqs.IQueue) -> None:
    """S3 sends to a KMS-encrypted queue only with a customer-managed key whose policy lets it: the AWS managed
    key's policy cannot be changed
    (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-key-management.html)."""
    if not isinstance(queue, sqs.Queue):
        return
    key_id = _resolved(queue, queue.node.default_child.kms_master_key_id)  # type: ignore[union-attr]
    if isinstance(key_id, str) and key_id.endswith(AWS_MANAGED_SQS_KEY):
        raise ConfigError(
            f"existing_queue is encrypted with SQS's AWS managed key ({AWS_MANAGED_SQS_KEY}), whose key policy cannot "
            "let S3 send to it, and s3_notifications is on: encrypt it with a customer-managed key "
            "(sqs.QueueEncryption.KMS) or SSE-SQS (sqs.QueueEncryption.SQS_MANAGED)"
        )


def _check_s3_grants_in(queue: sqs.IQueue, stack: cdk.Stack) -> None:
    """S3 gets its send on the queue's policy and on its key's (CDK's `SqsDestination`), each naming the raw
    bucket. A queue or key the app creates in another of its stacks would then make that stack depend on the
    processor's, which depends on it through the queue: CDK fails on the cycle, naming no prop. An imported
    one takes no policy from the stack (docs/deploy.md: its owner lets S3 send)."""
    for name, resource in (("existing_queue", queue), ("existing_queue's key", queue.encryption_master_key)):
        if resource is None or resource.node.default_child is None:
            continue
        home = cdk.Stack.of(resource)
        if home is not stack:
            raise ConfigError(
                f"{name} is defined in stack {home.node.path}, not the processor's stack {stack.node.path}, and "
                "s3_notifications is on: its policy would let S3 send for the processor's raw bucket, so each stack "
                "would depend on the other; define it in the processor's stack, or import it there and let "
                "s3.amazonaws.com send on its policy yourself (docs/deploy.md), or leave s3_notifications off"
            )


def _check_place(name: str, resource: IConstruct, arn: str, stack: cdk.Stack) -> None:
    """The processor's `stack`'s region and account in the resource's ARN: Lambda reads
    a queue of its own region only (https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html), and the
    functions and the workflow name the table by its name, so in their own account and region. A queue's
    metrics are published in its own account, and the stack's alarms on the jobs queue and the DLQ name no
    account, so they would watch the stack's own account and never fire
    (https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html). The stack
    that imported the resource is not the measure: it may be another of the app's. A resource the app
    creates has a token for its ARN: it is where its own stack is, which is read instead (CDK would
    otherwise fail on a cross-region alarm or reference, naming no setting). A token no stack places (an
    imported ARN, an environment-agnostic stack) is not read."""
    fields = arn.split(":")
    home = cdk.Stack.of(resource) if resource.node.default_child is not None else None  # created, not imported
    wanted = [("region", 3, stack.region), ("account", 4, stack.account)]
    for what, index, ours in wanted:
        theirs = fields[index] if len(fields) > 5 else ""
        if home is not None and (not theirs or cdk.Token.is_unresolved(theirs)):
            theirs = home.region if what == "region" else home.account
        known = theirs and not cdk.Token.is_unresolved(theirs) and not cdk.Token.is_unresolved(ours)
        if known and theirs != ours:
            raise ConfigError(
                f"{name} is in {what} {theirs}, the processor's stack in {ours}: bring one in the stack's "
                f"{what}, or put the processor in a stack of {what} {theirs}"
            )


def _named(queue: sqs.IQueue) -> str:
    """A queue as a message names it: its ARN when the synth reads one, else its construct path."""
    arn = queue.queue_arn
    return queue.node.path if cdk.Token.is_unresolved(arn) else arn


def _same_queue(one: sqs.IQueue, other: sqs.IQueue) -> bool:
    """Whether two queues are one, as far as a synth can see: one ARN, or one token in one stack. A token
    read in two stacks is not compared: one logical id in two stacks (one construct id) is two queues."""
    arns = one.queue_arn, other.queue_arn
    if not any(cdk.Token.is_unresolved(arn) for arn in arns):
        return arns[0] == arns[1]
    same_stack = cdk.Stack.of(one).node.path == cdk.Stack.of(other).node.path
    return same_stack and _resolved(one, arns[0]) == _resolved(other, arns[1])


def _resolved(scope: IConstruct, value: Any) -> Any:
    return cdk.Stack.of(scope).resolve(value)


def _property(queue: sqs.IQueue, prop: str, default: int) -> int | None:
    """A queue's number as the template sets it, SQS's default when unset, None when unknown."""
    if not isinstance(queue, sqs.Queue):
        return None
    value = getattr(queue.node.default_child, prop)
    if value is None:
        return default
    return None if cdk.Token.is_unresolved(value) else int(value)


def _check_table(table: dynamodb.ITable) -> None:
    """The table's key, indexes and TTL as its template sets them (a `Table`'s or a `TableV2`'s)."""
    cfn = table.node.default_child
    if not isinstance(cfn, dynamodb.CfnTable | dynamodb.CfnGlobalTable):
        return  # imported: its schema cannot be read at synth
    stack = cdk.Stack.of(table)
    types = {
        attribute["attributeName"]: attribute["attributeType"] for attribute in stack.resolve(cfn.attribute_definitions)
    }

    def keyed(schema: list[dict[str, str]]) -> list[tuple[str, str]]:
        ordered = sorted(schema, key=lambda key: key["keyType"] != "HASH")
        return [(key["attributeName"], _TYPE_NAMES.get(types.get(key["attributeName"], ""), "?")) for key in ordered]

    indexes = {index["indexName"]: index for index in stack.resolve(cfn.global_secondary_indexes) or []}
    want = [(None, PARTITION_KEY, None), *((index.name, index.partition, index.sort) for index in INDEXES)]
    for index_name, partition, sort in want:
        where = f"index {index_name!r}" if index_name else "the table"
        if index_name is not None and index_name not in indexes:
            raise ConfigError(
                f"existing_table has no {where}: add it with partition key {partition!r} and sort key {sort!r} "
                "(longjobs.engine.lease.schema.INDEXES)"
            )
        have = keyed(stack.resolve(cfn.key_schema) if index_name is None else indexes[index_name]["keySchema"])
        expected = [(name, _TYPE_NAMES[KEY_TYPES[name]]) for name in (partition, sort) if name]
        if have != expected:
            raise ConfigError(f"existing_table: {where} is keyed by {have}, the processor needs {expected}")
        projection = indexes[index_name].get("projection", {}).get("projectionType") if index_name else "ALL"
        if projection != "ALL":
            raise ConfigError(
                f"existing_table: {where} projects {projection}; the processor reads whole leases from it: project ALL"
            )
    ttl = stack.resolve(cfn.time_to_live_specification)
    if ttl is None or ttl.get("attributeName") != TTL_ATTR or not ttl.get("enabled"):
        raise ConfigError(f"existing_table needs time to live on {TTL_ATTR!r}: closed leases expire by it")


_TYPE_NAMES = {"S": "STRING", "N": "NUMBER"}
