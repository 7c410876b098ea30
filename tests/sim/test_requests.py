"""What a receive costs in requests (the backfill benchmark's figure, `benchmarks/backfill.py`), on the
simulated AWS: a receive reads its lease and its job lock in one request, and a batch of arrivals for a
full type reads the type's slots once."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest

from longjobs.engine.admission.admit import AdmitReport, extender_pass, publish, watcher_pass
from longjobs.engine.admission.parking import unpark, unparked_visibility_s
from longjobs.engine.admission.readings import VIEW_TTL_S, read_slots
from longjobs.engine.admission.slots import slot_key
from longjobs.engine.delivery.read_ahead import read_ahead
from longjobs.engine.delivery.types import ADMISSION_ATTRIBUTE, Outcome, ReceiverState
from longjobs.engine.execution import execution_name
from longjobs.engine.lease import LeaseStatus, job_lock_key
from longjobs.engine.lease.lock import Hold
from longjobs.engine.observability import MetricName
from longjobs.engine.receiver.batch import receive_batch
from longjobs.engine.receiver.service import receive
from longjobs.engine.settings import Settings
from longjobs.engine.watcher.models import ExecutionStatusChange
from longjobs.engine.watcher.service import Watcher, WatchOutcome, on_status_change
from longjobs.sim.aws import client_error
from longjobs.sim.executions import status_change
from tests.sim.test_retention import TABLE, Bench, bench, full_with_one_waiting_in_flight, parked_behind_a_full_type


@contextmanager
def reads(b: Bench) -> Iterator[list[list[str]]]:
    """The keys of each BatchGetItem and GetItem made meanwhile, one list per request."""
    made: list[list[str]] = []
    dynamodb: Any = b.aws.dynamodb
    batch_get, get = dynamodb.batch_get_item, dynamodb.get_item

    def batch_get_item(**params: Any) -> Any:
        made.append([key["pk"]["S"] for table in params["RequestItems"].values() for key in table["Keys"]])
        return batch_get(**params)

    def get_item(**params: Any) -> Any:
        made.append([params["Key"]["pk"]["S"]])
        return get(**params)

    dynamodb.batch_get_item, dynamodb.get_item = batch_get_item, get_item
    try:
        yield made
    finally:
        dynamodb.batch_get_item, dynamodb.get_item = batch_get, get


def test_requests_a_receive_reads_its_lease_and_job_lock_in_one_request() -> None:
    b = bench(limit=5)
    message = b.send("a")

    with reads(b) as made:
        assert b.deliver_jobs_queue() == {message: Outcome.STARTED}

    assert made[0] == [message, job_lock_key("a")], "the first read: the lease and the job lock together"
    assert [job_lock_key("a")] not in made, "the job lock is not read again on its own"


def test_requests_a_batch_reads_its_leases_and_job_locks_ahead_in_one_request() -> None:
    b = bench(limit=5)
    messages = {b.send(job): job for job in ("a", "b", "c", "d")}

    with reads(b) as made:
        outcomes = b.deliver_jobs_queue()

    assert outcomes == dict.fromkeys(messages, Outcome.STARTED)
    keys = [key for message, job in messages.items() for key in (message, job_lock_key(job))]
    assert sorted(made[0]) == sorted(keys), "one request reads every lease and job lock of the batch"
    assert not any(message in keys for keys in made[1:] for message in messages), "no lease read again"


def test_requests_messages_of_one_job_id_in_a_batch_are_not_read_ahead() -> None:
    """Two messages of one job id in one batch would both read its lock free ahead, and the second, after
    the first took it, would join a full type's line instead of waiting for its job id (a review): each
    reads for itself, the first starts and the second waits for the job id."""
    b = bench(limit=1)
    first, second, other = b.send("a"), b.send("a"), b.send("b")

    with reads(b) as made:
        outcomes = b.deliver_jobs_queue()

    assert set(outcomes) == {first, second, other}
    assert sorted(outcomes[m] for m in (first, second)) == [Outcome.STARTED, Outcome.WAITING]
    assert not any(job_lock_key("a") in keys and len(keys) > 2 for keys in made), "not read ahead"
    assert len(b.aws.stepfunctions.executions) == 1


def test_requests_a_job_lock_read_ahead_held_is_read_again_before_the_message_waits() -> None:
    """The job lock read ahead is held by another message's execution, which frees it (its workflow's
    ReleaseJobLock) before this message is handled. Acting on the read ahead, the receive would send a
    copy to wait for a free job id; it reads the lock again and starts."""
    b = bench(limit=5)
    holder = b.hold_job_lock("a")
    first, second = b.send("z"), b.send("a")
    deliveries = {d.message_id: d for d in map(b._delivery, b._received(b.jobs_url))}
    assert set(deliveries) == {first, second}
    read_ahead(b.receiver, [deliveries[first], deliveries[second]])
    assert receive(b.receiver, deliveries[first]) is Outcome.STARTED
    assert b.receiver.store.locks.release(job_lock_key("a"), holder, now=b.clock.now())  # its execution runs on

    with reads(b) as made:
        assert receive(b.receiver, deliveries[second]) is Outcome.STARTED

    assert made[0] == [second, job_lock_key("a")], "read again, not taken from the read ahead"


def test_requests_an_unparking_forgets_what_it_read_ahead_for_a_copy_whose_receive_failed() -> None:
    """The admitters' receivers begin no batch: a copy whose receive failed before its read must not leave
    its read ahead for a later receive of it, which would take a read that old."""
    b, _, _, _ = parked_behind_a_full_type()
    for job in ("Y", "Z"):
        parked = b.send(job)
        assert b.deliver_jobs_queue() == {parked: Outcome.PARKED}
    handled: list[str] = []

    def failing_first(receiver: Any, delivery: Any) -> Outcome:
        handled.append(delivery.message_id)
        if len(handled) == 1:
            raise RuntimeError("the receive failed before its read")
        return receive(receiver, delivery)

    assert unpark(b.receiver, b.waiting_url, 3, handle=failing_first) == 3
    assert len(handled) == 3 and b.receiver.state.read_ahead == {}


def test_requests_a_read_ahead_that_fails_leaves_each_receive_to_read() -> None:
    b = bench(limit=5)
    messages = [b.send(job) for job in ("a", "b", "c")]
    dynamodb: Any = b.aws.dynamodb
    batch_get, failed = dynamodb.batch_get_item, []

    def throttled_once(**params: Any) -> Any:
        if not failed:
            failed.append(params)
            raise client_error("BatchGetItem", "ProvisionedThroughputExceededException", "throttled")
        return batch_get(**params)

    dynamodb.batch_get_item = throttled_once
    with reads(b) as made:
        outcomes = b.deliver_jobs_queue()

    assert failed and outcomes == dict.fromkeys(messages, Outcome.STARTED)
    assert sum(len(keys) == 2 for keys in made) == 3, "each receive read its own lease and lock"


def test_requests_a_batch_for_a_full_type_reads_its_slots_once() -> None:
    b = bench(limit=1)
    first = b.send("a")
    assert b.deliver_jobs_queue() == {first: Outcome.STARTED}
    b.clock.advance(1)
    arrivals = [b.send(f"x{i}") for i in range(5)]
    slot = slot_key("wait", 0)

    with reads(b) as made:
        outcomes = b.deliver_jobs_queue()

    assert set(outcomes) == set(arrivals) and Outcome.STARTED not in outcomes.values()
    assert sum(slot in keys for keys in made) == 1, "one slot reading for the five arrivals"


def test_requests_a_reading_of_full_slots_is_not_reused_past_its_ttl_nor_one_with_a_free_slot() -> None:
    b = bench(limit=2)
    first = b.send("a")
    assert b.deliver_jobs_queue() == {first: Outcome.STARTED}
    slots = [slot_key("wait", 0), slot_key("wait", 1)]

    with reads(b) as made:
        second = b.send("b")
        assert b.deliver_jobs_queue() == {second: Outcome.STARTED}  # a free slot: its reading is not kept
        third = b.send("c")
        assert b.deliver_jobs_queue() == {third: Outcome.WAITING_FOR_SLOT}  # read again: full, kept
        b.clock.advance(VIEW_TTL_S + 0.5)
        fourth = b.send("d")
        assert b.deliver_jobs_queue()[fourth] is not Outcome.STARTED

    assert sum(set(slots) <= set(keys) for keys in made) == 3, "read by each of the three receives"


def freed_behind_a_parked_message() -> tuple[Bench, str]:
    """`a` ran and freed its slot; `f`, which waited in flight, has shown again (its receive is over, so
    the line in flight is empty); `X` is parked. Returns the bench and X's message id."""
    b, first, _, original = parked_behind_a_full_type()
    running = b.receiver.store.get(first)
    assert running is not None and running.slot is not None
    assert b.receiver.store.locks.release(running.slot, running.execution_arn or "", now=b.clock.now())
    b.clock.advance(b.settings.receiver_timeout_s + 10)
    return b, original


