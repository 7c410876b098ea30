"""Retention (docs/admission.md, "Retention: nothing that waits is lost"), as an adversarial review of its
first version (5eb4298) broke it: five ways, each shown here and failing on that version, each fixed.

Each test is either a small scenario run by the whole simulation (`run_scenario`), or the engine's own
functions (`receive`, `refresh_parked`) driven step by step on the fake AWS and a fake clock (`Bench`),
so the interleaving is exact."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from longjobs.engine.admission.parking import refresh_parked, waiting_delivery
from longjobs.engine.delivery.types import Delivery, Outcome, Receiver, sent_at
from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog
from longjobs.engine.lease import LastError, LeaseStatus, LeaseStore, table_definition
from longjobs.engine.policies import build_policy
from longjobs.engine.receiver.batch import receive_batch
from longjobs.engine.receiver.service import receive
from longjobs.engine.settings import Settings, SettingsError
from longjobs.engine.settle import release
from longjobs.engine.visibility import VisibilityClient
from longjobs.offline.scenario import parse_scenario
from longjobs.sim.aws import FakeAws
from longjobs.sim.clock import FakeClock
from longjobs.sim.scenario import ScenarioRun, run_scenario
from tests.short_settings import SHORT_THRESHOLD

START = 1_700_000_000.0
TABLE = "leases"
STATE_MACHINE_ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:long-jobs"
RETENTION_S = 1_200  # margin 300 s (a quarter), a copy is sent again 900 s after its send
KEEP_S = 900


# -- a bench: the engine's functions on the fake AWS, one step at a time -----------------------------------


@dataclass
class Bench:
    clock: FakeClock
    aws: FakeAws
    settings: Settings
    receiver: Receiver
    jobs_url: str
    waiting_url: str
    dlq_url: str
    started: list[str] = field(default_factory=list)  # execution names, in start order

    def send(self, job_id: str, job_type: str = "wait", seconds: int = 60) -> str:
        body = json.dumps({"job_id": job_id, "type": job_type, "params": {"seconds": seconds}})
        return str(self.aws.sqs.send_message(QueueUrl=self.jobs_url, MessageBody=body)["MessageId"])

    def _received(self, queue_url: str) -> list[dict[str, Any]]:
        got = self.aws.sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        return list(got.get("Messages", []))

    def deliver_jobs_queue(self, *, delete: bool = True) -> dict[str, Outcome]:
        """What the event source mapping does: receive the visible messages, hand each to `receive`,
        delete those done (not with `delete` False: the receiver's container died before)."""
        outcomes = {}
        deliveries = [self._delivery(message) for message in self._received(self.jobs_url)]
        with receive_batch(self.receiver, deliveries) as unsent:
            for delivery in deliveries:
                outcomes[delivery.message_id] = receive(self.receiver, delivery)
        for delivery in deliveries:
            if delete and not outcomes[delivery.message_id].deferred and delivery.message_id not in unsent:
                self.aws.sqs.delete_message(QueueUrl=self.jobs_url, ReceiptHandle=delivery.receipt_handle)
        return outcomes

    def _delivery(self, message: dict[str, Any]) -> Delivery:
        """A message of the jobs queue as the event source mapping hands it to the receiver."""
        return Delivery(
            message_id=message["MessageId"],
            receipt_handle=message["ReceiptHandle"],
            body=message["Body"],
            receive_count=int(message["Attributes"]["ApproximateReceiveCount"]),
            source_arn="arn:aws:sqs:us-east-1:123456789012:jobs",
            message_attributes={
                name: {k: v for k, v in value.items() if k in ("DataType", "StringValue", "BinaryValue")}
                for name, value in message.get("MessageAttributes", {}).items()
            },
            sent_at=sent_at(message["Attributes"].get("SentTimestamp")),
        )

    def unpark_all(self) -> dict[str, Outcome]:
        """What `unpark` does, for every visible copy of the waiting queue."""
        outcomes = {}
        for message in self._received(self.waiting_url):
            delivery = waiting_delivery(message, self.waiting_url)
            outcome = receive(self.receiver, delivery)
            outcomes[message["MessageId"]] = outcome
            if not outcome.deferred:
                self.aws.sqs.delete_message(QueueUrl=self.waiting_url, ReceiptHandle=message["ReceiptHandle"])
        return outcomes

    def waiting_ids(self) -> list[str]:
        queue = self.aws.sqs.queues[self.waiting_url]
        queue.refresh()
        return sorted(m.message_id for m in queue.messages.values() if not m.deleted)

    def jobs_ids(self) -> list[str]:
        queue = self.aws.sqs.queues[self.jobs_url]
        queue.refresh()
        return sorted(m.message_id for m in queue.messages.values() if not m.deleted)

    def executions_of(self, job_id: str) -> list[str]:
        return [
            e.name
            for e in self.aws.stepfunctions.executions.values()
            if (e.input.get("job") or {}).get("job_id") == job_id
        ]

    def end_execution(self, name_part: str, status: str = "SUCCEEDED") -> None:
        for execution in self.aws.stepfunctions.executions.values():
            if name_part in execution.name and execution.status == "RUNNING":
                self.aws.stepfunctions.end(execution, status)

    def hold_job_lock(self, job_id: str) -> str:
        """Another message of `job_id` runs now (its execution holds the job id's lock): its ARN."""
        from longjobs.engine.lease.lock import job_lock_key

        other = self.aws.stepfunctions.start_execution(
            stateMachineArn=STATE_MACHINE_ARN, name=f"other-{job_id}", input="{}"
        )
        arn = str(other["executionArn"])
        taken = self.receiver.store.locks.take(
            job_lock_key(job_id), holder="other", execution_arn=arn, now=self.clock.now(), hold_until=START + 9e3
        )
        assert taken
        return arn

    def advance_to(self, t: float) -> None:
        self.clock.advance(t - self.clock.now())

    def finish(self, message_id: str) -> None:
        """What the workflow's success path does for the attempt of `message_id`: the execution ends,
        its job lock and slot are freed, the lease closes SUCCEEDED and the message is deleted."""
        from longjobs.engine.settle import release_holds

        lease = self.receiver.store.get(message_id)
        assert lease is not None and lease.active and lease.execution_arn, lease
        execution = self.aws.stepfunctions.executions[lease.execution_arn]
        self.aws.stepfunctions.end(execution, "SUCCEEDED")
        release_holds(lease, store=self.receiver.store, clock=self.clock)
        assert self.receiver.store.close(lease, LeaseStatus.SUCCEEDED, now=self.clock.now()) is not None
        self.aws.sqs.delete_message(QueueUrl=lease.queue_url, ReceiptHandle=lease.receipt_handle)


def bench(limit: int = 1, **overrides: Any) -> Bench:
    clock = FakeClock(START)
    aws = FakeAws(clock, random.Random(7), table=table_definition(TABLE), state_machine_arn=STATE_MACHINE_ARN)
    values = {
        **SHORT_THRESHOLD,
        "max_attempts": 3,
        "admission_wait_base_s": 2,
        "admission_horizon_s": 60,
        "max_renewal_s": 300,
        "queue_retention_s": RETENTION_S,
        **overrides,
    }
    dlq = aws.sqs.create_queue("jobs-dlq", visibility_timeout_s=30)
    jobs = aws.sqs.create_queue("jobs", visibility_timeout_s=180, retention_s=values["queue_retention_s"])
    waiting = aws.sqs.create_queue(
        "jobs-waiting-wait", visibility_timeout_s=180, retention_s=values["queue_retention_s"]
    )
    settings = Settings.load(
        {
            "table_name": TABLE,
            "queue_url": jobs.url,
            "dlq_url": dlq.url,
            "state_machine_arn": STATE_MACHINE_ARN,
            "waiting_queues": json.dumps({"wait": waiting.url}),
            **values,
        }
    )
    catalog = JobCatalog(BUILTIN_TYPES).with_limits({"wait": limit})
    receiver = Receiver(
        settings=settings,
        policy=build_policy(settings),
        store=LeaseStore(aws.dynamodb, TABLE, shards=settings.shards, closed_ttl_s=settings.closed_ttl_s),
        sqs=aws.sqs,  # type: ignore[arg-type]
        visibility=VisibilityClient(aws.sqs, clock=clock),  # type: ignore[arg-type]
        stepfunctions=aws.stepfunctions,  # type: ignore[arg-type]
        clock=clock,
        rng=random.Random(3),
        catalog=catalog,
    )
    return Bench(clock, aws, settings, receiver, jobs.url, waiting.url, dlq.url)


def parked_behind_a_full_type() -> tuple[Bench, str, str, str]:
    """A type limited to one: `a` runs, `f` waits in flight, `X` is parked (its copy in the waiting queue).
    Returns the bench and the three message ids."""
    b = bench(limit=1)
    first, filler = full_with_one_waiting_in_flight(b)
    original = b.send("X")
    assert b.deliver_jobs_queue() == {original: Outcome.PARKED}
    return b, first, filler, original


def full_with_one_waiting_in_flight(b: Bench) -> tuple[str, str]:
    """The type's one slot taken (`a`) and one message waiting in flight (`f`): the next ones are parked."""
    first = b.send("a")
    assert b.deliver_jobs_queue() == {first: Outcome.STARTED}
    b.clock.advance(1)
    filler = b.send("f")
    assert b.deliver_jobs_queue() == {filler: Outcome.WAITING_FOR_SLOT}
    b.clock.advance(1)
    return first, filler


# -- (1) a claimant with no lease is not always a receive that crashed ------------------------------------


def test_claimant_sent_back_to_wait_for_its_job_id_is_not_parked_again_and_run_twice() -> None:
    """Found by the review (now a REQUEUED claimant leaves the parked line): a parked copy that claims its
    marker and then finds its job id running (another message of the job holds the job lock) is sent back
    to the jobs queue as a delayed copy (`copies.wait_for_job`) and acknowledged (it then wrote no lease;
    now its REQUEUED marker). That copy later runs the job. Once the claimant's send is `resend_at` old,
    `refresh_parked` found the marker claimed by a copy with no lease, took it for a receive that crashed
    before its lease (`_park_claimant`: `claimant is None` past the grace) and parked it in place: a fresh
    copy that claimed its own marker and ran the job a second time. One message, two runs."""
    from longjobs.engine.lease.lock import job_lock_key

    b, first, filler, original = parked_behind_a_full_type()
    [copy] = b.waiting_ids()

    other = b.hold_job_lock("X")
    b.clock.advance(10)
    assert b.unpark_all() == {copy: Outcome.WAITING}, "the copy claimed the run, then was sent back to wait for X"
    marker = b.receiver.store.get(original)
    claimant = b.receiver.store.get(copy)
    assert marker is not None and marker.claimed_by == copy
    assert claimant is not None and claimant.status is LeaseStatus.REQUEUED, "its own marker names its copy"
    [sent_back] = [m for m in b.jobs_ids() if m not in (first, filler)]

    # The other message of X ends; the copy sent back runs job X (its one run), and everything settles.
    b.aws.stepfunctions.end(b.aws.stepfunctions.executions[other], "SUCCEEDED")
    b.receiver.store.locks.release(job_lock_key("X"), other, now=b.clock.now())
    b.finish(first)
    while b.jobs_ids() and b.clock.now() < START + 800:
        for message_id, outcome in b.deliver_jobs_queue().items():
            if outcome is Outcome.STARTED:
                b.finish(message_id)
        b.clock.advance(5)
    assert b.jobs_ids() == [] and b.waiting_ids() == []
    assert [name.rsplit("-", 1)[0] for name in b.executions_of("X")] == [sent_back], "job X ran once, as sent back"

    # The marker falls due (its claimant's send, `resend_at` ago): nothing of this message is left to run.
    b.advance_to(START + 2 + KEEP_S + 1)
    resent = refresh_parked(b.receiver, "wait")
    revived = b.waiting_ids()
    for message_id, outcome in b.unpark_all().items():
        if outcome is Outcome.STARTED:
            b.finish(message_id)

    assert (resent, revived) == (0, []), "a claimant that left for the jobs queue was parked again"
    assert len(b.executions_of("X")) == 1, f"job X of one message ran {len(b.executions_of('X'))} times"


def test_claimant_whose_receive_died_before_its_lease_is_parked_afresh_and_runs_once() -> None:
    """Found by a review: an admission pass received a parked copy, which claimed its marker, and died
    before the copy's lease. While its type stays full nothing receives the copy again; when the marker
    fell due, a claimant with no lease left the line, and SQS deleted the copy at its retention: never
    run, not in the DLQ. Now a claimant whose receives are over with no lease is parked in place."""
    b, first, _filler, original = parked_behind_a_full_type()
    [copy] = b.waiting_ids()
    b.aws.sqs.receive_message(QueueUrl=b.waiting_url)  # the pass that received it died after its claim
    assert b.receiver.store.markers.claim_parked(original, copy, sent_at=START + 2, now=b.clock.now())

    b.clock.advance(60)
    assert refresh_parked(b.receiver, "wait") == 0, "its receive may still be under way: looked at later"
    b.advance_to(START + 2 + KEEP_S + 1)  # the type is still full: no pass received the copy again
    assert refresh_parked(b.receiver, "wait") == 1, "parked afresh: a copy of its own"
    claimant = b.receiver.store.get(copy)
    assert claimant is not None and claimant.status is LeaseStatus.PARKED and claimant.copy_id is not None
    b.advance_to(START + 2 + RETENTION_S + 5)  # SQS deletes the old copy (it is gone or acknowledged)

    b.finish(first)  # the type frees: the fresh copy is unparked and runs (the filler, in flight, too)
    deadline = b.clock.now() + 3_600
    while (b.waiting_ids() or b.jobs_ids()) and b.clock.now() < deadline:
        for message_id, outcome in {**b.unpark_all(), **b.deliver_jobs_queue()}.items():
            if outcome is Outcome.STARTED:
                b.finish(message_id)
        b.clock.advance(30)
    assert b.waiting_ids() == [] and b.jobs_ids() == []
    assert len(b.executions_of("X")) == 1, "job X ran once, from its fresh copy"


def _dead_claimant(b: Bench, original: str) -> str:
    """The parked copy is received by a pass that claims its marker and dies before its lease; the marker
    falls due with the claim 901 s old. The copy's id (the first, when the copy has a twin)."""
    copy = b.waiting_ids()[0]
    b.aws.sqs.receive_message(QueueUrl=b.waiting_url, MaxNumberOfMessages=10)
    assert b.receiver.store.markers.claim_parked(original, copy, sent_at=START + 2, now=b.clock.now())
    b.advance_to(START + 2 + KEEP_S + 1)
    return copy


def _run_out(b: Bench, first: str) -> list[str]:
    """The type frees; every copy left is received, each start finishing: the executions of job X."""
    b.finish(first)
    deadline = b.clock.now() + 3 * 3_600
    while (b.waiting_ids() or b.jobs_ids()) and b.clock.now() < deadline:
        refresh_parked(b.receiver, "wait")
        for message_id, outcome in {**b.unpark_all(), **b.deliver_jobs_queue()}.items():
            if outcome is Outcome.STARTED:
                b.finish(message_id)
        b.clock.advance(30)
    return b.executions_of("X")


def test_claimant_parked_in_place_races_a_twin_that_takes_the_run_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a review: between `_park_claimant`'s read of the marker and its write of the claimant's own
    marker, a twin copy took the run over; both the twin and the claimant's fresh copy ran. The claimant
    is now claimed again first, conditional on the marker as read (a fence)."""
    from longjobs.engine.admission import parking
    from longjobs.engine.delivery import copies

    b, first, _filler, original = parked_behind_a_full_type()
    marker = b.receiver.store.get(original)
    assert marker is not None
    copies.send_parked(b.receiver, b.waiting_url, marker)  # a twin: a send retried after it landed
    copy = _dead_claimant(b, original)
    [twin] = [m for m in b.waiting_ids() if m != copy]
    judged = parking.claimant_state

    def twin_meanwhile(receiver: Receiver, read: Any) -> str:
        state = judged(receiver, read)
        monkeypatch.setattr(parking, "claimant_state", judged)
        for message in b._received(b.waiting_url):  # another pass receives the twin now
            if message["MessageId"] == twin:
                assert receive(b.receiver, waiting_delivery(message, b.waiting_url)) is Outcome.PARKED
        return state

    monkeypatch.setattr(parking, "claimant_state", twin_meanwhile)
    assert refresh_parked(b.receiver, "wait") == 0, "the fence failed: nothing parked in place"
    assert len(_run_out(b, first)) == 1


def test_claimant_parked_in_place_races_a_cancel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a review: a cancel that marked the marker itself CANCELLED (its claimant has no lease)
    while `_park_claimant` parked the claimant in place: the cancelled job ran from the fresh copy."""
    from longjobs.engine.admission import parking
    from longjobs.engine.cancel import Canceller, cancel

    b, first, _filler, original = parked_behind_a_full_type()
    _dead_claimant(b, original)
    canceller = Canceller(b.receiver.store, b.aws.sqs, b.aws.stepfunctions, b.dlq_url, b.clock)  # type: ignore[arg-type]
    judged = parking.claimant_state

    def cancel_meanwhile(receiver: Receiver, read: Any) -> str:
        state = judged(receiver, read)
        monkeypatch.setattr(parking, "claimant_state", judged)
        assert cancel(canceller, original, "not wanted").outcome.value == "cancelled"
        return state

    monkeypatch.setattr(parking, "claimant_state", cancel_meanwhile)
    refresh_parked(b.receiver, "wait")
    assert _run_out(b, first) == [], "the cancelled job never runs"


def test_claimant_of_a_marker_claimed_before_claims_recorded_their_lease_window_leaves_the_line() -> None:
    """Upgrade (a review): code before this one sent a claimant back to the jobs queue with no lease, and
    that copy runs the job; its claim records no `claim_kept_until`, so the claimant is not parked again."""
    b, _first, _filler, original = parked_behind_a_full_type()
    copy = _dead_claimant(b, original)
    del b.aws.dynamodb.items[original]["claim_kept_until"]  # a claim written by the code before
    assert refresh_parked(b.receiver, "wait") == 0
    assert b.receiver.store.get(copy) is None, "not parked in place"
    assert b.receiver.store.markers.parked_due("wait", sent_before=None, limit=10) == [], "out of the line"


# -- what starts near `resend_at` is not sent again ---------------------------------------------------------


def _limited_wait(limit: int = 1) -> dict[str, Any]:
    wait = next(t for t in BUILTIN_TYPES if t.name == "wait")
    return {**wait.model_dump(mode="json", exclude_none=True, exclude={"description"}), "max_concurrency": limit}


def _run(settings: dict[str, Any], jobs: list[dict[str, Any]], *, seed: int | None = None) -> ScenarioRun:
    scenario = {"settings": {**SHORT_THRESHOLD, **settings}, "jobs": jobs, "job_types": [_limited_wait()]}
    if seed is not None:
        scenario["seed"] = seed
    return run_scenario(parse_scenario(scenario))


def test_settings_refuse_a_retention_margin_shorter_than_one_hold() -> None:
    """Found by the review: `Settings` checked that `queue_retention_s - retention_margin_s >= max_renewal_s` ("a
    job could outlive
    its message"), but a message may start any time before `resend_at` (a slot frees then, or it is
    admitted in place) and then be held `max_renewal_s`: what protects it is the margin, and the check lets
    the margin be a quarter of the retention, shorter than one hold (600 s kept, 150 s margin, 300 s
    holds: the settings of `_retention_backlog`). Four 220 s jobs on a type limited to one: the third starts
    about 440 s after its send, before its `resend_at` (450 s), and SQS deletes its message 600 s after
    the send while the job runs; its execution is aborted and the job is neither done nor in the DLQ."""
    settings = {
        "max_attempts": 3,
        "admission_wait_base_s": 2,
        "admission_horizon_s": 6 * 3_600,
        "max_renewal_s": 300,
        "queue_retention_s": 600,
    }
    with pytest.raises(SettingsError, match="smallest queue_retention_s: 1200"):
        Settings.load(settings)
    # Within the margin a hold (and each 140 s job) ends before its message is deleted.
    run = _run({**settings, "max_renewal_s": 150}, [{"id": f"j{i}", "type": "wait", "seconds": 140} for i in range(4)])

    assert run.result.coverage["sqs:expired"] == 0, "a message was deleted by SQS while its job ran"
    assert run.result.violation is None
    assert all(job.executions == ["SUCCEEDED"] for job in run.jobs.values()), {
        name: job.executions for name, job in run.jobs.items()
    }


def test_retries_of_a_message_near_resend_at_are_parked_afresh_and_end_in_the_dlq_with_their_attempts() -> None:
    """Found by the review (now each new attempt of an aged message is parked afresh, or started only
    when a whole hold fits, or dead-lettered): only a message that finds its type full was looked at
    against `resend_at` (`wait_or_park`'s `aged`).
    A message admitted just before `resend_at` whose attempt fails is released and received again, and each
    retry starts at once when a slot is free, aged or not: nothing sends it afresh, so SQS deletes it
    during a later attempt. Here every hold (120 s) is shorter than the margin (300 s of a 1,200 s
    retention), so the single-hold check is not what fails: a flaky job waits 840 s behind a blocker,
    then fails three times in a row; the fourth attempt is cut by the retention. With the defaults the
    same happens to a message that waited about 12 days and then fails: five attempts of up to 12 h
    each do not fit in the 2-day margin. It should reach the DLQ with its attempts, not vanish."""
    settings = {
        "max_attempts": 4,
        "admission_wait_base_s": 2,
        "admission_horizon_s": 6 * 3_600,
        "max_renewal_s": 300,  # the margin covers a whole hold, as the settings now require
        "queue_retention_s": RETENTION_S,
    }
    run = _run(
        settings,
        [
            *({"id": f"blocker{i}", "type": "wait", "seconds": 280} for i in range(3)),
            {"id": "flaky", "type": "wait", "seconds": 120, "fail": True},
        ],
    )

    flaky = run.jobs["flaky"]
    assert run.result.violation is None, run.result.violation
    assert flaky.final == "dlq" and "ABORTED" not in flaky.executions, flaky


# -- (4) a cancelled parked message ------------------------------------------------------------------------


def test_cancelled_parked_message_reaches_the_dlq_even_when_its_copy_outlives_the_retention() -> None:
    """Found by the review (now the cancel sends the marker's message to the DLQ at once): `longjobs cancel` of an
    unclaimed parked message marks its marker CANCELLED, which takes it out of the
    parked line (`mark_cancelled` removes `waiting_type`), and leaves the DLQ copy to the receiver "when
    admission receives" the copy. The marker now holds the message, but the cancel does not send it, and
    the marker is no longer refreshed: with the type full longer than the retention (the backlog this
    change is meant to carry) SQS deletes the copy unreceived, and the cancelled message never reaches
    the DLQ: gone without a trace, what `RetentionRunningOut` exists to prevent."""
    from longjobs.engine.cancel import Canceller, cancel

    b, _, _, original = parked_behind_a_full_type()
    canceller = Canceller(
        store=b.receiver.store,
        sqs=b.aws.sqs,  # type: ignore[arg-type]
        stepfunctions=b.aws.stepfunctions,  # type: ignore[arg-type]
        dlq_url=b.dlq_url,
        clock=b.clock,
    )
    report = cancel(canceller, original, "not wanted any more")
    assert report.outcome.value == "cancelled"
    assert b.waiting_ids(), "its copy waits in the waiting queue"

    # The type stays full (the blocker runs on, as a backlog would): admission never unparks the copy.
    for moment in (KEEP_S + 10, RETENTION_S + 10):
        b.advance_to(START + moment)
        refresh_parked(b.receiver, "wait")
    dlq = b.aws.sqs.queues[b.dlq_url]
    dlq.refresh()
    in_dlq = [m for m in dlq.messages.values() if not m.deleted]
    assert b.waiting_ids() or in_dlq, "the cancelled message is neither in its waiting queue nor in the DLQ"


# -- a 5xx after `park_in_place` took effect --------------------------------------------------------------


class AnswerLost:
    """A DynamoDB client whose `put_item` of one key takes effect, loses its answer and is retried once,
    as botocore's standard retry mode does after a 5xx or a timeout."""

    def __init__(self, client: Any, key: str) -> None:
        self._client, self._key, self.hit = client, key, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def put_item(self, **request: Any) -> Any:
        if request["Item"]["pk"]["S"] == self._key and not self.hit:
            self.hit += 1
            self._client.put_item(**request)  # took effect; its answer is lost: the client sends it again
        return self._client.put_item(**request)


def test_park_claimant_whose_marker_write_landed_unanswered_sends_its_copy() -> None:
    """Found by the review (now the marker is read back, as `write_attempt` does): `_park_claimant` writes the
    claimant's marker (`park_in_place`, conditional on the claimant's lease as
    read) and then sends the fresh copy. When the write takes effect but its answer is lost, the client's
    retry fails its condition (the lease is the new marker now), `park_in_place` answers False, read as "the
    claimant was received, admitted or closed meanwhile", and no copy is sent. The next pass finds the
    claimant PARKED and takes the old marker out of the line; the new marker joined the line at now, so it
    is due a whole `resend_at` later. Meanwhile the claimant's own message (hidden at most until its
    `resend_at`, then visible in a waiting queue nothing unparks while the type is full) is deleted by SQS
    a margin later: for `retention - 2 * margin` (10 days with the defaults) no copy of the job exists,
    and the job is alive only in a marker. `park`/`write_attempt` read the lease back after such an error
    (`same_write`); `_park_claimant` does not."""
    b, _, _, _ = parked_behind_a_full_type()
    [copy] = b.waiting_ids()
    b.clock.advance(1)
    assert b.unpark_all() == {copy: Outcome.WAITING_FOR_SLOT}, "the claimant waits in flight in its waiting queue"
    claimant_sent = START + 2

    lost = AnswerLost(b.receiver.store.client, copy)
    b.receiver.store.client = lost
    b.advance_to(claimant_sent + KEEP_S + 1)
    refresh_parked(b.receiver, "wait")
    assert lost.hit == 1, "the claimant was parked in place, its answer lost"
    marker = b.receiver.store.get(copy)
    assert marker is not None and marker.status is LeaseStatus.PARKED

    # Admission passes go on every 30 s while the type stays full, until the claimant's message is gone.
    while b.clock.now() < claimant_sent + RETENTION_S + 1:
        b.clock.advance(30)
        refresh_parked(b.receiver, "wait")
    alive = [message_id for message_id in b.waiting_ids() if message_id != copy]
    assert alive, "no copy of the job exists: the claimant's message expired and its fresh copy was never sent"


def test_retention_an_attempt_failing_as_its_hold_ends_shows_its_message_before_sqs_deletes_it() -> None:
    """The smallest retention the settings allow keeps a margin of one hold (1,200 s kept, holds of 300 s). A
    message received a second before its `resend_at` starts, and its hold ends a second before SQS deletes
    it. Its job fails 10 s before that: a release delay of 24 s (up to `release_delay_cap_s`) would show it
    after the deletion, neither run nor in the DLQ. The attempt's delay is cut to show it `RELEASE_SLACK_S`
    before the deletion, or at once; its next receive finds it aged and parks it afresh (a limited type)."""
    b = bench(limit=5, release_delay_base_s=30)
    message_id = b.send("late")
    b.advance_to(START + 899)  # its resend_at is START + 900: not aged, so it starts
    assert b.deliver_jobs_queue() == {message_id: Outcome.STARTED}
    lease = b.receiver.store.get(message_id)
    assert lease is not None and lease.renew_until <= START + RETENTION_S, "a whole hold fits before the retention"
    assert lease.release_delay_s == 0, "no room after its hold: shown at once when it fails"
    b.aws.sqs.change_message_visibility(QueueUrl=b.jobs_url, ReceiptHandle=lease.receipt_handle, VisibilityTimeout=290)

    b.advance_to(START + 1_190)  # the job fails; the workflow's failure path releases it with its delay
    b.end_execution(message_id, "FAILED")
    assert release(
        lease, store=b.receiver.store, visibility=b.receiver.visibility, clock=b.clock, reason=LastError("x")
    )
    outcomes: dict[str, Outcome] = {}
    while b.clock.now() < START + RETENTION_S and message_id not in outcomes:
        b.clock.advance(5)
        outcomes |= b.deliver_jobs_queue()

    assert outcomes == {message_id: Outcome.PARKED}, f"not received before SQS deleted it: {outcomes}"
    assert len(b.waiting_ids()) == 1, "its fresh copy waits in the type's waiting queue"


def test_retention_an_attempt_admitted_in_place_failing_as_its_hold_ends_shows_its_message_in_time() -> None:
    """The same retention window as the test above, reached the other way a new attempt begins: an admission
    pass admits a WAITING message in place (`admit_in_place`), a few seconds before its `resend_at`. Its job
    fails just before its hold ends. The WAITING lease keeps the message's send time, so the attempt's
    release delay is cut as a receive's is: the message shows again before SQS deletes it."""
    from longjobs.engine.admission.admit import admit_line
    from longjobs.engine.admission.readings import read_slots

    b = bench(limit=1, release_delay_base_s=30)
    late = b.send("late")  # sent at START: resend_at START + 900, deleted by SQS at START + 1,200
    got = b.aws.sqs.receive_message(QueueUrl=b.jobs_url, MaxNumberOfMessages=1, VisibilityTimeout=600)
    assert got["Messages"][0]["MessageId"] == late  # (kept out of the way: its type's one slot is free now)
    b.advance_to(START + 599)
    first = b.send("first")
    assert b.deliver_jobs_queue() == {first: Outcome.STARTED}  # takes the slot; its hold ends at START + 899
    waiting = None
    while b.clock.now() < START + 897:
        b.clock.advance(1)
        b.deliver_jobs_queue()
        waiting = b.receiver.store.get(late)
        hidden_s = waiting.visible_until - b.clock.now() if waiting is not None and waiting.waiting else 0.0
        if hidden_s >= 3 and b.clock.now() >= START + 895:  # admissible in place (hidden past its margin)
            break
    assert waiting is not None and waiting.waiting, waiting
    assert waiting.visible_until <= START + 900, "never hidden past its resend_at"

    b.finish(first)  # the slot frees; an admission pass (the watcher's, the extender's) admits `late` in place
    _, admitted = admit_line(b.receiver, "wait", read_slots(b.receiver, "wait", 1))
    assert admitted == 1
    lease = b.receiver.store.get(late)
    assert lease is not None and lease.active and lease.renew_until <= START + RETENTION_S
    room = START + RETENTION_S - lease.renew_until
    delay = lease.release_delay_s

    hold_s = int(lease.renew_until - b.clock.now()) - 1  # what the extender's renewals keep hidden
    b.aws.sqs.change_message_visibility(
        QueueUrl=b.jobs_url, ReceiptHandle=lease.receipt_handle, VisibilityTimeout=hold_s
    )
    b.advance_to(lease.renew_until - 2)  # its job fails as its hold ends; the failure path releases it
    b.end_execution(late, "FAILED")
    assert release(
        lease, store=b.receiver.store, visibility=b.receiver.visibility, clock=b.clock, reason=LastError("x")
    )
    outcomes: dict[str, Outcome] = {}
    while b.clock.now() < START + RETENTION_S + 60 and late not in outcomes:
        b.clock.advance(1)
        outcomes |= b.deliver_jobs_queue()
    dlq = b.aws.sqs.queues[b.dlq_url]
    dlq.refresh()
    assert outcomes.get(late) is not None or b.waiting_ids() or [m for m in dlq.messages.values() if not m.deleted], (
        f"admitted in place with a release delay of {delay} s though its hold ended {room:.0f} s before SQS "
        f"deleted the message: never received again, not parked, not in the DLQ (jobs queue {b.jobs_ids()})"
    )
