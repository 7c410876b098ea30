"""`python -m offline run`: a scenario file in, the report file, the table and the timeline out."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from longjobs.history.checker import main as checker_main
from longjobs.offline import job_code
from longjobs.offline.__main__ import main
from tests import run_python
from tests.e2e.conftest import SPARK_HEARTBEAT_S, UNHURRIED_HEARTBEAT_S
from tests.short_settings import SPARK_THRESHOLD, UNHURRIED_THRESHOLD

pytestmark = pytest.mark.e2e

JOB_KEYS = {
    "final",
    "deliveries",
    "executions",
    "renewals",
    "redelivered_while_running",
    "redeliveries_excused",
    "released",
    "dlq_error",
    "last_error",
    "attempts",
    "summary",
    "max_concurrent_executions",
    "stopped",
    "lapses",
    "stuck_lease",
    "group",
    "started_at",
    "finished_at",
    "parked",
    "copies",
}


def write_scenario(path: Path, jobs: list[dict[str, object]]) -> Path:
    scenario = {"settings": UNHURRIED_THRESHOLD, "jobs": jobs, "spark_heartbeat_s": SPARK_HEARTBEAT_S, "timeout_s": 60}
    path.write_text(json.dumps(scenario), encoding="utf-8")
    return path


def test_command_command_run_writes_report_table_and_timeline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = write_scenario(
        tmp_path / "scenario.json",
        [{"id": "poison", "raw_body": "{not json"}, {"id": "short", "type": "wait", "seconds": 5}],
    )
    report_path = tmp_path / "out" / "report.json"
    timeline = tmp_path / "out" / "timeline.png"
    trace = tmp_path / "out" / "trace.jsonl"

    arguments = ["--scenario", str(scenario), "--report", str(report_path), "--timeline", str(timeline)]
    code = main(["run", *arguments, "--trace", str(trace)])

    assert code == 0
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert set(report) == {"ok", "jobs", "totals", "api_calls", "checker", "wall_s"}
    assert report["checker"] == {"records": len(trace.read_text(encoding="utf-8").splitlines()), "findings": []}
    assert checker_main([str(trace)]) == 0, "the history it wrote is what the independent checker judged"
    assert report["ok"] is True
    assert set(report["jobs"]) == {"poison", "short"}
    assert all(set(job) == JOB_KEYS for job in report["jobs"].values())
    assert report["totals"] == {
        "jobs": 2,
        "deleted": 1,
        "dlq": 1,
        "parked": 0,
        "renewals": report["jobs"]["short"]["renewals"],
        "redelivered_while_running": 0,
        "redeliveries_excused": 0,
        "double_runs": 0,
        "lapses": 0,
        "lost_messages": 0,
        "stuck_leases": 0,
        "max_concurrent_by_type": {"wait": 1},
        "faults_injected": {},
        "faults_missed": [],
    }
    assert report["jobs"]["short"]["max_concurrent_executions"] == 1
    assert report["jobs"]["short"]["renewals"] >= 1, "a 5 s job is renewed: a renewal falls due 1 s after the receive"
    assert report["api_calls"]["StartExecution"] == 1 and report["api_calls"]["SendMessage"] == 1, "the DLQ copy"
    assert timeline.read_bytes().startswith(b"\x89PNG")
    table = capsys.readouterr().out
    assert "poison  dlq" in table and "NotJson" in table and "2 jobs: 1 deleted, 1 in the DLQ" in table
    assert "0 delivered while running (0 excused by injected faults), 0 lapses" in table


def test_command_command_run_exits_non_zero_when_a_job_ends_unexpectedly(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "scenario.json", [{"id": "poison", "raw_body": "[1, 2]", "expect": "deleted"}])
    report_path = tmp_path / "report.json"

    code = main(["run", "--scenario", str(scenario), "--report", str(report_path), "--quiet"])

    assert code == 1
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["ok"] is False
    assert report["jobs"]["poison"]["final"] == "dlq"
    assert report["jobs"]["poison"]["dlq_error"].startswith("InvalidShape")


def test_command_command_run_refuses_an_invalid_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"jobs": [{"id": "a", "type": "wait", "seconds": 1}], "speed": 2}), encoding="utf-8")

    code = main(["run", "--scenario", str(scenario), "--report", str(tmp_path / "report.json"), "--quiet"])

    assert code == 2
    assert "speed: unknown key" in capsys.readouterr().err
    assert not (tmp_path / "report.json").exists()


def test_command_command_run_refuses_a_type_whose_requirements_do_not_install_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scenario installs its types' requirements before any job; when pip cannot, `run` stops there with
    the type, pip's reason and the command to run, as one line and exit code 2, never a traceback."""
    monkeypatch.setenv("LONGJOBS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(job_code, "pip_into", lambda *_: "ERROR: No matching distribution found for nope==1.0")
    (tmp_path / "mine.py").write_text("def run(spark, params):\n    return {}\n", encoding="utf-8")
    mine = {"name": "mine", "runner": "pyspark", "entry": f"{tmp_path / 'mine.py'}:run", "requirements": ["nope==1.0"]}
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"job_types": [mine], "jobs": [{"id": "m", "type": "mine", "params": {}}]}))

    code = main(["run", "--scenario", str(scenario), "--report", str(tmp_path / "report.json"), "--quiet"])

    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err, err
    [line] = [line for line in err.splitlines() if "nope==1.0" in line]
    assert "job type 'mine': cannot install its requirements: ERROR: No matching distribution" in line
    assert "-m pip install" in line
    assert not (tmp_path / "report.json").exists()


