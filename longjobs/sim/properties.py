"""The promise as named properties, checked as the world changes, and the coverage of what was reached.

`always` properties fail the seed at the step they break (`PropertyViolation`, raised out of the loop);
`eventually` properties are checked once the seed ends (after its quiet period); `sometimes` names are
coverage: a campaign reports the ones no seed reached.

- `single_execution_per_message`, `single_execution_per_job`, `type_concurrency`: at most one execution
  runs its job per message and per job id, and no more than a limited type's `max_concurrency` per type.
- `single_run_per_job`: at most one job run (what writes output and costs money: an EMR Serverless run
  from its submission to its end state, a Spark worker's run from its pickup to its exit) per job id at
  a time. An execution stopped or timed out leaves its run to end later (Step Functions' cancel is best
  effort, a worker stops at its next refused heartbeat): a new attempt's run waits for it.
- `once_per_message`: a job id is done at most as many times as its producer sent messages of it (a
  copy the processor makes of a message, to wait or to park, never runs the job a second time); in a
  notification the receiver fans out (of one marker too), an S3 event (a marker's creation) counts as
  one message of its partition's job, however often the notification is handled or S3 delivers the
  event. Done: an
  execution of it that ended SUCCEEDED (its success recorded and its message deleted). A job whose run
  succeeded but whose execution failed to record it is retried, as at-least-once allows: that run is
  not counted; nor are inline runs (an inline job runs again when its deletion is lost).
- `no_lapse`: a message whose execution runs its job is not received again, except by an injected
  duplicate delivery (and the receive that follows when the duplicate's own handling died, leaving no
  outcome: only that handling knew its handle; so on while each such receive's handling dies) or at
  SQS's 12 h limit.
- `fifo_order`: on a FIFO queue, a job starts only once every job sent before it in its message group
  succeeded, is in the DLQ, or was cancelled by an operator and its execution has ended. A redrive of the
  DLQ sends a job anew: into its own group, at that group's end.
- `held_while_running`: no execution runs its job unless the lease of its message is ACTIVE and names
  it, at the job's start and after every write to that lease; or CANCELLED and names it (a cancel marks
  the lease before it stops the execution, and keeps the message hidden until it is finished).
- `attempts_started`: every attempt a message's history counts (in its lease, and in its DLQ copy's
  `Attempts`) names an execution that was started: a start refused, or a receive that died before its
  start, is no attempt (`max_attempts` counts runs, `max_refused_starts` the rest).
- `stopped_as_read`: the extender stops an execution (its lease can no longer be held: a handle SQS
  refuses, the 12 h limit, the max renewal) only on what it read: its last consistent read of the lease,
  in that invocation, shows the lease ACTIVE, naming that execution, of the receive the due index showed
  it when it planned; or CANCELLED naming it (a cancel the extender finishes stops its execution). A newer
  receive (a redelivery that adopted the running execution, or started its
  own) is not the one whose handle was refused or whose time ran out: stopping it kills a job that holds
  its message. (A receive landing between that read and the stop is a race no reader can close: the
  property judges the decision on what it read.)
- `stopped_with_cause`: every stop the extender makes has a cause the trace shows: a cap, or a handle truly
  lost. An execution whose job succeeded and whose message was then deleted is not stopped: its handle was
  refused because its work was done (the message deleted by a settlement that had not closed the lease
  yet, or whose close was lost), not because the message may go to another consumer. Stopping it turns a
  job that succeeded into an aborted execution and a LOST lease.
  Nor is a job stopped while SQS still hides its message under the handle its lease names, more than a
  chunk and the safety margin before the attempt's hard stop (`renew_until`, SQS's 12 h): that job is
  healthy and its lease holdable (a renewal's throttle taken for a lost handle stops it).
- `cancelled_never_succeeds`: a message sent to the DLQ as `Cancelled` (an operator's `longjobs cancel`) never
  has an execution of it end SUCCEEDED afterwards: the workflow's success close refuses a CANCELLED lease, so
  a cancel whose stop did not land (or whose operator died after the mark) does not let its job succeed and
  a redrive of the DLQ copy run it a second time. An execution that ends SUCCEEDED while its lease stays
  CANCELLED recorded no success: its close was refused or failed, and so did its reads, after their retries
  (the workflow then ends SUCCEEDED, as its job did, and leaves the lease to whoever finishes it). Nor
  does a lease the cancel marked become SUCCEEDED, or any other close of its attempt (RELEASED would give
  the job back to run): the mark is final, whoever writes next. The simulation's operator
  (`longjobs.sim.operator`) cancels running jobs, some cancels cut short at one of their steps;
  `tests/functional/test_cancel_cut_short.py` drives it on moto.
- `refused_start_returns`: a message whose start Step Functions refused, and that the receiver gave back
  (its lease closed RELEASED, "start refused"), is received again by the time it shows plus the mapping's
  reach (`REFUSED_START_REACH_S` past the receiver's timeout), unless the release's own visibility change
  failed (the message then shows when its chunk ends).
- `redriven_settles` (eventually): every message the operator's redrive put back on the jobs queue (a
  new message of its job) comes to an end: its job succeeds, or a message of it reaches the DLQ again
  (with a reason, as `nothing_lost` checks). A redriven message acknowledged unrun is lost.
- `newest_receive`: a lease never goes back to an older receive of its message than one it named: a
  stale receive (an older handle, a redelivery handled late) is fenced off every write.
- `attempt_within_cap`: a job's run ends by its attempt's hard stop (the `renew_until` of its lease when
  it started: `max_renewal_s`, SQS's 12 h) plus the extender's reach to stop it (`CAP_SLACK_RUNS`
  periods): a redelivery that adopts the running attempt does not extend it.
- `dlq_keeps_history`: a DLQ copy the receiver sends (with a reason) carries in `Attempts` at least the
  failed attempts the lease of its message records then: a body refused after a deploy, a cancel, a
  job id held too long, all keep the history their owner needs.
- `needless_redeliveries`: a message whose job succeeded (its lease SUCCEEDED) is handed out again only
  with a cause the trace shows, so their number is bounded by the faults. The causes: a delete of it
  tried (one receive per try: a delete that failed, or named an old handle), a success close that could
  not read its lease and so left the message to the receiver, its close still under way (the execution
  that marked it runs on to its delete), an injected duplicate delivery, or an earlier such receive
  whose handling reached no outcome (a read failed) or whose invocation died before the event source
  mapping deleted it. A success that leaves its message, or a receiver that gives a done job's message
  back, breaks it.
- `nothing_lost` (eventually): every job either succeeded (no message of it left) or is in the DLQ with a
  reason (a message of it there at the end: one that left the DLQ other than by a redrive is lost); every
  job message the producer sent ran to success or reached the DLQ, one of a job that succeeded by
  another message too; and no message of it both (a job sent as two messages may end one way by each; a
  run that ended after a cancel's mark, its success refused, ends in the DLQ as Cancelled alone); nothing
  is left on the jobs or waiting queues.
- `settled_in_time` (eventually): every job is settled by the bound derived from the settings.
- `holds_freed` (eventually): every job lock and slot is free once no execution runs.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from longjobs.engine.cancel import CancelRecord
from longjobs.engine.execution import parse_execution_name
from longjobs.engine.lease.codec import item_to_lease
from longjobs.engine.lease.lock import FREE, LOCK_STATE_ATTR, is_lock_key
from longjobs.engine.lease.schema import (
    DUE_INDEX,
    EXECUTION_ATTR,
    HANDLE_ATTR,
    HISTORY_ATTR,
    PARTITION_KEY,
    STATUS_ATTR,
)

REFUSED_START_REACH_S = 30.0
"""How long past the receiver's timeout a message shown again may wait for the mapping's receive: a poller
busy with a batch ends it within the receiver's timeout, an idle one answers its long poll at once, and
the world's pollers receive up to 10 of the visible messages at a time."""
ATTEMPT_CLOSES = ("SUCCEEDED", "RELEASED", "LOST", "CAPPED")
"""The statuses an attempt's close writes over its ACTIVE lease (the workflow's, the extender's)."""
RELEASE_FAILED = "release visibility change failed"
"""What `longjobs.engine.settle.release` notes on a lease whose release SQS did not apply."""

