"""A user's own pyspark job type, declared in the scenario, run offline by the local Spark worker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import REPO_ROOT
from tests.e2e.conftest import UNHURRIED_HEARTBEAT_S, Runner
from tests.short_settings import SPARK_THRESHOLD

pytestmark = pytest.mark.e2e

ENTRY = """
def run(spark, params):
    lines = spark.read.text(params["input"])
    return {"lines": lines.count(), "longest": max((len(r.value) for r in lines.collect()), default=0)}
"""


def test_job_types_a_users_pyspark_type_runs_offline_and_bad_params_go_to_the_dlq(run: Runner, tmp_path: Path) -> None:
    (tmp_path / "count_lines.py").write_text(ENTRY)
    data = tmp_path / "input"
    data.mkdir()
    (data / "part-0.txt").write_text("one\nthree\n")
    (data / "part-1.txt").write_text("seventeen\n")
    (data / "_SUCCESS").write_text("")
    lines_type = {
        "name": "lines",
        "runner": "pyspark",
        "entry": f"{tmp_path / 'count_lines.py'}:run",
        "params_schema": {"type": "object", "required": ["input"], "properties": {"input": {"type": "string"}}},
    }

    result = run(
        settings=SPARK_THRESHOLD,
        spark_heartbeat_s=UNHURRIED_HEARTBEAT_S,
        job_types=[lines_type],
        jobs=[
            {"id": "count", "type": "lines", "params": {"input": str(data)}},
            {"id": "typo", "type": "lines", "params": {"inptu": str(data)}, "expect": "dlq"},
        ],
    )

    assert result.report["ok"] is True, result.violations
    count, typo = result.report["jobs"]["count"], result.report["jobs"]["typo"]
    assert (count["final"], count["executions"]) == ("deleted", 1)
    assert count["summary"] == {"lines": 3, "longest": 9}, "the entry's own summary, stored on the lease"
    assert (typo["final"], typo["executions"]) == ("dlq", 0)
    assert typo["dlq_error"] == "InvalidParameters: params.input: is required"


def test_job_types_a_package_type_with_a_requirement_runs_offline_as_jobs_json_declares_it(
    run: Runner, tmp_path: Path
) -> None:
    """The jobs page's `textstats`, declared as in jobs.json: its helper module and its Unidecode UDF run
    on the local Spark worker of the offline runtime, which installs the requirement before the first job."""
    declared = next(
        t for t in json.loads((REPO_ROOT / "jobs.json").read_text())["job_types"] if t["name"] == "textstats"
    )
    textstats = {**declared, "entry": str(REPO_ROOT / declared["entry"]), "code": str(REPO_ROOT / declared["code"])}
    data = tmp_path / "input"
    data.mkdir()
    (data / "part-0.txt").write_text("Café au lait\ncafe CAFÉ crème\nCrème brûlée\n")

    result = run(
        settings=SPARK_THRESHOLD,
        spark_heartbeat_s=UNHURRIED_HEARTBEAT_S,
        job_types=[textstats],
        jobs=[{"id": "stats", "type": "textstats", "params": {"input": str(data), "min_length": 3}}],
    )

    assert result.report["ok"] is True, result.violations
    stats = result.report["jobs"]["stats"]
    assert (stats["final"], stats["executions"]) == ("deleted", 1)
    assert stats["summary"]["top"] == [["cafe", 3], ["creme", 2], ["brulee", 1], ["lait", 1]]


SLOW_ENTRY = """
import time


def run(spark, params):
    time.sleep(params.get("sleep", 0))
    return {"rows": spark.range(params["rows"]).count()}
"""


def test_job_types_an_emr_serverless_type_runs_on_local_spark_and_a_stop_runs_it_again(
    run: Runner, tmp_path: Path
) -> None:
    """A type whose platform is emr_serverless runs offline as a Glue type does, on the local Spark worker
    (moto runs no EMR Serverless). Its first execution is stopped while the job runs; the message comes
    back and the second execution runs the job to its end."""
    (tmp_path / "slow_rows.py").write_text(SLOW_ENTRY)
    emr_type = {
        "name": "rows-emr",
        "runner": "pyspark",
        "platform": "emr_serverless",
        "entry": f"{tmp_path / 'slow_rows.py'}:run",
        "emr_serverless": {"timeout_minutes": 30},
    }

    result = run(
        settings=SPARK_THRESHOLD,
        job_types=[emr_type],
        jobs=[{"id": "rows", "type": "rows-emr", "params": {"rows": 7, "sleep": 8}}],
        faults=[{"type": "abort_execution", "job": "rows", "at_s": 1}],
    )

    assert result.report["ok"] is True, result.violations
    rows = result.report["jobs"]["rows"]
    assert (rows["final"], rows["executions"], rows["summary"]) == ("deleted", 2, {"rows": 7})
    first, second = result.tracks["rows"].executions
    assert (first.status, second.status) == ("ABORTED", "SUCCEEDED"), "a stop ends its execution ABORTED, as on AWS"
