"""The report's new measures and `ok` rules, as pure functions of observed tracks and the faults' record."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from longjobs.engine.lease import LastError, Lease, LeaseStatus
from longjobs.offline.faults import Faults, RunSlot
from longjobs.offline.observe import Delivery, Execution, Track
from longjobs.offline.report import JOB_FAILED, TIMED_OUT, build_report, max_concurrent, summary_table, violations
from longjobs.offline.scenario import Scenario, parse_scenario
from tests.short_settings import SHORT_THRESHOLD

ARN = "arn:aws:states:us-east-1:123456789012:execution:long-jobs:"
SETTINGS = SHORT_THRESHOLD


def scenario(*faults: dict[str, Any]) -> Scenario:
    return parse_scenario({"settings": SETTINGS, "jobs": [{"id": "a", "type": "wait", "seconds": 5}], "faults": faults})


def run(start: float, stop: float | None, name: str = "m-1", status: str = "SUCCEEDED") -> Execution:
    return Execution(name, status if stop is not None else "RUNNING", start, stop)


def lease(status: LeaseStatus = LeaseStatus.SUCCEEDED, attempt: int = 1, received_at: float = 100.0) -> Lease:
    return Lease(
        message_id="m",
        queue_url="q",
        receipt_handle="h",
        receive_count=attempt,
        received_at=received_at,
        visible_until=received_at + 4,
        renew_until=received_at + 300,
        status=status,
        execution_arn=f"{ARN}m-{attempt}",
        result={"waited_s": 5} if status is LeaseStatus.SUCCEEDED else None,
    )


def track(*executions: Execution, final: str = "deleted", **fields: Any) -> Track:
    made = Track(job_id="a", message_id="m", sent_at=100.0, executions=list(executions), final=final, **fields)
    if "lease" not in fields:
        made.lease = lease()
    return made


def faults_of(made: Scenario, start: float = 100.0) -> Faults:
    faults = Faults(made, clock=lambda: start)
    faults.begin()
    return faults


def test_offline_report_max_concurrent_sweeps_starts_and_stops() -> None:
    assert max_concurrent([]) == 0
    assert max_concurrent([run(0, 5)]) == 1
    assert max_concurrent([run(0, 5), run(5, 9, "m-2")]) == 1, "one ends as the next starts"
    assert max_concurrent([run(0, 5), run(4, 9, "m-2"), run(4.5, 6, "m-3")]) == 3
    assert max_concurrent([run(0, 5), run(6, None, "m-2"), run(7, 8, "m-3")]) == 2, "still running counts to the end"


def test_double_run_breaks_ok_and_is_counted() -> None:
    made = scenario()
    faults = faults_of(made)
    overlapping = track(run(101, 110, status="ABORTED"), run(105, 111, "m-2"))

    found = violations(made, {"a": overlapping}, faults, end=120)
    report = build_report(made, {"a": overlapping}, {}, 20, faults=faults, end=120)

    assert "a: 2 executions of its message RUNNING at once (invariant 8)" in found
    assert "a: a second execution started while one ran (invariant 4)" in found, "the older check stays"
    assert report["jobs"]["a"]["max_concurrent_executions"] == 2
    assert report["totals"]["double_runs"] == 1


def test_sequential_executions_are_not_a_double_run() -> None:
    made = scenario()
    report = build_report(
        made, {"a": track(run(101, 103, status="FAILED"), run(104, 110, "m-2"))}, {}, 20, faults=faults_of(made)
    )

    assert report["totals"]["double_runs"] == 0
    assert report["jobs"]["a"]["max_concurrent_executions"] == 1


def test_stuck_lease_is_an_active_lease_without_a_running_execution() -> None:
    made = scenario()
    faults = faults_of(made)
    held = track(run(101, 104, status="ABORTED"), final="queued", lease=lease(LeaseStatus.ACTIVE))

    found = violations(made, {"a": held}, faults, end=120)
    report = build_report(made, {"a": held}, {}, 20, faults=faults, end=120)

    assert "a: lease left ACTIVE at the end while its execution m-1 was not running: a stuck lease" in found
    assert (report["jobs"]["a"]["stuck_lease"], report["totals"]["stuck_leases"]) == (True, 1)

    running = track(run(101, None), final="queued", lease=lease(LeaseStatus.ACTIVE))
    running.running_at_end = frozenset({"m-1"})
    assert not any("stuck" in v for v in violations(made, {"a": running}, faults, end=120)), "its execution runs"
    just_ended = track(run(101, 118.5, status="ABORTED"), final="queued", lease=lease(LeaseStatus.ACTIVE))
    assert not any("stuck" in v for v in violations(made, {"a": just_ended}, faults, end=120)), (
        "ended too recently for reconciliation or the watcher to have settled it"
    )


def test_lapse_counted_unless_a_fault_explains_it() -> None:
    made = scenario()
    faults = faults_of(made)
    lapsed = track(
        run(101, 110),
        deliveries=[Delivery(100.5, 1, False), Delivery(106.0, 2, True)],
    )

    found = violations(made, {"a": lapsed}, faults, end=120)
    assert "a: delivered 1 time(s) while its job ran (0 caused by a fault): a lapse (invariant 1)" in found
    assert build_report(made, {"a": lapsed}, {}, 20, faults=faults)["totals"]["lapses"] == 1

    faults.runs = [RunSlot(104.0, "lost"), RunSlot(105.0, "crashed"), RunSlot(106.5, "ran")]
    assert not any("lapse" in v for v in violations(made, {"a": lapsed}, faults, end=120)), "two runs lost in a row"
    report = build_report(made, {"a": lapsed}, {}, 20, faults=faults)
    assert (report["jobs"]["a"]["lapses"], report["jobs"]["a"]["redelivered_while_running"]) == (0, 1)


def test_offline_report_lost_message_and_faults_reported_in_totals() -> None:
    made = scenario({"type": "lose_scheduled_runs", "probability": 0.5})
    faults = faults_of(made)
    faults.injected.update({"extender_skipped": 3, "crash_before": 1})
    lost = track(run(101, 103, status="FAILED"), final="lost", lease=lease(LeaseStatus.RELEASED))

    found = violations(made, {"a": lost}, faults, end=120)
    totals = build_report(made, {"a": lost}, {}, 20, faults=faults)["totals"]

    assert "a: message lost: not queued, not in the DLQ, and its job did not succeed" in found
    assert totals["lost_messages"] == 1
    assert totals["faults_injected"] == {"crash_before": 1, "extender_skipped": 3}
    assert totals["faults_missed"] == []


def fifo_scenario() -> Scenario:
    return parse_scenario(
        {
            "settings": {**SETTINGS, "fifo": True},
            "jobs": [
                {"id": "a1", "type": "wait", "seconds": 3, "group": "A"},
                {"id": "b1", "type": "wait", "seconds": 3, "group": "B"},
                {"id": "a2", "type": "wait", "seconds": 3, "group": "A"},
                {"id": "a3", "type": "wait", "seconds": 3, "group": "A", "dedup_id": "x"},
                {"id": "a4", "type": "wait", "seconds": 3, "group": "A", "dedup_id": "x"},
            ],
        }
    )


def fifo_track(job_id: str, message_id: str, group: str, *executions: Execution) -> Track:
    made = Track(job_id=job_id, message_id=message_id, sent_at=100.0, executions=list(executions), group=group)
    made.lease = lease()
    return made


def test_fifo_report_gives_each_jobs_group_and_last_execution_times() -> None:
    made = fifo_scenario()
    tracks = {
        "a1": fifo_track("a1", "m1", "A", run(100.5, 102, "m1-1", "FAILED"), run(102.5, 104.25, "m1-2")),
        "b1": fifo_track("b1", "m2", "B", run(100.6, 103.5, "m2-1")),
        "a2": fifo_track("a2", "m3", "A", run(104.5, 106, "m3-1")),
        "a3": fifo_track("a3", "m4", "A", run(106.5, None, "m4-1")),
        "a4": Track(job_id="a4", message_id="m4", sent_at=100.1, group="A", duplicate_of="a3"),
    }

    report = build_report(made, tracks, {}, 20, faults=faults_of(made), end=120)

    a1 = report["jobs"]["a1"]
    assert (a1["group"], a1["started_at"], a1["finished_at"]) == ("A", 2.5, 4.25), "its last execution"
    assert (report["jobs"]["a3"]["started_at"], report["jobs"]["a3"]["finished_at"]) == (6.5, None), "still running"
    assert report["jobs"]["a4"]["duplicate_of"] == "a3" and "duplicate_of" not in a1
    assert not any("group" in v or "duplicate" in v for v in violations(made, tracks, faults_of(made), end=120))


def test_fifo_group_order_broken_when_a_job_overlaps_or_passes_an_earlier_one() -> None:
    made = fifo_scenario()
    base = {
        "b1": fifo_track("b1", "m2", "B", run(100.6, 103.5, "m2-1")),
        "a3": fifo_track("a3", "m4", "A", run(110, 111, "m4-1")),
        "a4": Track(job_id="a4", message_id="m4", sent_at=100.1, group="A", duplicate_of="a3"),
    }
    overlapping = {
        **base,
        "a1": fifo_track("a1", "m1", "A", run(100.5, 104, "m1-1")),
        "a2": fifo_track("a2", "m3", "A", run(103, 106, "m3-1")),
    }
    passed = {
        **base,
        "a1": fifo_track("a1", "m1", "A", run(105, 107, "m1-1")),
        "a2": fifo_track("a2", "m3", "A", run(101, 104, "m3-1")),
    }
    tail = {  # a2 starts after a1 left its job, while a1's workflow still marks its lease: not an overlap
        **base,
        "a1": fifo_track("a1", "m1", "A", Execution("m1-1", "SUCCEEDED", 100.5, 104.2, job_ended=103.9)),
        "a2": fifo_track("a2", "m3", "A", run(104, 106, "m3-1")),
    }

    assert "group A: a2 started while a1 ran" in violations(made, overlapping, faults_of(made), end=120)
    assert "group A: a1 started after a2, which was sent after it" in violations(made, passed, faults_of(made), end=120)
    assert not any("group" in v for v in violations(made, tail, faults_of(made), end=120))


def test_fifo_duplicate_dropped_or_kept_against_the_scenario() -> None:
    made = fifo_scenario()
    tracks = {
        "a1": fifo_track("a1", "m1", "A", run(100.5, 102, "m1-1")),
        "b1": fifo_track("b1", "m2", "B", run(100.6, 103.5, "m2-1")),
        "a2": fifo_track("a2", "m3", "A", run(102.5, 104, "m3-1")),
        "a3": fifo_track("a3", "m4", "A", run(104.5, 106, "m4-1")),
        "a4": fifo_track("a4", "m5", "A", run(106.5, 108, "m5-1")),
    }

    found = violations(made, tracks, faults_of(made), end=120)

    assert "a4: not dropped, expected a duplicate of a3" in found


def test_offline_report_a_jobs_own_failure_is_reported_as_its_error_not_a_broken_invariant() -> None:
    """A job that fails by its own error (here an import its code lacks) is in front of its owner: the
    report's entry and the summary's note give the error and the attempts, and the violation says the
    job failed, naming the error, instead of only that its message ended somewhere unexpected."""
    made = scenario()
    faults = faults_of(made)
    failing = replace(
        lease(LeaseStatus.RELEASED, attempt=3), last_error=LastError("ModuleNotFoundError", "No module named 'helpers'")
    )
    failed = track(*(run(100 + n, 101 + n, f"m-{n}", "FAILED") for n in range(3)), final="queued", lease=failing)

    [found] = violations(made, {"a": failed}, faults, end=120)
    report = build_report(made, {"a": failed}, {}, 20, faults=faults, end=120)

    assert found == (
        f"{JOB_FAILED}: a: ModuleNotFoundError: No module named 'helpers' "
        "(3 attempt(s); its message ended queued, expected deleted)"
    )
    entry = report["jobs"]["a"]
    assert (entry["last_error"], entry["attempts"]) == ("ModuleNotFoundError: No module named 'helpers'", 3)
    assert "ModuleNotFoundError: No module named 'helpers'" in summary_table(report, {"a": "deleted"})

    aborted = track(run(100, 101, "m-1", "ABORTED"), final="dlq", lease=failing)
    [found] = violations(made, {"a": aborted}, faults, end=120)
    assert found == "a: ended dlq, expected deleted", "an execution the processor or a fault ended: not the job's"


def test_offline_report_a_job_still_queued_at_the_timeout_is_reported_as_timed_out() -> None:
    """A run ends before its `timeout_s` only once every message is settled: a job still queued at the end
    met the timeout, which the violation says, with the fix, instead of blaming the processor."""
    made = scenario()
    running = track(run(100, 120, "m-1", "ABORTED"), final="queued", lease=lease(LeaseStatus.ACTIVE))

    [found] = violations(made, {"a": running}, faults_of(made), end=120)

    assert found == (
        f"{TIMED_OUT}: a: its message was still queued when the run reached its timeout_s (180 s), expected "
        "deleted: a job that needs longer needs a longer timeout_s; one that should have ended by then is the "
        "processor's fault (its timeline shows why)"
    )
