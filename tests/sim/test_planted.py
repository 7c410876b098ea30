"""Planted bugs prove the harness has teeth: each test disables one protection of the engine (a patch
of the engine's own code, in this process) and runs the unmodified campaign (`--seeds 200 --first 0`,
the default profile, nothing tailored to the bug), which must report a broken property. The campaign
stops at its first failed seed, so a planted bug costs the seeds it takes to be found."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from longjobs.engine.lease import store as lease_store
from longjobs.engine.lease.lock import Locks
from longjobs.engine.receiver import service as receiver_service
from longjobs.sim.campaign import campaign

VERSION_TERM = re.compile(r"\s*(AND\s+)?version = :version(\s+AND)?")


def _without_version(request: dict[str, Any]) -> dict[str, Any]:
    """A conditional write of the lease store with its `version = :version` term taken out."""
    condition = request.get("ConditionExpression") or ""
    if ":version" not in condition:
        return request
    kept = re.sub(r"^AND\s+|\s+AND$", "", VERSION_TERM.sub(" ", condition).strip()).strip()
    values = {key: value for key, value in request.get("ExpressionAttributeValues", {}).items() if key != ":version"}
    out = {**request, "ExpressionAttributeValues": values}
    if kept:
        out["ConditionExpression"] = kept
    else:
        del out["ConditionExpression"]
    return out


def _no_version_condition(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write of a lease (a renewal, a close, an adoption, a release) is made whatever the lease's
    version: a writer that read the lease before another changed it writes over the change."""
    conditional, renewal_update = lease_store._conditional, lease_store.LeaseStore._renewal_update
    monkeypatch.setattr(
        lease_store, "_conditional", lambda write, **request: conditional(write, **_without_version(request))
    )
    monkeypatch.setattr(
        lease_store.LeaseStore, "_renewal_update", lambda self, renewal: _without_version(renewal_update(self, renewal))
    )


def _no_job_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every take of a job lock (or a slot) succeeds without a write: two messages of one job id run."""
    monkeypatch.setattr(Locks, "take", lambda self, key, **kwargs: True)


def _no_stop_at_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lease that can no longer be held (the 12 h limit, the max renewal, a handle refused) is closed
    without stopping its execution."""
    from longjobs.engine import settle

    monkeypatch.setattr(settle, "stop_execution", lambda *args, **kwargs: None)


def _delete_before_success(monkeypatch: pytest.MonkeyPatch) -> None:
    """A started long job counts as done: the event source mapping deletes its message at once."""
    monkeypatch.setattr(receiver_service, "_DONE", receiver_service._DONE | {receiver_service.Outcome.STARTED})


PLANTED: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "version_condition": _no_version_condition,
    "job_lock": _no_job_lock,
    "cap_handling": _no_stop_at_cap,
    "delete_after_success": _delete_before_success,
}


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_planted_bug_is_reported_by_the_campaign(bug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    PLANTED[bug](monkeypatch)
    report = campaign(200, first=0, workers=1, stop_on_failure=True)
    assert report.failed, f"the campaign missed the planted bug {bug!r} in 200 seeds"
    failure = report.failed[0]
    assert failure["replay"].startswith(f"python -m offline sim --seed {failure['seed']}")
