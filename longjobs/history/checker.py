"""An independent re-check of a simulation trace: seven of the promise's properties, from the recorded
history alone.

`python -m offline sim --seed S --trace FILE` writes one seed's trace as JSON lines (see
`longjobs.sim.trace`); `python -m offline run --trace FILE` writes the real offline runtime's history in
the same format (`longjobs.offline.history`). This module reads such a trace and re-derives, from its
events only:

- `single_execution`: at most one execution runs its job per message id at any time, and at most one per
  job id. An execution runs its job from its `job_started` event until its `job_ended` event (or its
  `execution_ended`, whichever comes first: an ended execution runs nothing).
- `single_run`: at most one job run per job id at any time. A run (a `run_started` event naming its
  `run` and `job_id`) lasts until its `run_ended` event: it may outlive its execution.
- `type_concurrency`: no more executions run jobs of a type at once than its limit (given to the checker:
  `--limit TYPE=N`; the type of a job is the one its `sent` event names).
- `fifo_order`: a job of a message group (its `sent` event's `group`) starts its job only once every job
  sent before it in that group succeeded, has a `dead_lettered` copy, or was cancelled (the receiver's
  `cancelled` outcome for its message, or the operator's `cancelled` event) with no execution running it.
- `once_per_message`: a job id that was `sent` (by the producer, or `redriven` from the DLQ by an
  operator) has at most as many executions that ended `SUCCEEDED` (an `execution_ended`, its job id from
  its `execution_started`) as it was sent. A `sent` whose `s3_event` (an S3 object creation that a
  notification fans out) was sent before is that event delivered again by S3, not a new message. A job
  run whose
  execution failed to record its success is retried, as at-least-once allows, and is not counted.
- `no_lapse`: no `delivered` of a message while one of its executions runs its job, except an injected
  at-least-once duplicate (`duplicate` true), a delivery that follows such an excused one before the
  receiver gave any `outcome` for the message (its handling died), or a delivery at or after
  `hold_ends - 1` (SQS's 12 h cap), or one whose `excused` names the injected fault that explains it
  (an offline run's history: a paused extender, more lost runs than the settings survive).
- `nothing_lost`: at the `end` event, every job id that was `sent` either succeeded (a `job_ended` with
  `succeeded` true, or an `inline_done` outcome of the receiver) or has a `dead_lettered` copy whose reason
  carries `ErrorType` and `ErrorMessage`, and has no messages `left` on the queues; no message of it did both
  (a job sent as two messages may end one way by each; a run that succeeded after an operator's cancel began
  (the operator's `cancel` event), its execution not ended SUCCEEDED before that, and whose message is in the
  DLQ as `Cancelled`, ended one way). A copy the processor sent of a message (an `sqs.send_message` call, or
  entry of a `sqs.send_message_batch`, whose `LongJobsAdmission` attribute names its `original`) counts as that
  message, as a DLQ copy's `OriginalMessageId` does, and so does a `copied` event's `message_id` (an offline
  run's history notes each copy the observer attributed to its `original`). A trace with no `end` line (the
  seed stopped early) is not checked for it; an `end` with `stopped` true (a local service stopped by its user)
  leaves out the jobs whose messages it lists as `left`: still queued, not lost.

Why it is independent: the simulator checks the same promise as the world changes, with its own monitor
(`longjobs.sim.properties`), hooked into the world's internals. This checker imports nothing from
`longjobs` (the standard library only) and never reads the simulator's own verdict (the `violation`
lines), so a bug in the monitor, in its hooks or in what the trace records shows up as a disagreement
between the two verdicts instead of being shared by both.

`python -m longjobs.history.checker [--limit TYPE=N ...] TRACE.jsonl` prints each finding and exits 1 if
there is any, else prints `ok: <records> records, <jobs> jobs` and exits 0 (2 when the trace cannot be
read, holds no record, or has a line that is neither an event nor a call).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

SINGLE_EXECUTION = "single_execution"
SINGLE_RUN = "single_run"
ONCE_PER_MESSAGE = "once_per_message"
NO_LAPSE = "no_lapse"
NOTHING_LOST = "nothing_lost"
TYPE_CONCURRENCY = "type_concurrency"
FIFO_ORDER = "fifo_order"
PROPERTIES = (SINGLE_EXECUTION, SINGLE_RUN, TYPE_CONCURRENCY, FIFO_ORDER, ONCE_PER_MESSAGE, NO_LAPSE, NOTHING_LOST)
"""What the checker re-checks: its `--help` and docs/simulation.md name each."""
REASON_KEYS = ("ErrorType", "ErrorMessage")
ADMISSION_ATTRIBUTE = "LongJobsAdmission"  # the attribute a copy carries, `original` naming its message


@dataclass(frozen=True)
class Finding:
    """A property that the trace breaks: which, when (virtual seconds since the seed's start) and how."""

    property: str
    t: float
    detail: str

    def __str__(self) -> str:
        return f"{self.property} at t={self.t}: {self.detail}"


class TraceError(ValueError):
    """A line of the trace is not what a trace line must be."""


@dataclass(frozen=True)
class _Run:
    """An execution running its job."""

    execution: str
    message_id: str
    job_id: str
    since: float


@dataclass
class _Checker:
    """The state the properties need, fed one record at a time in the trace's order."""

    findings: list[Finding] = field(default_factory=list)
    records: int = 0
    running: dict[str, _Run] = field(default_factory=dict)  # execution -> its job run
    by_message: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    by_job: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    sent: dict[str, list[str]] = field(default_factory=dict)  # job id -> its message ids, in order
    s3_events: set[tuple[str, str]] = field(default_factory=set)  # (job id, s3_event) of each S3 event sent
    succeeded: defaultdict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # job id -> evidence
    dead: defaultdict[str, list[tuple[str, dict[str, Any]]]] = field(
        default_factory=lambda: defaultdict(list)
    )  # job id -> (message id, reason) per DLQ copy
    job_of_execution: dict[str, str] = field(default_factory=dict)  # execution -> its job id
    done: defaultdict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # job id -> SUCCEEDED
    originals: dict[str, str] = field(default_factory=dict)  # a copy's message id -> its original's
    succeeded_messages: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # by job id
    end: tuple[float, dict[str, Any]] | None = None  # (t, the `end` record)
    message_of_execution: dict[str, str] = field(default_factory=dict)  # execution -> the message it ran for
    limits: dict[str, int] = field(default_factory=dict)  # job type -> the most of its jobs that may run at once
    type_of: dict[str, str] = field(default_factory=dict)  # job id -> its type, as `sent` names it
    by_type: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # type -> executions
    # a type a deploy limited: the executions that run, or start within the window given, hold no slot
    excused: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    excused_until: dict[str, float] = field(default_factory=dict)
    groups: defaultdict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # group -> job ids
    group_of: dict[str, str] = field(default_factory=dict)  # job id -> its message group
    finished: set[str] = field(default_factory=set)  # job ids that succeeded or have a DLQ copy
    recorded: set[str] = field(default_factory=set)  # messages (originals) whose execution ended SUCCEEDED
    cancel_begun: set[str] = field(default_factory=set)  # job ids an operator began to cancel
    cancelled: set[str] = field(default_factory=set)  # job ids acknowledged, or finished, as cancelled
    echo_pending: set[str] = field(default_factory=set)  # messages whose excused delivery has no outcome yet
    runs: dict[str, tuple[str, float]] = field(default_factory=dict)  # a job run going on -> (job id, since)

    # -- reading --------------------------------------------------------------------------------------------

    def feed(self, line: str, number: int) -> None:
        if not line.strip():
            return
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"line {number}: not JSON ({exc})") from exc
        if not isinstance(record, dict):
            raise TraceError(f"line {number}: not a JSON object")
        self.records += 1
        event = record.get("event")
        if event is None:
            if "call" not in record:
                raise TraceError(f"line {number}: neither an event nor a call")
            try:
                self._call(record)
            except (AttributeError, TypeError) as exc:
                raise TraceError(f"line {number}: malformed {record['call']!r} call ({exc})") from exc
            return
        handler = _HANDLERS.get(str(event))
        if handler is not None:
            try:
                handler(self, _number(record, "t"), record)
            except (KeyError, TypeError) as exc:
                raise TraceError(f"line {number}: malformed {event!r} event ({exc})") from exc

    def finish(self) -> list[Finding]:
        if self.end is not None:
            self._nothing_lost(*self.end)
        return self.findings

    def _find(self, name: str, t: float, detail: str) -> None:
        self.findings.append(Finding(name, t, detail))

    # -- the events -----------------------------------------------------------------------------------------

    def _sent(self, t: float, record: dict[str, Any]) -> None:
        """The producer's message, or one an operator's redrive put back on the jobs queue (`redriven`): each
        is a message of its job, but an S3 notification of an event already sent (its `s3_event`), which S3
        delivered again."""
        job_id = _text(record, "job_id")
        event = record.get("s3_event")
        if isinstance(event, str):
            if (job_id, event) in self.s3_events:
                return
            self.s3_events.add((job_id, event))
        self.sent.setdefault(job_id, []).append(_text(record, "message_id"))
        if isinstance(record.get("type"), str):
            self.type_of.setdefault(job_id, record["type"])
        group = record.get("group")
        if isinstance(group, str) and job_id not in self.group_of:
            self.group_of[job_id] = group
            self.groups[group].append(job_id)

    def _job_started(self, t: float, record: dict[str, Any]) -> None:
        execution, message_id, job_id = (_text(record, key) for key in ("execution", "message_id", "job_id"))
        self._stop(execution)  # a second start of one execution replaces its run instead of overlapping it
        self.running[execution] = _Run(execution, message_id, job_id, t)
        self.message_of_execution[execution] = message_id
        self.by_message[message_id].add(execution)
        self.by_job[job_id].add(execution)
        for kind, key, runs in (("message", message_id, self.by_message), ("job", job_id, self.by_job)):
            if len(runs[key]) > 1:
                others = ", ".join(
                    f"{other} (since t={self.running[other].since})" for other in sorted(runs[key] - {execution})
                )
                self._find(SINGLE_EXECUTION, t, f"{kind} {key}: {execution} starts its job while {others} runs")
        job_type = self.type_of.get(job_id)
        if job_type is not None:
            self.by_type[job_type].add(execution)
            if t < self.excused_until.get(job_type, -math.inf):
                self.excused[job_type].add(execution)
            counted = self.by_type[job_type] - self.excused[job_type]
            limit = self.limits.get(job_type)
            if limit is not None and len(counted) > limit:
                together = ", ".join(sorted(counted))
                self._find(TYPE_CONCURRENCY, t, f"type {job_type}: {together} run at once, above its limit {limit}")
        group = self.group_of.get(job_id)
        if group is not None:
            earlier = self.groups[group][: self.groups[group].index(job_id)]
            waiting = [job for job in earlier if not self._ended(job)]
            if waiting:
                self._find(FIFO_ORDER, t, f"job {job_id} of group {group} starts before {', '.join(waiting)} ended")

    def _ended(self, job_id: str) -> bool:
        """A job that no longer holds its group: it succeeded or has a DLQ copy, or it was cancelled and no
        execution runs it (the receiver acknowledges a cancelled message; its DLQ copy may follow)."""
        return job_id in self.finished or (job_id in self.cancelled and not self.by_job[job_id])

    def _run_started(self, t: float, record: dict[str, Any]) -> None:
        run, job_id = _text(record, "run"), _text(record, "job_id")
        others = sorted(f"{other} (since t={since})" for other, (job, since) in self.runs.items() if job == job_id)
        if others:
            self._find(SINGLE_RUN, t, f"job {job_id}: run {run} starts while {', '.join(others)} runs")
        self.runs[run] = (job_id, t)

    def _run_ended(self, t: float, record: dict[str, Any]) -> None:
        self.runs.pop(_text(record, "run"), None)

    def _call(self, record: dict[str, Any]) -> None:
        """An AWS call: a copy sent (its answer recorded, alone or in a batch) names the message it copies."""
        answer = record.get("answer")
        if not isinstance(answer, dict):
            return
        params = record.get("params") or {}
        if record.get("call") == "sqs.send_message":
            self._copied(params, answer.get("MessageId"))
        elif record.get("call") == "sqs.send_message_batch":
            entries = {entry.get("Id"): entry for entry in params.get("Entries") or []}
            for sent in answer.get("Successful") or []:
                self._copied(entries.get(sent.get("Id")) or {}, sent.get("MessageId"))

    def _copied(self, message: dict[str, Any], copy_id: Any) -> None:
        """A message sent (`SendMessage`'s parameters, or a batch's entry) as `copy_id`: a copy when its
        admission attribute names an original."""
        attributes = message.get("MessageAttributes") or {}
        raw = (attributes.get(ADMISSION_ATTRIBUTE) or {}).get("StringValue")
        try:
            original = json.loads(raw).get("original") if isinstance(raw, str) else None
        except (json.JSONDecodeError, AttributeError) as exc:
            raise TraceError(f"a copy's {ADMISSION_ATTRIBUTE} attribute is not a JSON object ({exc})") from exc
        if isinstance(original, str) and isinstance(copy_id, str):
            self.originals[copy_id] = original

    def _copied_event(self, t: float, record: dict[str, Any]) -> None:
        """An observer's note that a message is a copy of another (an offline run's history)."""
        self.originals[_text(record, "message_id")] = _text(record, "original")

    def _original(self, message_id: str) -> str:
        return self.originals.get(message_id, message_id)

    def _job_ended(self, t: float, record: dict[str, Any]) -> None:
        execution = _text(record, "execution")
        run = self.running.get(execution)
        self._stop(execution)
        if _flag(record, "succeeded"):
            job_id = _text(record, "job_id")
            self.finished.add(job_id)
            self.succeeded[job_id].append(f"execution {execution} at t={t}")
            if run is not None:
                self.succeeded_messages[job_id].add(self._original(run.message_id))

    def _execution_started(self, t: float, record: dict[str, Any]) -> None:
        self.job_of_execution[_text(record, "execution")] = _text(record, "job_id")

    def _execution_ended(self, t: float, record: dict[str, Any]) -> None:
        execution = _text(record, "execution")
        self._stop(execution)
        job_id = self.job_of_execution.get(execution)
        if record.get("status") != "SUCCEEDED" or job_id is None:
            return
        if execution in self.message_of_execution and job_id not in self.cancel_begun:
            # after a cancel began its mark may have refused the success: the workflow ends SUCCEEDED all the
            # same when it cannot read the lease (`longjobs.construct.workflow`), recording nothing
            self.recorded.add(self._original(self.message_of_execution[execution]))
        done = self.done[job_id]
        done.append(f"{execution} at t={t}")
        sent = self.sent.get(job_id, [])
        if len(sent) < len(done):
            self._find(
                ONCE_PER_MESSAGE,
                t,
                f"job {job_id}: {len(done)} executions SUCCEEDED ({'; '.join(done)}) from {len(sent)} message(s) sent",
            )

    def _stop(self, execution: str) -> None:
        run = self.running.pop(execution, None)
        if run is not None:
            self.by_message[run.message_id].discard(execution)
            self.by_job[run.job_id].discard(execution)
            self.by_type[self.type_of.get(run.job_id, "")].discard(execution)
            self.excused[self.type_of.get(run.job_id, "")].discard(execution)

    def _delivered(self, t: float, record: dict[str, Any]) -> None:
        message_id = _text(record, "message_id")
        runs = self.by_message.get(message_id)
        if not runs:
            self.echo_pending.discard(message_id)
            return
        if isinstance(record.get("excused"), str):
            return  # an offline run's injected fault that explains it (`longjobs.offline.history`)
        if _flag(record, "duplicate") or message_id in self.echo_pending:
            # an injected duplicate hides the message under a handle only its own handling knows: until a
            # receive of it has an `outcome`, the next delivery is that handling's echo, not a lapse
            self.echo_pending.add(message_id)
            return
        hold_ends = record.get("hold_ends")
        if hold_ends is not None and t >= _as_number(hold_ends, "hold_ends") - 1:
            return
        cap = "no lease renew-until" if hold_ends is None else f"before its cap (hold_ends={hold_ends})"
        self._find(
            NO_LAPSE,
            t,
            f"message {message_id} delivered again from {record.get('queue')!r} "
            f"(receive count {record.get('receive_count')}) while {', '.join(sorted(runs))} runs its job, "
            f"not a duplicate, {cap}",
        )

    def _outcome(self, t: float, record: dict[str, Any]) -> None:
        self.echo_pending.discard(_text(record, "message_id"))
        if record["outcome"] == "cancelled" and isinstance(record.get("job_id"), str):
            self.cancelled.add(record["job_id"])
        if record["outcome"] == "inline_done":
            job_id, message_id = _text(record, "job_id"), _text(record, "message_id")
            self.finished.add(job_id)
            self.succeeded[job_id].append(f"inline in the receiver ({message_id}) at t={t}")
            self.succeeded_messages[job_id].add(self._original(message_id))

    def _dead_lettered(self, t: float, record: dict[str, Any]) -> None:
        message_id = _text(record, "message_id")
        job_id = record.get("job_id")
        reason = record.get("reason")
        self.finished.add(job_id if isinstance(job_id, str) else message_id)
        self.dead[job_id if isinstance(job_id, str) else message_id].append(
            (message_id, reason if isinstance(reason, dict) else {})
        )

    def _both(self, job_id: str, dead: list[tuple[str, dict[str, Any]]]) -> bool:
        """Whether a message of the job (a copy counting as its original) succeeded and was dead-lettered. A
        run that succeeded after an operator's cancel began, its success not recorded (its execution did not
        end SUCCEEDED before), and whose message is in the DLQ as `Cancelled`, ended one way: cancelled."""
        dead_messages = {self._original(str(reason.get("OriginalMessageId") or copy)) for copy, reason in dead}
        cancelled = {
            self._original(str(reason.get("OriginalMessageId") or copy))
            for copy, reason in dead
            if reason.get("ErrorType") == "Cancelled"
        }
        return bool(self.succeeded_messages[job_id] & (dead_messages - (cancelled - self.recorded)))

    def _operator(self, t: float, record: dict[str, Any]) -> None:
        """An operator's cancel of a job: begun (`cancel`), or finished (`cancelled`)."""
        job_id = record.get("job_id")
        if record.get("actor") != "operator" or not isinstance(job_id, str):
            return
        (self.cancel_begun if record["event"] == "cancel" else self.cancelled).add(job_id)

    def _end(self, t: float, record: dict[str, Any]) -> None:
        self.end = (t, record)

    def _limits(self, t: float, record: dict[str, Any]) -> None:
        """A deploy changed which types are limited: `type_concurrency` holds the new limits from here on. A
        type newly limited excuses its executions that run, or start within `excused_s` (invocations of the
        replaced functions still running), since they hold no slot."""
        limits = record["limits"]
        if not isinstance(limits, dict):
            raise TypeError(f"limits is {limits!r}, not an object")
        new = {str(name): _whole(value, name) for name, value in limits.items()}
        for job_type in set(new) - set(self.limits):
            self.excused[job_type] |= self.by_type[job_type]
            self.excused_until[job_type] = t + _number(record, "excused_s")
        self.limits = new

    # -- the end --------------------------------------------------------------------------------------------

    def _nothing_lost(self, t: float, record: dict[str, Any]) -> None:
        left = record.get("left") or {}
        if not isinstance(left, dict):
            raise TraceError(f"the end record's `left` is not an object: {left!r}")
        stopped = _flag(record, "stopped")
        for job_id in sorted(self.sent):
            count = left.get(job_id, 0)
            if count:
                if not stopped:
                    self._find(NOTHING_LOST, t, f"job {job_id}: {count} message(s) still on the jobs or waiting queues")
                continue
            done, dead = self.succeeded.get(job_id), self.dead.get(job_id)
            if not done and not dead:
                self._find(
                    NOTHING_LOST,
                    t,
                    f"job {job_id} (messages {', '.join(self.sent[job_id])}): never succeeded and not in the DLQ",
                )
            elif done and dead and self._both(job_id, dead):
                copies = ", ".join(message_id for message_id, _ in dead)
                self._find(
                    NOTHING_LOST,
                    t,
                    f"job {job_id}: succeeded ({'; '.join(done)}) and also dead-lettered (copies {copies})",
                )
            elif dead:
                for message_id, reason in dead:
                    missing = [key for key in REASON_KEYS if not isinstance(reason.get(key), str) or not reason[key]]
                    if missing:
                        self._find(
                            NOTHING_LOST,
                            t,
                            f"job {job_id}: DLQ copy {message_id} without a reason (no {', '.join(missing)}; "
                            f"attributes {sorted(reason)})",
                        )


