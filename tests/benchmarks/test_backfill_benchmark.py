"""The backfill simulation, small: 100 jobs on 5 slots, admission on and off (about 3 s)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, replace

import pytest

from benchmarks.backfill import Params, Result, main, simulate
from longjobs.engine.extender.reconcile import LIST_VOUCHES_S

SMALL = Params(jobs=100, slots=5)


@pytest.fixture(scope="module")
def results() -> dict[str, Result]:
    return {"on": simulate(SMALL, admission=True), "off": simulate(SMALL, admission=False)}


def test_backfill_with_admission_meets_the_goals(results: dict[str, Result]) -> None:
    on = results["on"]
    assert (on.deleted, on.dlq, on.lapses, on.double_runs) == (100, 0, 0, 0)
    assert on.max_concurrent == 5 and on.executions == 100, "one execution per job, never more than the slots"
    assert on.receives_per_job <= 3
    assert on.makespan_ratio <= 1.05
    assert on.parked > 0 and on.admitted_in_place > 0, "the backlog was parked, and started in place"


def test_backfill_without_admission_starts_everything_and_queues_in_the_runner(results: dict[str, Result]) -> None:
    off = results["off"]
    assert off.max_concurrent == 5, "the runner itself (Glue) runs five and queues the rest"
    assert off.max_waiting_in_flight == 0 and off.parked == 0
    # A queued run's message is renewed while it waits in the runner, and reconciliation costs it little:
    # the list of running executions vouches for its lease within an hour of its last look, so at most one
    # DescribeExecution an hour per execution, besides one for each ended attempt (a look every
    # `reconcile_interval_s`, as before the list, would be six an hour).
    hours = math.ceil(off.makespan_h * 3_600 / LIST_VOUCHES_S)
    assert off.requests.get("stepfunctions.DescribeExecution", 0) <= off.failed_attempts + off.executions * hours


def test_backfill_is_deterministic(results: dict[str, Result]) -> None:
    again = simulate(SMALL, admission=True)
    assert replace(again, wall_s=0.0) == replace(results["on"], wall_s=0.0)


def test_backfill_prints_json_with_both_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--jobs", "20", "--slots", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["admission"] for r in data["results"]] == ["on", "off"]
    assert set(asdict(Params())) == set(data["params"])
    for key in ("makespan_ratio", "receives_per_job", "requests_per_job", "dlq", "lapses", "max_concurrent"):
        assert key in data["results"][0]
