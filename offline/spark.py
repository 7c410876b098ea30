"""The local SparkSession of the offline runtime: created once per process, on first use.

Two local cores and few shuffle partitions: the offline partitions are small, and the machine is
shared with the emulator and the functions. The pipeline's own session settings are applied.
"""

from __future__ import annotations

import os
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@cache
def local_session() -> SparkSession:
    from pyspark.sql import SparkSession

    from pipeline.job import SESSION_CONF

    # Local mode talks to itself only; naming the loopback spares the JVM's warning about the hostname.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("sqs-long-jobs-offline")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # the terminal shows the runtime's own progress
        .config("spark.driver.memory", "1g")
    )
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
