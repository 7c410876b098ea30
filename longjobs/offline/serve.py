"""`python -m offline serve`: the processor as a long-lived local service your own AWS tools talk to.

The same `LocalProcessor` as `run` and `demo`, on a port you choose, with no faults, serving until
Ctrl-C or SIGTERM. Anything that speaks AWS reaches it: the AWS CLI or boto3 with
`--endpoint-url`/`endpoint_url=` set to the printed endpoint (any credentials, region us-east-1), and
`longjobs --endpoint-url ...`.

Stopping drains: the event source mapping stops first, so nothing new starts; the jobs that run get
`--drain-s` seconds to finish (the extender keeps renewing them); what still runs then is stopped
and its message released (its lease RELEASED, the message visible again), so no lease is left
ACTIVE. The service prints what it did. Its state lives in memory: it is gone when the process ends.

What it saw is written down at the stop, as every offline run's is: every message the mapping
delivered, in the simulation's trace format (`trace.jsonl` under the work directory), judged by the
independent checker (`longjobs.offline.history`). A finding makes the exit code 1.
"""

from __future__ import annotations

import fcntl
import json
import re
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any, TextIO

from longjobs.engine.clock import SystemClock
from longjobs.engine.jobs import JobCatalog, JobTypeError, load_catalog, load_catalog_file
from longjobs.engine.lease import LastError, LeaseStore
from longjobs.engine.settings import Settings, SettingsError
from longjobs.engine.settle import release
from longjobs.engine.visibility import VisibilityClient
from longjobs.offline.emulator import REGION, PortInUseError
from longjobs.offline.faults import Faults
from longjobs.offline.history import history, judge
from longjobs.offline.observe import Observer
from longjobs.offline.processor import NO_PYSPARK, LocalProcessor, has_pyspark, pyspark_types
from longjobs.offline.programs import as_typed, java_missing
from longjobs.offline.resources import RUNTIME_SETTINGS
from longjobs.offline.runtime import captured_logs, logs_footer
from longjobs.offline.spark import log_spark_to

HISTORY_FILE = "trace.jsonl"
"""Where, under the work directory, a stopped service writes its history."""
SERVE_SETTINGS: dict[str, Any] = {
    "policy": "adaptive",
    "extender_period_s": 1,
    "adaptive_lost_runs_survived": 2,
    "adaptive_ceiling_s": 30,
    "receiver_timeout_s": 10,
    "reconcile_grace_s": 15,
    "release_delay_base_s": 1,
    "release_delay_cap_s": 30,
}
"""A local service reacts in seconds: a 1 s extender period (EventBridge's floor is a minute; offline
any period goes), chunks of at most 30 s, short release delays. `--settings FILE` overrides any but the
resources the service creates (`RUNTIME_SETTINGS`)."""
SPARK_WORKERS = 2
SPARK_HEARTBEAT_S = 60


class ServeError(Exception):
    """Why the service cannot start, with the fix: printed as one line."""


@dataclass
class Calm:
    """A fault plan with no faults (the service runs as AWS would, with Lambda's timeouts enforced)."""

    settings: Settings
    faults: Sequence[Any] = ()
    seed: int = 0


@dataclass
class Drained:
    """What stopping did."""

    finished: int = 0
    released: list[str] = field(default_factory=list)
    active_left: int = 0


def serve_settings(path: Path | None) -> Settings:
    """The service's settings: `SERVE_SETTINGS`, with a JSON file of engine settings on top."""
    values = dict(SERVE_SETTINGS)
    if path is not None:
        try:
            given = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ServeError(f"cannot read the settings file {path}: {exc.strerror}") from None
        except ValueError as exc:
            raise ServeError(f"{path} is not JSON: {exc}") from None
        if not isinstance(given, Mapping):
            raise ServeError(f"{path}: must be a JSON object of engine settings")
        owned = sorted(RUNTIME_SETTINGS.intersection(given))
        if owned:
            raise ServeError(
                f"{path}: {', '.join(owned)}: set by the local service from the resources it creates; remove "
                f"{'it' if len(owned) == 1 else 'them'}"
            )
        values.update(given)
    try:
        return Settings.load(values)
    except SettingsError as exc:
        if path is None:
            raise ServeError(str(exc)) from None
        raise ServeError(f"{path}: {_blamed(str(exc).removeprefix('invalid settings: '), given)}") from None


def _blamed(problem: str, given: Mapping[str, Any]) -> str:
    """`problem`, led by the file's settings it names when the setting it refuses is one of `SERVE_SETTINGS`
    the file leaves unset: the service set that value, so the fix is to set it in the file too."""
    refused = re.match(r"(\w+)=", problem)
    if refused is None or refused[1] not in SERVE_SETTINGS or refused[1] in given:
        return problem
    key = refused[1]
    theirs = [name for name in given if re.search(rf"\b{re.escape(name)}=", problem)]
    lead = " and ".join(f"{name}={given[name]}" for name in theirs) or "the file's settings"
    return (
        f"{lead} {'does' if len(theirs) == 1 else 'do'} not fit the service's own {key}={SERVE_SETTINGS[key]}, "
        f"which the file leaves unset: {problem}; set {key} in the file too"
        + (f", or change {' or '.join(theirs)}" if theirs else "")
    )


