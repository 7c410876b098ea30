"""`python -m offline sim --seed S --shrink`: a failing seed shrunk to a scenario file with fewer jobs and
faults that `offline run`'s loader accepts and that breaks the same property under `sim --scenario`; a
passing seed has nothing to shrink; a failure that needs what a scenario cannot say is refused, named.

The failing seeds come from the planted bugs of `longjobs/sim/planted.py` (its seams, applied in this
process, so the command runs in-process too): the first seed of the profile that fails with the bug, as a
campaign finds it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from longjobs.engine.settings import Settings
from longjobs.history.faults import CallFault, WorldFault
from longjobs.offline.__main__ import main
from longjobs.offline.scenario import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, load_scenario, parse_scenario
from longjobs.sim.campaign import campaign
from longjobs.sim.planted import PLANTS
from longjobs.sim.properties import Monitor, PropertyViolation
from longjobs.sim.shrink import (
    ATTEMPT_S,
    TIMEOUT_MARGIN,
    Fired,
    Inexpressible,
    ddmin,
    offline_timeout_s,
    shrink_seed,
    translate,
)
from longjobs.sim.workload import ADDED_TYPE, DeployPlan, JobPlan, Workload

SEEDS_TO_SEARCH = 10


def first_failing_seed(profile: str) -> tuple[int, str]:
    """The first seed of `profile` that fails as things are patched now, and the property it breaks."""
    report = campaign(SEEDS_TO_SEARCH, profile=profile, workers=1, stop_on_failure=True)
    assert report.failed, f"no seed of {profile} failed in {SEEDS_TO_SEARCH}"
    return report.failed[0]["seed"], report.failed[0]["property"]


@pytest.mark.parametrize(("bug", "profile"), [("delete_after_success", "standard"), ("job_lock", "standard")])
def test_shrink_planted_bug_writes_smaller_scenario_that_breaks_same_property(
    bug: str, profile: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    PLANTS[bug].apply(monkeypatch.setattr)
    seed, broken = first_failing_seed(profile)
    out = tmp_path / "shrunk.json"

    assert main(["sim", "--seed", str(seed), "--profile", profile, "--shrink", "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    scenario = load_scenario(out)  # `offline run`'s loader accepts it
    assert main(["sim", "--scenario", str(out)]) == 1
    report = json.loads(capsys.readouterr().out)

    assert report["property"] == broken
    shrunk = shrink_seed(seed, profile)
    assert shrunk is not None and shrunk.scenario == json.loads(out.read_text(encoding="utf-8")), "deterministic"
    assert len(scenario.jobs) == shrunk.jobs_after < shrunk.jobs_before
    assert len(scenario.faults) == shrunk.faults_after <= shrunk.faults_before
    assert f"{broken} broke; shrunk from {shrunk.jobs_before} jobs" in printed


def test_shrink_job_lock_keeps_two_messages_of_one_job_id(monkeypatch: pytest.MonkeyPatch) -> None:
    PLANTS["job_lock"].apply(monkeypatch.setattr)
    seed, _ = first_failing_seed("standard")

    shrunk = shrink_seed(seed, "standard")

    assert shrunk is not None and shrunk.broken == "single_execution_per_job"
    job, again = shrunk.scenario["jobs"]
    assert again["id"] == f"{job['id']}.2" and json.loads(again["raw_body"])["job_id"] == job["id"]
    assert shrunk.scenario["timeout_s"] == offline_timeout_s(parse_scenario(shrunk.scenario)), "for `offline run`"


def _wait(job_id: str, seconds: int, **more: Any) -> dict[str, Any]:
    return {"id": job_id, "type": "wait", "seconds": seconds, **more}


def test_shrink_timeout_covers_jobs_of_one_job_id_run_one_after_another() -> None:
    """Two messages of one job id run one after the other, the second once a wait finds the first ended:
    the timeout written covers both and that wait, where two job ids run side by side."""
    body = json.dumps({"job_id": "a", "type": "wait", "params": {"seconds": 117}})
    one_id = parse_scenario({"jobs": [_wait("a", 117), {"id": "a.2", "raw_body": body, "expect": "deleted"}]})
    two_ids = parse_scenario({"jobs": [_wait("a", 117), _wait("b", 117)]})

    attempt_s = 117 + ATTEMPT_S
    second_starts_s = 3 * attempt_s + Settings().job_wait_base_s  # at the latest, after waits that double
    assert offline_timeout_s(one_id) == math.ceil(TIMEOUT_MARGIN * (second_starts_s + attempt_s)) == 923
    assert offline_timeout_s(two_ids) == math.ceil(TIMEOUT_MARGIN * attempt_s) == 222


def test_shrink_timeout_counts_every_attempt_of_a_failing_job_and_each_fault() -> None:
    failing = parse_scenario({"settings": {"max_attempts": 3}, "jobs": [_wait("f", 10, fail=True)]})
    faulted = parse_scenario(
        {
            "settings": {"max_attempts": 3},
            "jobs": [_wait("a", 100)],
            "faults": [{"type": "aws_fault", "function": "receiver", "operation": "StartExecution", "mode": "timeout"}],
        }
    )

    # three attempts of 70 s, the release delays of 30 and 60 s between
    assert offline_timeout_s(failing) == math.ceil(TIMEOUT_MARGIN * (3 * 70 + 30 + 60)) == 375
    # the fault may cost another attempt, held back the longest release delay (60 s)
    assert offline_timeout_s(faulted) == math.ceil(TIMEOUT_MARGIN * (160 + 160 + 60)) == 475


def test_shrink_timeout_stays_within_the_default_and_the_formats_maximum() -> None:
    assert offline_timeout_s(parse_scenario({"jobs": [_wait("a", 1)]})) == DEFAULT_TIMEOUT_S
    assert offline_timeout_s(parse_scenario({"jobs": [_wait("a", 3_000)]})) == MAX_TIMEOUT_S


def test_shrink_timeout_runs_a_fifo_groups_jobs_one_after_another_without_waits() -> None:
    fifo = {"settings": {"fifo": True}, "jobs": [_wait("a", 100, group="g"), _wait("b", 100, group="g")]}

    assert offline_timeout_s(parse_scenario(fifo)) == math.ceil(TIMEOUT_MARGIN * 2 * (100 + ATTEMPT_S)) == 400


def test_shrink_passing_seed_has_nothing_to_shrink(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "shrunk.json"

    assert main(["sim", "--seed", "2", "--profile", "fifo", "--shrink", "--out", str(out)]) == 0

    assert "nothing to shrink" in capsys.readouterr().out
    assert not out.exists()


def test_shrink_failure_needing_lost_status_event_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A planted failure that only a lost status event causes: a scenario can drop status events only at
    random (`drop_status_events`), not this one, so the shrink refuses rather than write a passing file."""
    reach = Monitor.reach

    def lost_event_breaks(self: Monitor, name: str, count: int = 1) -> None:
        reach(self, name, count)
        if name == "status_event:lost":
            raise PropertyViolation("nothing_lost", "planted: a status event was lost")

    monkeypatch.setattr(Monitor, "reach", lost_event_breaks)
    seed, _ = first_failing_seed("standard")
    out = tmp_path / "shrunk.json"

    assert main(["sim", "--seed", str(seed), "--profile", "standard", "--shrink", "--out", str(out)]) == 2

    error = capsys.readouterr().err
    assert f"seed {seed} (standard) breaks nothing_lost, but not once written as a scenario" in error
    assert "event_lost at t=" in error and "no scenario item for it" in error
    assert not out.exists()
    with pytest.raises(Inexpressible):
        shrink_seed(seed, "standard")


