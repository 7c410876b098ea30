"""`longjobs --stack NAME`: the deployed-stack mode on moto, the stack's outputs from a CloudFormation stack."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from longjobs.cli import clients, commands
from longjobs.engine.lease import LastError, LeaseStatus
from tests import REPO_ROOT
from tests.longjobs_support import Processor, assert_one_line_error, create_processor, run

STACK = "LongJobs-test"
REGION = "us-east-1"
SERVICE = "LongJobs-test"
"""The stack's `MetricsService`: the `service` dimension its functions publish under."""


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def deployed(monkeypatch: pytest.MonkeyPatch) -> Iterator[Processor]:
    """The processor's resources under the names a deployment gives them, and a stack whose outputs
    name them (literal values: moto creates the stack from the template)."""
    monkeypatch.setattr(commands, "LONG_POLL_S", 0)  # moto answers exactly: no confirming long poll
    with mock_aws():
        session = boto3.session.Session(region_name=REGION)
        processor = create_processor(
            session.client("sqs"),
            session.client("dynamodb"),
            session.client("stepfunctions"),
            queue="LongJobs-test-Queue4A7E3555-abc",
            dlq="LongJobs-test-DeadLetterQueue9F481546-def",
            table="LongJobs-test-LeasesTable-123",
            state_machine="Workflow-StateMachine-xyz",
            published_by=f"stack {STACK}",  # the stack's custom resource writes it (tests/infra checks that)
        )
        outputs = {
            "QueueUrl": processor.queue_url,
            "DeadLetterQueueUrl": processor.dlq_url,
            "LeaseTableName": processor.table_name,
            "StateMachineArn": processor.state_machine_arn,
            "CuratedBucketName": "longjobs-test-curated",
            "QuarantineBucketName": "longjobs-test-quarantine",
            "MetricsService": SERVICE,
        }
        template = {"Resources": {}, "Outputs": {key: {"Value": value} for key, value in outputs.items()}}
        session.client("cloudformation").create_stack(StackName=STACK, TemplateBody=json.dumps(template))
        yield processor


def _put_metric(
    namespace: str, name: str, value: float, dimension: tuple[str, str], minutes_ago: float, *more: tuple[str, str]
) -> None:
    boto3.client("cloudwatch", region_name=REGION).put_metric_data(
        Namespace=namespace,
        MetricData=[
            {
                "MetricName": name,
                "Dimensions": [{"Name": key, "Value": value} for key, value in (dimension, *more)],
                "Value": value,
                "Timestamp": datetime.now(UTC) - timedelta(minutes=minutes_ago),
            }
        ],
    )


def test_cli_stack_status_reads_the_stacks_outputs_and_cloudwatch(
    deployed: Processor, capsys: pytest.CaptureFixture[str]
) -> None:
    deployed.sqs.send_message(QueueUrl=deployed.queue_url, MessageBody="{}")
    deployed.dead_letter()
    deployed.put_lease("m1", now=time.time(), renewal_count=2, renewed_at=time.time())
    service = ("service", SERVICE)
    another = ("service", "long-jobs")  # another stack's processor in the account and region
    _put_metric("LongJobs", "Renewals", 5, service, minutes_ago=30)
    _put_metric("LongJobs", "Renewals", 7, service, minutes_ago=2)
    _put_metric("LongJobs", "Renewals", 100, service, minutes_ago=90)  # before the last hour
    _put_metric("LongJobs", "Renewals", 1_000, another, minutes_ago=2)
    _put_metric("LongJobs", "BacklogDrainTime", 5, another, 1, ("job_type", "theirs"))
    _put_metric("LongJobs", "Lapses", 1, service, minutes_ago=10)
    _put_metric("LongJobs", "RedeliveredWhileRunning", 3, service, minutes_ago=10)  # the Lapses alarm counts it too
    _put_metric("LongJobs", "LeasesLost", 2, service, minutes_ago=10)
    queue_name = deployed.queue_url.rsplit("/", 1)[-1]
    _put_metric("AWS/SQS", "ApproximateAgeOfOldestMessage", 40, ("QueueName", queue_name), minutes_ago=5)
    _put_metric("AWS/SQS", "ApproximateAgeOfOldestMessage", 42, ("QueueName", queue_name), minutes_ago=1)
    _put_metric("LongJobs", "BacklogDrainTime", 3_600, service, 10, ("job_type", "spark"))
    _put_metric("LongJobs", "BacklogDrainTime", 7_200, service, 1, ("job_type", "spark"))
    _put_metric("LongJobs", "BacklogDrainTime", 60, service, 40, ("job_type", "wordcount"))  # not recent

    result = run(capsys, "--stack", STACK, "status", "--json")

    assert result.code == 0, result.err
    data = result.json()
    assert data["source"] == "cloudwatch"
    assert data["queue"]["visible"] == 1
    assert data["dlq"]["visible"] == 1
    assert data["leases"]["ACTIVE"] == 1
    assert data["last_hour"] == {"renewals": 12, "lapses": 4, "leases_lost": 2}
    assert data["oldest_message_age_s"] == 42
    assert data["drain_s"] == {"spark": 7_200}, "each limited type's latest estimate of the last 15 minutes"
    assert data["notes"] == []


