"""`longjobs submit`'s pure parts: `--param` parsing and the job message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from longjobs.cli.catalog import Catalog
from longjobs.cli.errors import CliError, UsageError
from longjobs.cli.submit import job_body, new_job_id, parse_params, parse_value, validate, validation_settings
from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog, load_catalog_file


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("30", 30),
        ("1.5", 1.5),
        ("true", True),
        ("null", None),
        ('"30"', "30"),
        ('{"a": [1]}', {"a": [1]}),
        ("2026-11-20", "2026-11-20"),
        ("s3://bucket/key", "s3://bucket/key"),
        ("", ""),
        ("a=b", "a=b"),
        ("NaN", "NaN"),  # not JSON (RFC 8259): the text, never a float the body could not carry
        ("Infinity", "Infinity"),
        ("1e400", "1e400"),
    ],
)
def test_cli_parse_value_is_json_when_it_parses_else_the_text(text: str, value: object) -> None:
    assert parse_value(text) == value


def test_cli_parse_params_splits_on_the_first_equals_sign() -> None:
    assert parse_params(["seconds=30", "fail=false", "text=a=b"]) == {"seconds": 30, "fail": False, "text": "a=b"}


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (["seconds"], "--param 'seconds': expected key=value"),
        (["=3"], "--param '=3': expected key=value"),
        (["a=1", "a=2"], "--param a is given twice"),
    ],
)
def test_cli_parse_params_bad_syntax_is_a_usage_error(pairs: list[str], message: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_params(pairs)
    assert raised.value.message == message
    assert raised.value.code == 2


def test_cli_job_body_is_the_projects_job_message() -> None:
    body = job_body("wait", {"seconds": 3}, "j-1")

    assert json.loads(body) == {"job_id": "j-1", "type": "wait", "params": {"seconds": 3}}


def test_cli_new_job_id_names_the_type_and_the_time() -> None:
    job_id = new_job_id("wait", now=1_795_000_000)

    assert job_id.startswith("wait-20261118T")
    assert job_id != new_job_id("wait", now=1_795_000_000)


BUILTINS = Catalog(JobCatalog(BUILTIN_TYPES), origin="stack LongJobs-test")


def test_cli_validate_returns_the_receivers_jobs() -> None:
    [job] = validate(job_body("wait", {"seconds": 3}, "j-1"), validation_settings(), BUILTINS)

    assert (job.type, job.params) == ("wait", {"seconds": 3, "fail": False})


def test_cli_validate_refuses_a_spark_job_without_outputs_where_no_default_is_configured() -> None:
    body = job_body("spark", {"input": "s3://raw-bucket/x/", "date": "2026-11-20"}, "j-1")

    with pytest.raises(CliError, match=r"InvalidParameters: params\.output: is required"):
        validate(body, validation_settings(), BUILTINS)
    [job] = validate(body, validation_settings("s3://curated-bucket/", "s3://quarantine-bucket/"), BUILTINS)
    assert job.params["output"] == "s3://curated-bucket/events/", "the stack's receiver fills it from its bucket"


def test_cli_validate_uses_the_catalog_it_is_given_and_names_it_in_its_errors() -> None:
    mine = Catalog(load_catalog_file(Path(__file__).parents[2] / "jobs.json"), origin="--jobs-file jobs.json")
    [job] = validate(job_body("wordcount", {"input": "s3://raw-bucket/texts/"}, "wc-1"), validation_settings(), mine)
    assert job.type == "wordcount"
    with pytest.raises(CliError) as refused:
        validate(job_body("wordcount", {"input": "s3://raw-bucket/texts/"}, "wc-1"), validation_settings(), BUILTINS)
    assert str(refused.value) == (
        "UnknownJobType: type: 'wordcount' is not a job type (known types: echo, spark, wait) "
        "(job types of stack LongJobs-test)"
    )


def test_cli_validate_refuses_a_body_the_receiver_would_drop() -> None:
    with pytest.raises(CliError, match="asks for no job"):
        validate('{"Event": "s3:TestEvent"}', validation_settings(), BUILTINS)
