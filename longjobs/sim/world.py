"""One seed's world: the processor's real functions, the workflow as deployed and the simulated AWS,
wired on one scheduler, with a workload and faults drawn from the seed.

The world is the stage (`longjobs.sim.stage`): the simulated AWS and its clients, the trace, the monitor
and the fault plan. Its services are the actors (each a greenlet; `longjobs.sim.scheduler`):
- the **Lambda service** (`longjobs.sim.lambdas`): the event source mapping and the receiver, the
  extender's schedule, the watcher's asynchronous invocations;
- the **Step Functions service** (`longjobs.sim.executions`): executions of the rendered workflow, their
  status events, and the Spark runs behind the task-token step.
The world itself is the producer, SQS's own faults (duplicate deliveries, expiry) and the end of a seed:
when it has settled, and what the checker finds then (`longjobs.sim.properties`).
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from longjobs.engine.aws import RETRY_ATTEMPTS
from longjobs.engine.cancel import RECORD_KEY as CANCEL_RECORD
from longjobs.engine.delivery.types import ADMISSION_ATTRIBUTE, Carried
from longjobs.engine.jobs import load_catalog
from longjobs.engine.lease import table_definition
from longjobs.engine.lease.lock import FREE, LOCK_STATE_ATTR, is_lock_key
from longjobs.engine.lease.schema import EXECUTION_ATTR, STATUS_ATTR
from longjobs.engine.observability import logger
from longjobs.engine.runs import RunPlace, place_setting
from longjobs.engine.settings import Settings
from longjobs.history.faults import CallFault, WorldFault
from longjobs.sim import deployer, operator
from longjobs.sim.aws import FakeAws, FakeQueue, Message
from longjobs.sim.aws.base import SQS_MAX_VISIBILITY_S
from longjobs.sim.aws.dynamodb import IndexLag
from longjobs.sim.aws.stepfunctions import ListLag
from longjobs.sim.clients import SimClient
from longjobs.sim.emr import EMR_APPLICATION
from longjobs.sim.executions import STATE_MACHINE_ARN, Executions
from longjobs.sim.faults import FaultPlan
from longjobs.sim.lambdas import LambdaService
from longjobs.sim.properties import Monitor, PropertyViolation, Violation
from longjobs.sim.realclock import virtual_time
from longjobs.sim.scheduler import Scheduler, VirtualClock
from longjobs.sim.stage import START
from longjobs.sim.trace import Trace
from longjobs.sim.workload import JobPlan, Workload

CLIENT_ATTEMPTS = RETRY_ATTEMPTS  # the functions' clients (`longjobs.engine.aws`): botocore rewrites the Config's dict
TABLE = "leases"  # the names the rendered definition uses (longjobs.offline.resources)
TOKEN_QUEUE = "spark-tokens"
QUEUE_VT_S = 180  # the stack's queue visibility timeout
LATE_DUPLICATE_SHARE = 0.1
"""First receives whose message SQS hands out again hours later, while it is in flight (at-least-once)."""
SAME_BATCH_SHARE = 0.25
"""The share of injected duplicates that show again at once, in the batch being received when it has
room: two records of one message handled at once by one invocation."""
CAP_SLACK_RUNS = 3
"""Extender periods past an attempt's hard stop by which its job has stopped, beyond the runs a fault plan
may lose (`attempt_within_cap`): the run that sees it, a stop retried once, and the stop's landing."""
INDEX_LAG_S = 1.0
"""The most a write takes to reach the lease table's indexes ("within a fraction of a second" normally)."""
LIST_LAG_S = 2.0
LIST_SLOW_SHARE = 0.05
LIST_SLOW_MAX_S = 600.0
"""ListExecutions' lag (`ListLag`): an execution's start, and its end, show in the list up to `LIST_LAG_S`
later, and one in `1 / LIST_SLOW_SHARE` up to `LIST_SLOW_MAX_S` later (AWS documents no bound: longer
than the reconcile grace, so reconciliation meets running executions missing from the list, and closed
ones still listed RUNNING)."""
DESCRIBE_LAG_S = 1.0
DESCRIBE_SLOW_SHARE = 0.05
DESCRIBE_SLOW_MAX_S = 5.0
"""DescribeExecution's lag (`ListLag`): a new execution is found up to `DESCRIBE_LAG_S` after its start, and
one in `1 / DESCRIBE_SLOW_SHARE` up to `DESCRIBE_SLOW_MAX_S` after (AWS documents it eventually consistent,
with no bound): long enough for a receiver that asks about a start whose answers were lost, seconds later."""


