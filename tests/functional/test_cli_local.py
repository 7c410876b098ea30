"""`longjobs --endpoint-url`: every subcommand against the local service (moto's server over HTTP)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from longjobs.cli import clients, commands, dlq
from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog, JobType
from longjobs.engine.jobs.published import CATALOG_KEY, publish
from longjobs.engine.lease import LastError, LeaseStatus
from longjobs.offline import processor as processor_module
from longjobs.offline.processor import PUBLISHED_BY
from tests.longjobs_support import Processor, assert_one_line_error, create_processor, run


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    werkzeug = logging.getLogger("werkzeug")
    level = werkzeug.level
    werkzeug.setLevel(logging.CRITICAL)  # moto logs every request, and a traceback for what it lacks
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.get_host_and_port()[1]}"
    finally:
        server.stop()
        werkzeug.setLevel(level)


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich's width when not on a terminal: whole cells to assert on


def _reset(endpoint: str) -> None:
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", data=b"{}", method="POST")
    urllib.request.urlopen(request, timeout=10).close()


@pytest.fixture
def local(endpoint: str) -> Processor:
    """The local service's resources, by the offline runtime's names."""
    _reset(endpoint)
    session = boto3.session.Session(region_name="us-east-1")
    sqs, dynamodb, sfn = (session.client(name, endpoint_url=endpoint) for name in ("sqs", "dynamodb", "stepfunctions"))
    return create_processor(sqs, dynamodb, sfn, published_by=PUBLISHED_BY)


def test_cli_submit_sends_the_validated_job_message(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(
        capsys, "--endpoint-url", endpoint, "submit", "wait", "--param", "seconds=30", "--param", "fail=true",
        "--job-id", "canary-1", "--json",
    )  # fmt: skip

    assert result.code == 0, result.err
    data = result.json()
    assert data["job_id"] == "canary-1"
    assert data["jobs"] == 1
    [message] = local.sqs.receive_message(QueueUrl=local.queue_url, MessageAttributeNames=["All"])["Messages"]
    assert message["MessageId"] == data["message_id"]
    assert json.loads(message["Body"]) == {
        "job_id": "canary-1",
        "type": "wait",
        "params": {"seconds": 30, "fail": True},
    }


def test_cli_submit_prints_the_message_id_and_generates_a_job_id(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "submit", "echo", "--param", "text=hello", "--endpoint-url", endpoint)

    assert result.code == 0, result.err
    [body] = local.bodies(local.queue_url)
    job = json.loads(body)
    assert job["job_id"].startswith("echo-")
    assert job["params"] == {"text": "hello"}
    assert len(result.out.strip().splitlines()) == 1


def test_cli_submit_sends_a_whole_body_from_a_file(
    local: Processor, endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = '{"job_id": "from-file", "type": "wait", "params": {"seconds": 5}}'
    path = tmp_path / "job.json"
    path.write_text(body)

    result = run(capsys, "--endpoint-url", endpoint, "submit", "--body", str(path), "--json")

    assert result.code == 0, result.err
    assert result.json()["job_id"] == "from-file"
    assert local.bodies(local.queue_url) == [body]


def test_cli_submit_invalid_job_fails_with_the_receivers_error_and_sends_nothing(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "--endpoint-url", endpoint, "submit", "wait", "--param", "seconds=-1")

    assert_one_line_error(result, 1, "InvalidParameters: params.seconds: must be bigger than or equal to 0")
    assert local.bodies(local.queue_url) == []


def test_cli_submit_unknown_type_fails_with_the_receivers_error(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "--endpoint-url", endpoint, "submit", "sleep", "--param", "seconds=1")

    assert_one_line_error(
        result, 1, "UnknownJobType:", "(known types: echo, spark, wait) (job types of the local service)"
    )


def test_cli_submit_validates_with_the_services_published_types_never_a_jobs_json_here(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A jobs.json in the current folder may describe another deployment: submit never reads it. It
    validates with what the service publishes, or with a file it is told to use."""
    (tmp_path / "jobs.json").write_text(json.dumps({"job_types": [{"name": "sleep", "runner": "wait",
        "params_schema": {"type": "object", "required": ["seconds"], "properties": {"seconds": {}}}}]}))  # fmt: skip
    monkeypatch.chdir(tmp_path)
    refused = run(capsys, "--endpoint-url", endpoint, "submit", "sleep", "--param", "seconds=1")
    assert_one_line_error(refused, 1, "'sleep' is not a job type", "(job types of the local service)")

    sent = run(
        capsys, "--endpoint-url", endpoint, "submit", "sleep", "--param", "seconds=1", "--jobs-file", "jobs.json"
    )
    assert sent.code == 0, sent.err

    local.dynamodb.delete_item(TableName=local.table_name, Key={"pk": {"S": CATALOG_KEY}})
    unpublished = run(capsys, "--endpoint-url", endpoint, "submit", "wait", "--param", "seconds=1")
    assert_one_line_error(unpublished, 1, "publishes no job types", "pass --jobs-file FILE")
    assert "try again after its banner" in unpublished.err and "deploy" not in unpublished.err, "no stack to deploy"


