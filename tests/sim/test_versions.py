"""A message's lease versions only grow, across its leases as within one (`successor_version`): a writer
holding a copy of an earlier lease never finds its version again on a later one. A replacement written
at version 0 (as every one was before) let such a writer's version condition through: an old receive's
`mark_due_now`, conditional on version 0 and ACTIVE, landed on a newer receive's lease."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from longjobs.engine.lease import Lease, LeaseStatus, LeaseStore, successor_version, table_definition
from longjobs.sim.aws import FakeAws
from longjobs.sim.clock import FakeClock

STATE_MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:long-jobs"


def store_and_first_lease() -> tuple[FakeClock, LeaseStore, Lease]:
    clock = FakeClock(1_700_000_000.0)
    aws = FakeAws(clock, random.Random(1), table=table_definition("leases"), state_machine_arn=STATE_MACHINE)
    store = LeaseStore(aws.dynamodb, "leases", shards=1, closed_ttl_s=3_600)
    now = clock.now()
    first = Lease("m-1", "https://sqs/jobs", "handle-1", 1, now, now + 60, now + 3_600, renew_at=now + 30)
    assert store.create(first)
    return clock, store, first


def test_versions_an_old_receives_write_never_lands_on_a_newer_lease() -> None:
    clock, store, first = store_and_first_lease()
    released = store.close(first, LeaseStatus.RELEASED, now=clock.now())
    assert released is not None
    now = clock.now()
    second = replace(
        first,
        receipt_handle="handle-2",
        receive_count=2,
        received_at=now,
        version=successor_version(released),
        status=LeaseStatus.ACTIVE,
        closed_at=None,
    )
    assert store.create(second, replacing=released)

    assert store.mark_due_now(first, now) is None, "the first receive's view is two versions behind"
    stored = store.get("m-1")
    assert stored is not None and (stored.receipt_handle, stored.visible_until) == ("handle-2", second.visible_until)


def test_versions_a_replacement_at_a_version_not_past_the_replaced_one_is_refused() -> None:
    clock, store, first = store_and_first_lease()
    released = store.close(first, LeaseStatus.RELEASED, now=clock.now())
    assert released is not None

    with pytest.raises(ValueError, match="successor_version"):
        store.create(replace(first, receive_count=2, version=0), replacing=released)
    assert successor_version(None) == 0 and successor_version(released) == released.version + 1