__all__ = ["CLIENT_ATTEMPTS", "START", "TABLE", "TOKEN_QUEUE", "SeedResult", "World"]


def eventual_consistency(seed: int) -> dict[str, Any]:
    """How far the seed's reads lag its writes: the table's indexes, ListExecutions and DescribeExecution."""
    return {
        "index_lag": IndexLag(INDEX_LAG_S, random.Random(f"gsi:{seed}")),
        "list_lag": ListLag(LIST_LAG_S, random.Random(f"sfn-list:{seed}"), LIST_SLOW_SHARE, LIST_SLOW_MAX_S),
        "describe_lag": ListLag(
            DESCRIBE_LAG_S, random.Random(f"sfn-describe:{seed}"), DESCRIBE_SLOW_SHARE, DESCRIBE_SLOW_MAX_S
        ),
    }


@dataclass
class SeedResult:
    seed: int
    violation: Violation | None
    coverage: Counter[str]
    virtual_h: float
    steps: int
    requests: int
    trace: Trace | None = field(default=None, repr=False)
    real_clock_reads: Counter[str] = field(default_factory=Counter)  # by caller: the code under test makes none

    @property
    def failed(self) -> bool:
        return self.violation is not None


class World:
    """One seed, built and run."""

    def __init__(
        self,
        seed: int,
        workload: Workload,
        definition: dict[str, Any],
        catalog_json: str,
        *,
        faults: FaultPlan,
        execution_timeout_s: float,
        keep_calls: bool = True,
        actions: Sequence[tuple[float, Callable[[World], None]]] = (),
        extender_pauses: Sequence[tuple[float, float]] = (),
        until_s: float | None = None,
        waiting_queues: bool = True,
    ) -> None:
        """`actions`: (seconds since the start, what the world does then: a written scenario's abort or
        redelivery); `extender_pauses`: (from, to) windows in which no scheduled extender run starts;
        `until_s`: how long the seed may run (by default the quiet period plus the workload's bound);
        `waiting_queues`: a waiting queue per limited type, as the stack builds them (else none)."""
        self.seed = seed
        self.workload = workload
        self.faults = faults
        self.execution_timeout_s = execution_timeout_s
        self.actions = list(actions)
        self.extender_pauses = list(extender_pauses)
        self.until = START + until_s if until_s is not None else faults.quiet_at + workload.settle_bound_s
        self.scheduler = scheduler = Scheduler(START)
        self.clock = VirtualClock(scheduler)
        self.trace = Trace(scheduler.now, START, keep_calls=keep_calls)
        self.rng = random.Random(f"world:{seed}")
        self.late_duplicates = random.Random(f"late-duplicates:{seed}")  # its own stream: the others keep theirs
        self.same_batch = random.Random(f"same-batch:{seed}")  # its own stream too
        self.catalog = load_catalog(json.loads(catalog_json))
        self.monitor = Monitor(
            limits=self.catalog.declared_limits(),
            excuse_lapses=not faults.within_design,
            groups=_groups(workload),
        )
        self.aws = aws = FakeAws(
            self.clock,
            random.Random(f"sqs:{seed}"),
            table=table_definition(TABLE),
            state_machine_arn=STATE_MACHINE_ARN,
            **eventual_consistency(seed),
        )
        suffix = ".fifo" if workload.fifo else ""  # a FIFO stack: its jobs queue and its DLQ are FIFO
        self.dlq = aws.sqs.create_queue(f"jobs-dlq{suffix}", visibility_timeout_s=30)
        self.queue = aws.sqs.create_queue(f"jobs{suffix}", visibility_timeout_s=QUEUE_VT_S)
        self.token_queue = aws.sqs.create_queue(TOKEN_QUEUE, visibility_timeout_s=30)
        self.waiting: dict[str, FakeQueue] = {
            t.name: aws.sqs.create_queue(f"jobs-waiting-{t.name}", visibility_timeout_s=QUEUE_VT_S)
            for t in (self.catalog if waiting_queues and not workload.fifo else ())
        }
        values: dict[str, Any] = {
            "table_name": TABLE,
            "queue_url": self.queue.url,
            "dlq_url": self.dlq.url,
            "state_machine_arn": STATE_MACHINE_ARN,
            **({"fifo": True} if workload.fifo else {}),
            **workload.settings,
        }
        if self.waiting:
            values["waiting_queues"] = json.dumps({name: queue.url for name, queue in self.waiting.items()})
        values["job_runs"] = place_setting(
            {
                t.name: RunPlace("emr_serverless", name=EMR_APPLICATION)
                if t.platform == "emr_serverless"
                else RunPlace("worker", heartbeat_s=workload.spark_heartbeat_s)
                for t in self.catalog
                if t.runner == "pyspark"
            }
        )
        self.settings = settings = Settings.load(values)
        # the extender sees a lease past its hard stop at its next run, and stops its execution; runs a fault
        # plan within the design may lose in a row, and a stop retried, come on top
        self.monitor.cap_slack_s = (settings.adaptive_lost_runs_survived + CAP_SLACK_RUNS) * settings.extender_period_s
        # a renewal is refused at the 12 h limit up to its chunk early; the lease's own limit keeps the safety
        self.monitor.cap_early_s = settings.adaptive_ceiling_s + settings.cap_safety_s
        for queue in (self.queue, *self.waiting.values()):
            queue.retention_s = settings.queue_retention_s  # as the stack creates them (`queue_retention_s`)
            queue.on_expired = self._on_expired
        aws.sqs.on_receive = self._on_receive
        aws.sqs.on_dead_letter = self._on_dead_letter
        aws.sqs.on_sent = self._on_sent
        aws.sqs.on_move_task = lambda task: operator.run_move_task(self, task)
        aws.sqs.on_moved = lambda queue, message, source: operator.moved(self, queue, message, source)
        self.busy: set[str] = set()  # what must end before the seed may (a redrive to come, a move task running)
        aws.dynamodb.on_store = self.monitor.lease_written
        self.job_of_message: dict[str, str] = {}  # the producer's messages (a raw body names no job id)
        self.plans_of_message: dict[str, list[JobPlan]] = {}  # the plans that sent each (FIFO: a duplicate's too)
        self.unsent = len(workload.jobs)  # the producer's messages still to send (a redrive's are not its)
        self.s3_events: set[tuple[str, str]] = set()  # (partition job, sequencer) of each S3 event sent
        self.functions = self._lambda_service()
        self.executions = Executions(
            self,
            definition,
            execution_timeout_s=execution_timeout_s,
            watch=lambda change, at: self.functions.invoke_watcher(change, at=at),
            emr_limits_s={
                t.name: t.emr.timeout_minutes * 60.0
                for t in self.catalog
                if t.runner == "pyspark" and t.platform == "emr_serverless"
            },
        )
        self.job_queues = (self.queue, *self.waiting.values())
        self.holds_wait_until: float | None = None  # see `_settled`
        self.violation: Violation | None = None
        self.values = values
        self.deployed: dict[str, Any] = {}  # what a deploy changed in the functions' settings (`longjobs.sim.deployer`)
        self.old_shards = workload.upgrade_at_s is not None  # the functions of the old shard count until then
        self.rebuild()

    def _lambda_service(self) -> LambdaService:
        """The world's Lambda service (a benchmark's world may run its own)."""
        return LambdaService(self)

    # -- wiring ---------------------------------------------------------------------------------------------

    def client(self, service: str, actor: str, *, once: bool = False) -> Any:
        """A client of the simulated AWS for `actor`, seen by the monitor and the trace; `once`: no retries."""
        backend = (
            self.executions.emr
            if service == "emr-serverless"
            else {"sqs": self.aws.sqs, "dynamodb": self.aws.dynamodb, "stepfunctions": self.aws.stepfunctions}[service]
        )

        def observe(service: str, operation: str, params: dict[str, Any], fault: CallFault | None) -> None:
            self.monitor.reach(f"call:{actor}:{service}.{operation}")
            if fault is not None:
                self.monitor.reach(f"fault:{fault.value}:{service}.{operation}")
            if service == "sqs" and operation in ("delete_message", "delete_message_batch"):
                for entry in params.get("Entries") or [params]:
                    self.monitor.needless.may_show_again(str(entry["ReceiptHandle"]).partition("#")[0])
            if actor == "extender" and operation == "stop_execution":
                arn = params["executionArn"]
                self.monitor.extender_stops(
                    self._invocation(),
                    arn,
                    message_deleted=_message_deleted(self.aws, arn),
                    held=_held(self.aws, self.scheduler.now(), arn),
                )

        def answered(operation: str, params: dict[str, Any], answer: dict[str, Any]) -> None:
            self.monitor.extender_answered(self._invocation(), operation, params, answer)

        def refused(service: str, operation: str, params: dict[str, Any], code: str) -> None:
            if code in ("ConditionalCheckFailedException", "TransactionCanceledException"):
                self.monitor.reach(f"fenced:{actor}:{operation}")
            else:
                self.monitor.reach(f"refused:{actor}:{service}.{operation}:{code}")

        return SimClient(
            service,
            backend,
            actor=actor,
            scheduler=self.scheduler,
            faults=self.faults,
            trace=self.trace,
            observe=observe,
            refused=refused,
            answered=answered if actor == "extender" else None,
            max_attempts=1 if once or actor == "workflow" else CLIENT_ATTEMPTS,  # Step Functions: the ASL's Retry
            socket_timeouts=actor != "workflow",
        )

    def _invocation(self) -> str:
        """The invocation the current actor belongs to (its group's name)."""
        group = self.scheduler.group_of_current()
        return group.name if group is not None else ""

    # -- running --------------------------------------------------------------------------------------------

    def run(self) -> SeedResult:
        level = logger.log_level
        logger.setLevel(logging.CRITICAL)  # the functions log every decision; the trace is what is kept
        try:
            with virtual_time(self.scheduler.now) as reads:
                self._start()
                try:
                    self.scheduler.run(until=self.until, stop=self._settled)
                except PropertyViolation as exc:
                    self._violate(exc.name, exc.detail)
                if self.violation is None:
                    self._finish(settled_in_time=self._settled())
        finally:
            logger.setLevel(level)
        return SeedResult(
            seed=self.seed,
            violation=self.violation,
            coverage=self.monitor.coverage,
            virtual_h=round((self.scheduler.now() - START) / 3600, 3),
            steps=self.scheduler.steps,
            requests=self.aws.requests,
            trace=self.trace,
            real_clock_reads=reads,
        )

    def _violate(self, name: str, detail: str) -> None:
        self.violation = Violation(name, detail, round(self.scheduler.now() - START, 6), self.scheduler.steps)
        self.trace.event("checker", "violation", property=name, detail=detail)

    def rebuild(self) -> None:
        """The functions of the settings deployed now: new invocations (and a new extender container) run
        them; those begun before finish with the ones they began with. The queues' redrive count follows
        the settings, as the stack derives it."""
        before = self.workload.shards_before
        shards = {"shards": before, "previous_shards": before} if self.old_shards else {}
        settings = Settings.load({**self.values, **shards, **self.deployed})
        backstop = settings.redrive_receives
        for queue in (self.queue, *self.waiting.values()):
            queue.redrive = (self.dlq, backstop)
        self.functions.build(settings)

    def _upgrade(self) -> None:
        """The stack updated to the seed's shard count."""
        self.monitor.reach("sim:shards_upgraded")
        self.monitor.reach(f"sim:shards:{self.workload.shards_before}->{self.settings.shards}")
        self.trace.event("world", "upgraded", shards=self.settings.shards)
        self.old_shards = False
        self.rebuild()

    def _start(self) -> None:
        if self.workload.upgrade_at_s is not None:
            self.scheduler.call_at(START + self.workload.upgrade_at_s, self._upgrade)
        for deploy in (self.workload.deploy, self.workload.definition_deploy):
            if deploy is not None:
                self.busy.add(f"deploy:{deploy.change}")  # the seed does not end before it
                self.scheduler.call_at(START + deploy.at_s, lambda plan=deploy: deployer.deploy(self, plan))  # type: ignore[misc]
        for job in self.workload.jobs:
            self.scheduler.call_at(START + job.send_at_s, lambda job=job: self._send(job))  # type: ignore[misc]
        self.functions.start()
        operator.schedule(self)
        for at_s, action in self.actions:
            self.scheduler.call_at(START + at_s, lambda action=action: action(self))  # type: ignore[misc]

    # -- a written scenario's actions ---------------------------------------------------------------------

    def abort(self, job_id: str) -> None:
        """StopExecution of the job's running execution (an operator's, or the console's)."""
        for execution in list(self.aws.stepfunctions.executions.values()):
            if execution.status == "RUNNING" and str(execution.input["job"].get("job_id")) == job_id:
                self.trace.event("scenario", "abort", execution=execution.name, job_id=job_id)
                self.aws.stepfunctions.stop_execution(executionArn=execution.arn, cause="aborted by the scenario")

    def redeliver(self, job_id: str) -> None:
        """The job's message shows again now, as SQS's at-least-once delivery may hand it out twice."""
        for message in list(self.queue.messages.values()):
            if message.job_key == job_id:
                self.trace.event("scenario", "redeliver", message_id=message.message_id, job_id=job_id)
                self.monitor.duplicates.add(message.message_id)
                self.queue.hide(message, self.scheduler.now())

    def _settled(self) -> bool:
        """Every message sent, none left on the jobs or waiting queues, no cancel unfinished, no execution
        running (asked after every step: kept to a few comparisons), and every job lock and slot free, or
        `holds_wait_s` past the rest: what frees a hold after its execution ended may be the extender's next look at
        its lease (a renewal that finds the message gone, reconciliation), not yet made when the last
        message went (corpus seed 78: reconciliation's completion dies after its delete)."""
        if self.unsent or self.executions.running or self.busy:
            self.holds_wait_until = None
            return False
        now = self.scheduler.now()
        for queue in self.job_queues:
            if queue.next_expiry <= now:
                queue.expire()
        if any(queue.messages for queue in self.job_queues) or _cancel_unfinished(self.aws.dynamodb.items):
            self.holds_wait_until = None
            return False
        if self.holds_wait_until is None:
            self.holds_wait_until = now + self.holds_wait_s
        return now >= self.holds_wait_until or not self._holds_held()

    @property
    def holds_wait_s(self) -> float:
        """How long after the rest settled a hold may still be held: reconciliation's sweep and grace, and
        the extender runs a fault plan may lose in a row, and one more."""
        settings = self.settings
        runs = settings.adaptive_lost_runs_survived + 1
        return settings.reconcile_interval_s + settings.reconcile_grace_s + runs * settings.extender_period_s

    def _holds_held(self) -> bool:
        return any(
            is_lock_key(key) and item.get(LOCK_STATE_ATTR, {}).get("S", FREE) != FREE
            for key, item in self.aws.dynamodb.items.items()
        )

    def _finish(self, *, settled_in_time: bool) -> None:
        left: Counter[str] = Counter()
        for queue in (self.queue, *self.waiting.values()):
            for message in queue.messages.values():
                for key in self.keys_of(message):
                    left[key] += 1
        in_dlq = Counter(key for message in self.dlq.messages.values() for key in self.keys_of(message))
        locks = {key: item for key, item in self.aws.dynamodb.items.items() if is_lock_key(key)}
        self.trace.event("world", "end", settled=settled_in_time, left=dict(sorted(left.items())))
        expected = {key: job.expected for job in self.workload.jobs for key in job.job_keys}
        for name, detail in self.monitor.final(
            jobs=expected, left_on_queues=left, in_dlq=in_dlq, locks=locks, settled_in_time=settled_in_time
        ):
            self._violate(name, detail)
            return
        for detail in self.executions.emr.problems(self.scheduler.now()):
            self._violate("emr_runs_end", detail)
            return

    # -- the producer and SQS's own faults --------------------------------------------------------------------

    def _send(self, job: JobPlan) -> None:
        """The producer sends a message: a job message, or an S3 notification, which counts as a message
        sent of each of its markers' partition jobs (once per S3 event it fans out: `JobPlan.fanned_events`)."""
        message_id = self.aws.sqs.put(self.queue, job.body, group_id=job.group)
        self.job_of_message[message_id] = job.job_id
        self.plans_of_message.setdefault(message_id, []).append(job)
        self.unsent -= 1
        for key, event in zip(job.job_keys, job.fanned_events, strict=True):
            if (key, event) not in self.s3_events:  # an event S3 delivers again is no new message
                self.monitor.sent[key] += 1
            if event is not None:
                self.s3_events.add((key, event))
            if not job.partitions:  # a notification's jobs are the receiver's messages, not this one
                self.monitor.sent_messages[key].add(message_id)
            kind = "wait" if job.partitions else job.type
            group = {"group": job.group} if job.group is not None else {}  # FIFO: its message group
            s3 = {"s3_event": event} if event is not None else {}
            self.trace.event("producer", "sent", message_id=message_id, job_id=key, type=kind, **group, **s3)

    def _on_receive(self, queue: FakeQueue, message: Message) -> None:
        now = self.scheduler.now()
        lease = self.aws.dynamodb.items.get(message.message_id, {})
        hold_ends = float(lease["renew_until"]["N"]) - START if "renew_until" in lease else None
        self.trace.event(
            "sqs",
            "delivered",
            queue=queue.name,
            message_id=message.message_id,
            job_id=self.job_of(message),
            receive_count=message.receive_count,
            duplicate=message.message_id in self.monitor.duplicates,
            hold_ends=hold_ends,
        )
        if queue is self.queue:
            _judge_needless(self.aws, self.monitor, message, lease)
        self.monitor.received(message.message_id, now=now - START, hold_ends=hold_ends)
        if queue is self.queue:
            _duplicate(self, queue, message, now)

    def _deliver_again(self, queue: FakeQueue, message_id: str) -> None:
        """SQS hands a message in flight out again (at-least-once), if it is still on its queue."""
        message = queue.messages.get(message_id)
        if message is None or message.visible_at <= self.scheduler.now():
            return
        self.monitor.duplicates.add(message_id)
        self.monitor.reach("duplicate_delivery_late")
        self.trace.event("sqs", "late_duplicate", message_id=message_id)
        queue.hide(message, self.scheduler.now())

    def _on_expired(self, queue: FakeQueue, message: Message) -> None:
        """SQS deleted a message at the end of its retention: lost, unless another copy of its job lives."""
        self.monitor.reach("sqs:expired")
        self.trace.event("sqs", "expired", queue=queue.name, message_id=message.message_id, job_id=self.job_of(message))

    def job_of(self, message: Message) -> str:
        """The job a message (or its DLQ copy) carries: its body's job id, else the producer's job."""
        if message.job_key:
            return message.job_key
        original = str(message.attributes.get("OriginalMessageId", {}).get("StringValue", message.message_id))
        return self.job_of_message.get(original, original)

    def _on_sent(self, queue: FakeQueue, message: Message) -> None:
        """A copy the processor sent (to wait for its job id, or parked) names the producer's message; one
        the operator's redrive sent is a message of its own."""
        if queue in self.job_queues and self._invocation() == operator.REDRIVE_GROUP:
            # the command's copy of a DLQ message it holds: the DLQ message with its body
            source = next((m for m in self.dlq.messages.values() if m.body == message.body), message)
            operator.redriven(self, message, source)
            return
        raw = message.attributes.get(ADMISSION_ATTRIBUTE, {}).get("StringValue")
        original = Carried.decode(raw).original_id if raw else None
        if original is not None:
            self.monitor.copied(message.message_id, original)

    def keys_of(self, message: Message) -> tuple[str, ...]:
        """The jobs a message (or its DLQ copy) carries: its job (`job_of`), or, for an S3 notification of
        the producer's, each of its markers' partition jobs."""
        job = self.job_of(message)
        plan = self.workload.by_id.get(job)
        return plan.job_keys if plan is not None and plan.partitions else (job,)

    def _on_dead_letter(self, queue: FakeQueue, message: Message) -> None:
        reason = {name: value.get("StringValue") for name, value in sorted(message.attributes.items())}
        for key in self.keys_of(message):
            self.monitor.dead_lettered_copy(key, dict(message.attributes), message.message_id, self.aws.dynamodb.items)
            self.trace.event("sqs", "dead_lettered", message_id=message.message_id, job_id=key, reason=reason)


