"""The lease store on moto's DynamoDB: fencing, versions, the sparse due-index and closing."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from longjobs.engine.lease import Hold, LastError, Lease, LeaseStatus, LeaseStore, Renewal, hold_keys, successor_version
from longjobs.engine.settings import Settings
from tests.functional.conftest import Harness

NOW = 1_800_000_000.0


def lease(message_id: str = "m-1", **overrides: object) -> Lease:
    base = Lease(
        message_id=message_id,
        queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/jobs",
        receipt_handle="handle-1",
        receive_count=1,
        received_at=NOW,
        visible_until=NOW + 301,
        renew_until=NOW + 43_140,
        renew_at=NOW + 120.5,
        execution_arn="arn:aws:states:us-east-1:123456789012:execution:jobs:m-1-1",
        job_type="spark",
        release_delay_s=30,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


@pytest.fixture
def store(harness: Harness) -> LeaseStore:
    return harness.store(Settings(shards=4))


def test_lease_store_round_trips_every_field(store: LeaseStore) -> None:
    original = lease()
    assert store.create(original)
    assert store.get("m-1") == original
    assert store.get("missing") is None


def test_lease_store_create_refuses_a_second_lease_for_the_message(store: LeaseStore) -> None:
    assert store.create(lease())
    assert not store.create(lease(receipt_handle="handle-2", receive_count=2))
    stored = store.get("m-1")
    assert stored is not None and stored.receipt_handle == "handle-1"


def test_lease_store_refuses_an_active_lease_without_renew_at(store: LeaseStore) -> None:
    with pytest.raises(ValueError, match="needs renew_at"):
        store.create(lease(renew_at=None))


def test_lease_store_refresh_is_fenced_by_receive_count(store: LeaseStore) -> None:
    current = lease()
    store.create(current)
    newer = lease(
        receipt_handle="handle-3", receive_count=3, received_at=NOW + 50, visible_until=NOW + 351, renew_at=NOW + 170.5
    )
    refreshed = store.refresh_handle(current, newer)
    assert refreshed is not None and refreshed.version == 1 and refreshed.receipt_handle == "handle-3"
    assert store.get("m-1") == refreshed
    # an older receive (count 2) arriving late never overwrites the newer one, even at the current version
    older = lease(receipt_handle="handle-2", receive_count=2)
    assert store.refresh_handle(refreshed, older) is None
    # nor does a write based on a stale version
    assert store.refresh_handle(current, lease(receipt_handle="handle-4", receive_count=4)) is None
    stored = store.get("m-1")
    assert stored is not None and stored.receipt_handle == "handle-3"


def test_lease_store_renewal_is_fenced_by_version(store: LeaseStore) -> None:
    current = lease()
    store.create(current)
    first = store.renewals.record(Renewal(current, sent_at=NOW + 121, visibility_timeout_s=301, renew_at=NOW + 241.5))
    assert first is not None and (first.version, first.renewal_count) == (1, 1)
    assert first.visible_until == NOW + 422
    assert store.renewals.record(Renewal(current, sent_at=NOW + 122, visibility_timeout_s=301, renew_at=NOW)) is None
    assert store.get("m-1") == first


def test_lease_store_records_renewals_in_transactions_fenced_by_version(store: LeaseStore) -> None:
    leases = [lease(f"m-{i}") for i in range(130)]  # two transactions: 100, 30 (the most one may hold is 100)
    for item in leases:
        store.create(item)
    stale = {5, 99, 129}
    for i in stale:  # another writer renewed these first
        assert store.renewals.record(Renewal(leases[i], sent_at=NOW + 100, visibility_timeout_s=300, renew_at=NOW))

    results = store.renewals.record_many(
        [Renewal(item, sent_at=NOW + 121, visibility_timeout_s=301, renew_at=NOW + 241.5) for item in leases]
    )

    assert [i for i, result in enumerate(results) if result is None] == sorted(stale)
    for i, result in enumerate(results):
        stored = store.get(f"m-{i}")
        assert stored is not None
        if i in stale:
            assert stored.visible_until == NOW + 400 and stored.version == 1  # the other writer's renewal stands
        else:
            assert stored == result and stored.visible_until == NOW + 422 and stored.version == 1


def test_lease_store_due_queries_every_shard_soonest_first(store: LeaseStore) -> None:
    ids = [f"m-{i}" for i in range(40)]
    for i, message_id in enumerate(ids):
        store.create(lease(message_id, renew_at=NOW + i))
    assert {store.shard_of(m) for m in ids} == {0, 1, 2, 3}
    due = store.index.due(before=NOW + 9.5)
    assert [d.message_id for d in due] == ids[:10]
    assert len(store.index.due(None)) == 40


def test_lease_store_close_leaves_the_index_and_sets_ttl(store: LeaseStore, harness: Harness) -> None:
    current = lease()
    store.create(current)
    closed = store.close(current, LeaseStatus.SUCCEEDED, now=NOW + 600, result={"rows_out": 10, "ratio": 0.5})
    assert closed is not None and closed.status is LeaseStatus.SUCCEEDED and closed.renew_at is None
    assert store.index.due(None) == []
    assert store.get("m-1") == closed
    item = harness.dynamodb.get_item(TableName="leases", Key={"pk": {"S": "m-1"}})["Item"]
    assert "shard" not in item and "renew_at" not in item
    assert int(item["expires_at"]["N"]) == int(NOW + 600) + Settings().closed_ttl_s
    # a closed lease is closed for good: neither renewed nor closed again
    assert store.renewals.record(Renewal(closed, sent_at=NOW, visibility_timeout_s=30, renew_at=NOW)) is None
    assert store.renewals.record_many([Renewal(closed, sent_at=NOW, visibility_timeout_s=30, renew_at=NOW)]) == [None]
    assert store.close(closed, LeaseStatus.RELEASED, now=NOW) is None


def test_lease_store_close_takes_only_closed_statuses(store: LeaseStore) -> None:
    with pytest.raises(ValueError, match="closed status"):
        store.close(lease(), LeaseStatus.ACTIVE, now=NOW)


HELD_LEASE = {"job_id": "job-1", "slot": "slot#spark#0"}


def held(store: LeaseStore, current: Lease) -> dict[str, bool]:
    """Whether each of the lease's holds (job lock, slot) is held, by key."""
    states = {key: store.locks.get(key) for key in hold_keys(current)}
    return {key: lock is not None and lock.held for key, lock in states.items()}


