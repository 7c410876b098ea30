"""The independent trace checker: hand-written traces that keep or break each of its properties, and one
real seed on which it must agree with the simulator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from longjobs.history.checker import PROPERTIES, Finding, TraceError, check, main
from longjobs.sim.workload import LIMIT, LIMITED_TYPE
from tests import REPO_ROOT

M1 = "m0000001-0000-4000-8000-000000000000"
M2 = "m0000002-0000-4000-8000-000000000000"
M3 = "m0000003-0000-4000-8000-000000000000"
REASON = {"ErrorType": "InvalidParameters", "ErrorMessage": "params.seconds: must be integer"}


def event(t: float, name: str, actor: str = "world", **details: Any) -> str:
    return json.dumps({"t": t, "actor": actor, "event": name, **details}, sort_keys=True)


def call(t: float, operation: str, **params: Any) -> str:
    return json.dumps({"t": t, "actor": "receiver", "call": operation, "params": params, "answer": {}}, sort_keys=True)


def sent(
    t: float, message_id: str, job_id: str, *, job_type: str = "wait", group: str | None = None, s3: str | None = None
) -> str:
    fifo = {"group": group} if group is not None else {}
    event_of = {"s3_event": s3} if s3 is not None else {}
    return event(t, "sent", "producer", message_id=message_id, job_id=job_id, type=job_type, **fifo, **event_of)


def delivered(
    t: float, message_id: str, job_id: str, *, count: int = 1, duplicate: bool = False, hold_ends: float | None = None
) -> str:
    return event(
        t,
        "delivered",
        "sqs",
        queue="jobs",
        message_id=message_id,
        job_id=job_id,
        receive_count=count,
        duplicate=duplicate,
        hold_ends=hold_ends,
    )


def run(start: float, end: float, message_id: str, job_id: str, attempt: int = 1, *, ok: bool = True) -> list[str]:
    """An execution of `message_id` that runs its job from `start` to `end`."""
    execution = f"{message_id}-{attempt}"
    return [
        event(start - 0.1, "execution_started", "stepfunctions", execution=execution, job_id=job_id),
        event(start, "job_started", "workflow", execution=execution, message_id=message_id, job_id=job_id),
        event(end, "job_ended", "workflow", execution=execution, job_id=job_id, succeeded=ok),
        event(
            end + 0.1, "execution_ended", "stepfunctions", execution=execution, status="SUCCEEDED" if ok else "FAILED"
        ),
    ]


def dead_lettered(t: float, message_id: str, job_id: str, reason: dict[str, str]) -> str:
    return event(t, "dead_lettered", "sqs", message_id=message_id, job_id=job_id, reason=reason)


def end(t: float, left: dict[str, int] | None = None) -> str:
    return event(t, "end", settled=not left, left=left or {})


def by_time(*lines: str) -> list[str]:
    return sorted(lines, key=lambda line: float(json.loads(line)["t"]))


def properties(findings: list[Finding]) -> list[str]:
    return [finding.property for finding in findings]


# -- single_execution -----------------------------------------------------------------------------------------


def test_checker_single_execution_holds_for_consecutive_attempts_and_distinct_jobs() -> None:
    lines = by_time(
        sent(1, M1, "j1"),
        sent(2, M2, "j2"),
        delivered(10, M1, "j1"),
        delivered(10, M2, "j2"),
        *run(11, 50, M1, "j1", attempt=1, ok=False),
        *run(60, 90, M1, "j1", attempt=2),  # the next attempt starts after the first ended
        *run(12, 80, M2, "j2"),  # another job runs meanwhile
        call(95, "sqs.DeleteMessage", QueueUrl="jobs"),
        end(100),
    )
    assert check(lines) == []


def test_checker_single_execution_two_overlapping_runs_of_one_message() -> None:
    lines = by_time(
        sent(1, M1, "j1"), delivered(10, M1, "j1"), *run(11, 50, M1, "j1", 1, ok=False), *run(30, 70, M1, "j1", 2)
    )
    findings = check(lines)
    assert properties(findings) == ["single_execution", "single_execution"]  # per message and per job id
    assert all(finding.t == 30 for finding in findings)
    assert f"message {M1}: {M1}-2 starts its job while {M1}-1" in findings[0].detail
    assert "job j1:" in findings[1].detail


def test_checker_single_execution_two_messages_of_one_job_id_overlap() -> None:
    lines = by_time(sent(1, M1, "j1"), sent(2, M2, "j1"), *run(11, 50, M1, "j1"), *run(20, 60, M2, "j1"))
    findings = check(lines)
    assert findings == [
        Finding("single_execution", 20, f"job j1: {M2}-1 starts its job while {M1}-1 (since t=11.0) runs")
    ]


def test_checker_single_execution_an_ended_execution_runs_nothing() -> None:
    stopped = f"{M1}-1"
    lines = [
        sent(1, M1, "j1"),
        event(11, "job_started", "workflow", execution=stopped, message_id=M1, job_id="j1"),
        event(20, "execution_ended", "stepfunctions", execution=stopped, status="ABORTED"),  # no job_ended
        *run(30, 40, M1, "j1", attempt=2),
    ]
    assert check(lines) == []


# -- single_run -----------------------------------------------------------------------------------------------


def job_run(start: float, end: float, run_id: str, job_id: str) -> list[str]:
    return [
        event(start, "run_started", "runner", run=run_id, job_id=job_id),
        event(end, "run_ended", "runner", run=run_id),
    ]


def test_checker_single_run_a_run_that_outlives_its_execution_overlaps_the_next() -> None:
    """The previous attempt's execution stopped at 50; its run went on to 80 (a lost cancel), and the next
    attempt's run began at 60: two runs of one job, though its executions never overlapped."""
    lines = by_time(
        sent(1, M1, "j1"),
        *run(11, 50, M1, "j1", 1, ok=False),
        *job_run(12, 80, "00r1", "j1"),
        *run(55, 90, M1, "j1", 2),
        *job_run(60, 85, "00r2", "j1"),
    )
    assert check(lines) == [Finding("single_run", 60, "job j1: run 00r2 starts while 00r1 (since t=12.0) runs")]


