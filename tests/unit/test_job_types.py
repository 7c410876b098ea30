"""Job type declarations, the catalog, params validation and S3 triggers: each bad declaration named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

import pytest

from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog, JobType, JobTypeError, ParamsError, load_catalog
from longjobs.engine.jobs.catalog import catalog_from_env, full_date, load_catalog_file
from longjobs.engine.jobs.triggers import S3Trigger, TriggerError, notification_filter, partition_job_id
from tests import REPO_ROOT

WORDCOUNT: dict[str, Any] = {
    "name": "wordcount",
    "runner": "pyspark",
    "entry": "jobs/wordcount.py:run",
    "params_schema": {
        "type": "object",
        "required": ["input"],
        "additionalProperties": False,
        "properties": {"input": {"type": "string"}, "min_length": {"type": "integer", "minimum": 1}},
    },
    "glue": {"worker_type": "G.1X", "workers": 2, "timeout_minutes": 60},
}


EMR_WORDCOUNT: dict[str, Any] = {
    **{key: value for key, value in WORDCOUNT.items() if key != "glue"},
    "platform": "emr_serverless",
}
WAIT_SCHEMA = {"type": "object", "required": ["seconds"], "properties": {"seconds": {"type": "integer"}}}


def refused(**kwargs: Any) -> str:
    with pytest.raises(JobTypeError) as caught:
        load_catalog(**kwargs)
    return str(caught.value)


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("2026-02-28", True),
        ("2024-02-29", True),  # a leap day
        ("2026-02-29", False),
        ("2026-02-30", False),
        ("2026-04-31", False),
        ("2026-13-01", False),
        ("20260228", False),  # ISO 8601's basic form, which Python reads: not RFC 3339's full-date
        ("2026-2-8", False),
        (" 2026-02-28", False),
    ],
)
def test_catalog_date_format_is_a_calendar_day(value: str, valid: bool) -> None:
    """A params schema's `"format": "date"` is RFC 3339's full-date (JSON Schema's meaning): a day the
    calendar has, in `YYYY-MM-DD`. A user's type gets it as the bundled `spark` type does."""
    assert full_date(value) is valid
    schema = {"type": "object", "properties": {"day": {"type": "string", "format": "date"}}}
    own = {"name": "daily", "runner": "pyspark", "entry": "jobs/wordcount.py:run", "params_schema": schema}
    catalog = load_catalog(job_types=[own])
    if valid:
        assert catalog.validate_params(catalog.get("daily"), {"day": value}) == {"day": value}
    else:
        with pytest.raises(ParamsError):
            catalog.validate_params(catalog.get("daily"), {"day": value})


def test_catalog_adds_declared_types_to_the_builtins_in_order() -> None:
    catalog = load_catalog(job_types=[WORDCOUNT], base=REPO_ROOT, strict=True)
    assert list(catalog.types) == ["spark", "wait", "echo", "wordcount"]
    assert catalog.names == ["echo", "spark", "wait", "wordcount"]
    wordcount = catalog.get("wordcount")
    assert wordcount is not None and wordcount.entry_file == REPO_ROOT / "jobs" / "wordcount.py"
    assert (wordcount.entry_module, wordcount.entry_function) == ("wordcount", "run")


def test_catalog_a_declaration_of_a_builtins_name_replaces_it() -> None:
    tuned = {**BUILTIN_TYPES[0].declaration(), "glue": {"workers": 10}}
    catalog = load_catalog(job_types=[tuned])
    spark = catalog.get("spark")
    assert spark is not None and spark.glue is not None and spark.glue.workers == 10
    assert list(catalog.types) == ["spark", "wait", "echo"]


def test_jobs_json_lists_the_builtins_unchanged_and_the_example() -> None:
    catalog = load_catalog_file(REPO_ROOT / "jobs.json", strict=True)
    for builtin in BUILTIN_TYPES:
        declared = catalog.get(builtin.name)
        assert declared is not None and declared.declaration() == builtin.declaration(), builtin.name
    assert catalog.get("wordcount") is not None
    assert [t.job_type for t in catalog.s3_triggers] == ["spark"]


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ({"name": "Word Count", "runner": "wait"}, "job_types[0] 'Word Count': name: String should match pattern"),
        ({"name": "x", "runner": "pyspark"}, "job_types[0] 'x': entry: a pyspark type needs an entry"),
        ({"name": "x", "runner": "pyspark", "entry": "x.py"}, "entry: 'x.py' is not `path/to/file.py:function`"),
        ({"name": "x", "runner": "docker"}, "job_types[0] 'x': runner: Input should be 'pyspark'"),
        ({"name": "x", "runner": "wait"}, "a wait type's schema must require an integer `seconds`"),
        ({"name": "x", "runner": "inline"}, "runner: 'inline' is for the built-in echo only"),
        ({"name": "x", "runner": "state_machine"}, "state_machine: a state_machine type needs one"),
        (
            {"name": "x", "runner": "state_machine", "state_machine": {"arn": "arn:aws:sqs:us-east-1:1:q"}},
            "is not a state machine ARN",
        ),
        ({"name": "x", "runner": "state_machine", "state_machine": {}}, "state_machine.arn: Field required"),
        (
            {**WORDCOUNT, "name": "x", "runner": "wait"},
            "entry: only pyspark types have one",
        ),
        ({**WORDCOUNT, "params_schema": {"type": "array"}}, "params_schema: must be a JSON Schema of an object"),
        ({**WORDCOUNT, "defaults": {"output": "{bucket}/x"}}, "defaults: output: unknown placeholder(s) bucket"),
        ({**WORDCOUNT, "glue": {"workers": 1}}, "glue.workers: Input should be greater than or equal to 2"),
        ({**WORDCOUNT, "colour": "red"}, "job_types[0] 'wordcount': colour: Extra inputs are not permitted"),
        ({**WORDCOUNT, "platform": "dataproc"}, "platform: Input should be 'glue' or 'emr_serverless'"),
        (
            {"name": "x", "runner": "wait", "platform": "emr_serverless", "params_schema": WAIT_SCHEMA},
            "platform: only pyspark types choose one, this one's runner is 'wait'",
        ),
        ({**WORDCOUNT, "platform": "emr_serverless"}, "glue: only pyspark types on platform glue run on Glue"),
        (
            {**WORDCOUNT, "glue": None, "emr_serverless": {}},
            "emr_serverless: only pyspark types on platform emr_serverless run there, this one is platform 'glue'",
        ),
        (
            {**EMR_WORDCOUNT, "requirements": ["unidecode==1.4.0"]},
            "requirements: an emr_serverless type cannot install packages yet",
        ),
        (
            {**EMR_WORDCOUNT, "emr_serverless": {"timeout_minutes": 721}},
            "emr_serverless.timeout_minutes: Input should be less than or equal to 720",
        ),
        (
            {**EMR_WORDCOUNT, "emr_serverless": {"executor_cores": 4, "executor_memory_gb": 30}},
            "executor_memory_gb: 30 GB for 4 vCPU: give 2 to 6 GB per vCPU",
        ),
        (
            {**EMR_WORDCOUNT, "emr_serverless": {"application_arn": "arn:aws:glue:us-east-1:1:job/x"}},
            "is not an EMR Serverless application ARN",
        ),
    ],
)
def test_catalog_refuses_a_bad_declaration_naming_it_and_its_field(declaration: dict[str, Any], message: str) -> None:
    assert message in refused(job_types=[declaration])