_HANDLERS = {
    "sent": _Checker._sent,
    "redriven": _Checker._sent,
    "delivered": _Checker._delivered,
    "outcome": _Checker._outcome,
    "execution_started": _Checker._execution_started,
    "execution_ended": _Checker._execution_ended,
    "job_started": _Checker._job_started,
    "job_ended": _Checker._job_ended,
    "run_started": _Checker._run_started,
    "run_ended": _Checker._run_ended,
    "dead_lettered": _Checker._dead_lettered,
    "copied": _Checker._copied_event,
    "cancel": _Checker._operator,
    "cancelled": _Checker._operator,
    "end": _Checker._end,
    "limits": _Checker._limits,
}


def _text(record: dict[str, Any], key: str) -> str:
    value = record[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} is {value!r}, not a string")
    return value


def _flag(record: dict[str, Any], key: str) -> bool:
    value = record.get(key, False)
    if not isinstance(value, bool):
        raise TypeError(f"{key} is {value!r}, not a boolean")
    return value


def _number(record: dict[str, Any], key: str) -> float:
    return _as_number(record[key], key)


def _as_number(value: object, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{key} is {value!r}, not a number")
    return float(value)


def _whole(value: object, key: str) -> int:
    number = _as_number(value, key)
    if not number.is_integer() or number < 0:
        raise TypeError(f"{key} is {value!r}, not a whole number")
    return int(number)


def _run(lines: Iterable[str], limits: dict[str, int] | None = None) -> _Checker:
    checker = _Checker(limits=dict(limits or {}))
    for number, line in enumerate(lines, start=1):
        checker.feed(line, number)
    checker.finish()
    return checker


def check(lines: Iterable[str], limits: dict[str, int] | None = None) -> list[Finding]:
    """The findings of a trace (its JSON lines, in order): empty when the properties hold. `limits`: each
    limited job type's `max_concurrency` (the catalog the seed ran with).

    Raises `TraceError` (a `ValueError`) on a line that is not a JSON object or an event missing a field."""
    return _run(lines, limits).findings


def _limit(text: str) -> tuple[str, int]:
    name, _, value = text.partition("=")
    if not name or not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected TYPE=N, N a positive whole number")
    return name, int(value)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m longjobs.history.checker",
        description=f"Re-check {', '.join(PROPERTIES[:-1])} and {PROPERTIES[-1]} from a simulation trace.",
    )
    parser.add_argument(
        "trace", help="a trace written by `python -m offline sim --trace FILE` or `run --trace FILE` (JSON lines)"
    )
    parser.add_argument(
        "--limit",
        type=_limit,
        action="append",
        default=[],
        metavar="TYPE=N",
        help="a job type's max_concurrency, for type_concurrency (the simulation's catalog: limited=2)",
    )
    args = parser.parse_args(argv)
    try:
        with open(args.trace, encoding="utf-8") as lines:
            checker = _run(lines, dict(args.limit))
    except (OSError, UnicodeDecodeError, TraceError) as exc:
        print(f"error: {args.trace}: {exc}", file=sys.stderr)
        return 2
    if not checker.records:
        print(f"error: {args.trace}: no records, so nothing to check", file=sys.stderr)
        return 2
    for finding in checker.findings:
        print(finding)
    if checker.findings:
        return 1
    print(f"ok: {checker.records} records, {len(checker.sent)} jobs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
