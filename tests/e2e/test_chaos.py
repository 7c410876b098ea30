"""`python -m offline chaos`: a few short runs of the campaign. They check the machinery (every run
completes, every fault mode is injected, the report's shape), not the processor's verdict: the violations
it finds are the point of the campaign and are reported, not asserted away."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from longjobs.offline.__main__ import main
from longjobs.offline.chaos import draw_scenario
from longjobs.offline.scenario import parse_scenario

pytestmark = pytest.mark.e2e

SEED = 55
"""Runs 1 and 2 of this seed hold, between them, a fault of every mode on calls that surely happen within
their windows (the receiver's visibility change, the extender's renewals, any call in the first 5 s, the
watcher's release of the aborted job), a lost scheduled run, and a dropped status event (checked by
`test_chaos_seed_draws_every_fault_type`); two runs rather than three keep this real-time test short (the
simulation is where protocol logic is checked). A fault on a call that only a status event of the first
seconds makes is not enough: under load no execution ends that early."""
RUNS = 2
MODES = {"throttle", "error", "ambiguous", "crash", "lost_run", "dropped_event"}


def test_chaos_seed_draws_every_fault_type() -> None:
    types = {fault["type"] for index in range(1, RUNS + 1) for fault in draw_scenario(SEED, index)["faults"]}
    modes = {
        fault["mode"]
        for index in range(1, RUNS + 1)
        for fault in draw_scenario(SEED, index)["faults"]
        if fault["type"] == "aws_fault"
    }

    assert types >= {"aws_fault", "lose_scheduled_runs", "drop_status_events", "throttle"}
    assert types >= {"abort_execution", "duplicate_delivery"}
    assert modes == {"throttle", "error", "ambiguous", "crash"}
    assert draw_scenario(SEED, 2) == draw_scenario(SEED, 2), "a run is the same scenario every time"


def test_chaos_campaign_runs_and_injects_every_fault_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report_path = tmp_path / "chaos.json"

    code = main(["chaos", "--runs", str(RUNS), "--seed", str(SEED), "--report", str(report_path), "--quiet"])

    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert set(report) == {
        "seed",
        "runs",
        "double_runs",
        "lapses",
        "lost_messages",
        "stuck_leases",
        "violations",
        "faults_injected",
        "faults_missed",
        "wall_s",
    }
    assert code == (0 if report["violations"] == 0 else 1)
    assert [run["run"] for run in report["runs"]] == list(range(1, RUNS + 1))
    assert report["violations"] == sum(len(run["violations"]) for run in report["runs"])
    for run in report["runs"]:
        assert run["scenario"] == draw_scenario(SEED, run["run"])
        assert run["ok"] is (not run["violations"])
        assert run["wall_s"] < 180, "a run ends once its messages are settled (a generous bound: real time)"
        assert {"double_runs", "lapses", "lost_messages", "stuck_leases", "faults_injected"} <= set(run["totals"])
    assert {mode for mode, n in report["faults_injected"].items() if n > 0} >= MODES
    assert sum(report["faults_injected"].values()) == sum(
        sum(run["totals"]["faults_injected"].values()) for run in report["runs"]
    )
    out = capsys.readouterr().out
    assert f"{RUNS} runs (seed {SEED}): {report['violations']} violations" in out
    assert out.count("threshold") + out.count("adaptive") == RUNS, "one row per run"


def test_chaos_fifo_variant_puts_the_same_jobs_in_groups() -> None:
    for index in range(1, 9):
        standard, fifo = draw_scenario(SEED, index), draw_scenario(SEED, index, fifo=True)
        settings = fifo["settings"]
        assert settings["fifo"] is True and fifo["faults"] == standard["faults"]
        assert {job["id"] for job in fifo["jobs"]} >= {job["id"] for job in standard["jobs"]}
        groups: dict[str, list[dict[str, object]]] = {}
        for job in fifo["jobs"]:
            groups.setdefault(str(job["group"]), []).append(job)
        assert settings["max_receive_count"] == standard["settings"]["max_receive_count"], "one record a receive"
        assert all(job.get("fail") for job in groups.get("alone", [])), "the failing job holds nobody else"
        poison = next((job for job in fifo["jobs"] if "raw_body" in job), None)
        if poison is not None:
            members = groups[str(poison["group"])]
            assert members.index(poison) > 0, "the poison body sits behind a job of its group"
        parse_scenario(fifo)
