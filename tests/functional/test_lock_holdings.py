"""A holding of a job lock or a slot, judged stale from one read, on moto: freed or taken over only if it is
still that very holding. A holding is its execution and the instant it was taken; a take repeated by its own
execution (a retry after a 5xx that landed) is a new holding, taken by a receive that is starting its job.
So a sweep or a take-over that read the lock before such a take must be refused, or a second job would run.
Another execution's take may read the same instant on its own clock, so the execution is checked as well."""

from __future__ import annotations

import pytest

from longjobs.engine.lease import LeaseStore
from longjobs.engine.lease.lock import Lock, Locks
from longjobs.engine.settings import Settings
from tests.functional.conftest import Harness

KEY = "job#job-1"
OLD, NEW = (
    "arn:aws:states:us-east-1:123456789012:execution:jobs:m-1-1",
    "arn:aws:states:us-east-1:123456789012:execution:jobs:m-2-1",
)
NOW = 1_800_000_000.0


def locks_of(harness: Harness) -> Locks:
    store: LeaseStore = harness.store(Settings())
    return store.locks


def taken(locks: Locks, execution_arn: str, now: float) -> Lock:
    assert locks.take(KEY, holder="m", execution_arn=execution_arn, now=now, hold_until=now + 3_600)
    lock = locks.get(KEY)
    assert lock is not None
    return lock


def changed(locks: Locks, how: str) -> None:
    """The holding read as `OLD`'s at `NOW` changes before its sweep or take-over acts on that read."""
    if how == "retaken-by-its-execution":
        taken(locks, OLD, NOW + 5)
    elif how == "freed-then-taken-by-another":
        assert locks.release(KEY, OLD, now=NOW + 5)
        taken(locks, NEW, NOW + 6)
    elif how == "taken-by-another-at-the-same-instant":  # two containers' clocks read the same millisecond
        assert locks.release(KEY, OLD, now=NOW)
        taken(locks, NEW, NOW)
    else:
        assert how == "freed"
        assert locks.release(KEY, OLD, now=NOW + 5)


@pytest.mark.parametrize(
    "how",
    ["retaken-by-its-execution", "freed-then-taken-by-another", "taken-by-another-at-the-same-instant", "freed"],
)
def test_lock_holding_read_stale_is_not_freed(harness: Harness, how: str) -> None:
    locks = locks_of(harness)
    read = taken(locks, OLD, NOW)
    changed(locks, how)
    before = locks.get(KEY)

    assert locks.free(read, now=NOW + 10) is False
    assert locks.get(KEY) == before


@pytest.mark.parametrize(
    "how", ["retaken-by-its-execution", "freed-then-taken-by-another", "taken-by-another-at-the-same-instant"]
)
def test_lock_holding_read_stale_is_not_taken_over(harness: Harness, how: str) -> None:
    locks = locks_of(harness)
    read = taken(locks, OLD, NOW)
    changed(locks, how)
    before = locks.get(KEY)

    assert (
        locks.take(KEY, holder="m-3", execution_arn="arn:third", now=NOW + 10, hold_until=NOW + 99, over=read) is False
    )
    assert locks.get(KEY) == before


def test_lock_holding_still_as_read_is_freed_and_taken_over(harness: Harness) -> None:
    locks = locks_of(harness)
    read = taken(locks, OLD, NOW)
    assert locks.take(KEY, holder="m-3", execution_arn="arn:third", now=NOW + 10, hold_until=NOW + 99, over=read)
    third = locks.get(KEY)
    assert third is not None and third.execution_arn == "arn:third"
    assert locks.free(third, now=NOW + 20)
