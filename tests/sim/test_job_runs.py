"""A retry whose job id's last run is ending waits in place (`LockState.RUN_ENDING`), on virtual time.

The offline worker's run ends at the latest one heartbeat timeout after its execution freed the lock
(`longjobs.engine.runs`). The wait in place doubles with the message's receives, and a retry has several
(each attempt, each wait). Past that run's end nothing is left to wait for, so the wait stops there: a
failing job reaches its next attempt, and the DLQ, as soon as the runs allow."""

from __future__ import annotations

from longjobs.engine.delivery.types import Outcome
from longjobs.engine.lease import job_lock_key
from longjobs.engine.runs import JobRuns, RunPlace
from tests.sim.test_retention import STATE_MACHINE_ARN, bench

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
