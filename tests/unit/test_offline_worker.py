"""The offline Spark worker answers a job's exit as that job's failure (`longjobs.offline.worker`).

A job's `run` may end the way a script does, with `sys.exit(...)` or `os._exit(...)`. Such a run returns
no summary, so the worker sends the step's failure, `JobExit` as on Glue: the job's owner reads it on the
lease and in the DLQ. The runtime's process lives on, and the worker goes on serving other jobs."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
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


def worker_of(stepfunctions: StepFunctions, run_job: Any, queue: Any = None) -> SparkWorker:
    """A worker over fakes: `serve()` reads no queue, so `queue` is needed only for `start()`."""
    return SparkWorker(
        queue, stepfunctions, "token-queue", heartbeat_timeout_s=60, run_job=run_job, stop_run=lambda group: None
    )


@pytest.mark.parametrize(
    ("code", "cause"),
    [
        ("input folder is empty", "the job called sys.exit('input folder is empty'): it returned no summary"),
        (3, "the job called sys.exit(3): it returned no summary"),
        (0, "the job called sys.exit(0): it returned no summary"),
    ],
)
def test_offline_worker_job_exit_is_the_jobs_failure(code: object, cause: str) -> None:
    stepfunctions = StepFunctions()

    def run_job(job: Any, group: str) -> dict[str, Any]:
        sys.exit(code)

    worker = worker_of(stepfunctions, run_job)
    worker.serve({"task_token": "token-1", "job": {"job_id": "quits-1", "type": "quits", "params": {}}})

    assert stepfunctions.ended == [("failure", {"taskToken": "token-1", "error": "JobExit", "cause": cause})]
    assert worker.stats.failed == 1
    assert worker.stats.running == set()


class TokenQueue:
    """Hands out each task once, as the token queue does, then nothing."""

    def __init__(self, *tasks: dict[str, Any]) -> None:
        self.bodies = [json.dumps(task) for task in tasks]

    def receive_message(self, **params: Any) -> dict[str, Any]:
        if not self.bodies:
            time.sleep(0.01)
            return {}
        return {"Messages": [{"ReceiptHandle": "r", "Body": self.bodies.pop(0)}]}

    def delete_message(self, **params: Any) -> dict[str, Any]:
        return {}


def test_offline_worker_job_os_exit_is_the_jobs_failure(process_exits: list[int]) -> None:
    """A job's `os._exit(3)` would end the runtime's process, and every job in flight with it. The worker
    fails that job, and its thread lives on to serve the next."""
    stepfunctions = StepFunctions()

    def run_job(job: Any, group: str) -> dict[str, Any]:
        if job["type"] == "quits":
            os._exit(3)
        return {"rows": 1}

    queue = TokenQueue(
        {"task_token": "token-1", "job": {"job_id": "quits-1", "type": "quits", "params": {}}},
        {"task_token": "token-2", "job": {"job_id": "next-1", "type": "count", "params": {}}},
    )
    worker = worker_of(stepfunctions, run_job, queue)
    worker.start()
    try:
        deadline = time.monotonic() + 10
        while len(stepfunctions.ended) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert worker.is_alive()
    finally:
        worker.stop()
        worker.join(10)

    cause = "the job called os._exit(3): it returned no summary"
    assert stepfunctions.ended == [
        ("failure", {"taskToken": "token-1", "error": "JobExit", "cause": cause}),
        ("success", {"taskToken": "token-2", "output": '{"rows": 1}'}),
    ]
    assert process_exits == []
    assert (worker.stats.failed, worker.stats.succeeded) == (1, 1)


def test_offline_worker_job_failure_logs_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """The step's failure carries the exception's class and message only (as on Glue). Offline, the log is
    the only place the job's owner can see where their code raised: the worker logs the traceback there,
    with the exception's class, as Glue's own run log would show it."""
    stepfunctions = StepFunctions()

    def run_job(job: Any, group: str) -> dict[str, Any]:
        rates = {"eu": 1.1}
        return {"rate": rates[job["params"]["region"]]}

    worker = worker_of(stepfunctions, run_job)
    with caplog.at_level("WARNING", logger="longjobs.offline.worker"):
        worker.serve({"task_token": "t", "job": {"job_id": "bug-1", "type": "rates", "params": {"region": "asia"}}})

    assert stepfunctions.ended == [("failure", {"taskToken": "t", "error": "KeyError", "cause": "'asia'"})]
    (record,) = [r for r in caplog.records if "bug-1" in r.getMessage()]
    assert "KeyError: 'asia'" in record.getMessage()
    assert record.exc_info is not None, "the traceback, naming the job's own line, is in the log"
    assert "in run_job" in caplog.text


class JavaException:
    """What py4j hands Python for a Java exception: a reference whose `toString()` the JVM answers, and whose
    stack py4j reads through the gateway for `str()` (an answer in py4j's protocol: `ys` and the text)."""

    _target_id = "o42"

    def __init__(self, line: str, stack: str) -> None:
        self.line = line
        self._gateway_client = type("Gateway", (), {"send_command": lambda _, command: "ys" + stack})()

    def toString(self) -> str:  # the Java method, as py4j exposes it
        return self.line


def test_offline_worker_java_failure_is_its_one_line_not_its_stack(caplog: pytest.LogCaptureFixture) -> None:
    """A Spark call that fails in the JVM raises py4j's `Py4JJavaError`, whose `str()` is py4j's message and
    the whole Java stack. The step's cause, hence the lease's error and the DLQ's `ErrorMessage`, is the
    Java exception's own line; the terminal shows that line and the job's Python frames, the log file the
    stack."""
    from py4j.protocol import Py4JJavaError

    line = 'org.apache.hadoop.fs.UnsupportedFileSystemException: No FileSystem for scheme "s3"'
    stack = line + "".join(f"\\n\\tat org.apache.spark.Frame{i}(Frame.java:{i})" for i in range(300))
    stepfunctions = StepFunctions()

    def run_job(job: Any, group: str) -> dict[str, Any]:
        raise Py4JJavaError("An error occurred while calling o117.json.\n", JavaException(line, stack))

    worker = worker_of(stepfunctions, run_job)
    with caplog.at_level("INFO", logger="longjobs.offline.worker"):
        worker.serve({"task_token": "t", "job": {"job_id": "s3-1", "type": "spark", "params": {}}})

    cause = f"An error occurred while calling o117.json. {line}"
    assert stepfunctions.ended == [("failure", {"taskToken": "t", "error": "Py4JJavaError", "cause": cause})]
    (shown,) = [r for r in caplog.records if r.name == "longjobs.offline.worker.failures"]
    assert line in shown.getMessage() and "in run_job" in shown.getMessage()
    assert "Frame1" not in shown.getMessage() and shown.exc_info is None, "no Java frame on the terminal"
    (kept,) = [r for r in caplog.records if r.name == "longjobs.offline.worker" and "Java side" in r.getMessage()]
    assert kept.getMessage().startswith("spark job s3-1: the Java side of its failure: An error occurred")
    assert "Frame299" in kept.getMessage(), "the Java stack is in the log"


class StoppedJava:
    """A Java exception's reference once the JVM has stopped: py4j's every call through it fails, `str()` of
    the `Py4JJavaError` that holds it included."""

    _target_id = "o42"

    def __init__(self) -> None:
        def send_command(_: Any, command: str) -> str:
            from py4j.protocol import Py4JNetworkError

            raise Py4JNetworkError("Answer from Java side is empty")

        self._gateway_client = type("Gateway", (), {"send_command": send_command})()

    def toString(self) -> str:
        from py4j.protocol import Py4JNetworkError

        raise Py4JNetworkError("Answer from Java side is empty")


def test_offline_worker_java_failure_after_the_jvm_stopped_still_fails_its_task(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With the JVM gone, neither `toString()` nor py4j's `str()` answers: the task still fails, with py4j's
    message, and its heartbeats stop (the step is not kept alive by a run that is over)."""
    from py4j.protocol import Py4JJavaError

    stepfunctions = StepFunctions()

    def run_job(job: Any, group: str) -> dict[str, Any]:
        raise Py4JJavaError("An error occurred while calling o117.json.\n", StoppedJava())

    with caplog.at_level("INFO", logger="longjobs.offline.worker"):
        worker_of(stepfunctions, run_job).serve({"task_token": "t", "job": {"job_id": "s3-2", "type": "spark"}})

    cause = "An error occurred while calling o117.json."
    assert stepfunctions.ended == [("failure", {"taskToken": "t", "error": "Py4JJavaError", "cause": cause})]
    assert not [t for t in threading.enumerate() if t.name.startswith("spark-heartbeat")], "heartbeats go on"
    assert "the Java side of its failure: (not readable: the JVM has stopped)" in caplog.text


def test_offline_worker_java_exception_attribute_not_py4j_keeps_the_message() -> None:
    """An exception of the job's own that has a `java_exception` attribute py4j did not set is told by its
    `str()`, not by its class name alone."""

    class Wrapped(RuntimeError):
        java_exception = "org.example.Boom"

    stepfunctions = StepFunctions()

    def run_job(job: Any, group: str) -> dict[str, Any]:
        raise Wrapped("the input has no rows")

    worker_of(stepfunctions, run_job).serve({"task_token": "t", "job": {"job_id": "w-1", "type": "spark"}})

    assert stepfunctions.ended == [
        ("failure", {"taskToken": "t", "error": "Wrapped", "cause": "the input has no rows"})
    ]


def test_offline_worker_java_failure_of_a_task_leaves_its_frames_out() -> None:
    """A Spark job a task failed raises `SparkException: Job aborted due to stage failure`, whose own message
    holds the task's whole Java stack and the driver's: the cause keeps the exceptions and their causes,
    not the frames."""
    from py4j.protocol import Py4JJavaError

    frames = "".join(f"\n\tat org.apache.spark.Frame{i}(Frame.java:{i})" for i in range(40))
    line = (
        "org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 0.0 failed 1 times, "
        "most recent failure: Lost task 0.0 (TID 0): org.apache.spark.SparkException: [FAILED_READ_FILE] cannot read"
        f"{frames}\nCaused by: java.lang.RuntimeException: part-0.parquet is not a Parquet file{frames}\n\t... 9 more"
        f"\n\nDriver stacktrace:{frames}"
    )
    stepfunctions = StepFunctions()

    def run_job(job: Any, group: str) -> dict[str, Any]:
        raise Py4JJavaError("An error occurred while calling o30.parquet.\n", JavaException(line, line))

    worker_of(stepfunctions, run_job).serve({"task_token": "t", "job": {"job_id": "p-1", "type": "spark"}})

    ((_, ended),) = stepfunctions.ended
    assert "Frame" not in ended["cause"] and "more" not in ended["cause"], ended["cause"]
    assert ended["cause"].endswith("Caused by: java.lang.RuntimeException: part-0.parquet is not a Parquet file")
