"""The workflow definition's states and transitions, for both Spark steps (rendered without deploying)."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest

from infra.workflow import SparkStep, glue_spark_step, render_definition, token_queue_spark_step

ACCOUNT, REGION = "123456789012", "us-east-1"
JOBS_QUEUE = f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs"


def render(spark_step: SparkStep) -> dict[str, Any]:
    text = render_definition(
        table_name="leases", queue_arns=[JOBS_QUEUE], spark_step=spark_step, region=REGION, account=ACCOUNT
    )
    return dict(json.loads(text))


@pytest.fixture(scope="module")
def offline() -> dict[str, Any]:
    return render(
        token_queue_spark_step(
            queue_arn=f"arn:aws:sqs:{REGION}:{ACCOUNT}:tokens",
            queue_url=f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/tokens",
            heartbeat=cdk.Duration.seconds(30),
            timeout=cdk.Duration.hours(2),
        )
    )


def branch_states(definition: dict[str, Any]) -> dict[str, Any]:
    return dict(definition["States"]["RunJob"]["Branches"][0]["States"])


def test_workflow_job_choice_routes_spark_and_wait(offline: dict[str, Any]) -> None:
    choices = branch_states(offline)["JobType"]["Choices"]
    assert [c.get("Next") for c in choices] == ["RunSparkJob", "WaitThenFail", "Wait"]
    assert branch_states(offline)["JobType"]["Default"] == "UnknownJobType"
    assert branch_states(offline)["Wait"]["SecondsPath"] == "$.job.params.seconds"


def test_workflow_catches_heartbeat_timeouts_under_both_names(offline: dict[str, Any]) -> None:
    spark = branch_states(offline)["RunSparkJob"]
    assert spark["Resource"] == "arn:aws:states:::sqs:sendMessage.waitForTaskToken"
    assert spark["HeartbeatSeconds"] == 30
    assert spark["TimeoutSeconds"] == 2 * 3600, "always explicit: moto times a heartbeat-only task out after 60 s"
    assert spark["Parameters"]["MessageBody"]["task_token.$"] == "$$.Task.Token"
    [timeouts] = spark["Catch"]
    assert timeouts["ErrorEquals"] == ["States.HeartbeatTimeout", "States.Timeout"]
    assert branch_states(offline)[timeouts["Next"]] == {
        "Type": "Fail",
        "Error": "JobTimedOut",
        "Cause": "the job stopped sending heartbeats or ran past its timeout",
    }
    [everything] = offline["States"]["RunJob"]["Catch"]
    assert everything == {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "ReadLeaseForRelease"}


def test_workflow_settles_with_the_lease_handle_read_at_the_end(offline: dict[str, Any]) -> None:
    states = offline["States"]
    assert states["RunJob"]["Next"] == "ReadLease"
    assert states["ReadLease"]["Parameters"]["ConsistentRead"] is True
    assert states["DeleteMessage"]["Resource"] == "arn:aws:states:::aws-sdk:sqs:deleteMessage"
    assert states["DeleteMessage"]["Parameters"]["ReceiptHandle.$"] == "$.lease.Item.receipt_handle.S"
    assert states["DeleteMessage"]["Next"] == "MarkSucceeded"
    assert states["MarkSucceeded"]["Catch"][0]["Next"] == "ReadLease", "a newer handle: read and delete again"
    release = states["ReleaseMessage"]["Parameters"]
    assert release["ReceiptHandle.$"] == "$.lease.Item.receipt_handle.S"
    assert release["VisibilityTimeout.$"] == "$.release_delay_s"
    # close first, then give the message back: no renewal that read the lease earlier can outlive it
    assert states["MarkReleased"]["Next"] == "ReleaseMessage" and states["ReleaseMessage"]["Next"] == "JobFailed"
    assert states["JobFailed"]["Type"] == "Fail"


def test_workflow_fences_every_settlement_by_the_execution_that_owns_the_lease(offline: dict[str, Any]) -> None:
    states = offline["States"]
    assert offline["StartAt"] == "Self"
    assert states["Self"] == {
        "Type": "Pass",
        "ResultPath": "$.self",
        "Parameters": {"execution.$": "$$.Execution.Id"},
        "Next": "ReadLeaseAtStart",
    }
    owned = {
        "And": [
            {"Variable": "$.lease.Item.execution_arn.S", "IsPresent": True},
            {"Variable": "$.lease.Item.execution_arn.S", "StringEqualsPath": "$.self.execution"},
        ]
    }
    for choice, then in (
        ("OwnsLeaseAtStart", "RunJob"),
        ("OwnsLease", "AlreadySettled"),
        ("OwnsLeaseForRelease", "MarkReleased"),
    ):
        [rule] = states[choice]["Choices"]
        assert {k: v for k, v in rule.items() if k != "Next"} == owned and rule["Next"] == then, choice
    assert states["OwnsLeaseAtStart"]["Default"] == "NotHeld"
    assert states["NotHeld"] == {
        "Type": "Fail",
        "Error": "LeaseNotHeld",
        "Cause": "its lease is closed or names another execution",
    }
    for task in ("MarkSucceeded", "MarkReleased", "MarkLost"):
        condition = states[task]["Parameters"]["ConditionExpression"]
        assert condition.startswith("#execution = :self"), task
        assert states[task]["Parameters"]["ExpressionAttributeValues"][":self"] == {"S.$": "$.self.execution"}


def test_workflow_records_a_release_refused_for_a_gone_handle_as_lost(offline: dict[str, Any]) -> None:
    states = offline["States"]
    [catch] = states["ReleaseMessage"]["Catch"]
    assert catch == {"ErrorEquals": ["States.ALL"], "ResultPath": "$.release_error", "Next": "ReleaseRefused"}
    refused = json.dumps(states["ReleaseRefused"]["Choices"])
    assert "*.ReceiptHandleIsInvalidException" in refused and "*expired*" in refused
    assert states["ReleaseRefused"]["Choices"][0]["Next"] == "MarkLost"
    assert states["ReleaseRefused"]["Default"] == "JobFailed", "anything else: RELEASED, back when its chunk ends"
    assert states["MarkLost"]["Parameters"]["ExpressionAttributeValues"][":status"] == {"S": "LOST"}


def test_workflow_retries_throttling_on_every_sqs_and_dynamodb_task(offline: dict[str, Any]) -> None:
    for name in (
        "ReadLease",
        "DeleteMessage",
        "MarkSucceeded",
        "ReadLeaseForRelease",
        "ReleaseMessage",
        "MarkReleased",
        "MarkLost",
        "ReadLeaseAtStart",
    ):
        [retry] = offline["States"][name]["Retry"]
        assert any("Throttl" in error or "ProvisionedThroughput" in error for error in retry["ErrorEquals"]), name
        assert retry["BackoffRate"] == 2 and retry["JitterStrategy"] == "FULL"


def test_workflow_cloud_spark_step_is_a_synchronous_glue_run() -> None:
    definition = render(glue_spark_step("events-pipeline", timeout=cdk.Duration.hours(6)))
    spark = branch_states(definition)["RunSparkJob"]
    assert spark["Resource"] == "arn:aws:states:::glue:startJobRun.sync"
    assert spark["Parameters"]["JobName"] == "events-pipeline"
    assert spark["Parameters"]["Arguments"]["--input.$"] == "$.job.params.input"
    assert spark["Parameters"]["Timeout"] == 6 * 60, "Glue's own run timeout, in minutes"
    assert spark["TimeoutSeconds"] == 6 * 3600 + 15 * 60, "the step's own, so its JobTimedOut catch can fire"
