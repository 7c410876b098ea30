"""Backfill: 10,000 jobs of one type at once, with and without admission control.

A deterministic simulation on a virtual clock (`FakeClock`) with no network. What runs is the
processor's own code: the receiver (`longjobs.engine.receiver.service.receive`, with admission), the lease
store, the renewal policy and the extender (`run_invocation`: renewal, reconciliation, admission), the
watcher (`on_status_change`, with admission). AWS is `longjobs.sim.aws`: SQS, DynamoDB and Step
Functions in-process, their semantics and errors as the processor meets them, every request counted.

Workload. `--jobs` messages of one `wait`-runner type are sent at once; each job runs for a duration
drawn log-uniformly between `--min-minutes` and `--max-minutes`. The type's runner (a Glue job's
concurrent runs) runs `--slots` jobs at once and queues the rest, as Glue does; a run queued past the
step's timeout (the Glue run's 6 h plus 15 minutes) fails the execution (`JobTimedOut`).

- **admission on**: the type declares `max_concurrency` = `--slots`, and has a waiting queue.
- **admission off**: no limit: every message starts an execution at once (today's behaviour).

The event source mapping receives every visible message of the jobs queue at once, 10 a batch, and
hands each batch to the receiver (the receiver's answer decides what is deleted). The extender runs
every minute, each run late by uniform(0, 1) period and lost with probability 1/20 (as in
`renewal_cost.py`); reserved concurrency 1. Status events of ended executions reach the watcher 0.5
to 2 s late, and 1 in 100 is lost. The workflow is modelled from its definition (`longjobs/construct/workflow.py`):
the start check of its lease, the job, then the fenced success path (read the lease, delete the
message with the lease's handle, mark it SUCCEEDED, free the job lock and the slot) or failure path
(mark it RELEASED, free them, give the message back after the release delay), each step a request
to the fakes, taking no virtual time.

Time. Handlers take no virtual time, except where they wait on the clock (reconciliation's rate
limit): then the clock moves and what fell due meanwhile runs right after, that late.

Measures: `makespan_ratio` (the last job's end over the ideal: total work / slots + the longest job),
`receives_per_job` (messages handed out by ReceiveMessage, every queue), `requests_per_job` (every SQS,
DynamoDB and Step Functions request, the workflow's and the mapping's included; the mapping's empty
polls are not counted: a fixed cost of any mapping), `dlq` (jobs in the DLQ), `lapses` (receives of a
message while one of its executions runs its job), `max_concurrent` (the most jobs running at once in
the runner), `double_runs` (jobs with two executions running their job at once).

Run from the repository root: `python -m benchmarks.backfill [--jobs N] [--slots K] [--seed S]
[--only on|off] [--json]`.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import json
import math
import random
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from botocore.exceptions import ClientError
from rich.console import Console
from rich.table import Table

from longjobs.engine.clock import FakeClock
from longjobs.engine.delivery.types import Delivery, Receiver
from longjobs.engine.execution import STOP_ERROR
from longjobs.engine.extender.invocation import run_invocation
from longjobs.engine.factory import Clients, Factory
from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog, JobType
from longjobs.engine.lease import table_definition
from longjobs.engine.lease.lock import (
    FREE,
    HELD,
    JOB_LOCK_PREFIX,
    LOCK_EXECUTION_ATTR,
    LOCK_STATE_ATTR,
    RELEASED_AT_ATTR,
)
from longjobs.engine.lease.schema import (
    ERROR_ATTR,
    EXECUTION_ATTR,
    HANDLE_ATTR,
    PARTITION_KEY,
    RENEW_AT_ATTR,
    RESULT_ATTR,
    SHARD_ATTR,
    STATUS_ATTR,
    VERSION_ATTR,
)
from longjobs.engine.observability import MetricName, logger
from longjobs.engine.receiver.batch import receive_batch
from longjobs.engine.receiver.service import receive
from longjobs.engine.settings import Settings
from longjobs.engine.visibility import FailureClass, classify_exception
from longjobs.engine.watcher.service import on_status_change
from longjobs.sim.aws import ACCOUNT, REGION, Execution, FakeAws, FakeQueue, Message
from longjobs.sim.executions import status_change
from longjobs.sim.lambdas import as_delivery

TABLE = "leases"
STATE_MACHINE_ARN = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:long-jobs"
JOB_TYPE = "backfill"
QUEUE_VT_S = 180  # the stack's queue_visibility_timeout_s
START = 1_700_000_000.0
ESM_BATCH = 10
EXTENDER_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class Params:
    jobs: int = 10_000
    slots: int = 50
    min_minutes: float = 5.0
    max_minutes: float = 60.0
    seed: int = 1
    lateness: float = 1.0
    loss_rate: float = 0.05
    event_delay_s: tuple[float, float] = (0.5, 2.0)
    event_loss: float = 0.01
    step_timeout_s: float = 6 * 3_600 + 900
    limit_days: float = 30.0


@dataclass
class Result:
    admission: str
    jobs: int
    deleted: int
    dlq: int
    makespan_h: float
    ideal_h: float
    makespan_ratio: float
    receives_per_job: float
    requests_per_job: float
    lapses: int
    max_concurrent: int
    double_runs: int
    executions: int
    failed_attempts: int
    stopped: int
    admitted_in_place: int
    parked: int
    max_waiting_in_flight: int
    max_parked: int
    requests: dict[str, int] = field(default_factory=dict)
    virtual_h: float = 0.0
    wall_s: float = 0.0


def durations(params: Params) -> list[float]:
    rng = random.Random(f"backfill:{params.seed}:durations")
    low, high = math.log(params.min_minutes * 60), math.log(params.max_minutes * 60)
    return [round(math.exp(rng.uniform(low, high))) for _ in range(params.jobs)]


def job_type(slots: int | None) -> JobType:
    return JobType(
        name=JOB_TYPE,
        runner="wait",
        params_schema={
            "type": "object",
            "required": ["seconds"],
            "properties": {"seconds": {"type": "integer", "minimum": 0}},
        },
        max_concurrency=slots,
    )


class Simulation:
    """One backfill, admission on or off."""

    def __init__(self, params: Params, *, admission: bool) -> None:
        self.params = params
        self.admission = admission
        self.clock = FakeClock(START)
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = itertools.count()
        self.schedule_rng = random.Random(f"backfill:{params.seed}:schedule")
        self.event_rng = random.Random(f"backfill:{params.seed}:events")
        self.aws = FakeAws(
            self.clock,
            random.Random(f"backfill:{params.seed}:sqs"),
            table=table_definition(TABLE),
            state_machine_arn=STATE_MACHINE_ARN,
        )
        sqs = self.aws.sqs
        self.dlq = sqs.create_queue("jobs-dlq", visibility_timeout_s=30)
        self.queue = sqs.create_queue("jobs", visibility_timeout_s=QUEUE_VT_S)
        self.waiting: FakeQueue | None = None
        values: dict[str, Any] = {
            "table_name": TABLE,
            "queue_url": self.queue.url,
            "dlq_url": self.dlq.url,
            "state_machine_arn": STATE_MACHINE_ARN,
        }
        if admission:
            self.waiting = sqs.create_queue(f"jobs-waiting-{JOB_TYPE}", visibility_timeout_s=QUEUE_VT_S)
            values["waiting_queues"] = json.dumps({JOB_TYPE: self.waiting.url})
        self.settings = settings = Settings.load(values)
        backstop = settings.redrive_max_receives(settings.queue_retention_s)
        self.queue.redrive = (self.dlq, backstop)
        if self.waiting is not None:
            self.waiting.redrive = (self.dlq, backstop)
        self.catalog = JobCatalog([*BUILTIN_TYPES, job_type(params.slots if admission else None)])
        self.metrics = Recorder()
        factory = Factory(settings, self.clock, self.catalog, self.metrics)
        clients = Clients(cast(Any, sqs), cast(Any, self.aws.dynamodb), cast(Any, self.aws.stepfunctions))

        def receiver(name: str) -> Receiver:
            return factory.receiver(clients, random.Random(f"backfill:{params.seed}:{name}"))

        self.receiver = receiver("receiver")
        admitter, watcher_admitter = receiver("extender"), receiver("watcher")
        # the extender's container watches the legacy shards (`previous_shards`), as the handler's does
        self.extender = factory.extender(
            clients, random.Random(f"backfill:{params.seed}:backoff"), admitter=admitter if admission else None
        )
        self.watcher = factory.watcher(
            clients, admit=factory.watcher_admission(watcher_admitter) if admission else None
        )
        # what is observed
        self.durations = durations(params)
        self.done: dict[str, float] = {}
        self.dead: set[str] = set()
        self.in_job: dict[str, set[str]] = defaultdict(set)  # job key -> executions running their job
        self.running: set[str] = set()  # executions running their job (the runner's runs)
        self.runner_queue: deque[Execution] = deque()
        self.max_concurrent = 0
        self.double_runs: set[str] = set()
        self.lapses = 0
        self.failed_attempts = 0
        self.stopped = 0
        self.max_waiting = 0
        self.max_parked = 0
        self.outcomes: Counter[str] = Counter()
        sqs.on_receive = self._on_receive
        sqs.on_dead_letter = self._on_dead_letter
        self.aws.stepfunctions.on_start = lambda ex: self.at(self.clock.now(), lambda: self._begin(ex))
        self.aws.stepfunctions.on_stop = self._on_end

    # -- the event loop ---------------------------------------------------------------------------------

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (when, next(self.seq), action))

    def run(self) -> Result:
        wall = time.monotonic()
        for index, seconds in enumerate(self.durations):
            body = json.dumps({"job_id": f"p{index:05d}", "type": JOB_TYPE, "params": {"seconds": seconds}})
            self.aws.sqs.put(self.queue, body)
        self._schedule_extender(0)
        limit = START + self.params.limit_days * 86_400
        while len(self.done) + len(self.dead) < self.params.jobs:
            self.queue.refresh()
            if self.queue.visible_count:
                self._poll()
                continue
            next_visible = self.queue.next_visible_at()
            next_event = self.events[0][0] if self.events else math.inf
            when = min(next_event, next_visible if next_visible is not None else math.inf)
            if when == math.inf or when > limit:
                break
            if when > self.clock.now():
                self.clock.advance(when - self.clock.now())
            if next_visible is not None and next_visible <= next_event:
                continue  # the queue shows it now: the next turn polls
            _, _, action = heapq.heappop(self.events)
            action()
        return self._result(time.monotonic() - wall)

    # -- the event source mapping --------------------------------------------------------------------

    def _poll(self) -> None:
        self.aws.calls["sqs.ReceiveMessage"] += 1
        messages = self.aws.sqs.receive(self.queue, ESM_BATCH)
        deliveries = [as_delivery(message, self.queue.arn) for message in messages]
        handled: list[Delivery] = []
        with receive_batch(self.receiver, deliveries) as unsent:
            for delivery in deliveries:
                try:
                    outcome = receive(self.receiver, delivery)
                except Exception:
                    self.outcomes["failed"] += 1
                    continue
                self.outcomes[outcome.value] += 1
                if not outcome.deferred:
                    handled.append(delivery)
        done = [delivery.receipt_handle for delivery in handled if delivery.message_id not in unsent]
        if done:
            self.aws.sqs.delete_message_batch(
                QueueUrl=self.queue.url, Entries=[{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(done)]
            )

    def _on_receive(self, queue: FakeQueue, message: Message) -> None:
        if message.job_key and self.in_job.get(message.job_key):
            self.lapses += 1

    def _on_dead_letter(self, queue: FakeQueue, message: Message) -> None:
        if message.job_key and message.job_key not in self.done:
            self.dead.add(message.job_key)

    # -- the extender's schedule -------------------------------------------------------------------------

    def _schedule_extender(self, index: int) -> None:
        period = self.settings.extender_period_s
        due = START + index * period
        late = self.schedule_rng.uniform(0, self.params.lateness * period)
        lost = self.schedule_rng.random() < self.params.loss_rate
        self.at(due + late, lambda: self._extender_run(index, lost))

    def _extender_run(self, index: int, lost: bool) -> None:
        self._schedule_extender(index + 1)
        if lost:
            return
        began = self.clock.now()
        report = run_invocation(
            self.extender, remaining_ms=lambda: int((began + EXTENDER_TIMEOUT_S - self.clock.now()) * 1000)
        )
        self.stopped += report.renewal.stopped
        for admitted in report.admission:
            self.max_waiting = max(self.max_waiting, admitted.waiting)
            self.max_parked = max(self.max_parked, admitted.parked)

    # -- the workflow -------------------------------------------------------------------------------------

    def _job_key(self, execution: Execution) -> str:
        return str(execution.input["job"]["job_id"])

    def _begin(self, execution: Execution) -> None:
        if execution.status != "RUNNING":
            return
        lease = self._read_lease(execution)
        if lease is None or lease[STATUS_ATTR]["S"] != "ACTIVE" or lease[EXECUTION_ATTR]["S"] != execution.arn:
            self.aws.stepfunctions.end(execution, "FAILED", STOP_ERROR, "its lease is closed or names another")
            return
        execution.state["lease"] = lease  # the success path settles on condition of this read's handle
        self.at(self.clock.now() + self.params.step_timeout_s, lambda: self._timed_out(execution))
        if len(self.running) < self.params.slots:
            self._run_job(execution)
        else:
            self.runner_queue.append(execution)

    def _run_job(self, execution: Execution) -> None:
        key = self._job_key(execution)
        self.running.add(execution.arn)
        self.in_job[key].add(execution.arn)
        self.max_concurrent = max(self.max_concurrent, len(self.running))
        if len(self.in_job[key]) > 1:
            self.double_runs.add(key)
        execution.state["job_started"] = self.clock.now()
        seconds = float(execution.input["job"]["params"]["seconds"])
        self.at(self.clock.now() + seconds, lambda: self._job_ended(execution))

    def _leave_job(self, execution: Execution) -> None:
        if execution.arn in self.running:
            self.running.discard(execution.arn)
            self.in_job[self._job_key(execution)].discard(execution.arn)
            while self.runner_queue and len(self.running) < self.params.slots:
                waiting = self.runner_queue.popleft()
                if waiting.status == "RUNNING":
                    self._run_job(waiting)
        elif execution in self.runner_queue:
            self.runner_queue.remove(execution)

    def _job_ended(self, execution: Execution) -> None:
        if execution.status != "RUNNING" or execution.arn not in self.running:
            return
        execution.state["job_ended"] = True
        self._leave_job(execution)
        self._succeeded(execution)

    def _timed_out(self, execution: Execution) -> None:
        if execution.status != "RUNNING" or execution.state.get("job_ended"):
            return
        self._leave_job(execution)
        self._failed(execution, "JobTimedOut", "the job ran past its timeout")

    def _on_end(self, execution: Execution) -> None:
        self._leave_job(execution)
        if execution.status != "SUCCEEDED" and execution.state.get("job_started") is not None:
            self.failed_attempts += 1
        if self.event_rng.random() >= self.params.event_loss:
            delay = self.event_rng.uniform(*self.params.event_delay_s)
            self.at(self.clock.now() + delay, lambda: self._status_event(execution))

    def _status_event(self, execution: Execution) -> None:
        try:
            on_status_change(self.watcher, status_change(execution, STATE_MACHINE_ARN))
        except Exception:
            self.outcomes["watcher_failed"] += 1

    def _read_lease(self, execution: Execution) -> dict[str, Any] | None:
        key = {PARTITION_KEY: {"S": execution.input["message_id"]}}
        item: dict[str, Any] | None = self.aws.dynamodb.get_item(TableName=TABLE, Key=key).get("Item")
        return item

    def _close_update(
        self, execution: Execution, lease: dict[str, Any], status: str, attribute: str, value: str, condition: str
    ) -> dict[str, Any]:
        """The workflow's Mark* update: conditional on the lease as last read (no read of its own)."""
        handle = lease[HANDLE_ATTR]["S"]
        names = {
            "#status": STATUS_ATTR,
            "#execution": EXECUTION_ATTR,
            "#handle": HANDLE_ATTR,
            "#version": VERSION_ATTR,
            "#shard": SHARD_ATTR,
            "#renew_at": RENEW_AT_ATTR,
            "#attr": attribute,
        }
        values = {
            ":status": {"S": status},
            ":value": {"S": value},
            ":one": {"N": "1"},
            ":self": {"S": execution.arn},
            ":handle": {"S": handle},
            ":active": {"S": "ACTIVE"},
            ":succeeded": {"S": "SUCCEEDED"},
            ":cancelled": {"S": "CANCELLED"},
            ":released": {"S": "RELEASED"},
        }
        update = "SET #status = :status, #attr = :value, #version = #version + :one REMOVE #shard, #renew_at"
        expressions = update + " " + condition
        return {
            "TableName": TABLE,
            "Key": {PARTITION_KEY: {"S": execution.input["message_id"]}},
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {k: v for k, v in names.items() if k in expressions},
            "ExpressionAttributeValues": {k: v for k, v in values.items() if k in expressions},
        }

    def _close(
        self, execution: Execution, lease: dict[str, Any], status: str, attribute: str, value: str, condition: str
    ) -> bool:
        """The workflow's Mark* task."""
        try:
            self.aws.dynamodb.update_item(**self._close_update(execution, lease, status, attribute, value, condition))
        except ClientError:
            return False
        return True

    def _free_update(self, execution: Execution, key: str, *, released: bool) -> dict[str, Any]:
        values: dict[str, Any] = {":free": {"S": FREE}, ":held": {"S": HELD}, ":self": {"S": execution.arn}}
        names = {"#state": LOCK_STATE_ATTR, "#execution": LOCK_EXECUTION_ATTR}
        update = "SET #state = :free"
        if released:
            names["#released"] = RELEASED_AT_ATTR
            values[":now"] = {"S": datetime.fromtimestamp(self.clock.now(), UTC).isoformat()}
            update += ", #released = :now"
        return {
            "TableName": TABLE,
            "Key": {PARTITION_KEY: {"S": key}},
            "UpdateExpression": update,
            "ConditionExpression": "#state = :held AND #execution = :self",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }

    def _holds(self, execution: Execution) -> list[tuple[str, bool]]:
        """The execution's job lock and slot, each with whether its release notes the time."""
        holds = [(JOB_LOCK_PREFIX + self._job_key(execution), False)]
        if execution.input.get("slot"):
            holds.append((str(execution.input["slot"]), True))
        return holds

    def _free_holds(self, execution: Execution) -> None:
        for key, released in self._holds(execution):
            with contextlib.suppress(ClientError):  # best effort, as the workflow's
                self.aws.dynamodb.update_item(**self._free_update(execution, key, released=released))

    def _succeeded_and_freed(self, execution: Execution, lease: dict[str, Any], summary: str, condition: str) -> bool:
        """The workflow's SucceededAndFreed[WithSlot]: the close and the releases in one transaction."""
        close = self._close_update(execution, lease, "SUCCEEDED", RESULT_ATTR, summary, condition)
        frees = [self._free_update(execution, key, released=released) for key, released in self._holds(execution)]
        try:
            self.aws.dynamodb.transact_write_items(TransactItems=[{"Update": update} for update in [close, *frees]])
        except ClientError:
            return False
        return True

    def _succeeded(self, execution: Execution) -> None:
        """The success path: the close and the releases on condition of the start's handle, then the
        delete; refused, the close alone and the releases one by one, reading the lease on a conflict."""
        lease: dict[str, Any] | None = execution.state["lease"]
        summary = json.dumps({"waited_s": execution.input["job"]["params"]["seconds"]})
        condition = "#execution = :self AND #handle = :handle AND #status <> :succeeded AND #status <> :cancelled"
        for _ in range(5):
            if lease is None:
                break
            if lease[EXECUTION_ATTR]["S"] != execution.arn:
                self.aws.stepfunctions.end(execution, "FAILED", STOP_ERROR, "the lease names another execution")
                return
            if lease[STATUS_ATTR]["S"] == "CANCELLED":  # the workflow's CancelledMeanwhile
                self.aws.stepfunctions.end(execution, "FAILED", "Cancelled", "the message was cancelled while it ran")
                return
            closed = lease[STATUS_ATTR]["S"] == "SUCCEEDED"
            freed = not closed and self._succeeded_and_freed(execution, lease, summary, condition)
            closed = closed or freed or self._close(execution, lease, "SUCCEEDED", RESULT_ATTR, summary, condition)
            if not closed:
                lease = self._read_lease(execution)
                continue
            with contextlib.suppress(ClientError):  # the workflow catches it: a redelivery is acknowledged
                self.aws.sqs.delete_message(
                    QueueUrl=execution.input["queue_url"], ReceiptHandle=lease[HANDLE_ATTR]["S"]
                )
            if not freed:
                self._free_holds(execution)
            self.done.setdefault(self._job_key(execution), self.clock.now())
            self.dead.discard(self._job_key(execution))
            break
        self.aws.stepfunctions.end(execution, "SUCCEEDED")

    def _failed(self, execution: Execution, error: str, cause: str) -> None:
        for _ in range(5):
            lease = self._read_lease(execution)
            if lease is None or lease[STATUS_ATTR]["S"] != "ACTIVE" or lease[EXECUTION_ATTR]["S"] != execution.arn:
                break
            condition = "#execution = :self AND #handle = :handle AND #status = :active"
            reason = json.dumps({"Error": error, "Cause": cause})
            if not self._close(execution, lease, "RELEASED", ERROR_ATTR, reason, condition):
                continue
            self._free_holds(execution)
            try:
                self.aws.sqs.change_message_visibility(
                    QueueUrl=execution.input["queue_url"],
                    ReceiptHandle=lease[HANDLE_ATTR]["S"],
                    VisibilityTimeout=int(execution.input["release_delay_s"]),
                )
            except ClientError as exc:
                if classify_exception(exc) is FailureClass.LOST:
                    self._close(
                        execution, lease, "LOST", ERROR_ATTR, reason, "#execution = :self AND #status = :released"
                    )
            break
        self.aws.stepfunctions.end(execution, "FAILED", error, cause)

    # -- the result ---------------------------------------------------------------------------------------

    def _result(self, wall_s: float) -> Result:
        params = self.params
        work = sum(self.durations)
        ideal = work / params.slots + max(self.durations)
        end = max(self.done.values(), default=START)
        makespan = end - START
        executions = len(self.aws.stepfunctions.executions)
        parked = self.outcomes.get("parked", 0)
        return Result(
            admission="on" if self.admission else "off",
            jobs=params.jobs,
            deleted=len(self.done),
            dlq=len(self.dead),
            makespan_h=round(makespan / 3600, 2),
            ideal_h=round(ideal / 3600, 2),
            makespan_ratio=round(makespan / ideal, 4) if self.done else math.inf,
            receives_per_job=round(self.aws.receives / params.jobs, 3),
            requests_per_job=round(self.aws.requests / params.jobs, 2),
            lapses=self.lapses,
            max_concurrent=self.max_concurrent,
            double_runs=len(self.double_runs),
            executions=executions,
            failed_attempts=self.failed_attempts,
            stopped=self.stopped,
            admitted_in_place=self.metrics.counts[MetricName.ADMISSION_DELAY],
            parked=parked,
            max_waiting_in_flight=self.max_waiting,
            max_parked=self.max_parked,
            requests=dict(sorted(self.aws.calls.items())),
            virtual_h=round((self.clock.now() - START) / 3600, 2),
            wall_s=round(wall_s, 1),
        )


