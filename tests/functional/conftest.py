"""moto-backed fixtures: a jobs queue, the lease table, and a way to receive-and-lease like the receiver."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
from moto import mock_aws

from longjobs.engine import aws
from longjobs.engine.cancel import Canceller
from longjobs.engine.clock import Clock, SystemClock
from longjobs.engine.delivery.types import Delivery, Outcome, Receiver
from longjobs.engine.extender.service import Extender, renew_due
from longjobs.engine.jobs import JobCatalog
from longjobs.engine.lease import Lease, LeaseStore, table_definition
from longjobs.engine.policies import build_policy
from longjobs.engine.receiver.batch import receive_batch
from longjobs.engine.receiver.service import receive
from longjobs.engine.settings import Settings
from longjobs.engine.visibility import VisibilityClient
from longjobs.offline.emulator import Emulator
from longjobs.offline.lambdas import load_function
from longjobs.offline.resources import create_resources
from tests.polling import eventually, past_start_check
from tests.short_settings import SHORT_THRESHOLD

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
                    renew_until=now + settings.renewal_s,
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


def emitted_metrics(out: str) -> dict[str, float]:
    for line in out.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            blob = json.loads(line)
            names = [m["Name"] for m in blob["_aws"]["CloudWatchMetrics"][0]["Metrics"]]
            return {name: blob[name][0] if isinstance(blob[name], list) else blob[name] for name in names}
    raise AssertionError(f"no EMF metrics in output: {out!r}")


ACCOUNT = "123456789012"
REGION = "us-east-1"
STATE_MACHINE = "long-jobs"
STATE_MACHINE_ARN = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{STATE_MACHINE}"
TOKEN_QUEUE = "spark-tokens"


FLOW_SPARK_HEARTBEAT_S = 3
"""The Spark step's heartbeat timeout in the flows: nobody serves its token queue there."""


@dataclass
class Flow:
    """The whole path on moto with state-machine execution on: queue with redrive to a DLQ, lease
    table, the rendered workflow, a receiver and an extender, on the real clock."""

    harness: Harness
    settings: Settings
    dlq_url: str
    receiver: Receiver
    extender: Extender

    @property
    def sqs(self) -> Any:
        return self.harness.sqs

    def send_job(self, job_id: str, job_type: str = "wait", **params: Any) -> str:
        return self.harness.send(json.dumps({"job_id": job_id, "type": job_type, "params": params}))

    def canceller(self, **changes: Any) -> Canceller:
        """The operator's cancel on this flow's resources; `changes` swap its parts (a client that fails)."""
        made = Canceller(
            store=self.receiver.store,
            sqs=self.sqs,
            stepfunctions=self.harness.stepfunctions,
            dlq_url=self.dlq_url,
            clock=SystemClock(),
        )
        return dataclasses.replace(made, **changes)

    def receive_batch(self, wait_s: float = 0) -> list[Delivery]:
        """Receive like the event source mapping: the queue's own VT, up to 10 records, with their message
        attributes (a copy carries its own)."""
        messages = self.sqs.receive_message(
            QueueUrl=self.harness.queue_url,
            MaxNumberOfMessages=10,
            AttributeNames=["ApproximateReceiveCount"],
            MessageAttributeNames=["All"],
            WaitTimeSeconds=int(wait_s),
        ).get("Messages", [])
        return [
            Delivery(
                message_id=m["MessageId"],
                receipt_handle=m["ReceiptHandle"],
                body=m["Body"],
                receive_count=int(m["Attributes"]["ApproximateReceiveCount"]),
                source_arn=f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs",
                message_attributes=dict(m.get("MessageAttributes", {})),
            )
            for m in messages
        ]

    def deliver(self, wait_s: float = 0) -> dict[str, Outcome]:
        """One mapping poll: each record through the receiver; records not deferred are deleted."""
        outcomes: dict[str, Outcome] = {}
        deliveries = self.receive_batch(wait_s)
        with receive_batch(self.receiver, deliveries) as unsent:
            for delivery in deliveries:
                outcomes[delivery.message_id] = receive(self.receiver, delivery)
        for delivery in deliveries:
            if not outcomes[delivery.message_id].deferred and delivery.message_id not in unsent:
                self.sqs.delete_message(QueueUrl=self.harness.queue_url, ReceiptHandle=delivery.receipt_handle)
        return outcomes

    def lease(self, message_id: str) -> Lease:
        lease = self.receiver.store.get(message_id)
        assert lease is not None, f"no lease for {message_id}"
        return lease

    def wait_for_execution(self, arn: str, timeout_s: float = 30) -> dict[str, Any]:
        """Poll the execution until it ends, running the extender every `heartbeat_s` meanwhile (as its
        schedule would). The execution is read more often, so the test goes on soon after it ends."""
        deadline = time.monotonic() + timeout_s
        renew_next = time.monotonic()
        while time.monotonic() < deadline:
            if time.monotonic() >= renew_next:
                renew_due(self.extender, deadline=time.time() + 1)
                renew_next = time.monotonic() + self.settings.heartbeat_s
            described: dict[str, Any] = self.harness.stepfunctions.describe_execution(executionArn=arn)
            if described["status"] != "RUNNING":
                return described
            time.sleep(0.1)
        raise AssertionError(f"execution {arn} still running after {timeout_s} s")

    def wait_for_job(self, arn: str) -> None:
        """Until the execution's job branch has started (see `past_start_check`)."""
        past_start_check(self.harness.stepfunctions, arn)

    def abort(self, arn: str, **reason: str) -> None:
        """StopExecution once the job runs (see `wait_for_job`), then wait for ABORTED."""
        self.wait_for_job(arn)
        self.harness.stepfunctions.stop_execution(executionArn=arn, **reason)
        eventually(
            lambda: self.harness.stepfunctions.describe_execution(executionArn=arn)["status"] == "ABORTED",
            f"execution {arn} aborted",
        )

    def later(self, seconds: float = 60) -> Extender:
        """The extender on a clock `seconds` ahead (for reconciliation past the grace period, now)."""
        return dataclasses.replace(self.extender, clock=OffsetClock(seconds))

    def executions(self) -> list[dict[str, Any]]:
        listed = self.harness.stepfunctions.list_executions(stateMachineArn=STATE_MACHINE_ARN)["executions"]
        return list(listed)

    def dlq_messages(self) -> list[dict[str, Any]]:
        got = self.sqs.receive_message(
            QueueUrl=self.dlq_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], VisibilityTimeout=0
        )
        return list(got.get("Messages", []))


