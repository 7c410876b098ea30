"""What a receive costs in requests (the backfill benchmark's figure, `benchmarks/backfill.py`), on the
simulated AWS: a receive reads its lease and its job lock in one request, and a batch of arrivals for a
full type reads the type's slots once."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from longjobs.engine.admission.admit import AdmitReport, extender_pass, publish, watcher_pass
from longjobs.engine.admission.readings import VIEW_TTL_S
from longjobs.engine.admission.slots import slot_key
from longjobs.engine.lease import job_lock_key
from longjobs.engine.observability import MetricName
from longjobs.engine.receiver.service import receive
from longjobs.engine.receiver.types import Outcome
from tests.sim.test_retention import Bench, bench, parked_behind_a_full_type


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


def test_requests_the_watchers_admission_pass_asks_no_queue_depth_and_admits_as_the_extenders() -> None:
    """The watcher's pass is not published: it receives from the waiting queue without asking its depth
    first (an empty answer costs the same request) and counts nothing again after unparking; on the same
    state it admits and unparks what the extender's measured pass does."""
    reports = []
    for make_pass in (watcher_pass, extender_pass):
        b, first, _, _ = parked_behind_a_full_type()
        running = b.receiver.store.get(first)
        assert running is not None and running.slot is not None
        assert b.receiver.store.locks.release(running.slot, running.execution_arn or "", now=b.clock.now())
        depth_asked = b.aws.calls["sqs.GetQueueAttributes"]
        argument: Any = "wait" if make_pass is watcher_pass else math.inf
        (report,) = make_pass(b.receiver, handle=receive)(argument)
        reports.append((report, b.aws.calls["sqs.GetQueueAttributes"] - depth_asked))

    (watched, watcher_asked), (extended, extender_asked) = reports
    assert (watcher_asked, extender_asked) == (0, 1)
    assert (watched.parked, watched.drain_s) == (None, None), "not read, so not reported"
    assert extended.parked == 1 and extended.drain_s is not None
    assert (watched.admitted, watched.unparked) == (extended.admitted, extended.unparked)


def test_requests_an_unmeasured_report_publishes_no_parked_count() -> None:
    published: list[str] = []

    class Sink:
        def add_type_metric(self, *, name: str, unit: str, value: float, job_type: str) -> None:
            published.append(name)

    publish(Sink(), [AdmitReport("wait", parked=None)])
    assert MetricName.PARKED_MESSAGES not in published and MetricName.WAITING_MESSAGES in published
