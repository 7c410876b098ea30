"""Planted bugs prove the harness has teeth: each test disables one protection of the engine (a patch
of the engine's own code, in this process) and runs the unmodified campaign (`--seeds 200 --first 0`,
the default profile, nothing tailored to the bug), which must report a broken property. The campaign
stops at its first failed seed, so a planted bug costs the seeds it takes to be found. The lease's
version condition is planted with the conditions it shares each write with (`lease_fence`), and the
handle check on renewal with the version check beside it (`handle_check`): alone, each is masked by the
other conditions (docs/simulation.md says why)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from longjobs.engine.delivery import attempt
from longjobs.engine.delivery import types as receiver_types
from longjobs.engine.delivery.decision import LockState
from longjobs.engine.lease.lock import Locks
from longjobs.sim.campaign import campaign


def _no_job_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The job lock is ignored: read as free, and taken whoever holds it. Two messages of one job id run."""
    take_request = Locks.take_request

    def unconditional(self: Locks, key: str, **kwargs: Any) -> dict[str, Any]:
        request = take_request(self, key, **kwargs)
        return {"TableName": request["TableName"], "Item": request["Item"]}

    monkeypatch.setattr(Locks, "take_request", unconditional)
    monkeypatch.setattr(attempt, "read_job_lock", lambda *args, **kwargs: (LockState.FREE, None))


def _no_stop_at_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lease that can no longer be held (the 12 h limit, the max renewal, a handle refused) is closed
    without stopping its execution."""
    from longjobs.engine import settle

    monkeypatch.setattr(settle, "stop_execution", lambda *args, **kwargs: None)


def _delete_before_success(monkeypatch: pytest.MonkeyPatch) -> None:
    """A started long job counts as done: the event source mapping deletes its message at once."""
    monkeypatch.setattr(receiver_types, "_DONE", receiver_types._DONE | {receiver_types.Outcome.STARTED})


def _no_handle_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The extender ends a lease it cannot hold (a handle SQS refused, the 12 h limit, the max renewal)
    whatever its consistent re-read shows: a newer receive's lease (a redelivery that adopted the running
    execution, or started one) is ended too, and its execution stopped. The receive and the version are
    checked together (`still_as_read`); versions only grow, so either alone would catch it."""
    from longjobs.engine.extender import service

    monkeypatch.setattr(service, "still_as_read", lambda lease, read: True)


def _no_lease_fence(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every conditional write of a lease passes once the lease exists (version, status and receive count
    ignored, by the functions and the workflow alike; a marker's claim too): a stale writer is never fenced
    off. The version condition alone is not planted: the status and receive-count conditions on the same
    writes mask it."""
    from longjobs.engine.lease.lock import is_lock_key
    from longjobs.engine.lease.schema import PARTITION_KEY
    from longjobs.sim.aws.dynamodb import FakeDynamoDb

    def unfenced(request: dict[str, Any]) -> dict[str, Any]:
        key = (request.get("Key") or request.get("Item") or {}).get(PARTITION_KEY, {}).get("S", "")
        condition = request.get("ConditionExpression")
        if condition is None or is_lock_key(key):
            return request
        names = {**request.get("ExpressionAttributeNames", {}), "#planted_pk": PARTITION_KEY}
        condition = f"({condition}) OR attribute_exists(#planted_pk)"
        return {**request, "ConditionExpression": condition, "ExpressionAttributeNames": names}

    put, update, transact = FakeDynamoDb.put_item, FakeDynamoDb.update_item, FakeDynamoDb.transact_write_items

    def transact_unfenced(self: FakeDynamoDb, **request: Any) -> dict[str, Any]:
        items = [{kind: unfenced(body) for kind, body in item.items()} for item in request["TransactItems"]]
        return transact(self, **{**request, "TransactItems": items})

    monkeypatch.setattr(FakeDynamoDb, "put_item", lambda self, **request: put(self, **unfenced(request)))
    monkeypatch.setattr(FakeDynamoDb, "update_item", lambda self, **request: update(self, **unfenced(request)))
    monkeypatch.setattr(FakeDynamoDb, "transact_write_items", transact_unfenced)


PLANTED: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "lease_fence": _no_lease_fence,
    "job_lock": _no_job_lock,
    "cap_handling": _no_stop_at_cap,
    "handle_check": _no_handle_check,
    "delete_after_success": _delete_before_success,
}
REPORTED_AS = {
    "lease_fence": "once_per_message",
    "job_lock": "single_execution_per_job",
    "cap_handling": "held_while_running",
    "handle_check": "stopped_as_read",
    "delete_after_success": "nothing_lost",
}
"""The property the campaign reports each planted bug by, at its first failed seed."""


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_planted_bug_is_reported_by_the_campaign(bug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    PLANTED[bug](monkeypatch)
    report = campaign(200, first=0, workers=1, stop_on_failure=True)
    assert report.failed, f"the campaign missed the planted bug {bug!r} in 200 seeds"
    failure = report.failed[0]
    assert failure["property"] == REPORTED_AS[bug]
    assert failure["replay"].startswith(f"python -m offline sim --seed {failure['seed']}")
