"""The offline faults: hooks on real boto3 clients answer as each service does, draws are seeded per fault,
crashes end the invocation, and scheduled runs are lost on a fake clock. No request leaves the process:
the hook answers injected calls itself, and a stand-in transport answers the others."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.retries.standard
import pytest
from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders
from botocore.exceptions import ClientError

from longjobs.engine.aws import CLIENT_CONFIG
from longjobs.offline.faults import Faults, Injection, RunSlot, function_clients
from longjobs.offline.lambdas import InvocationCrashed
from longjobs.offline.scenario import Scenario, parse_scenario
from longjobs.offline.scheduler import Scheduler

STATE_MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:long-jobs"
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "sqs": (
        "change_message_visibility",
        {"QueueUrl": "http://q/1/jobs", "ReceiptHandle": "h1", "VisibilityTimeout": 1},
    ),
    "dynamodb": ("get_item", {"TableName": "leases", "Key": {"pk": {"S": "m1"}}}),
    "stepfunctions": ("start_execution", {"stateMachineArn": STATE_MACHINE, "name": "m1-1", "input": "{}"}),
}
"""One call per service, by client method name and parameters."""


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore's retries, without the waits between them."""
    monkeypatch.setattr(botocore.retries.standard.ExponentialBackoff, "delay_amount", lambda self, context: 0)


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def scenario(*faults: dict[str, Any], settings: dict[str, Any] | None = None, seed: int = 7) -> Scenario:
    return parse_scenario(
        {
            "settings": settings or {},
            "jobs": [{"id": "a", "type": "wait", "seconds": 1}],
            "faults": list(faults),
            "seed": seed,
        }
    )


def fault(**keys: Any) -> dict[str, Any]:
    return {"type": "aws_fault", **keys}


@dataclass
class Sent:
    """The stand-in transport's record: the operations that went past the hooks."""

    operations: list[str]


def client(service: str, sent: Sent | None = None) -> Any:
    """A client as `longjobs.engine.aws` builds them, on an endpoint nothing listens to; with `sent`, the calls
    the faults let through are answered with an empty success instead of going to the network."""
    session = boto3.session.Session(aws_access_key_id="a", aws_secret_access_key="b", region_name="us-east-1")
    made = session.client(service, endpoint_url="http://127.0.0.1:9", config=CLIENT_CONFIG)  # type: ignore[call-overload]
    if sent is not None:

        def transport(request: Any) -> AWSResponse:
            sent.operations.append(request.headers.get("X-Amz-Target", b"").decode().rpartition(".")[2])
            headers = HTTPHeaders()
            headers["Content-Type"] = "application/x-amz-json-1.0"
            return AWSResponse(request.url, 200, headers, _Raw(b"{}"))

        made._endpoint.http_session.send = transport
    return made


class _Raw:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data


@dataclass
class Service:
    """A function's service object: clients as attributes and one level down."""

    sqs: Any
    store: Any


@dataclass
class Store:
    _client: Any


def call(made: Any, service: str) -> Any:
    method, params = CALLS[service]
    return getattr(made, method)(**params)


def test_function_clients_finds_each_client_once_one_level_deep() -> None:
    sqs, dynamodb = client("sqs"), client("dynamodb")
    deeper = Store(Store(Store(client("stepfunctions"))))

    found = function_clients(Service(sqs=sqs, store=Store(dynamodb)))

    assert found == [sqs, dynamodb]
    assert function_clients(Service(sqs=sqs, store=Store(sqs))) == [sqs], "one client, reached twice"
    assert function_clients(deeper) == [], "two levels down is not looked at"


@pytest.mark.parametrize(
    ("service", "code", "query_code"),
    [
        ("sqs", "RequestThrottled", "ThrottlingException"),
        ("dynamodb", "ProvisionedThroughputExceededException", None),
        ("stepfunctions", "ThrottlingException", None),
    ],
)
def test_fault_hook_throttles_as_each_service_does(service: str, code: str, query_code: str | None) -> None:
    faults = Faults(scenario(fault(function="receiver", operation="*", mode="throttled")))
    made = client(service)
    faults.install("receiver", Service(sqs=made, store=None))

    with pytest.raises(ClientError) as caught:
        call(made, service)

    error = caught.value.response
    assert (error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]) == (code, 400)
    assert error["Error"].get("QueryErrorCode") == query_code
    assert faults.injected_by_mode() == {"throttled": 4}, "botocore retried it three times, each call drawn again"
    assert [i.surfaced for i in faults.injections] == [False, False, False, True]


