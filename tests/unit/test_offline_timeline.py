"""The timeline draws the injected faults: every call a fault answered and every extender run lost to
one on the faults row, the job-aimed faults on their job's row, the windows in which faults excuse a
redelivery, and each delivery while a job ran as excused (with the excuse) or a lapse. Checked on what
is drawn (`fault_marks`, `delivery_marks`, `excuse_windows`), then once as a PNG; fake clocks only."""

from __future__ import annotations

from pathlib import Path

from longjobs.offline.faults import Faults, Injection
from longjobs.offline.observe import Delivery, Track
from longjobs.offline.report import build_report
from longjobs.offline.runtime import RunResult
from longjobs.offline.scenario import Scenario, parse_scenario
from longjobs.offline.scheduler import Scheduler
from longjobs.offline.timeline import Mark, delivery_marks, draw_timeline, excuse_windows, fault_marks
from tests.unit.test_offline_faults import FakeTime

START = 1_000.0


def scenario() -> Scenario:
    return parse_scenario(
        {
            "settings": {"policy": "adaptive", "extender_period_s": 1, "adaptive_lost_runs_survived": 2},
            "jobs": [{"id": "wait-45s", "type": "wait", "seconds": 45}, {"id": "spark", "type": "spark", "events": 10}],
            "faults": [
                {"type": "throttle", "operation": "ChangeMessageVisibilityBatch", "probability": 0.2},
                {"type": "pause_extender", "at_s": 15, "for_s": 2},
                {"type": "kill_worker", "job": "spark", "after_s": 3},
            ],
        }
    )


def faults_of(made: Scenario) -> tuple[Faults, FakeTime]:
    """The run's faults as recorded: 30 s of the extender's schedule (the pause skips its runs), one
    throttled renewal call at 4 s, and the Spark worker killed 3 s into the job started at 10 s."""
    fake = FakeTime(until=START + 30, now=START)
    faults = Faults(made, clock=fake.clock)
    faults.begin()
    Scheduler(lambda: None, 1.0, skip=faults.skip_run, clock=fake.clock, wait=fake.wait).run()
    faults.injections.append(Injection(START + 4.0, 0, "extender", "ChangeMessageVisibilityBatch", "throttled", False))
    fake.now = START + 10.0
    assert faults.kill_after("spark") == 3
    return faults, fake


def track(job_id: str, *redelivered_at: float) -> Track:
    deliveries = [Delivery(START + 0.2, 1, False), *(Delivery(START + at, 2, True) for at in redelivered_at)]
    return Track(job_id=job_id, message_id=f"m-{job_id}", sent_at=START, deliveries=deliveries, final="deleted")


def test_fault_marks_draw_answered_calls_lost_runs_and_job_faults() -> None:
    faults, _ = faults_of(scenario())

    marks = fault_marks(faults, START)

    assert marks == [
        Mark(None, 4.0, "throttled", "extender ChangeMessageVisibilityBatch"),
        Mark("spark", 13.0, "action", "kill_worker"),
        Mark(None, 15.0, "run", "extender run paused"),
        Mark(None, 16.0, "run", "extender run paused"),
    ]


def test_excuse_windows_shade_a_pause_longer_than_a_period_until_a_period_after() -> None:
    made = scenario()
    faults, _ = faults_of(made)

    assert excuse_windows(faults, made, START, START + 40) == [(15.0, 18.0)]


def test_delivery_marks_tell_excused_redeliveries_from_lapses() -> None:
    faults, _ = faults_of(scenario())

    marks = delivery_marks(track("wait-45s", 16.5, 25.0), faults, START)

    assert [(round(mark.at, 3), mark.kind, mark.label) for mark in marks] == [
        (0.2, "delivery", ""),
        (16.5, "excused", "excused: extender paused for more than one period"),
        (25.0, "lapse", "lapse: no injected fault explains it"),
    ]


def test_draw_timeline_writes_a_png_with_the_faults_row(tmp_path: Path) -> None:
    made = scenario()
    faults, _ = faults_of(made)
    tracks = {"wait-45s": track("wait-45s", 16.5), "spark": track("spark")}
    report = build_report(made, tracks, {}, 40.0, faults=faults)
    result = RunResult(report, [], tracks, START, START + 40.0, faults)
    path = tmp_path / "timeline.png"

    draw_timeline(result, made, path)

    assert path.read_bytes().startswith(b"\x89PNG")
