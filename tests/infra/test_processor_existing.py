"""`LongJobProcessor` with the application's own queue, DLQ and table (`existing_*` props).

The defaults SQS gives a queue that sets nothing are CreateQueue's: a 30 s visibility timeout and 4 days
of retention (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_CreateQueue.html).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Annotations, Match

from longjobs.construct import LongJobProcessor
from longjobs.construct.config import ConfigError
from longjobs.construct.lease_table import key_attribute
from longjobs.construct.props import LongJobProcessorProps
from longjobs.engine.lease.schema import INDEXES, PARTITION_KEY, TTL_ATTR
from longjobs.engine.settings import Settings

SETTINGS = Settings()
RETENTION = cdk.Duration.seconds(SETTINGS.queue_retention_s)
RECEIVES = SETTINGS.redrive_receives
VT = cdk.Duration.seconds(180)  # InfraSettings' default queue_visibility_timeout_s


def fitting_dlq(scope: cdk.Stack, **props: Any) -> sqs.Queue:
    return sqs.Queue(scope, "TheirDlq", retention_period=RETENTION, **props)


def fitting_queue(scope: cdk.Stack, dlq: sqs.IQueue, **props: Any) -> sqs.Queue:
    fields: dict[str, Any] = {
        "visibility_timeout": VT,
        "retention_period": RETENTION,
        "dead_letter_queue": sqs.DeadLetterQueue(queue=dlq, max_receive_count=RECEIVES),
        **props,
    }
    return sqs.Queue(scope, "TheirQueue", **fields)


def fitting_table(
    scope: cdk.Stack,
    *,
    skip: str = "",
    ttl: str | None = TTL_ATTR,
    projection: dynamodb.ProjectionType = dynamodb.ProjectionType.ALL,
) -> dynamodb.Table:
    table = dynamodb.Table(
        scope,
        "TheirTable",
        partition_key=key_attribute(PARTITION_KEY),
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
        time_to_live_attribute=ttl,
    )
    for index in INDEXES:
        if index.name != skip:
            table.add_global_secondary_index(
                index_name=index.name,
                partition_key=key_attribute(index.partition),
                sort_key=key_attribute(index.sort),
                projection_type=projection,
            )
    return table


def keyed_queues(tmp_path: Path) -> tuple[cdk.App, cdk.Stack, kms.Key, sqs.Queue, sqs.Queue]:
    """An application's stack with its own key, and a queue and DLQ that fit, encrypted with it."""
    app = cdk.App(outdir=str(tmp_path / "cdk.out"))
    stack = cdk.Stack(app, "Theirs")
    key = kms.Key(stack, "TheirKey", enable_key_rotation=True)
    dlq = fitting_dlq(stack, encryption=sqs.QueueEncryption.KMS, encryption_master_key=key)
    queue = fitting_queue(stack, dlq, encryption=sqs.QueueEncryption.KMS, encryption_master_key=key)
    return app, stack, key, dlq, queue


