"""The lease's version fences it: every write that changes a lease item raises its version, except the two
notes that must never make a renewal or a close lose its race (`note_error`, `mark_checked`).

The mutation command's arguments rest on this: a condition that pins the version read also pins every
attribute read with it, so a clause comparing one of them to its value as read can never refuse a write
the version clause let through (`longjobs.sim.mutation.equivalent`). It is checked here on every write of
seeds of each profile, at the simulated table's one place of storing (`FakeDynamoDb._store`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from longjobs.engine.lease.schema import CHECKED_AT_ATTR, ERROR_ATTR, STATUS_ATTR, VERSION_ATTR
from longjobs.sim.aws.dynamodb import FakeDynamoDb
from longjobs.sim.campaign import run_seed

NOTES = {ERROR_ATTR, CHECKED_AT_ATTR}
"""The attributes written without a version bump (`LeaseStore.note_error`, `LeaseStore.mark_checked`)."""


@pytest.fixture
def writes() -> Iterator[list[tuple[dict[str, Any], dict[str, Any]]]]:
    """Every write of a lease item over another (before, after), while the test runs."""
    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []
    store = FakeDynamoDb._store

    def noted(self: FakeDynamoDb, key: str, item: dict[str, Any] | None) -> None:
        before = self.items.get(key)
        if before is not None and item is not None and VERSION_ATTR in before and STATUS_ATTR in before:
            seen.append((dict(before), dict(item)))
        store(self, key, item)

    FakeDynamoDb._store = noted  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        FakeDynamoDb._store = store  # type: ignore[method-assign]


@pytest.mark.parametrize("profile", ["mixed", "admission", "standard", "fifo"])
def test_version_fence_every_change_of_a_lease_raises_its_version(
    profile: str, writes: list[tuple[dict[str, Any], dict[str, Any]]]
) -> None:
    for seed in range(6):
        run_seed(seed, profile, keep_calls=False)
    assert len(writes) > 50  # the seeds did write leases over leases
    for before, after in writes:
        changed = {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}
        old, new = int(before[VERSION_ATTR]["N"]), int(after[VERSION_ATTR]["N"])
        if changed - NOTES:
            assert new > old, f"{sorted(changed)} changed at version {old} -> {new}: {after}"
        else:
            assert new == old
