"""moto-backed fixtures: a jobs queue, the lease table, and a way to receive-and-lease like the receiver."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from moto import mock_aws

from functions import aws
from functions.clock import Clock, SystemClock
from functions.extender.service import Extender
from functions.lease import Lease, LeaseStore, table_definition
from functions.policies import build_policy
from functions.settings import Settings
from functions.visibility import VisibilityClient

TABLE = "leases"


@pytest.fixture
def moto_aws() -> Iterator[None]:
    with mock_aws():
        yield


@dataclass
class Harness:
    """A queue, the lease table and clients on moto."""

    sqs: Any
    dynamodb: Any
    stepfunctions: Any
    queue_url: str
    executor: ThreadPoolExecutor

    def store(self, settings: Settings) -> LeaseStore:
        return LeaseStore(
            self.dynamodb, TABLE, shards=settings.shards, closed_ttl_s=settings.closed_ttl_s, executor=self.executor
        )

    def extender(self, settings: Settings, clock: Clock | None = None, sqs: Any = None) -> Extender:
        clock = clock or SystemClock()
        sqs = sqs or self.sqs
        return Extender(
            settings=settings,
            policy=build_policy(settings),
            store=self.store(settings),
            visibility=VisibilityClient(sqs, clock=clock, executor=self.executor),
            sqs=sqs,
            clock=clock,
            executor=self.executor,
            stepfunctions=self.stepfunctions,
        )

    def send(self, body: str = "{}") -> str:
        return str(self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=body)["MessageId"])

    def receive_and_lease(
        self,
        settings: Settings,
        clock: Clock | None = None,
        *,
        count: int = 1,
        execution_arn: str | None = None,
        release_delay_s: int = 0,
    ) -> list[Lease]:
        """What the receiver does for a long job: receive with the first chunk, then write the lease."""
        clock = clock or SystemClock()
        policy = build_policy(settings)
        store = self.store(settings)
        leases: list[Lease] = []
        while len(leases) < count:
            now = clock.now()
            messages = self.sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=min(10, count - len(leases)),
                VisibilityTimeout=policy.initial_timeout_s(),
                AttributeNames=["ApproximateReceiveCount"],
            ).get("Messages", [])
            assert messages, "expected messages to receive"
            for message in messages:
                timing = Lease(
                    message_id=message["MessageId"],
                    queue_url=self.queue_url,
                    receipt_handle=message["ReceiptHandle"],
                    receive_count=int(message["Attributes"]["ApproximateReceiveCount"]),
                    received_at=now,
                    visible_until=now + policy.initial_timeout_s(),
                    renew_until=settings.renew_until(now),
                    execution_arn=execution_arn,
                    release_delay_s=release_delay_s,
                )
                lease = Lease(**{**timing.__dict__, "renew_at": policy.renew_at(timing)})
                assert store.create(lease)
                leases.append(lease)
        return leases

    def visible_messages(self) -> list[str]:
        """Message ids a competing consumer would get now (received with VT 0, so unchanged)."""
        got = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0)
        return [m["MessageId"] for m in got.get("Messages", [])]


@pytest.fixture
def harness(moto_aws: None) -> Iterator[Harness]:
    sqs = aws.sqs()
    dynamodb = aws.dynamodb()
    dynamodb.create_table(**table_definition(TABLE))
    queue_url = sqs.create_queue(QueueName="jobs", Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
    executor = ThreadPoolExecutor(max_workers=8)
    yield Harness(sqs=sqs, dynamodb=dynamodb, stepfunctions=aws.stepfunctions(), queue_url=queue_url, executor=executor)
    executor.shutdown(wait=True)


class Poller(threading.Thread):
    """A competing consumer that looks for the message the whole time; any sighting is a lapse."""

    def __init__(self, harness: Harness, interval_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.harness = harness
        self.interval_s = interval_s
        self.seen: list[str] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            self.seen.extend(self.harness.visible_messages())

    def stop(self) -> list[str]:
        self.stopped.set()
        self.join()
        return self.seen
