"""The local SparkSession of the offline runtime: created once per process, on first use.

Two local cores and few shuffle partitions: the offline partitions are small, and the machine is
shared with the emulator and the functions.

Spark's own log (log4j: its warnings and errors, with their Java stack traces) goes to `spark.log` in the
work folder the runtime names before the session starts (`log_spark_to`), not to the terminal. The JVM reads
its logging once, at its start: a process's later runs write to the first one's file.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_LOG = "spark.log"
"""Spark's log, in the runtime's work folder."""

_lock = threading.Lock()
_session: SparkSession | None = None
_log_file: Path | None = None
"""Where Spark logs: named before the session starts, kept after (None: errors only, on the console)."""


def log_spark_to(work_dir: Path) -> Path | None:
    """Send Spark's log to `SPARK_LOG` in `work_dir`, if the session has not started yet. Returns the file
    Spark logs to (that of the run that started the session), or None when it logs to the console."""
    global _log_file
    with _lock:
        if _session is None:
            _log_file = work_dir / SPARK_LOG
        return _log_file


def spark_log() -> Path | None:
    """The file Spark logs to, or will once its session starts (None: errors only, on the console)."""
    with _lock:
        return _log_file


def local_session() -> SparkSession:
    """The process's session, started at the first call (from any thread)."""
    global _session
    with _lock:
        if _session is None:
            from longjobs.pipeline.session import local_session as pipeline_session

            _session = pipeline_session("sqs-long-jobs-offline", shuffle_partitions=2, log_file=_log_file)
        return _session


def started_session() -> SparkSession | None:
    """The process's session if it has started, without starting it."""
    with _lock:
        return _session


def group_running(group: str) -> bool:
    """Whether a Spark job of the job group `group` runs on the process's session, as Spark's status
    tracker tells it (none when no session has started)."""
    session = started_session()
    if session is None:
        return False
    tracker = session.sparkContext.statusTracker()
    for job_id in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job_id)
        if info is not None and info.status == "RUNNING":
            return True
    return False
