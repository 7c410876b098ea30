"""One scenario, end to end, on one machine: the scenario's jobs sent to a `LocalProcessor` (the
whole processor, see `longjobs.offline.processor`), its faults applied from outside, everything observed from
outside (`longjobs.offline.observe`), and the report with its invariant checks at the end.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from longjobs.engine.lease import LeaseStore
from longjobs.engine.observability import logger as function_logger
from longjobs.offline.faults import Faults, TimedActions
from longjobs.offline.history import history, judge, scenario_types
from longjobs.offline.observe import Observer, Track
from longjobs.offline.processor import LocalProcessor
from longjobs.offline.progress import Progress, RedeliveryNotes, live_counts
from longjobs.offline.report import build_report, violations
from longjobs.offline.scenario import AbortExecution, GenericJob, JobSpec, RawJob, Scenario, SparkJob, WaitJob
from longjobs.offline.spark import log_spark_to, spark_log
from longjobs.offline.worker import FAILURES

POLL_S = 0.5
CHECKER_FINDING = "the independent checker, on the run's history: "
"""How a finding of `longjobs.history.checker` on the run's history starts among the run's violations."""
SETTLE_S = 15.0
"""After every message is settled, how long to wait for the executions to end (they close leases)."""
MAX_SPARK_WORKERS = 4
EXTENDER_TIMEOUT_S = 60.0
WATCHER_TIMEOUT_S = 30.0
RUNTIME_LOG = "runtime.log"
"""The run's log in its work folder: the functions' and the runtime's, moto's, and the job failures."""
LOGGERS = ("moto", "werkzeug", "longjobs.offline", "py4j", "pyspark", "botocore")
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
    history: list[str] = field(default_factory=list)
    """The run's history in the simulation's trace format (`longjobs.offline.history`)."""


def spark_workers(scenario: Scenario) -> int:
    """One worker thread per Spark job, and one more per `abort_execution` of a Spark job, up to
    `MAX_SPARK_WORKERS`, all on the one local session. A task waiting in the token queue gets no
    heartbeats, so it must not wait long for a free worker; and a stopped execution's job runs on in
    its worker (a local job cannot be interrupted), so the job's next execution needs another."""
    spark = {job.id for job in scenario.jobs if scenario.runs_spark(job)}
    stops = sum(1 for fault in scenario.faults if isinstance(fault, AbortExecution) and fault.job in spark)
    return min(MAX_SPARK_WORKERS, max(1, len(spark) + stops))


def prepare_spark(scenario: Scenario, work_dir: Path) -> None:
    """Generate each Spark job's partition (kept between runs when its size and seed are unchanged) and
    start the local SparkSession before any job is sent, with the code and requirements of each pyspark
    type the scenario runs on its path: starting the JVM and installing packages take seconds, and a
    step's timeout counts from the moment its task is scheduled. A scenario without Spark jobs needs no
    PySpark: the `pipeline` extra that brings it may not be installed."""
    if not any(scenario.runs_spark(job) for job in scenario.jobs):
        return
    from longjobs.pipeline.generate import generate, read_manifest

    jobs = [job for job in scenario.jobs if isinstance(job, SparkJob)]
    for job in jobs:
        folder = partition_dir(work_dir, job)
        manifest = read_manifest(folder)
        if manifest is None or (manifest.events, manifest.seed) != (job.events, job.seed):
            generate(job.date, job.events, folder, seed=job.seed)
    from longjobs.offline.job_code import prepare
    from longjobs.offline.spark import local_session

    session = local_session()
    catalog = scenario.job_catalog()
    for name in sorted({job.type for job in scenario.jobs if isinstance(job, GenericJob)}):
        job_type = catalog.get(name)
        if job_type is not None and job_type.runner == "pyspark":
            prepare(job_type, session)  # installs its requirements now, not inside a job's timeout


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


Show = Callable[[str], None]
"""Puts text in front of the user (a line or more of the terminal)."""


class Shown(logging.Handler):
    """Hands each record to `show` as its message and traceback, then `footer` (where the full logs are)."""

    def __init__(self, show: Show, footer: str) -> None:
        super().__init__()
        self.show = show
        self.footer = footer
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.show(f"{self.format(record)}\n{self.footer}")
        except Exception:
            self.handleError(record)


def logs_footer(log_file: Path, spark_log: Path | None) -> str:
    """Where a run's full logs are: the runtime's, and Spark's own when it writes one."""
    return f"logs: {log_file}" + (f"; Spark's log: {spark_log}" if spark_log is not None else "")


