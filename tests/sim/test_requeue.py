"""A message waiting for its job id runs once however often its copy is sent (`longjobs.engine.delivery.
copies`), on the simulated AWS and a fake clock: a send that lands twice (botocore retries a send whose
answer was lost), a receiver that dies between the send and the delete, a note of the copy that fails, a
redelivery after the job id is free, a cancel while the copy waits, and a message with no room for the
copy's attributes. Corpus seeds 24486, 22282 and 24337 are the same defect found by whole-world seeds."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest

from longjobs.engine.cancel import Canceller, cancel
from longjobs.engine.delivery.types import ADMISSION_ATTRIBUTE, Carried, Outcome
from longjobs.engine.lease import LeaseStatus, job_lock_key
from tests.sim.test_retention import STATE_MACHINE_ARN, Bench, bench

JOB = "J"


class SendLandsTwice:
    """SQS as the receiver sees it when a SendMessage landed but its answer was lost, and botocore's retry
    landed again: two messages, the second's answer returned. Every other call goes through."""

    def __init__(self, sqs: Any) -> None:
        self._sqs = sqs

    def send_message(self, **request: Any) -> Any:
        self._sqs.send_message(**request)
        return self._sqs.send_message(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)


def running_and_waiting(b: Bench) -> tuple[str, str]:
    """Message `first` of job J runs; `second`, of the same job id, is received while it runs."""
    first = b.send(JOB)
    assert b.deliver_jobs_queue() == {first: Outcome.STARTED}
    b.clock.advance(1)
    return first, b.send(JOB)


def waiting_with_twin_copies(b: Bench, *, delete: bool = True) -> tuple[str, str]:
    """`running_and_waiting`, the waiting message's copy sent twice (a retried send that had landed); with
    `delete` False its receiver dies before the delete."""
    first, second = running_and_waiting(b)
    b.receiver.sqs = SendLandsTwice(b.aws.sqs)  # type: ignore[assignment]
    assert b.deliver_jobs_queue(delete=delete) == {second: Outcome.WAITING}
    b.receiver.sqs = b.aws.sqs  # type: ignore[assignment]
    return first, second


def drain(b: Bench) -> dict[str, Outcome]:
    """Receive every message of the jobs queue until none is left, each one that starts finishing: the
    outcomes of the last receive of each."""
    outcomes: dict[str, Outcome] = {}
    deadline = b.clock.now() + 1_000
    while b.jobs_ids() and b.clock.now() < deadline:
        b.clock.advance(30)  # past any copy's delay and, in time, the queue's VT
        for message_id, outcome in b.deliver_jobs_queue().items():
            outcomes[message_id] = outcome
            if outcome is Outcome.STARTED:
                b.finish(message_id)
    assert b.jobs_ids() == [], "every message settled"
    return outcomes


def run_to_the_end(b: Bench, first: str) -> dict[str, Outcome]:
    """`first` succeeds, then the jobs queue is drained (`drain`)."""
    b.finish(first)
    return drain(b)


def test_requeue_a_send_that_lands_twice_runs_the_job_once() -> None:
    b = bench(limit=9, job_wait_base_s=10, job_wait_cap_s=20)
    first, second = waiting_with_twin_copies(b)
    twins = [message_id for message_id in b.jobs_ids() if message_id != first]
    assert len(twins) == 2 and second not in twins, "the retried send made two copies"

    outcomes = run_to_the_end(b, first)

    assert sorted(outcomes[twin] for twin in twins) == sorted([Outcome.STARTED, Outcome.DUPLICATE])
    assert len(b.executions_of(JOB)) == 2, "job J ran for each of its two messages, and only so"
    marker = b.receiver.store.get(second)
    assert marker is not None and marker.status is LeaseStatus.REQUEUED and marker.claimed_by in twins


def test_requeue_a_receiver_that_dies_before_the_delete_sends_no_second_copy() -> None:
    b = bench(limit=9, job_wait_base_s=10, job_wait_cap_s=20)
    first, second = running_and_waiting(b)
    assert b.deliver_jobs_queue(delete=False) == {second: Outcome.WAITING}
    marker = b.receiver.store.get(second)
    assert marker is not None and marker.status is LeaseStatus.REQUEUED and marker.copy_id is not None

    b.clock.advance(185)  # the queue's VT: the original shows again, and so does its copy
    outcomes = b.deliver_jobs_queue()
    assert outcomes[second] is Outcome.DUPLICATE, "its marker names a copy: acknowledged, nothing sent"
    outcomes.update(run_to_the_end(b, first))
    assert list(outcomes.values()).count(Outcome.STARTED) == 1, outcomes
    assert len(b.executions_of(JOB)) == 2


