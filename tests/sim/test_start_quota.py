"""StartExecution's token bucket in the simulated Step Functions, on a virtual clock.

AWS throttles StartExecution with a token bucket per account and region: 1,300 tokens refilled at 300 a
second in US East (N. Virginia), US West (Oregon) and Europe (Ireland), 800 at 150 a second elsewhere
(Standard workflows; "Quotas related to API action throttling",
https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html). A throttled request answers
`ThrottlingException` (HTTP 400) and has no effect; botocore's standard retry mode retries it as a
throttle, with backoff (`botocore.retries.standard.ThrottledRetryableChecker`).
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.retries.standard import RetryContext, ThrottledRetryableChecker

from longjobs.engine.lease import table_definition
from longjobs.sim.aws import FakeAws
from longjobs.sim.aws.stepfunctions import Quota, start_execution_quota
from longjobs.sim.clients import SimClient
from longjobs.sim.clock import FakeClock
from longjobs.sim.faults import FaultPlan
from longjobs.sim.scheduler import Scheduler, VirtualClock
from longjobs.sim.trace import Trace

START = 1_700_000_000.0
STATE_MACHINE_ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:long-jobs"


def fake_aws(clock: Any, quota: Quota | None = None) -> FakeAws:
    aws = FakeAws(clock, random.Random(0), table=table_definition("leases"), state_machine_arn=STATE_MACHINE_ARN)
    if quota is not None:
        aws.stepfunctions.start_quota = quota
    return aws


def start(aws: FakeAws, name: str) -> dict[str, Any]:
    return aws.stepfunctions.start_execution(
        stateMachineArn=STATE_MACHINE_ARN, name=name, input=json.dumps({"n": name})
    )


def burst(aws: FakeAws, count: int, prefix: str) -> tuple[int, list[ClientError]]:
    """`count` starts of new names at one instant: how many started, and the errors of the rest."""
    started, errors = 0, []
    for index in range(count):
        try:
            start(aws, f"{prefix}-{index}")
            started += 1
        except ClientError as exc:
            errors.append(exc)
    return started, errors


def test_start_quota_the_default_quota_is_the_documented_one_of_the_region() -> None:
    assert start_execution_quota("us-east-1") == Quota(1_300, 300.0)
    assert start_execution_quota("us-west-2") == Quota(1_300, 300.0)
    assert start_execution_quota("eu-west-1") == Quota(1_300, 300.0)
    assert start_execution_quota("eu-central-1") == Quota(800, 150.0)
    assert fake_aws(FakeClock(START)).stepfunctions.start_quota == start_execution_quota("us-east-1")


def test_start_quota_a_burst_starts_the_bucket_then_throttles_with_no_effect() -> None:
    clock = FakeClock(START)
    aws = fake_aws(clock)
    started, errors = burst(aws, 1_500, "burst")
    assert started == 1_300
    assert len(errors) == 200
    assert len(aws.stepfunctions.executions) == 1_300  # a throttled start left nothing behind
    assert aws.stepfunctions.throttled["StartExecution"] == 200
    assert aws.calls["stepfunctions.StartExecution"] == 1_500  # every request counts, throttled or not
    response = errors[0].response
    assert response["Error"]["Code"] == "ThrottlingException"
    assert response["Error"]["Message"] == "Rate exceeded"
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert errors[0].operation_name == "StartExecution"


def test_start_quota_the_bucket_refills_at_its_rate_up_to_its_size() -> None:
    clock = FakeClock(START)
    aws = fake_aws(clock, Quota(bucket=10, refill_per_s=4.0))
    assert burst(aws, 12, "a")[0] == 10
    clock.advance(0.5)  # two tokens
    assert burst(aws, 5, "b")[0] == 2
    clock.advance(0.2)  # 0.8 of a token: not one yet
    assert burst(aws, 1, "c")[0] == 0
    clock.advance(0.05)  # now one
    assert burst(aws, 1, "d")[0] == 1
    clock.advance(3_600)  # an hour: full again, never more than the bucket
    assert burst(aws, 20, "e")[0] == 10


def test_start_quota_an_idempotent_start_takes_a_token_and_a_throttled_one_changes_nothing() -> None:
    clock = FakeClock(START)
    aws = fake_aws(clock, Quota(bucket=1, refill_per_s=1.0))
    first = start(aws, "same")
    with pytest.raises(ClientError) as throttled:
        start(aws, "same")  # the same name and input: it would answer the running execution, but no token
    assert throttled.value.response["Error"]["Code"] == "ThrottlingException"
    clock.advance(1.0)
    assert start(aws, "same")["executionArn"] == first["executionArn"]
    assert len(aws.stepfunctions.executions) == 1


def test_start_quota_no_quota_never_throttles() -> None:
    aws = fake_aws(FakeClock(START))
    aws.stepfunctions.start_quota = None
    assert burst(aws, 3_000, "free") == (3_000, [])


def test_botocore_standard_mode_retries_the_answer_as_a_throttle() -> None:
    aws = fake_aws(FakeClock(START), Quota(bucket=0, refill_per_s=1.0))
    with pytest.raises(ClientError) as throttled:
        start(aws, "x")
    context = RetryContext(attempt_number=1, parsed_response=throttled.value.response)
    assert ThrottledRetryableChecker().is_retryable(context)


def test_start_quota_the_sim_client_retries_a_throttled_start_after_a_backoff_on_the_virtual_clock() -> None:
    """The functions' clients in the simulation retry a throttle as botocore does: the bucket refills
    during the backoff, and the second or third attempt starts the execution."""
    scheduler = Scheduler(START)
    aws = fake_aws(VirtualClock(scheduler), Quota(bucket=1, refill_per_s=2.0))
    faults = FaultPlan(rate=0.0, kinds=(), world={}, quiet_at=START, rng=random.Random(7))
    client = SimClient(
        "stepfunctions",
        aws.stepfunctions,
        actor="receiver",
        scheduler=scheduler,
        faults=faults,
        trace=Trace(scheduler.now, START, keep_calls=False),
        max_attempts=3,
    )
    answers: list[str] = []

    def starts() -> None:
        for name in ("one", "two"):
            params = {"stateMachineArn": STATE_MACHINE_ARN, "name": name, "input": "{}"}
            answers.append(client.call("start_execution", params)["executionArn"].rpartition(":")[2])

    scheduler.spawn(starts)
    scheduler.run(until=START + 60)
    assert answers == ["one", "two"]
    assert aws.stepfunctions.throttled["StartExecution"] >= 1  # "two" met an empty bucket first
    assert aws.calls["stepfunctions.StartExecution"] == 2 + aws.stepfunctions.throttled["StartExecution"]
