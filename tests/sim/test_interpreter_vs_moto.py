"""The simulation's interpreter against moto's Step Functions engine, Catch by Catch (issue 21).

Every Catch of the workflow as deployed (the simulation's coverage targets `workflow:catch:<State>-><Next>`,
`longjobs.sim.coverage.catch_targets`) is driven through one situation (a lease, the job's lock and slot,
its message, and what a call of the workflow meets) twice: by the simulation's interpreter
(`longjobs.sim.workflow`, with the simulation's AWS and its `Integrations`, as a seed runs it) and by
moto's Step Functions engine executing the same definition with moto's SQS and DynamoDB behind it. The
two must enter the same states in the same order, take the same catches, fail the same task calls with
the same errors (after `MOTO_NAMES`, moto's documented deviations from AWS's error names) and end with
the same status and error.

A situation is set up with ordinary calls on each side (a message sent and received, items put); what a
call of the workflow meets beyond that (a 5xx after the write took effect, a concurrent writer) is a
`Fault` on the workflow's own clients: the simulation's through its `Integrations`, moto's by wrapping
the boto3 clients its engine builds for its DynamoDB and AWS SDK integrations.

A Catch moto cannot be driven to is listed in `NOT_DRIVABLE` with the reason and a probe: the probe runs
on both engines, and the test fails once moto does take it (the entry is then stale), as it fails when a
listed or compared Catch is no longer in the definition, or a Catch of the definition is in neither.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import boto3
import pytest
from moto import mock_aws
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
    state_task_service_aws_sdk,
    state_task_service_dynamodb,
)

from longjobs.engine.execution import ExecutionInput, execution_arn, execution_name
from longjobs.engine.lease import Lease, table_definition
from longjobs.engine.lease.codec import lease_to_item
from longjobs.engine.lease.lock import HELD, HOLDER_ATTR, LOCK_EXECUTION_ATTR, LOCK_STATE_ATTR, job_lock_key
from longjobs.engine.lease.schema import EXECUTION_ATTR, HANDLE_ATTR, PARTITION_KEY, STATUS_ATTR
from longjobs.sim.aws import ACCOUNT, REGION, FakeAws, client_error
from longjobs.sim.campaign import deployed_workflow
from longjobs.sim.coverage import catch_targets
from longjobs.sim.executions import Integrations
from longjobs.sim.scheduler import Scheduler, VirtualClock
from longjobs.sim.workflow import ExecutionContext, Interpreter, StatesError, read_path
from longjobs.sim.workload import LIMITED_TYPE, SPARK_HEARTBEAT_S, SPARK_PARAMS
from longjobs.sim.world import TABLE, TOKEN_QUEUE

START = 1_700_000_000.0
STATE_MACHINE_ARN = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:long-jobs"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/long-jobs"
OTHER_EXECUTION = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:long-jobs:another-attempt-2"
NEVER_ISSUED = "a-handle-sqs-never-issued"
OLDER_RECEIVE = "older-receive"
"""The lease keeps the handle of a receive SQS has since superseded (the message was received again)."""
HEARTBEAT_S = 2
"""The Spark step's heartbeat timeout here (the campaign's is `SPARK_HEARTBEAT_S`): moto waits it out in
real time, nobody serving the token queue."""
MOTO_TIMEOUT_S = 120.0  # generous: moto's engine runs on threads of a loaded machine
SLOT = f"slot#{LIMITED_TYPE}#0"

MOTO_NAMES = [
    # (the state, or any; moto's name starts so; AWS's starts so)
    (None, "sqs.", "Sqs."),
    ("RunSparkJob", "States.Timeout", "States.HeartbeatTimeout"),
]
"""moto's error names where they are not AWS's, renamed to AWS's before the comparison (moto 5.2.5):

