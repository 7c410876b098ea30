"""The REJECTED record a message leaves when it goes to the DLQ names its job's type and id, also when the
message had no lease to take them from (it waited in place for its job id, `HOLD_FOR_JOB`, which writes
none): `longjobs lease` shows them, and `leases` finds it by the job id it waited for."""

from __future__ import annotations

from longjobs.engine.delivery.types import Outcome
from longjobs.engine.lease import LeaseStatus
from tests.sim.test_requeue import JOB, _send_with_attributes
from tests.sim.test_retention import bench


def test_dead_letter_records_a_job_id_busy_message_keeps_its_job_id() -> None:
    b = bench(limit=9, job_wait_base_s=10, job_wait_cap_s=20, admission_horizon_s=600)
    jobs, dlq = b.aws.sqs.queues[b.jobs_url], b.aws.sqs.queues[b.dlq_url]
    jobs.redrive = (dlq, b.settings.redrive_receives)
    first = b.send(JOB)
    assert b.deliver_jobs_queue() == {first: Outcome.STARTED}
    lease = b.receiver.store.get(first)
    assert lease is not None
    b.aws.sqs.delete_message(QueueUrl=b.jobs_url, ReceiptHandle=lease.receipt_handle)
    second = _send_with_attributes(b, 10)  # no room for a copy's attribute: it waits in place, no lease
    outcomes: list[Outcome] = []
    while not outcomes or outcomes[-1] is Outcome.HELD:
        b.clock.advance(20)
        outcomes += b.deliver_jobs_queue().values()
    assert outcomes[-1] is Outcome.REJECTED, outcomes[-3:]

    record = b.receiver.store.get(second)
    assert record is not None and record.status is LeaseStatus.REJECTED, record
    assert record.last_error is not None and record.last_error.error == "JobIdBusy", record
    assert (record.job_type, record.job_id) == ("wait", JOB), (
        f"the JobIdBusy record names no job: {(record.job_type, record.job_id)}"
    )