def test_cli_stack_status_without_the_metrics_service_output_says_what_it_reads(
    deployed: Processor, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stack of one's own that declares no `MetricsService` (docs/install.md lists it) is read under the
    service of earlier releases, `long-jobs`: the answer says so, rather than show zeros as if all were well."""
    cloudformation = boto3.client("cloudformation", region_name=REGION)
    [stack] = cloudformation.describe_stacks(StackName=STACK)["Stacks"]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"] if o["OutputKey"] != "MetricsService"}
    template = {"Resources": {}, "Outputs": {key: {"Value": value} for key, value in outputs.items()}}
    cloudformation.create_stack(StackName="Older", TemplateBody=json.dumps(template))
    _put_metric("LongJobs", "Renewals", 4, ("service", "long-jobs"), minutes_ago=2)

    result = run(capsys, "--stack", "Older", "status", "--json")

    assert result.code == 0, result.err
    data = result.json()
    assert data["last_hour"]["renewals"] == 4
    assert any("no MetricsService output" in note and "docs/install.md" in note for note in data["notes"]), data


def documented_permissions(subcommand: str) -> set[str]:
    """The IAM actions docs/operate.md's "IAM permissions for `--stack`" gives `subcommand`, with those of
    every subcommand (`all`)."""
    page = (REPO_ROOT / "docs" / "operate.md").read_text(encoding="utf-8")
    table = page[page.index("## IAM permissions for `--stack`") :]
    rows = dict(re.findall(r"^\| `?([\w ]+?)`? \| (.+) \|$", table, re.M))
    return {action for name in ("all", subcommand) for action in re.findall(r"`(\w+:\w+)`", rows[name])}


def test_cli_stack_status_calls_only_what_operate_md_permits(
    deployed: Processor, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator given the permissions the page lists for `status` can run it: every call it makes on a
    stack, the backlog drain time's too, is one of them."""
    _put_metric("LongJobs", "BacklogDrainTime", 60, ("service", SERVICE), 1, ("job_type", "spark"))
    calls: set[str] = set()
    made = clients.make_session

    def record(model: Any, **_: Any) -> None:
        service = model.service_model.service_name
        calls.add(f"{'states' if service == 'stepfunctions' else service}:{model.name}")  # IAM's prefix

    def recording(connection: clients.Connection) -> boto3.session.Session:
        session = made(connection)
        session.events.register("before-call", record)
        return session

    monkeypatch.setattr(clients, "make_session", recording)

    result = run(capsys, "--stack", STACK, "status", "--json")

    assert result.code == 0, result.err
    assert {"cloudwatch:GetMetricData", "cloudwatch:ListMetrics"} <= calls
    assert calls - documented_permissions("status") == set()


def test_cli_stack_submit_validates_spark_jobs_with_the_stacks_output_defaults(
    deployed: Processor, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(
        capsys, "--stack", STACK, "submit", "spark", "--param", "input=s3://raw-bucket/events/date=2026-11-20/",
        "--param", "date=2026-11-20", "--json",
    )  # fmt: skip

    assert result.code == 0, result.err
    [body] = deployed.bodies(deployed.queue_url)
    assert json.loads(body)["params"] == {"input": "s3://raw-bucket/events/date=2026-11-20/", "date": "2026-11-20"}


def test_cli_stack_leases_and_lease_read_the_stacks_table_and_state_machine(
    deployed: Processor, capsys: pytest.CaptureFixture[str]
) -> None:
    execution = deployed.stepfunctions.start_execution(stateMachineArn=deployed.state_machine_arn, name="m1-1")
    deployed.put_lease("m1", execution_arn=execution["executionArn"])

    listed = run(capsys, "--stack", STACK, "leases", "--json")
    story = run(capsys, "lease", "m1", "--stack", STACK, "--json")  # the options after the subcommand too

    assert [lease["message_id"] for lease in listed.json()] == ["m1"]
    assert [e["arn"] for e in story.json()["executions"]] == [execution["executionArn"]]


def test_cli_stack_dlq_list_and_redrive(deployed: Processor, capsys: pytest.CaptureFixture[str]) -> None:
    message_id = deployed.dead_letter('{"job_id": "a"}', ErrorType="NotJson", ErrorMessage="x", ReceiveCount="1")

    listed = run(capsys, "--stack", STACK, "dlq", "list", "--json")
    moved = run(
        capsys, "--stack", STACK, "dlq", "redrive", "--max-per-second", "50", "--include-poison", "--yes", "--json"
    )

    assert [letter["message_id"] for letter in listed.json()] == [message_id]
    assert moved.code == 0, moved.err
    assert moved.json()["moved"] == 1
    assert deployed.bodies(deployed.queue_url) == ['{"job_id": "a"}']


def test_cli_stack_overrides_win_over_the_stacks_outputs(
    deployed: Processor, capsys: pytest.CaptureFixture[str]
) -> None:
    other = deployed.sqs.create_queue(QueueName="other")["QueueUrl"]

    result = run(capsys, "--stack", STACK, "--queue-url", other, "submit", "echo", "--json")

    assert result.code == 0, result.err
    assert len(deployed.bodies(other)) == 1
    assert deployed.bodies(deployed.queue_url) == []


def test_cli_stack_table_that_does_not_exist_fails_naming_it(
    deployed: Processor, capsys: pytest.CaptureFixture[str]
) -> None:
    """DynamoDB's ResourceNotFoundException (a table or index that does not exist, or is not ACTIVE:
    https://docs.aws.amazon.com/botocore/latest/reference/services/dynamodb/client/exceptions/ResourceNotFoundException.html)
    names no table: the command names the one `--table` gave."""
    result = run(capsys, "--stack", STACK, "--table", "nope", "leases")

    assert_one_line_error(result, 1, "ResourceNotFoundException", "lease table 'nope' (--table)")


def test_cli_stack_that_does_not_exist_fails_in_one_line(
    deployed: Processor, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "--stack", "LongJobs-nope", "status")

    assert_one_line_error(result, 1, "no stack 'LongJobs-nope' in us-east-1")


def test_cli_stack_without_the_outputs_fails_in_one_line_naming_them(
    deployed: Processor, capsys: pytest.CaptureFixture[str]
) -> None:
    template = {"Resources": {}, "Outputs": {"QueueUrl": {"Value": deployed.queue_url}}}
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName="other", TemplateBody=json.dumps(template)
    )

    result = run(capsys, "--stack", "other", "leases")

    assert_one_line_error(
        result,
        1,
        "stack 'other' (CREATE_COMPLETE) has no output DeadLetterQueueUrl, LeaseTableName, StateMachineArn",
        "declares them beside its LongJobProcessor (docs/install.md)",
        "pass --queue-url, --dlq-url, --table and --state-machine-arn",
    )


def test_cli_stack_without_credentials_fails_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    result = run(capsys, "--stack", STACK, "status")

    assert_one_line_error(result, 1, "no AWS credentials found")


def test_cli_stack_without_a_region_fails_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))

    result = run(capsys, "--stack", STACK, "status")

    assert_one_line_error(result, 1, "no AWS region")


def test_cli_stack_with_an_unknown_profile_fails_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))

    result = run(capsys, "--stack", STACK, "--profile", "ops", "status")

    assert_one_line_error(result, 1, "no AWS profile 'ops'")


def test_cli_lease_of_a_closed_stack_lease_shows_its_error(
    deployed: Processor, capsys: pytest.CaptureFixture[str]
) -> None:
    deployed.put_lease(
        "m9", status=LeaseStatus.RELEASED, last_error=LastError("States.Timeout", "heartbeat"), closed_at=time.time()
    )

    result = run(capsys, "--stack", STACK, "lease", "m9")

    assert result.code == 0, result.err
    assert "RELEASED" in result.out
    assert "States.Timeout: heartbeat" in result.out