def test_requeue_a_lost_note_and_a_redelivery_after_the_job_id_is_free_still_run_once() -> None:
    """The copy's id never reached the marker (its note failed) and the original is delivered again once
    the first job is done: it may not run itself (a copy exists), it sends the copy again, and of the two
    copies the first to claim the marker runs."""
    b = bench(limit=9, job_wait_base_s=400, job_wait_cap_s=800)  # a copy shows 200 to 400 s after its send
    first, second = running_and_waiting(b)
    b.receiver.store.markers.note_copy = lambda *args, **kwargs: False  # type: ignore[method-assign]
    assert b.deliver_jobs_queue(delete=False) == {second: Outcome.WAITING}
    del b.receiver.store.markers.note_copy
    b.finish(first)  # the job id is free now

    b.clock.advance(185)  # the original shows again, before its copy
    assert b.deliver_jobs_queue() == {second: Outcome.WAITING}, "sent again, not started"
    assert len(b.executions_of(JOB)) == 1, "nothing new started"
    outcomes = drain(b)
    assert sorted(outcomes.values()) == sorted([Outcome.STARTED, Outcome.DUPLICATE]), outcomes
    assert len(b.executions_of(JOB)) == 2


def test_requeue_a_send_refused_comes_back_to_its_marker_and_sends_once() -> None:
    b = bench(limit=9, job_wait_base_s=10, job_wait_cap_s=20)
    first, second = running_and_waiting(b)
    b.receiver.sqs = _SendRefused(b.aws.sqs)  # type: ignore[assignment]
    try:
        b.deliver_jobs_queue()
    except RuntimeError:
        pass
    else:
        raise AssertionError("the refused send fails the record")
    b.receiver.sqs = b.aws.sqs  # type: ignore[assignment]
    marker = b.receiver.store.get(second)
    assert marker is not None and marker.status is LeaseStatus.REQUEUED and marker.copy_id is None
    assert b.jobs_ids() == sorted([first, second]), "no copy yet: the original stays, hidden for the queue's VT"

    b.clock.advance(200)
    assert b.deliver_jobs_queue()[second] is Outcome.WAITING, "its copy is sent now"
    outcomes = run_to_the_end(b, first)
    assert list(outcomes.values()) == [Outcome.STARTED]
    assert len(b.executions_of(JOB)) == 2


def test_requeue_a_copy_redriven_from_the_dlq_takes_over_the_run_of_its_claimant() -> None:
    """A review's finding: a copy that claimed its marker, then went to the DLQ through SQS's redrive (every
    receive failed for a while: a broken deploy), comes back from an operator's DLQ redrive as a new
    message with the same attributes. Its claim is refused (the old id holds it); it must not be
    acknowledged as a twin, or the message is gone unrun: once the old claim is over (Lambda's longest
    timeout, no lease), it takes the run over."""
    b = bench(limit=9, job_wait_base_s=10, job_wait_cap_s=20, queue_retention_s=86_400)
    second, dead = claimant_in_the_dlq(b)
    marker = b.receiver.store.get(second)
    assert marker is not None and marker.claimed_by is not None and b.jobs_ids() == []
    redriven = redrive(b, dead)

    assert b.deliver_jobs_queue() == {redriven: Outcome.STALE}, "the old claim may still be under way: later"
    b.clock.advance(900)
    assert b.deliver_jobs_queue() == {redriven: Outcome.STARTED}, "the old claim is over: the run is taken over"
    b.finish(redriven)
    assert len(b.executions_of(JOB)) == 2 and b.jobs_ids() == []


def claimant_in_the_dlq(b: Bench) -> tuple[str, dict[str, Any]]:
    """Job J's second message waits; the first succeeds; the copy claims its marker, then every attempt of
    it fails (a broken deploy) until SQS's redrive moves it to the DLQ. The waiting message's id, and the
    copy as the DLQ holds it (taken out, to be sent back as a redrive would)."""
    jobs, dlq = b.aws.sqs.queues[b.jobs_url], b.aws.sqs.queues[b.dlq_url]
    jobs.redrive = (dlq, 3)
    first, second = running_and_waiting(b)
    assert b.deliver_jobs_queue() == {second: Outcome.WAITING}
    b.finish(first)
    store = b.receiver.store
    store.create_request = _refused  # type: ignore[method-assign]
    for _ in range(4):
        b.clock.advance(200)
        with contextlib.suppress(RuntimeError):  # the record is reported failed: SQS counts the receive
            b.deliver_jobs_queue()
    del store.create_request
    [dead] = b.aws.sqs.receive_message(QueueUrl=b.dlq_url, MessageAttributeNames=["All"])["Messages"]
    b.aws.sqs.delete_message(QueueUrl=b.dlq_url, ReceiptHandle=dead["ReceiptHandle"])
    return second, dead


