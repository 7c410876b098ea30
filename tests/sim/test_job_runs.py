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