def test_requests_the_watchers_admission_pass_counts_nothing_and_unparks_into_a_free_slot() -> None:
    """The watcher's pass (after an end) is not published: it asks neither the waiting queue's depth nor
    the line's length; a slot the line in flight leaves free goes to a parked message, received
    directly (an empty answer costs what asking the depth would)."""
    b, original = freed_behind_a_parked_message()
    depth_asked = b.aws.calls["sqs.GetQueueAttributes"]
    dynamodb: Any = b.aws.dynamodb
    query, selects = dynamodb.query, []

    def recorded(**params: Any) -> Any:
        selects.append(params.get("Select", "ALL"))
        return query(**params)

    dynamodb.query = recorded
    (report,) = watcher_pass(b.receiver, handle=receive)("wait")

    assert b.aws.calls["sqs.GetQueueAttributes"] == depth_asked
    assert selects and "COUNT" not in selects, "the line read, never counted"
    assert (report.waiting, report.parked, report.drain_s) == (None, None, None), "not counted, not reported"
    assert report.unparked == 1
    claimed = b.receiver.store.get(original)
    assert claimed is not None and claimed.claimed_by is not None, "X's copy was received and claimed its run"


def test_requests_the_extenders_admission_pass_measures_what_it_publishes() -> None:
    b, _ = freed_behind_a_parked_message()
    depth_asked = b.aws.calls["sqs.GetQueueAttributes"]

    (report,) = extender_pass(b.receiver, handle=receive)(math.inf)

    assert b.aws.calls["sqs.GetQueueAttributes"] == depth_asked + 1
    assert report.parked == 1 and report.unparked == 1 and report.waiting is not None and report.drain_s is not None


