"""Two messages of one job id never run at once (the job lock), on moto with the rendered workflow.

A partition's completion marker written again while its job runs (a producer rewrites a partition) is
the case this is for: the second message waits while the first job runs, then runs itself, so the last
run reads every file of the partition. (S3 delivering one event twice is no second message: the fan-out's
marker recognises it, tests/functional/test_fan_out.py.)
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

from longjobs.engine.delivery.types import ADMISSION_ATTRIBUTE, Carried, Outcome
from longjobs.engine.execution import execution_arn, execution_name
from longjobs.engine.jobs import load_catalog
from longjobs.engine.lease import LeaseStatus, job_lock_key
from longjobs.engine.receiver.service import receive
from tests.functional.conftest import STATE_MACHINE_ARN, Flow
from tests.unit.test_receiver_models import s3_record

PARTITION = "events/date=2026-11-20/"
JOB_ID = f"wait:raw-bucket/{PARTITION}"


def with_partition_trigger(flow: Flow, seconds: int) -> None:
    """Markers start a `wait` job of `seconds` (moto runs no Spark); a waiting copy tries again after 1 s."""
    flow.receiver.catalog = load_catalog(
        s3_triggers=[{"marker": "_SUCCESS", "job_type": "wait", "params": {"seconds": seconds}}]
    )
    flow.receiver.settings = flow.receiver.settings.model_copy(update={"job_wait_base_s": 1, "job_wait_cap_s": 1})


def marker_notification(flow: Flow, sequencer: str) -> str:
    """The notification of a partition's marker written (`sequencer`: each write of the marker has its own)."""
    records = [s3_record(PARTITION + "part-0.json"), s3_record(PARTITION + "_SUCCESS", sequencer=sequencer)]
    return flow.harness.send(json.dumps({"Records": records}))


def execution_of(flow: Flow, message_id: str) -> dict[str, Any]:
    lease = flow.lease(message_id)
    assert lease.execution_arn is not None
    return flow.wait_for_execution(lease.execution_arn)


def test_job_lock_a_partitions_second_marker_waits_for_the_first_job_then_runs(flow: Flow) -> None:
    with_partition_trigger(flow, seconds=3)
    first = marker_notification(flow, "0055AED6DCD90281E5")
    second = marker_notification(flow, "0055AED6DCD90281F0")  # the partition written again while its first job runs

    assert flow.deliver() == {first: Outcome.FANNED_OUT, second: Outcome.FANNED_OUT}, "a job message per marker"
    outcomes = flow.deliver()
    assert sorted(outcomes.values()) == sorted([Outcome.STARTED, Outcome.WAITING])
    first = next(message for message, outcome in outcomes.items() if outcome is Outcome.STARTED)
    second = next(message for message, outcome in outcomes.items() if outcome is Outcome.WAITING)
    assert flow.lease(first).job_id == JOB_ID
    marker = flow.receiver.store.get(second)
    assert marker is not None and marker.status is LeaseStatus.REQUEUED, "a waiting message is no attempt"
    assert marker.execution_arn is None and marker.copy_id is not None, "no execution; its marker names its copy"
    lock = flow.receiver.store.locks.get(job_lock_key(JOB_ID))
    assert lock is not None and lock.held and lock.holder == first

    ran_first = execution_of(flow, first)
    assert ran_first["status"] == "SUCCEEDED"
    freed = flow.receiver.store.locks.get(job_lock_key(JOB_ID))
    assert freed is not None and not freed.held, "the workflow's success path released the lock"

    copy: dict[str, Outcome] = {}
    deadline = time.monotonic() + 10
    while not copy and time.monotonic() < deadline:  # the copy's delay (1 s) runs out
        copy = flow.deliver(wait_s=1)
    [(copy_id, outcome)] = copy.items()
    assert outcome is Outcome.STARTED and copy_id not in (first, second)
    ran_second = execution_of(flow, copy_id)
    assert ran_second["status"] == "SUCCEEDED"
    assert ran_second["startDate"] >= ran_first["stopDate"], "the second run started after the first ended"
    assert flow.harness.visible_messages() == [] and flow.dlq_messages() == []
    names = [e["name"] for e in flow.executions()]
    assert sorted(names) == sorted([execution_name(first, 1), execution_name(copy_id, 1)]), "two runs, never at once"


