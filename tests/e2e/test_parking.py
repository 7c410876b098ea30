"""Parking on the offline runtime: a type limited to 1 with a 60 s admission horizon, four 1 s jobs sent
at once. The first runs, the second waits in flight, and those beyond the horizon (the third and the
fourth when the four arrive in one batch) are parked: copied to the type's waiting queue, a new message
id each, the original acknowledged. They are then unparked and run from their copies. The report
follows each copy to its job. The scenario is the shipped `longjobs/offline/scenarios/parking.json`
(`python -m offline run --scenario ...`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from longjobs.engine.execution import parse_execution_name
from longjobs.engine.lease import LeaseStatus
from longjobs.offline.runtime import run_scenario
from longjobs.offline.scenario import parse_scenario

pytestmark = pytest.mark.e2e

SCENARIO = Path(__file__).parents[2] / "longjobs" / "offline" / "scenarios" / "parking.json"


def test_offline_runtime_parks_a_full_types_backlog_and_runs_every_job_once(tmp_path: Path) -> None:
    scenario = parse_scenario(json.loads(SCENARIO.read_text(encoding="utf-8")))
    limited = "one-at-a-time"
    assert scenario.job_catalog().limit(limited) == 1
    assert [job.id for job in scenario.jobs] == ["first", "second", "third", "fourth"]

    result = run_scenario(scenario, work_dir=tmp_path)

    report, tracks = result.report, result.tracks
    assert report["ok"] is True, result.violations
    jobs = report["jobs"]
    assert {job_id: (job["final"], job["executions"]) for job_id, job in jobs.items()} == {
        job_id: ("deleted", 1) for job_id in ("first", "second", "third", "fourth")
    }, "every job ran once"
    assert report["totals"]["max_concurrent_by_type"] == {limited: 1}, "one at a time (the jobs' spans)"
    assert report["totals"]["double_runs"] == report["totals"]["lapses"] == 0

    # Which jobs park depends on how the mapping's receives split the four messages (real time): all in
    # one batch parks the third and the fourth; a batch that takes fewer leaves a later one waiting in
    # flight instead. The simulation checks admission's choice on virtual time; here, that some park.
    parked = {job_id for job_id, job in jobs.items() if job["parked"]}
    assert parked, "beyond what the horizon can start: parked"
    assert "first" not in parked, "it found its slot free"
    assert report["totals"]["parked"] == len(parked)
    for job_id in parked:
        job, track = jobs[job_id], tracks[job_id]
        assert job["copies"] == track.copies and job["copies"], f"{job_id}: its copy is attributed to it"
        assert track.message_id not in track.copies, "a copy has a new message id"
        (execution,) = track.executions
        ran_from = (parse_execution_name(execution.name) or ("",))[0]
        assert ran_from in track.copies, f"{job_id}: its one execution ran from its copy"
        assert execution.status == "SUCCEEDED"
        assert track.lease is not None and track.lease.message_id == ran_from
        assert track.lease.status is LeaseStatus.SUCCEEDED, "the copy's lease, not the original's PARKED marker"
        assert track.deliveries, "the mapping delivered the original (the copy is received by admission)"
    for job_id in set(jobs) - parked:
        assert jobs[job_id]["copies"] == [] and tracks[job_id].copies == []
