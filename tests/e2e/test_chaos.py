"""`python -m offline chaos`: one short run of the campaign. It checks the machinery (the run completes,
every fault takes effect or is reported missed with its reason, the report's shape), not the processor's
verdict: the violations it finds are the point of the campaign and are reported, not asserted away."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from longjobs.offline.__main__ import main
from longjobs.offline.chaos import draw_scenario
from longjobs.offline.scenario import parse_scenario

pytestmark = pytest.mark.e2e

SEED = 1053
"""Run 1 of this seed draws a fault of every type (checked by `test_chaos_seed_draws_every_fault_type`) on
short jobs. One run keeps this real-time test short: the simulation checks the protocol, and the unit tests
of `Faults` check that each mode is injected when its call comes."""
RUNS = 1
TIMED = {"abort_execution", "duplicate_delivery"}
INJECTED_AS = {"lose_scheduled_runs": "extender_skipped", "drop_status_events": "event_lost", "throttle": "throttled"}


def test_chaos_seed_draws_every_fault_type() -> None:
    faults = [fault for index in range(1, RUNS + 1) for fault in draw_scenario(SEED, index)["faults"]]
    types = {fault["type"] for fault in faults}
    modes = {fault["mode"] for fault in faults if fault["type"] == "aws_fault"}

    assert types >= {"aws_fault", "lose_scheduled_runs", "drop_status_events", "throttle"}
    assert types >= TIMED
    assert len(modes) == 3
    assert draw_scenario(SEED, 1) == draw_scenario(SEED, 1), "a run is the same scenario every time"


def accounted(fault: dict[str, Any], index: int, injected: dict[str, int], missed: list[str]) -> bool:
    """A fault took effect (its mode was injected) or the report names it as missed, with the reason."""
    kind = fault["type"]
    if kind in TIMED:
        return injected.get(kind, 0) > 0 or any(m.startswith(f"{kind} on {fault['job']} ") for m in missed)
    mode = fault["mode"] if kind == "aws_fault" else INJECTED_AS.get(kind, kind)
    return injected.get(mode, 0) > 0 or any(m.startswith(f"faults[{index}] {kind}") for m in missed)


def test_chaos_campaign_runs_and_accounts_for_every_fault(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
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
        for index, fault in enumerate(run["scenario"]["faults"]):
            assert accounted(fault, index, run["totals"]["faults_injected"], run["totals"]["faults_missed"]), fault
    assert sum(report["faults_injected"].values()) > 0
    assert sum(report["faults_injected"].values()) == sum(
        sum(run["totals"]["faults_injected"].values()) for run in report["runs"]
    )
    out = capsys.readouterr().out
    assert f"{RUNS} run(s) (seed {SEED}): {report['violations']} violations" in out
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
        assert settings["max_attempts"] == standard["settings"]["max_attempts"], "one record a receive"
        assert all(job.get("fail") for job in groups.get("alone", [])), "the failing job holds nobody else"
        poison = next((job for job in fifo["jobs"] if "raw_body" in job), None)
        if poison is not None:
            members = groups[str(poison["group"])]
            assert members.index(poison) > 0, "the poison body sits behind a job of its group"
        parse_scenario(fifo)