def test_cli_submit_refuses_a_type_the_service_cannot_run_and_sends_nothing(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service without PySpark (the `offline` extra alone) publishes its pyspark types as not runnable, as
    its banner says: submit refuses their jobs in one line, naming what is missing, rather than send a job
    that fails every attempt on its way to the DLQ. The other types are sent."""
    monkeypatch.setattr(processor_module, "has_pyspark", lambda: False)
    catalog = JobCatalog(BUILTIN_TYPES)
    publish(local.dynamodb, local.table_name, catalog, PUBLISHED_BY, processor_module.unrunnable(catalog))

    refused = run(capsys, "--endpoint-url", endpoint, "submit", "spark", "--param", "date=2026-01-01")
    assert_one_line_error(refused, 1, "job type 'spark' cannot run on the local service: PySpark is not installed")
    assert local.bodies(local.queue_url) == []

    sent = run(capsys, "--endpoint-url", endpoint, "submit", "wait", "--param", "seconds=1")
    assert sent.code == 0, sent.err
    assert len(local.bodies(local.queue_url)) == 1


def test_cli_submit_checks_a_wait_with_the_published_renewal_not_the_default(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The receiver refuses a wait that outlasts renewal, which the deployment's `max_renewal_s` sets. A
    publisher of its checks has submit refuse such a wait too; one that published none (a stack deployed
    before) is checked with the default settings."""
    catalog = JobCatalog(BUILTIN_TYPES)
    publish(local.dynamodb, local.table_name, catalog, PUBLISHED_BY, checks={"max_renewal_s": 3_600})

    refused = run(capsys, "--endpoint-url", endpoint, "submit", "wait", "--param", "seconds=7200")
    assert_one_line_error(refused, 1, "InvalidParameters: params.seconds: 7200 s does not end within renewal (3600 s")
    assert local.bodies(local.queue_url) == []
    assert run(capsys, "--endpoint-url", endpoint, "submit", "wait", "--param", "seconds=3000").code == 0

    publish(local.dynamodb, local.table_name, catalog, PUBLISHED_BY)
    assert run(capsys, "--endpoint-url", endpoint, "submit", "wait", "--param", "seconds=7200").code == 0
    assert len(local.bodies(local.queue_url)) == 2

    publish(local.dynamodb, local.table_name, catalog, PUBLISHED_BY, checks={"max_renewal_s": -1})
    broken = run(capsys, "--endpoint-url", endpoint, "submit", "wait", "--param", "seconds=1")
    assert_one_line_error(broken, 1, "the published receiver checks {'max_renewal_s': -1} are not settings")


def test_cli_submit_checks_a_body_with_the_published_max_body_bytes(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The receiver dead-letters a body past its `max_body_bytes` as TooLarge: a publisher of its checks has
    submit refuse it too, and send nothing."""
    checks = {"max_renewal_s": 43_200, "cap_safety_s": 60, "max_body_bytes": 300}
    publish(local.dynamodb, local.table_name, JobCatalog(BUILTIN_TYPES), PUBLISHED_BY, checks=checks)

    refused = run(capsys, "--endpoint-url", endpoint, "submit", "echo", "--param", "text=" + "x" * 400)
    assert_one_line_error(refused, 1, "TooLarge: body is")
    assert local.bodies(local.queue_url) == []
    assert run(capsys, "--endpoint-url", endpoint, "submit", "echo", "--param", "text=short").code == 0


def test_cli_submit_fills_a_default_from_the_published_bucket_as_the_receiver(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A type whose required `input` a `{raw}` default fills: the receiver takes a body without it where the
    deployment has a raw bucket, and refuses it where it has none. The stack publishes its buckets' URIs
    beside its job types (its outputs name no raw bucket), so submit does the same."""
    ingest = JobType.model_validate(
        {"name": "ingest", "runner": "wait", "defaults": {"input": "{raw}in/", "seconds": 1},
         "params_schema": {"type": "object", "required": ["input", "seconds"],
                           "properties": {"input": {"type": "string"}, "seconds": {"type": "integer"}}}}
    )  # fmt: skip
    catalog = JobCatalog([*BUILTIN_TYPES, ingest])
    submit = ("--endpoint-url", endpoint, "submit", "ingest", "--json")

    publish(local.dynamodb, local.table_name, catalog, PUBLISHED_BY, checks={"raw_uri": "s3://raw-bucket/"})
    assert run(capsys, *submit).code == 0
    publish(local.dynamodb, local.table_name, catalog, PUBLISHED_BY, checks={"max_renewal_s": 600})
    assert_one_line_error(run(capsys, *submit), 1, "InvalidParameters: ", "input")
    assert len(local.bodies(local.queue_url)) == 1


def test_cli_submit_with_a_jobs_file_checks_with_the_published_settings(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`--jobs-file` replaces the job types, not the deployment's settings: a wait past its renewal is refused
    as the receiver would; a table with nothing published is checked with the defaults, as before."""
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps({"job_types": []}), encoding="utf-8")
    submit = ("--endpoint-url", endpoint, "submit", "--jobs-file", str(jobs), "wait", "--param", "seconds=700")
    assert run(capsys, *submit).code == 0, "nothing published: the defaults"

    checks = {"max_renewal_s": 600, "cap_safety_s": 60}
    publish(local.dynamodb, local.table_name, JobCatalog(BUILTIN_TYPES), PUBLISHED_BY, checks=checks)
    refused = run(capsys, *submit)
    assert_one_line_error(refused, 1, "InvalidParameters: params.seconds: 700 s does not end within renewal (600 s")
    assert len(local.bodies(local.queue_url)) == 1


@pytest.mark.parametrize(
    "attribute",
    [
        {"S": "not json"},
        {"S": "[1, 2]"},
        {"S": "null"},
        {"M": {"max_renewal_s": {"N": "600"}}},
        {"S": '{"max_renewal_s": true}'},
    ],
    ids=["not-json", "a-list", "null", "a-map-attribute", "a-bool"],
)
def test_cli_a_hand_edited_published_checks_attribute_is_one_line(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], attribute: dict[str, object]
) -> None:
    """A `receiver_checks` edited by hand into no JSON object of numbers: every reader of the item says so in
    one line, naming the attribute (no traceback, no `true` taken as 1 s)."""
    local.dynamodb.update_item(
        TableName=local.table_name,
        Key={"pk": {"S": CATALOG_KEY}},
        UpdateExpression="SET receiver_checks = :v",
        ExpressionAttributeValues={":v": attribute},  # type: ignore[dict-item]
    )
    for command in (("submit", "wait", "--param", "seconds=1"), ("top", "--once")):
        broken = run(capsys, "--endpoint-url", endpoint, *command)
        assert_one_line_error(broken, 1, "receiver_checks is no JSON object of the receiver's settings")
    assert local.bodies(local.queue_url) == []


def test_cli_submit_bad_param_syntax_is_a_usage_error(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "--endpoint-url", endpoint, "submit", "wait", "--param", "seconds")

    assert_one_line_error(result, 2, "--param 'seconds': expected key=value")


def test_cli_submit_empty_job_id_is_a_usage_error_not_a_generated_id(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--job-id "$JOB"` with JOB unset: the job must not go out under a generated id, which no lock would
    serialize with the job it was meant to be."""
    result = run(capsys, "--endpoint-url", endpoint, "submit", "wait", "--param", "seconds=5", "--job-id", "")

    assert_one_line_error(result, 2, "--job-id", "expected an id, not an empty string")
    assert local.bodies(local.queue_url) == []


def test_cli_submit_unreadable_body_file_fails_in_one_line(
    local: Processor, endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file an argument names that cannot be used is a wrong argument (exit code 2, operate.md's table),
    found before any AWS call: the same answer with the local service stopped."""
    result = run(capsys, "--endpoint-url", endpoint, "submit", "--body", str(tmp_path / "missing.json"))

    assert_one_line_error(result, 2, "cannot read --body", "missing.json")
    (tmp_path / "jobs.json").write_text('{"job_types": [{"name": "x", "runner": "docker"}]}')
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    for jobs_file, why in (
        (tmp_path / "nope.json", "cannot read the job types"),
        (tmp_path / "jobs.json", "runner"),
        (tmp_path / "deep.json", "nested thousands of levels deep"),
    ):
        for command in (("submit", "wait", "--param", "seconds=1"), ("lease", "some-message-id")):
            unreachable = ("--endpoint-url", "http://127.0.0.1:9")  # nothing listens: no call is made first
            result = run(capsys, *unreachable, *command, "--jobs-file", str(jobs_file))
            assert_one_line_error(result, 2, "--jobs-file", why)
    assert local.bodies(local.queue_url) == []


def test_cli_submit_a_body_that_is_not_json_blames_the_body_alone(
    local: Processor, endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The job types a check used are named where they decided it (an unknown type, bad params), not for a
    body that is not JSON at all."""
    (tmp_path / "job.json").write_text("job_id=a type=wait")

    result = run(capsys, "--endpoint-url", endpoint, "submit", "--body", str(tmp_path / "job.json"))

    assert_one_line_error(result, 1, "NotJson: body is not JSON")
    assert "job types of" not in result.err
    assert local.bodies(local.queue_url) == []


def test_cli_submit_to_a_fifo_queue_without_content_deduplication_sends_the_bodys_hash(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQS API_SendMessage, MessageDeduplicationId: a send to a FIFO queue without content-based
    deduplication "fails with an error" when it gives no deduplication id. With it, SQS makes the id from a
    SHA-256 hash of the body. The command sends the body's SHA-256 as the id, so a job sent twice within
    the 5-minute interval is delivered once, on either kind of FIFO queue."""
    fifo_url = local.sqs.create_queue(QueueName="jobs.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    argv = ["--endpoint-url", endpoint, "--queue-url", fifo_url, "submit", "wait", "--param", "seconds=1"]
    argv += ["--job-id", "fifo-1", "--message-group-id", "ops", "--json"]

    first, second = run(capsys, *argv), run(capsys, *argv)

    assert (first.code, second.code) == (0, 0), (first.err, second.err)
    got = local.sqs.receive_message(QueueUrl=fifo_url, MaxNumberOfMessages=10, AttributeNames=["All"])["Messages"]
    [message] = got
    expected = hashlib.sha256(message["Body"].encode("utf-8")).hexdigest()
    assert (message["Attributes"]["MessageGroupId"], message["Attributes"]["MessageDeduplicationId"]) == (
        "ops",
        expected,
    )


def test_cli_status_finds_the_local_service_through_aws_endpoint_url(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`AWS_ENDPOINT_URL`, the AWS SDKs' and CLI's own variable, is where the local service is when neither
    --stack nor --endpoint-url is given (as `aws` finds it)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    local.sqs.send_message(QueueUrl=local.queue_url, MessageBody="{}")

    result = run(capsys, "status", "--json")

    assert result.code == 0, result.err
    assert result.json()["queue"]["visible"] == 1
    assert result.json()["source"] == "lease table", "the local service's mode"


def test_cli_status_counts_queues_leases_and_the_last_hour_from_the_table(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    for body in ("a", "b", "c"):
        local.sqs.send_message(QueueUrl=local.queue_url, MessageBody=body)
    local.sqs.receive_message(QueueUrl=local.queue_url, MaxNumberOfMessages=1, VisibilityTimeout=60)
    local.dead_letter()
    local.put_lease("m1", now=now - 100, renewal_count=3, renewed_at=now - 60)
    local.put_lease("m2", now=now - 7_200, renewal_count=9, renewed_at=now - 5_000)  # renewed over an hour ago
    local.put_lease("m3", status=LeaseStatus.LOST, now=now - 600, closed_at=now - 300)
    local.put_lease("m4", status=LeaseStatus.LOST, now=now - 9_000, closed_at=now - 8_000)
    local.put_lease("m5", status=LeaseStatus.SUCCEEDED, now=now - 50, closed_at=now - 10)
    for waiting, job_type in (("w1", "backfill"), ("w2", "backfill"), ("w3", "wait")):
        local.put_lease(waiting, status=LeaseStatus.WAITING, now=now - 30, job_type=job_type, waiting_order=now - 30)

    result = run(capsys, "--endpoint-url", endpoint, "status", "--json")

    assert result.code == 0, result.err
    data = result.json()
    assert data["queue"] == {"visible": 2, "in_flight": 1, "delayed": 0, "total": 3}
    assert data["dlq"]["total"] == 1
    assert data["leases"] == {
        "ACTIVE": 2,
        "SUCCEEDED": 1,
        "RELEASED": 0,
        "CAPPED": 0,
        "LOST": 2,
        "REJECTED": 0,
        "DEAD_LETTERING": 0,
        "WAITING": 3,
        "PARKED": 0,
        "REQUEUED": 0,
        "CANCELLED": 0,
    }
    assert data["waiting"] == {"backfill": 2, "wait": 1}, "waiting for a slot, by job type"
    assert data["source"] == "lease table"
    assert data["last_hour"] == {"renewals": 3, "lapses": None, "leases_lost": 1}
    assert data["oldest_message_age_s"] is None
    assert any("not available" in note for note in data["notes"])


def test_cli_status_table_says_what_is_not_available_offline(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "--endpoint-url", endpoint, "status")

    assert result.code == 0, result.err
    assert "leases (table scan)" in result.out
    assert "n/a" in result.out
    assert "not available" in result.out


@pytest.mark.parametrize("argv", [["status", "--json"], ["leases"]])
def test_cli_output_to_a_pipe_its_reader_closed_ends_quietly(local: Processor, endpoint: str, argv: list[str]) -> None:
    """`longjobs ... | head` may close the pipe before the command writes: a JSON answer waits in stdout's
    buffer until the command ends, a table is written as it is printed. Either way the command ends with
    exit code 1 and nothing on stderr: no traceback, no "Exception ignored ... BrokenPipeError"."""
    read, write = os.pipe()
    os.close(read)
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}  # a shell's stdout
    try:
        ended = subprocess.run(
            [sys.executable, "-m", "longjobs", "--endpoint-url", endpoint, *argv],
            stdout=write, stderr=subprocess.PIPE, env=env, timeout=120, check=False,
        )  # fmt: skip
    finally:
        os.close(write)

    assert (ended.returncode, ended.stderr.decode()) == (1, "")


@pytest.mark.parametrize(
    ("argv", "interval", "shown"),
    [(["status", "--watch"], 2.0, "leases (table scan)"), (["top", "--interval", "1"], 1.0, "job types")],
)
def test_cli_live_views_refresh_until_ctrl_c_then_exit_cleanly(
    local: Processor,
    endpoint: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    interval: float,
    shown: str,
) -> None:
    """`status --watch` and `top` run until Ctrl-C, so Ctrl-C is how they end: exit code 0, not the 130 of
    a command cut short (operate.md's exit codes)."""
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(commands, "sleep", pause)

    result = run(capsys, "--endpoint-url", endpoint, *argv)

    assert result.code == 0, result.err
    assert pauses == [interval, interval]  # first view, one refresh, then Ctrl-C during the next pause
    assert shown in result.out
    # Piped, as here, nothing is redrawn in place: each view is printed as it is taken (a live display
    # would print only the last, and only once Ctrl-C ended it).
    assert result.out.count(f"local service at {endpoint}") == 2, result.out
    assert result.err == ""


def test_cli_local_service_in_another_region_names_the_region_not_a_stopped_service(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The offline runtime keeps its resources in us-east-1. Asked in another region, the running service
    has no queue there: the error names the region to give, not a service to start."""
    result = run(capsys, "--endpoint-url", endpoint, "--region", "eu-west-1", "status")

    assert_one_line_error(result, 1, "no queue 'jobs' or 'jobs.fifo' in eu-west-1", "give --region us-east-1")
    assert "is the offline runtime running" not in result.err


def test_cli_status_watch_with_json_is_a_usage_error(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "--endpoint-url", endpoint, "status", "--watch", "--json")

    assert_one_line_error(result, 2, "--watch")


def test_cli_leases_lists_newest_first_filtered_and_limited(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    local.put_lease("old", now=1_800_000_000.0)
    local.put_lease("new", now=1_800_000_100.0, last_error=LastError("ThrottlingException", "slow down"))
    local.put_lease("done", status=LeaseStatus.SUCCEEDED, now=1_800_000_050.0, closed_at=1_800_000_090.0)

    everything = run(capsys, "--endpoint-url", endpoint, "leases", "--json")
    active = run(capsys, "--endpoint-url", endpoint, "leases", "--status", "ACTIVE", "--limit", "1", "--json")

    assert [lease["message_id"] for lease in everything.json()] == ["new", "done", "old"]
    [newest] = active.json()
    assert newest["message_id"] == "new"
    assert newest["status"] == "ACTIVE"
    assert newest["last_error"] == {"error": "ThrottlingException", "cause": "slow down"}
    assert newest["received_at"] == "2027-01-15T08:01:40.000Z"


def test_cli_leases_table_shows_relative_visible_until(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    local.put_lease("m1", now=now, visible_until=now + 245)

    result = run(capsys, "--endpoint-url", endpoint, "leases")

    assert result.code == 0, result.err
    assert "m1" in result.out
    assert "in 4m" in result.out


def test_cli_lease_tells_its_whole_story_with_each_attempts_execution(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first = local.stepfunctions.start_execution(stateMachineArn=local.state_machine_arn, name="msg-1-1")
    local.stepfunctions.stop_execution(executionArn=first["executionArn"], error="WaitJobFailed", cause="asked to")
    third = local.stepfunctions.start_execution(stateMachineArn=local.state_machine_arn, name="msg-1-3")
    local.put_lease(
        "msg-1",
        status=LeaseStatus.SUCCEEDED,
        receive_count=3,  # the second receive started nothing
        renewal_count=4,
        execution_arn=third["executionArn"],
        last_error=LastError("WaitJobFailed", "asked to"),
        result={"waited_s": 12},
        closed_at=1_800_000_500.0,
    )

    result = run(capsys, "--endpoint-url", endpoint, "lease", "msg-1", "--json")

    assert result.code == 0, result.err
    data = result.json()
    assert data["lease"]["receive_count"] == 3
    assert data["lease"]["renewal_count"] == 4
    assert data["lease"]["result"] == {"waited_s": 12}
    assert data["lease"]["last_error"] == {"error": "WaitJobFailed", "cause": "asked to"}
    assert [(e["attempt"], e["name"]) for e in data["executions"]] == [(1, "msg-1-1"), (3, "msg-1-3")]
    assert data["executions"][0]["status"] == "ABORTED"
    assert data["executions"][0]["stopped_at"] is not None
    assert data["executions"][1]["arn"] == third["executionArn"]


def test_cli_lease_view_shows_fields_and_executions(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    local.stepfunctions.start_execution(stateMachineArn=local.state_machine_arn, name="msg-2-1")
    local.put_lease("msg-2", renewal_count=2)

    result = run(capsys, "--endpoint-url", endpoint, "lease", "msg-2")

    assert result.code == 0, result.err
    assert "lease msg-2" in result.out
    assert "msg-2-1" in result.out
    assert "RUNNING" in result.out


def test_cli_lease_unknown_id_fails_in_one_line(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "--endpoint-url", endpoint, "lease", "nope")

    assert_one_line_error(result, 1, "no lease for message nope")


NOT_LEASES = [CATALOG_KEY, "job#nightly", "slot#backfill#0"]
"""Keys of the lease table's other items: the published job types, a job lock, an admission slot."""


def put_non_leases(local: Processor) -> None:
    """A job lock and a slot beside the published job types (the local service publishes those)."""
    for key in NOT_LEASES[1:]:
        item = {"pk": {"S": key}, "lock_state": {"S": "HELD"}, "holder": {"S": "m-1"}}
        local.dynamodb.put_item(TableName=local.table_name, Item=item)


@pytest.mark.parametrize("key", NOT_LEASES)
def test_cli_lease_of_a_key_that_is_not_a_lease_fails_as_an_unknown_id(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    """The lease table also holds job locks, slots and the published job types: their keys name no lease."""
    put_non_leases(local)

    result = run(capsys, "--endpoint-url", endpoint, "lease", key)

    assert_one_line_error(result, 1, f"no lease for message {key}")


def test_cli_dlq_list_shows_every_message_with_its_error_and_leaves_them_visible(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = [
        local.dead_letter(
            ErrorType="NotJson", ErrorMessage=f"body is not JSON: {i}", ReceiveCount="1", OriginalMessageId=f"orig-{i}"
        )
        for i in range(12)
    ]
    exhausted = local.dead_letter('{"job_id": "x", "type": "wait", "params": {"seconds": 1, "fail": true}}')

    result = run(capsys, "--endpoint-url", endpoint, "dlq", "list", "--json")

    assert result.code == 0, result.err
    listed = {letter["message_id"]: letter for letter in result.json()}
    assert set(listed) == {*ids, exhausted}  # more than one page of ten
    assert listed[ids[3]]["error_type"] == "NotJson"
    assert listed[ids[3]]["error_message"] == "body is not JSON: 3"
    assert listed[ids[3]]["original_message_id"] == "orig-3"
    assert listed[ids[3]]["receive_count"] == 1
    assert listed[exhausted]["error_type"] is None
    assert listed[exhausted]["receive_count"] == 1  # SQS's count: the listing's own receive
    depth = local.sqs.get_queue_attributes(QueueUrl=local.dlq_url, AttributeNames=["ApproximateNumberOfMessages"])
    assert depth["Attributes"]["ApproximateNumberOfMessages"] == "13"  # all visible again


def test_cli_dlq_list_table_shows_error_type_and_message(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    local.dead_letter(ErrorType="InvalidShape", ErrorMessage="job_id: Field required", ReceiveCount="1")

    result = run(capsys, "--endpoint-url", endpoint, "dlq", "list")

    assert result.code == 0, result.err
    assert "InvalidShape" in result.out
    assert "job_id: Field required" in result.out


def test_cli_dlq_redrive_copies_back_where_the_endpoint_has_no_move_task(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    local.dead_letter('{"job_id": "a"}', ErrorType="InvalidShape", ErrorMessage="x", ReceiveCount="1", Team="data")
    local.dead_letter('{"job_id": "b"}')

    skipped = run(capsys, "--endpoint-url", endpoint, "dlq", "redrive", "--yes", "--json")
    assert (skipped.json()["moved"], skipped.json()["skipped"], skipped.json()["kept"]) == (1, 0, 1), (
        "poison (InvalidShape) stays by default"
    )
    result = run(capsys, "--endpoint-url", endpoint, "dlq", "redrive", "--include-poison", "--yes", "--json")

    assert result.code == 0, result.err
    data = result.json()
    assert (data["method"], data["moved"], data["failed"]) == ("copy", 1, 0)
    assert local.bodies(local.dlq_url) == []
    messages = local.sqs.receive_message(
        QueueUrl=local.queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    )
    by_body = {m["Body"]: m.get("MessageAttributes", {}) for m in messages["Messages"]}
    assert set(by_body) == {'{"job_id": "a"}', '{"job_id": "b"}'}
    assert set(by_body['{"job_id": "a"}']) == {"Team"}  # the receiver's error attributes stay behind


def test_cli_dlq_redrive_interrupted_prints_what_it_moved(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C during a copy: the messages already sent are deleted from the DLQ, so the operator must be told
    how many moved (their jobs run again) before `interrupted`, not `interrupted` alone."""
    for job in "abcd":
        local.dead_letter(json.dumps({"job_id": job}), ErrorType="AttemptsExhausted", ErrorMessage="x")
    send_copy = dlq._send_copy
    sends = 0

    def ctrl_c_on_the_third(*args: object, **kwargs: object) -> str:
        nonlocal sends
        sends += 1
        if sends == 3:
            raise KeyboardInterrupt
        return send_copy(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(dlq, "_send_copy", ctrl_c_on_the_third)

    result = run(capsys, "--endpoint-url", endpoint, "dlq", "redrive", "--yes")

    assert result.code == 130, result
    assert result.err.strip() == "longjobs: interrupted"
    assert "moved 2 message(s) to the jobs queue" in result.out
    assert "stopped early" in result.out
    assert len(local.bodies(local.queue_url)) == 2
    assert len(local.bodies(local.dlq_url)) == 2


def test_cli_dlq_redrive_dry_run_lists_and_moves_nothing(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    message_id = local.dead_letter(ErrorType="NotJson", ErrorMessage="x", ReceiveCount="1")

    result = run(capsys, "--endpoint-url", endpoint, "dlq", "redrive", "--dry-run", "--error-type", "NotJson", "--json")

    assert result.code == 0, result.err
    data = result.json()
    assert data["method"] == "dry-run"
    assert [m["message_id"] for m in data["messages"]] == [message_id], "poison named by --error-type is selected"
    assert local.bodies(local.queue_url) == []
    assert len(local.bodies(local.dlq_url)) == 1


def test_cli_unreachable_endpoint_fails_in_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(clients, "MAX_ATTEMPTS", 1)  # no retry backoff in the test
    url = "http://127.0.0.1:9"  # discard port: nothing listens

    result = run(capsys, "--endpoint-url", url, "status")

    assert_one_line_error(result, 1, f"cannot reach the local service at {url}", "longjobs-offline serve")


def test_cli_unreachable_endpoint_from_aws_endpoint_url_names_the_local_service(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local service found through `AWS_ENDPOINT_URL` (as serve's banner tells you to export) and not
    running is the local service not running, as with --endpoint-url: not "check the network and the region"."""
    monkeypatch.setattr(clients, "MAX_ATTEMPTS", 1)  # no retry backoff in the test
    url = "http://127.0.0.1:9"  # discard port: nothing listens
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)

    result = run(capsys, "status")

    assert_one_line_error(result, 1, f"cannot reach the local service at {url}", "longjobs-offline serve")


def test_cli_local_service_without_the_processors_queues_fails_in_one_line(
    endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _reset(endpoint)

    result = run(capsys, "--endpoint-url", endpoint, "leases")

    assert_one_line_error(result, 1, "has no queue 'jobs' or 'jobs.fifo'", "longjobs-offline serve")


def test_cli_local_service_on_fifo_queues_is_found(endpoint: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`serve --settings` with `{"fifo": true}` creates `jobs.fifo` and `jobs-dlq.fifo` (its banner names them):
    `--endpoint-url` finds them, and `submit` sends into the group it is given (docs/fifo.md)."""
    _reset(endpoint)
    session = boto3.session.Session(region_name="us-east-1")
    sqs, dynamodb, sfn = (session.client(name, endpoint_url=endpoint) for name in ("sqs", "dynamodb", "stepfunctions"))
    local = create_processor(sqs, dynamodb, sfn, queue="jobs.fifo", dlq="jobs-dlq.fifo", published_by=PUBLISHED_BY)

    sent = run(capsys, "--endpoint-url", endpoint, "submit", "wait", "--param", "seconds=1", "--message-group-id", "g1")
    listed = run(capsys, "--endpoint-url", endpoint, "dlq", "list", "--json")

    assert sent.code == 0, sent.err
    [message] = local.sqs.receive_message(QueueUrl=local.queue_url, AttributeNames=["MessageGroupId"])["Messages"]
    assert local.queue_url.endswith("/jobs.fifo") and message["Attributes"]["MessageGroupId"] == "g1"
    assert listed.code == 0, listed.err
