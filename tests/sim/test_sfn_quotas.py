"""DescribeExecution's, StopExecution's and ListExecutions' token buckets in the simulated Step Functions,
and the engine meeting an empty DescribeExecution bucket.

AWS throttles each Step Functions API action with its own token bucket per account and region. For
Standard workflows in US East (N. Virginia), US West (Oregon) and Europe (Ireland): DescribeExecution
300 tokens refilled at 15 a second, StopExecution 1,000 at 200 (elsewhere 250 at 10 and 500 at 25);
"Other quotas" of https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html (formerly
limits-overview.html); ListExecutions 200 at 5 (elsewhere 100 at 2), "Quotas related to API action
throttling" of the same page. A throttled request answers `ThrottlingException` (HTTP 400) and has no effect;
botocore's standard retry mode retries it with backoff. Reconciliation, the extender's DescribeExecution
caller, stops its pass at a throttle and resumes on the next run (`longjobs.engine.extender.reconcile`).
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from botocore.exceptions import ClientError

from longjobs.engine.lease import table_definition
from longjobs.offline.scenario import parse_scenario
from longjobs.sim.aws import FakeAws
from longjobs.sim.aws import stepfunctions as sfn
from longjobs.sim.aws.stepfunctions import Quota, default_quotas
from longjobs.sim.clock import FakeClock
from longjobs.sim.scenario import run_scenario
from tests.short_settings import SHORT_THRESHOLD

START = 1_700_000_000.0
STATE_MACHINE_ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:long-jobs"


def fake_aws(clock: Any) -> FakeAws:
    return FakeAws(clock, random.Random(0), table=table_definition("leases"), state_machine_arn=STATE_MACHINE_ARN)


def started(aws: FakeAws, count: int) -> list[str]:
    aws.stepfunctions.set_quota("StartExecution", None)
    return [
        aws.stepfunctions.start_execution(stateMachineArn=STATE_MACHINE_ARN, name=f"e-{i}", input="{}")["executionArn"]
        for i in range(count)
    ]


def answered(call: Any, arns: list[str]) -> tuple[int, list[ClientError]]:
    ok, errors = 0, []
    for arn in arns:
        try:
            call(executionArn=arn)
            ok += 1
        except ClientError as exc:
            errors.append(exc)
    return ok, errors


def test_sfn_quotas_the_default_quotas_are_the_documented_ones_of_the_region() -> None:
    assert default_quotas("us-east-1") == {
        "StartExecution": Quota(1_300, 300.0),
        "DescribeExecution": Quota(300, 15.0),
        "StopExecution": Quota(1_000, 200.0),
        "ListExecutions": Quota(200, 5.0),
    }
    assert default_quotas("us-west-2") == default_quotas("eu-west-1") == default_quotas("us-east-1")
    assert default_quotas("eu-central-1") == {
        "StartExecution": Quota(800, 150.0),
        "DescribeExecution": Quota(250, 10.0),
        "StopExecution": Quota(500, 25.0),
        "ListExecutions": Quota(100, 2.0),
    }
    fake = fake_aws(FakeClock(START)).stepfunctions
    assert {operation: fake.quota(operation) for operation in sfn.THROTTLED_OPERATIONS} == default_quotas()
    assert fake.quota("SendTaskHeartbeat") is None
    with pytest.raises(ValueError, match="SendTaskHeartbeat"):
        fake.set_quota("SendTaskHeartbeat", Quota(1, 1.0))


def test_sfn_quotas_a_describe_burst_answers_the_bucket_then_throttles_and_refills_at_its_rate() -> None:
    clock = FakeClock(START)
    aws = fake_aws(clock)
    arns = started(aws, 320)
    ok, errors = answered(aws.stepfunctions.describe_execution, arns)
    assert (ok, len(errors)) == (300, 20)
    assert aws.stepfunctions.throttled["DescribeExecution"] == 20
    response = errors[0].response
    assert (response["Error"]["Code"], response["Error"]["Message"]) == ("ThrottlingException", "Rate exceeded")
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert errors[0].operation_name == "DescribeExecution"
    clock.advance(1.0)  # 15 tokens
    assert answered(aws.stepfunctions.describe_execution, arns[:20])[0] == 15
    # each operation has its own bucket: an empty DescribeExecution bucket throttles nothing else
    assert answered(aws.stepfunctions.stop_execution, arns[:3])[0] == 3


def test_sfn_quotas_a_list_burst_answers_its_bucket_then_throttles_and_refills_at_its_rate() -> None:
    """ListExecutions: 200 tokens refilled at 5 a second in US East (N. Virginia) ("Quotas related to API
    action throttling", service-quotas.html): reconciliation asks for one page of 1,000 a sweep."""
    clock = FakeClock(START)
    aws = fake_aws(clock)
    started(aws, 3)

    def listed(count: int) -> int:
        ok = 0
        for _ in range(count):
            try:
                aws.stepfunctions.list_executions(stateMachineArn=STATE_MACHINE_ARN, statusFilter="RUNNING")
                ok += 1
            except ClientError as exc:
                assert (exc.response["Error"]["Code"], exc.operation_name) == ("ThrottlingException", "ListExecutions")
        return ok

    assert listed(205) == 200
    assert aws.stepfunctions.throttled["ListExecutions"] == 5
    clock.advance(1.0)  # 5 tokens
    assert listed(8) == 5
    assert answered(aws.stepfunctions.describe_execution, started(aws, 1))[0] == 1, "a bucket of its own"


def test_sfn_quotas_a_throttled_stop_has_no_effect() -> None:
    clock = FakeClock(START)
    aws = fake_aws(clock)
    arns = started(aws, 1_005)
    ok, errors = answered(aws.stepfunctions.stop_execution, arns)
    assert (ok, len(errors)) == (1_000, 5)
    assert errors[0].response["Error"]["Code"] == "ThrottlingException"
    statuses = [aws.stepfunctions.executions[arn].status for arn in arns]
    assert statuses.count("ABORTED") == 1_000
    assert statuses[1_000:] == ["RUNNING"] * 5, "the throttled stops stopped nothing"
    clock.advance(0.025)  # 5 tokens at 200 a second
    assert answered(aws.stepfunctions.stop_execution, arns[1_000:])[0] == 5


def test_reconciliation_survives_an_empty_describe_bucket_and_settles_every_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Eight aborted executions whose status events are lost: only reconciliation can settle their leases,
    and DescribeExecution's bucket holds 2 tokens refilled at one every 5 s. Its calls are throttled, the
    client's retries too; the pass stops and the next runs resume; every lease is settled and every job
    runs again to its end: nothing lost, nothing run twice."""
    small = {**default_quotas(), "DescribeExecution": Quota(2, 0.2)}
    monkeypatch.setattr(sfn, "default_quotas", lambda region="us-east-1": dict(small))
    jobs = [f"job-{index}" for index in range(8)]
    run = run_scenario(
        parse_scenario(
            {
                "settings": SHORT_THRESHOLD,
                "jobs": [{"id": job, "type": "wait", "seconds": 6} for job in jobs],
                "faults": [
                    *({"type": "abort_execution", "job": job, "at_s": 1.5} for job in jobs),
                    {"type": "drop_status_events", "probability": 1.0},
                ],
            }
        )
    )
    result = run.result
    assert result.violation is None
    describes = [
        json.loads(line) for line in (result.trace.records if result.trace else []) if "describe_execution" in line
    ]
    assert any(record.get("error") == "ThrottlingException" for record in describes), "the bucket ran dry"
    assert result.coverage["refused:extender:stepfunctions.describe_execution:ThrottlingException"] > 0
    assert result.coverage["extender:released"] == len(jobs), "reconciliation settled every lease"
    assert result.coverage["watcher:released"] == 0
    for job in jobs:
        report = run.jobs[job]
        assert report.executions == ["ABORTED", "SUCCEEDED"], job
        assert (report.final, report.released, report.redelivered_while_running) == ("deleted", 1, 0), job