@pytest.mark.parametrize(
    ("service", "code"),
    [("sqs", "InternalError"), ("dynamodb", "InternalServerError"), ("stepfunctions", "InternalFailure")],
)
def test_fault_hook_fails_with_each_services_internal_error(service: str, code: str) -> None:
    faults = Faults(scenario(fault(function="extender", operation="*", mode="server_error", count=2)))
    sent = Sent([])
    made = client(service, sent)
    faults.install("extender", Service(sqs=made, store=None))

    call(made, service)  # two 500s, then the third attempt goes through

    assert faults.injected_by_mode() == {"server_error": 2}
    assert len(sent.operations) == 1
    faults2 = Faults(scenario(fault(function="extender", operation="*", mode="server_error")))
    made2 = client(service)
    faults2.install("extender", Service(sqs=made2, store=None))
    with pytest.raises(ClientError) as caught:
        call(made2, service)
    assert (caught.value.response["Error"]["Code"], caught.value.response["ResponseMetadata"]["HTTPStatusCode"]) == (
        code,
        500,
    )


def test_fault_hook_crash_ends_the_invocation_before_sending() -> None:
    faults = Faults(
        scenario(
            fault(function="receiver", operation="StartExecution", mode="crash_before", count=1),
            fault(function="receiver", operation="GetItem", mode="throttled"),
        )
    )
    sent = Sent([])
    sfn, dynamodb = client("stepfunctions", sent), client("dynamodb", sent)
    faults.install("receiver", Service(sqs=sfn, store=Store(dynamodb)))
    faults.begin_invocation("receiver")

    with pytest.raises(InvocationCrashed):
        try:
            call(sfn, "stepfunctions")
        except Exception:  # what a function's own handling would do
            pytest.fail("an `except Exception` caught the crash")
    with pytest.raises(InvocationCrashed, match="died earlier"):
        call(dynamodb, "dynamodb")  # the dead invocation sends nothing more, on any client
    faults.end_invocation("receiver")
    faults.begin_invocation("receiver")
    with pytest.raises(ClientError, match="ProvisionedThroughputExceeded"):
        call(dynamodb, "dynamodb")  # a new invocation: drawn again, throttled

    assert sent.operations == []
    assert faults.injected_by_mode() == {"crash_before": 1, "throttled": 4}
    assert faults.injections[0].operation == "StartExecution"


def test_fault_hook_crash_names_the_receivers_message_at_its_visibility_change() -> None:
    faults = Faults(scenario(fault(function="receiver", operation="ChangeMessageVisibility", mode="crash_before")))
    sqs = client("sqs")
    faults.install("receiver", Service(sqs=sqs, store=None))
    faults.begin_invocation("receiver", {"h1": "m1", "h2": "m2"})

    with pytest.raises(InvocationCrashed):
        call(sqs, "sqs")

    assert faults.injections[0].message_ids == ("m1",)
    assert faults.receiver_visibility_crashes("m1") == [faults.injections[0].at]
    assert faults.receiver_visibility_crashes("m2") == []


def test_fault_hook_matches_function_operation_window_and_count() -> None:
    clock = FakeClock()
    faults = Faults(
        scenario(fault(function="extender", operation="GetItem", mode="throttled", count=5, at_s=10, until_s=20)),
        clock=clock,
    )
    sent = Sent([])
    extender, receiver = client("dynamodb", sent), client("dynamodb", sent)
    faults.install("extender", Service(sqs=extender, store=None))
    faults.install("receiver", Service(sqs=receiver, store=None))
    faults.begin()

    clock.now += 5
    call(extender, "dynamodb")  # before the window
    clock.now += 10
    call(receiver, "dynamodb")  # another function
    extender.put_item(TableName="leases", Item={"pk": {"S": "m1"}})  # another operation
    with pytest.raises(ClientError):
        call(extender, "dynamodb")  # four attempts, four injections
    call(extender, "dynamodb")  # the fifth and last injection, then the retry goes through
    call(extender, "dynamodb")  # the count is spent
    clock.now += 10
    call(extender, "dynamodb")  # after the window

    assert sent.operations == ["GetItem", "GetItem", "PutItem", "GetItem", "GetItem", "GetItem"]
    assert faults.injected_by_mode() == {"throttled": 5}
    assert faults.faults_missed() == []


