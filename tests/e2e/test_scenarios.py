"""Small scenarios end to end: renewals per policy, a failure walked to the DLQ, an abort released by
reconciliation or by the watcher, throttling and a paused extender, duplicates, a poison message, and
one scenario per chaos fault type showing it takes effect."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import Runner, assert_hidden_while_running
from tests.short_settings import SHORT_THRESHOLD

pytestmark = pytest.mark.e2e

POLICIES = {
    "threshold": SHORT_THRESHOLD,
    "remaining": {**SHORT_THRESHOLD, "policy": "remaining"},
    # Chunks of 6 s: the lead survives one lost run followed by one a full period late (1 s period).
    "adaptive": {
        "policy": "adaptive",
        "extender_period_s": 1,
        "adaptive_lost_runs_survived": 1,
        "adaptive_ceiling_s": 6,
        "release_delay_base_s": 0,
        "max_receive_count": 3,
    },
}


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_renewal_keeps_long_job_hidden_across_several_timeouts(run: Runner, policy: str) -> None:
    result = run(settings=POLICIES[policy], jobs=[{"id": "long", "type": "wait", "seconds": 12}])

    assert result.violations == []
    job = result.report["jobs"]["long"]
    assert job["final"] == "deleted"
    assert job["summary"] == {"waited_s": 12}
    assert (job["deliveries"], job["executions"], job["redelivered_while_running"]) == (1, 1, 0)
    assert job["renewals"] >= 2, "a 12 s job outlasts two 5-6 s timeouts: it needs renewals"
    assert_hidden_while_running(result, "long")
    assert result.report["api_calls"]["ChangeMessageVisibilityBatch"] >= job["renewals"] / 10
    assert result.report["ok"] is True


def test_failing_job_walked_to_dlq_after_max_receives(run: Runner) -> None:
    result = run(settings=SHORT_THRESHOLD, jobs=[{"id": "bad", "type": "wait", "seconds": 1, "fail": True}])

    job = result.report["jobs"]["bad"]
    assert result.report["ok"] is True, result.violations
    assert job["final"] == "dlq"
    assert job["executions"] == job["released"] == 3, "one execution per attempt, each released"
    assert job["deliveries"] == 4, "the receive after the third failed attempt sends it to the DLQ"
    assert job["dlq_error"] == "AttemptsExhausted: WaitJobFailed: the wait job was asked to fail"
    assert [e.status for e in result.tracks["bad"].executions] == ["FAILED"] * 3


def test_poison_message_goes_to_dlq_on_first_receive(run: Runner) -> None:
    result = run(
        settings=SHORT_THRESHOLD,
        jobs=[{"id": "poison", "raw_body": "{not json"}, {"id": "fine", "type": "wait", "seconds": 1}],
    )

    poison = result.report["jobs"]["poison"]
    assert result.report["ok"] is True, result.violations
    assert (poison["final"], poison["deliveries"], poison["executions"]) == ("dlq", 1, 0)
    assert poison["dlq_error"].startswith("NotJson: body is not JSON")
    assert result.report["jobs"]["fine"]["final"] == "deleted", "the rest of the batch is unaffected"


def test_abort_released_by_reconciliation_then_rerun(run: Runner) -> None:
    result = run(
        settings=SHORT_THRESHOLD,
        jobs=[{"id": "aborted", "type": "wait", "seconds": 6}],
        faults=[
            {"type": "abort_execution", "job": "aborted", "at_s": 2},
            {"type": "drop_status_events", "probability": 1.0},  # the watcher hears nothing
        ],
    )

    job = result.report["jobs"]["aborted"]
    assert result.report["ok"] is True, result.violations
    assert [e.status for e in result.tracks["aborted"].executions] == ["ABORTED", "SUCCEEDED"]
    assert (job["released"], job["deliveries"], job["redelivered_while_running"]) == (1, 2, 0)
    assert job["final"] == "deleted"
    assert result.faults.done == ["abort_execution aborted"]
    assert result.report["totals"]["faults_injected"] == {"abort_execution": 1, "dropped_event": 1}


def test_extender_throttled_and_paused_without_lapse(run: Runner) -> None:
    result = run(
        settings=POLICIES["adaptive"],
        jobs=[{"id": "steady", "type": "wait", "seconds": 14}],
        faults=[
            {"type": "throttle", "operation": "ChangeMessageVisibilityBatch", "probability": 0.5},
            {"type": "pause_extender", "at_s": 4, "for_s": 2},
        ],
        # This seed's draws throttle the first call and never two in a row in the first 25 calls: each
        # call is throttled at most once, so botocore's backoff (under 1 s) fits in the 3.5 s lead.
        # Three in a row would back off for up to 3 s, several 1 s periods: lapses the faults excuse.
        seed=970,
    )

    job = result.report["jobs"]["steady"]
    assert result.faults.throttled > 0, "the throttle fault must have hit"
    assert result.report["ok"] is True, result.violations
    assert (job["final"], job["redelivered_while_running"], job["executions"]) == ("deleted", 0, 1)
    assert job["renewals"] >= 2
    assert_hidden_while_running(result, "steady")


def test_duplicate_delivery_starts_no_second_execution(run: Runner) -> None:
    result = run(
        settings=SHORT_THRESHOLD,
        jobs=[{"id": "dup", "type": "wait", "seconds": 6}],
        faults=[{"type": "duplicate_delivery", "job": "dup", "at_s": 3}],
    )

    job = result.report["jobs"]["dup"]
    assert result.report["ok"] is True, result.violations
    assert (job["deliveries"], job["redelivered_while_running"], job["executions"]) == (2, 1, 1)
    assert job["final"] == "deleted"


def test_status_event_releases_aborted_job_through_the_watcher(run: Runner) -> None:
    result = run(
        # Reconciliation waits 30 s: only the watcher, fed the status event, can release before the job ends.
        settings={**SHORT_THRESHOLD, "reconcile_grace_s": 30},
        jobs=[{"id": "aborted", "type": "wait", "seconds": 6}],
        faults=[{"type": "abort_execution", "job": "aborted", "at_s": 2}],
        timeout_s=25,
    )

    job = result.report["jobs"]["aborted"]
    assert result.faults.done == ["abort_execution aborted"]
    assert [e.status for e in result.tracks["aborted"].executions] == ["ABORTED", "SUCCEEDED"]
    assert (job["released"], job["final"]) == (1, "deleted")
    assert result.tracks["aborted"].closes[0] - result.tracks["aborted"].executions[0].stopped < 5, "not 30 s"


def test_receiver_crash_at_start_execution_fails_its_batch(run: Runner) -> None:
    result = run(
        settings=SHORT_THRESHOLD,
        jobs=[{"id": "crashed", "type": "wait", "seconds": 2}],
        faults=[
            {"type": "aws_fault", "function": "receiver", "operation": "StartExecution", "mode": "crash", "count": 1}
        ],
    )

    job = result.report["jobs"]["crashed"]
    assert result.report["totals"]["faults_injected"] == {"crash": 1}
    assert job["deliveries"] == 2, "the lease was released (the execution never started) and received again"
    assert (job["executions"], job["final"]) == (1, "deleted")


def test_ambiguous_start_execution_runs_the_job_once(run: Runner) -> None:
    result = run(
        settings=SHORT_THRESHOLD,
        jobs=[{"id": "ambiguous", "type": "wait", "seconds": 2}],
        faults=[
            {
                "type": "aws_fault",
                "function": "receiver",
                "operation": "StartExecution",
                "mode": "ambiguous",
                "count": 1,
            }
        ],
    )

    job = result.report["jobs"]["ambiguous"]
    assert result.report["totals"]["faults_injected"] == {"ambiguous": 1}
    assert result.report["api_calls"]["StartExecution"] == 2, "the ambiguous start and botocore's retry"
    assert (job["deliveries"], job["executions"], job["final"]) == (1, 1, "deleted")


def test_lost_scheduled_runs_excuse_the_lapse_they_cause(run: Runner) -> None:
    result = run(
        settings=SHORT_THRESHOLD,
        jobs=[{"id": "unrenewed", "type": "wait", "seconds": 6}],
        faults=[{"type": "lose_scheduled_runs", "probability": 1.0}],
    )

    job = result.report["jobs"]["unrenewed"]
    assert result.report["totals"]["faults_injected"]["lost_run"] >= 5
    assert job["renewals"] == 0, "no extender run"
    assert job["redelivered_while_running"] >= 1, "its 4 s timeout ran out under a 6 s job"
    assert job["lapses"] == 0, "every run lost: more than the settings survive"
    assert result.report["totals"]["double_runs"] == 0