def test_checker_single_run_holds_for_runs_one_after_the_other_and_other_jobs() -> None:
    lines = by_time(*job_run(12, 80, "00r1", "j1"), *job_run(81, 90, "00r2", "j1"), *job_run(20, 85, "00r3", "j2"))
    assert check(lines) == []


# -- once_per_message -----------------------------------------------------------------------------------------


def test_checker_once_per_message_holds_for_two_messages_of_one_job_id() -> None:
    lines = by_time(sent(1, M1, "j1"), sent(2, M2, "j1"), *run(11, 50, M1, "j1"), *run(60, 90, M2, "j1"), end(100))
    assert check(lines) == []


def test_checker_once_per_message_counts_a_notification_once_per_marker() -> None:
    """An S3 notification is one message sent of each of its markers' partition jobs (the trace records a
    `sent` per marker): a fan-out runs each once, and a second run of one (the notification handled twice,
    its job messages sent again) breaks the property."""
    notification = "n0000001-0000-4000-8000-000000000000"
    sends = [sent(1, notification, "wait:b/p0/"), sent(1, notification, "wait:b/p1/")]
    once = [*run(11, 50, M1, "wait:b/p0/"), *run(12, 40, M2, "wait:b/p1/")]
    assert check(by_time(*sends, *once, end(100))) == []

    findings = check(by_time(*sends, *once, *run(60, 90, M3, "wait:b/p0/"), end(100)))
    assert properties(findings) == ["once_per_message"]
    assert "job wait:b/p0/: 2 executions SUCCEEDED" in findings[0].detail