class Recorder:
    """The receivers' metrics sink: counts each metric, and keeps the admission delays."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.admission_delays: list[float] = []

    def add_metric(self, name: str, unit: str, value: float) -> None:
        self.counts[name] += 1

    def add_type_metric(self, name: str, unit: str, value: float, job_type: str) -> None:
        self.counts[name] += 1
        if name == MetricName.ADMISSION_DELAY:
            self.admission_delays.append(value)


def simulate(params: Params, *, admission: bool) -> Result:
    level = logger.log_level
    logger.setLevel("CRITICAL")  # the functions log every decision; the result is what is read here
    try:
        return Simulation(params, admission=admission).run()
    finally:
        logger.setLevel(level)


COLUMNS = (
    ("admission", "admission", None),
    ("makespan_ratio", "makespan_ratio", "<= 1.05"),
    ("receives_per_job", "receives_per_job", "<= 3"),
    ("requests_per_job", "requests_per_job", None),
    ("dlq", "dlq", "= 0"),
    ("lapses", "lapses", "= 0"),
    ("max_concurrent", "max_concurrent", "<= slots"),
    ("makespan_h", "makespan h", None),
    ("ideal_h", "ideal h", None),
    ("double_runs", "double runs", None),
    ("executions", "executions", None),
    ("wall_s", "wall s", None),
)


def meets(result: Result, key: str, slots: int) -> bool | None:
    """Whether the admission-on row meets the issue's goal on `key` (None: no goal, or the off row)."""
    if result.admission != "on":
        return None
    goals: dict[str, Callable[[float], bool]] = {
        "makespan_ratio": lambda v: v <= 1.05,
        "receives_per_job": lambda v: v <= 3,
        "dlq": lambda v: v == 0,
        "lapses": lambda v: v == 0,
        "max_concurrent": lambda v: v <= slots,
    }
    goal = goals.get(key)
    return goal(float(getattr(result, key))) if goal is not None else None


