"""The backfill benchmark, small: 100 jobs on 5 runs at once, admission on and off, on the simulation's
world (about 3 s)."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest

from benchmarks.backfill import Params, Result, job_steps, main, max_concurrent, simulate

SMALL = Params(jobs=100, slots=5)


@pytest.fixture(scope="module")
def results() -> dict[str, Result]:
    return {"on": simulate(SMALL, admission=True), "off": simulate(SMALL, admission=False)}


def test_backfill_with_admission_meets_the_goals(results: dict[str, Result]) -> None:
    on = results["on"]
    assert (on.succeeded, on.dlq, on.violation, on.queue_timeouts) == (100, 0, None, 0)
    assert on.max_concurrent == 5 and on.executions == 100, "one execution per job, never more than 5 in their job"
    assert on.receives_per_job <= 3
    assert on.makespan_ratio <= 1.05
    assert on.parked > 0, "the backlog was parked in the type's waiting queue"


def test_backfill_without_admission_starts_everything_and_queues_in_the_application(
    results: dict[str, Result],
) -> None:
    """Without a limit every message starts an execution at once; the application runs five and queues
    the rest, and a run still queued at its step's timeout fails its execution: more executions than jobs."""
    off = results["off"]
    assert off.max_concurrent > 5, "every execution is in its job step, its run queued in the application"
    assert off.parked == 0 and off.violation is None
    assert off.executions > off.jobs
    assert off.requests_per_job > results["on"].requests_per_job


def test_backfill_is_deterministic(results: dict[str, Result]) -> None:
    again = simulate(SMALL, admission=True)
    assert replace(again, wall_s=0.0) == replace(results["on"], wall_s=0.0)


def test_backfill_max_concurrent_counts_open_job_steps() -> None:
    assert max_concurrent([(0, 10), (5, 15), (10, 20)]) == 2, "one that ends as another begins is not counted"
    assert max_concurrent([]) == 0
    trace = [
        '{"event": "job_started", "execution": "a", "t": 1}',
        '{"event": "job_started", "execution": "b", "t": 2}',
        '{"event": "job_ended", "execution": "a", "t": 5}',
        '{"event": "execution_ended", "execution": "a", "t": 6}',
        '{"event": "execution_ended", "execution": "b", "t": 9}',
    ]
    assert job_steps(trace) == [(1, 5), (2, 9)], "a job step ends at its job's end, else at its execution's"


def test_backfill_prints_json_with_both_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--jobs", "20", "--slots", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["admission"] for r in data["results"]] == ["on", "off"]
    assert set(asdict(Params())) == set(data["params"])
    for key in ("makespan_ratio", "receives_per_job", "requests_per_job", "dlq", "violation", "max_concurrent"):
        assert key in data["results"][0]


def test_backfill_without_admission_never_runs_a_job_twice_at_once() -> None:
    """1,000 jobs on 50 runs at once, without admission (about 15 s): runs queue past their steps' timeout,
    and each retry asks about its job's previous run while hundreds of runs are live and change state. A
    listing of the application's runs can miss one still cancelling, which slips between its pages; the
    job's second run would then start beside it (`single_run_per_job`). Read by its id, it is waited for."""
    off = simulate(Params(jobs=1_000, slots=50), admission=False)
    assert (off.violation, off.dlq, off.succeeded) == (None, 0, 1_000)
    assert off.requests.get("stepfunctions.GetExecutionHistory", 0) > 0, "the retries read their runs by id"