def test_processor_uses_the_existing_queue_dlq_and_table_and_their_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    app, stack, key, dlq, queue = keyed_queues(tmp_path)
    table = fitting_table(stack)
    props = LongJobProcessorProps(existing_queue=queue, existing_dead_letter_queue=dlq)
    processor = LongJobProcessor(stack, "Jobs", props, existing_table=table)
    assert (processor.queue, processor.dead_letter_queue, processor.table) == (queue, dlq, table)
    assert processor.props.existing_table is table and processor.props.existing_queue is queue

    template = app.synth().get_stack_by_name("Theirs").template
    resources = template["Resources"]

    def logical_id(construct: Any) -> str:
        return str(stack.resolve(stack.get_logical_id(construct.node.default_child)))

    tables = [name for name, resource in resources.items() if resource["Type"] == "AWS::DynamoDB::Table"]
    assert tables == [logical_id(table)], "no lease table of the processor's own"
    mappings = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::EventSourceMapping"]
    assert [m["EventSourceArn"] for m in mappings] == [{"Fn::GetAtt": [logical_id(queue), "Arn"]}]
    receiver = resources[logical_id(processor.functions.receiver)]["Properties"]["Environment"]["Variables"]
    assert receiver["TABLE_NAME"] == {"Ref": logical_id(table)}
    assert receiver["DLQ_URL"] == {"Ref": logical_id(dlq)}
    waiting = [r for r in resources.values() if r["Type"] == "AWS::SQS::Queue" and "RedrivePolicy" in r["Properties"]]
    targets = {str(r["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]) for r in waiting}
    assert targets == {str({"Fn::GetAtt": [logical_id(dlq), "Arn"]})}, "every queue redrives to their DLQ"

    key_arn = {"Fn::GetAtt": [logical_id(key), "Arn"]}
    roles = [processor.functions.receiver.role, processor.functions.extender.role, processor.functions.watcher.role]
    roles.append(processor.state_machine.role)
    for role in roles:
        assert role is not None
        policies = [
            r["Properties"]
            for r in resources.values()
            if r["Type"] == "AWS::IAM::Policy" and {"Ref": logical_id(role)} in r["Properties"]["Roles"]
        ]
        statements = [s for p in policies for s in p["PolicyDocument"]["Statement"]]
        assert any(s["Resource"] == key_arn and "kms:Decrypt" in s["Action"] for s in statements), role


Refusal = Callable[[cdk.Stack], dict[str, Any]]
REFUSALS: dict[str, tuple[Refusal, str]] = {
    "sqs's default visibility timeout": (
        lambda s: {"existing_queue": fitting_queue(s, fitting_dlq(s), visibility_timeout=None)},
        r"existing_queue has a visibility timeout of 30 s, but queue_visibility_timeout_s=180",
    ),
    "sqs's default retention": (
        lambda s: {"existing_queue": fitting_queue(s, fitting_dlq(s), retention_period=None)},
        r"existing_queue keeps a message 345600 s, but queue_retention_s=1209600",
    ),
    "no dead-letter queue": (
        lambda s: {"existing_queue": fitting_queue(s, fitting_dlq(s), dead_letter_queue=None)},
        r"existing_queue has no dead-letter queue",
    ),
    "its dlq not given": (
        lambda s: {"existing_queue": fitting_queue(s, fitting_dlq(s))},
        r"existing_queue is given without existing_dead_letter_queue",
    ),
    "a redrive the processor would meet": (
        lambda s: {
            "existing_queue": fitting_queue(
                s, dlq := fitting_dlq(s), dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=5)
            ),
            "existing_dead_letter_queue": dlq,
        },
        rf"existing_queue redrives after 5 receives; the processor needs at least {RECEIVES}",
    ),
    "a fifo queue for a standard processor": (
        lambda s: {"existing_queue": sqs.Queue(s, "Fifo", fifo=True)},
        r"existing_queue is a FIFO queue, but the engine's fifo setting is False",
    ),
    "a dlq that drops messages before the queue would": (
        lambda s: {"existing_dead_letter_queue": sqs.Queue(s, "ShortDlq")},
        r"existing_dead_letter_queue keeps a message 345600 s, less than the jobs queue's queue_retention_s",
    ),
    "an imported queue without its dlq": (
        lambda s: {
            "existing_queue": sqs.Queue.from_queue_arn(s, "Imported", "arn:aws:sqs:us-east-1:111122223333:jobs")
        },
        r"existing_queue is given without existing_dead_letter_queue",
    ),
    "a queue that takes smaller messages than the copies": (
        lambda s: {
            "existing_queue": fitting_queue(s, dlq := fitting_dlq(s), max_message_size_bytes=65_536),
            "existing_dead_letter_queue": dlq,
        },
        r"existing_queue takes messages of at most 65536 bytes; the processor's copies may be 262144",
    ),
    "a dlq that takes smaller messages than the copies": (
        lambda s: {"existing_dead_letter_queue": fitting_dlq(s, max_message_size_bytes=1024)},
        r"existing_dead_letter_queue takes messages of at most 1024 bytes",
    ),
    "a dlq that lets only another queue redrive to it": (
        lambda s: {
            "existing_dead_letter_queue": fitting_dlq(
                s, redrive_allow_policy=sqs.RedriveAllowPolicy(source_queues=[sqs.Queue(s, "Other")])
            )
        },
        r"existing_dead_letter_queue's redrive allow policy is 'byQueue': SQS would refuse the redrive",
    ),
    "a dlq that lets no queue redrive to it": (
        lambda s: {
            "existing_dead_letter_queue": fitting_dlq(
                s, redrive_allow_policy=sqs.RedriveAllowPolicy(redrive_permission=sqs.RedrivePermission.DENY_ALL)
            )
        },
        r"existing_dead_letter_queue's redrive allow policy is 'denyAll'",
    ),
    "a queue on sqs's aws-managed key, with s3 notifications": (
        lambda s: {
            "existing_queue": fitting_queue(s, dlq := fitting_dlq(s), encryption=sqs.QueueEncryption.KMS_MANAGED),
            "existing_dead_letter_queue": dlq,
            "infra": {"s3_notifications": True},
        },
        r"existing_queue is encrypted with SQS's AWS managed key \(alias/aws/sqs\), whose key policy cannot let S3",
    ),
    "a table whose index projects its keys only": (
        lambda s: {"existing_table": fitting_table(s, projection=dynamodb.ProjectionType.KEYS_ONLY)},
        r"existing_table: index 'due' projects KEYS_ONLY; the processor reads whole leases from it",
    ),
    "a table v2 keyed by a number": (
        lambda s: {
            "existing_table": dynamodb.TableV2(
                s, "NumberedV2", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.NUMBER)
            )
        },
        r"existing_table: the table is keyed by \[\('pk', 'NUMBER'\)\], the processor needs \[\('pk', 'STRING'\)\]",
    ),
    "a table v2 without the indexes": (
        lambda s: {"existing_table": dynamodb.TableV2(s, "BareV2", partition_key=key_attribute(PARTITION_KEY))},
        r"existing_table has no index 'due'",
    ),
    "a table without the waiting index": (
        lambda s: {"existing_table": fitting_table(s, skip="waiting")},
        r"existing_table has no index 'waiting': add it with partition key 'waiting_type'",
    ),
    "a table without ttl": (
        lambda s: {"existing_table": fitting_table(s, ttl=None)},
        r"existing_table needs time to live on 'expires_at'",
    ),
    "a table keyed by a number": (
        lambda s: {
            "existing_table": dynamodb.Table(
                s, "Numbered", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.NUMBER)
            )
        },
        r"existing_table: the table is keyed by \[\('pk', 'NUMBER'\)\], the processor needs \[\('pk', 'STRING'\)\]",
    ),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_processor_refuses_an_existing_resource_saying_what_to_change(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "Theirs")
    build, message = REFUSALS[case]
    with pytest.raises(ConfigError, match=message):
        LongJobProcessor(stack, "Jobs", **build(stack))


def test_processor_imported_resources_are_taken_as_they_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An imported queue or table shows a synth nothing of its settings: only FIFO (its name) is checked."""
    monkeypatch.chdir(tmp_path)
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "Theirs")
    fifo = sqs.Queue.from_queue_arn(stack, "Fifo", "arn:aws:sqs:us-east-1:111122223333:jobs.fifo")
    with pytest.raises(ConfigError, match="existing_queue is a FIFO queue"):
        LongJobProcessor(stack, "Refused", existing_queue=fifo, nag=False)
    queue = sqs.Queue.from_queue_arn(stack, "Queue", "arn:aws:sqs:us-east-1:111122223333:jobs")
    dlq = sqs.Queue.from_queue_arn(stack, "Dlq", "arn:aws:sqs:us-east-1:111122223333:jobs-dlq")
    table = dynamodb.Table.from_table_name(stack, "Table", "leases")
    processor = LongJobProcessor(
        stack, "Jobs", existing_queue=queue, existing_dead_letter_queue=dlq, existing_table=table, nag=False
    )
    assert (processor.queue, processor.dead_letter_queue, processor.table) == (queue, dlq, table)


def test_processor_refuses_an_unknown_prop_naming_the_props(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "Theirs")
    with pytest.raises(TypeError, match=r"no prop existing_topic; its props are dashboard_name, engine"):
        LongJobProcessor(stack, "Jobs", existing_topic=None)


def test_processor_existing_table_v2_and_fifo_dlq_allowing_its_queue_are_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `TableV2` is read as a `Table` is. A FIFO processor on the application's queue makes no queue of its
    own that redrives to the DLQ, so a DLQ allowing that one queue (`byQueue`) fits."""
    monkeypatch.chdir(tmp_path)
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "Theirs")
    table = dynamodb.TableV2(
        stack,
        "TheirTableV2",
        partition_key=key_attribute(PARTITION_KEY),
        time_to_live_attribute=TTL_ATTR,
        global_secondary_indexes=[
            dynamodb.GlobalSecondaryIndexPropsV2(
                index_name=index.name,
                partition_key=key_attribute(index.partition),
                sort_key=key_attribute(index.sort),
            )
            for index in INDEXES
        ],
    )
    fifo = {"fifo": True, "content_based_deduplication": True}
    dlq = sqs.Queue(stack, "Dlq", retention_period=RETENTION, **fifo)
    queue = fitting_queue(stack, dlq, **fifo)
    dlq.node.default_child.redrive_allow_policy = {  # type: ignore[union-attr]
        "redrivePermission": "byQueue",
        "sourceQueueArns": [queue.queue_arn],
    }
    processor = LongJobProcessor(
        stack,
        "Jobs",
        existing_queue=queue,
        existing_dead_letter_queue=dlq,
        existing_table=table,
        engine={"fifo": True},
        nag=False,
    )
    assert processor.table is table