ALWAYS = (
    "fifo_order",
    "single_execution_per_message",
    "single_execution_per_job",
    "single_run_per_job",
    "once_per_message",
    "type_concurrency",
    "no_lapse",
    "held_while_running",
    "attempts_started",
    "stopped_as_read",
    "stopped_with_cause",
    "cancelled_never_succeeds",
    "refused_start_returns",
    "dlq_keeps_history",
    "dlq_send_claimed",
    "newest_receive",
    "attempt_within_cap",
    "needless_redeliveries",
)
EVENTUALLY = ("nothing_lost", "redriven_settles", "settled_in_time", "holds_freed")


class PropertyViolation(BaseException):
    """An `always` property broke: the seed stops here. A BaseException so that no handler of the code
    under test can swallow it."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"{name}: {detail}")
        self.name = name
        self.detail = detail


@dataclass(frozen=True)
class Violation:
    property: str
    detail: str
    t: float  # virtual seconds since the seed's start
    step: int


@dataclass
class Running:
    """An execution running its job."""

    arn: str
    message_id: str
    job_key: str
    job_type: str
    cap: float | None = None
    """The `renew_until` of the lease when the job started: the attempt's hard stop (epoch seconds)."""


@dataclass
class Monitor:
    """What the properties need to know, kept up to date by the world's hooks."""

    limits: dict[str, int]  # job type -> max_concurrency
    coverage: Counter[str] = field(default_factory=Counter)
    running: dict[str, Running] = field(default_factory=dict)  # execution ARN -> its job run
    by_message: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    by_job: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    sent: Counter[str] = field(default_factory=Counter)  # job key -> messages of it the producer sent
    sent_messages: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # job key -> their ids
    succeeded: Counter[str] = field(default_factory=Counter)  # job key -> job runs that succeeded
    done: Counter[str] = field(default_factory=Counter)  # job key -> executions of it that ended SUCCEEDED
    dead_lettered: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    originals: dict[str, str] = field(default_factory=dict)  # a copy's message id -> the producer's message id
    # job key -> the producer's messages of it whose job succeeded, and those dead-lettered
    succeeded_messages: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    dead_messages: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    duplicates: set[str] = field(default_factory=set)  # message ids with an injected duplicate delivery due
    excuse_lapses: bool = False  # a written scenario that loses more extender runs than the design survives
    groups: dict[str, list[str]] = field(default_factory=dict)  # FIFO: group -> its job ids in send order
    # (extender invocation, message id) -> its lease's item as the due index showed it, and as last read
    planned: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    reread: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)  # names of the executions Step Functions started
    job_succeeded: set[str] = field(default_factory=set)  # ARNs of the executions whose job succeeded
    cancelled_dead: set[str] = field(default_factory=set)  # producer's message ids in the DLQ as `Cancelled`
    # job key -> the producer's messages of it whose success an execution recorded (it ended SUCCEEDED)
    recorded_messages: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    returns_due: dict[str, float] = field(default_factory=dict)  # message id -> when a refused start is back
    redriven_open: dict[str, set[str]] = field(default_factory=dict)  # job key -> its redriven messages, no end yet
    receive_high: dict[str, int] = field(default_factory=dict)  # lease key -> the newest receive it named
    cap_slack_s: float = float("inf")  # how long past its hard stop a job may run: the extender's reach to stop it
    cap_early_s: float = float("inf")  # how long before its hard stop an attempt may be capped (a chunk refused)
    echo_pending: set[str] = field(default_factory=set)  # messages whose excused receive has no outcome yet
    cancel_marked: set[str] = field(default_factory=set)  # leases an operator's cancel marked CANCELLED
    needless: NeedlessRedeliveries = field(init=False)  # `needless_redeliveries`' own evidence
    runs: RunsPerJob = field(init=False)  # `single_run_per_job`'s own evidence
    types: TypeConcurrency = field(init=False)  # `type_concurrency`'s own evidence
    order: FifoOrder = field(init=False)  # `fifo_order`'s own evidence

    def __post_init__(self) -> None:
        self.needless = NeedlessRedeliveries(self.coverage, lambda: self.excuse_lapses)
        self.runs = RunsPerJob(self.coverage)
        self.types = TypeConcurrency(self.limits)
        self.order = FifoOrder(self.coverage, self.groups)

    def reach(self, name: str, count: int = 1) -> None:
        self.coverage[name] += count

    # -- the job's runs -------------------------------------------------------------------------------------

    def job_started(self, run: Running, lease: dict[str, Any] | None) -> None:
        self.running[run.arn] = run
        self.by_message[run.message_id].add(run.arn)
        self.by_job[run.job_key].add(run.arn)
        self.reach("job_started")
        self._check_held(run, lease, "at its start")
        if len(self.by_message[run.message_id]) > 1:
            raise PropertyViolation(
                "single_execution_per_message",
                f"message {run.message_id} runs in {sorted(self.by_message[run.message_id])}",
            )
        if len(self.by_job[run.job_key]) > 1:
            raise PropertyViolation(
                "single_execution_per_job", f"job {run.job_key} runs in {sorted(self.by_job[run.job_key])}"
            )
        self.order.started(run.job_key, self.by_job)
        self.types.started(run.job_type, run.arn)

    def job_ended(self, arn: str, *, succeeded: bool, now: float | None = None) -> None:
        run = self.running.pop(arn, None)
        if run is None:
            return
        if run.cap is not None and now is not None and now > run.cap + self.cap_slack_s and not self.excuse_lapses:
            raise PropertyViolation(
                "attempt_within_cap",
                f"{arn} ran its job {now - run.cap:.0f} s past its attempt's hard stop "
                f"(slack {self.cap_slack_s:.0f} s)",
            )
        self.by_message[run.message_id].discard(arn)
        self.by_job[run.job_key].discard(arn)
        self.types.ended(run.job_type, arn)
        if succeeded:
            self.job_succeeded.add(arn)
            self.job_done(run.job_key, run.message_id)

    def copied(self, copy_id: str, original_id: str) -> None:
        """The processor sent a copy of the producer's message `original_id` (to wait, or parked)."""
        self.originals[copy_id] = original_id

    def redriven(self, job_key: str, message_id: str, group: str | None = None) -> None:
        """The operator's redrive put a message of `job_key` back on the jobs queue: a message of its own.
        FIFO: in `group`, which must be its job's own (`fifo_order`: else it runs beside its group's jobs)."""
        self.order.redriven(job_key, group, again=job_key in self.redriven_open)
        self.sent[job_key] += 1
        self.redriven_open.setdefault(job_key, set()).add(message_id)
        self.reach("redriven")

    def _redriven_ended(self, job_key: str, how: str) -> None:
        if self.redriven_open.pop(job_key, None):
            self.reach(f"redriven:{how}")

    def job_done(self, job_key: str, message_id: str) -> None:
        """A job succeeded (in its execution, or inline in the receiver), run by `message_id` (or a copy)."""
        self._redriven_ended(job_key, "succeeded")
        self.succeeded[job_key] += 1
        self.succeeded_messages[job_key].add(self.originals.get(message_id, message_id))
        self.order.finished.add(job_key)

    def job_recorded(self, job_key: str, message_id: str | None = None) -> None:
        """A job is done for good: an execution of it, run for `message_id`, ended SUCCEEDED, unless its lease
        stays CANCELLED (see `cancelled_never_succeeds`: the cancel settles the message, not this success)."""
        if message_id is not None and message_id in self.cancel_marked:
            self.reach("cancelled:succeeded_unrecorded")
            return
        original = self.originals.get(message_id, message_id) if message_id is not None else None
        if original is not None and original in self.cancelled_dead:
            raise PropertyViolation(
                "cancelled_never_succeeds",
                f"job {job_key} succeeded from message {original}, which is in the DLQ as Cancelled",
            )
        self.done[job_key] += 1
        if original is not None:
            self.recorded_messages[job_key].add(original)
        if self.sent[job_key] < self.done[job_key]:
            raise PropertyViolation(
                "once_per_message",
                f"job {job_key} done {self.done[job_key]} times from {self.sent[job_key]} message(s) sent",
            )

    # -- SQS ------------------------------------------------------------------------------------------------

    def received(self, message_id: str, *, now: float, hold_ends: float | None) -> None:
        """A receive of `message_id` at `now`; `hold_ends`: the renew-until of its lease (the 12 h limit
        less the margin, or the max renewal), when it has one (both in seconds since the seed's start)."""
        due = self.returns_due.pop(message_id, None)
        if due is not None:
            if now > due:
                raise PropertyViolation(
                    "refused_start_returns",
                    f"message {message_id}, whose start was refused, was received again at {now:.1f} s, "
                    f"after {due:.1f} s",
                )
            self.reach("refused_start:received_again")
        if message_id in self.duplicates:
            self.duplicates.discard(message_id)
            self.reach("duplicate_delivery_received")
            # its receive hides the message for the queue's visibility timeout under a handle only its own
            # handling knows: if that handling dies (no outcome), the message shows again then, its echo
            self.echo_pending.add(message_id)
            return
        if not self.by_message.get(message_id):
            self.echo_pending.discard(message_id)
            return
        if hold_ends is not None and now >= hold_ends - 1:
            self.reach("received_at_cap_while_running")
            return
        if message_id in self.echo_pending:  # the excused receive's handling died: this is its echo
            self.reach("duplicate_delivery_echo")
            return  # still pending: this echo's own handling may die too
        if self.excuse_lapses:
            self.reach("lapse_excused")
            return
        raise PropertyViolation(
            "no_lapse", f"message {message_id} was received again while {sorted(self.by_message[message_id])} runs"
        )

    def handled(self, message_id: str) -> None:
        """The receiver decided a receive of `message_id` (its outcome): an excused receive's echo is over."""
        self.echo_pending.discard(message_id)
        self.needless.handled(message_id)

    def start_refused(self, message_id: str, *, due: float) -> None:
        """The receiver gave back a message whose start was refused: it must be received again by `due`."""
        self.returns_due[message_id] = due
        self.reach("refused_start:released")

    def execution_started(self, name: str) -> None:
        self.started.add(name)

    def dead_lettered_copy(
        self, job_key: str, attributes: dict[str, Any], message_id: str, items: Mapping[str, Any] | None = None
    ) -> None:
        """A message of `job_key` reached the DLQ: the receiver's copy (naming the producer's message), or the
        message itself, moved by the queue's redrive. `items`: the lease table as it is now."""
        original = str(attributes.get("OriginalMessageId", {}).get("StringValue", message_id))
        lease_history = (items or {}).get(original, {}).get(HISTORY_ATTR, {}).get("S")
        copied = attributes.get("Attempts", {}).get("StringValue")
        self._check_attempts(copied, f"the DLQ copy of job {job_key}")
        if "ErrorType" in attributes and _attempts(copied) < _attempts(lease_history):
            raise PropertyViolation(
                "dlq_keeps_history",
                f"the DLQ copy of job {job_key} ({attributes['ErrorType'].get('StringValue')}) carries "
                f"{_attempts(copied)} attempt(s); its lease records {_attempts(lease_history)}",
            )
        self._redriven_ended(job_key, "dead_lettered_again")
        self.dead_lettered[job_key].append(attributes)
        self.dead_messages[job_key].add(self.originals.get(original, original))
        reason = attributes.get("ErrorType", {}).get("StringValue")
        check_dlq_send(reason, original, "Attempts" in attributes, items or {}, self.originals)
        if reason == "Cancelled":
            self.cancelled_dead.add(self.originals.get(original, original))
        self.order.finished.add(job_key)
        self.reach("dead_lettered")
        if reason is not None:  # the receiver's (or a cancel's) copy: why it went, as its owner reads it
            self.reach(f"dlq:{reason}")

    # -- the lease table ------------------------------------------------------------------------------------

    def lease_written(self, key: str, item: dict[str, Any] | None) -> None:
        if is_lock_key(key):
            return
        self._check_cancel_final(key, item)
        self._check_attempts((item or {}).get(HISTORY_ATTR, {}).get("S"), f"the lease of {key}")
        self._check_newest_receive(key, item)
        if item is not None and item.get("job_type", {}).get("S") in self.types.excused:
            status = item.get(STATUS_ATTR, {}).get("S")
            if status in ("WAITING", "PARKED"):  # a type a deploy limited holds a message back
                self.reach(f"limit_added:{status.lower()}")
        if key in self.returns_due and RELEASE_FAILED in json.dumps((item or {}).get("last_error", {})):
            del self.returns_due[key]  # its release's visibility change failed: it shows when its chunk ends
            self.reach("refused_start:release_failed")
        if not self.by_message.get(key):
            return
        for arn in self.by_message[key]:
            self._check_held(self.running[arn], item, "after a write to its lease")

    def _check_cancel_final(self, key: str, item: dict[str, Any] | None) -> None:
        """`cancelled_never_succeeds`: a lease an operator's cancel marked CANCELLED is never closed again by its
        attempt, SUCCEEDED or otherwise (the closes refuse the mark, and the cancel's finish sends the message
        to the DLQ as Cancelled): a release would give the cancelled job back to run."""
        status = (item or {}).get(STATUS_ATTR, {}).get("S")
        if status == "CANCELLED":
            self.cancel_marked.add(key)
            self.order.cancelled.add(str((item or {}).get("job_id", {}).get("S", "")))
        elif status in ATTEMPT_CLOSES and key in self.cancel_marked:
            raise PropertyViolation("cancelled_never_succeeds", f"the lease of {key} went from CANCELLED to {status}")
        elif item is None or status == "ACTIVE":
            self.cancel_marked.discard(key)  # a new lease of the message (after a redrive, say) starts afresh

    def _check_newest_receive(self, key: str, item: dict[str, Any] | None) -> None:
        """`newest_receive`: a lease never goes back to an older receive of its message than one it named."""
        count = (item or {}).get("receive_count", {}).get("N")
        if item is None:
            self.receive_high.pop(key, None)  # deleted: a lease written later starts afresh
            return
        if count is None:
            return
        newest = self.receive_high.get(key, 0)
        if int(count) < newest:
            raise PropertyViolation("newest_receive", f"the lease of {key} went back from receive {newest} to {count}")
        self.receive_high[key] = int(count)

    def _check_attempts(self, history: str | None, where: str) -> None:
        """`attempts_started`: each attempt of a history (JSON) names an execution that was started."""
        if not history:
            return
        attempts = json.loads(history)
        named = [entry.get("execution") for entry in attempts if isinstance(entry, dict)]  # {"omitted": n}: none
        unstarted = [name for name in named if name is not None and name not in self.started]
        if unstarted:
            raise PropertyViolation("attempts_started", f"{where} counts attempts never started: {unstarted}")

    def _check_held(self, run: Running, lease: dict[str, Any] | None, when: str) -> None:
        status = lease.get(STATUS_ATTR, {}).get("S") if lease else None
        named = lease.get(EXECUTION_ATTR, {}).get("S") if lease else None
        # A cancel marks the lease CANCELLED before it stops the execution, and the CANCELLED lease keeps the
        # message hidden until the cancel is finished (`longjobs.engine.cancel`): the job may run on till then.
        if status not in ("ACTIVE", "CANCELLED") or named != run.arn:
            raise PropertyViolation(
                "held_while_running",
                f"{run.arn} runs its job {when} while its lease is {status or 'absent'} naming {named}",
            )

    # -- the extender's evidence -----------------------------------------------------------------------------

    def extender_answered(self, invocation: str, operation: str, params: dict[str, Any], answer: Any) -> None:
        """An answer the extender got: its due index's items (what it plans on) and its consistent reads of
        a lease (what it checks before it ends one)."""
        if operation == "query" and params.get("IndexName") == DUE_INDEX:
            for item in answer.get("Items", []):
                self.planned[(invocation, item[PARTITION_KEY]["S"])] = item
        elif operation == "get_item" and params.get("ConsistentRead"):
            key = params["Key"][PARTITION_KEY]["S"]
            self.reread[(invocation, key)] = answer.get("Item") or {}

    def extender_stops(
        self,
        invocation: str,
        execution_arn: str,
        *,
        message_deleted: bool = False,
        held: tuple[str, float, float] | None = None,
    ) -> None:
        """The extender is about to stop `execution_arn` (`stopped_as_read`, `stopped_with_cause`);
        `message_deleted`: the message the execution runs for is gone from its queue; `held`: the receive
        that hides it now (its handle, the end of its 12 h, now), None when it is not in flight."""
        parsed = parse_execution_name(execution_arn.rpartition(":")[2])
        message_id = parsed[0] if parsed else ""
        planned = self.planned.get((invocation, message_id))
        read = self.reread.get((invocation, message_id))
        if planned is None or read is None:
            detail = f"{execution_arn} stopped with no due item or no read of its lease"
            raise PropertyViolation("stopped_as_read", detail)
        status, named = read.get(STATUS_ATTR, {}).get("S"), read.get(EXECUTION_ATTR, {}).get("S")
        if status == "CANCELLED" and named == execution_arn:
            return  # a cancel the extender finishes: the operator's decision stops it, whatever the receive
        if status != "ACTIVE" or named != execution_arn or _receive(read) != _receive(planned):
            raise PropertyViolation(
                "stopped_as_read",
                f"{execution_arn} stopped for the receive {_receive(planned)} while its lease, as read, is "
                f"{status} naming {named} for the receive {_receive(read)}",
            )
        self.reach("extender:stop_as_read")
        if execution_arn in self.job_succeeded and message_deleted:
            raise PropertyViolation(
                "stopped_with_cause",
                f"{execution_arn} stopped after its job succeeded and its message was deleted: the handle was "
                "refused because the work was done, not lost",
            )
        if held is not None and held[0] == read.get(HANDLE_ATTR, {}).get("S") and not self.excuse_lapses:
            handle, sqs_limit, now = held
            cap = min(float(read.get("renew_until", {}).get("N", sqs_limit)), sqs_limit)
            if now < cap - self.cap_early_s:
                raise PropertyViolation(
                    "stopped_with_cause",
                    f"{execution_arn} stopped {cap - now:.0f} s before its hard stop while SQS still hides its "
                    f"message under the handle its lease names ({handle}): a healthy job, its lease holdable",
                )
            self.reach("extender:stop_at_cap")

    # -- the end --------------------------------------------------------------------------------------------

    def _ended_both_ways(self, key: str) -> set[str]:
        """The job's messages that both succeeded and went to the DLQ. A run that ended after an operator's
        cancel marked its lease is not a success: the workflow refuses to record it, and the message
        ends in the DLQ as Cancelled (`longjobs.engine.cancel`), one way."""
        cancelled_unrecorded = self.cancelled_dead - self.recorded_messages[key]
        return (self.succeeded_messages[key] & self.dead_messages[key]) - cancelled_unrecorded

    def final(
        self,
        *,
        jobs: dict[str, str],
        left_on_queues: Counter[str],
        in_dlq: Counter[str],
        locks: dict[str, dict[str, Any]],
        settled_in_time: bool,
    ) -> list[tuple[str, str]]:
        """The eventual properties at the end: (property, detail) for each that failed.

        `jobs`: job key -> its expected end (`succeed` or `dlq`); `left_on_queues`: job key -> messages of
        it still on the jobs or waiting queues; `in_dlq`: job key -> messages of it in the DLQ now (one
        that reached it and left, unless redriven, is lost); `locks`: the job locks and slots."""
        failures: list[tuple[str, str]] = []
        for key, expected in sorted(jobs.items()):
            done, dead = self.succeeded[key] > 0, bool(self.dead_lettered.get(key))
            if left_on_queues[key]:
                continue  # not settled: reported below
            unended = self.sent_messages[key] - self.succeeded_messages[key] - self.dead_messages[key]
            if not done and not in_dlq[key]:
                where = "left the DLQ" if dead else "not in the DLQ"
                failures.append(("nothing_lost", f"job {key}: no message left, never succeeded, {where}"))
            elif unended:
                # each message is a run of its own (a job sent twice runs twice): one may not vanish because
                # the other succeeded
                failures.append(
                    ("nothing_lost", f"job {key}: message(s) {sorted(unended)} neither ran nor reached the DLQ")
                )
            elif done and dead and (both := self._ended_both_ways(key)):
                # Each message ends one way: a job sent twice may succeed by one message and be dead-lettered
                # by the other (corpus seed 816: that one's attempts all meet an outage).
                failures.append(("nothing_lost", f"job {key}: {sorted(both)} succeeded and also sent to the DLQ"))
            elif dead:
                for attributes in self.dead_lettered[key]:
                    if "ErrorType" not in attributes or "ErrorMessage" not in attributes:
                        failures.append(
                            ("nothing_lost", f"job {key}: in the DLQ without a reason ({sorted(attributes)})")
                        )
            self.reach(f"ended_{'succeeded' if done else 'dlq'}_expected_{expected}")
        for key, redriven in sorted(self.redriven_open.items()):
            if not left_on_queues[key]:
                failures.append(
                    (
                        "redriven_settles",
                        f"job {key}: redriven as {sorted(redriven)}, then neither run nor dead-lettered",
                    )
                )
        unsettled = sorted(key for key, count in left_on_queues.items() if count)
        if unsettled or not settled_in_time:
            failures.append(("settled_in_time", f"not settled by the bound: {unsettled or 'executions still run'}"))
        held = sorted(key for key, item in locks.items() if item.get(LOCK_STATE_ATTR, {}).get("S", FREE) != FREE)
        if held and settled_in_time:
            failures.append(("holds_freed", f"held after every execution ended: {held}"))
        return failures


