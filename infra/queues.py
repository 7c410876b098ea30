"""The jobs queue and its dead-letter queue."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.constants import DLQ_RETENTION, QUEUE_RETENTION


class JobQueues(Construct):
    """Two queues with SQS-managed encryption and a policy that refuses requests without TLS.

    SSE-SQS rather than a KMS key: S3 event notifications can then be delivered without a key policy,
    and no function needs KMS permissions. The DLQ keeps messages 14 days (SQS's maximum), longer than
    the jobs queue, and takes a message after `max_receive_count` receives.

    `fifo`: both queues are FIFO (a FIFO queue's DLQ must be), with content-based deduplication and
    high-throughput mode (deduplication and throughput per message group); CloudFormation names them
    with the `.fifo` suffix.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        visibility_timeout: cdk.Duration,
        max_receive_count: int,
        fifo: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        fifo_props = fifo_queue_props() if fifo else {}
        self.dlq = sqs.Queue(
            self,
            "DeadLetterQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=DLQ_RETENTION,
            **fifo_props,
        )
        self.queue = sqs.Queue(
            self,
            "JobsQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=visibility_timeout,
            retention_period=QUEUE_RETENTION,
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dlq, max_receive_count=max_receive_count),
            **fifo_props,
        )


def fifo_queue_props() -> dict[str, Any]:
    """A FIFO queue in high-throughput mode, deduplicating by content unless a send gives its own id."""
    return {
        "fifo": True,
        "content_based_deduplication": True,
        "deduplication_scope": sqs.DeduplicationScope.MESSAGE_GROUP,
        "fifo_throughput_limit": sqs.FifoThroughputLimit.PER_MESSAGE_GROUP_ID,
    }