def table(results: list[Result], params: Params) -> Table:
    """The results as a rich table: one row per mode; the goals in the header, the on row's figures
    green where they meet them and red where not."""
    out = Table(
        title=f"Backfill: {params.jobs:,} jobs of one type, {params.slots} slots, "
        f"{params.min_minutes:g}-{params.max_minutes:g} min (seed {params.seed})",
        title_justify="left",
    )
    for _, label, goal in COLUMNS:
        out.add_column(f"{label}\n{goal}" if goal else label, justify="right")
    for result in results:
        cells = []
        for key, _, _ in COLUMNS:
            value = getattr(result, key)
            text = f"{value:,}" if isinstance(value, int) else str(value)
            ok = meets(result, key, params.slots)
            cells.append(text if ok is None else f"[{'green' if ok else 'red'}]{text}[/]")
        out.add_row(*cells)
    return out


def requests_table(results: list[Result], params: Params) -> Table:
    """Requests per job by operation, one column a mode, the on row's total against the goal of 15."""
    out = Table(title="AWS requests per job by operation (goal, on: <= 15)", title_justify="left")
    out.add_column("operation")
    for result in results:
        out.add_column(f"admission {result.admission}", justify="right")
    names = sorted({name for result in results for name in result.requests})
    for name in names:
        out.add_row(name, *(f"{result.requests.get(name, 0) / params.jobs:.2f}" for result in results))
    out.add_row("[b]all[/]", *(f"[b]{result.requests_per_job:.2f}[/]" for result in results))
    return out