def test_job_lock_a_waiting_copy_keeps_its_attributes_and_counts_its_waits(flow: Flow) -> None:
    flow.receiver.settings = flow.receiver.settings.model_copy(update={"job_wait_base_s": 1, "job_wait_cap_s": 1})
    flow.send_job(JOB_ID, seconds=5)
    assert list(flow.deliver().values()) == [Outcome.STARTED]
    body = json.dumps({"job_id": JOB_ID, "type": "wait", "params": {"seconds": 5}})  # a second message of the job
    flow.sqs.send_message(
        QueueUrl=flow.harness.queue_url,
        MessageBody=body,
        MessageAttributes={"Producer": {"DataType": "String", "StringValue": "nightly"}},
    )
    [delivery] = flow.receive_batch()
    producer = {"Producer": {"DataType": "String", "StringValue": "nightly"}}
    assert receive(flow.receiver, replace(delivery, message_attributes=producer)) is Outcome.WAITING
    flow.sqs.delete_message(QueueUrl=flow.harness.queue_url, ReceiptHandle=delivery.receipt_handle)
    # The copy's 1 s delay runs on SQS's clock: a long poll waits for it.
    copy = flow.sqs.receive_message(QueueUrl=flow.harness.queue_url, MessageAttributeNames=["All"], WaitTimeSeconds=5)[
        "Messages"
    ][0]
    attributes = {name: value["StringValue"] for name, value in copy["MessageAttributes"].items()}
    carried = Carried.decode(attributes.pop(ADMISSION_ATTRIBUTE))
    assert attributes == {"Producer": "nightly"}, "the producer's attributes, and the one the copy carries"
    assert carried.requeued_from == delivery.message_id, "the copy names the marker it claims its run from"
    assert carried.job_waits == 1
    assert copy["Body"] == body


def test_job_lock_a_lock_whose_execution_ended_or_never_started_is_taken_over(flow: Flow) -> None:
    # A grace no loaded test machine outlasts between taking the young lock and delivering.
    flow.receiver.settings = flow.settings.model_copy(update={"reconcile_grace_s": 120})
    locks = flow.receiver.store.locks
    now = time.time()
    dead = execution_arn(STATE_MACHINE_ARN, "gone-1")
    assert locks.take(job_lock_key("stale"), holder="gone", execution_arn=dead, now=now - 600, hold_until=now)
    message_id = flow.send_job("stale", seconds=1)
    assert flow.deliver() == {message_id: Outcome.STARTED}, "its holder never started and is past the grace period"
    taken = locks.get(job_lock_key("stale"))
    assert taken is not None and taken.holder == message_id
    assert execution_of(flow, message_id)["status"] == "SUCCEEDED"

    young = execution_arn(STATE_MACHINE_ARN, "starting-1")
    now = time.time()
    assert locks.take(job_lock_key("young"), holder="starting", execution_arn=young, now=now, hold_until=now)
    waiting = flow.send_job("young", seconds=1)
    assert flow.deliver() == {waiting: Outcome.WAITING}, "a receiver may still be about to start its holder"


def test_job_lock_a_failed_job_frees_its_lock(flow: Flow) -> None:
    message_id = flow.send_job("fails-once", seconds=0, fail=True)
    assert flow.deliver() == {message_id: Outcome.STARTED}
    assert execution_of(flow, message_id)["status"] == "FAILED"
    assert flow.lease(message_id).status is LeaseStatus.RELEASED
    lock = flow.receiver.store.locks.get(job_lock_key("fails-once"))
    assert lock is not None and not lock.held, "the failure path released it"