def test_requests_an_unmeasured_report_publishes_no_parked_count() -> None:
    published: list[str] = []

    class Sink:
        def add_type_metric(self, *, name: str, unit: str, value: float, job_type: str) -> None:
            published.append(name)

    publish(Sink(), [AdmitReport("wait", parked=None)])
    assert MetricName.PARKED_MESSAGES not in published and MetricName.WAITING_MESSAGES in published


def waiting_behind_a_full_type() -> tuple[Bench, str]:
    """A type limited to one: `a` ran and has just freed its slot; `f` waits in flight, hidden for a
    minute at least. Returns the bench and f's message id."""
    b = bench(limit=1, admission_wait_base_s=60)
    first = b.send("a")
    assert b.deliver_jobs_queue() == {first: Outcome.STARTED}
    waiting = b.send("f")
    assert b.deliver_jobs_queue() == {waiting: Outcome.WAITING_FOR_SLOT}
    running = b.receiver.store.get(first)
    assert running is not None and running.slot is not None
    assert b.receiver.store.locks.release(running.slot, running.execution_arn or "", now=b.clock.now())
    return b, waiting


def test_requests_admission_in_place_takes_a_free_job_lock_without_reading_it() -> None:
    b, waiting = waiting_behind_a_full_type()

    with reads(b) as made:
        (report,) = watcher_pass(b.receiver, handle=receive)("wait")

    assert report.admitted == 1
    assert [job_lock_key("f")] not in made, "taken in the transaction, never read"
    lease = b.receiver.store.get(waiting)
    lock = b.receiver.store.locks.get(job_lock_key("f"))
    assert lease is not None and lock is not None and lock.execution_arn == lease.execution_arn


def test_requests_admission_in_place_reads_a_held_job_lock_and_takes_over_a_holder_that_never_ran() -> None:
    """The take finds the job lock held, by an execution that never started and is past the receiver's
    grace: only then is the lock read, and its holding taken over in a second transaction."""
    b, waiting = waiting_behind_a_full_type()
    ghost = "arn:aws:states:us-east-1:123456789012:execution:long-jobs:ghost-1"
    long_ago = b.clock.now() - b.settings.reconcile_grace_s - 60
    key = job_lock_key("f")
    assert b.receiver.store.locks.take(key, holder="ghost", execution_arn=ghost, now=long_ago, hold_until=long_ago)

    with reads(b) as made:
        (report,) = watcher_pass(b.receiver, handle=receive)("wait")

    assert report.admitted == 1
    assert made.count([key]) == 1, "read once, after the take found it held"
    lease, lock = b.receiver.store.get(waiting), b.receiver.store.locks.get(key)
    assert lease is not None and lock is not None and lock.execution_arn == lease.execution_arn != ghost