def test_catalog_emr_serverless_type_takes_documented_defaults_and_no_glue_limit() -> None:
    catalog = load_catalog(job_types=[EMR_WORDCOUNT], base=REPO_ROOT, strict=True)
    emr = catalog.get("wordcount")
    assert emr is not None and emr.platform == "emr_serverless" and emr.glue is None
    assert (emr.emr.release_label, emr.emr.timeout_minutes, emr.emr.application_arn) == ("emr-spark-8.0.0", 360, None)
    assert emr.concurrency_limit is None  # an application queues runs past its capacity: no limit unless declared
    assert load_catalog(job_types=[{**EMR_WORDCOUNT, "max_concurrency": 3}]).get("wordcount").concurrency_limit == 3  # type: ignore[union-attr]


def test_catalog_reports_every_problem_at_once_and_refuses_duplicates() -> None:
    text = refused(job_types=[WORDCOUNT, {"name": "bad!", "runner": "wait"}, WORDCOUNT], source="jobs.json")
    assert text.startswith("jobs.json: invalid job types: ")
    assert "job_types[1] 'bad!': name" in text
    assert "job_types[2] 'wordcount': declared twice (also job_types[0])" in text


def test_catalog_strict_reads_entries_and_schemas(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text("def other(spark, params):\n    return {}\n")
    text = refused(
        job_types=[
            {"name": "a", "runner": "pyspark", "entry": "missing.py:run"},
            {"name": "b", "runner": "pyspark", "entry": "mine.py:run"},
            {**WORDCOUNT, "name": "c", "params_schema": {"type": "object", "properties": {"x": {"type": "strnig"}}}},
        ],
        base=tmp_path,
        strict=True,
    )
    assert "job_types[0] 'a': entry: cannot read" in text and "missing.py" in text
    assert "job_types[1] 'b': entry: " in text and "defines no top-level function 'run'" in text
    assert "job_types[2] 'c': params_schema: not a valid JSON Schema" in text
    # Without strict (the functions' cold start), nothing is read or compiled.
    assert load_catalog(job_types=[{"name": "a", "runner": "pyspark", "entry": "missing.py:run"}]).get("a")


def test_catalog_refuses_bad_triggers() -> None:
    text = refused(
        s3_triggers=[
            {"job_type": "nope"},
            {"job_type": "echo"},
            {"params": {"input": "{bukket}"}},
            {"marker": "a/b"},
        ]
    )
    assert "s3_triggers[0].job_type: 'nope' is not a job type (known: echo, spark, wait)" in text
    assert "s3_triggers[1].job_type: 'echo' runs inline" in text
    assert "s3_triggers[2]: params: input: unknown placeholder(s) bukket" in text
    assert "s3_triggers[3]: marker: String should match pattern" in text


def test_catalog_default_trigger_only_when_it_has_the_spark_type() -> None:
    """The default trigger starts `spark`: a catalog without the built-ins and without a `spark` of its
    own gets no trigger, rather than an error naming a trigger it never gave. Given triggers still are
    checked."""
    assert load_catalog(job_types=[WORDCOUNT], include_builtins=False).s3_triggers == ()
    assert [t.job_type for t in load_catalog().s3_triggers] == ["spark"]
    spark = BUILTIN_TYPES[0].declaration()
    assert [t.job_type for t in load_catalog(job_types=[spark], include_builtins=False).s3_triggers] == ["spark"]
    assert "s3_triggers[0].job_type: 'spark' is not a job type" in refused(
        job_types=[WORDCOUNT], include_builtins=False, s3_triggers=[{"job_type": "spark"}]
    )


def test_catalog_compiles_a_schema_on_its_first_job_only() -> None:
    catalog = load_catalog(job_types=[WORDCOUNT])
    assert catalog._compiled == {}, "loading the catalog compiles nothing (the receiver's cold start)"
    wordcount = catalog.get("wordcount")
    assert wordcount is not None
    assert catalog.validate_params(wordcount, {"input": "s3://b/in/"}) == {"input": "s3://b/in/"}
    assert list(catalog._compiled) == ["wordcount"]
    with pytest.raises(ParamsError) as caught:
        catalog.validate_params(wordcount, {"input": "s3://b/in/", "min_length": 0})
    assert str(caught.value) == "params.min_length: must be bigger than or equal to 1"


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"a": 1, "b": 1}, "params.c: is required"),
        ({"a": 1}, "params.b: is required (so is params.c)"),
        ({}, "params.a: is required (so are params.b, params.c)"),
    ],
)
def test_catalog_params_missing_are_each_named(given: dict[str, int], error: str) -> None:
    """Every required parameter a body lacks is named in its one error, so its sender fixes them at once."""
    schema = {"type": "object", "properties": {k: {"type": "integer"} for k in "abc"}, "required": ["a", "b", "c"]}
    job_type = JobType.model_validate({**WORDCOUNT, "params_schema": schema})
    with pytest.raises(ParamsError) as caught:
        JobCatalog([job_type]).validate_params(job_type, given)
    assert str(caught.value) == error


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"a": 1, "bb": 1}, "params.b: is required; params.bb is not a parameter of it"),
        ({"aa": 1, "bb": 1}, "params.a: is required (so is params.b); params.aa, params.bb are not parameters of it"),
    ],
)
def test_catalog_params_missing_beside_unknown_ones_name_both(given: dict[str, int], error: str) -> None:
    """A required param mistyped is both missing and unknown. The schema's `required` rule is checked first and
    would hide the unknown name, which is most often the typo: the one error names both."""
    schema = {
        "type": "object",
        "properties": {k: {"type": "integer"} for k in "ab"},
        "required": ["a", "b"],
        "additionalProperties": False,
    }
    job_type = JobType.model_validate({**WORDCOUNT, "params_schema": schema})
    with pytest.raises(ParamsError) as caught:
        JobCatalog([job_type]).validate_params(job_type, given)
    assert str(caught.value) == error
    open_schema = {key: value for key, value in schema.items() if key != "additionalProperties"}
    open_type = JobType.model_validate({**WORDCOUNT, "params_schema": open_schema})
    with pytest.raises(ParamsError) as caught:
        JobCatalog([open_type]).validate_params(open_type, {"a": 1, "bb": 1})
    assert str(caught.value) == "params.b: is required", "a schema that admits other params: none is unknown"