FLOW_SETTINGS = SHORT_THRESHOLD


class OffsetClock(SystemClock):
    """The real clock, read `offset_s` ahead: reconciliation then sees leases past their grace at once."""

    def __init__(self, offset_s: float) -> None:
        self.offset_s = offset_s

    def now(self) -> float:
        return super().now() + self.offset_s


@contextlib.contextmanager
def running_flow(
    catalog: JobCatalog | None = None, *, fifo: bool = False, queue_vt_s: int = 30, **settings: Any
) -> Iterator[Flow]:
    """The `Flow` on moto; `settings` over `FLOW_SETTINGS`, the workflow and receiver of `catalog` (the
    built-in job types when None). `fifo`: FIFO jobs queue and DLQ, as the stack makes them (and moto's
    receive made to keep a group's order, see `longjobs.offline.fifo`)."""
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        sqs, dynamodb, stepfunctions = aws.sqs(), aws.dynamodb(), aws.stepfunctions()
        # The offline runtime's own builder, with the queue's VT at SQS's default (the mapping's receives).
        resources = create_resources(
            sqs,
            dynamodb,
            stepfunctions,
            Settings.load({**FLOW_SETTINGS, **settings, "fifo": fifo}),
            spark_heartbeat_s=FLOW_SPARK_HEARTBEAT_S,
            catalog=catalog,
            queue_visibility_timeout_s=queue_vt_s,
        )
        loaded, queue_url, dlq_url = resources.settings, resources.queue_url, resources.dlq_url
        executor = ThreadPoolExecutor(max_workers=8)
        harness = Harness(
            sqs=sqs, dynamodb=dynamodb, stepfunctions=stepfunctions, queue_url=queue_url, executor=executor
        )
        clock = SystemClock()
        receiver = Receiver(
            settings=loaded,
            policy=build_policy(loaded),
            store=harness.store(loaded),
            sqs=sqs,
            visibility=VisibilityClient(sqs, clock=clock),
            stepfunctions=stepfunctions,
            clock=clock,
            rng=random.Random(7),
            **({"catalog": catalog} if catalog is not None else {}),
        )
        flow = Flow(harness, loaded, dlq_url, receiver, harness.extender(loaded, clock))
        try:
            yield flow
        finally:
            # Stop what still runs, or its engine thread outlives the mock and calls real AWS endpoints.
            for execution in flow.executions():
                if execution["status"] == "RUNNING":
                    flow.abort(execution["executionArn"])
            executor.shutdown(wait=True)


@pytest.fixture
def flow() -> Iterator[Flow]:
    with running_flow() as made:
        yield made


def load_handler(monkeypatch: pytest.MonkeyPatch, module: str, **env: str) -> ModuleType:
    """Import a handler module afresh under `env` (handlers read their settings at import)."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return load_function(module)


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    """The local service's AWS endpoint: moto's server behind the offline gateway (which adds SQS's message
    move task), one per test module."""
    running = Emulator()
    try:
        yield running
    finally:
        running.stop()