def test_checker_once_per_message_counts_an_s3_event_once_however_often_s3_delivers_it() -> None:
    """S3 delivers an event at least once, as a new message
    (https://docs.aws.amazon.com/AmazonS3/latest/userguide/EventNotifications.html): a second `sent` of a
    fanned-out marker's `s3_event` is that event again, so a second run of its job breaks the property,
    while a new creation of the marker (another sequencer) is a new message of the job."""
    first, again = "n0000001-0000-4000-8000-000000000000", "n0000002-0000-4000-8000-000000000000"
    sends = [sent(1, first, "wait:b/p0/", s3="0A1"), sent(30, again, "wait:b/p0/", s3="0A1")]
    twice = [*run(11, 50, M1, "wait:b/p0/"), *run(60, 90, M2, "wait:b/p0/")]
    assert check(by_time(*sends, *run(11, 50, M1, "wait:b/p0/"), end(100))) == []
    assert properties(check(by_time(*sends, *twice, end(100)))) == ["once_per_message"]

    rewritten = [sent(1, first, "wait:b/p0/", s3="0A1"), sent(30, again, "wait:b/p0/", s3="0A2")]
    assert check(by_time(*rewritten, *twice, end(100))) == []


def test_checker_once_per_message_a_copy_that_runs_the_job_again_breaks() -> None:
    """The defect of corpus seed 24486: a message waiting for its job id was copied twice (SendMessage is not
    idempotent) and both copies ran the job after the other message's run."""
    lines = by_time(
        sent(1, M1, "j1"),
        sent(2, M2, "j1"),
        *run(11, 50, M1, "j1"),
        *run(60, 90, M2, "j1"),
        *run(95, 120, M3, "j1"),  # a copy of M2: a message id the producer never sent
        end(130),
    )
    findings = check(lines)
    assert properties(findings) == ["once_per_message"]
    assert findings[0].t == 120.1, "when the copy's execution ended SUCCEEDED"
    assert "job j1: 3 executions SUCCEEDED" in findings[0].detail and "from 2 message(s) sent" in findings[0].detail


def test_checker_once_per_message_leaves_a_run_whose_success_was_not_recorded_alone() -> None:
    """A job's run succeeded but its execution could not record it (the workflow's reads failed) and
    ended FAILED: the message is released and runs again, as at-least-once allows."""
    lines = by_time(sent(1, M1, "j1"), *run(11, 50, M1, "j1", 1), *run(60, 90, M1, "j1", 2), end(100))
    unrecorded = [
        line.replace('"SUCCEEDED"', '"FAILED"') if "-1" in line and "execution_ended" in line else line
        for line in lines
    ]
    assert check(unrecorded) == []


# -- no_lapse -------------------------------------------------------------------------------------------------


def test_checker_no_lapse_holds_for_deliveries_outside_the_runs() -> None:
    lines = by_time(
        sent(1, M1, "j1"),
        delivered(10, M1, "j1"),
        *run(11, 50, M1, "j1", 1, ok=False),
        delivered(55, M1, "j1", count=2),  # after the first run ended: the retry
        *run(56, 90, M1, "j1", 2),
        delivered(70, M2, "j2"),  # another message while M1 runs
    )
    assert check(lines) == []


def test_checker_no_lapse_delivery_while_running() -> None:
    lines = by_time(
        sent(1, M1, "j1"), delivered(10, M1, "j1"), *run(11, 50, M1, "j1"), delivered(30, M1, "j1", count=2)
    )
    findings = check(lines)
    assert properties(findings) == ["no_lapse"]
    assert findings[0].t == 30
    assert f"message {M1} delivered again" in findings[0].detail
    assert f"{M1}-1 runs its job" in findings[0].detail


def test_checker_no_lapse_duplicate_delivery_is_exempt() -> None:
    lines = by_time(sent(1, M1, "j1"), *run(11, 50, M1, "j1"), delivered(12, M1, "j1", count=2, duplicate=True))
    assert check(lines) == []


def test_checker_no_lapse_the_echo_of_a_duplicate_whose_handling_died_is_exempt() -> None:
    """A duplicate's receive hides the message under a handle only its handling knows; with no `outcome`
    for it, the delivery a visibility timeout later is its echo. After an outcome, one is a lapse."""
    outcome = event(100.5, "outcome", "receiver", message_id=M1, job_id="j1", outcome="running")
    lines = [sent(1, M1, "j1"), *run(10, 900, M1, "j1"), delivered(100, M1, "j1", count=2, duplicate=True)]
    assert check(by_time(*lines, delivered(280, M1, "j1", count=3), end(1000))) == []
    lapsed = check(by_time(*lines, outcome, delivered(280, M1, "j1", count=3), end(1000)))
    assert properties(lapsed) == ["no_lapse"]