def test_catalog_defaults_fill_locations_that_are_configured() -> None:
    schema = WORDCOUNT["params_schema"]
    with_output = {**schema, "properties": {**schema["properties"], "output": {"type": "string"}}}
    job_type = JobType.model_validate(
        {**WORDCOUNT, "params_schema": with_output, "defaults": {"output": "{curated}wordcount/", "min_length": 2}}
    )
    catalog = JobCatalog([job_type])
    assert catalog.validate_params(job_type, {"input": "i"}, {"curated": "s3://curated-b/"}) == {
        "input": "i",
        "output": "s3://curated-b/wordcount/",
        "min_length": 2,
    }
    strict_type = JobType.model_validate({**WORDCOUNT, "defaults": {"output": "x"}})
    with pytest.raises(ParamsError, match="output: is not a parameter"):  # additionalProperties: the default counts
        JobCatalog([strict_type]).validate_params(strict_type, {"input": "i"})
    assert catalog.validate_params(job_type, {"input": "i"}, {}) == {"input": "i", "min_length": 2}


@pytest.mark.parametrize(
    ("required", "given", "error"),
    [
        # `out`'s default is not filled, but the param missing is `out-x`, which has none
        (["out-x"], {"out": "s"}, "params.out-x: is required"),
        # a name ending in a sign is still the param the error names
        (["x$"], {"out": "s", "out-x": "s"}, "params.x$: is required: its default needs raw_uri, which"),
        # the value an error quotes is not a param it names missing
        (["p"], {"p": "params.out", "out-x": "s"}, "params.p: must be digits, got 'params.out'"),
    ],
)
def test_catalog_unfilled_default_is_named_only_for_the_params_missing(
    required: list[str], given: dict[str, str], error: str
) -> None:
    """The reason a default was not filled (its bucket setting) is added only for a param the error says is
    required, by its whole name."""
    text = {"type": "string"}
    properties = {"out": text, "out-x": text, "x$": text, "p": {**text, "pattern": "^[0-9]+$", "description": "digits"}}
    job_type = JobType.model_validate(
        {
            **WORDCOUNT,
            "params_schema": {"type": "object", "required": required, "properties": properties},
            "defaults": {"out": "{curated}o/", "x$": "{raw}x/"},
        }
    )
    with pytest.raises(ParamsError) as raised:
        JobCatalog([job_type]).validate_params(job_type, given, {})
    assert str(raised.value).startswith(error), str(raised.value)
    if "needs" not in error:
        assert "needs" not in str(raised.value), str(raised.value)


