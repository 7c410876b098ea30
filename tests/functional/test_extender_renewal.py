"""The extender against moto's SQS and DynamoDB: real messages, real conditional writes. That renewals keep
a running job's message hidden across timeouts, per policy, is the simulation's (tests/sim/test_scenarios.py,
on virtual time): here, what the calls do on moto."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from longjobs.engine import cancel
from longjobs.engine.extender.service import renew_due
from longjobs.engine.lease import LastError, Lease, LeaseStatus
from longjobs.engine.settings import Settings
from longjobs.sim.clock import FakeClock
from tests.functional.conftest import Harness

SHORT = {
    "adaptive": Settings(policy="adaptive", extender_period_s=0.2, adaptive_ceiling_s=2, min_remaining_life_s=0.5),
    "threshold": Settings(
        policy="threshold", visibility_timeout_s=3, threshold_s=1.5, heartbeat_s=0.25, extender_period_s=0.5
    ),
    "remaining": Settings(policy="remaining", visibility_timeout_s=3, heartbeat_s=0.25, extender_period_s=0.5),
}


def test_extender_marks_deleted_message_lost(harness: Harness) -> None:
    settings = SHORT["threshold"]
    harness.send()
    harness.send()
    deleted, kept = harness.receive_and_lease(settings, count=2)
    harness.sqs.delete_message(QueueUrl=harness.queue_url, ReceiptHandle=deleted.receipt_handle)
    clock = FakeClock(time.time() + 1.5)  # both due: within the 1.5 s threshold

    report = renew_due(harness.extender(settings, clock), deadline=clock.now() + 30)

    store = harness.store(settings)
    lost, renewed = store.get(deleted.message_id), store.get(kept.message_id)
    assert (report.lost, report.renewed) == (1, 1)
    assert lost is not None and lost.status is LeaseStatus.LOST and lost.renew_at is None
    assert lost.last_error is not None and "ReceiptHandleIsInvalid" in str(lost.last_error)
    assert renewed is not None and renewed.status is LeaseStatus.ACTIVE and renewed.renewal_count == 1
    assert store.index.due(None) == [renewed]


def test_extender_caps_lease_past_max_renewal_without_calling_sqs(harness: Harness) -> None:
    settings = Settings(policy="threshold", visibility_timeout_s=30, max_renewal_s=60, extender_period_s=1)
    harness.send()
    [lease] = harness.receive_and_lease(settings)
    clock = FakeClock(lease.received_at + 61)
    calls: list[str] = []
    harness.sqs.meta.events.register("before-call.sqs.*", lambda model, **_: calls.append(model.name))

    report = renew_due(harness.extender(settings, clock), deadline=clock.now() + 30)

    stored = harness.store(settings).get(lease.message_id)
    assert report.capped == 1 and calls == []
    assert stored is not None and stored.status is LeaseStatus.CAPPED
    assert stored.last_error == LastError("max renewal duration reached")


def test_extender_renewal_falls_due_again_by_the_leases_hard_stop(harness: Harness) -> None:
    """A renewal whose chunk outlasts the lease's `renew_until` (`max_renewal_s`) makes the lease due again
    at that hard stop, not a chunk later: the pass then caps it and stops its execution within a period,
    so a job runs no more than a period past its `max_renewal_s`."""
    settings = Settings(
        policy="threshold", visibility_timeout_s=30, threshold_s=10, max_renewal_s=40, extender_period_s=1
    )
    harness.send()
    [lease] = harness.receive_and_lease(settings)
    clock = FakeClock(lease.received_at + 25)  # due (5 s left of the first 30 s chunk), 15 s before the cap

    report = renew_due(harness.extender(settings, clock), deadline=clock.now() + 30)

    renewed = harness.store(settings).get(lease.message_id)
    assert report.renewed == 1 and renewed is not None and renewed.renew_at is not None
    assert renewed.visible_until == pytest.approx(clock.now() + 30, abs=1), "hidden for the whole chunk"
    assert renewed.renew_at <= renewed.renew_until, "due again at its hard stop, not at the chunk's end"


def test_extender_renewal_leaves_a_lease_due_by_its_hard_stop_until_that_stop(harness: Harness) -> None:
    """A lease due by its hard stop (`renew_at` = `renew_until`, as an adopted attempt's is) that its policy
    need not renew yet is left alone until the stop: not renewed, not stopped, so its job may still finish
    in those seconds. The pass after the stop caps it. A pass looks `horizon_s` ahead (adaptive: the pass
    budget, 15 s at a 60 s period), so it meets such a lease up to that long before its stop."""
    settings = Settings(policy="adaptive", extender_period_s=60)
    harness.send()
    now = time.time()
    [message] = harness.sqs.receive_message(
        QueueUrl=harness.queue_url, VisibilityTimeout=600, AttributeNames=["ApproximateReceiveCount"]
    )["Messages"]
    lease = Lease(
        message_id=message["MessageId"],
        queue_url=harness.queue_url,
        receipt_handle=message["ReceiptHandle"],
        receive_count=1,
        received_at=now,
        visible_until=now + 600,
        renew_until=now + 100,
        renew_at=now + 100,
    )
    store = harness.store(settings)
    assert store.create(lease)

    before = FakeClock(now + 95)  # due by its stop, 5 s ahead; 505 s of its chunk left
    report = renew_due(harness.extender(settings, before), deadline=before.now() + 30)

    kept = store.get(lease.message_id)
    assert (report.renewed, report.stopped) == (0, 0)
    assert kept is not None and kept.status is LeaseStatus.ACTIVE and kept.version == lease.version

    after = FakeClock(now + 101)
    renew_due(harness.extender(settings, after), deadline=after.now() + 30)

    capped = store.get(lease.message_id)
    assert capped is not None and capped.status is LeaseStatus.CAPPED


@pytest.mark.parametrize("cancelled", [False, True], ids=["running", "cancelled-kept-hidden"])
def test_extender_renewal_falls_due_again_when_its_policy_says(harness: Harness, cancelled: bool) -> None:
    """A running job's lease falls due again a threshold before its new chunk ends, not sooner: each renewal
    is a request and a write. A cancelled message kept hidden (its cancel cut short, and no DLQ here to
    finish it) is looked at again within `cancel.FINISH_RETRY_S` whatever chunk it got, so the cancel is
    tried again soon."""
    settings = Settings(policy="threshold", visibility_timeout_s=300, threshold_s=100, extender_period_s=1)
    harness.send()
    [lease] = harness.receive_and_lease(settings)
    clock = FakeClock(lease.received_at + 250)  # due: 50 s left of the first chunk
    if cancelled:
        store = harness.store(settings)
        mark = LastError("cancelled", "by an operator")
        assert cancel.mark_cancelled(store, lease, now=clock.now(), error=mark, record={}, due_at=clock.now())

    report = renew_due(harness.extender(settings, clock), deadline=clock.now() + 30)

    renewed = harness.store(settings).get(lease.message_id)
    assert report.renewed == 1 and renewed is not None and renewed.renew_at is not None
    expected = clock.now() + (cancel.FINISH_RETRY_S if cancelled else 300 - 100)
    assert renewed.renew_at == pytest.approx(expected, abs=1)


@pytest.mark.parametrize("same_handle", [True, False], ids=["its-own-receive", "a-newer-receive"])
def test_extender_renewal_conflict_reapplies_only_a_release_it_may_have_undone(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, same_handle: bool
) -> None:
    """A renewal SQS accepted loses its write to another writer. If that writer released the receive the
    renewal changed, the renewal may have hidden the message again, so the release is applied once more. A
    release of a newer receive is that receive's own: the renewal's older handle changed nothing of it, and
    applying it again would only ask SQS once more and give the message back later than it said."""
    settings = Settings(policy="threshold", visibility_timeout_s=300, threshold_s=100, extender_period_s=1)
    harness.send()
    [lease] = harness.receive_and_lease(settings, release_delay_s=30)
    clock = FakeClock(lease.received_at + 250)
    extender = harness.extender(settings, clock)
    handle = lease.receipt_handle if same_handle else "a-newer-receive's-handle"
    released = replace(lease, status=LeaseStatus.RELEASED, receipt_handle=handle, version=lease.version + 1)
    monkeypatch.setattr(extender.store.renewals, "record_many", lambda renewals: [None for _ in renewals])
    monkeypatch.setattr(extender.store, "get", lambda message_id: released)
    calls: list[str] = []
    harness.sqs.meta.events.register("provide-client-params.sqs.*", lambda model, **_: calls.append(model.name))

    report = renew_due(extender, deadline=clock.now() + 30)

    assert report.conflicts == 1
    assert calls == ["ChangeMessageVisibilityBatch", *(["ChangeMessageVisibility"] if same_handle else [])]
    assert report.releases_reasserted == (1 if same_handle else 0)


def test_extender_caps_lease_when_sqs_refuses_beyond_12_hours(harness: Harness) -> None:
    settings = SHORT["threshold"]
    harness.send()
    harness.send()
    capped, fine = harness.receive_and_lease(settings, count=2)
    # moto counts the 12 h from the send: date the first message's send back to just under 12 h ago.
    import moto.sqs.models as sqs_models

    backend_queue = sqs_models.sqs_backends["123456789012"]["us-east-1"].queues["jobs"]
    for message in backend_queue._messages:
        if message.id == capped.message_id:
            message.sent_timestamp = int(sqs_models.unix_time_millis() - 43_199_000)
    clock = FakeClock(time.time() + 1.5)

    report = renew_due(harness.extender(settings, clock), deadline=clock.now() + 30)

    store = harness.store(settings)
    capped_now, fine_now = store.get(capped.message_id), store.get(fine.message_id)
    assert (report.capped, report.renewed) == (1, 1)
    assert capped_now is not None and capped_now.status is LeaseStatus.CAPPED
    assert capped_now.last_error is not None and "beyond the limit" in str(capped_now.last_error)
    assert fine_now is not None and fine_now.status is LeaseStatus.ACTIVE


def test_overlapping_extender_runs_leave_every_lease_consistent(harness: Harness) -> None:
    settings = Settings(policy="threshold", visibility_timeout_s=30, threshold_s=5.0, extender_period_s=1)
    for _ in range(25):
        harness.send()
    leases = harness.receive_and_lease(settings, count=25)
    clock = FakeClock(time.time() + 26)  # every lease within the 5 s threshold
    # DynamoDB isolates conflicting transactions; moto's are not thread-safe, so serialize them here.
    transact, lock = harness.dynamodb.transact_write_items, threading.Lock()

    def isolated(**kwargs: Any) -> Any:
        with lock:
            return transact(**kwargs)

    harness.dynamodb.transact_write_items = isolated
    first, second = harness.extender(settings, clock), harness.extender(settings, clock)
    both_read = threading.Barrier(2)
    for ext in (first, second):  # make both runs read the same versions before either writes
        due = ext.store.index.due

        def due_then_wait(before: float | None = None, _due: Any = due, **kwargs: Any) -> Any:
            result = _due(before, **kwargs)
            both_read.wait(timeout=10)
            return result

        object.__setattr__(ext.store.index, "due", due_then_wait)
    reports: list[Any] = []
    threads = [
        threading.Thread(target=lambda e=ext: reports.append(renew_due(e, deadline=clock.now() + 30)))
        for ext in (first, second)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sum(r.renewed for r in reports) == 25 and sum(r.conflicts for r in reports) == 25
    policy = first.policy
    for lease in leases:
        stored = harness.store(settings).get(lease.message_id)
        assert stored is not None and stored.status is LeaseStatus.ACTIVE
        assert (stored.version, stored.renewal_count) == (1, 1)
        assert stored.renewed_at is not None
        assert stored.visible_until == pytest.approx(stored.renewed_at + 30, abs=0.002)
        assert stored.renew_at == pytest.approx(policy.renew_at(stored), abs=0.002)
        assert stored.receipt_handle == lease.receipt_handle
    assert harness.visible_messages() == []


class ThrottlingSqs:
    """The real (moto) client, but the first `failures` batch calls are throttled like real SQS does."""

    def __init__(self, sqs: Any, failures: int) -> None:
        self._sqs = sqs
        self.failures = failures
        self.batch_calls = 0

    def change_message_visibility_batch(self, **kwargs: Any) -> Any:
        self.batch_calls += 1
        if self.batch_calls <= self.failures:
            raise ClientError(
                {
                    "Error": {
                        "Code": "RequestThrottled",
                        "Message": "Rate exceeded",
                        "QueryErrorCode": "AWS.SimpleQueueService.RequestThrottled",
                    },
                    "ResponseMetadata": {"HTTPStatusCode": 400},
                },
                "ChangeMessageVisibilityBatch",
            )
        return self._sqs.change_message_visibility_batch(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)


def test_throttling_past_the_deadline_leaves_leases_due_for_the_next_tick(harness: Harness) -> None:
    settings = SHORT["threshold"]
    harness.send()
    harness.receive_and_lease(settings)
    [lease] = harness.store(settings).index.due(None)
    clock = FakeClock(time.time() + 1.5)
    throttling = ThrottlingSqs(harness.sqs, failures=1000)

    report = renew_due(harness.extender(settings, clock, sqs=throttling), deadline=clock.now() + 1.0)

    stored = harness.store(settings).get(lease.message_id)
    assert report.given_up == 1 and report.renewed == 0 and report.throttled >= 1
    assert stored == lease  # untouched: still ACTIVE and due