def check_dlq_send(
    reason: str | None, original: str, with_attempts: bool, items: Mapping[str, Any], originals: Mapping[str, str]
) -> None:
    """`dlq_send_claimed` for a copy that reached the DLQ with `reason` (its `ErrorType`): a cancel's, or the
    receiver's (with its attempts; a poison message's has none and is sent before its record)."""
    if reason == "Cancelled":
        check_cancel_send(original, items.get(original))
    elif reason is not None and with_attempts:
        check_dead_letter_send(original, items, originals)


def check_dead_letter_send(original: str, items: Mapping[str, Any], originals: Mapping[str, str]) -> None:
    """`dlq_send_claimed` for the receiver's DLQ copies (`longjobs.engine.delivery.dlq_claim`): each is sent
    under a claim on a DEAD_LETTERING record of its message (the producer's `original`, or a copy of it): no
    copy is noted there yet. So of two receives of one message at once, or of receivers of two versions during a
    deploy, one sends, and none begins an attempt beside the copy. `items`: the lease table as the send
    lands; `originals`: a copy's message id -> the producer's."""
    producer = originals.get(original, original)
    for key, item in items.items():
        if key != producer and originals.get(key) != producer:
            continue
        if item.get(STATUS_ATTR, {}).get("S") == "DEAD_LETTERING" and "claimed_by" in item:
            return
    raise PropertyViolation("dlq_send_claimed", f"a DLQ copy of {original} was sent with no claim on its record")


