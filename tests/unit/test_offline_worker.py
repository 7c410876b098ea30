"""The offline Spark worker answers a job's exit as that job's failure (`longjobs.offline.worker`).

A job's `run` may end the way a script does, with `sys.exit(...)`: SystemExit is not an Exception. Such a
run returns no summary, so the worker sends the step's failure with it: the job's owner reads it on the
lease and in the DLQ, and the worker goes on serving other jobs."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from longjobs.offline.worker import SparkWorker


class StepFunctions:
    """Accepts every heartbeat and records how each task ended."""

    def __init__(self) -> None:
        self.ended: list[tuple[str, dict[str, Any]]] = []

    def send_task_heartbeat(self, taskToken: str) -> dict[str, Any]:
        return {}

    def send_task_failure(self, **params: Any) -> dict[str, Any]:
        self.ended.append(("failure", params))
        return {}

    def send_task_success(self, **params: Any) -> dict[str, Any]:
        self.ended.append(("success", params))
        return {}


@pytest.mark.parametrize(
    ("code", "cause"),
    [("input folder is empty", "input folder is empty"), (3, "3")],
)
def test_offline_worker_job_exit_is_the_jobs_failure(code: object, cause: str) -> None:
    stepfunctions = StepFunctions()

    def run_job(job: Any, group: str) -> dict[str, Any]:
        sys.exit(code)

    worker = SparkWorker(
        None,  # type: ignore[arg-type]  # serve() reads no queue
        stepfunctions,  # type: ignore[arg-type]
        "token-queue",
        heartbeat_timeout_s=60,
        run_job=run_job,
        stop_run=lambda group: None,
    )
    worker.serve({"task_token": "token-1", "job": {"job_id": "quits-1", "type": "quits", "params": {}}})

    assert stepfunctions.ended == [("failure", {"taskToken": "token-1", "error": "SystemExit", "cause": cause})]
    assert worker.stats.failed == 1
    assert worker.stats.running == set()
