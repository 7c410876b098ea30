"""One seed's world: the processor's real functions, the workflow as deployed and the simulated AWS,
wired on one scheduler, with a workload and faults drawn from the seed.

Actors (each a greenlet; `longjobs.sim.scheduler`):
- the **event source mapping**: pollers that receive up to 10 visible messages of the jobs queue, invoke
  the receiver (`longjobs.engine.receiver.service.receive` per record, as the handler's record handler),
  and delete the records it reported done (partial batch response); an invocation that dies or hits the
  function's timeout is a failed batch: nothing is deleted.
- the **extender's schedule**: one invocation a period (`run_invocation`), late or skipped by the seed,
  killed at its timeout; with reserved concurrency 1 (`Workload.extender_reserved`) a run still going when
  the next is due throttles it, without it the next runs beside it in another container.
- the **status-event rule**: each end of an execution reaches the watcher (`on_status_change`) late, lost,
  duplicated or out of order, by the seed.
- **executions** of the rendered workflow (`longjobs.sim.workflow`), started by StartExecution, killed by
  StopExecution and at the state machine's timeout.
- **Spark runs** behind the task-token step: they heartbeat, then succeed, fail, hang or vanish.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, cast

from botocore.exceptions import BotoCoreError, ClientError

from longjobs.engine.aws import RETRY_ATTEMPTS
from longjobs.engine.delivery.types import ADMISSION_ATTRIBUTE, Carried, Delivery, Outcome, Receiver, sent_at
from longjobs.engine.extender.invocation import run_invocation
from longjobs.engine.extender.service import Extender
from longjobs.engine.factory import Clients, Factory
from longjobs.engine.jobs import load_catalog
from longjobs.engine.lease import table_definition
from longjobs.engine.lease.lock import FREE, LOCK_STATE_ATTR, is_lock_key
from longjobs.engine.observability import logger
from longjobs.engine.receiver.batch import receive_batch
from longjobs.engine.receiver.service import receive
from longjobs.engine.settings import FIFO_BATCH_SIZE, Settings
from longjobs.engine.watcher.models import ExecutionStatusChange
from longjobs.engine.watcher.service import Watcher, on_status_change
from longjobs.sim.aws import ACCOUNT, REGION, Execution, FakeAws, FakeQueue, Message
from longjobs.sim.aws.dynamodb import IndexLag
from longjobs.sim.aws.stepfunctions import ListLag
from longjobs.sim.clients import SimClient
from longjobs.sim.faults import CallFault, FaultPlan, WorldFault
from longjobs.sim.properties import Monitor, PropertyViolation, Running, Violation
from longjobs.sim.realclock import virtual_time
from longjobs.sim.scheduler import Crash, Group, Scheduler, Signal, VirtualClock
from longjobs.sim.trace import Trace
from longjobs.sim.workflow import ExecutionContext, Interpreter, StatesError
from longjobs.sim.workload import OLD_SHARDS, JobPlan, SparkBehaviour, Workload

START = 1_700_000_000.0
CLIENT_ATTEMPTS = RETRY_ATTEMPTS  # the functions' clients (engine/aws.py): botocore rewrites the Config's dict
TABLE = "leases"  # the names the rendered definition uses (longjobs.offline.resources)
TOKEN_QUEUE = "spark-tokens"
STATE_MACHINE_ARN = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:long-jobs"
JOB_STATE = "RunJob"  # the workflow's job step (longjobs.construct.workflow)
QUEUE_VT_S = 180  # the stack's queue visibility timeout
INDEX_LAG_S = 1.0
"""The most a write takes to reach the lease table's indexes ("within a fraction of a second" normally)."""
LIST_LAG_S = 2.0
LIST_SLOW_SHARE = 0.05
LIST_SLOW_MAX_S = 600.0
"""ListExecutions' lag (`ListLag`): an execution's start, and its end, show in the list up to `LIST_LAG_S`
later, and one in `1 / LIST_SLOW_SHARE` up to `LIST_SLOW_MAX_S` later (AWS documents no bound: longer
than the reconcile grace, so reconciliation meets running executions missing from the list, and closed
ones still listed RUNNING)."""
ESM_BATCH = 10
ESM_POLLERS = 2
ESM_IDLE_S = 20.0  # a long poll's wait when the queue shows nothing
EXTENDER_TIMEOUT_S = 90.0  # longjobs.construct.constants.EXTENDER_TIMEOUT
WATCHER_TIMEOUT_S = 30.0  # longjobs.construct.constants.WATCHER_TIMEOUT
WATCHER_RETRY_DELAYS_S = (60.0, 120.0)
"""Lambda's retries of a failed asynchronous invocation (the watcher's status event): one minute before the
second attempt, two before the third (invocation-async-error-handling.html); the stack keeps the default
two retries (`configure_async_invoke(retry_attempts=2)`, longjobs.construct.functions), then sends the
event to its on-failure destination (the WatcherFailures queue). Its maximum event age is the default
6 hours, far beyond these three minutes."""
SPARK_PICKUP_S = (0.5, 5.0)
SPARK_ERROR = "AnalysisException"
EVENT_DELAY_S = (0.2, 3.0)
EVENT_LATE_S = (30.0, 600.0)
RESOURCES = {
    "arn:aws:states:::dynamodb:getItem": ("dynamodb", "get_item"),
    "arn:aws:states:::dynamodb:updateItem": ("dynamodb", "update_item"),
    "arn:aws:states:::aws-sdk:dynamodb:transactWriteItems": ("dynamodb", "transact_write_items"),
    "arn:aws:states:::aws-sdk:sqs:deleteMessage": ("sqs", "delete_message"),
    "arn:aws:states:::aws-sdk:sqs:changeMessageVisibility": ("sqs", "change_message_visibility"),
    "arn:aws:states:::sqs:sendMessage.waitForTaskToken": ("sqs", "send_message"),
}
SDK_SQS_ERRORS = {  # SQS codes as the AWS SDK integration names them (`Sqs.<Exception>`)
    "ReceiptHandleIsInvalid": "Sqs.ReceiptHandleIsInvalidException",
    "MessageNotInflight": "Sqs.MessageNotInflightException",
    "NonExistentQueue": "Sqs.QueueDoesNotExistException",
    "QueueDoesNotExist": "Sqs.QueueDoesNotExistException",
    "RequestThrottled": "Sqs.RequestThrottledException",
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


class Integrations:
    """The workflow's Task resources, through the workflow's own clients (Step Functions' calls)."""

    def __init__(self, world: World) -> None:
        self._world = world

    def resources(self) -> set[str]:
        return set(RESOURCES)

    def invoke(self, resource: str, parameters: Any, context: ExecutionContext) -> Any:
        service, operation = RESOURCES[resource]
        client = self._world.workflow_clients[service]
        if resource.endswith(".waitForTaskToken"):
            return self._task_token(client, parameters, context)
        try:
            return client.call(operation, dict(parameters))
        except ClientError as exc:
            raise _states_error(service, exc, sdk=":aws-sdk:" in resource) from None
        except BotoCoreError as exc:
            raise StatesError("States.TaskFailed", str(exc)) from None

    def _task_token(self, client: SimClient, parameters: Any, context: ExecutionContext) -> Any:
        world = self._world
        token = context.task_token or ""
        task = TokenTask(world.scheduler)
        world.aws.stepfunctions.tasks[token] = task
        try:
            try:
                client.call(
                    "send_message",
                    {"QueueUrl": parameters["QueueUrl"], "MessageBody": json.dumps(parameters["MessageBody"])},
                )
            except ClientError as exc:
                raise _states_error("sqs", exc, sdk=False) from None
            except BotoCoreError as exc:
                raise StatesError("States.TaskFailed", str(exc)) from None
            world.spark_task_sent(token, parameters["MessageBody"])
            return task.wait(timeout_s=context.timeout_s, heartbeat_s=context.heartbeat_s)
        finally:
            task.closed = True


class TokenTask:
    """A task-token task waiting for SendTaskSuccess/Failure, under its timeout and heartbeat timeout."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self.closed = False
        self._done = Signal()
        self._last_beat = scheduler.now()

    def succeed(self, output: str) -> None:
        self._scheduler.set(self._done, ("ok", json.loads(output)))

    def fail(self, error: str, cause: str) -> None:
        self._scheduler.set(self._done, ("error", StatesError(error, cause)))

    def heartbeat(self) -> None:
        self._last_beat = self._scheduler.now()

    def wait(self, *, timeout_s: float | None, heartbeat_s: float | None) -> Any:
        scheduler = self._scheduler
        deadline = scheduler.now() + (timeout_s if timeout_s is not None else 99_999_999)
        while True:
            beat_deadline = self._last_beat + heartbeat_s if heartbeat_s is not None else deadline
            try:
                kind, value = scheduler.wait_for(self._done, max(0.0, min(deadline, beat_deadline) - scheduler.now()))
            except TimeoutError:
                now = scheduler.now()
                if now >= deadline:
                    raise StatesError("States.Timeout", "the task ran past its TimeoutSeconds") from None
                if heartbeat_s is not None and now >= self._last_beat + heartbeat_s:
                    raise StatesError("States.HeartbeatTimeout", "no heartbeat within HeartbeatSeconds") from None
                continue
            if kind == "error":
                raise value
            return value


def _states_error(service: str, exc: ClientError, *, sdk: bool) -> StatesError:
    """A service error as the Task state reports it: `DynamoDB.<Code>` for the optimized DynamoDB
    integration and `DynamoDb.<Exception>` for the AWS SDK one (the SDK's exception name, as
    `InternalServerError` -> `InternalServerErrorException`), `Sqs.<Exception>` for SQS's AWS SDK one
    (generic `Sqs.SqsException` for the rest)."""
    error = exc.response.get("Error", {})
    code = str(error.get("Code", "")).removeprefix("AWS.SimpleQueueService.")
    cause = str(error.get("Message", ""))
    if service == "dynamodb":
        if not sdk:
            return StatesError(f"DynamoDB.{code}", cause)
        return StatesError(f"DynamoDb.{code if code.endswith('Exception') else code + 'Exception'}", cause)
    if sdk:
        return StatesError(SDK_SQS_ERRORS.get(code, "Sqs.SqsException"), cause)
    return StatesError(f"SQS.{code}", cause)


class Recorder:
    """The functions' metrics sink: each metric name counts as coverage."""

    def __init__(self, monitor: Monitor) -> None:
        self._monitor = monitor

    def add_metric(self, name: str, unit: str, value: float) -> None:
        self._monitor.reach(f"metric:{name}")

    def add_type_metric(self, name: str, unit: str, value: float, job_type: str) -> None:
        self._monitor.reach(f"metric:{name}")


class Containers[Function]:
    """A Lambda function's execution environments, each with its own state (its cached views, its place in
    line, its batch's read-ahead and pending copies): an idle one takes the next invocation, and an
    invocation beside one still going gets a new one. One is used again only after an invocation that
    ended: Lambda resets the execution environment of one that crashed or timed out
    (docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html, "Failures during the invoke
    phase"). An upgrade replaces the pool; a container of the old one is not used again. `Function` is a
    function's state in one container (a `Receiver`, an `Extender`, a `Watcher`)."""

    def __init__(self, build: Callable[[int], Function], *, on_new: Callable[[], None]) -> None:
        self._build = build
        self._on_new = on_new
        self._idle = [build(0)]
        self._made = 1

    def take(self) -> Function:
        if self._idle:
            return self._idle.pop()
        self._on_new()
        self._made += 1
        return self._build(self._made - 1)

    def give_back(self, container: Function) -> None:
        """After an invocation that ended."""
        self._idle.append(container)


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
        self.catalog = load_catalog(json.loads(catalog_json))
        self.monitor = Monitor(
            limits={t.name: t.max_concurrency for t in self.catalog if t.max_concurrency},
            excuse_lapses=not faults.within_design,
            groups=_groups(workload),
        )
        self.aws = aws = FakeAws(
            self.clock,
            random.Random(f"sqs:{seed}"),
            table=table_definition(TABLE),
            state_machine_arn=STATE_MACHINE_ARN,
            index_lag=IndexLag(INDEX_LAG_S, random.Random(f"gsi:{seed}")),
            list_lag=ListLag(LIST_LAG_S, random.Random(f"sfn-list:{seed}"), LIST_SLOW_SHARE, LIST_SLOW_MAX_S),
        )
        suffix = ".fifo" if workload.fifo else ""  # a FIFO stack: its jobs queue and its DLQ are FIFO
        self.dlq = aws.sqs.create_queue(f"jobs-dlq{suffix}", visibility_timeout_s=30)
        self.queue = aws.sqs.create_queue(f"jobs{suffix}", visibility_timeout_s=QUEUE_VT_S)
        self.token_queue = aws.sqs.create_queue(TOKEN_QUEUE, visibility_timeout_s=30)
        self.waiting: dict[str, FakeQueue] = {
            name: aws.sqs.create_queue(f"jobs-waiting-{name}", visibility_timeout_s=QUEUE_VT_S)
            for name in (self.monitor.limits if waiting_queues else ())
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
        self.settings = settings = Settings.load(values)
        backstop = settings.redrive_max_receives(settings.queue_retention_s)
        for queue in (self.queue, *self.waiting.values()):
            queue.redrive = (self.dlq, backstop)
            queue.retention_s = settings.queue_retention_s  # as the stack creates them (`queue_retention_s`)
            queue.on_expired = self._on_expired
        aws.sqs.on_receive = self._on_receive
        aws.sqs.on_dead_letter = self._on_dead_letter
        aws.sqs.on_sent = self._on_sent
        aws.dynamodb.on_store = self.monitor.lease_written
        aws.stepfunctions.on_start = self._on_start
        aws.stepfunctions.on_stop = self._on_stop
        self.workflow_clients = {name: self._client(name, "workflow") for name in ("sqs", "dynamodb")}
        self.interpreter = Interpreter(definition, Integrations(self), scheduler)
        job_step = definition["States"][JOB_STATE]
        self.after_success = str(job_step["Next"])  # the states after the job's end, as the definition says
        self.after_job = {self.after_success, *(str(catch["Next"]) for catch in job_step.get("Catch", []))}
        self.groups: dict[str, Group] = {}  # execution ARN -> its actor's group
        self.running_executions = 0
        self.extender_runs = 0  # scheduled extender runs going on (reserved concurrency 1 allows one)
        self.job_of_message: dict[str, str] = {}  # the producer's messages (a raw body names no job id)
        self.job_queues = (self.queue, *self.waiting.values())
        self.holds_wait_until: float | None = None  # see `_settled`
        self.queue_changed = [Signal() for _ in range(ESM_POLLERS)]  # what each idle poller waits on
        self.queue.on_change = self._queue_changed
        self.lost_runs = 0  # scheduled extender runs lost in a row (see _extender_due)
        self.violation: Violation | None = None
        if workload.upgrade_at_s is None:
            self._build_functions(settings)
        else:  # the functions of the old shard count, replaced at the upgrade (`_upgrade`)
            self._build_functions(Settings.load({**values, "shards": OLD_SHARDS, "previous_shards": OLD_SHARDS}))

    # -- wiring ---------------------------------------------------------------------------------------------

    def _client(self, service: str, actor: str) -> Any:
        backend = {"sqs": self.aws.sqs, "dynamodb": self.aws.dynamodb, "stepfunctions": self.aws.stepfunctions}[service]

        def observe(service: str, operation: str, params: dict[str, Any], fault: CallFault | None) -> None:
            self.monitor.reach(f"call:{actor}:{service}.{operation}")
            if fault is not None:
                self.monitor.reach(f"fault:{fault.value}:{service}.{operation}")
            if actor == "extender" and operation == "stop_execution":
                arn = params["executionArn"]
                self.monitor.extender_stops(self._invocation(), arn, message_deleted=self._message_deleted(arn))

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
            max_attempts=1 if actor == "workflow" else CLIENT_ATTEMPTS,  # Step Functions: the ASL's Retry
            socket_timeouts=actor != "workflow",
        )

    def _message_deleted(self, execution_arn: str) -> bool:
        """Whether the message an execution runs for is gone from its queue: deleted (or moved to the DLQ)."""
        execution = self.aws.stepfunctions.executions.get(execution_arn)
        if execution is None:
            return False
        queue = self.aws.sqs.queues.get(str(execution.input.get("queue_url", "")))
        return queue is not None and str(execution.input.get("message_id", "")) in queue.gone

    def _invocation(self) -> str:
        """The invocation the current actor belongs to (its group's name)."""
        group = self.scheduler.group_of_current()
        return group.name if group is not None else ""

    def _build_functions(self, settings: Settings) -> None:
        """The receiver, the extender and the watcher of `settings`: built at the start, and again at an
        upgrade (`_upgrade`), when invocations begun before it finish with the functions they began with."""
        factory = Factory(settings, self.clock, self.catalog, Recorder(self.monitor))
        executor = cast(Any, self.scheduler)  # `map` on actors: the engine's parallel calls, interleaved

        def clients(actor: str) -> Clients:
            return Clients(
                self._client("sqs", actor), self._client("dynamodb", actor), self._client("stepfunctions", actor)
            )

        def receiver(actor: str, container: int = 0) -> Receiver:
            rng = random.Random(f"{actor}:{self.seed}" + (f":{container}" if container else ""))
            return factory.receiver(clients(actor), rng)

        def new_receiver(container: int) -> Receiver:
            return receiver("receiver", container)

        self.receivers = Containers(new_receiver, on_new=lambda: self.monitor.reach("receiver:new_container"))

        def extender(container: int) -> Extender:
            own = clients("extender")
            return factory.extender(
                own,
                random.Random(f"extender:{self.seed}:backoff" + (f":{container}" if container else "")),
                executor=executor,
                admitter=receiver("extender", container) if factory.admits else None,
            )

        # Without reserved concurrency a run due while every container is busy gets a new one.
        def new_extender() -> None:
            self.monitor.reach("extender:overlapping_run" if self.extender_runs else "extender:new_container")

        self.extenders = Containers(extender, on_new=new_extender)

        def watcher(container: int) -> Watcher:
            own = clients("watcher")
            admitter = receiver("watcher", container) if factory.admits else None
            return factory.watcher(own, admit=factory.watcher_admission(admitter) if admitter else None)

        self.watchers = Containers(watcher, on_new=lambda: self.monitor.reach("watcher:new_container"))

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

    def _upgrade(self) -> None:
        """The stack updated to the seed's shard count: new invocations (and a new extender container) run
        the new functions; those begun before finish with the old ones."""
        self.monitor.reach("sim:shards_upgraded")
        self.trace.event("world", "upgraded", shards=self.settings.shards)
        self._build_functions(self.settings)

    def _start(self) -> None:
        if self.workload.upgrade_at_s is not None:
            self.scheduler.call_at(START + self.workload.upgrade_at_s, self._upgrade)
        for job in self.workload.jobs:
            self.scheduler.call_at(START + job.send_at_s, lambda job=job: self._send(job))  # type: ignore[misc]
        for index in range(ESM_POLLERS):
            self.scheduler.spawn(lambda index=index: self._poller(index))  # type: ignore[misc]
        self._schedule_extender(0)
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
        """Every message sent, none left on the jobs or waiting queues, no execution running (asked
        after every step: kept to a few comparisons), and every job lock and slot free, or `holds_wait_s`
        past the rest: what frees a hold after its execution ended may be the extender's next look at
        its lease (a renewal that finds the message gone, reconciliation), not yet made when the last
        message went (seed 78: reconciliation's completion died after its delete)."""
        if len(self.job_of_message) < len(self.workload.jobs) or self.running_executions:
            self.holds_wait_until = None
            return False
        now = self.scheduler.now()
        for queue in self.job_queues:
            if queue.next_expiry <= now:
                queue.expire()
        if any(queue.messages for queue in self.job_queues):
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
                for key in self._keys_of(message):
                    left[key] += 1
        locks = {key: item for key, item in self.aws.dynamodb.items.items() if is_lock_key(key)}
        self.trace.event("world", "end", settled=settled_in_time, left=dict(sorted(left.items())))
        expected = {key: job.expected for job in self.workload.jobs for key in job.job_keys}
        for name, detail in self.monitor.final(
            jobs=expected, left_on_queues=left, locks=locks, settled_in_time=settled_in_time
        ):
            self._violate(name, detail)
            return

    # -- the producer and SQS's own faults --------------------------------------------------------------------

    def _send(self, job: JobPlan) -> None:
        """The producer sends a message: a job message, or an S3 notification, which counts as a message
        sent of each of its markers' partition jobs (the receiver fans it out into their job messages)."""
        message_id = self.aws.sqs.put(self.queue, job.body, group_id=job.group)
        self.job_of_message[message_id] = job.job_id
        for key in job.job_keys:
            self.monitor.sent[key] += 1
            kind = "wait" if job.partitions else job.type
            self.trace.event("producer", "sent", message_id=message_id, job_id=key, type=kind)

    def _on_receive(self, queue: FakeQueue, message: Message) -> None:
        now = self.scheduler.now()
        lease = self.aws.dynamodb.items.get(message.message_id, {})
        hold_ends = float(lease["renew_until"]["N"]) - START if "renew_until" in lease else None
        self.trace.event(
            "sqs",
            "delivered",
            queue=queue.name,
            message_id=message.message_id,
            job_id=self._job_of(message),
            receive_count=message.receive_count,
            duplicate=message.message_id in self.monitor.duplicates,
            hold_ends=hold_ends,
        )
        self.monitor.received(message.message_id, now=now - START, hold_ends=hold_ends)
        if queue is self.queue and self.faults.happens(now, WorldFault.DUPLICATE_DELIVERY):
            # SQS's at-least-once delivery: the message shows again soon while this receive is in flight
            self.monitor.duplicates.add(message.message_id)
            self.monitor.reach("duplicate_delivery_injected")
            queue.hide(message, now + self.rng.uniform(0.5, 10.0))

    def _on_expired(self, queue: FakeQueue, message: Message) -> None:
        """SQS deleted a message at the end of its retention: lost, unless another copy of its job lives."""
        self.monitor.reach("sqs:expired")
        self.trace.event(
            "sqs", "expired", queue=queue.name, message_id=message.message_id, job_id=self._job_of(message)
        )

    def _job_of(self, message: Message) -> str:
        """The job a message (or its DLQ copy) carries: its body's job id, else the producer's job."""
        if message.job_key:
            return message.job_key
        original = str(message.attributes.get("OriginalMessageId", {}).get("StringValue", message.message_id))
        return self.job_of_message.get(original, original)

    def _on_sent(self, queue: FakeQueue, message: Message) -> None:
        """A copy the processor sent (to wait for its job id, or parked) names the producer's message."""
        raw = message.attributes.get(ADMISSION_ATTRIBUTE, {}).get("StringValue")
        original = Carried.decode(raw).original_id if raw else None
        if original is not None:
            self.monitor.copied(message.message_id, original)

    def _keys_of(self, message: Message) -> tuple[str, ...]:
        """The jobs a message (or its DLQ copy) carries: its job (`_job_of`), or, for an S3 notification of
        the producer's, each of its markers' partition jobs."""
        job = self._job_of(message)
        plan = self.workload.by_id.get(job)
        return plan.job_keys if plan is not None and plan.partitions else (job,)

    def _on_dead_letter(self, queue: FakeQueue, message: Message) -> None:
        reason = {name: value.get("StringValue") for name, value in sorted(message.attributes.items())}
        for key in self._keys_of(message):
            self.monitor.dead_lettered_copy(key, dict(message.attributes), message.message_id)
            self.trace.event("sqs", "dead_lettered", message_id=message.message_id, job_id=key, reason=reason)

    # -- the event source mapping -----------------------------------------------------------------------------

    def _poller(self, index: int) -> None:
        scheduler, queue = self.scheduler, self.queue
        while True:
            queue.refresh()
            messages = []
            if queue.visible_count:
                self.aws.calls["sqs.ReceiveMessage"] += 1
                messages = self.aws.sqs.receive(queue, FIFO_BATCH_SIZE if self.settings.fifo else ESM_BATCH)
            if not messages:  # a long poll: it answers as soon as a message can be handed out
                next_visible = queue.next_visible_at()
                wait = ESM_IDLE_S if next_visible is None else min(ESM_IDLE_S, next_visible - scheduler.now())
                changed = self.queue_changed[index] = Signal()
                with contextlib.suppress(TimeoutError):
                    scheduler.wait_for(changed, max(wait, 0.0))
                continue
            done = self._invoke_receiver(index, messages)
            if done:
                self.aws.sqs.delete_message_batch(
                    QueueUrl=queue.url, Entries=[{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(done)]
                )

    def _queue_changed(self) -> None:
        """A message was sent or its visibility changed: idle pollers look again (their wait may now be
        shorter, or over)."""
        for changed in self.queue_changed:
            self.scheduler.set(changed)

    def _invoke_receiver(self, poller: int, messages: list[dict[str, Any]]) -> list[str]:
        """One invocation of the receiver on a batch: the handles it reported done (none if it died)."""
        scheduler = self.scheduler
        group = Group(f"receiver:{poller}:{scheduler.steps}")
        finished = Signal()
        done: list[str] = []

        containers = self.receivers  # an invocation runs the code it began with (an upgrade meanwhile)
        receiver = containers.take()

        def invocation() -> None:
            try:
                deliveries = [as_delivery(message, self.queue.arn) for message in messages]
                handled: list[Delivery] = []
                with receive_batch(receiver, deliveries) as unsent:
                    for delivery in deliveries:
                        try:
                            outcome = receive(receiver, delivery)
                        except Exception as exc:
                            self.monitor.reach(f"receiver:raised:{type(exc).__name__}")
                            continue
                        self.monitor.reach(f"receiver:{outcome.value}")
                        if outcome is Outcome.INLINE_DONE:
                            self.monitor.job_done(_job_key(delivery.body), delivery.message_id)
                        self.trace.event(
                            "receiver",
                            "outcome",
                            message_id=delivery.message_id,
                            job_id=self.job_of_message.get(delivery.message_id) or _job_key(delivery.body),
                            outcome=outcome.value,
                        )
                        if not outcome.deferred:
                            handled.append(delivery)
                for delivery in handled:
                    if delivery.message_id in unsent:
                        self.monitor.reach("receiver:parked_copy_unsent")  # reported failed: redelivered
                    else:
                        done.append(delivery.receipt_handle)
                scheduler.set(finished, True)
            finally:
                if not finished.is_set:
                    scheduler.set(finished, False)
                elif containers is self.receivers:
                    containers.give_back(receiver)

        scheduler.spawn(invocation, group=group)
        self._arm_timeout(group, self.settings.receiver_timeout_s, "receiver")
        completed = scheduler.wait_for(finished)
        return done if completed else []

    def _arm_timeout(self, group: Group, timeout_s: float, actor: str) -> None:
        def expire() -> None:
            if any(not task.dead for task in group.members):
                self.monitor.reach(f"timeout:{actor}")
                self.trace.event(actor, "timed_out", group=group.name)
                self.scheduler.kill(group)

        if not group.protected and self.faults.happens(self.scheduler.now(), WorldFault.FUNCTION_TIMEOUT):
            timeout_s = self.rng.uniform(0.01, timeout_s)  # the invocation hits its timeout half-way
        self.scheduler.call_at(self.scheduler.now() + timeout_s, expire)

    # -- the extender's schedule ------------------------------------------------------------------------------

    def _schedule_extender(self, index: int) -> None:
        period = self.settings.extender_period_s
        due = START + index * period
        late = self.rng.uniform(0, period) if self.faults.happens(due, WorldFault.EXTENDER_LATE) else 0.0
        self.scheduler.call_at(due + late, lambda: self._extender_due(index))

    def _extender_due(self, index: int) -> None:
        """One scheduled run. Faults stay within what the design survives: once
        `adaptive_lost_runs_survived` runs in a row were lost (skipped, throttled, dead, timed out, or a
        pass that could not renew what was due), the next one runs clean (it may still be a period late)."""
        self._schedule_extender(index + 1)
        now = self.scheduler.now() - START
        if any(start <= now < end for start, end in self.extender_pauses):
            self.monitor.reach("extender:paused")
            self.lost_runs += 1
            return
        protected = self.faults.within_design and self.lost_runs >= self.settings.adaptive_lost_runs_survived
        if not protected and self.faults.happens(self.scheduler.now(), WorldFault.EXTENDER_SKIPPED):
            self.monitor.reach("extender:skipped")
            self.lost_runs += 1
            return
        if self.extender_runs and self.workload.extender_reserved:
            self.monitor.reach("extender:throttled_by_reserved_concurrency")
            self.lost_runs += 1
            return
        containers = self.extenders
        extender = containers.take()
        self.extender_runs += 1
        group = Group(f"extender:{index}", protected=protected)
        began = self.scheduler.now()

        def invocation() -> None:
            clean = ended = False
            try:
                report = run_invocation(
                    extender,
                    remaining_ms=lambda: int((began + EXTENDER_TIMEOUT_S - self.scheduler.now()) * 1000),
                )
                for part in (report.renewal, report.reconcile):
                    for item in fields(part):
                        value = getattr(part, item.name)
                        if isinstance(value, int) and value > 0:
                            self.monitor.reach(f"extender:{item.name}", value)
                if report.failed_passes:
                    self.monitor.reach("extender:failed_passes", report.failed_passes)
                for admitted in report.admission:
                    if admitted.resent:
                        self.monitor.reach("admission:parked_copy_resent", admitted.resent)
                renewal = report.renewal
                clean = not (report.failed_passes or renewal.given_up or renewal.failed or renewal.record_failures)
                ended = True
            finally:
                self.extender_runs -= 1
                if ended and containers is self.extenders:
                    containers.give_back(extender)
                self.lost_runs = 0 if clean else self.lost_runs + 1

        self.scheduler.spawn(invocation, group=group)
        self._arm_timeout(group, EXTENDER_TIMEOUT_S, "extender")

    # -- Step Functions: executions, status events -------------------------------------------------------------

    def _on_start(self, execution: Execution) -> None:
        self.running_executions += 1
        group = Group(f"execution:{execution.name}")
        self.groups[execution.arn] = group
        job_id = str(execution.input.get("job", {}).get("job_id", ""))
        self.trace.event("stepfunctions", "execution_started", execution=execution.name, job_id=job_id)
        self.monitor.execution_started(execution.name)
        self.monitor.reach("execution_started")
        self.scheduler.spawn(lambda: self._execute(execution), group=group)
        self.scheduler.call_at(self.scheduler.now() + self.execution_timeout_s, lambda: self._time_out(execution))

    def _execute(self, execution: Execution) -> None:
        context = ExecutionContext(
            execution.arn, execution.started, on_enter=lambda name: self._entered(execution, name)
        )
        outcome = self.interpreter.run(execution.input, context, random.Random(f"{execution.arn}:{self.seed}"))
        self.groups.pop(execution.arn, None)  # it ends by itself: nothing to kill
        for visit in context.visits:
            if visit.startswith(("catch:", "retry:")):
                self.monitor.reach(f"workflow:{visit}")
        self.monitor.reach(f"workflow:end:{outcome.status}:{outcome.error}")
        if execution.status == "RUNNING":
            self.aws.stepfunctions.end(execution, outcome.status, outcome.error, outcome.cause)

    def _entered(self, execution: Execution, state: str) -> None:
        if state == JOB_STATE:
            job = execution.input["job"]
            run = Running(execution.arn, execution.input["message_id"], str(job["job_id"]), str(job["type"]))
            self.trace.event(
                "workflow", "job_started", execution=execution.name, message_id=run.message_id, job_id=run.job_key
            )
            self.monitor.job_started(run, self.aws.dynamodb.items.get(run.message_id))
        elif state in self.after_job and execution.arn in self.monitor.running:
            self._job_ended(execution, succeeded=state == self.after_success)

    def _job_ended(self, execution: Execution, *, succeeded: bool) -> None:
        job_id = str(execution.input["job"]["job_id"])
        self.trace.event("workflow", "job_ended", execution=execution.name, job_id=job_id, succeeded=succeeded)
        self.monitor.job_ended(execution.arn, succeeded=succeeded)
        now = self.scheduler.now()
        if succeeded:
            self.faults.job_succeeded(now)
        if not succeeded and self.faults.happens(now, WorldFault.DUPLICATE_DELIVERY):
            # SQS's at-least-once delivery may hand a message out again at any time while it is in flight;
            # at a failed job's end it meets the failure path's release (a handle superseded meanwhile)
            queue = self.aws.sqs.queues.get(str(execution.input.get("queue_url", "")))
            message = queue.messages.get(str(execution.input["message_id"])) if queue is not None else None
            if queue is not None and message is not None and not message.deleted:
                self.monitor.duplicates.add(message.message_id)
                self.monitor.reach("duplicate_delivery_injected_at_failure")
                queue.hide(message, now + self.rng.uniform(0.0, 1.0))

    def _time_out(self, execution: Execution) -> None:
        if execution.status == "RUNNING":
            self.monitor.reach("execution_timed_out")
            self.aws.stepfunctions.end(execution, "TIMED_OUT", "States.Timeout", "the execution ran past its timeout")

    def _on_stop(self, execution: Execution) -> None:
        self.running_executions -= 1
        self.trace.event("stepfunctions", "execution_ended", execution=execution.name, status=execution.status)
        if execution.arn in self.monitor.running:
            self._job_ended(execution, succeeded=False)
        if execution.status == "SUCCEEDED":
            self.monitor.job_recorded(str(execution.input["job"]["job_id"]), str(execution.input["message_id"]))
        group = self.groups.get(execution.arn)
        if group is not None:
            group.killed = True  # it stops where it waits, at once (StopExecution, the execution's timeout)
            self.scheduler.call_at(self.scheduler.now(), lambda: self.scheduler.kill(group))
        self._status_events(execution)

    def _status_events(self, execution: Execution) -> None:
        now = self.scheduler.now()
        if self.faults.happens(now, WorldFault.EVENT_LOST):
            self.monitor.reach("status_event:lost")
            return
        copies = 2 if self.faults.happens(now, WorldFault.EVENT_DUPLICATED) else 1
        for _ in range(copies):
            late = self.faults.happens(now, WorldFault.EVENT_LATE)
            delay = self.rng.uniform(*(EVENT_LATE_S if late else EVENT_DELAY_S))
            if late:
                self.monitor.reach("status_event:late")
            self._invoke_watcher(status_change(execution, STATE_MACHINE_ARN), at=now + delay)
        if copies > 1:
            self.monitor.reach("status_event:duplicated")

    def _invoke_watcher(self, change: ExecutionStatusChange, *, at: float, attempt: int = 1) -> None:
        """An asynchronous invocation of the watcher with the event: its `attempt` (1 to 3) at `at`."""
        self.scheduler.spawn(lambda: self._watch(change, attempt), at=at, group=Group("watcher"))

    def _watch(self, change: ExecutionStatusChange, attempt: int = 1) -> None:
        group = self.scheduler.group_of_current()
        if group is not None:
            self._arm_timeout(group, WATCHER_TIMEOUT_S, "watcher")
        containers = self.watchers
        watcher = containers.take()
        try:
            outcome = on_status_change(watcher, change)
        except Exception as exc:  # a function error: Lambda keeps the container
            self.monitor.reach(f"watcher:raised:{type(exc).__name__}")
            self._watcher_failed(change, attempt, type(exc).__name__)
            outcome = None
        except Crash:  # the invocation died or timed out: a function error too, for Lambda, which resets it
            self._watcher_failed(change, attempt, "Crash")
            raise
        if containers is self.watchers:
            containers.give_back(watcher)
        if outcome is not None:
            self.monitor.reach(f"watcher:{outcome.value}")

    def _watcher_failed(self, change: ExecutionStatusChange, attempt: int, error_type: str) -> None:
        """Lambda's handling of a failed asynchronous invocation: the same event again after the
        documented delay while retries are left, else a record to the on-failure destination."""
        if attempt <= len(WATCHER_RETRY_DELAYS_S):
            delay = WATCHER_RETRY_DELAYS_S[attempt - 1]
            self.monitor.reach("watcher:retried")
            self.trace.event(
                "lambda", "watcher_retry", execution=change.name, attempt=attempt + 1, delay_s=delay, error=error_type
            )
            self._invoke_watcher(change, at=self.scheduler.now() + delay, attempt=attempt + 1)
            return
        self.monitor.reach("watcher:on_failure_destination")
        self.trace.event(  # what Lambda's record on the WatcherFailures queue says
            "lambda",
            "watcher_failed",
            execution=change.name,
            status=change.status,
            condition="RetriesExhausted",
            attempts=attempt,
            error=error_type,  # its type only: a message may hold an address, and the trace is byte-stable
        )

    # -- Spark runs -----------------------------------------------------------------------------------------

    def spark_task_sent(self, token: str, body: dict[str, Any]) -> None:
        job = self.workload.by_id[str(body["job"]["job_id"])]
        behaviour = job.spark_behaviour(int(body["attempt"]))
        if self.faults.active(self.scheduler.now()):
            if self.faults.happens(self.scheduler.now(), WorldFault.JOB_HANGS):
                behaviour = SparkBehaviour("hang", behaviour.seconds)
            elif self.faults.happens(self.scheduler.now(), WorldFault.JOB_VANISHES):
                behaviour = SparkBehaviour("vanish", behaviour.seconds)
        self.monitor.reach(f"spark:{behaviour.kind}")
        at = self.scheduler.now() + self.rng.uniform(*SPARK_PICKUP_S)
        self.scheduler.spawn(lambda: self._spark_run(token, behaviour), at=at, group=Group(f"spark:{token}"))

    def _spark_run(self, token: str, behaviour: SparkBehaviour) -> None:
        client = self._client("stepfunctions", "spark")
        every = self.workload.spark_heartbeat_s / 3  # the offline worker's: a third of the step's timeout
        left = behaviour.seconds
        while left > 0 or behaviour.kind == "hang":
            step = min(every, left) if behaviour.kind != "hang" else every
            self.scheduler.sleep(step)
            left -= step
            if behaviour.kind == "vanish" and left <= behaviour.seconds / 2:
                self.trace.event("spark", "vanished", token=token)
                return
            try:
                client.call("send_task_heartbeat", {"taskToken": token})
            except ClientError as exc:
                if exc.response["Error"]["Code"] in ("TaskTimedOut", "InvalidToken"):
                    self.trace.event("spark", "run_stopped", token=token)
                    self.monitor.reach("spark:stopped_by_closed_task")
                    return
            except BotoCoreError:
                pass
        for _ in range(5):
            try:
                if behaviour.kind == "fail":
                    client.call(
                        "send_task_failure",
                        {"taskToken": token, "error": SPARK_ERROR, "cause": "[TABLE_OR_VIEW_NOT_FOUND] events"},
                    )
                else:
                    client.call("send_task_success", {"taskToken": token, "output": json.dumps({"rows": 10})})
                return
            except ClientError as exc:
                if exc.response["Error"]["Code"] in ("TaskTimedOut", "InvalidToken"):
                    return
                self.scheduler.sleep(1.0)
            except BotoCoreError:
                self.scheduler.sleep(1.0)


def as_delivery(message: dict[str, Any], source_arn: str) -> Delivery:
    """A received message as the event source mapping hands it to the receiver."""
    return Delivery(
        message_id=message["MessageId"],
        receipt_handle=message["ReceiptHandle"],
        body=message["Body"],
        receive_count=int(message["Attributes"]["ApproximateReceiveCount"]),
        source_arn=source_arn,
        message_attributes=message["MessageAttributes"],
        group_id=message["Attributes"].get("MessageGroupId"),
        sent_at=sent_at(message["Attributes"].get("SentTimestamp")),
    )


def status_change(execution: Execution, state_machine_arn: str) -> ExecutionStatusChange:
    """The status-change event of an execution as EventBridge delivers it to the watcher."""
    return ExecutionStatusChange(
        executionArn=execution.arn,
        stateMachineArn=state_machine_arn,
        name=execution.name,
        status=execution.status,
        error=execution.error,
        cause=execution.cause,
        input=execution.raw_input,
        startDate=int(execution.started * 1000),
        stopDate=int(execution.stopped * 1000) if execution.stopped is not None else None,
    )


def _job_key(body: str) -> str:
    try:
        return str(json.loads(body)["job_id"])
    except (ValueError, KeyError, TypeError):
        return ""


def _groups(workload: Workload) -> dict[str, list[str]]:
    """FIFO: each message group's job ids, in the order they are sent."""
    groups: dict[str, list[str]] = {}
    for job in sorted(workload.jobs, key=lambda job: job.send_at_s):
        if job.group is not None:
            groups.setdefault(job.group, []).append(job.job_id)
    return groups