def with_holds(store: LeaseStore, **overrides: object) -> Lease:
    """A lease created with its execution's job lock and slot, taken in one transaction."""
    current = lease(**{**HELD_LEASE, **overrides})
    holds = [Hold(key) for key in hold_keys(current)]
    assert store.take_holds(current, store.create_request(current), holds, now=NOW).written
    return current


def count_requests(client: Any) -> Counter[str]:
    """The client's requests by operation, counted from here on (botocore's `before-call` event)."""
    calls: Counter[str] = Counter()
    client.meta.events.register("before-call.dynamodb", lambda model, **_: calls.update([model.name]))
    return calls


def test_lease_store_close_frees_its_executions_holds_in_the_same_transaction(
    store: LeaseStore, harness: Harness
) -> None:
    current = with_holds(store)
    assert held(store, current) == {"job#job-1": True, "slot#spark#0": True}
    calls = count_requests(harness.dynamodb)

    closed = store.close(current, LeaseStatus.RELEASED, now=NOW + 60)

    assert closed is not None and closed.status is LeaseStatus.RELEASED
    assert dict(calls) == {"TransactWriteItems": 1}, "no crash can fall between the close and a release"
    assert held(store, current) == {"job#job-1": False, "slot#spark#0": False}


def test_lease_store_close_leaves_a_hold_another_execution_took_and_still_closes(store: LeaseStore) -> None:
    current = with_holds(store)
    assert store.locks.release("job#job-1", current.execution_arn or "", now=NOW)
    other = "arn:aws:states:us-east-1:123456789012:execution:jobs:m-2-1"
    taken = store.take_holds(
        lease("m-2", execution_arn=other, **HELD_LEASE),
        store.create_request(lease("m-2", execution_arn=other, **HELD_LEASE)),
        [Hold("job#job-1")],
        now=NOW,
    )
    assert taken.written

    assert store.close(current, LeaseStatus.SUCCEEDED, now=NOW + 60) is not None
    job_lock, slot = store.locks.get("job#job-1"), store.locks.get("slot#spark#0")
    assert job_lock is not None and job_lock.held and job_lock.execution_arn == other, "the other's, kept"
    assert slot is not None and not slot.held