def test_requests_admission_in_place_leaves_a_message_whose_job_runs_waiting() -> None:
    """The take finds the job lock held by a running execution (another message of the job): the lock is
    read, its holder is running, and the message waits on, holding nothing."""
    b, waiting = waiting_behind_a_full_type()
    started = b.aws.stepfunctions.start_execution(
        stateMachineArn=b.settings.state_machine_arn, name="other-1", input="{}"
    )
    key = job_lock_key("f")
    now = b.clock.now()
    assert b.receiver.store.locks.take(
        key, holder="other", execution_arn=started["executionArn"], now=now - 600, hold_until=now + 600
    )
    holder = b.receiver.store.locks.get(key)

    (report,) = watcher_pass(b.receiver, handle=receive)("wait")

    assert report.admitted == 0
    still = b.receiver.store.get(waiting)
    assert still is not None and still.status is LeaseStatus.WAITING
    assert b.receiver.store.locks.get(key) == holder, "the running holder keeps its lock"
    assert all(not lock.held for lock in b.receiver.store.locks.get_many([slot_key("wait", 0)]).values())


@pytest.mark.parametrize(
    ("execution_input", "expected"),
    [
        ('{"job": {"type": "wait", "params": {}}, "message_id": "m"}', "wait"),
        (None, None),  # EventBridge leaves out an input too large to include
        ("not json", None),
        ('{"job": "wait"}', None),
        ('{"job": {"type": ""}}', None),
        ("[1]", None),
    ],
)
def test_requests_a_status_event_names_its_job_type_from_the_execution_input(
    execution_input: str | None, expected: str | None
) -> None:
    change = ExecutionStatusChange(
        executionArn="arn", stateMachineArn="sm", name="m-1", status="SUCCEEDED", input=execution_input
    )
    assert change.job_type() == expected


def test_requests_the_watcher_admits_after_a_success_without_reading_the_lease() -> None:
    b, _ = waiting_behind_a_full_type()
    admitted: list[tuple[str, Hold | None]] = []
    watcher = Watcher(
        store=b.receiver.store,
        visibility=b.receiver.visibility,
        clock=b.clock,
        state_machine_arn=b.settings.state_machine_arn or "",
        admit=lambda job_type, freed: admitted.append((job_type, freed)),
    )
    execution = ExecutionStatusChange(
        executionArn=f"{b.settings.state_machine_arn}:m-1",
        stateMachineArn=b.settings.state_machine_arn or "",
        name=execution_name("m0000001-0000-4000-8000-000000000000", 1),
        status="SUCCEEDED",
    )
    with_input = execution.model_copy(update={"input": '{"job": {"type": "wait"}, "slot": "slot#wait#0"}'})

    with reads(b) as made:
        assert on_status_change(watcher, with_input) is WatchOutcome.UNCHANGED
    assert (made, admitted) == ([], [("wait", Hold("slot#wait#0"))])

    with reads(b) as made:
        on_status_change(watcher, execution)  # no input: the lease names the type; the pass reads the slots
    assert len(made) == 1 and admitted[1] == ("wait", None)


# -- found by a review of the cuts: a kept reading of full slots must not hide a slot freed since ----------


def stale_slot_behind_a_parked_message(*, lost_release: bool) -> tuple[Bench, str]:
    """`a` held the type's one slot and ended FAILED; its lease is closed. With `lost_release` its slot's
    release was lost (the slot still names `a`: only the extender's sweep frees it), else it was freed.
    `f`'s WAITING receive has shown again (the line in flight is empty); `X` is parked. Returns the bench
    and X's message id."""
    b, first, _, original = parked_behind_a_full_type()
    running = b.receiver.store.get(first)
    assert running is not None and running.slot is not None and running.execution_arn
    b.aws.stepfunctions.end(b.aws.stepfunctions.executions[running.execution_arn], "FAILED")
    if lost_release:  # closed by the workflow's MarkReleased, whose ReleaseSlot then failed past its retries
        b.aws.dynamodb.update_item(
            TableName=TABLE,
            Key={"pk": {"S": first}},
            UpdateExpression="SET #status = :released REMOVE #shard, renew_at",
            ExpressionAttributeNames={"#status": "status", "#shard": "shard"},
            ExpressionAttributeValues={":released": {"S": LeaseStatus.RELEASED.value}},
        )
    else:  # the close frees the slot with it
        assert b.receiver.store.close(running, LeaseStatus.RELEASED, now=b.clock.now()) is not None
        slot = b.receiver.store.locks.get(running.slot)
        assert slot is not None and not slot.held
    b.clock.advance(b.settings.receiver_timeout_s + 10)
    return b, original


