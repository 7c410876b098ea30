"""StartExecution refused past the client's retries (a throttled burst: `ThrottlingException` on every
attempt botocore makes), in the simulation on virtual time.

A refused start is not an attempt: the receiver asks Step Functions, finds no execution, closes the
lease RELEASED as never started and gives the message back after a short backoff; the next receive takes
a new lease that carries the count of refused starts, not a failed attempt (protocol review, defect 7).
When even the question fails, the lease stays ACTIVE and reconciliation releases it the same way.
Refused starts have their own cap, `max_refused_starts`, past which the message goes to the DLQ as
`StartsRefused`.

These once ran on moto with a patched client and real time (tests/functional/test_fencing.py), and one
aborted under load; here the refusals are call faults of the receiver's Step Functions client, retried
as botocore's standard mode retries them, and every wait is on the virtual clock."""

from __future__ import annotations

import json
from typing import Any

import pytest

from longjobs.engine.admission.admit import admit_type
from longjobs.engine.admission.parking import refresh_parked
from longjobs.engine.delivery.types import ADMISSION_ATTRIBUTE, Carried, Outcome
from longjobs.engine.lease import LastError, Lease, LeaseStatus, LeaseStore
from longjobs.engine.receiver.service import receive
from longjobs.engine.settle import stop_and_close
from longjobs.history.faults import CallFault
from longjobs.sim.aws import client_error
from longjobs.sim.campaign import deployed_workflow
from longjobs.sim.faults import CallRule, FaultPlan
from longjobs.sim.workload import CATALOG_JSON, JobPlan, Workload
from longjobs.sim.world import CLIENT_ATTEMPTS, START, TABLE, SeedResult, World
from tests.short_settings import SHORT_THRESHOLD
from tests.sim.test_retention import KEEP_S, Bench, bench, full_with_one_waiting_in_flight

# The receiver's invocation outlives botocore's backoff between its three attempts (up to 1 s, then 2 s),
# and reconciliation waits longer than the receiver may run.
SETTINGS = {**SHORT_THRESHOLD, "receiver_timeout_s": 30, "reconcile_grace_s": 31, "max_attempts": 2}


def refused_starts(receives: int | None, settings: dict[str, Any]) -> tuple[World, SeedResult]:
    """One wait job; the receiver's StartExecution throttled on every attempt of its first `receives`
    receives (all of them when None)."""
    throttled = CallRule(
        CallFault.THROTTLED,
        frozenset({"receiver"}),
        "start_execution",
        count=None if receives is None else receives * CLIENT_ATTEMPTS,
    )
    return run([JobPlan("burst", "wait", {"seconds": 1}, 0.0)], throttled, settings)


def run(jobs: list[JobPlan], rule: CallRule, settings: dict[str, Any]) -> tuple[World, SeedResult]:
    """The jobs run by the whole simulation, with `rule` the one fault of its calls."""
    workflow = deployed_workflow()
    workload = Workload(jobs, settings=settings)
    world = World(
        1,
        workload,
        workflow.definition,
        CATALOG_JSON,
        faults=FaultPlan.scenario(rules=[rule], world={}, within_design=True, seed=1),
        execution_timeout_s=workflow.timeout_s,
        until_s=workload.settle_bound_s,
    )
    return world, world.run()


def the_lease(world: World) -> Lease:
    [message_id] = world.job_of_message
    settings = world.settings
    lease = LeaseStore(world.aws.dynamodb, TABLE, shards=settings.shards, closed_ttl_s=settings.closed_ttl_s).get(
        message_id
    )
    assert lease is not None
    return lease


def outcomes(result: SeedResult) -> list[str]:
    records = [json.loads(line) for line in (result.trace.records if result.trace else [])]
    return [record["outcome"] for record in records if record.get("event") == "outcome"]


