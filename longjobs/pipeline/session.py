"""The local SparkSession the pipeline runs on outside Glue: the offline worker, the tests and the benchmark.

Local mode on two cores, no web UI, no console progress bar and no log lines but errors, and the pipeline's own session
settings (`longjobs.pipeline.job.SESSION_CONF`). Given a log file, Spark logs its warnings and errors there instead,
and nothing on the console. Glue builds its own session (`longjobs.pipeline.glue_job`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from longjobs.pipeline.job import SESSION_CONF

LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
"""Spark's log4j 2 configuration for the local session: errors only, on the console (stderr)."""
FILE_LOG_CONFIG = Path(__file__).with_name("log4j2-file.properties")
"""Spark's log4j 2 configuration for a session given a log file: warnings and errors, to that file only."""
LOG_FILE_PROPERTY = "longjobs.spark.log"
"""The JVM's system property that names the log file (`FILE_LOG_CONFIG` reads it)."""


def java_option(name: str, value: object) -> str:
    """`-D<name>=<value>`, quoted as Spark's launcher splits `extraJavaOptions` (a path may hold a space)."""
    text = f"-D{name}={value}".replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def local_session(
    app_name: str, *, shuffle_partitions: int, driver_memory: str = "1g", log_file: Path | None = None
) -> SparkSession:
    """A `local[2]` session (the existing one, if this process has one: Spark allows one per JVM). With
    `log_file`, Spark's warnings and errors go to that file (appended to), and none to the console."""
    # Local mode talks to itself only; naming the loopback spares the JVM's warning about the hostname.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers (a Python function applied to rows) run on this interpreter. Spark's default is the
    # PATH's `python3`, which may be another Python (pyenv's global one), and a worker whose minor version
    # differs from the driver's fails the job (PYTHON_VERSION_MISMATCH).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    options = [java_option("log4j2.configurationFile", LOG_CONFIG if log_file is None else FILE_LOG_CONFIG)]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        options.append(java_option(LOG_FILE_PROPERTY, log_file.resolve()))
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # From the JVM's start: setLogLevel comes after Spark has printed its start-up lines.
        .config("spark.driver.extraJavaOptions", " ".join(options))
        # Adaptive execution merges small shuffle partitions up to 64 MB by default. On two cores that
        # turns the pipeline's 160 MB shuffles into three tasks, and one core idles for the third.
        .config("spark.sql.adaptive.advisoryPartitionSizeInBytes", "16m")
    )
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR" if log_file is None else "WARN")
    return session
