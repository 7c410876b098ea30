"""The extender under faults: a table error after SQS accepted a renewal, a renewal SQS refuses as past
the 12 h limit, reconciliation over more leases than one run checks, and an index read that is behind."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from longjobs.engine.execution import execution_arn
from longjobs.engine.extender.invocation import run_invocation
from longjobs.engine.extender.reconcile import reconcile
from longjobs.engine.extender.service import Extender, renew_due
from longjobs.engine.lease import Lease, LeaseStatus, LeaseStore, Renewal
from longjobs.engine.policies import build_policy
from longjobs.engine.settings import Settings
from longjobs.engine.visibility import VisibilityClient
from longjobs.sim.clock import FakeClock
from tests.functional.conftest import Harness

STATE_MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:jobs"
THRESHOLD = Settings(policy="threshold", visibility_timeout_s=5, threshold_s=2.5, heartbeat_s=0.5, extender_period_s=1)


def throttled(operation: str) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": "ProvisionedThroughputExceededException", "Message": "Rate of requests exceeds"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        },
        operation,
    )


def test_extender_table_error_after_renewals_does_not_end_the_invocation(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQS accepted the renewals, then DynamoDB refused to record them (after botocore's retries). The
    pass must not end the invocation: the leases stay due (their belief is earlier than the truth) and
    the next tick renews and records them."""
    for _ in range(3):
        harness.send()
    leases = harness.receive_and_lease(THRESHOLD, count=3)
    clock = FakeClock(leases[0].received_at + 2.6)  # all three within the 2.5 s threshold
    extender = harness.extender(THRESHOLD, clock)
    real_transact, real_update = harness.dynamodb.transact_write_items, harness.dynamodb.update_item
    failures = {"left": 2}

    def flaky(real: Any, operation: str) -> Any:
        def call(**kwargs: Any) -> Any:
            if failures["left"] > 0 and operation == "TransactWriteItems":
                failures["left"] -= 1
                raise throttled(operation)
            if failures["left"] > 0:
                raise throttled(operation)
            return real(**kwargs)

        return call

    monkeypatch.setattr(harness.dynamodb, "transact_write_items", flaky(real_transact, "TransactWriteItems"))
    monkeypatch.setattr(harness.dynamodb, "update_item", flaky(real_update, "UpdateItem"))

    report = run_invocation(extender, remaining_ms=lambda: 60_000)

    assert report.failed_passes == 0
    assert report.ticks == 2, "every tick of the invocation ran"
    assert report.renewal.record_failures == 3, "the first pass's renewals were counted, not raised"
    assert report.renewal.renewed == 3 and report.renewal.lapses == 0, "the second tick renewed them again"
    store = harness.store(THRESHOLD)
    for lease in leases:
        stored = store.get(lease.message_id)
        assert stored is not None and stored.renewal_count == 1 and stored.visible_until > clock.now()


def test_extender_pass_that_raises_leaves_the_next_tick_running(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.send()
    [lease] = harness.receive_and_lease(THRESHOLD)
    clock = FakeClock(lease.received_at + 2.6)
    extender = harness.extender(THRESHOLD, clock)
    real_due, calls = extender.store.index.due, {"n": 0}

    def due_once_broken(before: float | None = None, **kwargs: Any) -> list[Lease]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise throttled("Query")
        return real_due(before, **kwargs)

    monkeypatch.setattr(extender.store.index, "due", due_once_broken)
    report = run_invocation(extender, remaining_ms=lambda: 60_000)

    assert (report.ticks, report.failed_passes, report.renewal.renewed) == (2, 1, 1)


@dataclass
class FakeStepFunctions:
    """DescribeExecution from a table of statuses; StopExecution recorded (a stand-in where order matters)."""

    statuses: dict[str, str] = field(default_factory=dict)
    described: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)

    def describe_execution(self, executionArn: str) -> dict[str, Any]:
        self.described.append(executionArn)
        return {"executionArn": executionArn, "status": self.statuses[executionArn]}

    def stop_execution(self, executionArn: str, **_: Any) -> dict[str, Any]:
        self.stopped.append(executionArn)
        self.statuses[executionArn] = "ABORTED"
        return {"stopDate": time.time()}


