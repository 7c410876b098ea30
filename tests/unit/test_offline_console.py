"""The demo's console tells the truth: a delivery while a job ran that an injected fault explains is
counted as excused and said with its excuse, only the rest are lapses, and the console, the summary
table and the report agree. On fake clocks and in-memory streams: no real-time wait."""

from __future__ import annotations

import io
from typing import Any

from longjobs.engine.lease import Lease, LeaseStatus
from longjobs.offline.faults import Faults
from longjobs.offline.observe import Delivery, Track
from longjobs.offline.progress import Counts, Progress, RedeliveryNotes, live_counts, progress_line
from longjobs.offline.report import (
    DUPLICATE_DELIVERY_EXCUSE,
    Redelivery,
    build_report,
    redelivery_verdicts,
    summary_table,
)
from longjobs.offline.scenario import Scenario, parse_scenario
from longjobs.offline.scheduler import Scheduler
from tests.unit.test_offline_faults import FakeTime

START = 1_000.0
PAUSE = {"type": "pause_extender", "at_s": 15, "for_s": 2}
SETTINGS = {"policy": "adaptive", "extender_period_s": 1, "adaptive_lost_runs_survived": 2}


def demo_like(*faults: dict[str, Any]) -> Scenario:
    return parse_scenario(
        {
            "settings": SETTINGS,
            "jobs": [
                {"id": "wait-45s", "type": "wait", "seconds": 45},
                {"id": "wait-20s", "type": "wait", "seconds": 20},
            ],
            "faults": list(faults),
        }
    )


def paused_faults(scenario: Scenario) -> Faults:
    """The scenario's faults after its extender schedule ran for 30 s on a fake clock (the pause's runs skipped)."""
    fake = FakeTime(until=START + 30, now=START)
    faults = Faults(scenario, clock=fake.clock)
    faults.begin()
    Scheduler(lambda: None, 1.0, skip=faults.skip_run, clock=fake.clock, wait=fake.wait).run()
    return faults


def lease() -> Lease:
    return Lease(
        message_id="m-45",
        queue_url="q",
        receipt_handle="h",
        receive_count=2,
        received_at=START,
        visible_until=START + 4,
        renew_until=START + 300,
        status=LeaseStatus.SUCCEEDED,
        execution_arn="arn:aws:states:us-east-1:123456789012:execution:long-jobs:m-45-1",
        result={"waited_s": 45},
    )


def track(job_id: str, *redelivered_at: float) -> Track:
    """A job whose message was delivered at the start, then again at each of `redelivered_at` (seconds
    since the start) while its job ran."""
    deliveries = [Delivery(START + 0.2, 1, False)]
    deliveries += [Delivery(START + at, 2 + i, True) for i, at in enumerate(redelivered_at)]
    made = Track(job_id=job_id, message_id=f"m-{job_id}", sent_at=START, deliveries=deliveries, final="deleted")
    made.lease = lease()
    return made


def test_redelivery_verdicts_excuse_a_paused_extender_and_leave_the_rest_lapses() -> None:
    faults = paused_faults(demo_like(PAUSE))
    job = track("wait-45s", 16.0, 25.0)

    verdicts = redelivery_verdicts(job, faults)

    assert verdicts == [
        Redelivery(START + 16.0, "extender paused for more than one period"),
        Redelivery(START + 25.0, None),
    ]
    assert redelivery_verdicts(job, None) == [Redelivery(START + 16.0, None), Redelivery(START + 25.0, None)]


def test_redelivery_verdicts_duplicate_delivery_fault_excuses_as_many_as_took_effect() -> None:
    faults = paused_faults(demo_like({"type": "duplicate_delivery", "job": "wait-45s", "at_s": 5}))
    faults.done.append("duplicate_delivery wait-45s")  # what TimedActions records when its delivery is seen

    verdicts = redelivery_verdicts(track("wait-45s", 6.0, 9.0), faults)

    assert [verdict.excuse for verdict in verdicts] == [DUPLICATE_DELIVERY_EXCUSE, None]


def test_report_lists_each_excused_redelivery_and_counts_only_the_rest_as_lapses() -> None:
    scenario = demo_like(PAUSE)
    faults = paused_faults(scenario)
    tracks = {"wait-45s": track("wait-45s", 16.0), "wait-20s": track("wait-20s")}

    report = build_report(scenario, tracks, {}, 40.0, faults=faults)

    job = report["jobs"]["wait-45s"]
    assert (job["redelivered_while_running"], job["lapses"]) == (1, 0)
    assert job["redeliveries_excused"] == [{"at_s": 16.0, "excuse": "extender paused for more than one period"}]
    assert report["jobs"]["wait-20s"]["redeliveries_excused"] == []
    totals = report["totals"]
    assert (totals["redelivered_while_running"], totals["redeliveries_excused"], totals["lapses"]) == (1, 1, 0)