def started_from_its_copy(b: Bench, original: str) -> bool:
    marker = b.receiver.store.get(original)
    assert marker is not None and marker.claimed_by is not None, "X's copy was unparked"
    copy = b.receiver.store.get(marker.claimed_by)
    return copy is not None and copy.status is LeaseStatus.ACTIVE


@pytest.mark.parametrize("lost_release", [False, True], ids=["released", "freed-by-the-sweep"])
def test_requests_a_freed_slot_goes_to_the_message_the_same_pass_unparks(lost_release: bool) -> None:
    """The pass's first reading found every slot held and was kept; its sweep then freed the stale one.
    The message it unparks must start in that slot, not wait on the kept reading (found by review: it
    waited a period with the slot free)."""
    b, original = stale_slot_behind_a_parked_message(lost_release=lost_release)

    (report,) = extender_pass(b.receiver, handle=receive)(math.inf)

    assert (report.freed, report.unparked) == (int(lost_release), 1)
    assert started_from_its_copy(b, original)


def test_requests_a_later_batch_reads_the_slots_again() -> None:
    """Limit 2: `a` and `b` run; `x0` reads the type full; `a` ends and the watcher's pass admits x0; `b`
    ends and its pass finds no one waiting. `x1`, half a second later in the next batch, reads the slots
    afresh and starts (found by review: it waited on the last batch's kept reading with a slot free,
    until the extender's pass)."""
    b = bench(limit=2)
    watcher = replace(b.receiver, state=ReceiverState())  # the watcher's own Lambda
    first, second = b.send("a"), b.send("b")
    assert set(b.deliver_jobs_queue().values()) == {Outcome.STARTED}
    b.clock.advance(1)
    waiting = b.send("x0")
    assert b.deliver_jobs_queue() == {waiting: Outcome.WAITING_FOR_SLOT}
    b.finish(first)
    assert watcher_pass(watcher, handle=receive)("wait")[0].admitted == 1
    b.finish(second)
    assert watcher_pass(watcher, handle=receive)("wait")[0].admitted == 0
    b.clock.advance(0.5)
    later = b.send("x1")

    assert b.deliver_jobs_queue() == {later: Outcome.STARTED}


def succeeded_with_its_lock_left(b: Bench) -> tuple[str, str]:
    """A job whose workflow closed its lease SUCCEEDED but whose lock release failed past its retries,
    and whose message shows again (its delete failed too): (message id, its execution)."""
    message = b.send("a")
    assert b.deliver_jobs_queue() == {message: Outcome.STARTED}
    lease = b.receiver.store.get(message)
    assert lease is not None and lease.execution_arn is not None
    b.aws.dynamodb.update_item(
        TableName=TABLE,
        Key={"pk": {"S": message}},
        UpdateExpression="SET #status = :succeeded",
        ExpressionAttributeNames={"#status": "status"},
        ExpressionAttributeValues={":succeeded": {"S": LeaseStatus.SUCCEEDED.value}},
    )
    b.aws.sqs.change_message_visibility(QueueUrl=b.jobs_url, ReceiptHandle=lease.receipt_handle, VisibilityTimeout=0)
    return message, lease.execution_arn


def test_requests_a_redelivered_success_frees_the_job_lock_its_execution_still_holds() -> None:
    """Found by the simulation (seed 450 of the mixed profile, its faults focused on the workflow's
    UpdateItem): the workflow closed the lease SUCCEEDED, its ReleaseJobLock failed six times, and the lock
    stayed held with nothing to free it (`holds_freed`)."""
    b = bench(limit=5)
    message, execution = succeeded_with_its_lock_left(b)

    assert b.deliver_jobs_queue() == {message: Outcome.ALREADY_SUCCEEDED}
    lock = b.receiver.store.locks.get(job_lock_key("a"))
    assert lock is not None and not lock.held and lock.execution_arn == execution


