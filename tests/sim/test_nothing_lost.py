"""The simulator's own `nothing_lost` (`Monitor.final`), message by message: a job sent as two messages may
end one way by each, and no message, its copies counted as it, may both succeed and be dead-lettered."""

from __future__ import annotations

from collections import Counter

from longjobs.sim.properties import Monitor

REASON = {"ErrorType": {"StringValue": "AttemptsExhausted"}, "ErrorMessage": {"StringValue": "failed"}}


def ends(monitor: Monitor) -> list[tuple[str, str]]:
    return monitor.final(jobs={"j": "succeed"}, left_on_queues=Counter(), locks={}, settled_in_time=True)


def test_nothing_lost_one_message_succeeded_the_other_dead_lettered() -> None:
    monitor = Monitor(limits={})
    monitor.sent["j"] = 2
    monitor.copied("m2-waited", "m2")
    monitor.job_done("j", "m1")
    monitor.dead_lettered_copy("j", {**REASON, "OriginalMessageId": {"StringValue": "m2"}}, "m2-dead")
    assert ends(monitor) == []


def test_nothing_lost_a_copy_succeeded_and_its_original_dead_lettered() -> None:
    monitor = Monitor(limits={})
    monitor.sent["j"] = 2
    monitor.copied("m1-waited", "m1")
    monitor.job_done("j", "m1-waited")
    monitor.dead_lettered_copy("j", {**REASON, "OriginalMessageId": {"StringValue": "m1"}}, "m1-dead")
    assert ends(monitor) == [("nothing_lost", "job j: ['m1'] succeeded and also sent to the DLQ")]


def test_nothing_lost_a_message_moved_by_the_redrive_counts_as_itself() -> None:
    monitor = Monitor(limits={})
    monitor.sent["j"] = 1
    monitor.job_done("j", "m1")
    monitor.dead_lettered_copy("j", {}, "m1")  # SQS's redrive moves the message itself: no reason, same id
    assert ("nothing_lost", "job j: ['m1'] succeeded and also sent to the DLQ") in ends(monitor)