def test_catalog_round_trips_through_the_shipped_file(tmp_path: Path) -> None:
    catalog = load_catalog(job_types=[WORDCOUNT], s3_triggers=[{"marker": "DONE"}])
    shipped = tmp_path / "job_types.json"
    shipped.write_text(catalog.to_json())
    again = catalog_from_env({"JOB_TYPES_FILE": str(shipped)})
    assert again.to_data() == catalog.to_data()
    assert json.loads(shipped.read_text())["s3_triggers"][0]["marker"] == "DONE"
    assert catalog_from_env({}).names == ["echo", "spark", "wait"], "no file: the built-ins"


def test_trigger_matches_its_marker_under_its_prefix_only() -> None:
    trigger = S3Trigger(bucket="raw", prefix="events/", marker="_SUCCESS")
    assert trigger.matches("raw", "events/date=2026-11-20/_SUCCESS")
    assert not trigger.matches("other", "events/date=2026-11-20/_SUCCESS")
    assert not trigger.matches("raw", "logs/_SUCCESS")
    assert not trigger.matches("raw", "events/date=2026-11-20/part-0.json")
    assert not trigger.matches("raw", "events/date=2026-11-20/x_SUCCESS")
    assert S3Trigger().matches("any", "_SUCCESS"), "a marker at the bucket's root"