def test_processor_imported_fifo_queue_by_a_token_arn_names_the_import_that_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "Theirs")
    arn = cdk.Fn.import_value("JobsQueueArn")
    queue = sqs.Queue.from_queue_arn(stack, "ByToken", arn)
    with pytest.raises(ConfigError, match=r"import it with sqs.Queue.from_queue_attributes\(..., fifo=True\)"):
        LongJobProcessor(stack, "Jobs", existing_queue=queue, engine={"fifo": True}, nag=False)


def test_processor_s3_notifications_to_their_keyed_queue_grant_s3_their_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3 encrypts what it sends to a KMS-encrypted queue with the queue's key, so that key's policy must let
    S3 use it (https://docs.aws.amazon.com/AmazonS3/latest/userguide/ways-to-add-notification-config-to-bucket.html).
    With `kms_key`, the grant goes on the queue's own key, not the processor's."""
    monkeypatch.chdir(tmp_path)
    app, stack, key, dlq, queue = keyed_queues(tmp_path)
    processor = LongJobProcessor(
        stack,
        "Jobs",
        existing_queue=queue,
        existing_dead_letter_queue=dlq,
        infra={"s3_notifications": True, "kms_key": "create"},
        nag=False,
    )
    resources = app.synth().get_stack_by_name("Theirs").template["Resources"]

    def s3_may_use(construct: Any) -> bool:
        logical = str(stack.resolve(stack.get_logical_id(construct.node.default_child)))
        statements = resources[logical]["Properties"]["KeyPolicy"]["Statement"]
        return any(
            statement.get("Principal", {}).get("Service") == "s3.amazonaws.com"
            and any(action.startswith("kms:GenerateDataKey") for action in statement["Action"])
            for statement in statements
        )

    assert processor.key is not None
    assert s3_may_use(key), "S3 may encrypt with the queue's own key"
    assert not s3_may_use(processor.key), "the processor's key encrypts none of the queues S3 sends to"


def test_processor_existing_queue_redriving_to_an_imported_dlq_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The application's queue may redrive to a DLQ it imports. CDK hands back a new Python object for an
    imported queue each time it is read, so the check compares the queues' ARNs, not the objects."""
    monkeypatch.chdir(tmp_path)
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "Theirs")
    dlq = sqs.Queue.from_queue_arn(stack, "Dlq", "arn:aws:sqs:us-east-1:111122223333:jobs-dlq")
    queue = fitting_queue(stack, dlq)
    processor = LongJobProcessor(stack, "Jobs", existing_queue=queue, existing_dead_letter_queue=dlq, nag=False)
    assert processor.dead_letter_queue is dlq
    other = sqs.Queue.from_queue_arn(stack, "OtherDlq", "arn:aws:sqs:us-east-1:111122223333:other-dlq")
    with pytest.raises(
        ConfigError, match=r"existing_queue redrives to arn:.*:jobs-dlq, not to existing_dead_letter_queue"
    ):
        LongJobProcessor(stack, "Refused", existing_queue=queue, existing_dead_letter_queue=other, nag=False)


