"""`dlq list` and `dlq redrive` (`longjobs.cli.dlq`): what a redrive keeps by default, and a run longer than
the holds of both.

Both hide what they receive for a while (`VisibilityTimeout` on the receive), so that the next page brings
other messages. SQS makes a message visible again when that timeout runs out
(https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html):
a run that outlasts its hold meets its first pages again. The simulation's SQS (held to moto by the
contract suite) runs on a clock these tests move, one second a call, so a slow run takes no real time.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import pytest
from botocore.exceptions import ClientError

from longjobs.cli.dlq import (
    PEEK_HOLD_S,
    REDRIVE_HOLD_S,
    DeadLetter,
    RedriveFilter,
    RedriveResult,
    copy_messages,
    peek,
)
from longjobs.engine.lease.schema import table_definition
from longjobs.sim.aws import FakeAws

STATE_MACHINE_ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:long-jobs"


class Ticking:
    """A clock each SQS call moves on by `step_s`: a slow link, or a large queue."""

    def __init__(self, step_s: float) -> None:
        self.t = 1_700_000_000.0
        self.step_s = step_s

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds)


class SlowSqs:
    """The simulated SQS, each call taking `clock.step_s`; with `fail_first`, the first send lands and then
    answers a 500 (the SDK's retries spent), its body kept in `failed`."""

    def __init__(self, aws: FakeAws, clock: Ticking, *, fail_first: bool = False) -> None:
        self._sqs = aws.sqs
        self._clock = clock
        self.fail_first = fail_first
        self.failed: str | None = None
        self.sent: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._sqs, name)

        def timed(**kwargs: Any) -> Any:
            self._clock.t += self._clock.step_s
            return call(**kwargs)

        return timed

    def send_message(self, **kwargs: Any) -> Any:
        self._clock.t += self._clock.step_s
        sent = self._sqs.send_message(**kwargs)
        self.sent[kwargs["MessageBody"]] += 1
        if self.fail_first:
            self.fail_first, self.failed = False, kwargs["MessageBody"]
            raise ClientError({"Error": {"Code": "InternalError", "Message": "try again"}}, "SendMessage")
        return sent


def queues(count: int, step_s: float) -> tuple[FakeAws, Ticking, str, str]:
    """A DLQ of `count` messages the receiver dead-lettered (attempts exhausted), and a jobs queue."""
    clock = Ticking(step_s)
    aws = FakeAws(clock, random.Random(0), table=table_definition("leases"), state_machine_arn=STATE_MACHINE_ARN)
    dlq = aws.sqs.create_queue("jobs-dlq", visibility_timeout_s=30).url
    jobs = aws.sqs.create_queue("jobs", visibility_timeout_s=30).url
    for index in range(count):
        aws.sqs.send_message(
            QueueUrl=dlq,
            MessageBody=body(index),
            MessageAttributes={"ErrorType": {"DataType": "String", "StringValue": "AttemptsExhausted"}},
        )
    return aws, clock, dlq, jobs


def body(index: int) -> str:
    return json.dumps({"job_id": f"j{index}", "type": "wait", "params": {"seconds": 1}})


def test_cli_dlq_list_longer_than_its_hold_lists_every_message() -> None:
    """130 messages at a second a receive: 13 pages, past the 10 s hold, so the first pages come back."""
    aws, clock, dlq, _ = queues(130, step_s=1.0)
    assert 130 / 10 * clock.step_s > PEEK_HOLD_S

    letters = peek(SlowSqs(aws, clock), dlq, clock=clock.now)  # type: ignore[arg-type]

    assert len({letter.message_id for letter in letters}) == len(letters) == 130


def test_cli_dlq_list_stops_when_the_endpoint_does_not_hide_what_it_hands_out() -> None:
    """An endpoint that ignores `VisibilityTimeout` hands the same page out again at once: the listing
    stops there rather than loop (it lists what it saw)."""
    aws, clock, dlq, _ = queues(30, step_s=0.0)

    class NoHiding(SlowSqs):
        def receive_message(self, **kwargs: Any) -> Any:
            return self._sqs.receive_message(**{**kwargs, "VisibilityTimeout": 0})

    letters = peek(NoHiding(aws, clock), dlq, clock=clock.now)  # type: ignore[arg-type]

    assert 0 < len(letters) <= 30