def check_cancel_send(original: str, item: Mapping[str, Any] | None) -> None:
    """`dlq_send_claimed`: a `Cancelled` DLQ copy is sent by a carrier that claimed the send on the cancelled
    lease or marker it names, and never once a copy is noted there (`longjobs.engine.cancel`, step 4): of
    a cancel run again, the extender finishing one and a receive of the message at once, one sends. `item`:
    that lease as the send lands; one not CANCELLED (a deeper copy's marker, not named) is not judged."""
    if item is None or item.get(STATUS_ATTR, {}).get("S") != "CANCELLED":
        return
    record = CancelRecord.of(item_to_lease(dict(item)))
    if record is not None and record.dead_letter_id is not None:
        detail = f"a Cancelled copy of {original} was sent after its copy {record.dead_letter_id} was noted"
        raise PropertyViolation("dlq_send_claimed", detail)
    if record is not None and record.sending_at is None:
        raise PropertyViolation("dlq_send_claimed", f"a Cancelled copy of {original} was sent with no claim")


@dataclass
class TypeConcurrency:
    """`type_concurrency`: each limited type's runs going on. A type a deploy limited excuses the runs that
    go on then, or start while it is `excusing` them (its replaced functions may still start some): they
    hold no slot."""

    limits: dict[str, int]  # job type -> max_concurrency (the monitor's, which a deploy changes)
    by_type: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # type -> execution ARNs
    excused: dict[str, set[str]] = field(default_factory=dict)
    excusing: set[str] = field(default_factory=set)

    def started(self, job_type: str, arn: str) -> None:
        self.by_type[job_type].add(arn)
        if job_type in self.excusing:
            self.excused[job_type].add(arn)
        counted = self.by_type[job_type] - self.excused.get(job_type, set())
        limit = self.limits.get(job_type)
        if limit is not None and len(counted) > limit:
            raise PropertyViolation(
                "type_concurrency", f"type {job_type} runs {len(counted)} jobs, above its limit {limit}"
            )

    def ended(self, job_type: str, arn: str) -> None:
        self.by_type[job_type].discard(arn)
        self.excused.get(job_type, set()).discard(arn)

    def limit_added(self, job_type: str, limit: int) -> None:
        """A deploy limited `job_type`: the runs going on are excused, and those started until `excusing`
        drops it."""
        self.limits[job_type] = limit
        self.excused[job_type] = set(self.by_type[job_type])
        self.excusing.add(job_type)


