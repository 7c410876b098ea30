"""The Spark pipeline as a long job: the workflow's token step served by the local Spark worker."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from longjobs.offline.runtime import partition_dir
from longjobs.offline.scenario import SparkJob
from longjobs.offline.worker import SparkWorker, job_group
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
    first, *later = result.tracks["orphan"].executions
    # On a machine slow enough, a retry's heartbeats (10 s apart at most here) come late too: that attempt
    # fails the same way and the next one runs. Each ended before the next began (checked below).
    assert first.status == "FAILED" and later and later[-1].status == "SUCCEEDED", result.tracks["orphan"]
    assert all(execution.status == "FAILED" for execution in later[:-1]), result.tracks["orphan"]
    for before, after in itertools.pairwise(result.tracks["orphan"].executions):
        assert before.stopped is not None and after.started >= before.stopped, "a run began before the last ended"
    second = later[0]
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


FAILS = """
def run(spark, params):
    rows = spark.range(10).count()
    raise ValueError(f"asked to fail after {rows} rows")
"""


def test_spark_job_failure_is_retried_without_waiting_out_the_heartbeat_timeout(run: Runner, tmp_path: Path) -> None:
    """The worker reported the failure once the run's Spark jobs had ended: the retry comes after the
    type's release delay (none here), not after the step's heartbeat timeout."""
    (tmp_path / "fails.py").write_text(FAILS)
    fails_type = {"name": "fails", "runner": "pyspark", "entry": f"{tmp_path / 'fails.py'}:run"}

    result = run(
        settings={**SPARK_THRESHOLD, "max_attempts": 2},
        job_types=[fails_type],
        jobs=[{"id": "fails", "type": "fails", "params": {}, "expect": "dlq"}],
        spark_heartbeat_s=UNHURRIED_HEARTBEAT_S,
    )

    assert result.report["ok"] is True, result.violations
    assert result.report["jobs"]["fails"]["dlq_error"] == "AttemptsExhausted: ValueError: asked to fail after 10 rows"
    first, second = result.tracks["fails"].executions
    assert first.stopped is not None
    gap = second.started - first.stopped
    assert gap < UNHURRIED_HEARTBEAT_S / 2, f"the retry started {gap:.1f} s after the failed attempt ended"


def test_spark_failed_runs_leftover_jobs_are_cancelled_before_its_failure_is_sent() -> None:
    """A job that raised may leave Spark jobs running in its group (a thread it started, which inherits
    the group). The worker cancels them and sends the failure once Spark's status tracker shows none."""
    from pyspark import InheritableThread

    from longjobs.offline.spark import group_running, local_session

    token = "leftover-token"
    group = job_group(token)
    running_at_failure: list[bool] = []

    class StepFunctions:
        def send_task_heartbeat(self, taskToken: str) -> dict[str, Any]:
            return {}

        def send_task_failure(self, **params: Any) -> dict[str, Any]:
            running_at_failure.append(group_running(group))
            return {}

    def slow(spark_context: Any) -> None:
        with contextlib.suppress(Exception):  # cancelled
            spark_context.parallelize(range(2), 2).map(lambda x: time.sleep(120) or x).count()

    def run_job(job: Any, job_group_name: str) -> dict[str, Any]:
        spark_context = local_session().sparkContext
        spark_context.setJobGroup(job_group_name, "leftover", interruptOnCancel=True)
        InheritableThread(target=slow, args=(spark_context,), daemon=True).start()
        deadline = time.monotonic() + 60
        while not group_running(job_group_name) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert group_running(job_group_name), "the leftover job never started"
        raise ValueError("failed, its thread's Spark job still running")

    worker = SparkWorker(
        None,  # type: ignore[arg-type]  # serve() reads no queue
        StepFunctions(),  # type: ignore[arg-type]
        "token-queue",
        heartbeat_timeout_s=UNHURRIED_HEARTBEAT_S,
        run_job=run_job,
    )
    served = threading.Thread(target=worker.serve, args=({"task_token": token, "job": {"job_id": "j"}},))
    served.start()
    served.join(120)

    assert not served.is_alive()
    assert running_at_failure == [False], "the failure was sent while the run's Spark job still ran"
