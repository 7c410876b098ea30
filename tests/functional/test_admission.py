"""Admission on moto: a full type defers without an attempt, every end of an execution returns its slot,
a slot whose holder never started is recovered, and used-up attempts go to the DLQ with their history.

The type `limited` is the built-in `wait` runner with `max_concurrency` 1: one execution at a time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto.core.exceptions import JsonRESTError
from moto.dynamodb.models import DynamoDBBackend

from longjobs.engine.admission import slot_key
from longjobs.engine.admission.admit import AdmitReport, admit_all, admit_in_place, watcher_pass
from longjobs.engine.admission.readings import margin_s, slots_of
from longjobs.engine.delivery.dlq import EXHAUSTED
from longjobs.engine.delivery.types import Outcome
from longjobs.engine.execution import execution_arn, execution_name
from longjobs.engine.extender.reconcile import reconcile
from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog
from longjobs.engine.lease import LeaseStatus, successor_version
from longjobs.engine.lease.lock import LEASE_KEY, Hold, Lock, job_lock_key
from longjobs.engine.lease.schema import PARTITION_KEY
from longjobs.engine.receiver.batch import receive_batch
from longjobs.engine.receiver.service import receive
from longjobs.engine.runs import JobRuns, RunPlace
from longjobs.engine.watcher.models import ExecutionStatusChange
from longjobs.engine.watcher.service import Watcher, WatchOutcome, on_status_change
from tests.functional.conftest import STATE_MACHINE_ARN, Flow, OffsetClock, running_flow

LIMITED = "limited"
SLOT = slot_key(LIMITED, 0)
CATALOG = JobCatalog(
    [
        *BUILTIN_TYPES,
        next(t for t in BUILTIN_TYPES if t.name == "wait").model_copy(
            update={"name": LIMITED, "max_concurrency": 1, "description": "one at a time"}
        ),
    ]
)


@pytest.fixture
def flow() -> Iterator[Flow]:
    with running_flow(CATALOG, max_attempts=2) as built:
        yield built


def slot(flow: Flow) -> Lock | None:
    return flow.receiver.store.locks.get(SLOT)


def admit(flow: Flow, *, later_s: float = 0, sweep: bool = False) -> AdmitReport:
    admitting = flow.receiver if not later_s else replace(flow.receiver, clock=OffsetClock(later_s))
    (report,) = admit_all(admitting, handle=receive, sweep=sweep)
    return report


def queued(flow: Flow, queue_url: str | None = None) -> int:
    """Messages on the jobs queue (or `queue_url`), visible or not."""
    attributes = flow.sqs.get_queue_attributes(
        QueueUrl=queue_url or flow.harness.queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return sum(int(value) for value in attributes.values())


def watcher(flow: Flow) -> Watcher:
    return Watcher(
        store=flow.receiver.store,
        visibility=flow.receiver.visibility,
        clock=flow.receiver.clock,
        state_machine_arn=STATE_MACHINE_ARN,
        admit=watcher_pass(flow.receiver, handle=receive),
    )


def start_one_and_queue_one(flow: Flow, first: dict[str, Any]) -> tuple[str, str]:
    """`first` starts and holds the type's one slot; a second message (a 1 s job) then waits for it."""
    running = flow.send_job("first", LIMITED, **first)
    assert flow.deliver() == {running: Outcome.STARTED}
    waiting = flow.send_job("second", LIMITED, seconds=1)
    assert flow.deliver() == {waiting: Outcome.WAITING_FOR_SLOT}
    return running, waiting


def assert_admitted_in_place(flow: Flow, report: AdmitReport, message_id: str) -> None:
    """The waiting message started on the receive that held it: no new receive, one attempt."""
    assert report.admitted == 1
    lease = flow.lease(message_id)
    assert lease.status is LeaseStatus.ACTIVE and lease.receive_count == 1
    assert lease.slot == SLOT
    held = slot(flow)
    assert held is not None and held.held and held.execution_arn == lease.execution_arn
    assert flow.wait_for_execution(lease.execution_arn or "")["status"] == "SUCCEEDED"
    assert flow.lease(message_id).status is LeaseStatus.SUCCEEDED, "deleted by its workflow"


