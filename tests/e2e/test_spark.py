"""The Spark pipeline as a long job: the workflow's token step served by the local Spark worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from longjobs.offline.runtime import partition_dir
from longjobs.offline.scenario import SparkJob
from longjobs.pipeline.generate import read_manifest
from tests.e2e.conftest import SPARK_HEARTBEAT_S, UNHURRIED_HEARTBEAT_S, Runner, assert_hidden_while_running
from tests.short_settings import SPARK_THRESHOLD

pytestmark = pytest.mark.e2e


def test_spark_job_runs_end_to_end_on_tiny_partition(run: Runner, tmp_path: Path) -> None:
    result = run(
        settings=SPARK_THRESHOLD,
        jobs=[{"id": "events", "type": "spark", "events": 400}],
        spark_heartbeat_s=UNHURRIED_HEARTBEAT_S,
    )

    job = result.report["jobs"]["events"]
    assert result.report["ok"] is True, result.violations
    assert (job["final"], job["executions"], job["deliveries"], job["released"]) == ("deleted", 1, 1, 0)
    truth = read_manifest(partition_dir(tmp_path, SparkJob(id="events", type="spark", events=400)))
    assert truth is not None and truth.events == 400
    summary = job["summary"]
    assert summary["rows_read"] == truth.events
    assert summary["duplicates_dropped"] == truth.duplicates
    assert summary["rows_written"]["events"] == truth.unique_valid
    assert Path(summary["outputs"]["events"]).is_dir(), "the curated partition was written"
    assert_hidden_while_running(result, "events")


def test_spark_worker_killed_mid_job_released_after_heartbeat_timeout(run: Runner) -> None:
    result = run(
        settings=SPARK_THRESHOLD,
        jobs=[{"id": "orphan", "type": "spark", "events": 200}],
        faults=[{"type": "kill_worker", "job": "orphan", "after_s": 1}],
    )

    job = result.report["jobs"]["orphan"]
    assert result.report["ok"] is True, result.violations
    first, second = result.tracks["orphan"].executions
    assert (first.status, second.status) == ("FAILED", "SUCCEEDED")
    assert first.stopped is not None
    assert first.stopped - first.started >= 1 + SPARK_HEARTBEAT_S - 0.5, "released only after the heartbeat timeout"
    # The next attempt waits out the heartbeat timeout after the lock's release: the processor cannot tell
    # a killed worker from one whose run goes on until its next heartbeat is refused (`longjobs.engine.runs`).
    assert second.started >= first.stopped + SPARK_HEARTBEAT_S - 0.5, "started before the previous run could end"
    # What holds whatever the interleaving: every delivery ended in a release or in that wait, and none came
    # while the job ran. On a busy machine, reconciliation (the watcher heard the FAILED end) and the
    # workflow's own failure path may interleave so that a release and a redelivery come before the second
    # execution (a clean-clone CI run beside other work saw 2 releases, with the same two executions).
    assert job["released"] >= 1 and job["deliveries"] >= job["released"] + 1
    assert job["redelivered_while_running"] == 0
    assert job["final"] == "deleted" and job["summary"]["rows_read"] == 200


READ_TEXT = """
def run(spark, params):
    return {"lines": spark.read.text(params["input"]).count()}
"""


def test_spark_job_failure_reaches_the_dlq_naming_the_spark_error(run: Runner, tmp_path: Path) -> None:
    """A PySpark job reading a path that does not exist: Spark's `AnalysisException` and its message
    travel, as in AWS, from the task failure (`SendTaskFailure` error and cause) to the lease's last
    error (the whole cause) and the DLQ message's `ErrorMessage` (cut to its limit)."""
    (tmp_path / "read_text.py").write_text(READ_TEXT)
    missing = tmp_path / "no-such-input"
    read_type = {
        "name": "read_text",
        "runner": "pyspark",
        "entry": f"{tmp_path / 'read_text.py'}:run",
        "params_schema": {"type": "object", "required": ["input"], "properties": {"input": {"type": "string"}}},
    }

    result = run(
        settings={**SPARK_THRESHOLD, "max_attempts": 1},
        job_types=[read_type],
        jobs=[{"id": "missing", "type": "read_text", "params": {"input": str(missing)}, "expect": "dlq"}],
    )

    assert result.report["ok"] is True, result.violations
    job, track = result.report["jobs"]["missing"], result.tracks["missing"]
    assert (job["final"], job["executions"]) == ("dlq", 1)
    assert job["dlq_error"].startswith("AttemptsExhausted: AnalysisException: [PATH_NOT_FOUND] Path does not exist"), (
        job["dlq_error"]
    )
    assert str(missing) in job["dlq_error"]
    assert track.lease is not None and track.lease.last_error is not None
    # The receiver closes the lease with its reason as the error and the last attempt's error (the task
    # failure's error and whole cause, as the workflow stored them) as the cause.
    last = track.lease.last_error
    assert last.error == "AttemptsExhausted" and last.cause is not None
    assert last.cause.startswith("AnalysisException: [PATH_NOT_FOUND] Path does not exist")
    assert str(missing) in last.cause
    [attempt] = track.lease.history
    assert attempt.error is not None and attempt.error.error == "AnalysisException"