@contextlib.contextmanager
def captured_logs(path: Path, *, show_failures: Show | None = None) -> Iterator[None]:
    """Send the functions' Powertools logs, anything printed and the libraries' logs to `path`, keeping
    the terminal (stderr) for progress; put everything back afterwards. A Spark job's failure (its class,
    message and traceback: `longjobs.offline.worker.FAILURES`) goes to `path` too, and to `show_failures`
    when given, with where the full logs are (Spark's own: `log_spark_to`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shown = Shown(show_failures, logs_footer(path, spark_log())) if show_failures is not None else None
    with path.open("a", encoding="utf-8") as sink:
        handler = logging.StreamHandler(sink)
        handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s"))
        saved = []
        if shown is not None:
            FAILURES.addHandler(shown)
        for name in LOGGERS:
            lib = logging.getLogger(name)
            saved.append((lib, lib.propagate, lib.level))
            lib.addHandler(handler)
            lib.propagate = False
            if lib.level == logging.NOTSET or lib.level > logging.INFO:
                lib.setLevel(logging.INFO if name == "longjobs.offline" else logging.WARNING)
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
            if shown is not None:
                FAILURES.removeHandler(shown)


def run_scenario(
    scenario: Scenario, *, work_dir: Path, progress: Progress | None = None, show_failures: Show | None = None
) -> RunResult:
    """Run the scenario to its end (every message settled, or `timeout_s`) and report. Its logs go to
    `work_dir` (Spark's to `spark.log`), and each Spark job's failure to `show_failures` too when given."""
    wall_start = time.monotonic()
    work_dir.mkdir(parents=True, exist_ok=True)
    if any(scenario.runs_spark(job) for job in scenario.jobs):  # no Spark job: no Spark log to name
        log_spark_to(work_dir)
    prepare_spark(scenario, work_dir)
    faults = Faults(scenario)
    with (
        captured_logs(work_dir / RUNTIME_LOG, show_failures=show_failures),
        warnings.catch_warnings(),
        LocalProcessor(
            scenario.settings,
            catalog=scenario.job_catalog(),
            work_dir=work_dir,
            faults=faults,
            spark_heartbeat_s=scenario.spark_heartbeat_s,
            batch_size=scenario.batch_size,
            spark_workers=spark_workers(scenario),
        ) as processor,
    ):
        # An invocation that dies before adding a metric flushes none; Powertools warns on stderr.
        warnings.filterwarnings("ignore", message="No application metrics to publish")
        result = _run(scenario, processor, work_dir, progress)
    result.report["wall_s"] = round(time.monotonic() - wall_start, 1)
    return result


def _run(scenario: Scenario, processor: LocalProcessor, work_dir: Path, progress: Progress | None) -> RunResult:
    emulator, resources, faults = processor.emulator, processor.resources, processor.faults
    settings = resources.settings
    observer = Observer(emulator, resources)
    assert processor.mapping is not None
    processor.mapping.on_batch = observer.on_batch
    actions = TimedActions(
        faults,
        view=observer,
        mapping=processor.mapping,
        store=LeaseStore(
            emulator.dynamodb(), resources.table_name, shards=settings.shards, closed_ttl_s=settings.closed_ttl_s
        ),
        sqs=emulator.sqs(),
        stepfunctions=emulator.stepfunctions(),
    )
    start = faults.begin()
    for job in scenario.jobs:
        observer.send(job.id, message_body(job, work_dir), group=job.group, dedup_id=job.dedup_id)
    processor.start(actions)
    notes = RedeliveryNotes(faults, origin=start, verdict_after_s=EXTENDER_TIMEOUT_S + settings.extender_period_s)
    settled = False
    try:
        settled = _wait_until_settled(scenario, observer, progress, start, notes)
    finally:
        end = time.time()
        processor.stop()
        observer.mark_end()
        processor.abort_running()
        if progress is not None:
            for text in notes.new(observer.tracks.values(), end, final=True):
                progress.note(end - start, text)
            progress.close()
    observer.poll()
    observer.collect_executions(job_spans=bool(scenario.job_catalog().limited()))
    report = build_report(scenario, observer.tracks, emulator.api_calls(), end - start, faults=faults, end=end)
    found = violations(scenario, observer.tracks, faults, end=end)
    # A run its timeout ended was stopped: the report judges what it left queued against each job's `expect`.
    lines = history(observer.tracks, faults, start=start, types=scenario_types(scenario), stopped=not settled)
    findings = [str(finding) for finding in judge(scenario.job_catalog(), lines)]
    report["checker"] = {"records": len(lines), "findings": findings}
    found += [f"{CHECKER_FINDING}{finding}" for finding in findings]
    report["ok"] = not found
    return RunResult(report, found, observer.tracks, start, end, faults, lines)


def _wait_until_settled(
    scenario: Scenario, observer: Observer, progress: Progress | None, start: float, notes: RedeliveryNotes
) -> bool:
    """Poll until every message is deleted or in the DLQ and no execution runs (True), or the timeout (False);
    show the counts, and a line for each delivery while a job ran (with the fault that excuses it)."""
    deadline = start + scenario.timeout_s
    settled_at: float | None = None
    stop = threading.Event()
    while not stop.wait(POLL_S) and time.time() < deadline:
        observer.poll()
        running = observer.running_jobs()
        tracks = observer.tracks.values()
        if progress is not None:
            now = time.time()
            for text in notes.new(tracks, now):
                progress.note(now - start, text)
            progress.update(now - start, live_counts(tracks, running, notes.faults))
        if all(t.final in ("deleted", "dlq", "lost") for t in tracks):
            settled_at = settled_at or time.time()
            if not running or time.time() - settled_at > SETTLE_S:
                return True
        else:
            settled_at = None
    return False
