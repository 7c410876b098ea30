"""The Spark worker: serves the workflow's token queue with the local SparkSession.

Each message is one pyspark step of an execution: `{"task_token", "message_id", "attempt", "job"}`. The
worker deletes it at once (the step's heartbeat timeout, not the queue, notices a dead worker), runs
the job's type's entry (`run(spark, params)`, as the Glue entry does in the cloud) while a second
thread sends `SendTaskHeartbeat`, then answers `SendTaskSuccess` with the summary `run` returned or
`SendTaskFailure` with the error. One job at a time, like one Glue worker.

Jobs run on the runtime's own threads, so a job's exit must not end the process. The job runs in the Glue
entry's guard (`exit_fails_the_job`): its `sys.exit()` or `os._exit()` fails it with `JobExit`, as on Glue.

A run does not outlive its task by more than the step's heartbeat timeout: the job's next attempt counts
on it (`longjobs.engine.runs`). The worker sends a heartbeat before it runs a task, and does not run one
already over. It stops a run (its Spark jobs, cancelled by their job group until the entry returns) at
its first refused heartbeat (the task timed out or its execution was stopped), and by itself once no
heartbeat was accepted for that timeout less one interval (Step Functions may then have timed it out),
counted from the token's send.

A failed run has ended when the worker reports it: the job's retry starts without waiting for it
(`longjobs.engine.delivery.attempt.worker_reported_end`). So before `SendTaskFailure` the worker cancels
the Spark jobs the entry left running in its job group, heartbeating meanwhile, until none runs. A
`pyspark.InheritableThread` the entry started runs its jobs in that group; a plain thread's are in none.
The group is cancelled once first: Spark's status tracker may not list a job just submitted. When some
still run after the heartbeat timeout less one interval, it sends nothing: the step times out, and the
retry waits as for any run that may go on. Python threads the job started are not the run's, here as at
a stop: the worker cannot end them.

The job's failure goes to the `FAILURES` logger with its traceback: the runtime's log keeps it, and the
command line shows it on the terminal.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog
from longjobs.pipeline.glue_entry import exit_fails_the_job, summary_json

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

log = logging.getLogger(__name__)
FAILURES = logging.getLogger(f"{__name__}.failures")
"""A job's failure, with its traceback: what its owner reads (the runtime shows it on the terminal)."""