def test_requests_a_redelivered_success_leaves_a_lock_of_another_execution_and_reads_nothing_more() -> None:
    b = bench(limit=5)
    message, _ = succeeded_with_its_lock_left(b)
    other = "arn:aws:states:us-east-1:123456789012:execution:long-jobs:another-1"
    b.aws.dynamodb.update_item(
        TableName=TABLE,
        Key={"pk": {"S": job_lock_key("a")}},
        UpdateExpression="SET execution_arn = :other",
        ExpressionAttributeValues={":other": {"S": other}},
    )
    writes = b.aws.calls["dynamodb.update_item"]

    with reads(b) as made:
        assert b.deliver_jobs_queue() == {message: Outcome.ALREADY_SUCCEEDED}

    assert made == [[message, job_lock_key("a")]], "the lease and the lock, read together, and nothing else"
    assert b.aws.calls["dynamodb.update_item"] == writes, "a lock another execution holds is not touched"
    lock = b.receiver.store.locks.get(job_lock_key("a"))
    assert lock is not None and lock.held and lock.execution_arn == other


def test_requests_the_watcher_admits_into_the_slot_its_event_names_without_reading_the_slots() -> None:
    """A status event carries the ended execution's input (its `slot`) and its start and stop: the
    watcher's pass gives that slot to the head of the line without reading the type's slots, and the
    slot keeps how long its previous holder held it (the estimate's data)."""
    b, waiting = waiting_behind_a_full_type()
    freed = Hold(slot_key("wait", 0), last_duration_s=1_234.0)

    with reads(b) as made:
        (report,) = watcher_pass(b.receiver, handle=receive)("wait", freed)

    assert report.admitted == 1
    assert [slot_key("wait", 0)] not in made, "the slot taken by the transaction, never read"
    [slot] = b.receiver.store.locks.get_many([slot_key("wait", 0)]).values()
    lease = b.receiver.store.get(waiting)
    assert lease is not None and slot.held and slot.execution_arn == lease.execution_arn
    assert slot.last_duration_s == 1_234.0


def test_requests_the_watcher_takes_nothing_when_the_slot_its_event_names_is_not_free() -> None:
    """The event names a slot still held (the ended execution's release was lost, or a late event of a
    slot taken since): the take's condition refuses it, nothing is taken or freed, and the message waits
    for a pass that reads the slots (the extender's sweep frees a stale one)."""
    b, waiting = waiting_behind_a_full_type()
    key = slot_key("wait", 0)
    other = b.aws.stepfunctions.start_execution(stateMachineArn=b.settings.state_machine_arn, name="o-1", input="{}")
    now = b.clock.now()
    assert b.receiver.store.locks.take(key, holder="o", execution_arn=other["executionArn"], now=now, hold_until=now)
    holder = b.receiver.store.locks.get(key)

    (report,) = watcher_pass(b.receiver, handle=receive)("wait", Hold(key, last_duration_s=60.0))

    assert report.admitted == 0
    still = b.receiver.store.get(waiting)
    assert still is not None and still.status is LeaseStatus.WAITING and not still.execution_arn
    assert b.receiver.store.locks.get(key) == holder, "the holder keeps its slot"
    job_lock = b.receiver.store.locks.get(job_lock_key("f"))
    assert job_lock is None or not job_lock.held, "nor its job lock"


def test_requests_a_status_event_names_the_slot_its_execution_freed() -> None:
    """`ExecutionStatusChange.freed_slot`: the input's `slot` and the run's length (stop less start)."""
    change = ExecutionStatusChange(
        executionArn="arn:aws:states:us-east-1:123456789012:execution:long-jobs:m-1",
        stateMachineArn="arn:aws:states:us-east-1:123456789012:stateMachine:long-jobs",
        name="m-1",
        status="SUCCEEDED",
        input=json.dumps({"job": {"type": "wait"}, "slot": "slot#wait#3"}),
        startDate=1_700_000_000_000,
        stopDate=1_700_000_090_500,
    )
    assert change.freed_slot() == Hold("slot#wait#3", last_duration_s=90.5)
    assert change.model_copy(update={"startDate": None}).freed_slot() == Hold("slot#wait#3")
    assert change.model_copy(update={"input": json.dumps({"job": {"type": "wait"}})}).freed_slot() is None
    assert change.model_copy(update={"input": None}).freed_slot() is None, "too large for the event: read them"