def test_trigger_job_fills_its_template_from_the_markers_folder() -> None:
    trigger = S3Trigger(params={"input": "s3://{bucket}/{prefix}", "date": "{date}", "marker": "{key}", "n": 3})
    job = trigger.job("raw", "a/date=2026-11-20/b/_SUCCESS")
    assert job.params == {
        "input": "s3://raw/a/date=2026-11-20/b/",
        "date": "2026-11-20",
        "marker": "a/date=2026-11-20/b/_SUCCESS",
        "n": 3,
    }
    assert job.job_id == "spark:raw/a/date=2026-11-20/b/"
    with pytest.raises(TriggerError, match=r"params\.date needs"):
        trigger.job("raw", "a/b/_SUCCESS")


def test_partition_job_id_is_deterministic_and_fits() -> None:
    long_prefix = "x/" * 200
    job_id = partition_job_id("spark", "raw", long_prefix)
    assert job_id == partition_job_id("spark", "raw", long_prefix) and len(job_id) <= 256
    assert job_id.startswith("spark:sha256:")


WAIT_BOUNDS = {"type": "integer", "minimum": 0, "maximum": 43_200}
BOUNDED_WAIT = {"type": "object", "required": ["seconds"], "properties": {"seconds": WAIT_BOUNDS}}


def script(tmp_path: Path, name: str) -> str:
    """An entry file `name` in `tmp_path` with a `run`, as its `entry`."""
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("def run(spark, params):\n    return {}\n")
    return f"{name}:run"


@pytest.mark.parametrize(
    ("first", "second", "named"),
    [
        # x's state RunXJob is run-x's Glue job RunXJob
        ({"name": "x", "runner": "pyspark"}, {"name": "run-x", "runner": "pyspark"}, "RunXJob"),
        # a wait type nap's state NapWaitSummary is a pyspark type nap-wait's summary state
        ({"name": "nap", "runner": "wait", "params_schema": BOUNDED_WAIT}, {"name": "nap-wait", "runner": "pyspark"},
         "NapWaitSummary"),
        # one prefix, AB, for both
        ({"name": "a-b", "runner": "pyspark"}, {"name": "a_b", "runner": "pyspark"}, "RunABJob"),
    ],
)  # fmt: skip
def test_catalog_refuses_two_types_whose_stack_ids_would_collide_naming_both(
    tmp_path: Path, first: dict[str, Any], second: dict[str, Any], named: str
) -> None:
    declared = [
        {**item, "entry": script(tmp_path, "job.py")} if item["runner"] == "pyspark" else item
        for item in (first, second)
    ]
    for strict in (False, True):
        text = refused(job_types=declared, base=tmp_path, strict=strict)
        assert (
            f"job_types[1] {second['name']!r}: name: {first['name']!r} and {second['name']!r} would both give" in text
        )
        assert f"the id {named!r}" in text and "rename one of them" in text