def test_checker_no_lapse_delivery_at_the_cap_is_exempt() -> None:
    hold_ends = 43_000.0
    lines = by_time(
        sent(1, M1, "j1"),
        *run(11, 50_000, M1, "j1"),
        delivered(hold_ends - 1, M1, "j1", count=2, hold_ends=hold_ends),  # at the cap: allowed
        delivered(hold_ends + 5, M1, "j1", count=3, hold_ends=hold_ends),  # after it: allowed
    )
    assert check(lines) == []


def test_checker_no_lapse_delivery_before_the_cap_or_without_a_lease_breaks() -> None:
    hold_ends = 43_000.0
    lines = by_time(
        sent(1, M1, "j1"),
        *run(11, 50_000, M1, "j1"),
        delivered(hold_ends - 1.5, M1, "j1", count=2, hold_ends=hold_ends),
        delivered(100, M1, "j1", count=3, hold_ends=None),
    )
    findings = check(lines)
    assert [(finding.property, finding.t) for finding in findings] == [("no_lapse", 100), ("no_lapse", hold_ends - 1.5)]
    assert "no lease renew-until" in findings[0].detail
    assert f"before its cap (hold_ends={hold_ends})" in findings[1].detail


# -- nothing_lost ---------------------------------------------------------------------------------------------


def test_checker_nothing_lost_holds_for_succeeded_inline_and_dead_lettered_jobs() -> None:
    lines = by_time(
        sent(1, M1, "j1"),
        sent(2, M2, "j2"),
        sent(3, M3, "j3"),
        *run(11, 50, M1, "j1"),
        event(12, "outcome", "receiver", message_id=M2, job_id="j2", outcome="inline_done"),
        dead_lettered(13, "m-copy", "j3", {**REASON, "OriginalMessageId": M3}),
        end(100),
    )
    assert check(lines) == []


def test_checker_nothing_lost_job_lost() -> None:
    lines = by_time(
        sent(1, M1, "j1"),
        sent(2, M2, "j2"),
        *run(11, 50, M1, "j1", ok=False),  # failed, and nothing else became of it
        event(12, "outcome", "receiver", message_id=M2, job_id="j2", outcome="inline_done"),
        end(100),
    )
    findings = check(lines)
    assert findings == [Finding("nothing_lost", 100, f"job j1 (messages {M1}): never succeeded and not in the DLQ")]


def test_checker_nothing_lost_job_both_succeeded_and_dead_lettered() -> None:
    dead = dead_lettered(60, "m-copy", "j1", {**REASON, "OriginalMessageId": M1})
    findings = check(by_time(sent(1, M1, "j1"), *run(11, 50, M1, "j1"), dead, end(100)))
    assert properties(findings) == ["nothing_lost"]
    assert "job j1: succeeded" in findings[0].detail
    assert "also dead-lettered (copies m-copy)" in findings[0].detail


def copy_sent(t: float, copy_id: str, original: str) -> str:
    """The receiver's send of a copy (to wait, or parked) that names its original, as the trace records it."""
    attribute = {"DataType": "String", "StringValue": json.dumps({"original": original, "since": None})}
    params = {"QueueUrl": "jobs", "MessageBody": "{}", "MessageAttributes": {"LongJobsAdmission": attribute}}
    record = {
        "t": t,
        "actor": "receiver",
        "call": "sqs.send_message",
        "params": params,
        "answer": {"MessageId": copy_id},
    }
    return json.dumps(record, sort_keys=True)


