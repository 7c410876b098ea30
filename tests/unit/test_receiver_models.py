"""Parsing job messages and S3 notifications: what is accepted, and the error type of what is not."""

from __future__ import annotations

import json
import random
import string
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.receiver.models import BadInput, ErrorType, SparkJob, WaitJob, parse_body
from functions.receiver.service import Outcome, release_delay_s
from functions.settings import Settings

SETTINGS = Settings(spark_output_uri="s3://curated-bucket/events/", spark_quarantine_uri="s3://quarantine-bucket/q/")


def s3_record(key: str, event: str = "ObjectCreated:Put", bucket: str = "raw-bucket") -> dict[str, Any]:
    """One record as S3 writes it to SQS (every field the notification format has)."""
    return {
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "awsRegion": "us-east-1",
        "eventTime": "2026-11-20T10:00:00.000Z",
        "eventName": event,
        "userIdentity": {"principalId": "AWS:AIDAEXAMPLE"},
        "requestParameters": {"sourceIPAddress": "203.0.113.10"},
        "responseElements": {
            "x-amz-request-id": "C3D13FE58DE4C810",
            "x-amz-id-2": "FMyUVURIY8/IgAtTv8xRjskZQpcIZ9KG4V",
        },
        "s3": {
            "s3SchemaVersion": "1.0",
            "configurationId": "raw-events",
            "bucket": {
                "name": bucket,
                "ownerIdentity": {"principalId": "A3NL1KOZZKExample"},
                "arn": f"arn:aws:s3:::{bucket}",
            },
            "object": {
                "key": key,
                "size": 1024,
                "eTag": "d41d8cd98f00b204e9800998ecf8427e",
                "sequencer": "0055AED6DCD90281E5",
            },
        },
    }


def rejected(body: str, settings: Settings = SETTINGS) -> BadInput:
    with pytest.raises(BadInput) as caught:
        parse_body(body, settings)
    return caught.value


def test_parse_job_message_wait() -> None:
    [job] = parse_body(json.dumps({"job_id": "w1", "type": "wait", "params": {"seconds": 30}}), SETTINGS)
    assert isinstance(job, WaitJob) and job.params.seconds == 30 and job.params.fail is False


def test_parse_job_message_spark_takes_default_outputs() -> None:
    body = {
        "job_id": "s1",
        "type": "spark",
        "params": {"input": "s3://raw-bucket/events/date=2026-11-20/", "date": "2026-11-20"},
    }
    [job] = parse_body(json.dumps(body), SETTINGS)
    assert isinstance(job, SparkJob)
    assert job.params.output == "s3://curated-bucket/events/" and job.params.quarantine == "s3://quarantine-bucket/q/"
    assert job.params.lateness_minutes == 60


@pytest.mark.parametrize(
    ("body", "error_type", "text"),
    [
        ("{not json", ErrorType.NOT_JSON, "not JSON"),
        ("[1, 2]", ErrorType.INVALID_SHAPE, "JSON list, not an object"),
        ('{"type": "wait", "params": {"seconds": 1}}', ErrorType.INVALID_SHAPE, "job_id: Field required"),
        ('{"job_id": "a", "type": "mine", "params": {}}', ErrorType.UNKNOWN_JOB_TYPE, "known types: echo, spark, wait"),
        ('{"job_id": "a", "type": "wait", "params": {"seconds": -1}}', ErrorType.INVALID_PARAMETERS, "params.seconds"),
        ('{"job_id": "a", "type": "wait", "params": {"seconds": 50000}}', ErrorType.INVALID_PARAMETERS, "43200"),
        ('{"job_id": "a", "type": "wait", "params": {"seconds": 1, "x": 1}}', ErrorType.INVALID_PARAMETERS, "params.x"),
        (
            '{"job_id": "a", "type": "spark", "params": {"input": "s3://b", "date": "2026-11-20"}}',
            ErrorType.INVALID_PARAMETERS,
            "s3://bucket/key",
        ),
        (
            '{"job_id": "a", "type": "spark", "params": {"input": "/data/in", "date": "2026-13-01"}}',
            ErrorType.INVALID_PARAMETERS,
            "not a YYYY-MM-DD date",
        ),
        (
            '{"job_id": "a", "type": "spark", "params": {"input": "http://x/y", "date": "2026-11-01"}}',
            ErrorType.INVALID_PARAMETERS,
            "only s3:// URIs and local paths",
        ),
        (
            '{"job_id": "a", "type": "spark", "params": {"input": "/d", "date": "2026-11-01", "lateness_minutes": -1}}',
            ErrorType.INVALID_PARAMETERS,
            "params.lateness_minutes",
        ),
        ('{"job_id": "a", "type": "wait", "params": {"seconds": 1}, "extra": 1}', ErrorType.INVALID_SHAPE, "extra"),
        ('{"Records": [{"eventSource": "aws:s3"}]}', ErrorType.INVALID_SHAPE, "not an S3 event notification"),
    ],
)
def test_parse_bad_input_names_its_error(body: str, error_type: str, text: str) -> None:
    bad = rejected(body)
    assert bad.error_type == error_type
    assert text in bad.message