def test_start_refused_past_the_retries_spends_no_attempt() -> None:
    """More refused starts (3) than `max_attempts` (2), then the burst ends: the message runs, never
    dead-lettered as AttemptsExhausted with no execution."""
    world, result = refused_starts(3, SETTINGS)

    assert result.violation is None
    assert outcomes(result) == ["not_started"] * 3 + ["started"]
    assert result.coverage["refused_start:released"] == 3, "the receiver gave each refused start back"
    assert result.coverage["extender:released"] == 0, "reconciliation had nothing left to release"
    assert world.aws.stepfunctions.throttled.get("StartExecution", 0) == 0, "refused by the rule, not the quota"
    assert [e.status for e in world.aws.stepfunctions.executions.values()] == ["SUCCEEDED"]
    lease = the_lease(world)
    assert lease.status is LeaseStatus.SUCCEEDED and lease.receive_count == 4
    assert lease.history == (), "no attempt spent"
    assert lease.refused_starts == 3, "each refused start counted, apart from the attempts"
    assert not world.dlq.messages


def test_start_refused_max_refused_starts_times_goes_to_the_dlq_as_starts_refused() -> None:
    """Refused starts have their own cap: past it the message goes to the DLQ with its own reason, never
    having run."""
    world, result = refused_starts(None, {**SETTINGS, "max_refused_starts": 2})

    assert result.violation is None, "nothing_lost: in the DLQ with a reason"
    assert outcomes(result) == ["not_started", "not_started", "rejected"]
    [dead] = world.dlq.messages.values()
    reason = {name: value["StringValue"] for name, value in dead.attributes.items()}
    assert reason["ErrorType"] == "StartsRefused"
    assert reason["ErrorMessage"].startswith(
        "2 starts refused by Step Functions; the last: start refused on every attempt: "
        "An error occurred (ThrottlingException)"
    )
    assert world.aws.calls.get("stepfunctions.DescribeExecution", 0) == 0, "refused on every attempt: none asked"
    assert the_lease(world).status is LeaseStatus.REJECTED
    assert world.aws.stepfunctions.executions == {}, "never executed"


def test_start_refused_while_the_receiver_times_out_in_its_retries_spends_no_attempt() -> None:
    """The functional test's settings: a receiver timeout of 1 s, shorter than botocore's backoff, so the
    receiver dies between its attempts; reconciliation releases after 2 s and the message comes back at
    once, while the extender may still read the lease before the release from the due index. Found here:
    SQS refused that stale renewal's handle as expired, and the extender, re-reading, ended the newer
    lease (a new receive's lease is at version 0 again) and stopped its execution, counting a start that
    never happened as a failed attempt; it now ends only a lease of the receive it read."""
    world, result = refused_starts(3, {**SHORT_THRESHOLD, "max_attempts": 2})

    assert result.violation is None
    assert [e.status for e in world.aws.stepfunctions.executions.values()] == ["SUCCEEDED"]
    assert the_lease(world).history == (), "no attempt spent"
    assert not world.dlq.messages


def test_start_refused_count_survives_waiting_for_a_slot() -> None:
    """The count of refused starts goes on while a message waits for a slot: before, a WAITING lease, an
    admission in place, a parked marker and its copy each began it at 0 again, so a message of a full
    limited type whose starts kept being refused waited, was refused, waited again and did not reach
    `max_refused_starts` while its type stayed busy. A long job holds one of the limited type's two
    slots; every start after it is refused, and three more messages take turns at the other slot, which a
    refused start holds until its release frees it: each of them waits for the slot between its refusals.
    Before, 9 starts were refused instead of 6."""
    from longjobs.sim.workload import LIMITED_TYPE

    refused_later = CallRule(
        CallFault.THROTTLED, frozenset({"receiver", "extender", "watcher"}), "start_execution", start=START + 10.0
    )
    # periods: the default; the extender's admission pass every run, whose sweep frees the refused starts' slots
    settings = {"max_attempts": 2, "max_refused_starts": 2, "admission_horizon_s": 60, "admission_pass_interval_s": 60}
    jobs = [JobPlan("long", LIMITED_TYPE, {"seconds": 8 * 3_600}, 0.0)]
    jobs += [JobPlan(f"late-{n}", LIMITED_TYPE, {"seconds": 1}, 20.0 + n) for n in range(3)]
    world, result = run(jobs, refused_later, settings)

    assert result.violation is None
    assert "waiting_for_slot" in outcomes(result), "they waited for the slot between refusals"
    dead = {m.attributes["OriginalMessageId"]["StringValue"]: m for m in world.dlq.messages.values()}
    late = sorted(message for message, job in world.job_of_message.items() if job.startswith("late-"))
    assert sorted(dead) == late, "each late message in the DLQ"
    assert {m.attributes["ErrorType"]["StringValue"] for m in dead.values()} == {"StartsRefused"}
    assert refused_later.used == 3 * 2 * CLIENT_ATTEMPTS, "two refused starts each, every one counted"
    assert max(m.sent_at for m in dead.values()) - START < 8 * 3_600, "while the long job still holds its slot"


