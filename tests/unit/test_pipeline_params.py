"""Pipeline parameters and the Glue entry's arguments: every bad value refused, by name, before Spark starts."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from longjobs.pipeline.glue_job import command, main, parse_args
from longjobs.pipeline.params import MAX_LATENESS_MINUTES, PipelineParamError, PipelineParams

GOOD: dict[str, Any] = {
    "input": "s3://raw-bucket/events/date=2024-05-01/",
    "date": "2024-05-01",
    "output": "s3://curated-bucket/events/",
    "quarantine": "s3://quarantine-bucket/events/",
}


def problems(mapping: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(PipelineParamError) as raised:
        PipelineParams.from_mapping(mapping)
    return {problem.param: problem.rule for problem in raised.value.problems}


def test_params_from_mapping_accepts_s3_and_local_paths() -> None:
    params = PipelineParams.from_mapping({**GOOD, "lateness_minutes": "90"})
    assert params.lateness_minutes == 90
    local = PipelineParams.from_mapping({**GOOD, "input": "data/raw", "output": "data/curated", "quarantine": "q"})
    assert local.lateness_minutes == 60
    assert str(local.day) == "2024-05-01"


@pytest.mark.parametrize(
    ("change", "param", "fragment"),
    [
        ({"date": "2024-02-30"}, "date", "calendar date"),
        ({"date": "01/05/2024"}, "date", "YYYY-MM-DD"),
        ({"input": "http://example/x"}, "input", "scheme 'http'"),
        ({"output": "s3://Bad_Bucket/x"}, "output", "not a valid bucket name"),
        ({"quarantine": "s3:///x"}, "quarantine", "no bucket"),
        ({"input": " data/raw"}, "input", "whitespace"),
        ({"input": "x" * 300}, "input", "300 characters"),
        ({"input": ""}, "input", "empty"),
        ({"lateness_minutes": MAX_LATENESS_MINUTES + 1}, "lateness_minutes", "0..1440"),
        ({"lateness_minutes": -1}, "lateness_minutes", "0..1440"),
        ({"lateness_minutes": True}, "lateness_minutes", "integer"),
        ({"date": 20240501}, "date", "must be a string, got int"),
        ({"colour": "blue"}, "colour", "not a parameter of the pipeline"),
        ({"output": "s3://raw-bucket/events/date=2024-05-01/curated"}, "output", "lie inside input"),
        ({"quarantine": "s3://curated-bucket/events"}, "quarantine", "must differ from output"),
    ],
)
def test_params_from_mapping_names_the_bad_parameter(change: dict[str, Any], param: str, fragment: str) -> None:
    found = problems({**GOOD, **change})
    assert param in found
    assert fragment in found[param]


def test_params_from_mapping_lists_every_problem_at_once() -> None:
    found = problems({"date": "tomorrow", "input": "ftp://x", "extra": 1})
    assert set(found) == {"extra", "output", "quarantine", "date", "input"}
    assert found["output"] == "is required"


def test_params_from_mapping_refuses_a_non_mapping() -> None:
    with pytest.raises(PipelineParamError, match="params: must be a mapping, got list"):
        PipelineParams.from_mapping([1, 2])  # type: ignore[arg-type]


def test_params_constructor_validates_too() -> None:
    with pytest.raises(PipelineParamError, match="lateness_minutes"):
        PipelineParams(input="a", date="2024-05-01", output="b", quarantine="c", lateness_minutes=5_000)


def test_glue_args_parse_to_the_same_params() -> None:
    argv = ["glue_job.py", *(f"--{key}={value}" for key, value in GOOD.items()), "--lateness-minutes", "15"]
    args = parse_args([*argv, "--summary-path", "s3://curated-bucket/summaries/run.json"])
    assert args.params == PipelineParams.from_mapping({**GOOD, "lateness_minutes": 15})
    assert args.summary_path == "s3://curated-bucket/summaries/run.json"


def test_glue_main_refuses_a_bad_argument_before_starting_spark() -> None:
    def no_session() -> Any:
        raise AssertionError("a SparkSession was asked for before the arguments were checked")

    argv = ["glue_job.py", *(f"--{key}={value}" for key, value in {**GOOD, "date": "2024-13-01"}.items())]
    with pytest.raises(PipelineParamError, match="date: must be a calendar date YYYY-MM-DD, got '2024-13-01'"):
        main(argv, session=no_session)


def test_glue_main_refuses_a_bad_summary_path_before_starting_spark() -> None:
    argv = ["glue_job.py", *(f"--{key}={value}" for key, value in GOOD.items()), "--summary-path", "gs://x/y"]
    with pytest.raises(PipelineParamError, match="summary_path"):
        main(argv, session=lambda: pytest.fail("no session expected"))


def test_glue_main_reports_a_missing_argument(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["glue_job.py", "--input", "a"], session=lambda: pytest.fail("no session expected"))
    assert "--date" in capsys.readouterr().err


BAD_DATE = ["glue_job.py", *(f"--{key}={value}" for key, value in {**GOOD, "date": "2024-13-01"}.items())]


def test_glue_job_command_prints_bad_parameters_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Run by hand, the command prints the one line docs/pipeline.md shows, with exit code 2, not a traceback."""
    assert command(BAD_DATE) == 2
    assert capsys.readouterr().err.splitlines() == [
        "invalid pipeline parameters: date: must be a calendar date YYYY-MM-DD, got '2024-13-01'"
    ]


def test_glue_job_command_on_glue_raises_bad_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    """On Glue (its `awsglue` importable) the error is raised: the job run fails with it."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *args: object() if name == "awsglue" else find_spec(name, *args)
    )
    with pytest.raises(PipelineParamError, match="date: must be a calendar date"):
        command(BAD_DATE)