@dataclass
class FifoOrder:
    """`fifo_order`: each message group's jobs in the order they were sent (a redriven job is sent anew, at
    its group's end), and which of them no longer hold their group."""

    coverage: Counter[str]
    groups: dict[str, list[str]]  # group -> its job keys in send order (the monitor's, which the world fills)
    finished: set[str] = field(default_factory=set)  # jobs that succeeded or are in the DLQ
    cancelled: set[str] = field(default_factory=set)  # jobs whose lease an operator's cancel marked

    def started(self, job_key: str, running: Mapping[str, set[str]]) -> None:
        """A job starts only once every job sent before it in its group succeeded, is in the DLQ, or was
        cancelled with no execution running it (the receiver acknowledges a cancelled message; its DLQ copy
        may follow, sent by the cancel's claimant). `running`: job key -> the executions running it."""
        for group, jobs in self.groups.items():
            if job_key not in jobs:
                continue
            before = jobs[: jobs.index(job_key)]
            cancelled = [job for job in before if job in self.cancelled and job not in self.finished]
            earlier = [job for job in before if job not in self.finished and (job not in cancelled or running[job])]
            if earlier:
                raise PropertyViolation("fifo_order", f"job {job_key} of group {group} started before {earlier} ended")
            self.coverage["fifo_in_order_start"] += 1
            if cancelled:
                self.coverage["fifo_start_after_cancelled"] += 1  # its DLQ copy may still be on its way

    def redriven(self, job_key: str, group: str | None, *, again: bool) -> None:
        """A redrive put a message of `job_key` back in `group`, which must be its own. Its first copy back
        (not `again`) is sent anew, at the group's end; a second copy of it keeps that place."""
        own = next((name for name, jobs in self.groups.items() if job_key in jobs), None)
        if own is None:
            return
        if group != own:
            raise PropertyViolation("fifo_order", f"job {job_key} of group {own} redriven into group {group}")
        if not again:
            self.groups[own] = [*(job for job in self.groups[own] if job != job_key), job_key]
            self.finished.discard(job_key)
            self.cancelled.discard(job_key)