def redrive(b: Bench, dead: dict[str, Any]) -> str:
    """A DLQ redrive: the message again, as a new message with the same body and attributes."""
    sent = b.aws.sqs.send_message(
        QueueUrl=b.jobs_url, MessageBody=dead["Body"], MessageAttributes=dead["MessageAttributes"]
    )
    return str(sent["MessageId"])


def test_requeue_a_cancel_of_a_message_whose_claimant_copy_is_in_the_dlq_refuses_its_redrive() -> None:
    """A review's finding: the cancel followed the claim to a copy with no lease and asked to try again,
    for ever; a redrive of that copy then took the run over and ran the cancelled job."""
    b = bench(limit=9, job_wait_base_s=10, job_wait_cap_s=20, queue_retention_s=86_400)
    second, dead = claimant_in_the_dlq(b)
    canceller = Canceller(b.receiver.store, b.aws.sqs, b.aws.stepfunctions, b.dlq_url, b.clock)  # type: ignore[arg-type]
    b.clock.advance(900)

    assert cancel(canceller, second, "not needed").outcome.value == "cancelled"
    redriven = redrive(b, dead)

    assert b.deliver_jobs_queue() == {redriven: Outcome.CANCELLED}
    [again] = b.aws.sqs.receive_message(QueueUrl=b.dlq_url, MessageAttributeNames=["All"])["Messages"]
    assert again["MessageAttributes"]["ErrorType"]["StringValue"] == "Cancelled"
    assert len(b.executions_of(JOB)) == 1, "the cancelled job never ran"


def test_requeue_a_copy_redriven_past_the_tables_memory_of_its_claimant_goes_to_the_dlq_unrun() -> None:
    """A review's finding: a claimant's closed lease is kept `closed_ttl_s` (7 days), its marker longer; a
    twin (or a redriven copy) received after DynamoDB's TTL deleted the claimant's lease took the run over,
    though the claimant had run the job. Past that memory the copy goes to the DLQ, with the reason."""
    b = bench(limit=9, job_wait_base_s=10, job_wait_cap_s=20, queue_retention_s=14 * 86_400)
    first, second = waiting_with_twin_copies(b)
    b.finish(first)
    twin_a, twin_b = b.jobs_ids()
    b.clock.advance(30)  # past the copies' delay
    [twin] = [
        m
        for m in b.aws.sqs.receive_message(
            QueueUrl=b.jobs_url, MessageAttributeNames=["All"], MaxNumberOfMessages=10, VisibilityTimeout=1
        )["Messages"]
        if m["MessageId"] == twin_b
    ]
    b.aws.sqs.delete_message(QueueUrl=b.jobs_url, ReceiptHandle=twin["ReceiptHandle"])  # to the DLQ, say
    b.clock.advance(2)
    assert b.deliver_jobs_queue() == {twin_a: Outcome.STARTED}
    b.finish(twin_a)

    b.clock.advance(b.settings.closed_ttl_s + 60)
    _expire(b)  # DynamoDB's TTL: twin a's closed lease is gone, the marker is kept longer
    assert b.receiver.store.get(twin_a) is None and b.receiver.store.get(second) is not None

    assert b.deliver_jobs_queue() == {} and b.deliver_jobs_queue() == {}
    redriven = redrive(b, twin)
    assert b.deliver_jobs_queue() == {redriven: Outcome.REJECTED}
    [dead] = b.aws.sqs.receive_message(QueueUrl=b.dlq_url, MessageAttributeNames=["All"])["Messages"]
    assert dead["MessageAttributes"]["ErrorType"]["StringValue"] == "ClaimUnknown"
    assert len(b.executions_of(JOB)) == 2, "each of the two messages ran once"


def _expire(b: Bench) -> None:
    """What DynamoDB's TTL does, at once: every item whose TTL is past is deleted."""
    from longjobs.engine.lease.schema import TTL_ATTR

    items = b.aws.dynamodb.items
    for key in [key for key, item in items.items() if TTL_ATTR in item and float(item[TTL_ATTR]["N"]) < b.clock.now()]:
        del items[key]