def test_processor_refuses_another_accounts_producer_on_an_imported_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another account's producer is granted on the queue's policy, which CDK cannot change on an imported
    queue: CDK would leave the grant out of the template without a word. A role of the stack's account is
    granted on its own policy, imported queue or not."""
    monkeypatch.chdir(tmp_path)
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "Theirs")
    queue = sqs.Queue.from_queue_arn(stack, "Queue", "arn:aws:sqs:us-east-1:111122223333:jobs")
    dlq = sqs.Queue.from_queue_arn(stack, "Dlq", "arn:aws:sqs:us-east-1:111122223333:jobs-dlq")
    role = iam.Role(stack, "Ingest", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    processor = LongJobProcessor(
        stack, "Jobs", existing_queue=queue, existing_dead_letter_queue=dlq, producers=[role], nag=False
    )
    with pytest.raises(ConfigError, match=r"producers: .*444455556666.* existing_queue is imported"):
        processor.grant_send_jobs(iam.AccountPrincipal("444455556666"))
    with pytest.raises(ConfigError, match=r"producers: .*444455556666.* existing_queue is imported"):
        LongJobProcessor(
            stack,
            "Refused",
            existing_queue=queue,
            existing_dead_letter_queue=dlq,
            producers=[iam.AccountPrincipal("444455556666")],
            nag=False,
        )


def test_processor_refuses_an_existing_resource_in_another_region_or_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ARN names its region and account. Lambda reads a queue of its own region only, and the functions
    and the workflow name the table by its name, so in the stack's own account and region. The measure is
    the processor's stack, not the stack an import was made in (another of the app's, in the ARN's region)."""
    monkeypatch.chdir(tmp_path)
    env = cdk.Environment(account="111122223333", region="us-east-1")
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "Theirs", env=env)

    def queue(name: str, region: str = "us-east-1") -> sqs.IQueue:
        return sqs.Queue.from_queue_arn(stack, f"{name}{region}", f"arn:aws:sqs:{region}:111122223333:{name}")

    with pytest.raises(ConfigError, match=r"existing_queue is in region eu-west-1, the processor's stack in us-east-1"):
        LongJobProcessor(
            stack, "OtherQ", existing_queue=queue("jobs", "eu-west-1"), existing_dead_letter_queue=queue("dlq")
        )
    with pytest.raises(ConfigError, match=r"existing_dead_letter_queue is in region eu-west-1"):
        LongJobProcessor(stack, "OtherD", existing_dead_letter_queue=queue("dlq", "eu-west-1"))
    other_account = dynamodb.Table.from_table_arn(stack, "T", "arn:aws:dynamodb:us-east-1:444455556666:table/leases")
    with pytest.raises(ConfigError, match=r"existing_table is in account 444455556666, the processor's stack in 1111"):
        LongJobProcessor(stack, "OtherT", existing_table=other_account)
    data = cdk.Stack(stack.node.root, "Data", env=cdk.Environment(account="111122223333", region="eu-west-1"))
    imported_there = sqs.Queue.from_queue_arn(data, "Jobs", "arn:aws:sqs:eu-west-1:111122223333:jobs")
    with pytest.raises(ConfigError, match=r"existing_queue is in region eu-west-1, the processor's stack in us-east-1"):
        LongJobProcessor(
            stack, "ImportedElsewhere", existing_queue=imported_there, existing_dead_letter_queue=queue("dlq2")
        )