def with_stepfunctions(extender: Extender, fake: FakeStepFunctions) -> Extender:
    return replace(extender, stepfunctions=fake)  # type: ignore[arg-type]


def test_reconciliation_reaches_every_lease_least_recently_checked_first(harness: Harness) -> None:
    """30 running jobs and one dead one whose status event was lost. Its lease is the last by renew-at
    (the order the index gives), and reconciliation checks 5 a run: it must still be found within the
    runs that 31 leases take at 5 a run, not renewed for hours."""
    settings = Settings.load({**THRESHOLD.model_dump(exclude_unset=True), "reconcile_max_per_run": 5, "shards": 2})
    for _ in range(31):
        harness.send()
    leases = harness.receive_and_lease(settings, count=31)
    store = harness.store(settings)
    fake = FakeStepFunctions()
    for index, lease in enumerate(leases):
        arn = execution_arn(STATE_MACHINE, f"{lease.message_id}-1")
        stored = replace(lease, execution_arn=arn, renew_at=lease.received_at + 100 + index, version=0)
        harness.dynamodb.delete_item(TableName="leases", Key={"pk": {"S": lease.message_id}})
        assert store.create(stored)
        fake.statuses[arn] = "RUNNING"
    dead = execution_arn(STATE_MACHINE, f"{leases[-1].message_id}-1")
    fake.statuses[dead] = "FAILED"
    clock = FakeClock(leases[0].received_at + 300)  # every lease past the grace
    extender = with_stepfunctions(harness.extender(settings, clock), fake)

    for _ in range(7):  # 31 leases at 5 a run
        reconcile(extender, deadline=clock.now() + 30)
        clock.advance(60)

    released = store.get(leases[-1].message_id)
    assert released is not None and released.status is LeaseStatus.RELEASED
    checked = {arn: fake.described.count(arn) for arn in fake.statuses}
    assert min(checked.values()) >= 1, "every lease was looked at, none starved"