def test_checker_nothing_lost_two_messages_of_one_job_id_end_one_way_each() -> None:
    """Each message ends one way (seed 816: one message's attempts all met an outage, the other's
    succeeded); a message that did both breaks, whatever the job's other messages did (a review: counted
    by job, one message's two ends hid the other's loss)."""
    two_ends = [sent(1, M1, "j1"), sent(2, M2, "j1"), *run(11, 50, M1, "j1")]
    two_ends.append(dead_lettered(60, "m-copy", "j1", {**REASON, "OriginalMessageId": M2}))
    assert check(by_time(*two_ends, end(100))) == []
    both = [sent(1, M1, "j1"), sent(2, M2, "j1"), *run(11, 50, M1, "j1")]
    both.append(dead_lettered(60, "m-copy", "j1", {**REASON, "OriginalMessageId": M1}))
    findings = check(by_time(*both, end(100)))
    assert properties(findings) == ["nothing_lost"]
    assert "also dead-lettered (copies m-copy)" in findings[0].detail


def test_checker_nothing_lost_a_run_after_a_cancel_whose_success_was_refused_ends_one_way() -> None:
    """The job ran to its end after an operator's cancel marked its lease: the workflow refused to record
    the success (its execution FAILED), and the message is in the DLQ as Cancelled: one end. Recorded (the
    execution SUCCEEDED), the same two ends break."""
    cancelled = {"ErrorType": "Cancelled", "ErrorMessage": "cancelled by an operator", "OriginalMessageId": M1}
    refused = [sent(1, M1, "j1"), *run(11, 50, M1, "j1")]
    refused[-1] = refused[-1].replace('"SUCCEEDED"', '"FAILED"')
    assert check(by_time(*refused, dead_lettered(60, "m-dead", "j1", cancelled), end(100))) == []
    recorded = [sent(1, M1, "j1"), *run(11, 50, M1, "j1"), dead_lettered(60, "m-dead", "j1", cancelled)]
    assert properties(check(by_time(*recorded, end(100)))) == ["nothing_lost"]


def test_checker_nothing_lost_a_success_the_cancel_refused_but_the_workflow_could_not_read_ends_one_way() -> None:
    """A cancel began while the job ran: its mark refused the success close, and the workflow, its reads of
    the lease failed after their retries, ended SUCCEEDED as its job did, recording nothing. The message in
    the DLQ as Cancelled is its one end. A cancel that began after the execution ended SUCCEEDED met a
    success recorded, and the same two ends break."""
    cancelled = {"ErrorType": "Cancelled", "ErrorMessage": "cancelled by an operator", "OriginalMessageId": M1}
    ran = [sent(1, M1, "j1"), *run(11, 50, M1, "j1"), dead_lettered(60, "m-dead", "j1", cancelled), end(100)]
    during = event(30, "cancel", "operator", job_id="j1", message_id=M1, cut_after="update_item")
    assert check(by_time(*ran, during)) == []
    after = event(55, "cancel", "operator", job_id="j1", message_id=M1, cut_after=None)
    assert properties(check(by_time(*ran, after))) == ["nothing_lost"]


def test_checker_once_per_message_counts_a_redriven_message_as_one_of_its_job() -> None:
    """An operator's redrive puts a DLQ message back as a new message (`redriven`): a message of its job,
    which may run it once more."""
    redriven = event(70, "redriven", "operator", message_id=M2, job_id="j1", moved_from="m-dead")
    lines = [sent(1, M1, "j1"), *run(11, 50, M1, "j1"), *run(80, 90, M2, "j1")]
    assert properties(check(by_time(*lines, end(100)))) == ["once_per_message"]
    assert check(by_time(*lines, redriven, end(100))) == []


def test_checker_nothing_lost_a_copy_counts_as_its_original() -> None:
    """A copy sent to wait ran the job; the original's DLQ copy names the original: one message, two ends."""
    lines = [sent(1, M1, "j1"), copy_sent(5, "m-waited", M1), *run(11, 50, "m-waited", "j1")]
    lines.append(dead_lettered(60, "m-dead", "j1", {**REASON, "OriginalMessageId": M1}))
    assert properties(check(by_time(*lines, end(100)))) == ["nothing_lost"]
    other = [sent(1, M1, "j1"), sent(2, M2, "j1"), copy_sent(5, "m-waited", M2), *run(11, 50, "m-waited", "j1")]
    other.append(dead_lettered(60, "m-dead", "j1", {**REASON, "OriginalMessageId": M1}))
    assert check(by_time(*other, end(100))) == []


