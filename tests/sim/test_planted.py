"""Planted bugs prove the harness has teeth: each test disables one protection of the engine (a patch
of the engine's own code, in this process) and runs the unmodified campaign (`--seeds 200 --first 0`,
the default profile, nothing tailored to the bug), which must report a broken property. The campaign
stops at its first failed seed, so a planted bug costs the seeds it takes to be found. The lease's
version condition and the handle check on renewal are not here: disabled alone, the campaign reports
neither (docs/simulation.md says why)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from longjobs.engine.lease.lock import Locks
from longjobs.engine.receiver import attempt
from longjobs.engine.receiver import types as receiver_types
from longjobs.engine.receiver.decision import LockState
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


PLANTED: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
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