@pytest.mark.parametrize("resource", ["queue", "table"])
def test_processor_refuses_a_resource_the_app_creates_in_a_stack_of_another_region(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resource: str
) -> None:
    """A queue or table the app creates has a token for its ARN, so the ARN names no region; it is where its
    own stack is. One of another region's stack is refused naming the setting, as an imported one is: CDK
    would fail on the queue's cross-region alarm ("Cannot create an Alarm in region ..."), or at synth on a
    cross-environment reference of the table, naming neither."""
    monkeypatch.chdir(tmp_path)
    app = cdk.App(outdir=str(tmp_path))
    data = cdk.Stack(app, "Data", env=cdk.Environment(account="111122223333", region="eu-west-1"))
    stack = cdk.Stack(app, "Theirs", env=cdk.Environment(account="111122223333", region="us-east-1"))
    if resource == "queue":
        dlq = fitting_dlq(data)
        existing: dict[str, Any] = {"existing_queue": fitting_queue(data, dlq), "existing_dead_letter_queue": dlq}
    else:
        existing = {"existing_table": fitting_table(data)}

    with pytest.raises(
        ConfigError, match=rf"existing_{resource} is in region eu-west-1, the processor's stack in us-e"
    ):
        LongJobProcessor(stack, "Jobs", **existing)