def test_fault_draws_are_seeded_per_fault() -> None:
    def pattern(*faults: dict[str, Any]) -> list[bool]:
        made = Faults(scenario(*faults, seed=3))
        sqs = client("sqs", Sent([]))
        made.install("extender", Service(sqs=sqs, store=None))
        hits = []
        for _ in range(30):
            before = made.injected["throttled"]
            with contextlib.suppress(ClientError):
                sqs.delete_message(QueueUrl="http://q/1/jobs", ReceiptHandle="h")
            hits.append(made.injected["throttled"] > before)
            with contextlib.suppress(ClientError):
                sqs.send_message(QueueUrl="http://q/1/jobs", MessageBody="x")
        return hits

    half = fault(function="extender", operation="DeleteMessage", mode="throttled", probability=0.5)
    other = fault(function="extender", operation="SendMessage", mode="server_error", probability=0.5)

    alone = pattern(half)
    assert alone == pattern(half), "the same seed draws the same"
    assert pattern(half, other) == alone, "a fault added after it does not change its draws"
    assert 5 < sum(alone) < 25


def test_fault_first_matching_hit_applies() -> None:
    faults = Faults(
        scenario(
            fault(function="any", operation="DeleteMessage", mode="server_error", count=1),
            fault(function="extender", operation="*", mode="throttled", count=1),
        )
    )
    sent = Sent([])
    sqs = client("sqs", sent)
    faults.install("extender", Service(sqs=sqs, store=None))

    sqs.delete_message(QueueUrl="http://q/1/jobs", ReceiptHandle="h")

    assert [i.mode for i in faults.injections] == ["server_error", "throttled"]
    assert sent.operations == ["DeleteMessage"]


def test_fault_report_names_faults_that_never_applied() -> None:
    faults = Faults(
        scenario(
            fault(function="watcher", operation="StopExecution", mode="crash_before"),
            fault(function="extender", operation="DeleteMessage", mode="server_error", probability=0.001),
            {"type": "lose_scheduled_runs", "probability": 0.001},
            {"type": "drop_status_events", "probability": 1.0},
        )
    )
    sent = Sent([])
    sqs = client("sqs", sent)
    faults.install("extender", Service(sqs=sqs, store=None))
    sqs.delete_message(QueueUrl="http://q/1/jobs", ReceiptHandle="h")

    assert faults.faults_missed() == [
        "faults[0] aws_fault (watcher StopExecution crash_before): no matching call in its window",
        "faults[1] aws_fault (extender DeleteMessage server_error): 1 matching call(s) in its window, none drawn",
        "faults[2] lose_scheduled_runs: none of 0 scheduled run(s) drawn",
        "faults[3] drop_status_events: no status event to drop",
    ]