def test_offline_console_live_counts_agree_with_the_report_on_redeliveries_excuses_and_lapses() -> None:
    scenario = demo_like(PAUSE)
    faults = paused_faults(scenario)
    tracks = {"wait-45s": track("wait-45s", 16.0, 25.0), "wait-20s": track("wait-20s")}

    counts = live_counts(tracks.values(), {"wait-45s"}, faults)
    totals = build_report(scenario, tracks, {}, 40.0, faults=faults)["totals"]

    assert (counts.redelivered, counts.excused, counts.lapses) == (2, 1, 1)
    assert (counts.redelivered, counts.excused, counts.lapses) == (
        totals["redelivered_while_running"],
        totals["redeliveries_excused"],
        totals["lapses"],
    )
    assert counts.faults == sum(totals["faults_injected"].values()) == faults.injected["extender_paused"] > 0
    assert (counts.running, counts.done) == (1, 2)


def test_progress_line_names_what_each_figure_counts() -> None:
    counts = Counts(
        queued=0, running=8, done=0, failed=1, dlq=1, renewals=19, faults=5, redelivered=1, excused=1, lapses=0
    )

    line = progress_line(14.2, counts)

    assert line == (
        "[   14 s] queued 0  running 8  done 0  failed attempts 1  dlq 1  renewals 19  faults injected 5  "
        "redelivered while running 1 (1 excused by a fault)  lapses 0"
    )


def test_redelivery_notes_say_an_excuse_at_once_and_a_lapse_only_once_judged() -> None:
    faults = paused_faults(demo_like(PAUSE))
    job = track("wait-45s", 16.0, 25.0)
    notes = RedeliveryNotes(faults, origin=START, verdict_after_s=61.0)

    first = notes.new([job], START + 26.0)
    meanwhile = notes.new([job], START + 60.0)
    judged = notes.new([job], START + 25.0 + 61.0)

    assert first == [
        "wait-45s delivered at 16.0 s while its job ran: excused, extender paused for more than one period"
    ]
    assert meanwhile == [], "the excused one is said once; the other may still be excused by a fault under way"
    assert judged == ["wait-45s delivered at 25.0 s while its job ran, and no injected fault explains it: a lapse"]
    assert notes.new([job], START + 200.0, final=True) == []


def test_redelivery_notes_judge_every_open_lapse_when_the_run_ends() -> None:
    notes = RedeliveryNotes(paused_faults(demo_like()), origin=START, verdict_after_s=61.0)

    assert notes.new([track("wait-20s", 3.0)], START + 4.0) == []
    assert notes.new([track("wait-20s", 3.0)], START + 4.0, final=True) == [
        "wait-20s delivered at 3.0 s while its job ran, and no injected fault explains it: a lapse"
    ]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_note_takes_a_line_of_its_own_above_the_live_line() -> None:
    stream = Terminal()
    clock = FakeTime(until=0.0)
    progress = Progress(stream, clock=clock.clock)
    counts = Counts(
        queued=1, running=1, done=0, failed=0, dlq=0, renewals=2, faults=1, redelivered=0, excused=0, lapses=0
    )

    progress.update(3.0, counts)
    progress.note(4.0, "wait-45s delivered at 4.0 s while its job ran: excused, a fault")
    progress.update(4.1, counts)  # within the second: drawn again all the same, the note wiped it

    live = progress_line(3.0, counts)
    assert stream.getvalue() == (
        "\r"
        + live
        + "\r"
        + " " * len(live)
        + "\r"
        + "[    4 s] wait-45s delivered at 4.0 s while its job ran: excused, a fault\n"
        + "\r"
        + progress_line(4.1, counts)
    )


def test_summary_table_splits_redeliveries_into_excused_and_lapses_and_names_the_excuse() -> None:
    scenario = demo_like(PAUSE)
    faults = paused_faults(scenario)
    report = build_report(
        scenario, {"wait-45s": track("wait-45s", 16.0), "wait-20s": track("wait-20s")}, {}, 40.0, faults=faults
    )

    table = summary_table(report, {"wait-45s": "deleted", "wait-20s": "deleted"}).splitlines()

    header = table[0].split()
    row = dict(zip(header[:11], table[2].split(), strict=False))
    assert table[2].startswith("wait-45s")
    assert (row["redelivered"], row["excused"], row["lapses"]) == ("1", "1", "0")
    assert any(line.startswith("redelivered: deliveries while its job still ran; excused:") for line in table)
    assert "1 delivered while running (1 excused by injected faults), 0 lapses" in table[-3]
    assert (
        table[-1] == "excused: wait-45s delivered at 16 s while its job ran: extender paused for more than one period"
    )