def test_catalog_names_each_types_ids_as_the_workflow_builds_them() -> None:
    from longjobs.engine.jobs.names import EMR_SCOPE, WORKFLOW_SCOPE, generated_ids, state_prefix

    assert [state_prefix(t) for t in BUILTIN_TYPES] == ["Spark", "Wait", "Echo"]
    spark, wait, echo = BUILTIN_TYPES
    assert generated_ids(spark)[WORKFLOW_SCOPE][-2:] == ("Job", "JobEntry"), "spark's Glue job keeps its id `Job`"
    assert generated_ids(wait) == {WORKFLOW_SCOPE: ("WaitThenFail", "WaitJobFailed", "Wait", "WaitSummary")}
    assert generated_ids(echo) == {}, "an inline type has no state"
    emr = JobType.model_validate(EMR_WORDCOUNT)
    assert generated_ids(emr)[EMR_SCOPE] == ("WordcountApplication",)


@pytest.mark.parametrize(
    ("entry", "code", "message"),
    [
        ("jobs/json.py", None, "would be imported as the module 'json', but 'json' is a standard-library module"),
        ("jobs/wordcount.v2.py", None, "would be imported as the module 'wordcount.v2', which Python cannot import"),
        ("jobs/longjobs.py", None, "but 'longjobs' is a module every run imports"),
        ("jobs/pyspark.py", None, "but 'pyspark' is a module every run imports"),
        ("jobs/telnetlib.py", None, "'telnetlib' is a standard-library module"),  # Glue 5.x's Python 3.11 has it
        ("jobs/json/job.py", "jobs", "module 'json.job', but 'json' is a standard-library module"),
        ("jobs/my.jobs/job.py", "jobs", "module 'my.jobs.job', which Python cannot import"),
    ],
)
def test_catalog_strict_refuses_an_entry_whose_module_name_glue_cannot_import_as_its_own(
    tmp_path: Path, entry: str, code: str | None, message: str
) -> None:
    declared = {"name": "mine", "runner": "pyspark", "entry": script(tmp_path, entry)}
    if code is not None:
        declared["code"] = code
    text = refused(job_types=[declared], base=tmp_path, strict=True)
    assert f"job_types[0] 'mine': entry: {tmp_path / entry}" in text and message in text, text
    assert "rename" in text
    for fine, code in (("jobs/word_count2.py", None), ("jobs/stats/job.py", "jobs")):
        renamed = {"name": "mine", "runner": "pyspark", "entry": script(tmp_path, fine), "code": code}
        assert load_catalog(job_types=[renamed], base=tmp_path, strict=True).get("mine") is not None


def test_catalog_entry_names_cover_the_standard_library_of_every_glue_python() -> None:
    from longjobs.construct.glue_runtime import REMOVED_AFTER_3_11
    from longjobs.engine.jobs.types import PYTHON_3_11_ONLY

    assert PYTHON_3_11_ONLY == REMOVED_AFTER_3_11


@pytest.mark.parametrize(
    ("defaults", "message"),
    [
        ({"output": "{curated}a/"}, "defaults.output: is not a parameter of this type (known: input, min_length)"),
        ({"min_length": 0}, "defaults.min_length: must be bigger than or equal to 1"),
        ({"min_length": "3"}, "defaults.min_length: must be integer"),
    ],
)
def test_catalog_strict_refuses_defaults_that_the_schema_refuses(
    tmp_path: Path, defaults: dict[str, Any], message: str
) -> None:
    declared = {**WORDCOUNT, "entry": script(tmp_path, "jobs/wordcount.py"), "defaults": defaults}
    text = refused(job_types=[declared], base=tmp_path, strict=True)
    assert f"job_types[0] 'wordcount': {message}" in text, text
    assert "change the default or params_schema" in text
    # Valid once their locations are filled in; `required` is left to the messages (`input` has no default).
    schema = WORDCOUNT["params_schema"]
    with_output = {**schema, "properties": {**schema["properties"], "output": builtin_location()}}
    fine = {**declared, "params_schema": with_output, "defaults": {"output": "{curated}wordcount/", "min_length": 2}}
    assert load_catalog(job_types=[fine], base=tmp_path, strict=True).get("wordcount") is not None


