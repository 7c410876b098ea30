"""The jobs queue, its dead-letter queue, and a waiting queue per job type with a concurrency limit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from longjobs.construct.compliance import suppress_checkov
from longjobs.construct.constants import DLQ_RETENTION
from longjobs.engine.settings import MESSAGE_MAX_BYTES


class JobQueues(Construct):
    """Two queues with SQS-managed encryption and a policy that refuses requests without TLS.

    SSE-SQS by default rather than a KMS key: S3 event notifications can then be delivered without a key
    policy, and no function needs KMS permissions. With `key` (the `kms_key` setting), every queue is
    encrypted with that customer-managed key instead (`queue_encryption`). The jobs queue keeps messages
    `retention` (the `queue_retention_s` setting, 14 days by default); the DLQ keeps them 14 days (SQS's
    maximum), and takes a message after `max_receive_count`
    receives: a backstop far above what the processor's own accounting uses (it sends a message to the
    DLQ itself after `max_attempts` failed attempts; `Settings.redrive_max_receives`).

    Each of `job_types` gets a waiting queue (`WaitingQueue-<type>`), where admission parks a limited type's
    work that cannot run within its horizon; the same encryption, retention and redrive. Only the functions
    receive from it, never an event source mapping. A type without a limit has one too, empty, so a deploy
    that adds or removes a limit creates and deletes no queue: the messages parked in it, and the running
    jobs unparked from it (their message is there), stay where they are. An empty queue costs nothing.

    `existing_queue`, `existing_dlq`: queues the application already has, used instead of new ones (the
    waiting queues redrive to the DLQ either way).

    `retain` (the `deletion_protection` setting, on for `prod`): the queues this construct makes are kept,
    with their messages, when the stack is deleted or CloudFormation replaces them (`fifo` switched), as
    the lease table is. Messages are the users' work; a deleted queue deletes them.

    `fifo`: the jobs queue and its DLQ are FIFO (a FIFO queue's DLQ must be), with content-based
    deduplication and high-throughput mode (deduplication and throughput per message group);
    CloudFormation names them with the `.fifo` suffix. A FIFO processor has no admission, so no
    waiting queues (a standard queue's DLQ could not be the FIFO DLQ anyway).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        visibility_timeout: cdk.Duration,
        retention: cdk.Duration,
        max_receive_count: int,
        job_types: Sequence[str] = (),
        fifo: bool = False,
        key: kms.IKey | None = None,
        existing_queue: sqs.IQueue | None = None,
        existing_dlq: sqs.IQueue | None = None,
        retain: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        fifo_props = fifo_queue_props() if fifo else {}
        common = {  # every queue made here: its encryption, and whether it outlives the stack
            **queue_encryption(key),
            "removal_policy": cdk.RemovalPolicy.RETAIN if retain else cdk.RemovalPolicy.DESTROY,
        }
        self.dlq: sqs.IQueue = existing_dlq or sqs.Queue(
            self,
            "DeadLetterQueue",
            **common,
            enforce_ssl=True,
            retention_period=DLQ_RETENTION,
            max_message_size_bytes=MESSAGE_MAX_BYTES,
            # Explicit (SQS's default): every queue of the stack may use it, and a redrive may start from it.
            redrive_allow_policy=sqs.RedriveAllowPolicy(redrive_permission=sqs.RedrivePermission.ALLOW_ALL),
            **fifo_props,
        )
        self.queue: sqs.IQueue = existing_queue or sqs.Queue(
            self,
            "JobsQueue",
            **common,
            enforce_ssl=True,
            visibility_timeout=visibility_timeout,
            retention_period=retention,
            # Explicit: the receiver fits its copies (DLQ, waiting) to it (`longjobs.engine.delivery.types`).
            max_message_size_bytes=MESSAGE_MAX_BYTES,
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dlq, max_receive_count=max_receive_count),
            **fifo_props,
        )
        self.waiting: dict[str, sqs.Queue] = {
            name: sqs.Queue(
                self,
                f"WaitingQueue-{name}",
                **common,
                enforce_ssl=True,
                visibility_timeout=visibility_timeout,
                retention_period=retention,
                max_message_size_bytes=MESSAGE_MAX_BYTES,
                dead_letter_queue=sqs.DeadLetterQueue(queue=self.dlq, max_receive_count=max_receive_count),
            )
            for name in (() if fifo else job_types)
        }
        made = [q for q in (self.dlq, self.queue, *self.waiting.values()) if q not in (existing_queue, existing_dlq)]
        for queue in made:
            policy = queue.node.try_find_child("Policy")  # `enforce_ssl`'s TLS-only policy
            if retain and isinstance(policy, sqs.QueuePolicy):  # kept with its queue, which would take HTTP again
                policy.apply_removal_policy(cdk.RemovalPolicy.RETAIN)
            if key is None:
                suppress_checkov(queue, "CKV_AWS_27")


def queue_encryption(key: kms.IKey | None) -> dict[str, Any]:
    """A queue's encryption properties: SSE-SQS, or `key` (a customer-managed key) when given."""
    encryption = sqs.QueueEncryption.SQS_MANAGED if key is None else sqs.QueueEncryption.KMS
    return {"encryption": encryption, "encryption_master_key": key}


def fifo_queue_props() -> dict[str, Any]:
    """A FIFO queue in high-throughput mode, deduplicating by content unless a send gives its own id."""
    return {
        "fifo": True,
        "content_based_deduplication": True,
        "deduplication_scope": sqs.DeduplicationScope.MESSAGE_GROUP,
        "fifo_throughput_limit": sqs.FifoThroughputLimit.PER_MESSAGE_GROUP_ID,
    }