def test_admission_full_type_defers_without_counting_an_attempt(flow: Flow) -> None:
    running, waiting = start_one_and_queue_one(flow, {"seconds": 20})

    lease = flow.lease(waiting)
    assert lease.status is LeaseStatus.WAITING
    assert (lease.execution_arn, lease.attempt, lease.history, lease.slot) == (None, 0, (), None), "no attempt"
    assert lease.waits == 1 and lease.visible_until - time.time() >= 20, "hidden until about when a slot frees"
    assert [e["name"] for e in flow.executions()] == [execution_name(running, 1)], "the waiting one did not start"
    assert flow.harness.visible_messages() == [], "both held: nothing to receive"
    held = slot(flow)
    assert held is not None and held.execution_arn == flow.lease(running).execution_arn


def test_admission_slot_returned_on_success_then_the_waiting_message_starts(flow: Flow) -> None:
    running, waiting = start_one_and_queue_one(flow, {"seconds": 1})

    assert flow.wait_for_execution(flow.lease(running).execution_arn or "")["status"] == "SUCCEEDED"
    freed = slot(flow)
    assert freed is not None and not freed.held, "the workflow's success path returned the slot"
    assert freed.released_at is not None and freed.held_for_s is not None, "its holding time: the estimate's data"

    assert_admitted_in_place(flow, admit(flow), waiting)


def test_admission_slot_returned_on_failure(flow: Flow) -> None:
    running, waiting = start_one_and_queue_one(flow, {"seconds": 1, "fail": True})

    assert flow.wait_for_execution(flow.lease(running).execution_arn or "")["status"] == "FAILED"
    freed = slot(flow)
    assert freed is not None and not freed.held, "the workflow's failure path returned the slot"
    assert flow.lease(running).status is LeaseStatus.RELEASED

    assert_admitted_in_place(flow, admit(flow), waiting)


def test_admission_slot_returned_on_abort_by_the_watcher_which_admits_the_next(flow: Flow) -> None:
    running, waiting = start_one_and_queue_one(flow, {"seconds": 30})
    arn = flow.lease(running).execution_arn or ""
    flow.abort(arn)
    held = slot(flow)
    assert held is not None and held.held, "an abort skips the workflow's own paths: the slot is still held"

    change = ExecutionStatusChange(
        executionArn=arn, stateMachineArn=STATE_MACHINE_ARN, name=execution_name(running, 1), status="ABORTED"
    )
    assert on_status_change(watcher(flow), change) is WatchOutcome.RELEASED

    assert flow.lease(running).status is LeaseStatus.RELEASED
    lease = flow.lease(waiting)
    assert lease.status is LeaseStatus.ACTIVE and lease.slot == SLOT, "the watcher admitted the waiting one"
    assert flow.wait_for_execution(lease.execution_arn or "")["status"] == "SUCCEEDED"


def test_admission_slot_returned_when_reconciliation_finds_the_execution_dead(flow: Flow) -> None:
    running, waiting = start_one_and_queue_one(flow, {"seconds": 30})
    flow.abort(flow.lease(running).execution_arn or "")  # and its status event is lost

    report = reconcile(flow.later(), deadline=time.time() + 90)  # the later clock reads the deadline

    assert report.released == 1
    freed = slot(flow)
    assert freed is not None and not freed.held
    assert_admitted_in_place(flow, admit(flow), waiting)


def test_admission_in_place_waits_for_the_previous_run_of_its_job(flow: Flow) -> None:
    """A type whose runs outlive their execution (`longjobs.engine.runs`): a WAITING message whose job id's
    lock another execution freed a moment ago is not admitted while that run may go on; once it cannot,
    it is. A job id never run before is taken as absent, at no read (the backfill's case)."""
    running, waiting = start_one_and_queue_one(flow, {"seconds": 1})
    assert flow.wait_for_execution(flow.lease(running).execution_arn or "")["status"] == "SUCCEEDED"
    locks, key, now = flow.receiver.store.locks, job_lock_key("second"), time.time()
    gone = execution_arn(STATE_MACHINE_ARN, "m-gone-1")
    assert locks.take(key, holder="m-gone", execution_arn=gone, now=now - 60, hold_until=now + 600)
    assert locks.release(key, gone, now=now - 5)
    flow.receiver.runs = JobRuns({LIMITED: RunPlace("worker", heartbeat_s=600)}, None)

    assert admit(flow).admitted == 0, "its job's previous run may still be going on"
    assert flow.lease(waiting).status is LeaseStatus.WAITING
    lock = locks.get(key)
    assert lock is not None and not lock.held and lock.execution_arn == gone

    flow.receiver.runs = JobRuns({LIMITED: RunPlace("worker", heartbeat_s=1)}, None)  # that run has ended
    assert_admitted_in_place(flow, admit(flow), waiting)


