"""The simulator's own `nothing_lost` (`Monitor.final`), message by message: a job sent as two messages may
end one way by each, and no message, its copies counted as it, may both succeed and be dead-lettered."""

from __future__ import annotations

from collections import Counter

from longjobs.sim.properties import Monitor

REASON = {"ErrorType": {"StringValue": "AttemptsExhausted"}, "ErrorMessage": {"StringValue": "failed"}}


def ends(monitor: Monitor, in_dlq: int = 1) -> list[tuple[str, str]]:
    return monitor.final(
        jobs={"j": "succeed"}, left_on_queues=Counter(), in_dlq=Counter(j=in_dlq), locks={}, settled_in_time=True
    )


def test_nothing_lost_nothing_lost_one_message_succeeded_the_other_dead_lettered() -> None:
    monitor = Monitor(limits={})
    monitor.sent["j"] = 2
    monitor.copied("m2-waited", "m2")
    monitor.job_done("j", "m1")
    monitor.dead_lettered_copy("j", {**REASON, "OriginalMessageId": {"StringValue": "m2"}}, "m2-dead")
    assert ends(monitor) == []


def test_nothing_lost_nothing_lost_a_copy_succeeded_and_its_original_dead_lettered() -> None:
    monitor = Monitor(limits={})
    monitor.sent["j"] = 2
    monitor.copied("m1-waited", "m1")
    monitor.job_done("j", "m1-waited")
    monitor.dead_lettered_copy("j", {**REASON, "OriginalMessageId": {"StringValue": "m1"}}, "m1-dead")
    assert ends(monitor) == [("nothing_lost", "job j: ['m1'] succeeded and also sent to the DLQ")]


def test_nothing_lost_nothing_lost_a_message_moved_by_the_redrive_counts_as_itself() -> None:
    monitor = Monitor(limits={})
    monitor.sent["j"] = 1
    monitor.job_done("j", "m1")
    monitor.dead_lettered_copy("j", {}, "m1")  # SQS's redrive moves the message itself: no reason, same id
    assert ("nothing_lost", "job j: ['m1'] succeeded and also sent to the DLQ") in ends(monitor)


def test_nothing_lost_nothing_lost_a_dead_letter_that_left_the_dlq_unredriven_is_lost() -> None:
    monitor = Monitor(limits={})
    monitor.sent["j"] = 1
    monitor.dead_lettered_copy("j", {**REASON, "OriginalMessageId": {"StringValue": "m1"}}, "m1-dead")
    assert ends(monitor, in_dlq=1) == []
    assert ends(monitor, in_dlq=0) == [("nothing_lost", "job j: no message left, never succeeded, left the DLQ")]


def test_nothing_lost_nothing_lost_a_redriven_message_must_run_or_come_back_to_the_dlq() -> None:
    """A redrive makes a new message of the job (`redriven`): acknowledged unrun, it is lost."""
    monitor = Monitor(limits={})
    monitor.sent["j"] = 1
    monitor.dead_lettered_copy("j", {**REASON, "OriginalMessageId": {"StringValue": "m1"}}, "m1-dead")
    monitor.redriven("j", "m2")
    assert monitor.sent["j"] == 2, "a redriven message is a message of its job (once_per_message)"
    assert ("redriven_settles", "job j: redriven as ['m2'], then neither run nor dead-lettered") in ends(monitor, 0)
    monitor.dead_lettered_copy("j", {**REASON, "OriginalMessageId": {"StringValue": "m2"}}, "m2-dead")
    assert ends(monitor) == []
    monitor.redriven("j", "m3")
    monitor.job_done("j", "m3")
    assert ends(monitor, in_dlq=0) == []
