"""The offline Spark worker stops a run whose task is over (`longjobs.offline.worker`): the job's next
attempt waits out the step's heartbeat timeout and no longer (`longjobs.engine.runs`). A failed run's
failure is sent only once none of its Spark jobs runs: its retry does not wait for it. Real threads and
real time (the worker's wiring), with a heartbeat timeout of 0.6 s and generous bounds.

Step Functions refuses a heartbeat for a task that timed out or whose execution stopped: SendTaskHeartbeat
answers TaskTimedOut (https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskHeartbeat.html)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from longjobs.offline.worker import FAILURES, SparkWorker, job_group

TOKEN = "token-1"
TIMEOUT_S = 0.6
BOUND_S = 30.0


class StepFunctions:
    """SendTaskHeartbeat answering each call as `answers` says, in turn (the last one from then on):
    `accepted`, `refused` (the task is over), `unreachable`, or `hangs` (no answer for longer than the
    step's heartbeat timeout); the task's end refused once it is over."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.ended: list[str] = []

    def send_task_heartbeat(self, taskToken: str) -> dict[str, Any]:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if answer == "refused":
            raise ClientError({"Error": {"Code": "TaskTimedOut", "Message": "over"}}, "SendTaskHeartbeat")
        if answer == "unreachable":
            raise EndpointConnectionError(endpoint_url="https://states.example")
        if answer == "hangs":
            time.sleep(10 * TIMEOUT_S)
        return {}

    def send_task_failure(self, **params: Any) -> dict[str, Any]:
        self.ended.append("failure")
        return {}

    def send_task_success(self, **params: Any) -> dict[str, Any]:
        self.ended.append("success")
        return {}


class Leftover:
    """A job that raises at once and leaves a Spark job running in its group (started on a thread of its
    own), which ends after `cancels_needed` cancels of the group, or never (None)."""

    def __init__(self, cancels_needed: int | None = 1) -> None:
        self.cancels_needed = cancels_needed
        self.stops: list[str] = []
        self.running = True

    def run_job(self, job: Any, group: str) -> dict[str, Any]:
        raise ValueError("the job's own error")

    def stop_run(self, group: str) -> None:
        self.stops.append(group)
        if self.cancels_needed is not None and len(self.stops) >= self.cancels_needed:
            self.running = False

    def busy(self, group: str) -> bool:
        return self.running


class Run:
    """A job's run: it lasts `runs_for_s`, unless cancelled `cancels_needed` times (a cancel that meets the
    entry between two Spark actions stops nothing, so the worker cancels again)."""

    def __init__(self, runs_for_s: float, cancels_needed: int = 1) -> None:
        self.runs_for_s = runs_for_s
        self.cancels_needed = cancels_needed
        self.stops: list[str] = []
        self.ran = False
        self.cut = threading.Event()

    def run_job(self, job: Any, group: str) -> dict[str, Any]:
        self.ran = True
        if self.cut.wait(self.runs_for_s):
            raise RuntimeError("Job group cancelled")  # what a cancelled Spark action raises, in short
        return {"rows": 1}

    def stop_run(self, group: str) -> None:
        self.stops.append(group)
        if len(self.stops) >= self.cancels_needed:
            self.cut.set()


def serve(
    stepfunctions: StepFunctions, run: Run | Leftover, busy: Callable[[str], bool] = lambda group: False
) -> tuple[SparkWorker, float]:
    """One task served, and how long it took."""
    worker = SparkWorker(
        None,  # type: ignore[arg-type]  # serve() reads no queue
        stepfunctions,  # type: ignore[arg-type]
        "token-queue",
        heartbeat_timeout_s=TIMEOUT_S,
        run_job=run.run_job,
        stop_run=run.stop_run,
        busy=busy,
    )
    began = time.monotonic()
    worker.serve({"task_token": TOKEN, "job": {"job_id": "j", "type": "spark", "params": {}}}, sent_at=time.time())
    return worker, time.monotonic() - began


def test_worker_stop_at_a_refused_heartbeat() -> None:
    stepfunctions, run = StepFunctions("accepted", "accepted", "refused"), Run(BOUND_S)
    worker, _ = serve(stepfunctions, run)
    assert run.stops == [job_group(TOKEN)] and run.cut.is_set(), "the task is over: its run stopped"
    assert stepfunctions.ended == ["failure"] and worker.stats.stopped == 1


def test_worker_stop_once_no_heartbeat_was_accepted_for_the_timeout() -> None:
    run = Run(BOUND_S)
    serve(StepFunctions("accepted", "unreachable"), run)
    assert run.stops == [job_group(TOKEN)], "Step Functions may have timed the task out: the run stopped"


def test_worker_stop_does_not_wait_for_a_heartbeat_held_up() -> None:
    run = Run(BOUND_S)
    _, took = serve(StepFunctions("accepted", "hangs"), run)
    assert run.stops and took < 5 * TIMEOUT_S, f"a heartbeat call held up kept the run going for {took:.1f} s"


def test_worker_stop_cancels_again_until_the_run_returns() -> None:
    run = Run(BOUND_S, cancels_needed=3)
    serve(StepFunctions("accepted", "refused"), run)
    assert len(run.stops) == 3 and run.cut.is_set(), "a cancel between two Spark actions stopped nothing"


def test_worker_stop_task_over_before_its_run_is_not_run() -> None:
    run = Run(BOUND_S)
    worker, _ = serve(StepFunctions("refused"), run)
    assert not run.ran and worker.stats.skipped == 1, "a task that timed out in the token queue ran anyway"


def test_worker_stop_never_while_heartbeats_are_accepted() -> None:
    stepfunctions, run = StepFunctions("accepted"), Run(4 * TIMEOUT_S)
    serve(stepfunctions, run)
    assert run.stops == [] and not run.cut.is_set()
    assert stepfunctions.ended == ["success"]


class FailureWatch(StepFunctions):
    """Step Functions that notes, at each task failure sent, whether the run's leftover Spark job still ran."""

    def __init__(self, leftover: Leftover, *answers: str) -> None:
        super().__init__(*answers)
        self.leftover = leftover
        self.at_failure: list[bool] = []

    def send_task_failure(self, **params: Any) -> dict[str, Any]:
        self.at_failure.append(self.leftover.running)
        return super().send_task_failure(**params)


def test_worker_stop_a_failed_runs_leftover_spark_jobs_before_its_failure() -> None:
    """The failure ends the task, and the retry starts at once: the run's Spark jobs must have ended."""
    leftover = Leftover()
    stepfunctions = FailureWatch(leftover, "accepted")
    worker, _ = serve(stepfunctions, leftover, busy=leftover.busy)

    assert stepfunctions.ended == ["failure"] and stepfunctions.at_failure == [False], "sent while its job ran"
    assert leftover.stops == [job_group(TOKEN)] and worker.stats.failed == 1


def test_worker_stop_a_failed_run_whose_spark_jobs_never_end_leaves_its_task_to_time_out() -> None:
    """A failure sent then would let the retry run beside them; with none, the step's heartbeat timeout
    ends the task, and the retry waits for the run as for any that may go on."""
    leftover = Leftover(cancels_needed=None)
    stepfunctions = StepFunctions("accepted")
    _, took = serve(stepfunctions, leftover, busy=leftover.busy)

    assert stepfunctions.ended == [], "a failure sent while its Spark jobs ran"
    assert leftover.stops and took < BOUND_S


def test_worker_stop_a_stopped_runs_error_is_not_shown_as_the_jobs_own(caplog: pytest.LogCaptureFixture) -> None:
    """The command line shows a job's own failure (`FAILURES`); a run the worker stopped failed by that stop."""
    with caplog.at_level("WARNING", logger="longjobs.offline.worker"):
        serve(StepFunctions("accepted", "refused"), Run(BOUND_S))
        serve(StepFunctions("accepted"), Leftover())

    failed = [record for record in caplog.records if "spark job j failed" in record.getMessage()]
    assert [record.name for record in failed] == ["longjobs.offline.worker", FAILURES.name]


def test_worker_stop_a_failed_run_cancels_its_group_even_when_the_tracker_shows_no_job_yet() -> None:
    """Spark's status tracker has "very weak consistency semantics"
    (https://spark.apache.org/docs/latest/api/java/org/apache/spark/SparkStatusTracker.html): a job just
    submitted in the group may not be listed yet. The group is cancelled once before the tracker is asked,
    so such a job does not go on beside the retry that the failure lets start at once."""
    leftover = Leftover()
    stepfunctions = FailureWatch(leftover, "accepted")

    serve(stepfunctions, leftover, busy=lambda group: False)  # the tracker has not seen the job's start

    assert leftover.stops == [job_group(TOKEN)], "the group was never cancelled before the failure was sent"
    assert stepfunctions.at_failure == [False]