@pytest.mark.parametrize(
    ("default", "message"),
    [
        (0, "params_schema.properties.min_length.default: must be bigger than or equal to 1"),
        ("3", "params_schema.properties.min_length.default: must be integer"),
    ],
)
def test_catalog_strict_refuses_schema_defaults_that_the_schema_refuses(
    tmp_path: Path, default: Any, message: str
) -> None:
    """fastjsonschema fills a property's `default` without checking it: every message that leaves the param out
    would reach the job with a value its own schema refuses."""
    schema = WORDCOUNT["params_schema"]
    min_length = {**schema["properties"]["min_length"], "default": default}
    declared = {
        **WORDCOUNT,
        "entry": script(tmp_path, "jobs/wordcount.py"),
        "params_schema": {**schema, "properties": {**schema["properties"], "min_length": min_length}},
    }
    text = refused(job_types=[declared], base=tmp_path, strict=True)
    assert f"job_types[0] 'wordcount': {message}" in text, text
    assert "every message that leaves params.min_length out gets this default" in text
    min_length["default"] = 2
    catalog = load_catalog(job_types=[declared], base=tmp_path, strict=True)
    assert catalog.validate_params(catalog.types["wordcount"], {"input": "x"})["min_length"] == 2


def builtin_location() -> dict[str, Any]:
    from longjobs.engine.jobs.builtin import LOCATION_SCHEMA

    return dict(LOCATION_SCHEMA)


@pytest.mark.parametrize("default", ["{curated", "curated}", "{curated}}x", "{{curated}"])
def test_catalog_refuses_a_default_with_an_unbalanced_placeholder_brace(default: str) -> None:
    declared = {**WORDCOUNT, "defaults": {"output": default}}
    text = refused(job_types=[declared], base=REPO_ROOT, strict=True)
    assert f"job_types[0] 'wordcount': defaults: output: {default!r} has an unbalanced brace" in text
    # A synth's check: a catalog a stack published before it (which the CLI and the functions read) still loads.
    assert load_catalog(job_types=[declared]).get("wordcount") is not None


@pytest.mark.parametrize(
    ("seconds", "message"),
    [
        ({"type": "string"}, "a wait type's `seconds` must be an integer"),
        ({}, "a wait type's `seconds` must be an integer"),
        ({"type": "integer", "maximum": 60}, "a wait type's `seconds` needs a minimum of 0 or more"),
        ({"type": "integer", "minimum": -1, "maximum": 60}, "a wait type's `seconds` needs a minimum of 0 or more"),
        ({"type": "integer", "minimum": 0}, "a wait type's `seconds` needs a maximum of at most 43200"),
        (
            {"type": "integer", "minimum": 0, "maximum": 43_201},
            "a wait type's `seconds` needs a maximum of at most 43200",
        ),
    ],
)
def test_catalog_strict_refuses_a_wait_types_seconds_that_is_not_an_integer_from_0_to_12_hours(
    seconds: dict[str, Any], message: str
) -> None:
    schema = {"type": "object", "required": ["seconds"], "properties": {"seconds": seconds}}
    text = refused(job_types=[{"name": "nap", "runner": "wait", "params_schema": schema}], strict=True)
    assert f"job_types[0] 'nap': params_schema: {message}" in text
    assert '{"type": "integer", "minimum": 0, "maximum": 43200}' in text, "what to declare"
    narrower = {"type": "integer", "minimum": 1, "maximum": 600}
    for fine in (WAIT_BOUNDS, narrower):
        declared = {"name": "nap", "runner": "wait", "params_schema": {**schema, "properties": {"seconds": fine}}}
        assert load_catalog(job_types=[declared], strict=True).get("nap") is not None