def test_cli_dlq_redrive_does_not_send_again_a_message_whose_send_failed() -> None:
    """operate.md: a message whose send fails stays in the DLQ, not retried within the run. Its send
    landed and answered a 500: its page's 30 s hold runs out during a run of `--max-per-second 1`, and
    the message is received again; it is not sent a second time."""
    aws, clock, dlq, jobs = queues(REDRIVE_HOLD_S + 5, step_s=0.05)
    sqs = SlowSqs(aws, clock, fail_first=True)

    result = copy_messages(
        sqs,  # type: ignore[arg-type]
        dlq,
        jobs,
        max_per_second=1,
        clock=clock.now,
        sleep=clock.sleep,
        select=RedriveFilter(error_types=frozenset({"AttemptsExhausted"})),
    )

    assert sqs.failed is not None and sqs.sent[sqs.failed] == 1, f"sent {sqs.sent[sqs.failed or '']} times; {result}"
    assert (result.moved, result.failed) == (REDRIVE_HOLD_S + 4, 1), result
    assert sum(sqs.sent.values()) == REDRIVE_HOLD_S + 5, "every other message sent once"


def _dead_letter_twice(aws: FakeAws, dlq: str, original: str, index: int) -> None:
    """Two DLQ copies of one message, as two handlings of one record each send it (the receiver's send is
    at least once): the same body and `OriginalMessageId`."""
    attributes = {
        "ErrorType": {"DataType": "String", "StringValue": "AttemptsExhausted"},
        "OriginalMessageId": {"DataType": "String", "StringValue": original},
    }
    for _ in range(2):
        aws.sqs.send_message(QueueUrl=dlq, MessageBody=body(index), MessageAttributes=attributes)


@pytest.mark.parametrize("fail_first", [False, True], ids=["sent", "send-failed"])
def test_cli_dlq_redrive_sends_one_of_two_copies_of_a_message(fail_first: bool) -> None:
    """Two DLQ copies of one message: a redrive that sent both would run its job twice (the job id's lock
    runs them one after the other). The second is deleted, counted in `duplicates`. When the first's send
    failed (it may have landed), neither is sent again in the run: both stay."""
    aws, clock, dlq, jobs = queues(3, step_s=0.0)
    _dead_letter_twice(aws, dlq, "original-1", index=7)
    sqs = SlowSqs(aws, clock)

    def failing_first_twin(**kwargs: Any) -> Any:
        if kwargs["MessageBody"] == body(7):
            sqs.fail_first = fail_first and not sqs.failed
        return SlowSqs.send_message(sqs, **kwargs)

    sqs.send_message = failing_first_twin  # type: ignore[method-assign]

    result = copy_messages(sqs, dlq, jobs, clock=clock.now, sleep=clock.sleep)  # type: ignore[arg-type]

    left = aws.sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10).get("Messages", [])
    assert sqs.sent[body(7)] == 1, f"sent {sqs.sent[body(7)]} times: {result}"
    if fail_first:
        assert (result.moved, result.failed, result.duplicates, len(left)) == (3, 1, 0, 2), result
    else:
        assert (result.moved, result.duplicates, len(left)) == (4, 1, 0), result
        assert sqs.sent == Counter({body(i): 1 for i in (0, 1, 2, 7)})


def copy_run(sqs: Any, clock: Ticking, dlq: str, jobs: str, select: RedriveFilter) -> RedriveResult:
    """A copy run of `dlq redrive` on the simulated SQS, timed by `clock`."""
    return copy_messages(sqs, dlq, jobs, clock=clock.now, sleep=clock.sleep, select=select)


def letter(error_type: str) -> DeadLetter:
    return DeadLetter("m", error_type, "why", 3, None, None, body(0))


@pytest.mark.parametrize(
    ("error_type", "moves"),
    [
        ("AttemptsExhausted", True),
        ("StartsRefused", True),
        ("NotJson", False),  # poison: it would come straight back
        ("Cancelled", False),  # an operator decided the job must not run
        ("ClaimUnknown", False),  # its job may have run already: an operator checks first
    ],
)
def test_cli_dlq_redrive_keeps_by_default_what_must_not_simply_run_again(error_type: str, moves: bool) -> None:
    assert RedriveFilter().selects(letter(error_type)) is moves
    assert RedriveFilter().keeps_by_default(letter(error_type)) is not moves
    assert RedriveFilter(include_poison=True).selects(letter(error_type))
    assert RedriveFilter(error_types=frozenset({error_type})).selects(letter(error_type)), "named: it moves"