def test_admission_second_admitter_of_one_waiting_message_frees_nothing_the_winner_holds(flow: Flow) -> None:
    """Protocol review, defect 1: two admitters (a watcher and the extender, say) read the same WAITING
    message and compute the same execution name. The one whose lease write loses must not free the job
    lock and slot that the winner's running execution holds under that same name."""
    running, waiting = start_one_and_queue_one(flow, {"seconds": 30})
    flow.abort(flow.lease(running).execution_arn or "")
    reconcile(flow.later(), deadline=time.time() + 90)  # frees the slot, admits nothing
    stale = flow.lease(waiting)
    stale_slots = slots_of(flow.receiver).read(LIMITED, 1, now=time.time())
    assert stale.status is LeaseStatus.WAITING and stale_slots.free_keys

    assert admit(flow).admitted == 1  # the winner
    winner = flow.lease(waiting)
    assert winner.status is LeaseStatus.ACTIVE and winner.execution_arn

    assert admit_in_place(flow.receiver, stale, stale_slots) is None  # the loser, on its stale reads

    held = slot(flow)
    assert held is not None and held.held and held.execution_arn == winner.execution_arn, "the winner's slot"
    lock = flow.receiver.store.locks.get(job_lock_key("second"))
    assert lock is not None and lock.held and lock.execution_arn == winner.execution_arn, "the winner's job lock"
    assert flow.wait_for_execution(winner.execution_arn)["status"] == "SUCCEEDED"