LOCK_FILE = ".serve.lock"


def hold_work_dir(work_dir: Path) -> IO[str]:
    """The service's hold on `work_dir` for its life, an exclusive `flock` on a file there: a second
    service on the same folder would write into this one's log, job catalog and Spark work. The kernel
    lets go of it when the process ends, however it ends, so a crash leaves no stale lock."""
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
        held = (work_dir / LOCK_FILE).open("a", encoding="utf-8")
    except OSError as exc:
        raise ServeError(f"cannot write to {work_dir}: {exc.strerror}") from None
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        held.close()
        raise ServeError(f"another serve uses {work_dir}: stop it, or give this one its own --work-dir") from None
    return held


def serve_catalog(path: Path | None) -> JobCatalog:
    """The job types: `--jobs-file`, else `jobs.json` in the current directory if there is one, else the
    built-ins; every declaration checked as `cdk synth` checks it."""
    if path is None and Path("jobs.json").is_file():
        path = Path("jobs.json")
    try:
        if path is None:
            return load_catalog(strict=True)
        return load_catalog_file(path, strict=True)
    except JobTypeError as exc:
        raise ServeError(str(exc)) from None


def check_java(catalog: JobCatalog) -> None:
    """Java 17 is needed only where the local Spark can start: some type runs on it and PySpark is there."""
    if pyspark_types(catalog) and has_pyspark() and (missing := java_missing()) is not None:
        raise ServeError(missing)


def banner(processor: LocalProcessor, catalog: JobCatalog, drain_s: float) -> str:
    resources, endpoint = processor.resources, processor.endpoint
    unrunnable = [] if has_pyspark() else pyspark_types(catalog)
    example = json.dumps({"job_id": "hello", "type": "wait", "params": {"seconds": 5}})
    rows = [
        f"long-jobs local service on {endpoint}",
        f"  region          {REGION} (any credentials)",
        f"  queue           {resources.queue_url}",
        f"  dead-letter     {resources.dlq_url}",
        *(
            f"  waiting queue   {url} (job type {name}: parked jobs)"
            for name, url in resources.waiting_queue_urls.items()
            if catalog.limit(name) is not None  # every type has one; only a limited type's holds anything
        ),
        f"  lease table     {resources.table_name}",
        f"  state machine   {resources.state_machine_arn}",
        f"  job types       {', '.join(sorted(job_type.name for job_type in catalog))}",
        *([f"  not runnable    {', '.join(unrunnable)}: {NO_PYSPARK}"] if unrunnable else []),
        # Works on a machine with no AWS configuration. The SDKs, AWS CLI v2 and longjobs read
        # AWS_ENDPOINT_URL; AWS CLI v1 does not, so the aws command names the endpoint too.
        f"first:       export AWS_ENDPOINT_URL={endpoint} AWS_DEFAULT_REGION={REGION} "
        "AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local",
        f"send a job:  aws --endpoint-url {endpoint} sqs send-message --queue-url {resources.queue_url} "
        + ("--message-group-id hello " if resources.settings.fifo else "")  # FIFO: each job names its group
        + f"--message-body '{example}'",
        f"watch it:    {as_typed('longjobs')} status --watch",
        f"Ctrl-C or SIGTERM stops it: running jobs get {drain_s:g} s to finish, the rest are stopped and released.",
    ]
    return "\n".join(rows)


def still_running(
    processor: LocalProcessor, drain_s: float, hurry: threading.Event, *, now: Callable[[], float] = time.monotonic
) -> tuple[set[str], set[str]]:
    """The executions running when the drain began, and those still running after `drain_s`, or once
    `hurry` is set (a second Ctrl-C or SIGTERM: the user wants them stopped now). Looks every 0.5 s."""
    started = set(processor.running_executions())
    running = set(started)
    deadline = now() + drain_s
    while running and not hurry.wait(min(0.5, max(0.0, deadline - now()))):
        running &= set(processor.running_executions())
        if now() >= deadline:
            break
    return started, running


