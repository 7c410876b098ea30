"""Lambda's retries of a failed watcher invocation, and its on-failure destination.

EventBridge invokes the watcher asynchronously. When the function returns an error (its code raised, or
its runtime failed it: a timeout, a crash), Lambda runs it again with the same event two more times, one
minute after the first attempt and two minutes after the second, then sends the event to the function's
on-failure destination ("How Lambda handles errors and retries with asynchronous invocation",
https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html). The stack keeps the
default two retries and the WatcherFailures queue as that destination (`longjobs.construct.functions`);
the extender's reconciliation settles the lease of an event that never got through.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from typing import Any, cast

import pytest
from botocore.exceptions import ClientError

from longjobs.engine.execution import execution_arn, execution_name
from longjobs.engine.lease import Lease, LeaseStatus, LeaseStore, table_definition
from longjobs.engine.visibility import VisibilityClient
from longjobs.engine.watcher.models import ExecutionStatusChange
from longjobs.engine.watcher.service import Watcher, WatchOutcome, on_status_change
from longjobs.offline.scenario import parse_scenario
from longjobs.sim.aws import FakeAws
from longjobs.sim.clock import FakeClock
from longjobs.sim.lambdas import WATCHER_RETRY_DELAYS_S
from longjobs.sim.scenario import ScenarioRun, run_scenario
from tests.short_settings import SHORT_THRESHOLD

STATE_MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:long-jobs"

ABORT_AT_S = 2.0
RARE_RENEWALS = {"visibility_timeout_s": 60, "threshold_s": 30}
"""Chunks of a minute renewed 30 s ahead: a renewal seldom lands between the watcher's read of the lease
and its release (which then finds the lease's version changed and leaves it to reconciliation)."""


def aborted_job_run(settings: dict[str, Any], faults: list[dict[str, Any]]) -> ScenarioRun:
    """One job of 6 s whose first execution is aborted at 2 s: its status event goes to the watcher."""
    return run_scenario(
        parse_scenario(
            {
                "settings": {**SHORT_THRESHOLD, **settings},
                "jobs": [{"id": "aborted", "type": "wait", "seconds": 6}],
                "faults": [{"type": "abort_execution", "job": "aborted", "at_s": ABORT_AT_S}, *faults],
            }
        )
    )


def events(run: ScenarioRun, name: str) -> list[dict[str, Any]]:
    records = (json.loads(line) for line in (run.result.trace.records if run.result.trace else []))
    return [record for record in records if record.get("event") == name]


def watcher_calls(run: ScenarioRun, operation: str) -> list[dict[str, Any]]:
    records = (json.loads(line) for line in (run.result.trace.records if run.result.trace else []))
    return [r for r in records if r.get("actor") == "watcher" and r.get("call") == f"dynamodb.{operation}"]


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        # the three attempts of the client's GetItem answer 500: the handler raises
        ({"mode": "server_error", "count": 3}, "ClientError"),
        # the invocation dies at its GetItem: the runtime's error, not the code's
        ({"mode": "crash_before", "count": 1}, "Crash"),
    ],
    ids=["raised", "crashed"],
)
def test_watcher_a_watcher_invocation_that_fails_once_is_retried_a_minute_later_and_releases(
    fault: dict[str, Any], error: str
) -> None:
    # Reconciliation waits 5 minutes: only the watcher's second attempt can release before then.
    run = aborted_job_run(
        {**RARE_RENEWALS, "reconcile_grace_s": 300},
        [{"type": "aws_fault", "function": "watcher", "operation": "GetItem", **fault}],
    )

    assert run.result.violation is None
    retries = events(run, "watcher_retry")
    assert [(r["attempt"], r["delay_s"], r["error"]) for r in retries] == [(2, WATCHER_RETRY_DELAYS_S[0], error)]
    assert events(run, "watcher_failed") == []
    second = [call for call in watcher_calls(run, "get_item") if "error" not in call and "fault" not in call]
    assert len(second) == 1 and second[0]["t"] == pytest.approx(retries[0]["t"] + 60.0, abs=0.1)
    assert run.result.coverage["watcher:retried"] == 1
    assert run.result.coverage["watcher:released"] == 1, "the retry's effect landed"
    assert run.result.coverage["extender:released"] == 0
    job = run.jobs["aborted"]
    assert job.executions == ["ABORTED", "SUCCEEDED"]
    assert (job.released, job.final, job.redelivered_while_running) == (1, "deleted", 0)