FAILING_UDF = """
from pyspark.sql import functions as F


def boom(value):
    raise ValueError(f"bad row {value}")


def run(spark, params):
    return {"rows": len(spark.range(4).select(F.udf(boom, "int")("id")).collect())}
"""
SPARK_LOG_LINE = re.compile(
    r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|ERROR|INFO) |\s+at (org|java|scala)\.)", re.MULTILINE
)
"""A line of Spark's log4j output (its pattern in longjobs/pipeline), or of a Java stack trace."""


def test_command_command_run_keeps_sparks_log_off_the_terminal_and_shows_the_jobs_failure(tmp_path: Path) -> None:
    """A Spark task that fails logs its Java stack traces; they go to `spark.log` in the work folder. The
    terminal shows the job's own error (class, message, traceback) and where both logs are. A process of
    its own: the JVM reads its logging once, at its start."""
    (tmp_path / "udf.py").write_text(FAILING_UDF, encoding="utf-8")
    udf_type = {"name": "udf", "runner": "pyspark", "entry": f"{tmp_path / 'udf.py'}:run"}
    scenario = {
        "settings": {**SPARK_THRESHOLD, "max_attempts": 1},
        "job_types": [udf_type],
        "jobs": [{"id": "udf", "type": "udf", "params": {}, "expect": "dlq"}],
        "spark_heartbeat_s": UNHURRIED_HEARTBEAT_S,
        "timeout_s": 120,
    }
    (tmp_path / "scenario.json").write_text(json.dumps(scenario), encoding="utf-8")
    report = tmp_path / "out" / "report.json"

    done = run_python(
        ["-m", "offline", "run", "--scenario", "scenario.json", "--report", "out/report.json"],
        timeout=600,
        cwd=tmp_path,
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(report.read_text(encoding="utf-8"))["ok"] is True
    assert SPARK_LOG_LINE.findall(done.stderr) == [], done.stderr
    assert "spark job udf failed: PythonException" in done.stderr, done.stderr
    assert "Traceback (most recent call last)" in done.stderr and "ValueError: bad row" in done.stderr
    assert "logs: out/work/runtime.log; Spark's log: out/work/spark.log" in done.stderr
    spark_log = (tmp_path / "out" / "work" / "spark.log").read_text(encoding="utf-8")
    assert "ERROR Executor: Exception in task" in spark_log and "at org.apache.spark." in spark_log
