"""Parsing job messages and S3 notifications: what is accepted, and the error type of what is not."""

from __future__ import annotations

import json
import random
import re
import string
from pathlib import Path
from typing import Any

import aws_lambda_powertools.utilities.parser.models  # noqa: F401  # see below
import pytest
from hypothesis import given
from hypothesis import strategies as st

from longjobs.engine.delivery.attempt import release_delay_s, wait_delay_s
from longjobs.engine.delivery.models import BadInput, ErrorType, parse_body, parse_message
from longjobs.engine.delivery.types import Outcome
from longjobs.engine.jobs import load_catalog
from longjobs.engine.settings import Settings

# The receiver imports Powertools' S3 models on its first S3 event; imported here, so that a second
# of import does not land in a hypothesis example and fail its too-slow health check.

SETTINGS = Settings(curated_uri="s3://curated-bucket/", quarantine_uri="s3://quarantine-bucket/q/")


def s3_record(
    key: str, event: str = "ObjectCreated:Put", bucket: str = "raw-bucket", sequencer: str = "0055AED6DCD90281E5"
) -> dict[str, Any]:
    """One record as S3 writes it to SQS (every field the notification format has); a new write of a key
    has a new `sequencer`."""
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
                "sequencer": sequencer,
            },
        },
    }


def rejected(body: str, settings: Settings = SETTINGS) -> BadInput:
    with pytest.raises(BadInput) as caught:
        parse_body(body, settings)
    return caught.value


def test_parse_job_message_wait() -> None:
    [job] = parse_body(json.dumps({"job_id": "w1", "type": "wait", "params": {"seconds": 30}}), SETTINGS)
    assert (job.type, job.params) == ("wait", {"seconds": 30, "fail": False}), "the schema's default filled in"


@pytest.mark.parametrize("seconds", ["30.0", "1e2", "30"])
def test_parse_job_message_hands_a_whole_float_on_as_an_integer_where_the_schema_says_integer(seconds: str) -> None:
    """JSON Schema counts 30.0 and 1e2 as integers (`longjobs submit wait --param seconds=1e2` sends 100.0), but
    Step Functions' Wait state takes only integers
    (https://docs.aws.amazon.com/step-functions/latest/dg/amazon-states-language-wait-state.html): the job
    gets the integer, rather than fail every attempt at its Wait state on its way to the DLQ."""
    body = '{"job_id": "w1", "type": "wait", "params": {"seconds": ' + seconds + ', "fail": false}}'

    [job] = parse_body(body, SETTINGS)

    assert type(job.params["seconds"]) is int and job.params["seconds"] == float(seconds), job.params
    assert job.params["fail"] is False, "a boolean stays one"


def test_parse_wait_longer_than_renewal_lasts_is_refused_naming_the_limit() -> None:
    """Renewal stops at its hard stop (`max_renewal_s`, at most 12 h less `cap_safety_s`, from the receive),
    and the extender stops a job still running there: a wait past it would be stopped on every attempt, then
    dead-lettered as its attempts ran out. It is refused on its first receive, with the limit it outlasts.
    The wait begins after the receive, so one of all of renewal ends past the hard stop too."""
    capped = Settings(max_renewal_s=3_600)
    wait = '{"job_id": "w1", "type": "wait", "params": {"seconds": %d}}'

    [fits] = parse_body(wait % 3_599, capped)
    all_of_it = rejected(wait % 3_600, capped)
    too_long = rejected(wait % 3_601, capped)
    at_sqs_limit = rejected(wait % 43_200)

    assert fits.params["seconds"] == 3_599
    assert all_of_it.error_type == ErrorType.INVALID_PARAMETERS, "it begins after the receive: it ends past renewal"
    assert too_long.error_type == ErrorType.INVALID_PARAMETERS
    assert too_long.message == (
        "params.seconds: 3601 s does not end within renewal (3600 s from the receive, before the wait begins: "
        "max_renewal_s, at most 12 h less cap_safety_s), which would stop the job on every attempt: give "
        "seconds of 3599 or less, or raise max_renewal_s"
    )
    assert at_sqs_limit.error_type == ErrorType.INVALID_PARAMETERS
    assert at_sqs_limit.message.endswith(
        "(43140 s from the receive, before the wait begins: max_renewal_s, at most 12 h less cap_safety_s), "
        "which would stop the job on every attempt: give seconds of 43139 or less"
    ), "at SQS's 12 h, raising max_renewal_s would not help"