def test_parse_body_over_the_limit_is_too_large() -> None:
    small = SETTINGS.model_copy(update={"max_body_bytes": 64})
    bad = rejected(json.dumps({"job_id": "x" * 100, "type": "wait", "params": {"seconds": 1}}), small)
    assert bad.error_type == ErrorType.TOO_LARGE and "limit is 64" in bad.message


def test_parse_spark_without_configured_output_is_refused() -> None:
    body = json.dumps({"job_id": "s", "type": "spark", "params": {"input": "/in", "date": "2026-11-20"}})
    bad = rejected(body, Settings())
    assert bad.error_type == ErrorType.INVALID_PARAMETERS and "SPARK_OUTPUT_URI" in bad.message


def test_parse_s3_notification_makes_a_spark_job_per_created_object() -> None:
    body = json.dumps(
        {
            "Records": [
                s3_record("events/date%3D2026-11-20/part+0001.jsonl"),
                s3_record("events/date=2026-11-20/part-0002.jsonl", event="ObjectRemoved:Delete"),
                s3_record("events/date=2026-11-21/part-0003.jsonl", event="ObjectCreated:CompleteMultipartUpload"),
            ]
        }
    )
    jobs = parse_body(body, SETTINGS)
    assert [job.params.input for job in jobs if isinstance(job, SparkJob)] == [
        "s3://raw-bucket/events/date=2026-11-20/part 0001.jsonl",
        "s3://raw-bucket/events/date=2026-11-21/part-0003.jsonl",
    ]
    assert [job.params.date for job in jobs if isinstance(job, SparkJob)] == ["2026-11-20", "2026-11-21"]


def test_parse_s3_test_event_is_dropped() -> None:
    body = {"Service": "Amazon S3", "Event": "s3:TestEvent", "Time": "2026-11-20T10:00:00.000Z", "Bucket": "raw-bucket"}
    assert parse_body(json.dumps(body), SETTINGS) == []


def test_parse_s3_object_without_partition_date_is_refused() -> None:
    bad = rejected(json.dumps({"Records": [s3_record("events/part-0001.jsonl")]}))
    assert bad.error_type == ErrorType.INVALID_PARAMETERS and "date=YYYY-MM-DD" in bad.message


@given(st.text(alphabet=string.printable + "\u00e9\u4e2d\U0001f600", min_size=1, max_size=300))
def test_parse_fuzz_text_is_accepted_or_refused_with_a_known_type(body: str) -> None:
    try:
        parse_body(body, SETTINGS)
    except BadInput as bad:
        assert bad.error_type in vars(ErrorType).values()
        assert bad.message


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=10,
)


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "job_id": json_values,
            "type": st.sampled_from(["wait", "spark", "echo", "other"]) | json_values,
            "params": json_values,
            "Records": json_values,
        },
    )
)
def test_parse_fuzz_json_objects_never_raise_anything_but_bad_input(data: dict[str, Any]) -> None:
    try:
        parse_body(json.dumps(data), SETTINGS)
    except BadInput as bad:
        assert bad.error_type in vars(ErrorType).values()


def test_release_delay_grows_with_receive_count_up_to_the_cap() -> None:
    settings = Settings(release_delay_base_s=10, release_delay_cap_s=300)
    rng = random.Random(3)
    delays = [[release_delay_s(n, settings, rng) for _ in range(50)] for n in range(1, 8)]
    for n, samples in enumerate(delays, start=1):
        ceiling = min(300, 10 * 2 ** (n - 1))
        assert all(ceiling / 2 - 1 <= d <= ceiling for d in samples), (n, samples)
    assert max(delays[0]) < min(delays[3]), "the fourth receive waits longer than the first"
    assert len(set(delays[6])) > 1, "jittered"
    assert release_delay_s(1000, settings, rng) <= 300


def test_release_delay_zero_base_is_immediate() -> None:
    assert release_delay_s(4, Settings(release_delay_base_s=0), random.Random(1)) == 0


def test_outcomes_deferred_are_the_ones_the_lease_keeps() -> None:
    assert {o for o in Outcome if not o.deferred} == {
        Outcome.REJECTED,
        Outcome.IGNORED,
        Outcome.INLINE_DONE,
        Outcome.FANNED_OUT,
        Outcome.ALREADY_SUCCEEDED,
    }