def build_parser() -> argparse.ArgumentParser:
    """The command line (apart from the run: docs/benchmarks.md's commands are parsed by a test)."""
    parser = argparse.ArgumentParser(description="Backfill: admission control on and off, simulated.")
    parser.add_argument("--jobs", type=int, default=Params.jobs)
    parser.add_argument("--slots", type=int, default=Params.slots)
    parser.add_argument("--seed", type=int, default=Params.seed)
    parser.add_argument("--min-minutes", type=float, default=Params.min_minutes)
    parser.add_argument("--max-minutes", type=float, default=Params.max_minutes)
    parser.add_argument("--only", choices=("on", "off"), help="run one mode only")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    params = Params(
        jobs=args.jobs,
        slots=args.slots,
        seed=args.seed,
        min_minutes=args.min_minutes,
        max_minutes=args.max_minutes,
    )
    modes = [args.only == "on"] if args.only else [True, False]
    results = [simulate(params, admission=mode) for mode in modes]
    if args.json:
        print(json.dumps({"params": asdict(params), "results": [asdict(r) for r in results]}, indent=1))
    else:
        console = Console()
        if not console.is_terminal:  # piped: rich's 80 columns would cut the figures short
            console = Console(width=200)
        console.print(table(results, params))
        console.print(requests_table(results, params))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