@pytest.mark.parametrize("deduplicated", [True, False])
def test_processor_existing_fifo_queue_without_content_deduplication_is_warned_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deduplicated: bool
) -> None:
    """A FIFO queue without content-based deduplication refuses a send with no deduplication id, as
    docs/fifo.md's first send gives, and EventBridge refuses it as a target
    (https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_SqsParameters.html). Producers that give
    their own ids need no more, so `cdk synth` warns instead of refusing."""
    monkeypatch.chdir(tmp_path)
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "Theirs")
    fifo = {"fifo": True, "content_based_deduplication": deduplicated}
    dlq = sqs.Queue(stack, "Dlq", retention_period=RETENTION, **fifo)
    queue = fitting_queue(stack, dlq, **fifo)
    LongJobProcessor(
        stack, "Jobs", existing_queue=queue, existing_dead_letter_queue=dlq, engine={"fifo": True}, nag=False
    )

    warnings = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("content-based deduplication"))

    assert len(warnings) == (0 if deduplicated else 1), warnings
    if not deduplicated:
        assert "[ack: longjobs:fifo-deduplication]" in warnings[0].entry.data


def test_processor_existing_queue_producer_judged_by_where_its_grant_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an imported queue, a producer is let send on its own policy or not at all. A role wrapped with
    conditions takes the grant on the role's own policy, so it is taken; a role of another account (imported
    by its ARN) takes none there, since CDK adds nothing to another account's role, and needs the queue's
    policy: it is refused, as another account's principal is."""
    monkeypatch.chdir(tmp_path)
    env = cdk.Environment(account="111122223333", region="us-east-1")
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "Theirs", env=env)
    queue = sqs.Queue.from_queue_arn(stack, "Queue", "arn:aws:sqs:us-east-1:111122223333:jobs")
    dlq = sqs.Queue.from_queue_arn(stack, "Dlq", "arn:aws:sqs:us-east-1:111122223333:jobs-dlq")
    role = iam.Role(stack, "Ingest", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    conditioned = iam.PrincipalWithConditions(role, {"StringEquals": {"aws:RequestedRegion": "us-east-1"}})
    processor = LongJobProcessor(
        stack, "Jobs", existing_queue=queue, existing_dead_letter_queue=dlq, producers=[conditioned], nag=False
    )
    statements = stack.resolve(role.node.find_child("DefaultPolicy").document)["Statement"]  # type: ignore[attr-defined]
    assert any("sqs:SendMessage" in s["Action"] for s in statements), statements

    other = iam.Role.from_role_arn(stack, "OtherAccount", "arn:aws:iam::444455556666:role/ingest")
    with pytest.raises(ConfigError, match=r"producers: Theirs/OtherAccount can only .* existing_queue is imported"):
        processor.grant_send_jobs(other)


@pytest.mark.parametrize("prop", ["existing_queue", "existing_dead_letter_queue"])
def test_processor_existing_queue_in_another_account_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prop: str
) -> None:
    """A queue of another account passed: its metrics are published in that account, so the DLQ and
    oldest-message alarms, which the stack makes in its own account without an account id, would watch
    a queue of that name in the stack's account and never fire
    (https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html, cross-account
    alarms). One the app creates in a stack of another account is refused too, rather than by CDK's
    cross-environment error, which names no prop."""
    monkeypatch.chdir(tmp_path)
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Theirs", env=cdk.Environment(account="111122223333", region="us-east-1"))

    def imported(name: str, account: str) -> sqs.IQueue:
        return sqs.Queue.from_queue_arn(stack, f"{name}{account}", f"arn:aws:sqs:us-east-1:{account}:{name}")

    other = {prop: "444455556666"}
    existing = {
        "existing_queue": imported("jobs", other.get("existing_queue", "111122223333")),
        "existing_dead_letter_queue": imported("jobs-dlq", other.get("existing_dead_letter_queue", "111122223333")),
    }
    with pytest.raises(ConfigError, match=rf"{prop} is in account 444455556666, the processor's stack in 111122223333"):
        LongJobProcessor(stack, "Imported", **existing, nag=False)

    data = cdk.Stack(app, "Data", env=cdk.Environment(account="444455556666", region="us-east-1"))
    dlq = fitting_dlq(data)
    created = {"existing_queue": fitting_queue(data, dlq), "existing_dead_letter_queue": dlq}
    if prop == "existing_dead_letter_queue":
        created = {prop: dlq}
    with pytest.raises(ConfigError, match=rf"{prop} is in account 444455556666, the processor's stack in 111122223333"):
        LongJobProcessor(stack, "Created", **created, nag=False)


