"""The offline Spark worker stops a run whose task is over (`longjobs.offline.worker`): the job's next
attempt waits out the step's heartbeat timeout and no longer (`longjobs.engine.runs`). Real threads and
real time (the worker's wiring), with a heartbeat timeout of 0.6 s and generous bounds.

Step Functions refuses a heartbeat for a task that timed out or whose execution stopped: SendTaskHeartbeat
answers TaskTimedOut (https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskHeartbeat.html)."""

from __future__ import annotations

import threading
from typing import Any

from botocore.exceptions import ClientError, EndpointConnectionError

from longjobs.offline.worker import SparkWorker, job_group

TOKEN = "token-1"
TIMEOUT_S = 0.6
BOUND_S = 30.0


class StepFunctions:
    """SendTaskHeartbeat answering as `answer` says; the task's end refused once it is over."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.ended: list[str] = []

    def send_task_heartbeat(self, taskToken: str) -> dict[str, Any]:
        if self.answer == "refused":
            raise ClientError({"Error": {"Code": "TaskTimedOut", "Message": "over"}}, "SendTaskHeartbeat")
        if self.answer == "unreachable":
            raise EndpointConnectionError(endpoint_url="https://states.example")
        return {}

    def send_task_failure(self, **params: Any) -> dict[str, Any]:
        self.ended.append("failure")
        return {}

    def send_task_success(self, **params: Any) -> dict[str, Any]:
        self.ended.append("success")
        return {}


def serve(answer: str, *, runs_for_s: float) -> tuple[list[str], StepFunctions, bool]:
    """One task served: the groups the worker stopped, the client, and whether the run was cut short."""
    stepfunctions = StepFunctions(answer)
    stopped: list[str] = []
    cut = threading.Event()

    def run_job(job: Any, group: str) -> dict[str, Any]:
        if cut.wait(runs_for_s):
            raise RuntimeError("Job group cancelled")  # what a cancelled Spark action raises, in short
        return {"rows": 1}

    def stop_run(group: str) -> None:
        stopped.append(group)
        cut.set()

    worker = SparkWorker(
        None,  # type: ignore[arg-type]  # serve() reads no queue
        stepfunctions,  # type: ignore[arg-type]
        "token-queue",
        heartbeat_timeout_s=TIMEOUT_S,
        run_job=run_job,
        stop_run=stop_run,
    )
    worker.serve({"task_token": TOKEN, "job": {"job_id": "j", "type": "spark", "params": {}}})
    return stopped, stepfunctions, cut.is_set()


def test_worker_stop_at_a_refused_heartbeat() -> None:
    stopped, stepfunctions, cut = serve("refused", runs_for_s=BOUND_S)
    assert stopped == [job_group(TOKEN)] and cut, "the task is over: its run stopped"
    assert stepfunctions.ended == ["failure"]


def test_worker_stop_once_no_heartbeat_was_accepted_for_the_timeout() -> None:
    stopped, _, cut = serve("unreachable", runs_for_s=BOUND_S)
    assert stopped == [job_group(TOKEN)] and cut, "Step Functions may have timed the task out: the run stopped"


def test_worker_stop_never_while_heartbeats_are_accepted() -> None:
    stopped, stepfunctions, cut = serve("accepted", runs_for_s=4 * TIMEOUT_S)
    assert stopped == [] and not cut
    assert stepfunctions.ended == ["success"]
