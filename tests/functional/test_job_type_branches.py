"""Declared job types through the receiver and the rendered workflow on moto: a user's type on its own
branch, with the same fenced success and failure paths.

(A `state_machine` type is synth-tested only, in tests/infra: moto 5.2.5's engine passes a
`states:startExecution` task's parameters to boto without turning `StateMachineArn`/`Input` into the
API's own member names, so no nested execution starts.)"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest

from longjobs.construct.workflow import render_definition, token_queue_pyspark_step
from longjobs.engine.delivery.types import Outcome
from longjobs.engine.jobs import JobCatalog, load_catalog
from longjobs.engine.lease import LeaseStatus
from tests.functional.conftest import ACCOUNT, REGION, TABLE, TOKEN_QUEUE, Flow

ROLE = f"arn:aws:iam::{ACCOUNT}:role/workflow"


def deploy_with(flow: Flow, catalog: JobCatalog, name: str) -> str:
    """The workflow rendered with `catalog`'s branches, created on moto; the receiver sends jobs to it."""
    definition = render_definition(
        table_name=TABLE,
        queue_arns=[f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs"],
        pyspark_step=token_queue_pyspark_step(
            queue_arn=f"arn:aws:sqs:{REGION}:{ACCOUNT}:{TOKEN_QUEUE}",
            queue_url=f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{TOKEN_QUEUE}",
            heartbeat=cdk.Duration.seconds(3),
            timeout=cdk.Duration.minutes(5),
        ),
        region=REGION,
        account=ACCOUNT,
        job_types=list(catalog),
    )
    arn = str(
        flow.harness.stepfunctions.create_state_machine(name=name, definition=definition, roleArn=ROLE)[
            "stateMachineArn"
        ]
    )
    flow.receiver.catalog = catalog
    flow.receiver.settings = flow.receiver.settings.model_copy(update={"state_machine_arn": arn})
    return arn


def run_job(flow: Flow, job_id: str, job_type: str, **params: Any) -> tuple[str, dict[str, Any]]:
    message_id = flow.send_job(job_id, job_type, **params)
    assert flow.deliver() == {message_id: Outcome.STARTED}
    lease = flow.lease(message_id)
    assert lease.execution_arn is not None
    return message_id, flow.wait_for_execution(lease.execution_arn)


@pytest.mark.parametrize("fail", [False, True])
def test_job_type_a_users_wait_type_runs_on_its_own_branch_with_the_fenced_paths(flow: Flow, fail: bool) -> None:
    nap = {
        "name": "nap",
        "runner": "wait",
        "params_schema": {
            "type": "object",
            "required": ["seconds"],
            "properties": {"seconds": {"type": "integer", "maximum": 5}, "fail": {"type": "boolean"}},
        },
    }
    deploy_with(flow, load_catalog(job_types=[nap]), "long-jobs-nap")

    message_id, described = run_job(flow, f"nap-{fail}", "nap", seconds=1, fail=fail)

    history = flow.harness.stepfunctions.get_execution_history(executionArn=described["executionArn"])["events"]
    entered = {e["stateEnteredEventDetails"]["name"] for e in history if "stateEnteredEventDetails" in e}
    if fail:
        assert described["status"] == "FAILED" and described["error"] == "WaitJobFailed"
        assert {"NapWaitThenFail", "MarkReleased", "ReleaseJobLockOnFailure"} <= entered
        assert flow.lease(message_id).status is LeaseStatus.RELEASED
    else:
        assert described["status"] == "SUCCEEDED"
        assert {"NapWait", "SucceededAndFreed"} <= entered, "closed and its lock freed in one transaction"
        assert flow.lease(message_id).result == {"waited_s": 1}
