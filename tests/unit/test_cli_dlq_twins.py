"""`dlq redrive` deleting a twin the filter left (the same `OriginalMessageId` and body as the copy it moves),
when the run meets the twin more than once (its page's hold ran out, so SQS hands it out again under a new
receipt handle).

SQS: "If you receive a message more than once, the ReceiptHandle is different each time ... you must
provide the most recently received ReceiptHandle for the message (otherwise, the request succeeds, but
the message might not be deleted)" (DeleteMessage). The simulation's SQS does just that (`_delete`).

Each receive here brings every visible message (never more than ten), so the order does not depend on
the queue's random pick; one receive is slow (a throttled receive's retries, a slow link), as in
`test_cli_dlq.py`'s own slow-link tests.
"""

from __future__ import annotations

from typing import Any

from longjobs.cli.dlq import RedriveFilter, copy_messages
from tests.unit.test_cli_dlq import SlowSqs, body, copy_run, queues

TWIN_ATTRIBUTES = {
    "ErrorType": {"DataType": "String", "StringValue": "AttemptsExhausted"},
    "OriginalMessageId": {"DataType": "String", "StringValue": "original-1"},
}


class Scripted(SlowSqs):
    """The simulated SQS where the n-th receive first takes `delays[n]` seconds (0 past the list), and every
    receipt handle the twin's body was handed out under is noted, in order."""

    def __init__(self, *args: Any, delays: list[float], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.delays = delays
        self.receives = 0
        self.twin_handles: list[tuple[str, str]] = []  # (message id, receipt handle)

    def receive_message(self, **kwargs: Any) -> Any:
        self._clock.t += self.delays[self.receives] if self.receives < len(self.delays) else 0.0
        self.receives += 1
        response = self._sqs.receive_message(**kwargs)
        for message in response.get("Messages", []):
            if message["Body"] == body(7):
                self.twin_handles.append((message["MessageId"], message["ReceiptHandle"]))
        return response


def test_cli_dlq_redrive_deletes_a_twin_met_twice_before_the_chosen_copy_by_its_latest_handle() -> None:
    """The operator redrives one copy by its id; its twin is met first, passed over, and met again after its
    30 s hold ran out (a new receipt handle), all before the chosen copy's page. A delete by the handle of its
    first receive would be accepted and delete nothing, and the next default redrive would send the twin: the
    run deletes it by its latest handle."""
    aws, clock, dlq, jobs = queues(0, step_s=0.0)
    twin = aws.sqs.send_message(QueueUrl=dlq, MessageBody=body(7), MessageAttributes=TWIN_ATTRIBUTES)["MessageId"]
    # the chosen copy: on a later page (here: it reaches the DLQ 32 s after the other)
    chosen = aws.sqs.send_message(
        QueueUrl=dlq, MessageBody=body(7), MessageAttributes=TWIN_ATTRIBUTES, DelaySeconds=32
    )["MessageId"]
    sqs = Scripted(aws, clock, delays=[0.0, 31.0, 1.0])  # page 2 is slow: the twin's 30 s hold runs out

    one = copy_run(sqs, clock, dlq, jobs, RedriveFilter(message_ids=frozenset({chosen})))
    handles = [handle for message_id, handle in sqs.twin_handles if message_id == twin]
    assert len(handles) == 2 and handles[0] != handles[1], sqs.twin_handles  # the scenario: met twice
    clock.t += 3_600
    rest = copy_messages(sqs, dlq, jobs, clock=clock.now, sleep=clock.sleep)  # type: ignore[arg-type]

    assert (one.moved, one.duplicates, one.skipped) == (1, 1, 0), one  # what the first run reports...
    assert sqs.sent[body(7)] == 1, (
        f"one message's job sent {sqs.sent[body(7)]} times: the first run reported its twin deleted "
        f"({one}) but deleted it with a stale receipt handle; the next redrive moved it ({rest})"
    )


def test_cli_dlq_redrive_counts_a_twin_met_again_after_the_chosen_copy_once() -> None:
    """The twin is passed over, the chosen copy is sent, then the twin is met again (its hold ran out): it is
    deleted then, once, and counted once in `duplicates`, not as left too."""
    aws, clock, dlq, jobs = queues(0, step_s=0.0)
    aws.sqs.send_message(QueueUrl=dlq, MessageBody=body(7), MessageAttributes=TWIN_ATTRIBUTES)
    chosen = aws.sqs.send_message(QueueUrl=dlq, MessageBody=body(7), MessageAttributes=TWIN_ATTRIBUTES, DelaySeconds=1)[
        "MessageId"
    ]
    sqs = Scripted(aws, clock, delays=[0.0, 1.0, 31.0])  # page 3 is slow: the twin's 30 s hold runs out

    result = copy_run(sqs, clock, dlq, jobs, RedriveFilter(message_ids=frozenset({chosen})))

    assert len(sqs.twin_handles) == 3, sqs.twin_handles  # the twin, the chosen copy, the twin again
    assert sqs.sent[body(7)] == 1
    assert aws.sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10).get("Messages", []) == []
    assert (result.moved, result.duplicates, result.skipped) == (1, 1, 0), result


def test_cli_dlq_redrive_dry_run_shows_the_twin_the_run_deletes() -> None:
    """`--dry-run` is how an operator sees what a redrive would do. For `--message-id` naming one of two twins
    it shows what the run does: one moves, the other is deleted as its twin (`duplicates`), none left."""
    from longjobs.cli.dlq import peek, redrive
    from tests.unit.test_cli_dlq import _dead_letter_twice

    aws, clock, dlq, jobs = queues(0, step_s=0.0)
    _dead_letter_twice(aws, dlq, "original-1", index=7)
    chosen = peek(aws.sqs, dlq)[0].message_id  # type: ignore[arg-type]
    select = RedriveFilter(message_ids=frozenset({chosen}))

    preview = redrive(aws.sqs, dlq, jobs, dry_run=True, select=select)  # type: ignore[arg-type]
    done = redrive(SlowSqs(aws, clock), dlq, jobs, clock=clock.now, sleep=clock.sleep, select=select)  # type: ignore[arg-type]

    assert (done.moved, done.duplicates, done.skipped) == (1, 1, 0), done
    assert (len(preview.messages), preview.duplicates, preview.skipped) == (1, 1, 0), preview