def test_requests_the_watcher_unparks_into_the_slot_its_event_names_past_a_kept_full_reading() -> None:
    """Found by a review: the watcher's admitter keeps a reading that found every slot held (for a batch
    of arrivals, `VIEW_TTL_S`); a pass into the slot an event names did not clear it, so the parked copy it
    unparked read the type full from it and waited in flight while the slot stayed free until the
    extender's pass."""
    b, first, _filler, _original = parked_behind_a_full_type()
    b.clock.advance(b.settings.receiver_timeout_s + 10)  # f has shown again: the line in flight is empty
    read_slots(b.receiver, "wait", 1)  # an earlier pass of this watcher read the type full
    running = b.receiver.store.get(first)
    assert running is not None and running.slot is not None
    assert b.receiver.store.locks.release(running.slot, running.execution_arn or "", now=b.clock.now())
    b.clock.advance(1.0)

    (report,) = watcher_pass(b.receiver, handle=receive)("wait", Hold(running.slot, last_duration_s=100.0))

    assert report.unparked == 1
    [slot] = b.receiver.store.locks.get_many([running.slot]).values()
    assert slot.held, "the unparked copy took the slot the event named"


def test_requests_the_watcher_frees_the_holds_an_ended_execution_left_on_its_closed_lease() -> None:
    """Found by a review's campaign (seed 5054 of seeds 5000-5299): the success path's MarkSucceeded
    landed unanswered, its retry was refused (the lease SUCCEEDED already), and every read after it failed
    until the execution ended FAILED: the message was deleted, the lease closed by the execution itself,
    its job lock still held. No redelivery comes, nor reconciliation (a closed lease is not in its index):
    the watcher, hearing of the end, frees the holds its lease names, each conditional on the execution.
    (Since then the workflow frees them itself after such reads, `workflow:catch:ReadLease->ReleaseJobLock`;
    the watcher's release stays for an execution that ended before its releases, an ABORTED one.)"""
    b, waiting = waiting_behind_a_full_type()
    b.clock.advance(1)
    (report,) = watcher_pass(b.receiver, handle=receive)("wait")
    assert report.admitted == 1
    running = b.receiver.store.get(waiting)
    assert running is not None and running.execution_arn is not None and running.slot is not None
    closed = b.receiver.store.close(running, LeaseStatus.SUCCEEDED, now=b.clock.now())  # MarkSucceeded landed
    assert closed is not None
    execution = b.aws.stepfunctions.executions[running.execution_arn]
    b.aws.stepfunctions.end(execution, "FAILED")  # its reads after the close all failed
    watcher = Watcher(
        store=b.receiver.store,
        visibility=b.receiver.visibility,
        clock=b.clock,
        state_machine_arn=b.settings.state_machine_arn or "",
    )

    on_status_change(watcher, status_change(execution, b.settings.state_machine_arn or ""))

    lock = b.receiver.store.locks.get(job_lock_key("f"))
    [slot] = b.receiver.store.locks.get_many([running.slot]).values()
    assert lock is not None and not lock.held and not slot.held, "freed by the watcher"
    assert b.receiver.store.get(waiting) == closed, "the lease itself is left as the execution closed it"


def test_requests_a_batch_of_parked_records_sends_its_copies_and_notes_them_in_one_request_each() -> None:
    """A batch's parkings leave their copies to its end (`longjobs.engine.receiver.batch`): three parked
    records cost one SendMessageBatch and one TransactWriteItems of notes, not three sends and three
    updates, and each marker names its own copy (by its original, as it carries)."""
    b = bench(limit=1)
    full_with_one_waiting_in_flight(b)
    originals = [b.send(job) for job in ("X", "Y", "Z")]
    before = dict(b.aws.calls)

    assert b.deliver_jobs_queue() == dict.fromkeys(originals, Outcome.PARKED)

    made = {call: count - before.get(call, 0) for call, count in b.aws.calls.items() if count > before.get(call, 0)}
    assert made.get("sqs.SendMessageBatch") == 1 and "sqs.SendMessage" not in made
    assert made.get("dynamodb.TransactWriteItems") == 1 and "dynamodb.UpdateItem" not in made
    copies = b.aws.sqs.queues[b.waiting_url].messages.values()
    carried = {json.loads(copy.attributes[ADMISSION_ATTRIBUTE]["StringValue"])["parked"]: copy for copy in copies}
    assert set(carried) == set(originals)
    for original in originals:
        marker = b.receiver.store.get(original)
        assert marker is not None and marker.copy_id == carried[original].message_id