def job_error(exc: BaseException) -> str:
    """A job's exception as its owner reads it. A Java exception raised through py4j (`Py4JJavaError`) has
    the whole Java stack in its `str()`, hundreds of lines that name Spark's frames before the cause: its
    Java exception's own line (`toString()`, the class and message) stands for it, after py4j's message;
    the stack goes to the log file."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            return f"{str(getattr(exc, 'errmsg', '')).strip()} {_without_frames(str(java.toString()))}".strip()
        except Exception:  # the JVM is gone, or not py4j's: str() may still say it, else py4j's message
            pass
    try:
        return str(exc)
    except Exception:  # py4j's str() asks the JVM for the stack, and a stopped JVM cannot answer
        return str(getattr(exc, "errmsg", "")).strip() or type(exc).__name__


JAVA_FRAME = re.compile(r"\t(at |\.\.\. \d+ more)")
"""A line of a Java stack: `\tat <frame>`, or `\t... 9 more`."""


def _without_frames(text: str) -> str:
    """A Java exception's `toString()` without stack frames. Spark's `Job aborted due to stage failure`
    holds its task's whole stack, causes and all, and then the driver's: the classes and messages are kept
    (`Caused by: ...`, a Python worker's traceback), the frames are not."""
    text = text.split("\nDriver stacktrace:")[0]
    return "\n".join(line for line in text.splitlines() if not JAVA_FRAME.match(line)).strip()


def _java_stack(exc: BaseException) -> str:
    """py4j's `str()` of a Java failure: its message and the whole Java stack, for the log file. The JVM
    answers it, so once the JVM has stopped there is none."""
    try:
        return str(exc)
    except Exception:
        return "(not readable: the JVM has stopped)"


def _java_failure(exc: BaseException) -> bool:
    """Whether `exc` carries a Java exception (py4j's `Py4JJavaError`): its `str()` is not to be shown, nor
    asked for (it calls the JVM, which may be gone)."""
    return getattr(exc, "java_exception", None) is not None


RunJob = Callable[[Mapping[str, Any], str], dict[str, Any]]
"""Runs one job (`{"job_id", "type", "params"}`) under a Spark job group, and returns its summary."""
StopRun = Callable[[str], None]
"""Stops the run of a Spark job group."""
GroupBusy = Callable[[str], bool]
"""Whether a Spark job of a job group still runs."""
REFUSED = frozenset({"TaskTimedOut", "InvalidToken", "TaskDoesNotExist"})
"""SendTaskHeartbeat's answers for a task that is over."""
STOP_AGAIN_S = 0.5
"""How often a stopped run's Spark jobs are cancelled again, until the run returns."""

ERROR_MAX = 256
CAUSE_MAX = 32_768


def job_group(token: str) -> str:
    """The Spark job group of a task's run (a task token is too long to be one)."""
    return "longjobs-" + hashlib.sha256(token.encode()).hexdigest()[:16]


def cancel_group(group: str) -> None:
    """Cancel the Spark jobs of `group` on the local session: the entry's running action fails."""
    from longjobs.offline.spark import started_session

    session = started_session()  # none started: no Spark job to cancel, and none worth starting a JVM for
    if session is not None:
        session.sparkContext.cancelJobGroup(group)


def group_busy(group: str) -> bool:
    """Whether a Spark job of `group` still runs on the local session (none before it started)."""
    from longjobs.offline.spark import group_running

    return group_running(group)


def run_entry(job: Mapping[str, Any], group: str, catalog: JobCatalog) -> dict[str, Any]:
    """The job's type's entry on the process's local SparkSession (Spark loads only when needed), its
    Spark jobs in `group` (cancelled when its task is over)."""
    from longjobs.offline.job_code import load_entry_file, prepare
    from longjobs.offline.spark import local_session
    from longjobs.pipeline.glue_entry import load_entry, run_entry

    job_type = catalog.get(str(job.get("type")))
    if job_type is None or job_type.runner != "pyspark":
        raise ValueError(f"job type {job.get('type')!r} is not a pyspark type of this run")
    spark = local_session()
    spark.sparkContext.setJobGroup(group, f"longjobs {job.get('job_id')}", interruptOnCancel=True)
    prepare(job_type, spark)
    if job_type.code_root is not None:
        entry = load_entry(job_type.entry_function, module=job_type.entry_module)
    else:
        entry = load_entry_file(job_type)  # under a private name: the process is every type's
    return run_entry(entry, spark, job["params"])


@dataclass
class WorkerStats:
    started: int = 0
    succeeded: int = 0
    failed: int = 0
    killed: int = 0
    heartbeats: int = 0
    stopped: int = 0  # runs stopped because their task was over
    skipped: int = 0  # tasks over before their run began: not run
    running: set[str] = field(default_factory=set)


class SparkWorker(threading.Thread):
    """Long-polls the token queue until stopped. `kill_after(job_id)` says whether (and after how many
    seconds of heartbeats) the worker dies on this job: it then goes silent and a fresh one takes over."""

    def __init__(
        self,
        sqs: SQSClient,
        stepfunctions: SFNClient,
        token_queue_url: str,
        *,
        heartbeat_timeout_s: float,
        catalog: JobCatalog | None = None,
        run_job: RunJob | None = None,
        kill_after: Callable[[str], float | None] = lambda job_id: None,
        stop_run: StopRun = cancel_group,
        busy: GroupBusy = group_busy,
    ) -> None:
        super().__init__(name="spark-worker", daemon=True)
        self.sqs = sqs
        self.stepfunctions = stepfunctions
        self.token_queue_url = token_queue_url
        self.heartbeat_every_s = heartbeat_timeout_s / 3
        self.unheard_s = heartbeat_timeout_s - self.heartbeat_every_s
        """No heartbeat accepted for this long: the run stops (Step Functions may time its task out next)."""
        self.run_job = run_job or functools.partial(run_entry, catalog=catalog or JobCatalog(BUILTIN_TYPES))
        self.stop_run = stop_run
        self.busy = busy
        self.kill_after = kill_after
        self.stats = WorkerStats()
        self.stopped = threading.Event()

    def stop(self) -> None:
        """Ask the thread to end; `join()` waits for it."""
        self.stopped.set()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                messages = self.sqs.receive_message(
                    QueueUrl=self.token_queue_url,
                    MaxNumberOfMessages=1,
                    WaitTimeSeconds=1,
                    MessageSystemAttributeNames=["SentTimestamp"],
                ).get("Messages", [])
                for message in messages:
                    self.sqs.delete_message(QueueUrl=self.token_queue_url, ReceiptHandle=message["ReceiptHandle"])
                    sent_ms = message.get("Attributes", {}).get("SentTimestamp")
                    self.serve(json.loads(message["Body"]), sent_at=int(sent_ms) / 1000 if sent_ms else None)
            except Exception:
                log.exception("spark worker poll failed")
                self.stopped.wait(1)

    def serve(self, task: Mapping[str, Any], *, sent_at: float | None = None) -> None:
        """Run one task (`sent_at`: when the workflow sent it, epoch seconds: its heartbeat timeout runs
        from about then). A task already over (its first heartbeat refused) is not run."""
        token, job = task["task_token"], task["job"]
        job_id = str(job.get("job_id", ""))
        self.stats.started += 1
        self.stats.running.add(job_id)
        try:
            kill_after = self.kill_after(job_id)
            if kill_after is not None:
                self._die(token, kill_after)
                return
            heard = time.monotonic() - (max(0.0, time.time() - sent_at) if sent_at is not None else 0.0)
            sent = time.monotonic()
            first = self._beat(token)
            if first == "refused":
                log.warning("spark job %s: its task is over before it ran; not run", job_id)
                self.stats.skipped += 1
                return
            if first == "accepted":
                heard = sent
            beating, cut = threading.Event(), threading.Event()
            group = job_group(token)
            heart = threading.Thread(
                target=self._heartbeat, args=(token, group, beating, heard, cut), name="spark-heartbeat", daemon=True
            )
            heart.start()
            try:
                with exit_fails_the_job():  # the job's sys.exit() or os._exit() is its failure, as on Glue
                    summary = self.run_job(job, group)
            except Exception as exc:
                # The step's failure carries the class and message; the log keeps where the job raised. A run
                # the worker stopped failed by that stop, not by its own error: the log alone keeps it.
                message = job_error(exc)
                if not _java_failure(exc):
                    (log if cut.is_set() else FAILURES).warning(
                        "spark job %s failed: %s: %s", job_id, type(exc).__name__, message, exc_info=exc
                    )
                else:  # a Java exception: its one line and the job's Python frames shown, its stack logged
                    frames = "".join(traceback.format_tb(exc.__traceback__))
                    (log if cut.is_set() else FAILURES).warning(
                        "spark job %s failed: %s: %s\nTraceback (most recent call last):\n%s",
                        job_id,
                        type(exc).__name__,
                        message,
                        frames.rstrip(),
                    )
                    log.info("spark job %s: the Java side of its failure: %s", job_id, _java_stack(exc))
                self.stats.failed += 1
                ended = self._end_run(group, cancel_first=not cut.is_set())  # heartbeats go on meanwhile
                beating.set()
                heart.join()
                if not ended:
                    log.warning("spark job %s: its Spark jobs still run; its task is left to time out", job_id)
                    return
                self.stepfunctions.send_task_failure(
                    taskToken=token, error=type(exc).__name__[:ERROR_MAX], cause=message[:CAUSE_MAX]
                )
                return
            beating.set()
            heart.join()
            self.stats.succeeded += 1
            self.stepfunctions.send_task_success(taskToken=token, output=summary_json(summary))
        finally:
            self.stats.running.discard(job_id)

    def _beat(self, token: str) -> str:
        """One heartbeat: `accepted`, `refused` (the task is over: timed out, or its execution stopped), or
        `failed` (no answer that says)."""
        try:
            self.stepfunctions.send_task_heartbeat(taskToken=token)
        except Exception as exc:
            code = exc.response.get("Error", {}).get("Code") if isinstance(exc, ClientError) else None
            if code in REFUSED:
                log.warning("heartbeat refused (%s)", code)
                return "refused"
            log.warning("heartbeat failed: %s", exc)
            return "failed"
        self.stats.heartbeats += 1
        return "accepted"

    def _heartbeat(self, token: str, group: str, done: threading.Event, heard: float, cut: threading.Event) -> None:
        """Heartbeat every third of the step's timeout until `done`; stop the run (and set `cut`) once its task
        is over, or once no heartbeat was accepted since `heard` for the timeout less one interval. A heartbeat
        call is waited for only until then: a call held up by its retries does not keep the run going."""
        calls = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spark-heartbeat-call")
        try:
            while not done.wait(self.heartbeat_every_s):
                sent = time.monotonic()
                call = calls.submit(self._beat, token)
                try:
                    answer = call.result(timeout=max(0.0, heard + self.unheard_s - sent))
                except TimeoutError:
                    answer = "failed"
                if answer == "accepted":
                    heard = sent
                if answer == "refused" or time.monotonic() >= heard + self.unheard_s:
                    log.warning("spark run %s stops: its task is over, or may be", group)
                    cut.set()
                    self._stop(group, done)
                    return
        finally:
            calls.shutdown(wait=False)

    def _stop(self, group: str, done: threading.Event) -> None:
        """Cancel the run's Spark jobs, again every `STOP_AGAIN_S` until it returns: a cancel reaches only
        the jobs running then, and the entry may start another after it."""
        self.stats.stopped += 1
        while True:
            try:
                self.stop_run(group)
            except Exception:
                log.exception("could not stop the run of %s", group)
            if done.wait(STOP_AGAIN_S):
                return

    def _end_run(self, group: str, *, cancel_first: bool = True) -> bool:
        """Cancel the Spark jobs a failed run left running in its group, again every `STOP_AGAIN_S`, until
        none runs: True then; False when some still run after the heartbeat timeout less one interval. A
        question Spark does not answer counts as a job running."""
        deadline = time.monotonic() + self.unheard_s
        if cancel_first:  # Spark's status tracker may not list a job just submitted yet (weak consistency)
            try:
                self.stop_run(group)
            except Exception:
                log.exception("could not stop the run of %s", group)
        while self._busy(group):
            if time.monotonic() >= deadline:
                return False
            try:
                self.stop_run(group)
            except Exception:
                log.exception("could not stop the run of %s", group)
            time.sleep(STOP_AGAIN_S)
        return True

    def _busy(self, group: str) -> bool:
        try:
            return self.busy(group)
        except Exception:
            log.exception("could not tell whether the run of %s still runs Spark jobs", group)
            return True

    def _die(self, token: str, after_s: float) -> None:
        """The worker process is killed `after_s` into the job: it heartbeats until then, then nothing."""
        self.stats.killed += 1
        deadline = time.monotonic() + after_s
        while True:
            self.stepfunctions.send_task_heartbeat(taskToken=token)
            self.stats.heartbeats += 1
            left = deadline - time.monotonic()
            if left <= 0 or self.stopped.wait(min(self.heartbeat_every_s, left)):
                break
        log.warning("spark worker killed mid-job; its task gets no answer")