# -- each place the count is carried, step by step on the simulated AWS (`Bench`) ------------------------
# A message arrives carrying one refused start in its admission attribute, as a copy made after a refusal
# would (a parked, requeued or re-parked copy); each test follows the count to the next lease or copy.


def carrying_one_refusal(b: Bench, job_id: str) -> str:
    """A message of `job_id` on the jobs queue whose admission attribute carries one refused start."""
    body = json.dumps({"job_id": job_id, "type": "wait", "params": {"seconds": 60}})
    carried = {ADMISSION_ATTRIBUTE: {"DataType": "String", "StringValue": Carried(refused_starts=1).encode()}}
    return str(b.aws.sqs.send_message(QueueUrl=b.jobs_url, MessageBody=body, MessageAttributes=carried)["MessageId"])


def carried_on(b: Bench, queue_url: str, message_id: str) -> Carried:
    """What a message on a queue carries (its admission attribute)."""
    message = b.aws.sqs.queues[queue_url].messages[message_id]
    return Carried.decode(message.attributes[ADMISSION_ATTRIBUTE]["StringValue"])


def stored(b: Bench, message_id: str) -> Lease:
    lease = b.receiver.store.get(message_id)
    assert lease is not None
    return lease


def test_start_refused_count_carried_by_a_copy_goes_to_the_dlq_at_its_first_receive() -> None:
    """A copy's first receive has no lease of its own: the count it carries decides (`_first_reading`)."""
    b = bench(limit=1, max_refused_starts=1)
    message = carrying_one_refusal(b, "X")

    assert b.deliver_jobs_queue() == {message: Outcome.REJECTED}
    [dead] = b.aws.sqs.queues[b.dlq_url].messages.values()
    assert dead.attributes["ErrorType"]["StringValue"] == "StartsRefused"
    assert b.executions_of("X") == [], "never started"


def test_start_refused_count_carried_through_waiting_and_an_admission_in_place() -> None:
    b = bench(limit=1, max_refused_starts=3)
    first = b.send("a")
    assert b.deliver_jobs_queue() == {first: Outcome.STARTED}
    message = carrying_one_refusal(b, "X")
    b.clock.advance(1)
    assert b.deliver_jobs_queue() == {message: Outcome.WAITING_FOR_SLOT}
    assert stored(b, message).refused_starts == 1, "the WAITING lease"

    b.finish(first)
    admit_type(b.receiver, "wait", 1, handle=receive)

    admitted = stored(b, message)
    assert admitted.status is LeaseStatus.ACTIVE and admitted.execution_arn, "admitted in place"
    assert admitted.refused_starts == 1, "the admitted attempt's lease"


def test_start_refused_count_carried_by_a_parked_marker_its_copy_and_its_claimant_parked_again() -> None:
    b = bench(limit=1, max_refused_starts=3)
    full_with_one_waiting_in_flight(b)
    original = carrying_one_refusal(b, "X")
    assert b.deliver_jobs_queue() == {original: Outcome.PARKED}
    assert stored(b, original).refused_starts == 1, "the PARKED marker"
    [copy] = b.waiting_ids()
    assert carried_on(b, b.waiting_url, copy).refused_starts == 1, "its copy"

    b.clock.advance(1)
    assert b.unpark_all() == {copy: Outcome.WAITING_FOR_SLOT}, "the copy claims the run and waits in flight"
    assert stored(b, copy).refused_starts == 1, "the claimant's WAITING lease, from what the copy carries"

    b.advance_to(b.aws.sqs.queues[b.waiting_url].messages[copy].sent_at + KEEP_S + 1)
    assert refresh_parked(b.receiver, "wait") == 1, "the claimant, near its retention, is parked in place"
    assert stored(b, copy).status is LeaseStatus.PARKED and stored(b, copy).refused_starts == 1
    [fresh] = [m for m in b.waiting_ids() if m != copy]
    assert carried_on(b, b.waiting_url, fresh).refused_starts == 1, "the claimant's fresh copy"