def test_requeue_a_twin_of_a_claimant_without_a_lease_yet_comes_back_then_is_acknowledged() -> None:
    b = bench(limit=9, job_wait_base_s=10, job_wait_cap_s=20)
    first, second = waiting_with_twin_copies(b)
    b.finish(first)
    twin_a, twin_b = b.jobs_ids()
    assert b.receiver.store.markers.claim_requeued(second, twin_a, now=b.clock.now()), "twin a claims; its receive dies"

    b.clock.advance(30)
    outcomes = b.deliver_jobs_queue()
    assert outcomes[twin_b] is Outcome.STALE, "twin a may still be taking the run: twin b comes back later"
    if outcomes.get(twin_a) is Outcome.STARTED:
        b.finish(twin_a)
    assert drain(b)[twin_b] is Outcome.DUPLICATE
    assert len(b.executions_of(JOB)) == 2


def test_requeue_a_cancelled_waiting_message_goes_to_the_dlq_from_its_copy_and_never_runs() -> None:
    b = bench(limit=9, job_wait_base_s=10, job_wait_cap_s=20)
    first, second = running_and_waiting(b)
    assert b.deliver_jobs_queue() == {second: Outcome.WAITING}
    canceller = Canceller(b.receiver.store, b.aws.sqs, b.aws.stepfunctions, b.dlq_url, b.clock)  # type: ignore[arg-type]
    report = cancel(canceller, second, "not needed")
    assert any("requeued: its copy waits on its queue" in note for note in report.notes), report.notes

    outcomes = run_to_the_end(b, first)

    assert list(outcomes.values()) == [Outcome.CANCELLED]
    assert len(b.executions_of(JOB)) == 1, "the cancelled message never ran"
    [dead] = b.aws.sqs.receive_message(QueueUrl=b.dlq_url, MessageAttributeNames=["All"])["Messages"]
    assert dead["MessageAttributes"]["ErrorType"]["StringValue"] == "Cancelled"


def test_requeue_a_cancelled_message_whose_copy_was_sent_twice_goes_to_the_dlq_once() -> None:
    """A review's finding: each carrier of a cancelled message (twin copies, a redelivered original) sent
    it to the DLQ, since nothing noted the first DLQ copy."""
    b = bench(limit=9, job_wait_base_s=10, job_wait_cap_s=20)
    first, second = waiting_with_twin_copies(b, delete=False)
    canceller = Canceller(b.receiver.store, b.aws.sqs, b.aws.stepfunctions, b.dlq_url, b.clock)  # type: ignore[arg-type]
    cancel(canceller, second, "not needed")

    outcomes = run_to_the_end(b, first)

    assert set(outcomes.values()) <= {Outcome.CANCELLED, Outcome.DUPLICATE} and len(outcomes) == 3, outcomes
    dead = b.aws.sqs.receive_message(QueueUrl=b.dlq_url, MaxNumberOfMessages=10)["Messages"]
    assert len(dead) == 1, "one cancelled message, one DLQ copy"
    assert len(b.executions_of(JOB)) == 1


def test_requeue_a_copy_carries_the_failed_attempts_of_its_message() -> None:
    b = bench(limit=9, job_wait_base_s=10, job_wait_cap_s=20)
    failed = b.send(JOB)
    assert b.deliver_jobs_queue() == {failed: Outcome.STARTED}
    b.end_execution(failed, "FAILED")
    lease = b.receiver.store.get(failed)
    assert lease is not None
    from longjobs.engine.settle import release_holds

    release_holds(lease, store=b.receiver.store, clock=b.clock)
    assert b.receiver.store.close(lease, LeaseStatus.RELEASED, now=b.clock.now()) is not None
    b.aws.sqs.change_message_visibility(QueueUrl=b.jobs_url, ReceiptHandle=lease.receipt_handle, VisibilityTimeout=0)
    other = b.send(JOB)
    b.clock.advance(1)
    outcomes = b.deliver_jobs_queue()  # one of the two takes the job id, the other waits for it
    waited = next(message_id for message_id, outcome in outcomes.items() if outcome is Outcome.WAITING)
    marker = b.receiver.store.get(waited)
    assert marker is not None
    [copy] = [m for m in b.jobs_ids() if m not in (failed, other)]
    message = b.aws.sqs.queues[b.jobs_url].messages[copy]
    carried = Carried.decode(message.attributes[ADMISSION_ATTRIBUTE]["StringValue"])
    assert carried.requeued_from == waited and carried.history == marker.history
    assert len(carried.history) == (1 if waited == failed else 0), "the failed attempt goes on with its message"