def test_catalog_refuses_a_trigger_of_another_type_without_params_of_its_own() -> None:
    triggers = [{"prefix": "texts/", "job_type": "wordcount"}]
    text = refused(job_types=[WORDCOUNT], s3_triggers=triggers, base=REPO_ROOT, strict=True)
    assert (
        "s3_triggers[0] (prefix 'texts/', job type 'wordcount'): params: give its jobs' params: without them it "
        "sends the spark type's (date, input)"
    ) in text
    # A catalog a synth published passed that: the functions and the CLI load it as it is.
    assert load_catalog(job_types=[WORDCOUNT], s3_triggers=triggers).s3_triggers[0].job_type == "wordcount"
    assert load_catalog(s3_triggers=[{"prefix": "events/"}]).s3_triggers[0].job_type == "spark", "spark's own"


def test_catalog_strict_refuses_trigger_params_that_their_types_schema_refuses(tmp_path: Path) -> None:
    wordcount = {**WORDCOUNT, "entry": script(tmp_path, "jobs/wordcount.py")}
    spark_params = {"input": "s3://{bucket}/{prefix}", "date": "{date}"}
    text = refused(
        job_types=[wordcount],
        s3_triggers=[
            {"prefix": "texts/", "job_type": "wordcount", "params": spark_params},
            {"prefix": "counts/", "job_type": "wordcount", "params": {"input": "{key}", "min_length": "{date}"}},
            {"prefix": "naps/", "job_type": "wait", "params": {"seconds": 43_201}},
        ],
        base=tmp_path,
        strict=True,
    )
    assert (
        "s3_triggers[0] (prefix 'texts/', job type 'wordcount'): params: its jobs' params would be refused "
        "(params.date: is not a parameter of this type (known: input, min_length)): fix the params or the type's "
        "schema"
    ) in text
    assert "s3_triggers[1] (prefix 'counts/', job type 'wordcount'): params: its jobs' params would be refused " in text
    assert "(params.min_length: must be integer)" in text
    assert "s3_triggers[2] (prefix 'naps/', job type 'wait'): params: its jobs' params would be refused " in text
    fine = [{"prefix": "texts/", "job_type": "wordcount", "params": {"input": "s3://{bucket}/{prefix}"}}, {}]
    catalog = load_catalog(job_types=[wordcount], s3_triggers=fine, base=tmp_path, strict=True)
    assert [t.job_type for t in catalog.s3_triggers] == ["wordcount", "spark"], "spark's default params fit spark"


@pytest.mark.parametrize(
    ("prefix", "marker", "key_in_notification"),
    [
        ("events/", "_SUCCESS", "events/date%3D2026-11-20/_SUCCESS"),
        ("events/source=web/", "_SUCCESS", "events/source%3Dweb/date%3D2026-11-20/_SUCCESS"),
        ("landing zone/", "DONE flag", "landing+zone/2026/DONE+flag"),
        ("données/", "_SUCCESS", "donn%C3%A9es/x/_SUCCESS"),
    ],
)
def test_triggers_notification_filter_is_encoded_as_s3_encodes_the_key(
    prefix: str, marker: str, key_in_notification: str
) -> None:
    """S3 matches a notification's prefix and suffix filters against the key encoded as the notification
    gives it: a space as '+', other special characters URL-encoded, and the filter must be written so
    (https://docs.aws.amazon.com/AmazonS3/latest/userguide/notification-how-to-filtering.html). A trigger's
    prefix or marker put in the filter as it is (`events/source=web/`) matches none of its markers."""
    assert key_in_notification.startswith(notification_filter(prefix))
    assert key_in_notification.endswith(notification_filter(marker))
    assert S3Trigger(prefix=prefix, marker=marker).matches("raw", unquote_plus(key_in_notification))