@dataclass
class RunsPerJob:
    """`single_run_per_job`: the job runs going on, by job key."""

    coverage: Counter[str]
    job_of: dict[str, str] = field(default_factory=dict)  # a run going on -> its job key
    of_job: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))  # job key -> run -> start

    def started(self, run_id: str, job_key: str, *, now: float) -> None:
        """A job run began: an EMR run submitted, a Spark worker's run picked up."""
        self.coverage["job_run_started"] += 1
        others = self.of_job[job_key]
        if others:
            since = ", ".join(f"{other} (since {at:.0f})" for other, at in sorted(others.items()))
            raise PropertyViolation("single_run_per_job", f"job {job_key}: run {run_id} starts while {since} runs")
        self.job_of[run_id] = job_key
        others[run_id] = now

    def ended(self, run_id: str) -> None:
        job_key = self.job_of.pop(run_id, None)
        if job_key is not None:
            self.of_job[job_key].pop(run_id, None)


@dataclass
class NeedlessRedeliveries:
    """`needless_redeliveries`' evidence: the receives of a message after its job succeeded that the trace
    explains, not yet spent, and whether the newest such receive was handled."""

    coverage: Counter[str]
    lapses_excused: Callable[[], bool]
    excused: Counter[str] = field(default_factory=Counter)  # message id -> needless receives explained, unspent
    last: set[str] = field(default_factory=set)  # messages whose newest receive was needless
    unhandled: set[str] = field(default_factory=set)  # ... and its handling reached no outcome yet

    def redelivered_after_success(self, message_id: str, *, close_under_way: bool, duplicate: bool) -> None:
        """`needless_redeliveries`: a receive of `message_id` whose lease is SUCCEEDED (its job is done) has
        a cause the trace shows. `close_under_way`: the execution that marked it still runs (its delete
        comes next); `duplicate`: SQS's injected second delivery of it."""
        unhandled = message_id in self.unhandled  # the last such receive's handling reached no outcome
        self.last.add(message_id)
        self.unhandled.add(message_id)
        self.coverage["needless_redelivery"] += 1
        causes = {
            "close_under_way": close_under_way,
            "duplicate": duplicate,
            "unhandled": unhandled,
            "excused_lapse": self.lapses_excused(),
        }
        for cause, holds in causes.items():
            if holds:
                self.coverage[f"needless_redelivery:{cause}"] += 1
                return
        if self.excused[message_id] <= 0:
            raise PropertyViolation(
                "needless_redeliveries",
                f"message {message_id} was received again after its job succeeded, with no delete of it tried, "
                "no close that left it, no duplicate delivery and no failed handling of an earlier such receive",
            )
        self.coverage["needless_redelivery:delete_tried"] += 1
        self.excused[message_id] -= 1

    def received_needed(self, message_id: str) -> None:
        """A receive of `message_id` whose lease is not SUCCEEDED."""
        self.last.discard(message_id)
        self.unhandled.discard(message_id)

    def may_show_again(self, message_id: str) -> None:
        """The processor tried to delete `message_id` (whatever came of it), or a success close that could not
        read its lease left it to a redelivery: it may be received once more after its job succeeded."""
        self.excused[message_id] += 1

    def handling_died(self, message_ids: list[str]) -> None:
        """A receiver invocation died or timed out on these records: the event source mapping deleted none."""
        for message_id in message_ids:
            if message_id in self.last:
                self.excused[message_id] += 1
                self.coverage["needless_redelivery:handling_died"] += 1

    def records_failed(self, message_ids: set[str]) -> None:
        """The invocation reported these messages' records failed, each with a record that reached no outcome:
        the event source mapping deletes no record of them, not even another record of the same message that
        reached one (a partial batch response names a message by its id). A needless receive whose handling
        that other record's outcome marked done is then explained by the failure."""
        for message_id in message_ids & self.last:
            if message_id not in self.unhandled:
                self.excused[message_id] += 1
                self.coverage["needless_redelivery:record_failed"] += 1

    def handled(self, message_id: str) -> None:
        self.unhandled.discard(message_id)


def _attempts(history: str | None) -> int:
    """How many attempts a history (JSON) counts, those left out of a DLQ copy's (`{"omitted": n}`) too."""
    entries = json.loads(history) if history else []
    return sum(int(entry.get("omitted", 0)) or 1 for entry in entries if isinstance(entry, dict))


def _receive(item: dict[str, Any]) -> tuple[str | None, str | None]:
    """Which receive a lease item is of: its receive count and receipt handle."""
    return item.get("receive_count", {}).get("N"), item.get(HANDLE_ATTR, {}).get("S")