def test_translate_fired_faults_as_items_or_named_left_out() -> None:
    workload = Workload([JobPlan("a", "wait", {"seconds": 30}, 0.0), JobPlan("a", "wait", {"seconds": 30}, 5.0)])
    fired = [
        Fired(12.3456, CallFault.SERVER_ERROR, actor="receiver", operation="start_execution"),
        Fired(13.0, CallFault.TIMEOUT, actor="extender", operation="change_message_visibility_batch"),
        Fired(14.0, CallFault.THROTTLED, actor="workflow", operation="update_item"),
        Fired(15.0, WorldFault.DUPLICATE_DELIVERY, context=json.dumps({"event": "delivered", "job_id": "a"})),
        Fired(120.0, WorldFault.EXTENDER_SKIPPED),
        Fired(130.0, WorldFault.EVENT_LATE),
    ]

    translation = translate(7, workload, fired)

    assert [entry.value for entry in translation.entries] == [
        {"id": "a", "type": "wait", "seconds": 30},
        {"id": "a.2", "raw_body": '{"job_id": "a", "params": {"seconds": 30}, "type": "wait"}', "expect": "deleted"},
        {"type": "aws_fault", "function": "receiver", "operation": "StartExecution", "mode": "server_error", "count": 1}
        | {"at_s": 12.345},
        {"type": "aws_fault", "function": "extender", "operation": "ChangeMessageVisibilityBatch", "mode": "timeout"}
        | {"count": 1, "at_s": 13.0},
        {"type": "duplicate_delivery", "job": "a", "at_s": 15.0},
        {"type": "pause_extender", "at_s": 119.5, "for_s": 1.0},
    ]
    assert translation.left_out == [
        "throttled on workflow's update_item at t=14s: an aws_fault names a function (receiver, extender, watcher)",
        "event_late at t=130s: no scenario item for it",
    ]
    load_scenario_data = translation.scenario([translation.entries[0], translation.entries[4]])
    assert load_scenario_data["faults"] == [{"type": "duplicate_delivery", "job": "a", "at_s": 15.0}]
    assert translation.scenario([translation.entries[1], translation.entries[4]])["faults"] == [], (
        "a fault naming a job taken out goes with it"
    )


def test_ddmin_finds_one_minimal_subset() -> None:
    needed = {3, 11, 12}

    assert ddmin(list(range(20)), lambda items: needed <= set(items)) == [3, 11, 12]


def test_translate_leaves_out_a_deploy_that_adds_a_type_and_its_jobs() -> None:
    """A scenario's catalog has no type a deploy adds, so its jobs are named left out with the deploy."""
    workload = Workload(
        [JobPlan("a", "wait", {"seconds": 30}, 0.0), JobPlan("b", ADDED_TYPE, {"seconds": 30}, 900.0)],
        definition_deploy=DeployPlan(600.0, "type_added"),
    )
    translation = translate(7, workload, [])
    assert [entry.value for entry in translation.entries] == [{"id": "a", "type": "wait", "seconds": 30}]
    assert translation.left_out == [
        f"b: a job of the type the deploy adds ({ADDED_TYPE})",
        "the deploy (type_added) at 600 s",
    ]
