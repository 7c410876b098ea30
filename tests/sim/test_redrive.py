"""The operator's DLQ redrive inside the simulation (`longjobs.sim.operator`), and the simulated SQS's message
move task it runs on (`FakeSqs.start_message_move_task`), held to AWS's documented behaviour."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError

from longjobs.engine.lease import table_definition
from longjobs.sim.aws import FakeAws, FakeQueue
from longjobs.sim.campaign import run_seed
from longjobs.sim.clock import FakeClock
from longjobs.sim.workload import REDRIVE_METHODS, draw

ATTRIBUTE = {"Kind": {"DataType": "String", "StringValue": "kept"}}


def _aws() -> tuple[FakeAws, FakeClock]:
    clock = FakeClock(1_800_000_000.0)
    aws = FakeAws(clock, random.Random(0), table=table_definition("t"), state_machine_arn="arn:sm")
    return aws, clock


def _queues(aws: FakeAws) -> tuple[FakeQueue, FakeQueue]:
    dlq = aws.sqs.create_queue("jobs-dlq", visibility_timeout_s=30)
    queue = aws.sqs.create_queue("jobs", visibility_timeout_s=30)
    queue.redrive = (dlq, 1)
    return queue, dlq


def _moved_by_redrive_policy(aws: FakeAws, queue: FakeQueue, body: str) -> None:
    """A message SQS's redrive policy moves to the DLQ (`maxReceiveCount` 1: the receive after the first)."""
    aws.sqs.send_message(QueueUrl=queue.url, MessageBody=body, MessageAttributes=ATTRIBUTE)
    aws.sqs.receive_message(QueueUrl=queue.url, VisibilityTimeout=0)
    aws.sqs.receive_message(QueueUrl=queue.url)


def test_redrive_move_task_moves_oldest_first_as_new_messages_with_their_attributes() -> None:
    """AWS's SQS developer guide, "Configure a dead-letter queue redrive": messages are redriven oldest
    first, each a new message (a new `messageID` and enqueue time: its retention starts again); without a
    destination each goes back to the queue whose redrive policy moved it."""
    aws, clock = _aws()
    queue, dlq = _queues(aws)
    _moved_by_redrive_policy(aws, queue, "first")
    clock.advance(5)
    _moved_by_redrive_policy(aws, queue, "second")
    old_ids = set(dlq.messages)
    assert len(old_ids) == 2 and not queue.messages

    handle = aws.sqs.start_message_move_task(SourceArn=dlq.arn)["TaskHandle"]
    task = aws.sqs.move_tasks[-1]
    assert task.handle == handle and task.to_move == 2
    clock.advance(60)
    assert aws.sqs.move_one(task)
    assert [m.body for m in queue.messages.values()] == ["first"]
    assert aws.sqs.move_one(task) and not aws.sqs.move_one(task)
    assert task.status == "COMPLETED" and task.moved == 2
    moved = list(queue.messages.values())
    assert [m.body for m in moved] == ["first", "second"]
    assert not {m.message_id for m in moved} & old_ids, "a redriven message is a new message"
    assert all(m.receive_count == 0 and m.sent_at == clock.now() and m.attributes == ATTRIBUTE for m in moved)


def test_redrive_move_task_to_source_fails_on_a_message_the_receiver_sent() -> None:
    """AWS's "Troubleshooting DLQ redrive": a message sent to the DLQ directly (as the receiver sends a job
    whose attempts ran out) has no source SQS knows, and a redrive to source fails
    (`CouldNotDetermineMessageSource`); naming the destination moves it."""
    aws, _ = _aws()
    queue, dlq = _queues(aws)
    aws.sqs.send_message(QueueUrl=dlq.url, MessageBody="sent")
    aws.sqs.start_message_move_task(SourceArn=dlq.arn)
    task = aws.sqs.move_tasks[-1]
    assert not aws.sqs.move_one(task)
    assert (task.status, task.failure, task.moved) == ("FAILED", "CouldNotDetermineMessageSource", 0)
    listed = aws.sqs.list_message_move_tasks(SourceArn=dlq.arn)["Results"]
    assert listed[0]["Status"] == "FAILED" and listed[0]["FailureReason"] == "CouldNotDetermineMessageSource"

    aws.sqs.start_message_move_task(SourceArn=dlq.arn, DestinationArn=queue.arn)
    named = aws.sqs.move_tasks[-1]
    assert aws.sqs.move_one(named) and [m.body for m in queue.messages.values()] == ["sent"]


def test_redrive_move_task_refuses_a_queue_that_is_no_dlq_and_a_second_task() -> None:
    """API_StartMessageMoveTask: the source must be a DLQ of an SQS queue; one active task per queue."""
    aws, _ = _aws()
    queue, dlq = _queues(aws)
    with pytest.raises(ClientError, match="must be configured as a Dead Letter Queue"):
        aws.sqs.start_message_move_task(SourceArn=queue.arn)
    aws.sqs.send_message(QueueUrl=dlq.url, MessageBody="sent")
    aws.sqs.start_message_move_task(SourceArn=dlq.arn, DestinationArn=queue.arn)
    with pytest.raises(ClientError, match="Only one active task"):
        aws.sqs.start_message_move_task(SourceArn=dlq.arn, DestinationArn=queue.arn)


def _seeds_redriving(method: str) -> Iterator[int]:
    return (seed for seed in range(1_000) if any(plan.method == method for plan in draw(seed).redrives))


@pytest.mark.parametrize("method", REDRIVE_METHODS)
def test_redrive_by_each_method_holds_every_property(method: str) -> None:
    """Each way an operator redrives (the command as it is, with `--include-poison`, filtered by a reason,
    and the console's redrive to source) puts messages back that run again or return to the DLQ: on the
    first seed whose redrive finds the DLQ not empty (every seed redriving holds every property)."""
    for seed in itertools.islice(_seeds_redriving(method), 6):
        result = run_seed(seed)
        assert result.violation is None, (seed, result.violation)
        if result.coverage["redriven"] or result.coverage["sqs:move_task:failed:CouldNotDetermineMessageSource"]:
            break
    else:
        pytest.fail(f"no seed of six redrove by {method}")
    if result.coverage["redriven"]:
        assert result.coverage["redriven:succeeded"] + result.coverage["redriven:dead_lettered_again"] > 0


def test_redrives_are_drawn_on_their_own_stream() -> None:
    """The seeds keep the jobs they had; redrives on FIFO queues too, none in a FIFO seed drawn as the
    corpus's older seeds (`fifo_operator=False`)."""
    for seed in range(40):
        workload = draw(seed)
        assert len(workload.redrives) <= 1
        if workload.fifo:
            before = draw(seed, fifo_operator=False)
            assert before.redrives == [] and before.jobs == workload.jobs