def test_parse_wait_with_renewal_disabled_is_not_refused() -> None:
    """`max_renewal_s=0` disables renewal (docs/engine.md): a job then has its first chunk, and the extender
    caps it only once it falls due, so a short wait runs and succeeds (as it did before the receiver checked
    waits against renewal). Renewal that is off is not a limit of 0 s for every wait to outlast."""
    off = Settings(policy="threshold", visibility_timeout_s=5, threshold_s=2.5, heartbeat_s=0.5, max_renewal_s=0)

    [job] = parse_body('{"job_id": "w1", "type": "wait", "params": {"seconds": 1}}', off)

    assert job.params["seconds"] == 1


def test_parse_job_message_spark_takes_default_outputs() -> None:
    body = {
        "job_id": "s1",
        "type": "spark",
        "params": {"input": "s3://raw-bucket/events/date=2026-11-20/", "date": "2026-11-20"},
    }
    [job] = parse_body(json.dumps(body), SETTINGS)
    assert job.params == {
        "input": "s3://raw-bucket/events/date=2026-11-20/",
        "date": "2026-11-20",
        "output": "s3://curated-bucket/events/",
        "quarantine": "s3://quarantine-bucket/q/events/",
        "lateness_minutes": 60,
    }


def test_parse_job_message_keeps_every_body_that_was_valid_before_job_types() -> None:
    """The bodies the receiver accepted before the types were declared, with their defaults."""
    for body, params in (
        ({"type": "wait", "params": {"seconds": 0, "fail": True}}, {"seconds": 0, "fail": True}),
        ({"type": "echo"}, {"text": "", "fail": False}),
        ({"type": "echo", "params": {"text": "hi"}}, {"text": "hi", "fail": False}),
        (
            {"type": "spark", "params": {"input": "/d", "date": "2026-11-20", "output": "/o", "quarantine": "/q"}},
            {"input": "/d", "date": "2026-11-20", "output": "/o", "quarantine": "/q", "lateness_minutes": 60},
        ),
    ):
        [job] = parse_body(json.dumps({"job_id": "j", **body}), SETTINGS)
        assert job.params == params, body