def test_watcher_a_watcher_event_that_fails_every_attempt_reaches_the_destination_and_reconciliation_settles() -> None:
    # Every GetItem of the watcher fails; reconciliation waits 4 minutes, past the three attempts.
    run = aborted_job_run(
        {**RARE_RENEWALS, "reconcile_grace_s": 240},
        [{"type": "aws_fault", "function": "watcher", "operation": "GetItem", "mode": "server_error"}],
    )

    assert run.result.violation is None
    retries = events(run, "watcher_retry")
    assert [(r["attempt"], r["delay_s"]) for r in retries] == [(2, 60.0), (3, 120.0)]
    failed = events(run, "watcher_failed")
    assert [(r["attempts"], r["error"]) for r in failed] == [(3, "ClientError")]
    reads = watcher_calls(run, "get_item")
    assert len(reads) == 9, "three invocations, three attempts of the client each"
    # each invocation's first read comes one, then two minutes after the previous invocation failed
    assert reads[3]["t"] == pytest.approx(retries[0]["t"] + 60.0, abs=0.1)
    assert reads[6]["t"] == pytest.approx(retries[1]["t"] + 120.0, abs=0.1)
    assert reads[2]["t"] <= retries[0]["t"] < reads[3]["t"] and reads[5]["t"] <= retries[1]["t"] < reads[6]["t"]
    assert reads[8]["t"] <= failed[0]["t"]
    assert run.result.coverage["watcher:on_failure_destination"] == 1
    assert run.result.coverage["watcher:released"] == 0
    assert run.result.coverage["extender:released"] == 1, "reconciliation settled the lease"
    released = [e for e in events(run, "execution_started") if e["job_id"] == "aborted"]
    assert released[-1]["t"] > failed[0]["t"], "the job ran again only after the event was given up"
    job = run.jobs["aborted"]
    assert job.executions == ["ABORTED", "SUCCEEDED"]
    assert (job.released, job.final, job.redelivered_while_running) == (1, "deleted", 0)


def test_watcher_a_watcher_release_that_loses_its_race_to_a_renewal_reads_again_and_releases() -> None:
    """A renewal lands between the watcher's read of the lease and its release, so the release's version
    condition fails. Found by the simulation's model of Lambda's retries (a retried invocation met a
    renewal by chance; the watcher answered `unchanged` and left the lease to reconciliation): it now
    reads again while the lease is ACTIVE and names the execution. The race is forced here, on the
    simulated AWS: the extender's write lands right before the watcher's first UpdateItem."""
    clock = FakeClock(1_700_000_000.0)
    aws = FakeAws(clock, random.Random(1), table=table_definition("leases"), state_machine_arn=STATE_MACHINE)
    queue = aws.sqs.create_queue("jobs", visibility_timeout_s=180)
    aws.sqs.send_message(QueueUrl=queue.url, MessageBody="{}")
    message = aws.sqs.receive_message(QueueUrl=queue.url)["Messages"][0]
    name = execution_name(message["MessageId"], 1)
    arn = execution_arn(STATE_MACHINE, name)
    store = LeaseStore(aws.dynamodb, "leases", shards=1, closed_ttl_s=3_600)
    now = clock.now()
    lease = Lease(message["MessageId"], queue.url, message["ReceiptHandle"], 1, now, now + 180, now + 3_600)
    assert store.create(replace(lease, execution_arn=arn, attempt=1, renew_at=now + 120))

    class RenewalFirst:
        """The watcher's DynamoDB client: its first UpdateItem goes after a renewal of the lease."""

        def __init__(self) -> None:
            self.updates: list[str] = []

        def __getattr__(self, operation: str) -> Any:
            return getattr(aws.dynamodb, operation)

        def update_item(self, **params: Any) -> Any:
            if not self.updates:
                aws.dynamodb.update_item(
                    TableName="leases",
                    Key={"pk": {"S": message["MessageId"]}},
                    UpdateExpression="SET version = version + :one",
                    ExpressionAttributeValues={":one": {"N": "1"}},
                )
            try:
                answer = aws.dynamodb.update_item(**params)
            except ClientError as exc:
                self.updates.append(exc.response["Error"]["Code"])
                raise
            self.updates.append("ok")
            return answer

    client = RenewalFirst()
    watcher = Watcher(
        store=LeaseStore(cast(Any, client), "leases", shards=1, closed_ttl_s=3_600),
        visibility=VisibilityClient(cast(Any, aws.sqs), clock=clock),
        clock=clock,
        state_machine_arn=STATE_MACHINE,
    )
    change = ExecutionStatusChange(executionArn=arn, stateMachineArn=STATE_MACHINE, name=name, status="ABORTED")

    assert on_status_change(watcher, change) is WatchOutcome.RELEASED
    assert client.updates == ["ConditionalCheckFailedException", "ok"], "lost the race, read again, released"
    released = store.get(message["MessageId"])
    assert released is not None and released.status is LeaseStatus.RELEASED