def test_lease_store_close_that_loses_its_race_frees_nothing(store: LeaseStore) -> None:
    current = with_holds(store)
    renewed = store.renewals.record(Renewal(current, sent_at=NOW, visibility_timeout_s=300, renew_at=NOW + 200))
    assert renewed is not None, "another writer moved the lease on"

    assert store.close(current, LeaseStatus.RELEASED, now=NOW + 60) is None
    assert held(store, current) == {"job#job-1": True, "slot#spark#0": True}, "the winner's holds stay"


class AnsweredAfterLanding:
    """The store's client, whose TransactWriteItems lands and whose answer is lost: botocore sends it again
    and that second one's answer is what comes back (a cancellation: the first changed the lease). With a
    ClientRequestToken DynamoDB would answer the retry as the first; moto keeps no tokens, and the code
    must not need them (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html:
    a token makes the call idempotent for 10 minutes, and only when the request is the same)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def transact_write_items(self, **request: Any) -> Any:
        self._client.transact_write_items(**request)
        return self._client.transact_write_items(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def store_on(client: Any) -> LeaseStore:
    """The lease store of the `store` fixture, on `client` (a wrapper of moto's)."""
    return LeaseStore(client, "leases", shards=4, closed_ttl_s=Settings().closed_ttl_s)


def test_lease_store_close_whose_answer_was_lost_after_it_landed_is_its_own(harness: Harness) -> None:
    store = harness.store(Settings(shards=4))
    current = with_holds(store)
    retried = store_on(AnsweredAfterLanding(harness.dynamodb))

    closed = retried.close(current, LeaseStatus.RELEASED, now=NOW + 60, visible_until=NOW + 90)

    assert closed is not None and closed == store.get("m-1"), "recognised as landed: the caller goes on"
    assert held(store, current) == {"job#job-1": False, "slot#spark#0": False}
    assert retried.close(current, LeaseStatus.RELEASED, now=NOW + 61) is None, "a later close is another's"


def test_lease_store_close_at_a_time_finer_than_the_table_keeps_is_still_its_own(harness: Harness) -> None:
    """The table keeps times to the millisecond (`num`); a close made at a finer time, with a release's
    visible-until after it, is still recognised as landed when its answer was lost. Seed 9 of the
    simulation's mixed profile found it: the release then skipped its visibility change, and the message
    whose start was refused came back 430 s late."""
    store = harness.store(Settings(shards=4))
    current = with_holds(store)
    retried = store_on(AnsweredAfterLanding(harness.dynamodb))
    at = NOW + 60.0004567

    closed = retried.close(current, LeaseStatus.RELEASED, now=at, visible_until=at + 3)

    assert closed is not None and closed.status is LeaseStatus.RELEASED, "recognised as landed"


class InConflict(AnsweredAfterLanding):
    """The store's client, whose every TransactWriteItems another transaction on the same items cancels
    (AWS's answer: `TransactionCanceledException` with a `TransactionConflict` reason for the item in
    conflict and `None` for the others, https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html)."""

    def transact_write_items(self, **request: Any) -> Any:
        reasons = [{"Code": "TransactionConflict"}, *({"Code": "None"} for _ in request["TransactItems"][1:])]
        error = {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"}
        raise ClientError({"Error": error, "CancellationReasons": reasons}, "TransactWriteItems")  # type: ignore[typeddict-unknown-key]


def test_lease_store_close_refused_as_a_transaction_each_time_closes_then_frees_each_hold(harness: Harness) -> None:
    store = harness.store(Settings(shards=4))
    current = with_holds(store)
    conflicted = store_on(InConflict(harness.dynamodb))

    closed = conflicted.close(current, LeaseStatus.SUCCEEDED, now=NOW + 60)

    assert closed is not None and store.get("m-1") == closed
    assert held(store, current) == {"job#job-1": False, "slot#spark#0": False}


def test_lease_store_close_of_the_same_version_by_another_writer_at_the_same_instant_is_not_its_own(
    store: LeaseStore,
) -> None:
    """Two writers that read one version close it within one millisecond (the close time's precision): the
    second is told of the first only by what it wrote, its reason and when the message shows again."""
    current = with_holds(store)
    first = store.close(current, LeaseStatus.RELEASED, now=NOW + 60, error=LastError("execution failed"))
    assert first is not None

    second = store.close(current, LeaseStatus.RELEASED, now=NOW + 60, error=LastError("execution aborted"))

    assert second is None and store.get("m-1") == first


class ReasonsUnsaid(AnsweredAfterLanding):
    """The store's client, whose first TransactWriteItems is cancelled with no `CancellationReasons` (a
    throttled transaction's answer names none); the next ones go through."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.refused = False

    def transact_write_items(self, **request: Any) -> Any:
        if not self.refused:
            self.refused = True
            error = {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"}
            raise ClientError({"Error": error}, "TransactWriteItems")  # type: ignore[typeddict-item]
        return self._client.transact_write_items(**request)


def test_lease_store_close_cancelled_without_reasons_keeps_every_hold_in_its_next_try(harness: Harness) -> None:
    store = harness.store(Settings(shards=4))
    current = with_holds(store)

    assert store_on(ReasonsUnsaid(harness.dynamodb)).close(current, LeaseStatus.SUCCEEDED, now=NOW + 60) is not None
    assert held(store, current) == {"job#job-1": False, "slot#spark#0": False}


def released_then_noted(store: LeaseStore) -> tuple[Lease, Lease]:
    """A lease closed RELEASED, then noted again with the status kept (SQS refused the release's change for a
    passing reason): the closed lease as first read, and as it is now."""
    current = lease()
    store.create(current)
    closed = store.close(current, LeaseStatus.RELEASED, now=NOW + 60)
    assert closed is not None
    noted = store.amend(closed, status=LeaseStatus.RELEASED, error=LastError("execution failed", "release throttled"))
    assert noted is not None
    return closed, noted


def test_lease_store_amend_from_a_stale_read_is_refused_though_the_status_is_the_same(store: LeaseStore) -> None:
    """The version fences a closed lease too: a release noted again (RELEASED, SQS refused its change for a
    passing reason) moves it on, and an amend from the read before that note finds a version it does not
    know, though the status it read is still there."""
    closed, noted = released_then_noted(store)

    assert store.amend(closed, status=LeaseStatus.LOST, error=LastError("receipt handle no longer accepted")) is None
    assert store.get("m-1") == noted


def test_lease_store_new_attempt_over_a_stale_read_is_refused_though_the_status_is_the_same(store: LeaseStore) -> None:
    """A new attempt replaces the closed lease it read, at that version: a note written since (same status,
    same receive) refuses it, and the next receive decides again on the lease as it is."""
    closed, noted = released_then_noted(store)
    retry = lease(receipt_handle="handle-2", receive_count=2, version=successor_version(closed), attempt=1)

    assert store.create(retry, replacing=closed) is False
    assert store.get("m-1") == noted


def test_lease_store_copy_noted_on_a_stale_marker_is_refused(store: LeaseStore) -> None:
    """Two senders of a parked marker's copy: the first note moves the marker on, and the second, from the
    read before it, is refused, so the marker names the one copy that a redelivery then finds."""
    marker = lease(status=LeaseStatus.PARKED, renew_at=None, execution_arn=None)
    assert store.create(marker)
    assert store.markers.note_copy(marker, "copy-1", sent_at=NOW + 10, kept_until=NOW + 86_400)

    assert not store.markers.note_copy(marker, "copy-2", sent_at=NOW + 11, kept_until=NOW + 86_400)
    stored = store.get("m-1")
    assert stored is not None and stored.copy_id == "copy-1"