@pytest.mark.parametrize(
    ("body", "error_type", "text"),
    [
        ("{not json", ErrorType.NOT_JSON, "not JSON"),
        # Python's reader takes these; RFC 8259 has no such values (the job would get them as null)
        ('{"job_id": "a", "type": "echo", "params": {"n": NaN}}', ErrorType.NOT_JSON, "NaN is not a JSON value"),
        ('{"job_id": "a", "type": "echo", "params": {"n": -Infinity}}', ErrorType.NOT_JSON, "-Infinity is not"),
        ('{"job_id": "a", "type": "echo", "params": {"n": 1e400}}', ErrorType.NOT_JSON, "1e400 is beyond a double"),
        ("[1, 2]", ErrorType.INVALID_SHAPE, "JSON array, not an object"),
        ("null", ErrorType.INVALID_SHAPE, "JSON null, not an object"),
        ('{"n": ' + "9" * 5_000 + "}", ErrorType.NOT_JSON, "body is not JSON: an integer of more than 4,300 digits"),
        ('{"type": "wait", "params": {"seconds": 1}}', ErrorType.INVALID_SHAPE, "job_id: Field required"),
        ('{"job_id": "a", "type": "mine", "params": {}}', ErrorType.UNKNOWN_JOB_TYPE, "known types: echo, spark, wait"),
        (
            '{"job_id": "a", "type": "wait", "params": {"seconds": -1}}',
            ErrorType.INVALID_PARAMETERS,
            "params.seconds: must be bigger than or equal to 0",
        ),
        ('{"job_id": "a", "type": "wait", "params": {"seconds": 50000}}', ErrorType.INVALID_PARAMETERS, "43200"),
        (
            '{"job_id": "a", "type": "wait", "params": {"seconds": 1, "x": 1}}',
            ErrorType.INVALID_PARAMETERS,
            "params.x: is not a parameter of this type (known: fail, seconds)",
        ),
        ('{"job_id": "a", "type": "wait", "params": {}}', ErrorType.INVALID_PARAMETERS, "params.seconds: is required"),
        ('{"job_id": "a", "type": "wait", "params": [1]}', ErrorType.INVALID_PARAMETERS, "params: Input should be"),
        (
            '{"job_id": "a", "type": "spark", "params": {"input": "s3://b", "date": "2026-11-20"}}',
            ErrorType.INVALID_PARAMETERS,
            "params.input: must be an s3://bucket/key URI or a local path",
        ),
        (
            '{"job_id": "a", "type": "spark", "params": {"input": "/data/in", "date": "2026-13-01"}}',
            ErrorType.INVALID_PARAMETERS,
            "params.date: must be a YYYY-MM-DD date, got '2026-13-01'",
        ),
        (  # a day no calendar has: refused on its first receive, not failed by the job on every attempt
            '{"job_id": "a", "type": "spark", "params": {"input": "/data/in", "date": "2026-02-30"}}',
            ErrorType.INVALID_PARAMETERS,
            "params.date: must be a YYYY-MM-DD date, got '2026-02-30'",
        ),
        (
            '{"job_id": "a", "type": "spark", "params": {"input": "http://x/y", "date": "2026-11-01"}}',
            ErrorType.INVALID_PARAMETERS,
            "got 'http://x/y'",
        ),
        (
            '{"job_id": "a", "type": "spark", "params": {"input": "/d", "date": "2026-11-01", "lateness_minutes": -1}}',
            ErrorType.INVALID_PARAMETERS,
            "params.lateness_minutes",
        ),
        ('{"job_id": "a", "type": "wait", "params": {"seconds": 1}, "extra": 1}', ErrorType.INVALID_SHAPE, "extra"),
        ('{"Records": [{"eventSource": "aws:s3"}]}', ErrorType.INVALID_SHAPE, "not a valid S3 event"),
        ('{"hello": "world"}', ErrorType.INVALID_SHAPE, 'expected a job message {"job_id", "type", "params"}'),
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
    assert bad.error_type == ErrorType.INVALID_PARAMETERS
    assert bad.message == (
        "params.output: is required (so is params.quarantine): the defaults of output and quarantine need "
        "curated_uri and quarantine_uri, which this deployment does not set"
    ), "no bucket configured: no default, and the error says which setting would give one"
    with_curated = Settings(curated_uri="s3://curated-bucket/")
    assert rejected(body, with_curated).message == (
        "params.quarantine: is required: its default needs quarantine_uri, which this deployment does not set"
    )


# -- S3 events -------------------------------------------------------------------------------------


def test_parse_s3_partition_starts_on_its_marker_with_the_folder_as_input() -> None:
    body = json.dumps(
        {
            "Records": [
                s3_record("events/date%3D2026-11-20/part+0001.jsonl"),
                s3_record("events/date=2026-11-20/_manifest.json"),
                s3_record("events/date=2026-11-20/"),  # the console's "Create folder"
                s3_record("events/date=2026-11-20/_SUCCESS", event="ObjectRemoved:Delete"),
                s3_record("events/date%3D2026-11-21/_SUCCESS", event="ObjectCreated:CompleteMultipartUpload"),
            ]
        }
    )
    parsed = parse_message(body, SETTINGS)
    [job] = parsed.jobs
    assert job.job_id == "spark:raw-bucket/events/date=2026-11-21/", "one id per partition, the same every time"
    assert (job.type, job.params["input"], job.params["date"]) == (
        "spark",
        "s3://raw-bucket/events/date=2026-11-21/",
        "2026-11-21",
    )
    assert job.params["output"] == "s3://curated-bucket/events/", "the type's defaults apply to trigger jobs too"
    assert parsed.ignored_objects == 3, "data files, manifests and folder placeholders are counted, not run"


def test_parse_s3_data_file_alone_starts_nothing() -> None:
    parsed = parse_message(json.dumps({"Records": [s3_record("events/date=2026-11-20/part-1.jsonl")]}), SETTINGS)
    assert (parsed.jobs, parsed.ignored_objects) == ([], 1)


def test_parse_s3_trigger_is_configurable() -> None:
    catalog = load_catalog(
        {
            "s3_triggers": [
                {
                    "prefix": "logs/",
                    "marker": "DONE",
                    "job_type": "wait",
                    "params": {"seconds": 5},
                }
            ]
        }
    )
    body = json.dumps({"Records": [s3_record("logs/2026/DONE"), s3_record("events/date=2026-11-20/_SUCCESS")]})
    parsed = parse_message(body, SETTINGS, catalog)
    [job] = parsed.jobs
    assert (job.job_id, job.type, job.params) == ("wait:raw-bucket/logs/2026/", "wait", {"seconds": 5, "fail": False})
    assert parsed.ignored_objects == 1, "_SUCCESS is not this deployment's marker"


def sns_wrapped(notification: dict[str, Any]) -> dict[str, Any]:
    """An S3 notification published to SNS, as an SQS subscription (not raw) delivers it."""
    return {
        "Type": "Notification",
        "MessageId": "95df01b4-ee98-5cb9-9903-4c221d41eb5e",
        "TopicArn": "arn:aws:sns:us-east-1:123456789012:raw-events",
        "Subject": "Amazon S3 Notification",
        "Message": json.dumps(notification),
        "Timestamp": "2026-11-20T10:00:00.000Z",
        "SignatureVersion": "1",
        "Signature": "EXAMPLE",
        "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0000.pem",
        "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=x",
    }


def eventbridge_event(key: str, detail_type: str = "Object Created") -> dict[str, Any]:
    """An S3 event as EventBridge delivers it to an SQS target."""
    return {
        "version": "0",
        "id": "17793124-05d4-b198-2fde-7ededc63b103",
        "detail-type": detail_type,
        "source": "aws.s3",
        "account": "123456789012",
        "time": "2026-11-20T10:00:00Z",
        "region": "us-east-1",
        "resources": ["arn:aws:s3:::raw-bucket"],
        "detail": {
            "version": "0",
            "bucket": {"name": "raw-bucket"},
            "object": {"key": key, "size": 0, "etag": "d41d8cd98f00b204e9800998ecf8427e", "sequencer": "617f08"},
            "request-id": "N4N7GDK58NMKJ12R",
            "requester": "123456789012",
            "source-ip-address": "203.0.113.10",
            "reason": "PutObject",
        },
    }


def test_parse_s3_notification_through_sns() -> None:
    body = json.dumps(sns_wrapped({"Records": [s3_record("events/date=2026-11-20/_SUCCESS")]}))
    [job] = parse_body(body, SETTINGS)
    assert job.job_id == "spark:raw-bucket/events/date=2026-11-20/"
    test_event = {"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "raw-bucket"}
    assert parse_body(json.dumps(sns_wrapped(test_event)), SETTINGS) == []


def test_parse_s3_object_created_through_eventbridge() -> None:
    [job] = parse_body(json.dumps(eventbridge_event("events/date=2026-11-20/_SUCCESS")), SETTINGS)
    assert job.params["input"] == "s3://raw-bucket/events/date=2026-11-20/"
    assert (
        parse_body(json.dumps(eventbridge_event("events/date=2026-11-20/_SUCCESS", "Object Deleted")), SETTINGS) == []
    )
    assert parse_message(json.dumps(eventbridge_event("events/date=2026-11-20/x.json")), SETTINGS).ignored_objects == 1


def test_parse_sns_notification_of_something_else_is_refused_clearly() -> None:
    bad = rejected(json.dumps(sns_wrapped({"job_id": "a"})))
    assert bad.error_type == ErrorType.INVALID_SHAPE
    assert bad.message == "an SNS notification whose Message is not an S3 event notification"


def test_parse_s3_test_event_is_dropped() -> None:
    body = {"Service": "Amazon S3", "Event": "s3:TestEvent", "Time": "2026-11-20T10:00:00.000Z", "Bucket": "raw-bucket"}
    assert parse_body(json.dumps(body), SETTINGS) == []


def test_parse_s3_marker_without_partition_date_is_refused() -> None:
    bad = rejected(json.dumps({"Records": [s3_record("events/_SUCCESS")]}))
    assert bad.error_type == ErrorType.INVALID_PARAMETERS and "date=YYYY-MM-DD" in bad.message


def test_parse_s3_keys_decoded_from_notifications_and_kept_as_they_are_from_eventbridge() -> None:
    """S3 event notifications URL-encode the key ("red flower.jpg" arrives as "red+flower.jpg": Amazon S3
    User Guide, "Event message structure", https://docs.aws.amazon.com/AmazonS3/latest/userguide/notification-content-structure.html).
    EventBridge's "Object Created" event gives `detail.object.key` as the object key name, with no such
    note (Amazon S3 User Guide, "EventBridge event message structure",
    https://docs.aws.amazon.com/AmazonS3/latest/userguide/ev-events.html), and its events show keys with
    raw ':' where a notification has '%3A'. Decoding an EventBridge key would turn a '+' into a space:
    another job id, another folder."""
    key = "events/date=2026-11-20/a+b 100%/_SUCCESS"
    [from_eventbridge] = parse_body(json.dumps(eventbridge_event(key)), SETTINGS)
    encoded = "events/date%3D2026-11-20/a%2Bb+100%25/_SUCCESS"
    [from_notification] = parse_body(json.dumps({"Records": [s3_record(encoded)]}), SETTINGS)
    assert from_eventbridge.job_id == from_notification.job_id
    assert from_eventbridge.params == from_notification.params
    assert "a+b 100%" in json.dumps(from_eventbridge.params)


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


def test_release_delay_grows_with_attempt_up_to_the_cap() -> None:
    settings = Settings(release_delay_base_s=10, release_delay_cap_s=300, max_attempts=10)
    rng = random.Random(3)
    delays = [[release_delay_s(n, settings, rng) for _ in range(50)] for n in range(1, 8)]
    for n, samples in enumerate(delays, start=1):
        ceiling = min(300, 10 * 2 ** (n - 1))
        assert all(ceiling / 2 - 1 <= d <= ceiling for d in samples), (n, samples)
    assert max(delays[0]) < min(delays[3]), "the fourth receive waits longer than the first"
    assert len(set(delays[6])) > 1, "jittered"
    assert release_delay_s(9, settings, rng) <= 300


def test_release_delay_of_the_last_attempt_is_zero_its_next_receive_sends_it_to_the_dlq() -> None:
    rng = random.Random(3)
    assert release_delay_s(3, Settings(release_delay_base_s=10, max_attempts=3), rng) == 0
    assert release_delay_s(1, Settings(release_delay_base_s=10, max_attempts=1), rng) == 0, "a single attempt"
    assert release_delay_s(2, Settings(release_delay_base_s=10, max_attempts=3), rng) > 0


def test_wait_delay_for_a_running_job_id_doubles_up_to_sqs_delay_limit() -> None:
    settings = Settings(job_wait_base_s=20, job_wait_cap_s=900)
    rng = random.Random(5)
    assert all(10 <= wait_delay_s(0, settings, rng) <= 20 for _ in range(20))
    assert all(40 <= wait_delay_s(2, settings, rng) <= 80 for _ in range(20))
    assert all(450 <= wait_delay_s(30, settings, rng) <= 900 for _ in range(20))


def test_release_delay_zero_base_is_immediate() -> None:
    assert release_delay_s(4, Settings(release_delay_base_s=0), random.Random(1)) == 0


def test_outcomes_deferred_are_the_ones_the_lease_keeps() -> None:
    assert {o for o in Outcome if not o.deferred} == {
        Outcome.REJECTED,  # a copy is in the DLQ (poison, or its attempts used up)
        Outcome.IGNORED,
        Outcome.INLINE_DONE,
        Outcome.FANNED_OUT,
        Outcome.ALREADY_SUCCEEDED,
        Outcome.WAITING,
        Outcome.PARKED,  # a copy is in the type's waiting queue
        Outcome.DUPLICATE,  # another copy of the parked message carries it
        Outcome.CANCELLED,  # an operator cancelled it: in the DLQ
    }
    assert Outcome.HELD.deferred, "FIFO: a message waiting for its job id holds its group"


def test_release_delay_on_fifo_is_fixed_whatever_the_receive_count() -> None:
    settings = Settings(fifo=True, fifo_release_delay_s=45, release_delay_base_s=10, max_attempts=20)
    assert {release_delay_s(n, settings, random.Random(n)) for n in range(1, 20)} == {45}
    assert release_delay_s(20, settings, random.Random(1)) == 0, "the last attempt's: its next receive dead-letters"
    assert release_delay_s(3, Settings(fifo=True), random.Random(1)) == 0, "by default at once, in order"


def test_parse_s3_names_each_marker_s_object_creation_however_it_was_delivered() -> None:
    """Bucket, key and S3's sequencer name one object creation (the fan-out's marker key: a second
    delivery of the event by S3 names the same one); a record without a sequencer names none."""
    marker = "events/date=2026-11-20/_SUCCESS"
    direct = {"Records": [s3_record(marker), s3_record("events/date=2026-11-20/part-0.json"), s3_record(marker)]}
    parsed = parse_message(json.dumps(direct), SETTINGS)
    assert parsed.events == [f"raw-bucket/{marker}@0055AED6DCD90281E5"] * 2 and parsed.ignored_objects == 1
    assert parse_message(json.dumps(sns_wrapped(direct)), SETTINGS).events == parsed.events
    assert parse_message(json.dumps(eventbridge_event(marker)), SETTINGS).events == [f"raw-bucket/{marker}@617f08"]
    record = s3_record(marker)
    del record["s3"]["object"]["sequencer"]
    assert parse_message(json.dumps({"Records": [record]}), SETTINGS).events == [None]
    assert parse_message(json.dumps({"job_id": "a", "type": "wait", "params": {"seconds": 1}}), SETTINGS).events == []


def test_receiver_handler_counts_every_outcome() -> None:
    """Each outcome has its metric: a missing one raised in the handler and failed its record on every
    receive (a redelivery of a cancelled message, found by the simulation's operator)."""
    from longjobs.functions.receiver import OUTCOME_METRIC

    assert set(OUTCOME_METRIC) == set(Outcome)


def test_receiver_outcome_metrics_each_documented() -> None:
    """docs/engine.md names every metric the receiver counts an outcome under, and no other."""
    from longjobs.engine.observability import MetricName
    from longjobs.functions.receiver import OUTCOME_METRIC

    text = (Path(__file__).resolve().parents[2] / "docs" / "engine.md").read_text()
    start = text.index("The receiver adds one count per record outcome")
    metrics = {value for name, value in vars(MetricName).items() if name.isupper()}
    named = set(re.findall(r"`(\w+)`", text[start : text.index("\n\n", start)])) & metrics
    counted = {*OUTCOME_METRIC.values(), MetricName.RECORDS_FAILED, MetricName.S3_OBJECTS_IGNORED}
    assert named == counted, f"documented, not counted: {named - counted}; counted, not documented: {counted - named}"


def test_parse_s3_notification_reads_only_the_fields_it_uses() -> None:
    """A record is read for its event name, bucket, key and sequencer. A created marker whose record lacks
    a field the receiver does not use (moto's S3 sends none of userIdentity, requestParameters,
    responseElements, ownerIdentity), or whose request came from no IP address, still runs; a record of
    another event beside it (a tagging record without size or eTag) does not refuse the notification."""
    marker = "events/date%3D2026-11-20/_SUCCESS"
    lean = s3_record(marker)
    for name in ("userIdentity", "requestParameters", "responseElements", "eventTime", "awsRegion"):
        del lean[name]
    del lean["s3"]["bucket"]["ownerIdentity"]
    assert [j.job_id for j in parse_body(json.dumps({"Records": [lean]}), SETTINGS)] == [
        "spark:raw-bucket/events/date=2026-11-20/"
    ]
    by_service = s3_record(marker)
    by_service["requestParameters"]["sourceIPAddress"] = "AWS Internal"
    assert len(parse_body(json.dumps({"Records": [by_service]}), SETTINGS)) == 1
    tagging = s3_record("events/date=2026-11-20/part-0.json", event="ObjectTagging:Put")
    del tagging["s3"]["object"]["size"], tagging["s3"]["object"]["eTag"]
    parsed = parse_message(json.dumps({"Records": [tagging, s3_record(marker)]}), SETTINGS)
    assert [j.job_id for j in parsed.jobs] == ["spark:raw-bucket/events/date=2026-11-20/"]
    not_s3 = s3_record(marker)
    not_s3["eventSource"] = "aws:sqs"
    assert rejected(json.dumps({"Records": [not_s3]})).error_type == ErrorType.INVALID_SHAPE


def test_parse_s3_notification_a_record_that_is_no_object_is_named_so() -> None:
    """The DLQ's message speaks of the producer's JSON, never of the receiver's model classes."""
    bad = rejected(json.dumps({"Records": [5]}))
    assert (bad.error_type, bad.message) == (
        ErrorType.INVALID_SHAPE,
        "not a valid S3 event: Records.0: expected a JSON object",
    )