def test_checker_nothing_lost_dead_letter_copy_without_a_reason() -> None:
    lines = by_time(
        sent(1, M1, "j1"),
        sent(2, M2, "j2"),
        dead_lettered(10, "m-copy-1", "j1", {"SourceQueue": "jobs"}),
        dead_lettered(11, "m-copy-2", "j2", {"ErrorType": "InvalidParameters"}),
        end(100),
    )
    findings = check(lines)
    assert properties(findings) == ["nothing_lost", "nothing_lost"]
    assert "DLQ copy m-copy-1 without a reason (no ErrorType, ErrorMessage" in findings[0].detail
    assert "DLQ copy m-copy-2 without a reason (no ErrorMessage;" in findings[1].detail


def test_checker_nothing_lost_messages_left_on_the_queues() -> None:
    lines = by_time(sent(1, M1, "j1"), *run(11, 50, M1, "j1"), end(100, left={"j1": 1}))
    assert check(lines) == [Finding("nothing_lost", 100, "job j1: 1 message(s) still on the jobs or waiting queues")]


def test_checker_nothing_lost_skipped_without_an_end() -> None:
    lines = [sent(1, M1, "j1"), event(5, "violation", "checker", property="no_lapse", detail="stopped")]
    assert check(lines) == []


def test_checker_ignores_the_simulators_own_verdict() -> None:
    lines = [
        sent(1, M1, "j1"),
        *run(11, 50, M1, "j1"),
        event(60, "violation", "checker", property="single_execution", detail="made up"),
    ]
    assert check(lines) == []


# -- reading and the command ----------------------------------------------------------------------------------


def test_checker_rejects_a_line_that_is_not_a_json_object() -> None:
    with pytest.raises(TraceError, match="line 2: not JSON"):
        check([sent(1, M1, "j1"), "{not json"])
    with pytest.raises(TraceError, match="line 1: malformed 'job_started' event"):
        check([event(1, "job_started", "workflow", execution="e")])