def test_admission_write_answered_500_after_it_landed_starts_the_attempt(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The admission's lease write lands, then the answer is a 500: the admitter reads the lease, finds
    its own write, and starts the execution (before, the lease stayed ACTIVE with no execution)."""
    running, waiting = start_one_and_queue_one(flow, {"seconds": 30})
    flow.abort(flow.lease(running).execution_arn or "")
    reconcile(flow.later(), deadline=time.time() + 90)
    store = flow.receiver.store
    real_take_holds = store.take_holds

    def landed_then_500(*args: Any, **kwargs: Any) -> Any:
        assert real_take_holds(*args, **kwargs).written
        error = {"Code": "InternalServerError", "Message": "We encountered an internal error."}
        raise ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 500}}, "TransactWriteItems")

    monkeypatch.setattr(store, "take_holds", landed_then_500)
    assert_admitted_in_place(flow, admit(flow), waiting)


def test_admission_slot_no_lease_names_is_freed_after_the_grace(flow: Flow) -> None:
    """A slot held for an execution that no lease names and that never started (a lease replaced while
    its release was lost; the receiver takes a slot only with its lease, in one transaction) is freed by
    the extender's sweep once a start of it can no longer land (the grace)."""
    ghost = execution_arn(STATE_MACHINE_ARN, execution_name("crashed-message", 1))
    now = time.time()
    assert flow.receiver.store.locks.take(SLOT, holder="crashed-message", execution_arn=ghost, now=now, hold_until=now)
    waiting = flow.send_job("second", LIMITED, seconds=1)
    assert flow.deliver() == {waiting: Outcome.WAITING_FOR_SLOT}

    early = admit(flow, sweep=True)
    assert (early.freed, early.admitted) == (0, 0), "within the grace its start may still land: kept"

    late = admit(flow, later_s=flow.settings.reconcile_grace_s + 1, sweep=True)
    assert late.freed == 1
    assert late.admitted == 1
    assert flow.lease(waiting).slot == SLOT


class FailingAfterTransaction:
    """A DynamoDB client whose first transaction lands, then answers 500 (a 5xx after success)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def transact_write_items(self, **kwargs: Any) -> Any:
        answer = self._client.transact_write_items(**kwargs)
        if not self.failed:
            self.failed += 1
            error = {"Error": {"Code": "InternalServerError", "Message": "We encountered an internal error."}}
            raise ClientError({**error, "ResponseMetadata": {"HTTPStatusCode": 500}}, "TransactWriteItems")
        return answer


def test_admission_holds_write_answered_500_after_it_landed_starts_the_attempt(flow: Flow) -> None:
    """The lease, job lock and slot land in one transaction, then the answer is a 500 (an error may come
    after a write took effect). The receiver reads the lease back, finds its own write, and starts: no
    ghost slot, no second attempt."""
    store = flow.receiver.store
    flaky = FailingAfterTransaction(store.client)
    admitting = replace(flow.receiver, store=replace_client(store, flaky))
    message_id = flow.send_job("only", LIMITED, seconds=1)
    (delivery,) = flow.receive_batch()

    assert receive(admitting, delivery) is Outcome.STARTED
    assert flaky.failed == 1
    lease = flow.lease(message_id)
    held = slot(flow)
    assert held is not None and held.held and held.execution_arn == lease.execution_arn
    assert lease.slot == SLOT and lease.receive_count == 1
    assert flow.wait_for_execution(lease.execution_arn or "")["status"] == "SUCCEEDED"


def replace_client(store: Any, client: Any) -> Any:
    from longjobs.engine.lease import LeaseStore

    return LeaseStore(client, store.table_name, shards=store.shards, closed_ttl_s=store.closed_ttl_s)


def test_admission_slot_take_repeated_by_one_execution_holds_one_slot(flow: Flow) -> None:
    locks = flow.receiver.store.locks
    now = time.time()
    for _ in range(2):
        assert locks.take(SLOT, holder="m", execution_arn="arn:x", now=now, hold_until=now + 60)
    assert not locks.take(SLOT, holder="n", execution_arn="arn:y", now=now, hold_until=now + 60)
    held = slot(flow)
    assert held is not None and held.execution_arn == "arn:x"


def test_attempts_used_up_go_to_the_dlq_with_their_history(flow: Flow) -> None:
    message_id = flow.send_job("bad", LIMITED, seconds=1, fail=True)
    for attempt in (1, 2):
        assert flow.deliver(wait_s=5) == {message_id: Outcome.STARTED}
        assert flow.wait_for_execution(flow.lease(message_id).execution_arn or "")["status"] == "FAILED"
        freed = slot(flow)
        assert freed is not None and not freed.held, f"attempt {attempt} returned its slot"

    assert flow.deliver(wait_s=5) == {message_id: Outcome.REJECTED}

    (dead,) = flow.dlq_messages()
    attributes = {k: v["StringValue"] for k, v in dead["MessageAttributes"].items()}
    assert attributes["ErrorType"] == EXHAUSTED
    assert attributes["ErrorMessage"] == "WaitJobFailed: the wait job was asked to fail"
    history = json.loads(attributes["Attempts"])
    assert [(entry["attempt"], entry["outcome"]) for entry in history] == [(1, "RELEASED"), (2, "RELEASED")]
    assert all("asked to fail" in entry["error"] for entry in history)
    assert attributes["OriginalMessageId"] == message_id
    assert flow.lease(message_id).status is LeaseStatus.REJECTED
    assert queued(flow) == 0, "deleted from the jobs queue once the DLQ had it"


WAITING_URL = f"https://sqs.us-east-1.amazonaws.com/123456789012/jobs-waiting-{LIMITED}"


@contextmanager
def parking_flow() -> Iterator[tuple[Flow, str, str]]:
    """Limit 1 and a waiting queue, nothing known of durations yet: `first` runs, `second` waits in
    flight, so a third message is beyond what the horizon can start and is parked."""
    with running_flow(CATALOG, admission_horizon_s=60, waiting_queues=json.dumps({LIMITED: WAITING_URL})) as flow:
        assert flow.sqs.create_queue(QueueName=f"jobs-waiting-{LIMITED}")["QueueUrl"] == WAITING_URL
        first = flow.send_job("first", LIMITED, seconds=1)
        assert flow.deliver() == {first: Outcome.STARTED}
        second = flow.send_job("second", LIMITED, seconds=1)
        assert flow.deliver() == {second: Outcome.WAITING_FOR_SLOT}
        yield flow, first, second


def parked_copies(flow: Flow) -> list[dict[str, Any]]:
    """The copies in the waiting queue (received with a zero VT: they stay visible)."""
    return flow.sqs.receive_message(
        QueueUrl=WAITING_URL, MaxNumberOfMessages=10, MessageAttributeNames=["All"], VisibilityTimeout=0
    ).get("Messages", [])


def test_admission_backlog_beyond_the_horizon_is_parked_then_unparked_and_run_from_the_waiting_queue() -> None:
    """Limit 1, nothing known of durations yet: one message waits in flight, the next is parked (copied to
    the type's waiting queue, the original acknowledged). Each end admits the next in line; an admission
    pass unparks the copy, which then waits in flight there and runs from there, deleted there."""
    waiting_url = WAITING_URL
    with parking_flow() as (flow, first, second):
        third = flow.send_job("third", LIMITED, seconds=1)
        assert flow.deliver() == {third: Outcome.PARKED}, "beyond what the horizon can start: parked"
        assert queued(flow) == 2, "the parked original was acknowledged"
        [parked] = flow.sqs.receive_message(QueueUrl=waiting_url, MessageAttributeNames=["All"], VisibilityTimeout=0)[
            "Messages"
        ]
        assert json.loads(parked["MessageAttributes"]["LongJobsAdmission"]["StringValue"])["original"] == third

        assert flow.wait_for_execution(flow.lease(first).execution_arn or "")["status"] == "SUCCEEDED"
        report = admit(flow)
        assert (report.admitted, report.unparked) == (1, 1), "the second started in place, the third unparked"
        assert flow.lease(second).status is LeaseStatus.ACTIVE
        copy = flow.lease(parked["MessageId"])
        assert copy.status is LeaseStatus.WAITING and copy.queue_url == waiting_url and copy.job_id == "third"

        assert flow.wait_for_execution(flow.lease(second).execution_arn or "")["status"] == "SUCCEEDED"
        assert admit(flow).admitted == 1
        running = flow.lease(parked["MessageId"])
        assert running.status is LeaseStatus.ACTIVE and running.history == ()
        assert flow.wait_for_execution(running.execution_arn or "")["status"] == "SUCCEEDED"
        assert flow.lease(parked["MessageId"]).status is LeaseStatus.SUCCEEDED
        assert queued(flow, waiting_url) == 0, "deleted from the waiting queue by its workflow"


class SendsTwice:
    """SQS whose send to the waiting queue lands and then, its answer lost, is sent again (a retry by
    botocore or by a redelivery): two copies of one parked message."""

    def __init__(self, sqs: Any) -> None:
        self._sqs = sqs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def send_message(self, **kwargs: Any) -> Any:
        if kwargs["QueueUrl"] == WAITING_URL:
            self._sqs.send_message(**kwargs)
        return self._sqs.send_message(**kwargs)

    def send_message_batch(self, **kwargs: Any) -> Any:
        if kwargs["QueueUrl"] == WAITING_URL:
            self._sqs.send_message_batch(**kwargs)
        return self._sqs.send_message_batch(**kwargs)


class SendFailsOnce:
    """SQS whose first send to the waiting queue fails (a crash, a 5xx) after the PARKED marker is written."""

    def __init__(self, sqs: Any) -> None:
        self._sqs = sqs
        self.failed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def send_message(self, **kwargs: Any) -> Any:
        if kwargs["QueueUrl"] == WAITING_URL and not self.failed:
            self.failed = True
            raise ClientError({"Error": {"Code": "InternalError", "Message": "try again"}}, "SendMessage")
        return self._sqs.send_message(**kwargs)

    def send_message_batch(self, **kwargs: Any) -> Any:
        if kwargs["QueueUrl"] == WAITING_URL and not self.failed:
            self.failed = True
            raise ClientError({"Error": {"Code": "InternalError", "Message": "try again"}}, "SendMessageBatch")
        return self._sqs.send_message_batch(**kwargs)


def test_admission_parked_message_received_again_is_acknowledged_not_parked_twice() -> None:
    """Its deletion lost (or its batch handled twice), the original comes back: its PARKED marker names
    the copy already sent, so the redelivery is acknowledged and the waiting queue keeps one copy."""
    with parking_flow() as (flow, _, _):
        third = flow.send_job("third", LIMITED, seconds=1)
        [delivery] = flow.receive_batch()
        assert receive(flow.receiver, delivery) is Outcome.PARKED  # its deletion is lost: not deleted
        [copy] = parked_copies(flow)
        marker = flow.lease(third)
        assert (marker.status, marker.copy_id) == (LeaseStatus.PARKED, copy["MessageId"])
        flow.sqs.change_message_visibility(
            QueueUrl=flow.harness.queue_url, ReceiptHandle=delivery.receipt_handle, VisibilityTimeout=0
        )
        assert flow.deliver() == {third: Outcome.DUPLICATE}
        assert [m["MessageId"] for m in parked_copies(flow)] == [copy["MessageId"]], "one copy, not two"
        assert queued(flow) == 2, "the original is deleted from the jobs queue (`first` and `second` stay)"


def admit_first_in_line(flow: Flow, message_id: str, *, about_to_show: bool = False) -> str:
    """An admission pass with the type's slot free and `message_id`, waiting in flight on the jobs queue,
    first in line. It starts: admitted in place, or, when the pass finds it about to show again (less than
    `margin_s` of its delay left, `admit_line`: as on a machine that stalled before the pass, or with
    `about_to_show`, the pass run then in virtual time), on its redelivery, for which the pass keeps the
    slot. SQS shows it within that margin: here at once, and it is received as the event source mapping
    receives it (an admission pass lists only WAITING leases still hidden and receives only the waiting
    queues: nothing else here would receive it). Returns how it started: "in place" or "redelivered"."""
    lease = flow.lease(message_id)
    later_s = lease.visible_until - time.time() - margin_s(flow.receiver) / 2 if about_to_show else 0
    report = admit(flow, later_s=later_s)
    assert not report.failed, "the admission pass raised (logged: admission pass failed)"
    lease = flow.lease(message_id)
    if report.admitted:
        assert report.admitted == 1 and lease.status is LeaseStatus.ACTIVE
        how = "in place"
    else:
        assert lease.status is LeaseStatus.WAITING, "neither admitted nor waiting"
        kept = slot(flow)
        assert report.unparked == 0 and (kept is None or not kept.held), "its slot kept for its redelivery"
        flow.sqs.change_message_visibility(
            QueueUrl=flow.harness.queue_url, ReceiptHandle=lease.receipt_handle, VisibilityTimeout=0
        )
        assert flow.deliver() == {message_id: Outcome.STARTED}, "its redelivery takes the slot kept for it"
        how = "redelivered"
    lease = flow.lease(message_id)
    assert lease.status is LeaseStatus.ACTIVE and lease.slot == SLOT and lease.execution_arn
    return how


@pytest.mark.parametrize("about_to_show", [False, True], ids=["at-once", "about-to-show"])
def test_admission_twin_copies_of_a_parked_message_run_once(about_to_show: bool) -> None:
    """A send that landed unanswered and was sent again leaves two copies: the first unparked claims the
    run on the PARKED marker; the other is acknowledged and deleted, never started. The message waiting in
    flight ahead of them starts when `first` ends: in place, or on its redelivery when the pass finds it
    about to show again (`about_to_show`; without it, a stall before the pass may do the same); the twins
    wait behind it, and one of them runs after it."""
    with parking_flow() as (flow, first, second):
        flow.receiver = replace(flow.receiver, sqs=SendsTwice(flow.receiver.sqs))
        third = flow.send_job("third", LIMITED, seconds=1)
        assert flow.deliver() == {third: Outcome.PARKED}
        twins = [copy["MessageId"] for copy in parked_copies(flow)]
        assert len(twins) == 2
        assert flow.wait_for_execution(flow.lease(first).execution_arn or "")["status"] == "SUCCEEDED"
        how = admit_first_in_line(flow, second, about_to_show=about_to_show)
        assert how == "redelivered" or not about_to_show
        assert flow.wait_for_execution(flow.lease(second).execution_arn or "")["status"] == "SUCCEEDED"
        assert not admit(flow).failed
        leases = [flow.receiver.store.get(twin) for twin in twins]
        started = [lease for lease in leases if lease is not None]
        assert len(started) == 1 and started[0].status in (LeaseStatus.WAITING, LeaseStatus.ACTIVE)
        assert flow.lease(third).claimed_by == started[0].message_id
        assert queued(flow, WAITING_URL) == 1, "the twin was deleted, the claimed copy stays (in flight)"


def test_admission_send_failed_after_the_marker_sends_the_copy_on_redelivery() -> None:
    """The PARKED marker is written, then the send fails: the record is reported failed and the message
    comes back; the marker has no copy id, so the redelivery sends the copy (once) and is acknowledged."""
    with parking_flow() as (flow, _, _):
        failing = SendFailsOnce(flow.receiver.sqs)
        flow.receiver = replace(flow.receiver, sqs=failing)
        third = flow.send_job("third", LIMITED, seconds=1)
        [delivery] = flow.receive_batch()
        with pytest.raises(ClientError):
            receive(flow.receiver, delivery)
        marker = flow.lease(third)
        assert (marker.status, marker.copy_id, parked_copies(flow)) == (LeaseStatus.PARKED, None, [])
        flow.sqs.change_message_visibility(
            QueueUrl=flow.harness.queue_url, ReceiptHandle=delivery.receipt_handle, VisibilityTimeout=0
        )
        assert flow.deliver() == {third: Outcome.PARKED}
        [copy] = parked_copies(flow)
        assert flow.lease(third).copy_id == copy["MessageId"]
        assert json.loads(copy["MessageAttributes"]["LongJobsAdmission"]["StringValue"])["parked"] == third


def test_admission_a_batch_whose_copies_were_not_sent_leaves_their_records_to_come_back() -> None:
    """A batch's parked records send their copies together at its end: when that send fails, the records
    are not acknowledged (their markers have no copy), and the redelivery sends each copy once."""
    with parking_flow() as (flow, _, _):
        flow.receiver = replace(flow.receiver, sqs=SendFailsOnce(flow.receiver.sqs))
        third, fourth = (flow.send_job(name, LIMITED, seconds=1) for name in ("third", "fourth"))
        deliveries = flow.receive_batch()
        with receive_batch(flow.receiver, deliveries) as unsent:
            assert {receive(flow.receiver, delivery) for delivery in deliveries} == {Outcome.PARKED}
        assert unsent == {third, fourth}, "reported failed: not deleted, each comes back to its marker"
        assert parked_copies(flow) == []
        assert {flow.lease(third).copy_id, flow.lease(fourth).copy_id} == {None}
        for delivery in deliveries:
            flow.sqs.change_message_visibility(
                QueueUrl=flow.harness.queue_url, ReceiptHandle=delivery.receipt_handle, VisibilityTimeout=0
            )
        assert flow.deliver() == {third: Outcome.PARKED, fourth: Outcome.PARKED}
        copies = {copy["MessageId"] for copy in parked_copies(flow)}
        assert {flow.lease(third).copy_id, flow.lease(fourth).copy_id} == copies and len(copies) == 2
        assert queued(flow) == 2, "the two parked acknowledged now"


class AnsweredAfterLanding(JsonRESTError):
    """DynamoDB's 500: the write landed, its answer did not (moto raises it after applying the update)."""

    code = 500

    def __init__(self) -> None:
        super().__init__("InternalServerError", "answer lost after the write landed")


def lose_the_answer_of_the_close(monkeypatch: pytest.MonkeyPatch, status: LeaseStatus) -> list[str]:
    """The workflow's first update that closes a lease `status` lands, then answers a 500 (botocore's or
    the state's retry then finds its condition false). Returns the updates so answered."""
    answered: list[str] = []
    original = DynamoDBBackend.update_item

    def update_item(self: DynamoDBBackend, table_name: str, key: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        item = original(self, table_name, key, *args, **kwargs)
        values = kwargs.get("expression_attribute_values") or (args[2] if len(args) > 2 else {})
        if not answered and values.get(":status") == {"S": status.value}:
            answered.append(key[PARTITION_KEY]["S"])
            raise AnsweredAfterLanding()
        return item

    monkeypatch.setattr(DynamoDBBackend, "update_item", update_item)
    return answered


def states_entered(flow: Flow, arn: str) -> list[str]:
    events = flow.harness.stepfunctions.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    return [event["stateEnteredEventDetails"]["name"] for event in events if "stateEnteredEventDetails" in event]


def test_admission_mark_released_answered_500_after_it_landed_still_releases_lock_slot_and_message(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Protocol review, defect 6: the lease is RELEASED by this execution, so the re-read continues the
    failure path (lock, slot, the message's release delay) instead of ending as if another had it."""
    answered = lose_the_answer_of_the_close(monkeypatch, LeaseStatus.RELEASED)
    running, waiting = start_one_and_queue_one(flow, {"seconds": 1, "fail": True})
    arn = flow.lease(running).execution_arn or ""
    assert flow.wait_for_execution(arn)["status"] == "FAILED"
    assert answered == [running]
    entered = states_entered(flow, arn)
    assert entered.count("MarkReleased") == 1 and "ReleasedByThisExecution" in entered
    assert {"ReleaseJobLockOnFailure", "ReleaseSlotOnFailure", "ReleaseMessage"} <= set(entered)
    freed = slot(flow)
    assert freed is not None and not freed.held, "the slot is returned"
    lock = flow.receiver.store.locks.get(job_lock_key("first"))
    assert lock is None or not lock.held, "the job lock is returned"
    assert flow.lease(running).status is LeaseStatus.RELEASED
    assert_admitted_in_place(flow, admit(flow), waiting)


def test_admission_mark_succeeded_answered_500_after_it_landed_still_releases_lock_and_slot(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Protocol review, defect 6: the lease is SUCCEEDED by this execution, so the re-read deletes the
    message and releases the job lock and the slot instead of ending at once. The close and the releases'
    transaction is refused first (its refusal goes step by step), so the close answered is MarkSucceeded."""
    refused: list[str] = []
    original = DynamoDBBackend.transact_write_items

    def transact_write_items(self: DynamoDBBackend, items: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
        succeeded = {"S": LeaseStatus.SUCCEEDED.value}
        closes = [
            item
            for item in items
            if item.get("Update", {}).get("ExpressionAttributeValues", {}).get(":status") == succeeded
        ]
        if closes and not refused:  # the workflow's close and releases (not another message's lease write)
            refused.append("transaction")
            raise JsonRESTError("ThrottlingException", "Rate of requests exceeds the allowed throughput")
        return original(self, items, *args, **kwargs)

    monkeypatch.setattr(DynamoDBBackend, "transact_write_items", transact_write_items)
    answered = lose_the_answer_of_the_close(monkeypatch, LeaseStatus.SUCCEEDED)
    running, waiting = start_one_and_queue_one(flow, {"seconds": 1})
    arn = flow.lease(running).execution_arn or ""
    assert flow.wait_for_execution(arn)["status"] == "SUCCEEDED"
    assert refused and answered == [running]
    entered = states_entered(flow, arn)
    assert entered.count("MarkSucceeded") == 1 and "AlreadySettled" in entered
    assert {"DeleteMessage", "ReleaseJobLock", "ReleaseSlot"} <= set(entered[entered.index("AlreadySettled") :])
    freed = slot(flow)
    assert freed is not None and not freed.held, "the slot is returned"
    assert flow.lease(running).status is LeaseStatus.SUCCEEDED
    assert_admitted_in_place(flow, admit(flow), waiting)


def test_admission_new_arrival_takes_no_freed_slot_ahead_of_parked_messages() -> None:
    """docs/admission.md promises no newer arrival goes ahead of a parked message. With a slot free and
    no admission pass run yet, a new arrival's receive unparks the parked copy, which takes the slot;
    the arrival itself is parked behind it."""
    with parking_flow() as (flow, first, second):
        third = flow.send_job("third", LIMITED, seconds=1)
        assert flow.deliver() == {third: Outcome.PARKED}
        assert flow.wait_for_execution(flow.lease(first).execution_arn or "")["status"] == "SUCCEEDED"
        fourth = flow.send_job("fourth", LIMITED, seconds=1)
        assert flow.deliver() == {fourth: Outcome.PARKED}, "the freed slot went to `second`, waiting in flight"
        assert flow.lease(second).status is LeaseStatus.ACTIVE
        assert flow.wait_for_execution(flow.lease(second).execution_arn or "")["status"] == "SUCCEEDED"

        flow.receiver.state.views.clear()  # a later invocation: it reads the waiting queue's depth afresh
        fifth = flow.send_job("fifth", LIMITED, seconds=1)
        assert flow.deliver() == {fifth: Outcome.PARKED}, "behind the parked ones, not ahead"
        holder = slot(flow)
        assert holder is not None and holder.held
        running = flow.lease(holder.holder)
        assert running.job_id in ("third", "fourth") and running.queue_url == WAITING_URL


def test_admission_redelivery_racing_a_stalled_admitter_takes_and_frees_nothing(flow: Flow) -> None:
    """A stalled admitter of `second` wins: its lease write takes the job lock for attempt 1 (not started
    yet). A redelivery that read the WAITING lease before then takes that lock over as an attempt of the
    same message that never started, with its own lease write, in one transaction: the lease condition
    fails, so the lock stays the winner's and the loser has nothing to free (protocol review)."""
    _, second = start_one_and_queue_one(flow, {"seconds": 20})
    store = flow.receiver.store
    waiting = flow.lease(second)
    now = time.time()
    key = job_lock_key("second")
    admitted = execution_arn(STATE_MACHINE_ARN, execution_name(second, 1))
    active = replace(waiting, status=LeaseStatus.ACTIVE, execution_arn=admitted, renew_at=now + 60, attempt=1)
    assert store.take_holds(active, store.admit_request(waiting, active), [Hold(key)], now=now).written
    winners_lock = store.locks.get(key)
    assert winners_lock is not None and winners_lock.execution_arn == admitted

    redelivered = execution_arn(STATE_MACHINE_ARN, execution_name(second, 2))
    loser = replace(
        waiting,
        status=LeaseStatus.ACTIVE,
        execution_arn=redelivered,
        receive_count=2,
        renew_at=now + 60,
        version=successor_version(waiting),
    )
    taken = store.take_holds(
        loser, store.create_request(loser, replacing=waiting), [Hold(key, over=winners_lock)], now=now
    )

    assert not taken.written and taken.lost == {LEASE_KEY}
    lock = store.locks.get(key)
    assert lock is not None and lock.held, "not freed"
    assert (lock.execution_arn, lock.holder) == (admitted, second), "held for the winner's execution"
