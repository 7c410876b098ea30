"""An offline run's history in the simulation's trace format (`longjobs.offline.history`), judged by the
independent checker (`longjobs.history.checker`): the real runtime's run holds the promise, and what it wrote
is enough for the checker to see a run that breaks it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from longjobs.offline.history import judge
from longjobs.offline.report import TIMED_OUT
from longjobs.offline.runtime import RunResult
from longjobs.offline.scenario import parse_scenario
from tests.e2e.conftest import SPARK_HEARTBEAT_S, Runner
from tests.short_settings import UNHURRIED_THRESHOLD

pytestmark = pytest.mark.e2e

JOBS: list[dict[str, Any]] = [
    {"id": "short", "type": "wait", "seconds": 3},
    {"id": "failing", "type": "wait", "seconds": 1, "fail": True},
    {"id": "poison", "raw_body": "{not json"},
]
SETTINGS = {**UNHURRIED_THRESHOLD, "max_attempts": 2}
"""Renewals fall due a second after each receive, 11 s before a 12 s visibility runs out: the run is judged to
have no lapse at all, and a machine busy with other work can stall the extender's 1 s schedule for seconds,
longer than a renewal 2.5 s ahead of a 5 s visibility survives."""


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    from longjobs.offline.runtime import run_scenario

    scenario = {"settings": SETTINGS, "jobs": JOBS, "spark_heartbeat_s": SPARK_HEARTBEAT_S, "timeout_s": 90}
    return run_scenario(parse_scenario(scenario), work_dir=tmp_path_factory.mktemp("history"))


def records(result: RunResult) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.history]


def scenario() -> Any:
    return parse_scenario({"settings": SETTINGS, "jobs": JOBS, "spark_heartbeat_s": SPARK_HEARTBEAT_S})


def test_history_offline_run_is_judged_by_the_checker(result: RunResult) -> None:
    assert result.report["ok"] is True, result.violations
    assert result.report["checker"] == {"records": len(result.history), "findings": []}
    events = [record["event"] for record in records(result)]
    assert events.count("sent") == 3 and events[-1] == "end"
    assert events.count("job_started") == 3, "short once, failing on each of its two attempts"
    assert events.count("execution_ended") == 3
    dead = {record["job_id"]: record["reason"] for record in records(result) if record["event"] == "dead_lettered"}
    assert set(dead) == {"failing", "poison"}
    assert all(reason.get("ErrorType") and reason.get("ErrorMessage") for reason in dead.values())
    ended = [record for record in records(result) if record["event"] == "job_ended"]
    assert [record["succeeded"] for record in ended if record["job_id"] == "short"] == [True]


def test_history_overlapping_run_is_found(result: RunResult) -> None:
    """A second execution running the job while the first does, written into the run's history: the
    checker finds it, so the history carries what `single_execution` needs."""
    lines = [json.loads(line) for line in result.history]
    started = next(r for r in lines if r["event"] == "job_started" and r["job_id"] == "short")
    twin = {**started, "execution": started["execution"] + "-twin", "t": started["t"] + 0.5}
    lines.insert(lines.index(started) + 1, twin)
    found = judge(scenario().job_catalog(), (json.dumps(record) for record in lines))
    assert {finding.property for finding in found} == {"single_execution"}, "by its message and by its job id"


def test_history_lost_message_is_found(result: RunResult) -> None:
    """The failing job's DLQ copy taken out of the history: the checker finds the job lost."""
    lines = [r for r in records(result) if not (r["event"] == "dead_lettered" and r["job_id"] == "failing")]
    found = judge(scenario().job_catalog(), (json.dumps(record) for record in lines))
    assert [(finding.property, "failing" in finding.detail) for finding in found] == [("nothing_lost", True)]


def test_history_lapse_is_found_unless_a_fault_excuses_it(result: RunResult) -> None:
    """A delivery of the running job's message: a lapse, unless the history names the fault behind it."""
    lines = records(result)
    started = next(r for r in lines if r["event"] == "job_started" and r["job_id"] == "short")
    delivery = {"t": started["t"] + 0.5, "actor": "sqs", "event": "delivered", "message_id": started["message_id"]}
    delivery |= {"job_id": "short", "receive_count": 2, "duplicate": False}
    for excuse, properties in ((None, ["no_lapse"]), ("pause_extender", [])):
        with_delivery = [*lines]
        with_delivery.insert(lines.index(started) + 1, delivery | ({"excused": excuse} if excuse else {}))
        found = judge(scenario().job_catalog(), (json.dumps(record) for record in with_delivery))
        assert [finding.property for finding in found] == properties


def test_history_a_run_its_timeout_ends_leaves_expected_messages_queued_and_reports_the_others_timed_out(
    run: Runner,
) -> None:
    """A job expected `queued` is still queued when the run's timeout ends it: the checker takes the run as
    stopped, not settled, so it finds nothing lost; a job expected to finish is reported as timed out."""
    result = run(
        settings=UNHURRIED_THRESHOLD,  # judged to have no lapse: a loaded machine may stall the extender
        jobs=[
            {"id": "done", "type": "wait", "seconds": 1},
            {"id": "held", "type": "wait", "seconds": 120, "expect": "queued"},
            {"id": "late", "type": "wait", "seconds": 120},
        ],
        timeout_s=12,
    )

    assert result.report["checker"]["findings"] == [], result.report["checker"]
    assert result.violations == [
        f"{TIMED_OUT}: late: its message was still queued when the run reached its timeout_s (12 s), expected "
        "deleted: a job that needs longer needs a longer timeout_s; one that should have ended by then is the "
        "processor's fault (its timeline shows why)"
    ]
    assert {job: entry["final"] for job, entry in result.report["jobs"].items()} == {
        "done": "deleted",
        "held": "queued",
        "late": "queued",
    }
