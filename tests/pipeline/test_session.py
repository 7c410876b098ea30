"""The local session's Python workers (a Python function applied to rows) run on the driver's interpreter,
whatever `python3` on the PATH is: Spark refuses a worker of another minor version."""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark.sql import SparkSession

from tests import run_python


def test_python_workers_run_on_the_drivers_interpreter(spark: SparkSession) -> None:
    workers = spark.sparkContext.parallelize(range(2), 2).map(lambda _: (sys.executable, sys.version)).collect()

    assert workers == [(sys.executable, sys.version)] * 2


JVM_INCUBATOR_NOTICE = "WARNING: Using incubator modules: jdk.incubator.vector\n"
"""The one line left. Spark 4's launcher adds the incubating Vector API module to every JVM it starts (its
`JavaModuleOptions`, not a setting), and Java 17 announces an incubator module on stderr with no option to
stay silent. It says nothing about the session."""


def test_session_local_session_starts_without_a_log_line(tmp_path: Path) -> None:
    """Spark prints its default level and a native-library warning on every start unless configured; the
    local session logs errors only, from the JVM's start (a process of its own: one JVM per process)."""
    script = (
        "from longjobs.pipeline.session import local_session\n"
        "print(local_session('quiet', shuffle_partitions=1).range(3).count())\n"
    )
    done = run_python(["-c", script], timeout=300, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "3\n"), done.stderr
    assert done.stderr in ("", JVM_INCUBATOR_NOTICE)