def test_reconciliation_acts_only_on_a_freshly_read_lease(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index is eventually consistent: it may still show attempt 1 of a lease a redelivery moved on.
    Attempt 1's end must not release attempt 2's message."""
    harness.send()
    [lease] = harness.receive_and_lease(THRESHOLD, execution_arn=execution_arn(STATE_MACHINE, "m-1"))
    store = harness.store(THRESHOLD)
    stale = replace(lease)
    newer = replace(lease, receipt_handle="newer", receive_count=2, execution_arn=execution_arn(STATE_MACHINE, "m-2"))
    assert store.refresh_handle(lease, newer) is not None  # the lease moved on: now attempt 2's
    harness.dynamodb.update_item(
        TableName="leases",
        Key={"pk": {"S": lease.message_id}},
        UpdateExpression="SET execution_arn = :arn",
        ExpressionAttributeValues={":arn": {"S": execution_arn(STATE_MACHINE, "m-2")}},
    )
    fake = FakeStepFunctions(
        {execution_arn(STATE_MACHINE, "m-1"): "FAILED", execution_arn(STATE_MACHINE, "m-2"): "RUNNING"}
    )
    clock = FakeClock(lease.received_at + 300)
    extender = with_stepfunctions(harness.extender(THRESHOLD, clock), fake)
    monkeypatch.setattr(extender.store.index, "reconcile_due", lambda checked_before: [stale])

    report = reconcile(extender, deadline=clock.now() + 30)

    assert (report.checked, report.released) == (1, 0)
    current = store.get(lease.message_id)
    assert current is not None and current.active and current.receive_count == 2


BEYOND = (
    "Value {} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond "
    "the limit [43200 seconds]"
)


def due_after_eleven_and_a_half_hours(
    harness: Harness, settings: Settings
) -> tuple[Lease, Lease, LeaseStore, FakeClock]:
    """A job received eleven and a half hours ago whose chunk is due now: its lease as received, the lease
    as stored (due), the store and the clock."""
    harness.send()
    [lease] = harness.receive_and_lease(settings, execution_arn=execution_arn(STATE_MACHINE, "old-1"))
    clock = FakeClock(lease.received_at + 41_400)
    due = replace(lease, visible_until=clock.now() + 200, renewed_at=clock.now() - 700, renew_at=clock.now() - 100)
    harness.dynamodb.delete_item(TableName="leases", Key={"pk": {"S": lease.message_id}})
    store = harness.store(settings)
    assert store.create(due)
    return lease, due, store, clock


def on_stubbed_sqs(
    settings: Settings, store: LeaseStore, sqs: Any, clock: FakeClock, stepfunctions: FakeStepFunctions
) -> Extender:
    """An extender on `sqs` (a client the caller stubs, for AWS-shaped refusals moto does not give)."""
    return Extender(
        settings=settings,
        policy=build_policy(settings),
        store=store,
        visibility=VisibilityClient(sqs, clock=clock),
        sqs=sqs,
        clock=clock,
        stepfunctions=stepfunctions,  # type: ignore[arg-type]
    )


def test_extender_asks_shorter_past_the_12_hour_limit_then_stops_the_execution(harness: Harness) -> None:
    """The receiver saw the record a while after SQS handed it out, so SQS's 12 h limit comes before the
    lease's. SQS (AWS-shaped answers, stubbed: moto counts the limit from the send) refuses the renewal;
    the extender asks for half, then half again, keeps the message hidden as long as SQS allows, stops
    the execution, and only then closes the lease CAPPED."""
    settings = Settings(extender_period_s=60)  # adaptive
    lease, due, store, clock = due_after_eleven_and_a_half_hours(harness, settings)
    chunk = settings.adaptive_ceiling_s  # the job is old: a full chunk is asked
    sqs = boto3.client("sqs", region_name="us-east-1")
    stubber = Stubber(sqs)
    stubber.add_response(
        "change_message_visibility_batch",
        {
            "Successful": [],
            "Failed": [
                {"Id": "0", "SenderFault": True, "Code": "InvalidParameterValue", "Message": BEYOND.format(chunk)}
            ],
        },
    )
    stubber.add_client_error("change_message_visibility", "InvalidParameterValue", BEYOND.format(chunk // 2))
    stubber.add_response("change_message_visibility", {})  # a quarter of the chunk fits under the limit
    fake = FakeStepFunctions({due.execution_arn or "": "RUNNING"})
    extender = on_stubbed_sqs(settings, store, sqs, clock, fake)

    with stubber:
        report = renew_due(extender, deadline=clock.now() + 30)
        stubber.assert_no_pending_responses()

    assert (report.capped, report.stopped) == (1, 1)
    assert fake.stopped == [due.execution_arn]
    capped = store.get(lease.message_id)
    assert capped is not None and capped.status is LeaseStatus.CAPPED
    assert "beyond the limit" in str(capped.last_error)
    assert capped.visible_until == pytest.approx(clock.now() + chunk // 4, abs=1), "hidden as long as SQS allowed"


@pytest.mark.parametrize(
    ("left_s", "asked"),
    [(1.5, [("ChangeMessageVisibilityBatch", None)]), (0.5, [])],
    ids=["a-second-left-refused", "less-than-a-second-left"],
)
def test_extender_past_the_12_hour_limit_never_asks_for_no_time_at_all(
    harness: Harness, left_s: float, asked: list[tuple[str, Any]]
) -> None:
    """A lease a second from its hold limit asks SQS for that second; refused as past the limit, half of
    it is no time at all. With less than a second left, there is nothing to ask for. A visibility timeout
    of 0 would hand the message out at once while its execution still runs (the new timeout counts from the
    call, and 0 is its minimum: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html),
    so the extender asks nothing more: it stops the execution and closes the lease CAPPED."""
    settings = Settings(extender_period_s=60)  # adaptive
    harness.send()
    [lease] = harness.receive_and_lease(settings, execution_arn=execution_arn(STATE_MACHINE, "old-1"))
    clock = FakeClock(lease.received_at + 43_200 - settings.cap_safety_s - left_s)
    sqs = boto3.client("sqs", region_name="us-east-1")
    calls: list[tuple[str, Any]] = []
    sqs.meta.events.register(
        "provide-client-params.sqs.*",  # before the stubber's own check of the call
        lambda params, model, **_: calls.append((model.name, params.get("VisibilityTimeout"))),
    )
    stubber = Stubber(sqs)
    refused = {"Id": "0", "SenderFault": True, "Code": "InvalidParameterValue", "Message": BEYOND.format(1)}
    stubber.add_response("change_message_visibility_batch", {"Successful": [], "Failed": [refused]})
    fake = FakeStepFunctions({lease.execution_arn or "": "RUNNING"})
    extender = replace(
        with_stepfunctions(harness.extender(settings, clock), fake), visibility=VisibilityClient(sqs, clock=clock)
    )

    with stubber:
        report = renew_due(extender, deadline=clock.now() + 30)

    assert calls == asked
    assert (report.capped, report.stopped) == (1, 1)
    assert fake.stopped == [lease.execution_arn]


@pytest.mark.parametrize("then", ["handle-lost", "record-failed"])
def test_extender_past_the_12_hour_limit_ends_the_lease_whatever_its_shorter_ask_meets(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    """Refused as past the limit, the extender asks for half as long. If SQS refuses that for another
    reason (the handle is no longer valid), halving again cannot help: it asks nothing more. If SQS accepts
    it and the table fails to record it, the lease as read is ended all the same. Either way the execution
    is stopped and the lease closed CAPPED in the same pass."""
    settings = Settings(extender_period_s=60)  # adaptive
    lease, due, store, clock = due_after_eleven_and_a_half_hours(harness, settings)
    sqs = boto3.client("sqs", region_name="us-east-1")
    calls: list[str] = []
    sqs.meta.events.register("provide-client-params.sqs.*", lambda model, **_: calls.append(model.name))
    stubber = Stubber(sqs)
    chunk = settings.adaptive_ceiling_s
    refused = {"Id": "0", "SenderFault": True, "Code": "InvalidParameterValue", "Message": BEYOND.format(chunk)}
    stubber.add_response("change_message_visibility_batch", {"Successful": [], "Failed": [refused]})
    if then == "handle-lost":
        stubber.add_client_error(
            "change_message_visibility", "ReceiptHandleIsInvalid", "The input receipt handle is invalid."
        )
    else:
        stubber.add_response("change_message_visibility", {})

        def unavailable(renewal: Renewal) -> Lease:
            raise RuntimeError("the table is unavailable")

        monkeypatch.setattr(store.renewals, "record", unavailable)
    fake = FakeStepFunctions({due.execution_arn or "": "RUNNING"})
    extender = on_stubbed_sqs(settings, store, sqs, clock, fake)

    with stubber:
        report = renew_due(extender, deadline=clock.now() + 30)

    assert calls == ["ChangeMessageVisibilityBatch", "ChangeMessageVisibility"]
    assert (report.capped, report.stopped) == (1, 1)
    capped = store.get(lease.message_id)
    assert capped is not None and capped.status is LeaseStatus.CAPPED


def test_extender_settles_a_capped_lease_whose_execution_already_succeeded(harness: Harness) -> None:
    """The workflow's success close failed past its retries, so it deleted the message and ended SUCCEEDED
    with the lease left ACTIVE. The extender meets the lease at its hard stop before reconciliation does:
    the job succeeded, so the lease is settled by that end (SUCCEEDED), not stopped and closed CAPPED, which
    would report a done job as cut off at its cap."""
    settings = Settings(policy="threshold", visibility_timeout_s=30, max_renewal_s=60, extender_period_s=1)
    harness.send()
    [lease] = harness.receive_and_lease(settings, execution_arn=execution_arn(STATE_MACHINE, "done-1"))
    harness.sqs.delete_message(QueueUrl=harness.queue_url, ReceiptHandle=lease.receipt_handle)
    clock = FakeClock(lease.received_at + 61)
    fake = FakeStepFunctions({lease.execution_arn or "": "SUCCEEDED"})

    report = renew_due(with_stepfunctions(harness.extender(settings, clock), fake), deadline=clock.now() + 30)

    settled = harness.store(settings).get(lease.message_id)
    assert settled is not None and settled.status is LeaseStatus.SUCCEEDED
    assert (report.settled, report.capped, report.stopped) == (1, 0, 0)
    assert fake.stopped == []


def test_extender_stops_before_closing_a_lease_whose_handle_is_lost(harness: Harness) -> None:
    settings = THRESHOLD
    harness.send()
    [lease] = harness.receive_and_lease(settings, execution_arn=execution_arn(STATE_MACHINE, "lost-1"))
    harness.sqs.delete_message(QueueUrl=harness.queue_url, ReceiptHandle=lease.receipt_handle)
    clock = FakeClock(lease.received_at + 2.6)
    order: list[str] = []
    fake = FakeStepFunctions({lease.execution_arn or "": "RUNNING"})
    real_close = harness.store(settings).close

    extender = with_stepfunctions(harness.extender(settings, clock), fake)
    real_stop = fake.stop_execution

    def stop(**kwargs: Any) -> Any:
        order.append("stop")
        return real_stop(**kwargs)

    def close(*args: Any, **kwargs: Any) -> Any:
        order.append("close")
        return real_close(*args, **kwargs)

    fake.stop_execution = stop  # type: ignore[method-assign]
    extender.store.close = close  # type: ignore[method-assign]
    report = renew_due(extender, deadline=clock.now() + 30)

    assert (report.lost, report.stopped) == (1, 1)
    assert order == ["stop", "close"]
    stored = harness.store(settings).get(lease.message_id)
    assert stored is not None and stored.status is LeaseStatus.LOST


@pytest.mark.parametrize(
    ("execution", "close", "expected"),
    [
        ("RUNNING", "lands", (1, 0, 0, 1, 0)),
        ("RUNNING", "raises", (1, 1, 0, 0, 0)),
        ("RUNNING", "conflicts", (1, 0, 1, 0, 0)),
        (None, "lands", (0, 0, 0, 1, 0)),
        (None, "raises", (0, 1, 0, 0, 0)),
        (None, "conflicts", (0, 0, 1, 0, 0)),
        ("SUCCEEDED", "lands", (0, 0, 0, 0, 1)),
        ("SUCCEEDED", "raises", (0, 1, 0, 0, 0)),
        ("SUCCEEDED", "conflicts", (0, 0, 1, 0, 0)),
    ],
    ids=[
        "stopped-closed",
        "stopped-close-failed",
        "stopped-close-lost-race",
        "closed",
        "failed",
        "lost-race",
        "ended-settled",
        "ended-settle-failed",
        "ended-settle-lost-race",
    ],
)
def test_extender_reports_how_each_lost_lease_ended(
    harness: Harness, execution: str | None, close: str, expected: tuple[int, int, int, int, int]
) -> None:
    """The pass's report, (stopped, failed, conflicts, lost, settled), counts a stop only where an execution
    was stopped (a lease whose start has not landed has none; one whose execution ended is settled by that
    end), and each close by what became of it: closed, failed and left due, or changed first by another
    writer."""
    settings = THRESHOLD
    harness.send()
    arn = execution_arn(STATE_MACHINE, "lost-1") if execution else None
    [lease] = harness.receive_and_lease(settings, execution_arn=arn)
    harness.sqs.delete_message(QueueUrl=harness.queue_url, ReceiptHandle=lease.receipt_handle)
    clock = FakeClock(lease.received_at + 2.6)
    fake = FakeStepFunctions({arn: execution} if arn and execution else {})
    extender = with_stepfunctions(harness.extender(settings, clock), fake)
    real_close = extender.store.close

    def closing(*args: Any, **kwargs: Any) -> Lease | None:
        if close == "raises":
            raise RuntimeError("the table is unavailable")
        return None if close == "conflicts" else real_close(*args, **kwargs)

    extender.store.close = closing  # type: ignore[method-assign]
    report = renew_due(extender, deadline=clock.now() + 30)

    assert (report.stopped, report.failed, report.conflicts, report.lost, report.settled) == expected
    assert fake.stopped == ([arn] if execution == "RUNNING" else [])