def test_requests_an_unparked_copy_that_waits_is_hidden_by_its_receive_with_no_visibility_change() -> None:
    """An unparking receives its copies hidden for the longest wait (`unparked_visibility_s`): a copy that
    then waits for a slot needs no ChangeMessageVisibility of its own, and its WAITING lease believes it
    hidden no longer than SQS hides it (counted from before the receive). A retention of hours: the
    receive's hiding ends before the copy's resend time."""
    b = bench(limit=1, queue_retention_s=4 * 3_600)
    full_with_one_waiting_in_flight(b)
    original = b.send("X")
    assert b.deliver_jobs_queue() == {original: Outcome.PARKED}
    b.clock.advance(5)
    asked_at = b.clock.now()
    before = dict(b.aws.calls)

    assert unpark(b.receiver, b.waiting_url, 1, handle=receive) == 1

    assert b.aws.calls["sqs.ChangeMessageVisibility"] == before.get("sqs.ChangeMessageVisibility", 0)
    [copy] = b.aws.sqs.queues[b.waiting_url].messages.values()
    lease = b.receiver.store.get(copy.message_id)
    assert lease is not None and lease.status is LeaseStatus.WAITING
    assert lease.visible_until == asked_at + unparked_visibility_s(b.receiver.settings) <= copy.visible_at
    claimed = b.receiver.store.get(original)
    assert claimed is not None and claimed.claimed_by == copy.message_id


def test_requests_an_unparked_copy_near_its_retention_is_still_hidden_no_later_than_its_resend() -> None:
    """Its receive may hide a copy past the time it must be sent afresh (`resend_at`, before SQS deletes
    it): then its wait is set by a visibility change, cut at that time, as before."""
    b, _, _, _ = parked_behind_a_full_type()
    settings = b.receiver.settings
    [copy] = b.aws.sqs.queues[b.waiting_url].messages.values()
    # its resend time comes within the receive's hiding, not yet reached
    b.clock.advance(settings.resend_after_s - unparked_visibility_s(settings) / 2)
    before = b.aws.calls["sqs.ChangeMessageVisibility"]

    assert unpark(b.receiver, b.waiting_url, 1, handle=receive) == 1

    assert b.aws.calls["sqs.ChangeMessageVisibility"] == before + 1
    lease = b.receiver.store.get(copy.message_id)
    assert lease is not None and lease.status is LeaseStatus.WAITING
    assert lease.visible_until <= copy.sent_at + settings.resend_after_s


def test_requests_two_batches_at_once_on_one_receiver_each_send_their_own_parked_copies() -> None:
    """The simulation's two pollers hand batches to one receiver at once (a Lambda container runs one at a
    time, but nothing in the receiver relies on it): each batch sends the copies of its own records at
    its end, and a batch that begins meanwhile neither drops nor sends them (a review of the first
    version: a second batch's start dropped the first's pending copies, whose records were then
    acknowledged with no copy sent: lost)."""
    b = bench(limit=1)
    full_with_one_waiting_in_flight(b)
    first, second = b.send("X"), b.send("Y")
    deliveries = {d.message_id: d for d in map(b._delivery, b._received(b.jobs_url))}

    def copies() -> set[str]:
        messages = b.aws.sqs.queues[b.waiting_url].messages.values()
        return {json.loads(m.attributes[ADMISSION_ATTRIBUTE]["StringValue"])["parked"] for m in messages}

    with receive_batch(b.receiver, [deliveries[first]]) as unsent_first:
        assert receive(b.receiver, deliveries[first]) is Outcome.PARKED
        with receive_batch(b.receiver, [deliveries[second]]) as unsent_second:
            assert receive(b.receiver, deliveries[second]) is Outcome.PARKED
        assert copies() == {second}, "the second batch sent its own copy, not the first's"
    assert copies() == {first, second}
    assert unsent_first == unsent_second == set()
    assert b.receiver.state.pending_copies == {}, "nothing left for a later receive of either"


@pytest.mark.parametrize(
    ("horizon_s", "period_s", "hidden_s"),
    [
        (3_600, 60.0, 7_260),  # the defaults: two horizons and a period
        (60, 1.0, 900),  # never shorter than Lambda's longest timeout (a review: it fell below the receiver's)
        (6 * 3_600, 60.0, 43_200),  # never longer than SQS's 12 h
    ],
)
def test_requests_an_unparking_hides_its_copies_for_the_longest_wait_within_lambda_and_sqs_limits(
    horizon_s: int, period_s: float, hidden_s: int
) -> None:
    settings = Settings(admission_horizon_s=horizon_s, extender_period_s=period_s, admission_wait_base_s=2)
    assert unparked_visibility_s(settings) == hidden_s