def test_requeue_a_parked_copy_with_nine_attributes_of_its_own_is_requeued() -> None:
    """A review's finding: a parked copy (parking leaves room for one attribute) that finds its job id
    running must be requeued like any other message, not held in its waiting queue, where nothing would
    send it afresh before the waiting queue's retention."""
    b = bench(limit=1, job_wait_base_s=10, job_wait_cap_s=20)
    first = b.send("a")
    assert b.deliver_jobs_queue() == {first: Outcome.STARTED}
    b.clock.advance(1)
    filler = b.send("f")
    assert b.deliver_jobs_queue() == {filler: Outcome.WAITING_FOR_SLOT}
    other = b.send(JOB)  # job J parks: the type is full
    parked = _send_with_attributes(b, 9)
    assert b.deliver_jobs_queue() == {other: Outcome.PARKED, parked: Outcome.PARKED}
    b.aws.stepfunctions.start_execution(stateMachineArn=STATE_MACHINE_ARN, name="holder-J", input="{}")
    running = f"{STATE_MACHINE_ARN.replace(':stateMachine:', ':execution:')}:holder-J"
    assert b.receiver.store.locks.take(
        job_lock_key(JOB), holder="holder", execution_arn=running, now=b.clock.now(), hold_until=b.clock.now() + 9e3
    )
    b.clock.advance(10)

    outcomes = b.unpark_all()

    assert sorted(outcomes.values()) == [Outcome.WAITING, Outcome.WAITING], "both requeued to the jobs queue"
    assert b.waiting_ids() == []


def test_requeue_a_message_with_ten_attributes_of_its_own_waits_in_place() -> None:
    b = bench(limit=9, job_wait_base_s=10, job_wait_cap_s=20)
    first = b.send(JOB)
    assert b.deliver_jobs_queue() == {first: Outcome.STARTED}
    second = _send_with_attributes(b, 10)

    assert b.deliver_jobs_queue() == {second: Outcome.HELD}
    assert b.receiver.store.get(second) is None, "no marker: no copy was made"
    assert b.jobs_ids() == sorted([first, second]), "it waits hidden on its queue, its receive not acknowledged"


@pytest.mark.parametrize(
    ("what", "overrides"),
    [
        ("its receives", {"admission_horizon_s": 600}),  # a redrive count of 41: spent before the retention
        ("its retention", {}),  # a redrive count of 55: the retention's margin (900 s) comes first
    ],
)
def test_requeue_a_message_held_in_place_until_spent_goes_to_the_dlq_with_its_reason(
    what: str, overrides: dict[str, Any]
) -> None:
    """A review's finding: each wait in place is a receive, so a job id held long enough would take the
    message to the DLQ through SQS's redrive (no reason), or past its retention (lost)."""
    b = bench(limit=9, job_wait_base_s=10, job_wait_cap_s=20, **overrides)
    jobs, dlq = b.aws.sqs.queues[b.jobs_url], b.aws.sqs.queues[b.dlq_url]
    jobs.redrive = (dlq, b.settings.redrive_receives)
    first = b.send(JOB)
    assert b.deliver_jobs_queue() == {first: Outcome.STARTED}
    lease = b.receiver.store.get(first)
    assert lease is not None  # its execution runs on, holding the job id; its message is out of the way
    b.aws.sqs.delete_message(QueueUrl=b.jobs_url, ReceiptHandle=lease.receipt_handle)
    _send_with_attributes(b, 10)  # the only message on the queue now
    outcomes: list[Outcome] = []
    while not outcomes or outcomes[-1] is Outcome.HELD:
        b.clock.advance(20)
        outcomes += b.deliver_jobs_queue().values()

    assert outcomes[-1] is Outcome.REJECTED, f"{what}: {outcomes[-3:]}"
    last_receive = b.settings.redrive_receives - 1
    assert (len(outcomes) == last_receive) is (what == "its receives"), (what, len(outcomes), last_receive)
    [dead] = b.aws.sqs.receive_message(QueueUrl=b.dlq_url, MessageAttributeNames=["All"])["Messages"]
    assert dead["MessageAttributes"]["ErrorType"]["StringValue"] == "JobIdBusy"
    assert "waited in place for its job id 'J'" in dead["MessageAttributes"]["ErrorMessage"]["StringValue"]


def _send_with_attributes(b: Bench, count: int) -> str:
    own = {f"A{i}": {"DataType": "String", "StringValue": str(i)} for i in range(count)}
    body = json.dumps({"job_id": JOB, "type": "wait", "params": {"seconds": 60}})
    return str(b.aws.sqs.send_message(QueueUrl=b.jobs_url, MessageBody=body, MessageAttributes=own)["MessageId"])


def _refused(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("PutItem: AccessDeniedException")


class _SendRefused:
    def __init__(self, sqs: Any) -> None:
        self._sqs = sqs

    def send_message(self, **request: Any) -> Any:
        raise RuntimeError("SendMessage: InternalError (500)")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)