@pytest.mark.parametrize("where", ["queue", "key"])
def test_processor_existing_queue_of_another_stack_with_s3_notifications_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """With `s3_notifications`, CDK lets S3 send on the queue's policy (and its key's), each naming the raw
    bucket: in another of the app's stacks, that stack would depend on the processor's, which depends on
    it, and CDK failed on the cycle ("DependencyCycle: 'Theirs' depends on 'Data'"), naming no prop."""
    monkeypatch.chdir(tmp_path)
    app = cdk.App(outdir=str(tmp_path))
    env = cdk.Environment(account="111122223333", region="us-east-1")
    data = cdk.Stack(app, "Data", env=env)
    stack = cdk.Stack(app, "Theirs", env=env)
    key = kms.Key(data if where == "key" else stack, "TheirKey", enable_key_rotation=True)
    home = data if where == "queue" else stack
    encrypted = {"encryption": sqs.QueueEncryption.KMS, "encryption_master_key": key}
    dlq = fitting_dlq(home, **encrypted)
    queue = fitting_queue(home, dlq, **encrypted)
    named = "existing_queue" if where == "queue" else "existing_queue's key"
    with pytest.raises(ConfigError, match=rf"{named} is defined in stack Data, not the processor's stack Theirs"):
        LongJobProcessor(
            stack,
            "Jobs",
            existing_queue=queue,
            existing_dead_letter_queue=dlq,
            infra={"s3_notifications": True},
            nag=False,
        )


