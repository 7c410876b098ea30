"""The local SparkSession the pipeline runs on outside Glue: the offline worker, the tests and the benchmark.

Local mode on two cores, no web UI, no console progress bar and no log lines but errors, and the pipeline's own session
settings (`longjobs.pipeline.job.SESSION_CONF`). Glue builds its own session (`longjobs.pipeline.glue_job`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from longjobs.pipeline.job import SESSION_CONF

LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
"""Spark's log4j 2 configuration for the local session: errors only."""


def local_session(app_name: str, *, shuffle_partitions: int, driver_memory: str = "1g") -> SparkSession:
    """A `local[2]` session (the existing one, if this process has one: Spark allows one per JVM)."""
    # Local mode talks to itself only; naming the loopback spares the JVM's warning about the hostname.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers (a Python function applied to rows) run on this interpreter. Spark's default is the
    # PATH's `python3`, which may be another Python (pyenv's global one), and a worker whose minor version
    # differs from the driver's fails the job (PYTHON_VERSION_MISMATCH).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # Errors only, from the JVM's start: setLogLevel comes after Spark has printed its start-up lines.
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG_CONFIG}")
        # Adaptive execution merges small shuffle partitions up to 64 MB by default. On two cores that
        # turns the pipeline's 160 MB shuffles into three tasks, and one core idles for the third.
        .config("spark.sql.adaptive.advisoryPartitionSizeInBytes", "16m")
    )
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