def test_checker_main_reports_findings_and_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text("\n".join([sent(1, M1, "j1"), *run(11, 50, M1, "j1"), end(100)]) + "\n")
    bad.write_text("\n".join([sent(1, M1, "j1"), end(100)]) + "\n")
    assert main([str(good)]) == 0
    assert capsys.readouterr().out == "ok: 6 records, 1 jobs\n"
    assert main([str(bad)]) == 1
    assert (
        capsys.readouterr().out
        == f"nothing_lost at t=100.0: job j1 (messages {M1}): never succeeded and not in the DLQ\n"
    )
    assert main([str(tmp_path / "missing.jsonl")]) == 2


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (
            json.dumps({"t": 1, "call": "sqs.send_message", "params": "oops", "answer": {"MessageId": M2}}).encode(),
            "line 1: malformed 'sqs.send_message' call",
        ),
        (
            json.dumps({"t": 1, "event": "limits", "limits": {"limited": float("nan")}, "excused_s": 5}).encode(),
            "line 1: malformed 'limits' event (limited is nan, not a whole number)",
        ),
        (json.dumps({"t": 1, "actor": "x"}).encode(), "line 1: neither an event nor a call"),
        (b"\xff\xfe", "can't decode byte 0xff"),
        (b"", "no records"),
    ],
    ids=["call-params-not-an-object", "limit-not-a-number", "no-event-or-call", "not-utf8", "empty"],
)
def test_checker_main_names_what_is_wrong_with_a_malformed_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, named: str
) -> None:
    """A trace the checker cannot judge exits 2 with one line naming the fault, not a traceback (exit 1 is a
    finding) and not `ok`."""
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(content)
    assert main([str(trace)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {trace}: ") and named in err, err


# -- type_concurrency and fifo_order --------------------------------------------------------------------------


def test_checker_type_concurrency_counts_a_limited_types_runs_at_once() -> None:
    lines = by_time(
        *(sent(n, f"m{n}", f"j{n}", job_type="limited") for n in (1, 2, 3)),
        *run(10, 50, "m1", "j1"),
        *run(20, 60, "m2", "j2"),
        *run(30, 70, "m3", "j3"),
        end(100),
    )
    findings = check(lines, {"limited": 2})
    assert properties(findings) == ["type_concurrency"]
    assert findings[0].detail == "type limited: m1-1, m2-1, m3-1 run at once, above its limit 2"
    assert check(lines, {"limited": 3}) == [] and check(lines) == []
    sends = (sent(n, f"m{n}", f"j{n}", job_type="limited") for n in (1, 2))
    one_after_the_other = by_time(*sends, *run(10, 20, "m1", "j1"), *run(30, 40, "m2", "j2"))
    assert check(one_after_the_other, {"limited": 1}) == []


def test_checker_type_concurrency_follows_a_deploy_that_changes_the_limits() -> None:
    """A `limits` event replaces the limits: a removed one holds no more; an added one excuses the type's runs
    going then, or started within `excused_s` (they hold no slot), and counts every later one."""
    sends = [sent(n, f"m{n}", f"j{n}", job_type="limited") for n in (1, 2, 3, 4)]
    removed = by_time(*sends[:3], *run(10, 50, "m1", "j1"), *run(20, 60, "m2", "j2"), *run(30, 70, "m3", "j3"))
    assert properties(check([*removed, end(100)], {"limited": 2})) == ["type_concurrency"]
    lifted = by_time(*removed, event(25, "limits", limits={}, excused_s=0), end(100))
    assert check(lifted, {"limited": 2}) == []

    def added(late_start: float) -> list[str]:
        return by_time(
            *sends[:3],
            *run(10, 100, "m1", "j1"),
            event(20, "limits", limits={"limited": 1}, excused_s=30),
            *run(40, 100, "m2", "j2"),  # started by a replaced function: excused
            *run(late_start, 100, "m3", "j3"),
            end(200),
        )

    assert check(added(60), {}) == [], "the runs going at the deploy and within its window hold no slot"
    assert properties(check(by_time(*added(60), sends[3], *run(70, 100, "m4", "j4")), {})) == ["type_concurrency"]


def test_checker_fifo_order_a_job_starts_after_the_jobs_before_it_in_its_group() -> None:
    first, second = sent(1, M1, "j1", group="g"), sent(2, M2, "j2", group="g")
    other = sent(3, M3, "j3", group="h")
    early = by_time(first, second, other, *run(10, 50, M1, "j1"), *run(20, 60, M2, "j2"), *run(20, 60, M3, "j3"))
    found = [(f.property, f.detail) for f in check(early)]
    assert found == [("fifo_order", "job j2 of group g starts before j1 ended")]
    after_dead_letter = by_time(first, second, dead_lettered(15, "m-dead", "j1", REASON), *run(20, 60, M2, "j2"))
    assert check(after_dead_letter) == []


def test_checker_fifo_order_a_cancelled_job_frees_its_group_once_its_execution_ended() -> None:
    """The receiver acknowledges a cancelled job's message (its DLQ copy may follow, sent by the cancel's
    claimant): the next job of its group may start once no execution runs the cancelled one."""
    first, second = sent(1, M1, "j1", group="g"), sent(2, M2, "j2", group="g")
    acknowledged = event(40, "outcome", "receiver", message_id=M1, job_id="j1", outcome="cancelled")
    stopped = by_time(first, second, *run(10, 30, M1, "j1", ok=False), acknowledged, *run(50, 60, M2, "j2"))
    assert check(stopped) == []
    still_running = by_time(first, second, *run(10, 70, M1, "j1", ok=False), acknowledged, *run(50, 60, M2, "j2"))
    assert properties(check(still_running)) == ["fifo_order"]


# -- a real seed ----------------------------------------------------------------------------------------------


# 816: a job of two messages, one dead-lettered by a copy of it; 9: a redrive's send retried after its answer
# was lost (the job runs again); 79: a job that succeeded after its cancel's mark, its success refused; 456: the
# echo of a late duplicate whose handling died; 350 (FIFO): a success after the mark, the workflow's reads of the
# lease throttled, so its execution ended SUCCEEDED; 771 (FIFO): a group's next job started once the receiver
# acknowledged a cancelled one, before its DLQ copy; 848 (FIFO): a redrive of two copies of one cancelled job
@pytest.mark.parametrize("seed", [3, 816, 9, 79, 456, 350, 771, 848])
def test_checker_agrees_with_the_simulator_on_a_real_seed(seed: int) -> None:
    from longjobs.sim.campaign import run_seed

    result = run_seed(seed)
    lines: list[str] = result.trace.records
    assert result.violation is None
    assert any('"event":"end"' in line for line in lines)  # nothing_lost was checked too
    assert check(lines, {LIMITED_TYPE: LIMIT}) == []


def _keeps_its_limits(seed: int) -> int:
    """The first admission seed from `seed` whose deploy, if any, leaves the limits alone."""
    from longjobs.sim.workload import draw

    return next(
        s for s in range(seed, seed + 100) if (d := draw(s, "admission").deploy) is None or "limit" not in d.change
    )


@pytest.mark.parametrize(("seed", "profile"), [(1, "fifo"), (_keeps_its_limits(2), "admission")])
def test_checker_agrees_with_the_simulator_on_fifo_and_admission_seeds(seed: int, profile: str) -> None:
    """A FIFO seed's groups keep their order, and an admission seed's limited type its limit, by both."""
    from longjobs.sim.campaign import run_seed

    result = run_seed(seed, profile)
    assert result.violation is None
    lines: list[str] = result.trace.records
    assert any('"group":' in line for line in lines) or profile != "fifo"
    assert check(lines, {LIMITED_TYPE: LIMIT}) == []
    assert check(lines, {LIMITED_TYPE: 1}) != [] or profile != "admission", "two of the type did run at once"


def test_checker_help_and_the_simulation_page_name_every_property(capsys: pytest.CaptureFixture[str]) -> None:
    """Each property `check` reports is named by `--help` and by docs/simulation.md's account of the checker."""
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    page = " ".join((REPO_ROOT / "docs" / "simulation.md").read_text(encoding="utf-8").split())
    account = page[page.index("re-checks") :].split(" from a trace")[0]

    for name in PROPERTIES:
        assert name in shown and f"`{name}`" in account, name


# -- an offline run's history (`longjobs.offline.history`) ----------------------------------------------------


def test_checker_no_lapse_delivery_excused_by_a_named_fault_is_exempt() -> None:
    """An offline run names the injected fault that explains a delivery while the job ran (a paused
    extender): not a lapse; the same delivery without it is one."""
    lapse = json.loads(delivered(30, M1, "j1", count=2))
    base = [sent(1, M1, "j1"), *run(11, 50, M1, "j1")]
    assert properties(check(by_time(*base, json.dumps(lapse)))) == ["no_lapse"]
    assert check(by_time(*base, json.dumps(lapse | {"excused": "extender paused"}))) == []


def test_checker_nothing_lost_a_copy_named_by_a_copied_event_counts_as_its_original() -> None:
    """The offline observer sees no calls: it names each copy with a `copied` event. A copy that ran the
    job and an original dead-lettered end the message both ways."""
    copied = event(5, "copied", "observer", message_id="m-copy", original=M1, job_id="j1")
    dead = dead_lettered(60, M1, "j1", {**REASON, "OriginalMessageId": M1})
    both = by_time(sent(1, M1, "j1"), copied, *run(11, 50, "m-copy", "j1"), dead, end(100))
    assert properties(check(both)) == ["nothing_lost"]
    assert properties(check([line for line in both if line != copied])) == [], "without it, two messages"


def test_checker_nothing_lost_a_stopped_service_leaves_its_queued_messages_alone() -> None:
    """A local service stopped by its user leaves messages queued: not lost. The rest is still checked."""
    queued = [sent(1, M1, "j1"), sent(2, M2, "j2"), *run(11, 50, M2, "j2", ok=False)]
    stopped_end = event(100, "end", "offline", left={"j1": 1}, stopped=True)
    findings = check(by_time(*queued, stopped_end))
    assert [(f.property, f.detail.split(" (")[0]) for f in findings] == [("nothing_lost", "job j2")]
    assert properties(check(by_time(*queued, end(100, {"j1": 1})))) == ["nothing_lost", "nothing_lost"]
