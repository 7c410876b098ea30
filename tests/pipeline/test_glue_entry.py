"""The Glue entry of every pyspark job type, run locally: a user's entry file, its params and its summary."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from longjobs.pipeline.glue_entry import EntryError, JobExit, _default_session, main, parse_args
from tests import REPO_ROOT, run_python
from tests.pipeline.conftest import DATE, write_lines

WORDCOUNT = REPO_ROOT / "jobs" / "wordcount.py"


def test_glue_entry_runs_a_users_entry_and_writes_its_summary(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("the cat and the hat\nthe end\n")
    (folder / "_SUCCESS").write_text("")  # a completion marker: Spark skips it
    summary_path = tmp_path / "summaries" / "run.json"
    params = {"input": str(folder), "output": str(tmp_path / "counts"), "min_length": 3}
    argv = ["glue_entry.py", "--job-file", str(WORDCOUNT), "--job-function", "run", "--params", json.dumps(params)]

    assert main([*argv, "--summary-path", str(summary_path)], session=lambda: spark) == 0

    stored = json.loads(summary_path.read_text())
    assert stored == json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    top = [["the", 3], ["and", 1], ["cat", 1], ["end", 1], ["hat", 1]]
    assert stored == {"lines": 2, "words": 7, "distinct_words": 5, "top": top}
    assert spark.read.parquet(str(tmp_path / "counts")).count() == 5


def test_glue_entry_runs_the_builtin_spark_type_like_any_other(spark: SparkSession, tmp_path: Path) -> None:
    event = {"event_id": "a", "user_id": "u", "session_id": "s", "ts": f"{DATE}T03:00:00Z", "type": "view", "amount": 0}
    write_lines(tmp_path / "raw", [event, "not json"])
    params = {
        "input": str(tmp_path / "raw"),
        "date": DATE,
        "output": str(tmp_path / "c"),
        "quarantine": str(tmp_path / "q"),
    }
    argv = ["x", "--job-file", str(REPO_ROOT / "longjobs" / "pipeline" / "events.py"), "--job-function", "run"]
    summary = tmp_path / "s.json"
    assert main([*argv, "--params", json.dumps(params), "--summary-path", str(summary)], session=lambda: spark) == 0
    assert json.loads(summary.read_text())["quarantined"]["malformed"] == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--job-file", "x.py", "--job-function", "run", "--params", "{not json"], "--params is not JSON"),
        (["--job-file", "x.py", "--job-function", "run", "--params", "[1]"], "--params must be a JSON object"),
        (["--job-function", "run", "--params", "{}"], "give --job-module (on Glue) or --job-file"),
    ],
)
def test_glue_entry_refuses_bad_arguments_before_spark(argv: list[str], message: str) -> None:
    with pytest.raises(EntryError, match=re.escape(message)):
        parse_args(["glue_entry.py", *argv])


QUITS_IN_RUN = "import sys\n\n\ndef run(spark, params):\n    sys.exit(0)\n"
QUITS_ON_IMPORT = "import sys\n\nsys.exit(0)\n\n\ndef run(spark, params):\n    return {}\n"
ENDS_IN_RUN = "import os\n\n\ndef run(spark, params):\n    os._exit(0)\n"
ENDS_ON_IMPORT = "import os\n\nos._exit(0)\n\n\ndef run(spark, params):\n    return {}\n"


@pytest.mark.parametrize(
    ("code", "call"),
    [
        (QUITS_IN_RUN, "sys.exit(0)"),
        (QUITS_ON_IMPORT, "sys.exit(0)"),
        (ENDS_IN_RUN, "os._exit(0)"),
        (ENDS_ON_IMPORT, "os._exit(0)"),
    ],
    ids=["sys-in-run", "sys-on-import", "os-in-run", "os-on-import"],
)
def test_glue_entry_fails_a_job_that_exits_with_code_0(
    spark: SparkSession, tmp_path: Path, code: str, call: str, process_exits: list[int]
) -> None:
    """A job's `sys.exit(0)` or `os._exit(0)` returns no summary: the entry fails, as the offline worker fails
    it, rather than end the script with status 0, which Glue ends SUCCEEDED and the workflow takes for the
    job's success."""
    job = tmp_path / "quits.py"
    job.write_text(code)
    summary = tmp_path / "summary.json"
    argv = ["glue_entry.py", "--job-file", str(job), "--job-function", "run", "--params", "{}"]

    with pytest.raises(JobExit, match=re.escape(f"the job called {call}: it returned no summary")):
        main([*argv, "--summary-path", str(summary)], session=lambda: spark)

    assert not summary.exists()
    assert process_exits == []


@pytest.mark.parametrize(
    ("code", "call"), [(QUITS_ON_IMPORT, "sys.exit(0)"), (ENDS_ON_IMPORT, "os._exit(0)")], ids=["sys", "os"]
)
def test_glue_entry_script_exits_with_an_error_when_the_job_exits_with_code_0(
    tmp_path: Path, code: str, call: str
) -> None:
    """What Glue reads of the script: its exit status. The job exits while it is imported, before Spark starts."""
    job = tmp_path / "quits.py"
    job.write_text(code)
    argv = ["--job-file", str(job), "--job-function", "run", "--params", "{}"]

    ended = run_python(["-m", "longjobs.pipeline.glue_entry", *argv], timeout=120, cwd=tmp_path)

    assert ended.returncode == 1, ended.stderr
    assert f"JobExit: the job called {call}: it returned no summary" in ended.stderr


def test_glue_entry_session_on_glue_is_a_glue_contexts(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """On Glue the script makes a `GlueContext`: without one, Glue writes none of the run's job metrics
    (https://repost.aws/knowledge-center/glue-job-metrics-cloudwatch), and the dashboard's Glue graphs stay
    empty. `awsglue` exists only on Glue, so a stand-in records what the script makes."""
    made: list[object] = []

    class GlueContext:
        def __init__(self, context: object) -> None:
            made.append(context)
            self.spark_session = spark

    glue_context = types.ModuleType("awsglue.context")
    glue_context.GlueContext = GlueContext  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "awsglue", types.ModuleType("awsglue"))
    monkeypatch.setitem(sys.modules, "awsglue.context", glue_context)

    assert _default_session() is spark
    assert made == [spark.sparkContext], "one GlueContext, over the script's SparkContext"
