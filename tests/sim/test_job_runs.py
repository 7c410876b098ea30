"""A retry whose job id's last run is ending waits in place (`LockState.RUN_ENDING`), on virtual time.

The offline worker's run ends at the latest one heartbeat timeout after its execution freed the lock
(`longjobs.engine.runs`). The wait in place doubles with the message's receives, and a retry has several
(each attempt, each wait). Past that run's end nothing is left to wait for, so the wait stops there: a
failing job reaches its next attempt, and the DLQ, as soon as the runs allow. A run whose worker reported
its failure has ended already (`longjobs.engine.delivery.attempt.worker_reported_end`): its retry waits
for nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from longjobs.engine.delivery.types import Outcome
from longjobs.engine.lease import LastError, LeaseStatus, job_lock_key
from longjobs.engine.lease.schema import PARTITION_KEY
from longjobs.engine.lease.writes import values_of
from longjobs.engine.runs import JobRuns, RunPlace
from longjobs.engine.settle import release
from tests.sim.test_retention import STATE_MACHINE_ARN, TABLE, Bench, bench

HEARTBEAT_S = 60


def test_job_runs_a_retry_waits_no_longer_than_the_worker_runs_end() -> None:
    b = bench(limit=9, job_wait_base_s=600, job_wait_cap_s=900)  # a doubling wait of 5 to 15 minutes
    b.receiver.runs = JobRuns({"wait": RunPlace("worker", heartbeat_s=HEARTBEAT_S)}, None)
    gone = f"{STATE_MACHINE_ARN.replace(':stateMachine:', ':execution:')}:m-gone-1"
    key, released_at = job_lock_key("retried"), b.clock.now()
    assert b.receiver.store.locks.take(key, holder="m-gone", execution_arn=gone, now=released_at - 120, hold_until=9e9)
    assert b.receiver.store.locks.release(key, gone, now=released_at)
    b.clock.advance(10)
    message_id = b.send("retried")

    assert b.deliver_jobs_queue() == {message_id: Outcome.HELD}, "its last run may still be running"
    [message] = b.aws.sqs.queues[b.jobs_url].messages.values()
    assert message.visible_at == released_at + HEARTBEAT_S, "hidden until that run has surely ended, no longer"

    b.advance_to(released_at + HEARTBEAT_S)
    assert b.deliver_jobs_queue() == {message_id: Outcome.STARTED}


def test_job_runs_a_retry_behind_a_stale_holding_waits_no_longer_than_the_worker_runs_end() -> None:
    """An execution that is stopped (or times out) frees nothing: its lock stays held, stale, until the
    next attempt takes it over. DescribeExecution dates its end (`stopDate`, "If the execution ended, the
    date the execution stopped", https://docs.aws.amazon.com/step-functions/latest/apireference/API_DescribeExecution.html).
    Its worker's run ends at the latest one heartbeat timeout after that, so the wait in place ends there
    too."""
    b = bench(limit=9, job_wait_base_s=600, job_wait_cap_s=900)
    b.receiver.runs = JobRuns({"wait": RunPlace("worker", heartbeat_s=HEARTBEAT_S)}, None)
    sfn = b.aws.stepfunctions
    gone = sfn.start_execution(stateMachineArn=STATE_MACHINE_ARN, name="m-gone-1", input="{}")["executionArn"]
    key = job_lock_key("retried")
    assert b.receiver.store.locks.take(key, holder="m-gone", execution_arn=gone, now=b.clock.now(), hold_until=9e9)
    b.clock.advance(120)
    stopped_at = b.clock.now()
    sfn.stop_execution(executionArn=gone)
    b.clock.advance(10)
    message_id = b.send("retried")

    assert b.deliver_jobs_queue() == {message_id: Outcome.HELD}, "its last run may still be running"
    lock = b.receiver.store.locks.get(key)
    assert lock is not None and lock.held, "the stopped execution's lock is still held"
    [message] = b.aws.sqs.queues[b.jobs_url].messages.values()
    assert message.visible_at == stopped_at + HEARTBEAT_S, "hidden until that run has surely ended, no longer"

    b.advance_to(stopped_at + HEARTBEAT_S)
    assert b.deliver_jobs_queue() == {message_id: Outcome.STARTED}


def fail_as_the_workflow_does(b: Bench, message_id: str, error: LastError) -> float:
    """The workflow's failure path after its job step failed with `error`: the execution ends FAILED, its
    lease is closed RELEASED with that error and the state's entered time (`workflow_closed_at`), its job
    lock is freed and its message given back at once. Returns when the lock was freed."""
    lease = b.receiver.store.get(message_id)
    assert lease is not None and lease.active and lease.execution_arn and lease.job_id, lease
    b.aws.stepfunctions.end(b.aws.stepfunctions.executions[lease.execution_arn], "FAILED")
    b.aws.dynamodb.update_item(
        TableName=TABLE,
        Key={PARTITION_KEY: {"S": message_id}},
        UpdateExpression=(
            "SET #status = :released, last_error = :error, workflow_closed_at = :now, version = version + :one "
            "REMOVE shard, renew_at"
        ),
        ConditionExpression="#status = :active",
        ExpressionAttributeNames={"#status": "status"},
        ExpressionAttributeValues=values_of(
            released=LeaseStatus.RELEASED.value,
            active=LeaseStatus.ACTIVE.value,
            error=error.to_data(),
            now=datetime.fromtimestamp(b.clock.now(), UTC).isoformat().replace("+00:00", "Z"),
            one=1,
        ),
    )
    released_at = b.clock.now()
    assert b.receiver.store.locks.release(job_lock_key(lease.job_id), lease.execution_arn, now=released_at)
    b.aws.sqs.change_message_visibility(QueueUrl=b.jobs_url, ReceiptHandle=lease.receipt_handle, VisibilityTimeout=0)
    return released_at


def test_job_runs_a_retry_after_its_workers_own_failure_starts_at_once() -> None:
    """The worker sends the job's failure (its exception's class and message) only once the run's Spark
    jobs have ended. The retry then starts with no wait for that run, whatever the heartbeat timeout."""
    b = bench(limit=9, job_wait_base_s=600, job_wait_cap_s=900)
    b.receiver.runs = JobRuns({"wait": RunPlace("worker", heartbeat_s=HEARTBEAT_S)}, None)
    message_id = b.send("fails")
    assert b.deliver_jobs_queue() == {message_id: Outcome.STARTED}
    b.clock.advance(3)  # within its first chunk: the message is still hidden
    fail_as_the_workflow_does(b, message_id, LastError("AnalysisException", "[PATH_NOT_FOUND] Path does not exist"))
    b.clock.advance(1)

    assert b.deliver_jobs_queue() == {message_id: Outcome.STARTED}, "held for a run that reported its end"
    assert b.executions_of("fails") == [f"{message_id}-1", f"{message_id}-2"]


@pytest.mark.parametrize(
    "error",
    [
        LastError("JobTimedOut", "the job stopped sending heartbeats or ran past its timeout"),
        LastError("States.TaskFailed", "the token's message was not sent"),
        LastError("Job Timed Out"),
    ],
    ids=["heartbeat-timeout", "service-error", "not-a-class-name"],
)
def test_job_runs_a_retry_after_a_task_the_worker_did_not_end_waits_for_its_run(error: LastError) -> None:
    """A task that timed out, or failed on Step Functions' or a service's error, ended without its worker,
    whose run may go on: the retry waits the heartbeat timeout from the lock's release."""
    b = bench(limit=9, job_wait_base_s=600, job_wait_cap_s=900)
    b.receiver.runs = JobRuns({"wait": RunPlace("worker", heartbeat_s=HEARTBEAT_S)}, None)
    message_id = b.send("times-out")
    assert b.deliver_jobs_queue() == {message_id: Outcome.STARTED}
    b.clock.advance(3)  # within its first chunk: the message is still hidden
    released_at = fail_as_the_workflow_does(b, message_id, error)
    b.clock.advance(1)

    assert b.deliver_jobs_queue() == {message_id: Outcome.HELD}, "its run may still be running"
    [message] = b.aws.sqs.queues[b.jobs_url].messages.values()
    assert message.visible_at == released_at + HEARTBEAT_S
    b.advance_to(released_at + HEARTBEAT_S)
    assert b.deliver_jobs_queue() == {message_id: Outcome.STARTED}