- an error of an AWS SDK integration: moto prefixes the service's API name (`sqs.ReceiptHandleIsInvalid
  Exception`); AWS composes `ServiceName.ErrorName`, both in PascalCase (`Sqs.`: "Using AWS SDK service
  integrations", https://docs.aws.amazon.com/step-functions/latest/dg/supported-services-awssdk.html).
  The definition matches either (`LOST_HANDLE_ERRORS`, `GENERIC_SQS_ERRORS`).
- a task-token task that got no heartbeat within `HeartbeatSeconds`: moto fails it with `States.Timeout`,
  AWS with `States.HeartbeatTimeout` (the States Language's predefined error names,
  https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html). The definition
  catches both (`TIMEOUT_ERRORS`)."""


def _aws_name(state: str, error: str) -> str:
    for where, moto, aws in MOTO_NAMES:
        if where in (None, state) and error.startswith(moto):
            return aws + error.removeprefix(moto)
    return error


# -- the definition ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def definition() -> dict[str, Any]:
    """The campaign's definition (the simulation's catalog), the Spark step's heartbeat timeout shortened.
    Both engines run this one."""
    rendered = copy.deepcopy(deployed_workflow().definition)
    spark = rendered["States"]["RunJob"]["Branches"][0]["States"]["RunSparkJob"]
    assert spark["HeartbeatSeconds"] == SPARK_HEARTBEAT_S
    spark["HeartbeatSeconds"] = HEARTBEAT_S
    return rendered


def _states(definition: dict[str, Any]) -> dict[str, Any]:
    """Every state by name, the Parallel's branch included."""
    found: dict[str, Any] = {}
    for name, state in definition["States"].items():
        found[name] = state
        for branch in state.get("Branches", []):
            found.update(_states(branch))
    return found


# -- a situation -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Situation:
    """What one side set up: the message, its lease and the execution that runs it."""

    message_id: str
    handle: str
    arn: str
    job_id: str
    slot: str | None

    def key(self, target: str) -> str:
        return {"lease": self.message_id, "lock": job_lock_key(self.job_id), "slot": self.slot or ""}[target]


Action = Callable[[Any, Situation], None]
"""A concurrent writer's action, on a boto3-shaped DynamoDB client."""


def lease_taken_over(dynamodb: Any, situation: Situation) -> None:
    """A concurrent writer: the lease is another attempt's now, ACTIVE and naming another execution."""
    dynamodb.update_item(
        TableName=TABLE,
        Key={PARTITION_KEY: {"S": situation.message_id}},
        UpdateExpression="SET #status = :active, #execution = :other",
        ExpressionAttributeNames={"#status": STATUS_ATTR, "#execution": EXECUTION_ATTR},
        ExpressionAttributeValues={":active": {"S": "ACTIVE"}, ":other": {"S": OTHER_EXECUTION}},
    )


def handle_adopted(dynamodb: Any, situation: Situation) -> None:
    """A redelivery adopted the message: the lease, still this execution's, has a newer handle (one SQS
    never issued here, so the delete by it is refused the same way on both engines)."""
    dynamodb.update_item(
        TableName=TABLE,
        Key={PARTITION_KEY: {"S": situation.message_id}},
        UpdateExpression="SET #handle = :newer",
        ExpressionAttributeNames={"#handle": HANDLE_ATTR},
        ExpressionAttributeValues={":newer": {"S": NEVER_ISSUED}},
    )


def lease_cancelled(dynamodb: Any, situation: Situation) -> None:
    """An operator's cancel marked the lease CANCELLED while the job ran, and its stop did not land (refused
    past its retries, or its process died): the workflow reaches its close with the job done or failed."""
    dynamodb.update_item(
        TableName=TABLE,
        Key={PARTITION_KEY: {"S": situation.message_id}},
        UpdateExpression="SET #status = :cancelled",
        ExpressionAttributeNames={"#status": STATUS_ATTR},
        ExpressionAttributeValues={":cancelled": {"S": "CANCELLED"}},
    )


@dataclass(frozen=True)
class Fault:
    """What the n-th call of `operation` by the workflow (on `target`'s item, for DynamoDB) meets:
    `error` (code, HTTP status) answered, before the call or, `applied`, after it took effect (an answer
    lost); `then`, a concurrent writer acting right after the call."""

    operation: str
    target: str | None = None
    nth: int = 1
    times: int = 1  # the n-th call and the ones after it, this many in all
    error: tuple[str, int] | None = None
    applied: bool = False
    then: Action | None = None


class Faults:
    """The faults of one run, applied to the calls of the workflow's clients on either engine."""

    def __init__(self, faults: tuple[Fault, ...], situation: Situation, dynamodb: Any) -> None:
        self._faults = faults
        self._situation = situation
        self._dynamodb = dynamodb
        self._seen: dict[Fault, int] = {}

    def call(
        self,
        operation: str,
        params: dict[str, Any],
        do: Callable[[], Any],
        error: Callable[[str, str, int], Exception],
    ) -> Any:
        fault = self._match(operation, params)
        if fault is None:
            return do()
        try:
            if fault.error is not None and not fault.applied:
                raise error(operation, *fault.error)
            answer = do()
            if fault.error is not None:
                raise error(operation, *fault.error)
            return answer
        finally:
            if fault.then is not None:
                fault.then(self._dynamodb, self._situation)

    def _match(self, operation: str, params: dict[str, Any]) -> Fault | None:
        for fault in self._faults:
            if fault.operation != operation:
                continue
            if fault.target is not None and params.get("Key", {}).get(PARTITION_KEY, {}).get("S") != (
                self._situation.key(fault.target)
            ):
                continue
            self._seen[fault] = self._seen.get(fault, 0) + 1
            if fault.nth <= self._seen[fault] < fault.nth + fault.times:
                return fault
        return None


@dataclass(frozen=True)
class Case:
    """One situation, and the Catch targets it drives (on both engines, unless it is a probe)."""

    name: str
    catches: tuple[str, ...]
    job_type: str = "wait"
    params: dict[str, Any] = field(default_factory=lambda: {"seconds": 0})
    handle: str | None = None  # the lease's handle: the receive's when None, NEVER_ISSUED, OLDER_RECEIVE
    lock: str | None = "self"  # the job lock's holder: self, other, or no lock
    slot: str | None = None  # the execution holds a slot (in its input) held by: self, other, nobody (no item)
    faults: tuple[Fault, ...] = ()


def _arrange(sqs: Any, dynamodb: Any, queue_url: str, case: Case, now: float) -> tuple[Situation, str]:
    """The message sent and received, its lease naming the execution, the lock and slot; the input."""
    job = {"job_id": f"job-{case.name}", "type": case.job_type, "params": case.params}
    sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(job))
    [message] = sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=1, VisibilityTimeout=600, AttributeNames=["ApproximateReceiveCount"]
    )["Messages"]
    message_id, handle = str(message["MessageId"]), str(message["ReceiptHandle"])
    if case.handle == OLDER_RECEIVE:  # received again: the lease's handle is the older receive's
        sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=handle, VisibilityTimeout=0)
        assert sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=600)["Messages"]
    elif case.handle is not None:
        handle = case.handle
    arn = execution_arn(STATE_MACHINE_ARN, execution_name(message_id, 1))
    slot = SLOT if case.slot is not None else None
    situation = Situation(message_id, handle, arn, str(job["job_id"]), slot)
    lease = Lease(
        message_id=message_id,
        queue_url=queue_url,
        receipt_handle=situation.handle,
        receive_count=1,
        received_at=now,
        visible_until=now + 600,
        renew_until=now + 43_200,
        renew_at=now + 300,
        execution_arn=arn,
        attempt=1,
        job_type=case.job_type,
        job_id=situation.job_id,
        slot=slot,
    )
    dynamodb.put_item(TableName=TABLE, Item=lease_to_item(lease, 0))
    holders = {"self": arn, "other": OTHER_EXECUTION}
    for key, holder in ((job_lock_key(situation.job_id), case.lock), (SLOT, case.slot)):
        if holder in holders:
            item = {
                PARTITION_KEY: {"S": key},
                LOCK_STATE_ATTR: {"S": HELD},
                LOCK_EXECUTION_ATTR: {"S": holders[holder]},
                HOLDER_ATTR: {"S": message_id},
            }
            dynamodb.put_item(TableName=TABLE, Item=item)
    payload = ExecutionInput(
        message_id=message_id, attempt=1, queue_url=queue_url, release_delay_s=0, job=job, slot=slot
    )
    return situation, payload.to_json()


# -- a run on either engine --------------------------------------------------------------------------------


@dataclass
class Run:
    """What an engine did: the states entered, the catches taken, the task calls that failed, the end."""

    entered: list[str]
    catches: list[str]
    task_errors: list[tuple[str, str]]
    status: str
    error: str | None


class _WorkflowClient:
    """The workflow's client of one simulated service (the seam `SimClient.call` is in a seed, without its
    latency and drawn faults), with the run's faults."""

    def __init__(self, backend: Any, faults: Faults) -> None:
        self._backend = backend
        self._faults = faults

    def call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        def error(operation: str, code: str, status: int) -> Exception:
            name = "".join(part.title() for part in operation.split("_"))
            return client_error(name, code, "injected", status=status)

        return cast(
            dict[str, Any],
            self._faults.call(operation, params, lambda: getattr(self._backend, operation)(**params), error),
        )


@dataclass
class _SimWorld:
    """What `longjobs.sim.executions.Integrations` reads of its world: the workflow's clients, the simulated
    AWS (task tokens) and the scheduler. Nobody serves the Spark token queue."""

    workflow_clients: dict[str, _WorkflowClient]
    aws: FakeAws
    scheduler: Scheduler

    def spark_task_sent(self, token: str, body: Any) -> None:
        pass


class _Recording(Integrations):
    """The simulation's integrations, each error a task call raised noted with its state."""

    def __init__(self, world: Any) -> None:
        super().__init__(world)
        self.errors: list[tuple[str, str]] = []

    def invoke(self, resource: str, parameters: Any, context: ExecutionContext) -> Any:
        try:
            return super().invoke(resource, parameters, context)
        except StatesError as exc:
            self.errors.append((context.state_name, exc.error))
            raise


def run_interpreter(definition: dict[str, Any], case: Case) -> Run:
    """The case on the simulation's interpreter, its AWS and its integrations, on virtual time."""
    scheduler = Scheduler(START)
    aws = FakeAws(
        VirtualClock(scheduler),
        random.Random(1),
        table=table_definition(TABLE),
        state_machine_arn=STATE_MACHINE_ARN,
    )
    queue_url = aws.sqs.create_queue("jobs", visibility_timeout_s=30).url
    aws.sqs.create_queue(TOKEN_QUEUE, visibility_timeout_s=30)
    situation, payload = _arrange(aws.sqs, aws.dynamodb, queue_url, case, START)
    faults = Faults(case.faults, situation, aws.dynamodb)
    clients = {"sqs": _WorkflowClient(aws.sqs, faults), "dynamodb": _WorkflowClient(aws.dynamodb, faults)}
    integrations = _Recording(_SimWorld(clients, aws, scheduler))
    interpreter = Interpreter(definition, integrations, scheduler)
    context = ExecutionContext(situation.arn, START)
    outcomes = []
    scheduler.spawn(lambda: outcomes.append(interpreter.run(json.loads(payload), context, random.Random(1))))
    scheduler.run(until=START + 3_600)
    [outcome] = outcomes
    return Run(
        entered=[visit for visit in context.visits if not visit.startswith(("catch:", "retry:"))],
        catches=[f"workflow:{visit}" for visit in context.visits if visit.startswith("catch:")],
        task_errors=integrations.errors,
        status=outcome.status,
        error=outcome.error,
    )


class _MotoClient:
    """A boto3 client moto's engine built for an integration, the run's faults on its calls."""

    def __init__(self, client: Any, faults: Faults) -> None:
        self._client = client
        self._faults = faults

    def __getattr__(self, operation: str) -> Any:
        method = getattr(self._client, operation)
        if not callable(method):
            return method

        def error(operation: str, code: str, status: int) -> Exception:
            response: Any = {
                "Error": {"Code": code, "Message": "injected"},
                "ResponseMetadata": {"HTTPStatusCode": status, "RequestId": "injected"},
            }
            name = "".join(part.title() for part in operation.split("_"))
            return cast(Exception, self._client.exceptions.from_code(code)(response, name))

        return lambda **params: self._faults.call(operation, params, lambda: method(**params), error)


@contextmanager
def _moto_faults(monkeypatch: pytest.MonkeyPatch, faults: Faults) -> Iterator[None]:
    """The faults on the clients moto's engine builds for its DynamoDB and AWS SDK (SQS) integrations."""
    with monkeypatch.context() as patch:
        for module in (state_task_service_dynamodb, state_task_service_aws_sdk):
            built = module.boto_client_for

            def wrapped(*args: Any, built: Any = built, **kwargs: Any) -> Any:
                return _MotoClient(built(*args, **kwargs), faults)

            patch.setattr(module, "boto_client_for", wrapped)
        yield


def _moto_history(stepfunctions: Any, arn: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    request: dict[str, Any] = {"executionArn": arn, "maxResults": 1000}
    while True:
        page = stepfunctions.get_execution_history(**request)
        events += page["events"]
        if not page.get("nextToken"):
            return events
        request["nextToken"] = page["nextToken"]


def _caught(states: dict[str, Any], entered: list[tuple[str, Any]], index: int) -> str | None:
    """The Catch that led to the `index`-th state entered (each a name and its input), if one did: the
    last state entered before it with a Catch to it (a Parallel's, whose branch states came between)
    whose `ResultPath` in this input holds an error that state's input did not."""
    following, later = entered[index]
    for name, earlier in reversed(entered[:index]):
        catchers = [catcher for catcher in states[name].get("Catch", []) if catcher["Next"] == following]
        if not catchers:
            continue
        path = catchers[0].get("ResultPath", "$")
        error = read_path(path, later, {})
        if isinstance(error, dict) and "Error" in error and read_path(path, earlier, {}) != error:
            return f"workflow:catch:{name}->{following}"
        return None
    return None


def run_moto(definition: dict[str, Any], case: Case, monkeypatch: pytest.MonkeyPatch) -> Run:
    """The case on moto's Step Functions engine, in process, with moto's SQS and DynamoDB, on the real clock."""
    moto_log = logging.getLogger("moto.stepfunctions")  # it logs every error a state raises, caught or not
    level = moto_log.level
    moto_log.setLevel(logging.CRITICAL)
    try:
        return _run_moto(definition, case, monkeypatch)
    finally:
        moto_log.setLevel(level)


def _run_moto(definition: dict[str, Any], case: Case, monkeypatch: pytest.MonkeyPatch) -> Run:
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        sqs = boto3.client("sqs", region_name=REGION)
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        stepfunctions = boto3.client("stepfunctions", region_name=REGION)
        dynamodb.create_table(**table_definition(TABLE))
        queue_url = sqs.create_queue(QueueName="jobs", Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
        sqs.create_queue(QueueName=TOKEN_QUEUE, Attributes={"VisibilityTimeout": "30"})
        stepfunctions.create_state_machine(name="long-jobs", definition=json.dumps(definition), roleArn=ROLE_ARN)
        situation, payload = _arrange(sqs, dynamodb, queue_url, case, time.time())
        with _moto_faults(monkeypatch, Faults(case.faults, situation, dynamodb)):
            stepfunctions.start_execution(
                stateMachineArn=STATE_MACHINE_ARN, name=situation.arn.rpartition(":")[2], input=payload
            )
            deadline = time.monotonic() + MOTO_TIMEOUT_S
            while (described := stepfunctions.describe_execution(executionArn=situation.arn))["status"] == "RUNNING":
                if time.monotonic() > deadline:
                    stepfunctions.stop_execution(executionArn=situation.arn)
                    raise AssertionError(f"{case.name}: moto's execution still running after {MOTO_TIMEOUT_S} s")
                time.sleep(0.05)
        events = _moto_history(stepfunctions, situation.arn)
    states = _states(definition)
    entered: list[tuple[str, Any]] = []
    task_errors: list[tuple[str, str]] = []
    for event in events:
        if "stateEnteredEventDetails" in event:
            details = event["stateEnteredEventDetails"]
            entered.append((details["name"], json.loads(details.get("input") or "{}")))
        for kind in ("taskFailedEventDetails", "taskTimedOutEventDetails"):
            if kind in event:
                state = entered[-1][0]
                error = _aws_name(state, event[kind].get("error", ""))
                task_errors.append((state, error))
    catches = [caught for index in range(len(entered)) if (caught := _caught(states, entered, index)) is not None]
    return Run(
        entered=[name for name, _ in entered],
        catches=catches,
        task_errors=task_errors,
        status=described["status"],
        error=described.get("error"),
    )


# -- the cases ---------------------------------------------------------------------------------------------

FAILS = {"seconds": 0, "fail": True}
LEASE_5XX_APPLIED = ("InternalServerError", 500)
READ_REFUSED = ("AccessDeniedException", 400)
"""An error the workflow does not retry: straight to the task's Catch, as the last of its retries would go."""

CASES = [
    Case("job-fails", ("workflow:catch:RunJob->ReadLeaseForRelease",), params=FAILS),
    Case(
        "spark-without-heartbeats",
        ("workflow:catch:RunSparkJob->JobTimedOut", "workflow:catch:RunJob->ReadLeaseForRelease"),
        job_type="spark",
        params=SPARK_PARAMS,
    ),
    Case(
        "success-transaction-landed-unanswered",
        ("workflow:catch:SucceededAndFreed->MarkSucceeded", "workflow:catch:MarkSucceeded->ReadLease"),
        faults=(Fault("transact_write_items", error=LEASE_5XX_APPLIED, applied=True),),
    ),
    Case(
        "superseded-before-the-close",
        ("workflow:catch:SucceededAndFreed->MarkSucceeded", "workflow:catch:MarkSucceeded->ReadLease"),
        faults=(Fault("transact_write_items", error=("ThrottlingException", 400), then=lease_taken_over),),
    ),
    Case(
        # the close is conditional on the handle the start read: a newer one is read, then settled with
        "handle-adopted-before-the-close",
        (
            "workflow:catch:SucceededAndFreed->MarkSucceeded",
            "workflow:catch:MarkSucceeded->ReadLease",
            "workflow:catch:DeleteMessage->FreedAtOnce",
        ),
        faults=(Fault("transact_write_items", error=("ThrottlingException", 400), then=handle_adopted),),
    ),
    Case(
        # seed 5054's end: the transaction throttled, MarkSucceeded landed unanswered, every read after it failed
        "mark-succeeded-landed-unanswered-then-reads-refused",
        (
            "workflow:catch:SucceededAndFreed->MarkSucceeded",
            "workflow:catch:MarkSucceeded->ReadLease",
            "workflow:catch:ReadLease->ReleaseJobLock",
        ),
        faults=(
            Fault("transact_write_items", error=("ThrottlingException", 400)),
            Fault("update_item", "lease", error=LEASE_5XX_APPLIED, applied=True),
            Fault("get_item", "lease", nth=2, error=READ_REFUSED),
        ),
    ),
    Case(
        # issue 38: the success close refuses a CANCELLED lease, and the execution ends Cancelled
        "cancelled-while-the-job-ran",
        ("workflow:catch:SucceededAndFreed->MarkSucceeded", "workflow:catch:MarkSucceeded->ReadLease"),
        faults=(Fault("get_item", "lease", then=lease_cancelled),),
    ),
    Case(
        # the failure path leaves a CANCELLED lease as it is: no RELEASED, no release of the message
        "cancelled-while-the-job-failed",
        ("workflow:catch:RunJob->ReadLeaseForRelease",),
        params=FAILS,
        faults=(Fault("get_item", "lease", then=lease_cancelled),),
    ),
    Case("delete-refused", ("workflow:catch:DeleteMessage->FreedAtOnce",), handle=NEVER_ISSUED),
    Case(
        # a close that fails for good after the job succeeded: the message is deleted all the same
        "close-refused-for-good",
        ("workflow:catch:SucceededAndFreed->MarkSucceeded", "workflow:catch:MarkSucceeded->DeleteMessage"),
        faults=(
            Fault("transact_write_items", error=("ThrottlingException", 400)),
            Fault("update_item", "lease", error=READ_REFUSED),
        ),
    ),
    Case(
        "lock-of-another",
        ("workflow:catch:SucceededAndFreed->MarkSucceeded", "workflow:catch:ReleaseJobLock->HoldsSlot"),
        lock="other",
    ),
    Case(
        "slot-of-another",
        ("workflow:catch:SucceededAndFreedWithSlot->MarkSucceeded", "workflow:catch:ReleaseSlot->JobSucceeded"),
        job_type=LIMITED_TYPE,
        slot="other",
    ),
    Case(
        "mark-released-landed-unanswered",
        ("workflow:catch:RunJob->ReadLeaseForRelease", "workflow:catch:MarkReleased->ReadLeaseForRelease"),
        params=FAILS,
        faults=(Fault("update_item", "lease", error=LEASE_5XX_APPLIED, applied=True),),
    ),
    Case(
        "mark-released-landed-unanswered-then-reads-refused",
        (
            "workflow:catch:RunJob->ReadLeaseForRelease",
            "workflow:catch:MarkReleased->ReadLeaseForRelease",
            "workflow:catch:ReadLeaseForRelease->ReleaseJobLockOnFailure",
        ),
        params=FAILS,
        faults=(
            Fault("update_item", "lease", error=LEASE_5XX_APPLIED, applied=True),
            Fault("get_item", "lease", nth=3, error=READ_REFUSED),
        ),
    ),
    Case(
        "release-refused-handle-lost",
        ("workflow:catch:RunJob->ReadLeaseForRelease", "workflow:catch:ReleaseMessage->ReleaseRefused"),
        params=FAILS,
        handle=NEVER_ISSUED,
    ),
    Case(
        "no-lock-on-failure",
        ("workflow:catch:RunJob->ReadLeaseForRelease", "workflow:catch:ReleaseJobLockOnFailure->HoldsSlotOnFailure"),
        params=FAILS,
        lock=None,
    ),
    Case(
        "no-slot-item-on-failure",
        ("workflow:catch:RunJob->ReadLeaseForRelease", "workflow:catch:ReleaseSlotOnFailure->ReadForRelease"),
        job_type=LIMITED_TYPE,
        params=FAILS,
        slot="nobody",
    ),
    Case(
        "mark-lost-superseded",
        (
            "workflow:catch:RunJob->ReadLeaseForRelease",
            "workflow:catch:ReleaseMessage->ReleaseRefused",
            "workflow:catch:MarkLost->JobFailed",
        ),
        params=FAILS,
        handle=NEVER_ISSUED,
        faults=(Fault("change_message_visibility", then=lease_taken_over),),
    ),
]


@dataclass(frozen=True)
class NotDrivable:
    """A Catch, or a way to it, that moto's engine cannot be driven to: why, and a probe, a case the
    interpreter takes it in (`probe.catches`) and moto does not."""

    reason: str
    probe: Case


NOT_DRIVABLE: dict[str, NotDrivable] = {}
"""The Catches moto cannot be driven to at all, by their coverage names: none, with moto 5.2.5."""

NOT_DRIVABLE_ROUTES = [
    NotDrivable(
        "SQS refuses a visibility change by the handle of a receive it has since superseded ('The receipt "
        "handle has expired', `tests/sim/test_contract.py`), and the workflow then makes the lease LOST; moto "
        "accepts any handle the message ever had (`had_receipt_handle`), so its release succeeds and the "
        "execution ends at JobFailed without the catch",
        Case(
            "release-by-an-older-receive",
            ("workflow:catch:RunJob->ReadLeaseForRelease", "workflow:catch:ReleaseMessage->ReleaseRefused"),
            params=FAILS,
            handle=OLDER_RECEIVE,
        ),
    ),
]
"""Other ways to a compared Catch that moto does not take, each a deviation of moto from AWS."""


# -- the tests ---------------------------------------------------------------------------------------------


NOT_ON_MOTO = {
    "workflow:catch:RunSparkEmrJob->JobTimedOut": (
        "the EMR Serverless `.sync` step: moto has no EMR Serverless and its engine runs no `.sync` integration, "
        "so the offline runtime runs the type on the token queue; the simulation's own model answers it "
        "(`longjobs.sim.emr`, its coverage targets `emr:*`, tests/sim/test_emr_serverless.py)"
    ),
}
"""The Catches of states moto cannot run at all, with the reason: they are compared with no engine."""


def _emr_catches(states: dict[str, Any]) -> set[str]:
    found = set()
    for name, state in states.items():
        if "emr-serverless" in str(state.get("Resource", "")):
            found |= {f"workflow:catch:{name}->{catch['Next']}" for catch in state.get("Catch", [])}
        for branch in state.get("Branches", []):
            found |= _emr_catches(branch["States"])
    return found


def test_interpreter_every_catch_of_the_definition_is_compared_or_listed(definition: dict[str, Any]) -> None:
    states = deployed_workflow().definition["States"]
    assert _emr_catches(states) == set(NOT_ON_MOTO), "NOT_ON_MOTO lists exactly the Catches of the EMR step"
    targets = [target for target in catch_targets(states) if target not in NOT_ON_MOTO]
    assert len(targets) == len(set(targets)), "two Catches of one state lead to one state: name them apart"
    compared = {target for case in CASES for target in case.catches}
    assert not compared & set(NOT_DRIVABLE), "a Catch compared on both engines is listed as not drivable"
    assert set(NOT_DRIVABLE) <= set(targets), f"listed but not in the definition: {set(NOT_DRIVABLE) - set(targets)}"
    assert all(target in NOT_DRIVABLE[target].probe.catches for target in NOT_DRIVABLE)
    assert all(set(route.probe.catches) <= compared for route in NOT_DRIVABLE_ROUTES)
    assert compared <= set(targets), f"compared but not in the definition: {compared - set(targets)}"
    assert sorted(compared | set(NOT_DRIVABLE)) == sorted(targets), "a Catch neither compared nor listed"
    assert set(catch_targets(definition["States"])) - set(NOT_ON_MOTO) == set(targets)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_interpreter_and_moto_take_the_same_path(
    definition: dict[str, Any], case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    simulated = run_interpreter(definition, case)
    moto = run_moto(definition, case, monkeypatch)

    assert set(case.catches) <= set(simulated.catches), f"the interpreter took {simulated.catches}"
    assert simulated.entered == moto.entered
    assert simulated.catches == moto.catches
    assert simulated.task_errors == moto.task_errors
    assert (simulated.status, simulated.error) == (moto.status, moto.error)


PROBES = [(target, entry) for target, entry in sorted(NOT_DRIVABLE.items())] + [
    (route.probe.catches[-1], route) for route in NOT_DRIVABLE_ROUTES
]


@pytest.mark.parametrize(("target", "entry"), PROBES, ids=[entry.probe.name for _, entry in PROBES])
def test_interpreter_what_is_listed_not_drivable_is_still_not_taken_by_moto(
    definition: dict[str, Any], target: str, entry: NotDrivable, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert target in run_interpreter(definition, entry.probe).catches
    assert target not in run_moto(definition, entry.probe, monkeypatch).catches, (
        f"moto takes {target} now ({entry.probe.name}): compare it, and take it off the list"
    )


def test_success_outlasts_a_minute_of_dynamodb_errors_on_the_interpreter(definition: dict[str, Any]) -> None:
    """The success path's close and releases retry for minutes (`PATIENT_ATTEMPTS`): found by the
    simulation (seed 214 of the mixed profile, its faults focused on the workflow's DynamoDB calls), a job
    whose success path met seven 5xx in a row ended its execution FAILED, and the message went to the DLQ
    with its job done. Here the transaction (which has no retries) is refused, then the step-by-step close
    meets ten 5xx: more than the six attempts of before. The interpreter only: moto's engine would wait
    the backoff out in real time."""
    faults = (
        Fault("transact_write_items", error=("InternalServerError", 500)),
        Fault("update_item", "lease", times=10, error=("InternalServerError", 500)),
    )
    run = run_interpreter(definition, Case("success-close-fails-for-minutes", (), faults=faults))
    assert (run.status, run.error) == ("SUCCEEDED", None)
    assert run.task_errors.count(("MarkSucceeded", "DynamoDB.InternalServerError")) == 10
    assert run.entered[-6:] == [
        "MarkSucceeded",
        "DeleteMessage",
        "FreedAtOnce",
        "ReleaseJobLock",
        "HoldsSlot",
        "JobSucceeded",
    ]


@pytest.mark.parametrize(
    ("name", "error", "last"),
    [
        ("cancelled-while-the-job-ran", "Cancelled", "CancelledMeanwhile"),
        ("cancelled-while-the-job-failed", "WaitJobFailed", "JobFailed"),
    ],
)
def test_interpreter_a_lease_cancelled_while_its_job_ran_is_left_cancelled_by_the_workflow(
    definition: dict[str, Any], name: str, error: str, last: str
) -> None:
    """Issue 38: a job that ends after its lease was marked CANCELLED neither closes it SUCCEEDED (nor
    deletes its message as succeeded) nor RELEASED (nor gives the message back): the cancel, or the extender
    finishing it, settles the message."""
    [case] = [case for case in CASES if case.name == name]
    run = run_interpreter(definition, case)
    assert (run.status, run.error) == ("FAILED", error)
    assert run.entered[-1] == last
    assert not {"DeleteMessage", "MarkReleased", "ReleaseMessage"} & set(run.entered)