def _message_deleted(aws: FakeAws, execution_arn: str) -> bool:
    """Whether the message an execution runs for is gone from its queue: deleted (or moved to the DLQ)."""
    execution = aws.stepfunctions.executions.get(execution_arn)
    if execution is None:
        return False
    queue = aws.sqs.queues.get(str(execution.input.get("queue_url", "")))
    return queue is not None and str(execution.input.get("message_id", "")) in queue.gone


def _held(aws: FakeAws, now: float, execution_arn: str) -> tuple[str, float, float] | None:
    """The receive that hides the message an execution runs for: its handle, when SQS's 12 h limit ends
    it, and now; None when the message is not in flight."""
    execution = aws.stepfunctions.executions.get(execution_arn)
    queue = aws.sqs.queues.get(str(execution.input.get("queue_url", ""))) if execution else None
    message = queue.messages.get(str(execution.input.get("message_id", ""))) if queue and execution else None
    if message is None or message.deleted or message.handle is None or message.visible_at <= now:
        return None
    return message.handle, message.received_at + SQS_MAX_VISIBILITY_S, now


def _judge_needless(aws: FakeAws, monitor: Monitor, message: Message, lease: dict[str, Any]) -> None:
    """`needless_redeliveries`: a receive of a message whose job is done, with its cause."""
    if lease.get(STATUS_ATTR, {}).get("S") != "SUCCEEDED":
        monitor.needless.received_needed(message.message_id)
        return
    execution = aws.stepfunctions.executions.get(lease.get(EXECUTION_ATTR, {}).get("S", ""))
    monitor.needless.redelivered_after_success(
        message.message_id,
        close_under_way=execution is not None and execution.status == "RUNNING",
        duplicate=message.message_id in monitor.duplicates,
    )


