"""One scenario, end to end, on one machine:

    scenario jobs ──► jobs queue ──► event source mapping ──► receiver handler ──► workflow (moto)
                         ▲                                                           │ spark step
                         └── extender handler (scheduler) ◄── lease table            ▼
                                                                                token queue ──► Spark worker

The receiver, extender and watcher are the functions' own handler modules, loaded as a Lambda
container would load them (settings from the environment, clients from `functions.aws` with the
endpoint override). Each function's service is built eagerly so the faults can hook its clients from
outside (`Faults.install`). moto sends no EventBridge events: `offline.events` delivers the status
changes of ended executions to the watcher, best effort and a little late; reconciliation inside the
extender settles what they miss.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from functions.lease import LeaseStore
from functions.observability import logger as function_logger
from functions.observability import metrics
from offline.emulator import REGION, Emulator, Resources, environment, function_environment
from offline.esm import EventSourceMapping, MappingConfig
from offline.events import StatusEvents, watched_statuses
from offline.faults import Faults, TimedActions
from offline.lambdas import LambdaContext, load_function
from offline.observe import Observer, Track
from offline.progress import Counts, Progress
from offline.report import build_report, violations
from offline.scenario import GenericJob, JobSpec, RawJob, Scenario, SparkJob, WaitJob
from offline.scheduler import Scheduler
from offline.worker import SparkWorker

POLL_S = 0.5
SETTLE_S = 15.0
"""After every message is settled, how long to wait for the executions to end (they close leases)."""
MAX_SPARK_WORKERS = 4
EXTENDER_TIMEOUT_S = 60.0
WATCHER_TIMEOUT_S = 30.0
LOGGERS = ("moto", "werkzeug", "offline", "py4j", "pyspark", "botocore")
QUIET_LOGGERS = ("moto.stepfunctions.parser",)
"""moto's engine logs every failed state (the workflow fails states on purpose) with its whole AST."""


@dataclass
class RunResult:
    """The report, the broken rules behind its `ok`, and what the timeline draws (times are epoch s)."""

    report: dict[str, Any]
    violations: list[str]
    tracks: dict[str, Track]
    start: float
    end: float
    faults: Faults


def spark_workers(scenario: Scenario) -> int:
    """One worker thread per Spark job, up to `MAX_SPARK_WORKERS`, all on the one local session: a task
    waiting in the token queue gets no heartbeats, so it must not wait long for a free worker."""
    return min(MAX_SPARK_WORKERS, max(1, sum(1 for job in scenario.jobs if scenario.runs_spark(job))))


def prepare_spark(scenario: Scenario, work_dir: Path) -> None:
    """Generate each Spark job's partition (kept between runs when its size and seed are unchanged) and
    start the local SparkSession before any job is sent: starting the JVM takes seconds, and a step's
    timeout counts from the moment its task is scheduled."""
    from pipeline.generate import generate, read_manifest

    jobs = [job for job in scenario.jobs if isinstance(job, SparkJob)]
    for job in jobs:
        folder = partition_dir(work_dir, job)
        manifest = read_manifest(folder)
        if manifest is None or (manifest.events, manifest.seed) != (job.events, job.seed):
            generate(job.date, job.events, folder, seed=job.seed)
    if any(scenario.runs_spark(job) for job in scenario.jobs):
        from offline.spark import local_session

        local_session()


def partition_dir(work_dir: Path, job: SparkJob) -> Path:
    return work_dir / "raw" / job.id / f"date={job.date}"


def message_body(job: JobSpec, work_dir: Path) -> str:
    """The job message (the project's format) with the job's id as its `job_id`."""
    if isinstance(job, RawJob):
        return job.raw_body
    params: dict[str, Any]
    if isinstance(job, GenericJob):
        params = {
            k: v.replace("{work_dir}", str(work_dir.resolve())) if isinstance(v, str) else v
            for k, v in job.params.items()
        }
        return json.dumps({"job_id": job.id, "type": job.type, "params": params})
    if isinstance(job, WaitJob):
        params = {"seconds": job.seconds, "fail": job.fail}
    else:
        params = {
            "input": str(partition_dir(work_dir, job).resolve()),
            "date": job.date,
            "output": str((work_dir / "curated" / job.id).resolve()),
            "quarantine": str((work_dir / "quarantine" / job.id).resolve()),
        }
    return json.dumps({"job_id": job.id, "type": job.type, "params": params})