class FakeTime:
    """A monotonic clock (from `now`) and a wait that advances it; the wait says stop after `until`."""

    def __init__(self, until: float, now: float = 0.0) -> None:
        self.now = now
        self.until = until

    def clock(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.now += seconds
        return self.now > self.until


def test_lose_scheduled_runs_skips_seeded_runs_on_a_fake_clock() -> None:
    def schedule(seed: int) -> tuple[Scheduler, Faults]:
        fake = FakeTime(until=99.5)
        faults = Faults(scenario({"type": "lose_scheduled_runs", "probability": 0.25}, seed=seed), clock=fake.clock)
        invoked: list[float] = []

        def invoke() -> None:
            faults.begin_invocation("extender")
            invoked.append(fake.now)
            faults.end_invocation("extender", period_s=1)

        scheduler = Scheduler(invoke, 1.0, skip=faults.skip_run, clock=fake.clock, wait=fake.wait)
        scheduler.run()  # on this thread: the fake wait ends it after 100 slots
        assert scheduler.runs == len(invoked)
        return scheduler, faults

    scheduler, faults = schedule(seed=11)

    lost = scheduler.skipped["lost"]
    assert scheduler.runs + lost == 100
    assert 10 < lost < 40
    assert faults.injected_by_mode() == {"extender_skipped": lost}
    assert [slot.at for slot in faults.runs] == [float(k) for k in range(100)], "every slot, on the fake clock"
    assert sum(slot.outcome == "lost" for slot in faults.runs) == lost
    again, _ = schedule(seed=11)
    assert again.skipped == scheduler.skipped, "the same seed loses the same runs"
    other, _ = schedule(seed=12)
    assert other.skipped != scheduler.skipped


def test_pause_extender_skips_runs_in_its_window() -> None:
    fake = FakeTime(until=9.5)
    faults = Faults(scenario({"type": "pause_extender", "at_s": 3, "for_s": 2}), clock=fake.clock)
    faults.begin()
    scheduler = Scheduler(lambda: None, 1.0, skip=faults.skip_run, clock=fake.clock, wait=fake.wait)

    scheduler.run()

    assert (scheduler.runs, dict(scheduler.skipped)) == (8, {"paused": 2})
    assert [(slot.at, slot.outcome) for slot in faults.runs] == [(3.0, "paused"), (4.0, "paused")]


def test_extender_run_outcomes_recorded_with_overrun_slots() -> None:
    clock = FakeClock(0.0)
    faults = Faults(
        scenario(
            fault(function="extender", operation="Query", mode="crash_before", count=1),
            fault(function="extender", operation="GetItem", mode="throttled", count=1),
            fault(function="extender", operation="UpdateItem", mode="server_error", count=4),
        ),
        clock=clock,
    )
    dynamodb = client("dynamodb", Sent([]))
    faults.install("extender", Service(sqs=dynamodb, store=None))

    def run(at: float, until: float, *calls: str) -> str:
        clock.now = at
        faults.begin_invocation("extender")
        for name in calls:
            with contextlib.suppress(ClientError):
                getattr(dynamodb, name)(TableName="leases", Key={"pk": {"S": "m"}})
        clock.now = until
        return faults.end_invocation("extender", period_s=1)

    clock.now = 0.0
    faults.begin_invocation("extender")
    with pytest.raises(InvocationCrashed):
        dynamodb.query(
            TableName="leases", KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "x"}}
        )
    clock.now = 0.5
    assert faults.end_invocation("extender", period_s=1) == "crashed"
    assert run(1.0, 1.4) == "ran"
    assert run(2.0, 2.9, "get_item") == "ran", "a throttle botocore retried within the period"
    assert run(3.0, 5.5) == "ran", "slow, but no fault made it so"
    assert run(6.0, 6.5, "update_item") == "impaired", "a renewal-path call failed for good"
    assert run(7.0, 7.2) == "ran"
    faults._hits.clear()
    assert run(8.0, 10.2, "get_item") == "impaired", "a retried throttle, but the run overran its period"

    assert [(slot.at, slot.outcome) for slot in faults.runs] == [
        (0.0, "crashed"),
        (1.0, "ran"),
        (2.0, "ran"),
        (3.0, "ran"),
        (6.0, "impaired"),
        (7.0, "ran"),
        (8.0, "impaired"),
        (9.0, "impaired"),
        (10.0, "impaired"),
    ]


@pytest.mark.parametrize(("policy", "survived"), [("threshold", 1), ("adaptive", 3)])
def test_lapses_excused_only_after_more_lost_runs_than_survived(policy: str, survived: int) -> None:
    settings: dict[str, Any] = {"policy": policy, "extender_period_s": 1}
    if policy == "threshold":
        settings |= {"visibility_timeout_s": 5, "threshold_s": 2.5, "heartbeat_s": 0.5}
    faults = Faults(scenario(settings=settings), clock=FakeClock(0.0))
    faults.begin()
    outcomes = ["ran", *(["lost"] * survived), "ran", "ran", *(["crashed"] * survived), "impaired", "ran", "ran"]
    faults.runs = [RunSlot(float(t), outcome) for t, outcome in enumerate(outcomes)]  # type: ignore[arg-type]
    streak_start = 3.0 + survived
    healthy = streak_start + survived + 1

    assert faults.survivable_runs() == survived
    assert faults.outages() == [(streak_start, healthy + 1)]
    assert faults.lapse_excuse(1.5, message_id="m", renewals=[]) is None, "as many lost runs as it survives"
    assert faults.lapse_excuse(streak_start + 0.5, message_id="m", renewals=[]) is not None
    assert faults.lapse_excuse(healthy + 0.9, message_id="m", renewals=[]) is not None
    assert faults.lapse_excuse(healthy + 1.1, message_id="m", renewals=[]) is None