def drain(processor: LocalProcessor, drain_s: float, hurry: threading.Event | None = None) -> Drained:
    """Stop receiving; give what runs `drain_s` to finish (less once `hurry` is set); stop what still runs
    and release its message."""
    processor.stop_receiving()
    started, running = still_running(processor, drain_s, hurry or threading.Event())
    processor.abort_running()
    processor.stop(join_timeout_s=5)  # a Spark job cannot be interrupted: its worker is left to the exit
    settings = processor.settings
    store = LeaseStore(
        processor.emulator.dynamodb(),
        settings.table_name or "",
        shards=settings.shards,
        closed_ttl_s=settings.closed_ttl_s,
    )
    clock = SystemClock()
    visibility = VisibilityClient(processor.emulator.sqs(), clock=clock)
    outcome = Drained(finished=len(started - running))
    for lease in store.index.due(None):  # every lease still ACTIVE
        if release(
            lease, store=store, visibility=visibility, clock=clock, reason=LastError("service stopped"), delay_s=0
        ):
            outcome.released.append(lease.message_id)
    outcome.active_left = len(store.index.due(None))
    return outcome


def serve(
    *,
    port: int,
    jobs_file: Path | None,
    settings_file: Path | None,
    work_dir: Path,
    drain_s: float,
    out: TextIO = sys.stdout,
    stop: threading.Event | None = None,
) -> int:
    """Run the service until `stop` is set (by SIGINT or SIGTERM when None). Returns the exit code."""
    try:
        settings = serve_settings(settings_file)
        catalog = serve_catalog(jobs_file)
        check_java(catalog)
        held = hold_work_dir(work_dir)
    except ServeError as exc:
        print(f"serve: {exc}", file=sys.stderr)
        return 2
    hurry = threading.Event()
    stop = stop or _on_signals(hurry)
    log_file = work_dir / "serve.log"
    spark_log = log_spark_to(work_dir) if pyspark_types(catalog) and has_pyspark() else None
    try:
        with (
            held,
            # A Spark job's failure (its class, message and traceback) is the job owner's to read at once.
            captured_logs(log_file, show_failures=lambda text: print(text, file=out, flush=True)),
            warnings.catch_warnings(),
            LocalProcessor(
                settings,
                catalog=catalog,
                work_dir=work_dir,
                faults=Faults(Calm(settings)),
                port=port,
                spark_heartbeat_s=SPARK_HEARTBEAT_S,
                spark_workers=SPARK_WORKERS,
            ) as processor,
        ):
            warnings.filterwarnings("ignore", message="No application metrics to publish")
            observer = Observer(processor.emulator, processor.resources, follow_every_message=True)
            assert processor.mapping is not None
            processor.mapping.on_batch = observer.on_batch
            start = processor.faults.begin()
            processor.start()
            print(banner(processor, catalog, drain_s), file=out, flush=True)
            print(logs_footer(log_file, spark_log), file=out, flush=True)
            wait_for_stop(stop)
            print(
                f"stopping: no new receives; running jobs get {drain_s:g} s (Ctrl-C again: stop them now) ...",
                file=out,
                flush=True,
            )
            outcome = drain(processor, drain_s, hurry)
            findings = judge_history(observer, catalog, start=start, path=work_dir / HISTORY_FILE, out=out)
    except PortInUseError as exc:
        print(f"serve: {exc}: stop what listens there, or pass --port with a free port", file=sys.stderr)
        return 2
    print(
        f"stopped: {outcome.finished} execution(s) finished, {len(outcome.released)} stopped and released "
        f"({', '.join(outcome.released) or 'none'}); {outcome.active_left} lease(s) left ACTIVE",
        file=out,
        flush=True,
    )
    return 1 if findings else 0


def judge_history(observer: Observer, catalog: JobCatalog, *, start: float, path: Path, out: TextIO) -> list[str]:
    """Write the service's history (every message the mapping delivered) in the simulation's trace format,
    have the independent checker judge it, and print the verdict; returns the findings."""
    for _ in range(2):  # the second look decides what the first saw half-done (a copy taken, its lease unread)
        observer.poll()
    observer.collect_executions()
    lines = history(observer.tracks, None, start=start, types=observer.types, stopped=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    findings = [str(finding) for finding in judge(catalog, lines)]
    verdict = "; ".join(findings) if findings else "the independent checker found nothing"
    print(f"history: {path} ({len(observer.tracks)} message(s)): {verdict}", file=out, flush=True)
    return findings


STOP_POLL_S = 0.5
"""How often the main thread wakes while it waits for a stop (`wait_for_stop`)."""


def wait_for_stop(stop: threading.Event) -> None:
    """Until `stop` is set, waking every `STOP_POLL_S`. The kernel may deliver SIGTERM to any thread of the
    process, and Python runs the handler in the main thread only when that thread runs bytecode
    (https://docs.python.org/3/library/signal.html#signals-and-threads). A wait with no timeout would then
    sleep through the signal, and the service would never stop."""
    while not stop.wait(STOP_POLL_S):
        pass


def _on_signals(hurry: threading.Event) -> threading.Event:
    """The event the first SIGINT or SIGTERM sets (stop); a second one sets `hurry` (skip the drain)."""
    stop = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        (hurry if stop.is_set() else stop).set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
    return stop


__all__ = ["ServeError", "serve"]