@contextlib.contextmanager
def captured_logs(path: Path) -> Iterator[None]:
    """Send the functions' Powertools logs, anything printed and the libraries' logs to `path`, keeping
    the terminal (stderr) for progress; put everything back afterwards."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as sink:
        handler = logging.StreamHandler(sink)
        handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s"))
        saved = []
        for name in LOGGERS:
            lib = logging.getLogger(name)
            saved.append((lib, lib.propagate, lib.level))
            lib.addHandler(handler)
            lib.propagate = False
            if lib.level == logging.NOTSET or lib.level > logging.INFO:
                lib.setLevel(logging.INFO if name == "offline" else logging.WARNING)
        for name in QUIET_LOGGERS:
            quiet = logging.getLogger(name)
            saved.append((quiet, quiet.propagate, quiet.level))
            quiet.setLevel(logging.CRITICAL)
        powertools = function_logger.registered_handler
        stream = getattr(powertools, "stream", None)
        if isinstance(powertools, logging.StreamHandler):
            powertools.setStream(sink)
        try:
            with contextlib.redirect_stdout(sink):
                yield
        finally:
            if isinstance(powertools, logging.StreamHandler):
                powertools.setStream(stream)
            for lib, propagate, level in saved:
                lib.removeHandler(handler)
                lib.propagate = propagate
                lib.setLevel(level)


def run_scenario(scenario: Scenario, *, work_dir: Path, progress: Progress | None = None) -> RunResult:
    """Run the scenario to its end (every message settled, or `timeout_s`) and report."""
    wall_start = time.monotonic()
    work_dir.mkdir(parents=True, exist_ok=True)
    prepare_spark(scenario, work_dir)
    emulator = Emulator()
    try:
        catalog = scenario.job_catalog()
        resources = emulator.create(scenario.settings, spark_heartbeat_s=scenario.spark_heartbeat_s, catalog=catalog)
        catalog_file = work_dir / "job_types.json"  # what the construct ships in the functions' asset
        catalog_file.write_text(catalog.to_json(), encoding="utf-8")
        function_env = {**function_environment(resources), "JOB_TYPES_FILE": str(catalog_file)}
        with (
            environment(function_env),
            captured_logs(work_dir / "runtime.log"),
            warnings.catch_warnings(),
        ):
            # An invocation that dies before adding a metric flushes none; Powertools warns on stderr.
            warnings.filterwarnings("ignore", message="No application metrics to publish")
            result = _run(scenario, emulator, resources, work_dir, progress)
    finally:
        emulator.stop()
    result.report["wall_s"] = round(time.monotonic() - wall_start, 1)
    return result


def _run(
    scenario: Scenario, emulator: Emulator, resources: Resources, work_dir: Path, progress: Progress | None
) -> RunResult:
    settings = resources.settings
    receiver = load_function("functions.receiver.handler")
    extender = load_function("functions.extender.handler")
    watcher = load_function("functions.watcher.handler")
    observer = Observer(emulator, resources)
    faults = Faults(scenario)
    # Each container's service, built once: the faults hook the clients it holds.
    faults.install("receiver", receiver.receiver())
    faults.install("extender", extender.extender())
    faults.install("watcher", watcher.watcher())
    # The functions share this process's Powertools `Metrics`, disabled here. Disabled, it never clears
    # what it gathered and prints it once a name holds 100 values; clear it after each invocation
    # instead, as a flush would.

    def invoke_extender() -> None:
        context = LambdaContext(function_name="extender", deadline=time.time() + EXTENDER_TIMEOUT_S)
        faults.begin_invocation("extender", deadline=context.deadline)
        try:
            extender.handler({"source": "aws.scheduler"}, context)
        finally:
            faults.end_invocation("extender", period_s=settings.extender_period_s)
            metrics.clear_metrics()

    def invoke_receiver(event: dict[str, Any], context: LambdaContext) -> Any:
        handles = {record["receiptHandle"]: record["messageId"] for record in event["Records"]}
        faults.begin_invocation("receiver", handles, deadline=context.deadline)
        try:
            return receiver.handler(event, context)
        finally:
            faults.end_invocation("receiver")
            metrics.clear_metrics()

    def invoke_watcher(event: dict[str, Any]) -> Any:
        context = LambdaContext(function_name="watcher", deadline=time.time() + WATCHER_TIMEOUT_S)
        faults.begin_invocation("watcher", deadline=context.deadline)
        try:
            return watcher.handler(event, context)
        finally:
            faults.end_invocation("watcher")
            metrics.clear_metrics()

    mapping = EventSourceMapping(
        emulator.sqs(app_id="lambda-event-source-mapping"),
        MappingConfig(
            queue_url=resources.queue_url,
            queue_arn=resources.queue_arn,
            region=REGION,
            batch_size=scenario.batch_size,
            # Lambda refuses a mapping whose queue's VT is shorter than the function's timeout.
            function_timeout_s=min(settings.receiver_timeout_s, resources.queue_visibility_timeout_s),
        ),
        invoke_receiver,
        on_batch=observer.on_batch,
    )
    schedule = Scheduler(invoke_extender, settings.extender_period_s, skip=faults.skip_run)
    workers = [
        SparkWorker(
            emulator.sqs(app_id="spark-worker"),
            emulator.stepfunctions(app_id="spark-worker"),
            resources.token_queue_url,
            heartbeat_timeout_s=scenario.spark_heartbeat_s,
            catalog=scenario.job_catalog(),
            kill_after=faults.kill_after,
        )
        for _ in range(spark_workers(scenario))
    ]
    actions = TimedActions(
        faults,
        view=observer,
        mapping=mapping,
        store=LeaseStore(
            emulator.dynamodb(), resources.table_name, shards=settings.shards, closed_ttl_s=settings.closed_ttl_s
        ),
        sqs=emulator.sqs(),
        stepfunctions=emulator.stepfunctions(),
    )
    events = StatusEvents(
        emulator.stepfunctions(), resources.state_machine_arn, invoke_watcher, faults, statuses=watched_statuses()
    )
    threads: list[Any] = [mapping, schedule, *workers, actions, events]
    start = faults.begin()
    for job in scenario.jobs:
        observer.send(job.id, message_body(job, work_dir), group=job.group, dedup_id=job.dedup_id)
    for thread in threads:
        thread.start()
    try:
        _wait_until_settled(scenario, observer, progress, start)
    finally:
        for thread in threads:  # all told first, then waited for: each may be in a 1 s long poll
            thread.stop()
        for thread in threads:
            thread.join()
        end = time.time()
        observer.mark_end()
        emulator.stop_executions(resources.state_machine_arn)
        if progress is not None:
            progress.close()
    observer.poll()
    observer.collect_executions()
    report = build_report(scenario, observer.tracks, emulator.api_calls(), end - start, faults=faults, end=end)
    found = violations(scenario, observer.tracks, faults, end=end)
    report["ok"] = not found
    return RunResult(report, found, observer.tracks, start, end, faults)


def _wait_until_settled(scenario: Scenario, observer: Observer, progress: Progress | None, start: float) -> None:
    """Poll until every message is deleted or in the DLQ and no execution runs (or the timeout)."""
    deadline = start + scenario.timeout_s
    settled_at: float | None = None
    stop = threading.Event()
    while not stop.wait(POLL_S) and time.time() < deadline:
        observer.poll()
        running = observer.running_jobs()
        tracks = observer.tracks.values()
        if progress is not None:
            progress.update(time.time() - start, _counts(tracks, running))
        if all(t.final in ("deleted", "dlq", "lost") for t in tracks):
            settled_at = settled_at or time.time()
            if not running or time.time() - settled_at > SETTLE_S:
                return
        else:
            settled_at = None


def _counts(tracks: Any, running: set[str]) -> Counts:
    finals = [t.final for t in tracks]
    return Counts(
        queued=sum(1 for t in tracks if t.final == "queued" and t.job_id not in running),
        running=len(running),
        done=finals.count("deleted"),
        failed=sum(t.released for t in tracks),
        dlq=finals.count("dlq"),
        renewals=sum(len(t.renewals) for t in tracks),
        lapses=sum(len(t.redelivered_while_running) for t in tracks),
    )
