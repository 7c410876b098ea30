"""An offline run's history (`longjobs.offline.history`) from observed tracks, judged by the independent
checker: what it writes for a duplicate that a fault excuses, and for a message whose place the observer
could not decide at its last look."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from longjobs.history.checker import check
from longjobs.offline.faults import Faults
from longjobs.offline.history import checker_command, history
from longjobs.offline.observe import Delivery, Execution, Track
from longjobs.offline.scenario import load_scenario, parse_scenario
from tests import REPO_ROOT

START = 1_000.0
MESSAGE = "m1"


def faults_with_one_duplicate() -> Faults:
    scenario = parse_scenario(
        {
            "jobs": [{"id": "a", "type": "wait", "seconds": 60}],
            "faults": [{"type": "duplicate_delivery", "job": "a", "at_s": 20}],
        }
    )
    faults = Faults(scenario, clock=lambda: START)
    faults.begin()
    faults.done.append("duplicate_delivery a")  # the fault took effect
    return faults


def running_track(*deliveries: Delivery) -> Track:
    execution = Execution(f"{MESSAGE}-1", "SUCCEEDED", START + 2, START + 70, None, START + 69, START + 3, True)
    track = Track(job_id="a", message_id=MESSAGE, sent_at=START, deliveries=list(deliveries))
    track.executions = [execution]
    track.final = "deleted"
    return track


def records(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines]


def test_offline_history_duplicate_is_excused_by_name_and_a_later_lapse_still_counts() -> None:
    """The duplicate the fault made is written `excused`, not `duplicate`: the checker opens no echo window
    for it, so a second delivery while the job still runs is a lapse."""
    first = Delivery(START + 1, 1, False, MESSAGE)
    duplicate = Delivery(START + 21, 2, True, MESSAGE)
    lapse = Delivery(START + 40, 3, True, MESSAGE)
    lines = history({"a": running_track(first, duplicate, lapse)}, faults_with_one_duplicate(), start=START)

    delivered = [r for r in records(lines) if r["event"] == "delivered"]
    assert [("excused" in r, r["duplicate"]) for r in delivered] == [(False, False), (True, False), (False, False)]
    assert [finding.property for finding in check(lines)] == ["no_lapse"]
    excused_only = history({"a": running_track(first, duplicate)}, faults_with_one_duplicate(), start=START)
    assert check(excused_only) == []


def test_offline_history_undecided_message_is_not_left_on_the_queues() -> None:
    """A track the observer could not place at its last look keeps `final` "queued" without being on a queue:
    it is not listed as left, so a stopped service's history still judges it (here, lost)."""
    undecided = Track(job_id="b", message_id="m2", sent_at=START)
    queued = Track(job_id="c", message_id="m3", sent_at=START, on_queue=True)
    lines = history({"b": undecided, "c": queued}, None, start=START, stopped=True)

    assert records(lines)[-1] == {"t": 0.0, "actor": "offline", "event": "end", "left": {"c": 1}, "stopped": True}
    assert [(f.property, f.detail.split(" (")[0]) for f in check(lines)] == [("nothing_lost", "job b")]


def test_offline_history_checker_command_gives_the_limits_the_run_had(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command `run --trace` prints re-checks each limited type's concurrency, not only the rest."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # activated
    parking = load_scenario(REPO_ROOT / "longjobs/offline/scenarios/parking.json")
    assert (
        checker_command(parking.job_catalog(), "trace.jsonl")
        == "python -m longjobs.history.checker --limit one-at-a-time=1 trace.jsonl"
    )
    unlimited = parse_scenario({"jobs": [{"id": "a", "type": "wait", "seconds": 1}]})
    assert checker_command(unlimited.job_catalog(), "t.jsonl") == "python -m longjobs.history.checker t.jsonl"


def test_offline_history_checker_command_runs_as_typed_without_an_activated_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Printed for a user whose virtual environment is not activated, the command names this install's
    interpreter by its path: relative from inside the checkout (as the README's `.venv/bin/...` commands
    are), absolute from elsewhere. A bare `python` would be another interpreter, without the package."""
    installed = Path(sys.executable).parent / "python"
    monkeypatch.setenv("PATH", str(tmp_path))  # no python of this install on it
    unlimited = parse_scenario({"jobs": [{"id": "a", "type": "wait", "seconds": 1}]}).job_catalog()
    monkeypatch.chdir(installed.parent.parent.parent)
    relative = os.path.relpath(installed)
    assert not Path(relative).is_absolute()
    assert checker_command(unlimited, "t.jsonl") == f"{relative} -m longjobs.history.checker t.jsonl"
    monkeypatch.chdir(tmp_path)
    assert checker_command(unlimited, "t.jsonl") == f"{installed} -m longjobs.history.checker t.jsonl"