@pytest.mark.parametrize("poison", ["[" * 20_000 + "]" * 20_000, "{not json", '{"n": ' + "9" * 5_000 + "}"])
def test_cli_dlq_redrive_filter_by_job_reads_a_poison_body_as_no_job(poison: str) -> None:
    """The DLQ holds what the receiver could not read: nested past Python's reader, not JSON, an integer
    past Python's digit limit. A filter by type or job id reads each as a body of no job, never raising."""
    dead = DeadLetter("m", "NotJson", "why", 1, None, None, poison)
    assert not RedriveFilter(include_poison=True, job_type="wait").selects(dead)
    assert not RedriveFilter(include_poison=True, job_id="j").selects(dead)


def test_cli_dlq_redrive_past_its_hold_ends_after_a_pass() -> None:
    """400 messages the filter keeps, a second a receive: 40 pages, past the 30 s hold, so the first pages
    come back. Later pages are held longer, and the run ends (it would otherwise receive for ever)."""
    aws, clock, dlq, jobs = queues(400, step_s=1.0)
    sqs = SlowSqs(aws, clock)
    receives = 0

    def counted(**kwargs: Any) -> Any:
        nonlocal receives
        receives += 1
        assert receives < 200, "still receiving"
        clock.t += clock.step_s
        return aws.sqs.receive_message(**kwargs)

    sqs.receive_message = counted  # type: ignore[method-assign]
    result = copy_run(sqs, clock, dlq, jobs, RedriveFilter(error_types=frozenset({"JobIdBusy"})))

    assert (result.moved, result.skipped) == (0, 400), result


def test_cli_dlq_list_on_a_link_whose_latency_varies_lists_every_message() -> None:
    """A receive slower than the one that hid a message (the SDK's retry of a throttled receive) meets it
    again legitimately: that is no endpoint that does not hide, and the listing goes on."""
    aws, clock, dlq, _ = queues(300, step_s=0.2)
    calls = 0

    class Jittery(SlowSqs):
        def receive_message(self, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            clock.t += 3.0 if calls % 4 == 0 else 0.2
            return aws.sqs.receive_message(**kwargs)

    assert len(peek(Jittery(aws, clock), dlq, clock=clock.now)) == 300  # type: ignore[arg-type]


@pytest.mark.parametrize("chosen", [0, 1], ids=["first-listed", "second-listed"])
def test_cli_dlq_redrive_of_one_twin_by_its_id_deletes_the_other(chosen: int) -> None:
    """An operator redrives one DLQ message by its id (`--message-id`, as `dlq list` shows it). Its twin (the
    same `OriginalMessageId` and body) is the same message: the filter leaves it, but it is deleted once the
    chosen one is sent, whichever the run met first, so a later redrive cannot run the job a second time."""
    aws, clock, dlq, jobs = queues(0, step_s=0.0)
    _dead_letter_twice(aws, dlq, "original-1", index=7)
    letters = peek(aws.sqs, dlq)  # type: ignore[arg-type]
    sqs = SlowSqs(aws, clock)

    one = copy_run(sqs, clock, dlq, jobs, RedriveFilter(message_ids=frozenset({letters[chosen].message_id})))
    clock.t += 3_600
    rest = copy_messages(sqs, dlq, jobs, clock=clock.now, sleep=clock.sleep)  # type: ignore[arg-type]

    assert sqs.sent[body(7)] == 1, f"one message's job sent {sqs.sent[body(7)]} times: {one}, {rest}"
    assert (one.moved, one.duplicates, one.skipped, rest.moved) == (1, 1, 0, 0), (one, rest)


def test_cli_dlq_error_types_are_every_reason_the_processor_gives_a_copy() -> None:
    """`redrive --error-type` refuses a name outside `ERROR_TYPES`: it must hold every reason written."""
    from longjobs.cli.dlq import ERROR_TYPES
    from longjobs.engine import cancel
    from longjobs.engine.delivery import dlq
    from longjobs.engine.delivery.models import ErrorType

    poison = {value for name, value in vars(ErrorType).items() if name.isupper()}
    reasons = {dlq.EXHAUSTED, dlq.STARTS_REFUSED, dlq.CLAIM_UNKNOWN, dlq.JOB_ID_BUSY, dlq.RETENTION_RUNNING_OUT}
    assert poison | reasons | {cancel.CANCELLED} == ERROR_TYPES