def _groups(workload: Workload) -> dict[str, list[str]]:
    """FIFO: each message group's job ids, in the order they are sent."""
    groups: dict[str, list[str]] = {}
    for job in sorted(workload.jobs, key=lambda job: job.send_at_s):
        if job.group is not None:
            groups.setdefault(job.group, []).append(job.job_id)
    return groups


def _duplicate(world: World, queue: FakeQueue, message: Message, now: float) -> None:
    """SQS's at-least-once delivery of a jobs queue's message just received: the fault shows it again
    soon (at once, for `SAME_BATCH_SHARE` of them) while this receive is in flight; and for
    `LATE_DUPLICATE_SHARE` of first receives, hours into the job's run, a redelivery that adopts the
    running attempt late."""
    if world.faults.happens(now, WorldFault.DUPLICATE_DELIVERY):
        world.monitor.duplicates.add(message.message_id)
        world.monitor.reach("duplicate_delivery_injected")
        delay = world.rng.uniform(0.5, 10.0)
        queue.hide(message, now if world.same_batch.random() < SAME_BATCH_SHARE else now + delay)
    if message.receive_count == 1 and world.late_duplicates.random() < LATE_DUPLICATE_SHARE:
        at = now + world.late_duplicates.uniform(600, 12 * 3_600)
        world.scheduler.call_at(at, lambda: world._deliver_again(queue, message.message_id))


def _cancel_unfinished(items: dict[str, dict[str, Any]]) -> bool:
    """Whether an operator's cancel is not done: its lease or marker stays due, and its claimant or the
    extender still sends its DLQ copy, though the receiver may have acknowledged the message already."""
    for item in items.values():
        result = item.get("result", {}).get("S")
        if result and f'"{CANCEL_RECORD}"' in result and json.loads(result).get(CANCEL_RECORD, {}).get("done") is False:
            return True
    return False
