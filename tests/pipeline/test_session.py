"""The local session's Python workers (a Python function applied to rows) run on the driver's interpreter,
whatever `python3` on the PATH is: Spark refuses a worker of another minor version."""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession


def test_python_workers_run_on_the_drivers_interpreter(spark: SparkSession) -> None:
    workers = spark.sparkContext.parallelize(range(2), 2).map(lambda _: (sys.executable, sys.version)).collect()

    assert workers == [(sys.executable, sys.version)] * 2