def test_processor_existing_queue_redriving_elsewhere_names_both_queues_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal of a queue that redrives to another DLQ than `existing_dead_letter_queue` named neither
    queue nor what to change."""
    monkeypatch.chdir(tmp_path)
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "Theirs")
    redriven_to = sqs.Queue.from_queue_arn(stack, "Dlq", "arn:aws:sqs:us-east-1:111122223333:jobs-dlq")
    given = sqs.Queue.from_queue_arn(stack, "OtherDlq", "arn:aws:sqs:us-east-1:111122223333:other-dlq")
    with pytest.raises(ConfigError) as refused:
        LongJobProcessor(
            stack, "Jobs", existing_queue=fitting_queue(stack, redriven_to), existing_dead_letter_queue=given, nag=False
        )
    message = str(refused.value)
    assert "arn:aws:sqs:us-east-1:111122223333:jobs-dlq" in message, message
    assert "arn:aws:sqs:us-east-1:111122223333:other-dlq" in message, message
    assert "pass the queue it redrives to as existing_dead_letter_queue" in message, message


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (lambda stack: {"existing_queue": "arn:aws:sqs:us-east-1:111122223333:jobs"}, r"existing_queue: an sqs.IQueue"),
        (
            lambda stack: {
                "existing_dead_letter_queue": sqs.DeadLetterQueue(queue=fitting_dlq(stack), max_receive_count=5)
            },
            r"existing_dead_letter_queue: an sqs.IQueue .*not a DeadLetterQueue: pass its queue",
        ),
        (lambda stack: {"existing_table": fitting_dlq(stack)}, r"existing_table: a dynamodb.ITable .*not a Queue"),
        (lambda stack: {"job_types": {"name": "nap", "runner": "wait"}}, r"job_types: a list, not a dict"),
        (
            lambda stack: {"producers": iam.Role(stack, "Ingest", assumed_by=iam.AccountRootPrincipal())},
            r"producers: a list, not a Role",
        ),
        (lambda stack: {"include_builtin_job_types": "false"}, r"include_builtin_job_types: True or False"),
        (lambda stack: {"engine": "fifo"}, r"engine: a mapping of settings or a Settings, not a str"),
    ],
)
def test_processor_refuses_a_prop_of_the_wrong_kind_naming_it(
    props: Callable[[cdk.Stack], dict[str, Any]], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong kind of value is refused with the prop's name, not an AttributeError from deep in the build
    (`'str' object has no attribute 'queue_arn'`), and not taken silently (a string flag is truthy)."""
    monkeypatch.chdir(tmp_path)
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "Theirs")
    with pytest.raises(TypeError, match=message):
        LongJobProcessor(stack, "Jobs", **props(stack))


def test_processor_refuses_the_jobs_queue_as_its_own_dlq(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both imported by one ARN: the processor's dead-lettered messages would come back to it as jobs."""
    monkeypatch.chdir(tmp_path)
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "Theirs")
    arn = "arn:aws:sqs:us-east-1:111122223333:jobs"
    queue, dlq = (sqs.Queue.from_queue_arn(stack, name, arn) for name in ("Queue", "Dlq"))
    with pytest.raises(ConfigError, match="existing_dead_letter_queue is existing_queue itself"):
        LongJobProcessor(stack, "Jobs", existing_queue=queue, existing_dead_letter_queue=dlq, nag=False)


def test_processor_takes_a_dlq_of_another_stack_with_the_jobs_queues_construct_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two queues of one construct id in two stacks have one logical id, so each resolved in its own stack
    reads the same: they are still two queues, and the jobs queue redrives to the other."""
    monkeypatch.chdir(tmp_path)
    app = cdk.App(outdir=str(tmp_path))
    shared, stack = cdk.Stack(app, "Shared"), cdk.Stack(app, "Theirs")
    dlq = sqs.Queue(shared, "Queue", retention_period=RETENTION)
    queue = sqs.Queue(
        stack,
        "Queue",
        visibility_timeout=VT,
        retention_period=RETENTION,
        dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=RECEIVES),
    )
    processor = LongJobProcessor(stack, "Jobs", existing_queue=queue, existing_dead_letter_queue=dlq, nag=False)
    assert processor.dead_letter_queue is dlq


def test_processor_props_keep_the_producers_a_generator_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The props' check reads each producer: a generator's would then be gone, and none granted."""
    monkeypatch.chdir(tmp_path)
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "Theirs")
    role = iam.Role(stack, "Ingest", assumed_by=iam.AccountRootPrincipal())
    assert LongJobProcessorProps().with_fields(producers=(r for r in [role])).producers == (role,)
