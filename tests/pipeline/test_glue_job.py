"""The Glue script entry run locally: arguments in, the pipeline run, its summary printed and stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from longjobs.pipeline.glue_job import main
from tests import run_python
from tests.pipeline.conftest import DATE, write_lines


def test_glue_main_runs_the_pipeline_and_writes_its_summary(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(
        tmp_path / "raw",
        [
            {
                "event_id": "a",
                "user_id": "u",
                "session_id": "s",
                "ts": f"{DATE}T03:00:00Z",
                "type": "view",
                "amount": 0,
            },
            "not json",
        ],
    )
    summary_path = tmp_path / "summaries" / "run.json"
    argv = [
        "glue_job.py",
        "--input",
        str(tmp_path / "raw"),
        "--date",
        DATE,
        "--output",
        str(tmp_path / "curated"),
        "--quarantine",
        str(tmp_path / "quarantine"),
        "--summary-path",
        str(summary_path),
    ]

    assert main(argv, session=lambda: spark) == 0

    stored = json.loads(summary_path.read_text(encoding="utf-8"))
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert stored == printed
    assert (stored["rows_read"], stored["rows_written"]["events"], stored["quarantined"]["malformed"]) == (2, 1, 1)


def test_glue_job_as_a_command_prints_bad_parameters_in_one_line() -> None:
    """`python -m longjobs.pipeline.glue_job` with a bad date: the one line docs/pipeline.md shows, exit code 2."""
    args = ["--input", "data/raw", "--date", "2024-13-01", "--output", "data/curated", "--quarantine", "data/q"]

    done = run_python(["-m", "longjobs.pipeline.glue_job", *args], timeout=60)

    assert (done.returncode, done.stderr.splitlines()) == (
        2,
        ["invalid pipeline parameters: date: must be a calendar date YYYY-MM-DD, got '2024-13-01'"],
    )