def test_lapse_after_receiver_crash_at_visibility_change_excused_until_renewed() -> None:
    faults = Faults(scenario(), clock=FakeClock(0.0))
    faults.injections = [
        Injection(10.0, 0, "receiver", "ChangeMessageVisibility", "crash_before", True, ("m1",)),
        Injection(20.0, 0, "receiver", "PutItem", "crash_before", True, ("m1",)),
        Injection(30.0, 0, "receiver", "ChangeMessageVisibility", "server_error", True, ("m1",)),
        Injection(40.0, 0, "receiver", "ChangeMessageVisibility", "crash_after", True, ("m2",)),
    ]

    assert faults.lapse_excuse(12.0, message_id="m1", renewals=[5.0, 14.0]) is not None
    assert faults.lapse_excuse(15.0, message_id="m1", renewals=[5.0, 14.0]) is None, "renewed since"
    assert faults.lapse_excuse(12.0, message_id="m2", renewals=[]) is None, "another message"
    assert faults.lapse_excuse(25.0, message_id="m1", renewals=[]) is not None, "no renewal since the crash"
    assert faults.lapse_excuse(9.0, message_id="m1", renewals=[]) is None, "before the crash"
    assert faults.lapse_excuse(42.0, message_id="m2", renewals=[]) is None, "the change took effect before it died"


def test_status_event_drops_and_delays_are_seeded() -> None:
    def draws(seed: int) -> tuple[list[bool], list[float]]:
        faults = Faults(scenario({"type": "drop_status_events", "probability": 0.5}, seed=seed))
        return [faults.drop_event() for _ in range(20)], [faults.event_delay() for _ in range(5)]

    drops, delays = draws(5)

    assert draws(5) == (drops, delays)
    assert 3 < sum(drops) < 17
    assert all(0.5 <= d <= 1.5 for d in delays)
    assert Faults(scenario()).drop_event() is False


def test_processor_stops_recorded_from_successful_stop_execution() -> None:
    faults = Faults(scenario(fault(function="watcher", operation="StopExecution", mode="server_error", count=4)))
    sent = Sent([])
    sfn = client("stepfunctions", sent)
    faults.install("watcher", Service(sqs=sfn, store=None))
    failed = "arn:aws:states:us-east-1:123456789012:execution:long-jobs:m1-1"
    stopped = "arn:aws:states:us-east-1:123456789012:execution:long-jobs:m2-1"

    with pytest.raises(ClientError):
        sfn.stop_execution(executionArn=failed)
    sfn.stop_execution(executionArn=stopped)

    assert faults.processor_stops == {stopped}


def test_crash_on_a_worker_thread_ends_the_invocation_in_its_caller() -> None:
    faults = Faults(scenario(fault(function="extender", operation="Query", mode="crash_before", count=1)))
    sent = Sent([])
    dynamodb = client("dynamodb", sent)
    faults.install("extender", Service(sqs=dynamodb, store=None))
    faults.begin_invocation("extender")

    def query(shard: int) -> Any:
        return dynamodb.query(
            TableName="leases", KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": str(shard)}}
        )

    with ThreadPoolExecutor(max_workers=4) as executor, pytest.raises(InvocationCrashed):
        list(executor.map(query, range(8)))  # how the extender queries its shards

    assert sent.operations == [], "the first call died, and every later one of the dead invocation"
    assert faults.end_invocation("extender", period_s=1) == "crashed"


def test_invocation_past_its_timeout_dies_at_its_next_call() -> None:
    clock = FakeClock(100.0)
    faults = Faults(scenario(), clock=clock)
    sent = Sent([])
    sqs = client("sqs", sent)
    faults.install("receiver", Service(sqs=sqs, store=None))
    faults.begin_invocation("receiver", {"h1": "m1"}, deadline=104.0)

    call(sqs, "sqs")
    clock.now = 104.5  # botocore's backoff kept it waiting past its deadline
    with pytest.raises(InvocationCrashed, match="timed out"):
        call(sqs, "sqs")

    assert sent.operations == ["ChangeMessageVisibility"]
    assert faults.injected_by_mode() == {"function_timeout": 1}
    assert faults.receiver_visibility_crashes("m1") == [104.5]
    faults.begin_invocation("receiver", deadline=110.0)
    call(sqs, "sqs")
    assert len(sent.operations) == 2, "the next invocation has its own deadline"