def test_job_runs_a_retry_after_a_release_by_the_processor_waits_for_its_run() -> None:
    """An execution that was stopped or timed out never reached its failure path: the processor (the
    watcher, reconciliation) released its lease and lock. Its worker's run may go on until its next
    heartbeat is refused, so the retry waits, whatever error the lease records."""
    b = bench(limit=9, job_wait_base_s=600, job_wait_cap_s=900)
    b.receiver.runs = JobRuns({"wait": RunPlace("worker", heartbeat_s=HEARTBEAT_S)}, None)
    message_id = b.send("stopped")
    assert b.deliver_jobs_queue() == {message_id: Outcome.STARTED}
    b.clock.advance(3)  # within its first chunk: the message is still hidden
    lease = b.receiver.store.get(message_id)
    assert lease is not None and lease.execution_arn
    b.aws.stepfunctions.end(b.aws.stepfunctions.executions[lease.execution_arn], "ABORTED")
    released_at = b.clock.now()
    reason = LastError("AnalysisException")  # a class's name, as the worker sends: the close is the processor's
    assert release(lease, store=b.receiver.store, visibility=b.receiver.visibility, clock=b.clock, reason=reason)
    b.clock.advance(1)

    assert b.deliver_jobs_queue() == {message_id: Outcome.HELD}, "its run may still be running"
    [message] = b.aws.sqs.queues[b.jobs_url].messages.values()
    assert message.visible_at == released_at + HEARTBEAT_S