def test_start_refused_count_carried_by_a_requeued_marker_and_its_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Here the count comes from the message's own lease (its start refused, and the lease released by the
    receiver as never started), not from an attribute it carries."""
    b = bench(limit=5, max_refused_starts=3)
    message = b.send("X")
    with monkeypatch.context() as refusing:
        refusing.setattr(b.aws.stepfunctions, "start_execution", throttled_start)
        assert b.deliver_jobs_queue() == {message: Outcome.NOT_STARTED}
    closed = stored(b, message)
    assert closed.status is LeaseStatus.RELEASED and closed.refused_starts_with_this() == 1
    b.hold_job_lock("X")
    b.clock.advance(1)

    assert b.deliver_jobs_queue() == {message: Outcome.WAITING}, "its job id runs: sent back to wait for it"
    assert stored(b, message).status is LeaseStatus.REQUEUED and stored(b, message).refused_starts == 1
    [sent_back] = [m for m in b.jobs_ids() if m != message]
    assert carried_on(b, b.jobs_url, sent_back).refused_starts == 1, "the requeued copy"


def throttled_start(**params: Any) -> Any:
    raise client_error("StartExecution", "ThrottlingException", "Rate exceeded", status=400)


def failed_start(**params: Any) -> Any:
    raise client_error("StartExecution", "InternalFailure", "Internal failure", status=500)


def throttled_describe(**params: Any) -> Any:
    raise client_error("DescribeExecution", "ThrottlingException", "Rate exceeded", status=400)


def test_start_refused_lease_ended_unholdable_before_its_start_spends_no_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found unaided by the 1,000-seed campaign (seed 355 of the corpus): a receive died between its holds
    and its first visibility change, three times; each time the message showed again, the extender's
    renewal met the expired handle, the stop found no execution, and the lease closed LOST as a failed
    attempt: AttemptsExhausted with no execution ever run. The stop that finds no execution now closes
    the lease never started, counted as a refused start (as reconciliation counts it)."""
    b = bench(limit=5)
    message = b.send("X")
    with monkeypatch.context() as refusing:  # the start unanswered, and the question after it refused
        refusing.setattr(b.aws.stepfunctions, "start_execution", failed_start)
        refusing.setattr(b.aws.stepfunctions, "describe_execution", throttled_describe)
        assert b.deliver_jobs_queue() == {message: Outcome.NOT_STARTED}
    unstarted = stored(b, message)
    assert unstarted.active, "left ACTIVE: the receiver could not tell whether it started"
    assert unstarted.execution_arn and unstarted.execution_arn not in b.aws.stepfunctions.executions

    closed = stop_and_close(
        unstarted,
        LeaseStatus.LOST,
        stepfunctions=b.aws.stepfunctions,
        store=b.receiver.store,
        clock=b.clock,
        reason=LastError("ReceiptHandleIsInvalid", "receipt handle no longer accepted"),
    )

    assert closed is not None and closed.status is LeaseStatus.LOST and closed.never_started
    assert closed.history_with_this() == (), "no attempt spent"
    assert closed.refused_starts_with_this() == 1, "counted as a refused start"


def test_start_refused_new_attempt_whose_first_visibility_change_is_refused_spends_no_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found unaided by the campaign once `attempts_started` checked it (seed 63 of the corpus): on FIFO, a
    receive's transaction landed late (after a 5xx and a retry), a newer receive had been handed the
    message meanwhile, and the first visibility change met the expired handle: the new lease closed LOST
    as a failed attempt of an execution never started, and the message went to the DLQ counting it. It
    now closes never started."""
    b = bench(limit=5)
    message = b.send("X")

    def expired(**params: Any) -> Any:
        handle = params["ReceiptHandle"]
        reason = f"Value {handle} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."
        raise client_error("ChangeMessageVisibility", "InvalidParameterValue", reason, status=400)

    with monkeypatch.context() as refusing:
        refusing.setattr(b.aws.sqs, "change_message_visibility", expired)
        assert b.deliver_jobs_queue(delete=False) == {message: Outcome.STALE}

    lost = stored(b, message)
    assert lost.status is LeaseStatus.LOST and lost.never_started
    assert lost.history_with_this() == (), "no attempt spent"
    assert b.executions_of("X") == [], "never started"
