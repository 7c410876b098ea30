"""The Lambda service of one seed's world: each function's containers and invocations.

- The **event source mapping**: pollers that receive up to 10 visible messages of the jobs queue, invoke
  the receiver (`longjobs.engine.receiver.service.receive` per record, as the handler's record handler),
  and delete the records it reported done (partial batch response). An invocation that dies or hits the
  function's timeout is a failed batch: nothing is deleted.
- The **extender's schedule**: one invocation a period (`run_invocation`), late or skipped by the seed,
  killed at its timeout. With reserved concurrency 1 (`Workload.extender_reserved`) a run still going
  when the next is due throttles it; without it the next runs beside it in another container.
- The **watcher's asynchronous invocations**, with Lambda's retries and its on-failure destination.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import fields
from typing import Any, cast

from longjobs.engine.delivery.attempt import START_REFUSED, START_REFUSED_EVERY_ATTEMPT
from longjobs.engine.delivery.types import Delivery, Outcome, Receiver, sent_at
from longjobs.engine.extender.service import Extender
from longjobs.engine.factory import Clients, Factory
from longjobs.engine.lease import LeaseStatus
from longjobs.engine.settings import EXTENDER_TIMEOUT_S, FIFO_BATCH_SIZE, MAX_BATCH_SIZE, Settings
from longjobs.engine.watcher.models import ExecutionStatusChange
from longjobs.engine.watcher.service import Watcher
from longjobs.functions.extender import extend
from longjobs.functions.receiver import batch_processor, receive_records
from longjobs.functions.watcher import watch
from longjobs.history.faults import WorldFault
from longjobs.offline.lambdas import sqs_event
from longjobs.sim.aws import REGION
from longjobs.sim.executions import status_event
from longjobs.sim.properties import REFUSED_START_REACH_S, RELEASE_FAILED, Monitor
from longjobs.sim.scheduler import Crash, Group, Signal
from longjobs.sim.stage import START, Stage

__all__ = ["ESM_BATCH", "ESM_POLLERS", "WATCHER_RETRY_DELAYS_S", "Containers", "LambdaService", "as_delivery"]

ESM_BATCH = MAX_BATCH_SIZE
ESM_POLLERS = 2
ESM_IDLE_S = 20.0  # a long poll's wait when the queue shows nothing
WATCHER_TIMEOUT_S = 30.0  # longjobs.construct.constants.WATCHER_TIMEOUT
WATCHER_RETRY_DELAYS_S = (60.0, 120.0)
"""Lambda's retries of a failed asynchronous invocation (the watcher's status event): one minute before the
second attempt, two before the third (invocation-async-error-handling.html); the stack keeps the default
two retries (`configure_async_invoke(retry_attempts=2)`, longjobs.construct.functions), then sends the
event to its on-failure destination (the WatcherFailures queue). Its maximum event age is the default
6 hours, far beyond these three minutes."""


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


class LambdaService:
    """The receiver's, the extender's and the watcher's invocations in one seed's world (see the module)."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self.seed, self.workload, self.settings = stage.seed, stage.workload, stage.settings
        self.scheduler, self.clock, self.trace, self.rng = stage.scheduler, stage.clock, stage.trace, stage.rng
        self.monitor, self.faults, self.aws, self.queue = stage.monitor, stage.faults, stage.aws, stage.queue
        self.catalog, self.client = stage.catalog, stage.client
        self.recorder = Recorder(self.monitor)
        """The functions' metrics: each metric name counts as coverage."""
        self.extender_runs = 0  # scheduled extender runs going on (reserved concurrency 1 allows one)
        self.lost_runs = 0  # scheduled extender runs lost in a row (see _extender_due)
        self.queue_changed = [Signal() for _ in range(ESM_POLLERS)]  # what each idle poller waits on
        self.queue.on_change = self.on_queue_changed

    def build(self, settings: Settings) -> None:
        """The receiver, the extender and the watcher of `settings`: built at the start, and again at an
        upgrade (the world's `_upgrade`), when invocations begun before it finish with the functions they
        began with."""
        factory = Factory(settings, self.clock, self.catalog, self.recorder)
        executor = cast(Any, self.scheduler)  # `map` on actors: the engine's parallel calls, interleaved

        def clients(actor: str) -> Clients:
            return Clients(
                self.client("sqs", actor),
                self.client("dynamodb", actor),
                self.client("stepfunctions", actor),
                lambda service: self.client(service, actor),
                self.client("stepfunctions", actor, once=True),
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
                admitter=receiver("extender", container) if factory.tends_parked else None,
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

    def start(self) -> None:
        """The mapping's pollers, and the extender's first scheduled run."""
        for index in range(ESM_POLLERS):
            self.scheduler.spawn(lambda index=index: self._poller(index))  # type: ignore[misc]
        self.schedule_extender(0)

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
            done = self.invoke_receiver(index, messages)
            if done:
                self.aws.sqs.delete_message_batch(
                    QueueUrl=queue.url, Entries=[{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(done)]
                )

    def on_queue_changed(self) -> None:
        """A message was sent or its visibility changed: idle pollers look again (their wait may now be
        shorter, or over)."""
        for changed in self.queue_changed:
            self.scheduler.set(changed)

    def invoke_receiver(self, poller: int, messages: list[dict[str, Any]]) -> list[str]:
        """One invocation of the receiver on a batch: the handles it reported done (none if it died)."""
        scheduler = self.scheduler
        group = Group(f"receiver:{poller}:{scheduler.steps}")
        finished = Signal()
        done: list[str] = []

        containers = self.receivers  # an invocation runs the code it began with (an upgrade meanwhile)
        receiver = containers.take()

        seen = RecordsSeen(self)
        if len({message["MessageId"] for message in messages}) < len(messages):
            self.monitor.reach("duplicate_delivery_same_batch")

        def invocation() -> None:
            try:
                # Lambda's event and the handler's own core, with Powertools' partial batch processing
                event = sqs_event(messages, source_arn=self.queue.arn, region=REGION)
                processor = batch_processor(self.settings.fifo, cast(Any, scheduler))  # records at once, as actors
                response = receive_records(receiver, event, processor, seen)
                failed = {str(item["itemIdentifier"]) for item in response["batchItemFailures"]}
                records = Counter(message["MessageId"] for message in messages)
                # messages with a record that failed before its outcome (a deferred outcome's failure is
                # the receiver's choice, and explains nothing)
                self.monitor.needless.records_failed({m for m in failed if seen.outcomes[m] < records[m]})
                for message in messages:
                    if message["MessageId"] not in failed:
                        done.append(message["ReceiptHandle"])
                    elif message["MessageId"] in seen.not_deferred:
                        self.monitor.reach("receiver:parked_copy_unsent")  # reported failed: redelivered
                scheduler.set(finished, True)
            finally:
                if not finished.is_set:
                    scheduler.set(finished, False)
                elif containers is self.receivers:
                    containers.give_back(receiver)

        scheduler.spawn(invocation, group=group)
        self._arm_timeout(group, self.settings.receiver_timeout_s, "receiver")
        completed = scheduler.wait_for(finished)
        if not completed:
            self.monitor.needless.handling_died([message["MessageId"] for message in messages])
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

    def schedule_extender(self, index: int) -> None:
        period = self.settings.extender_period_s
        due = START + index * period
        late = self.rng.uniform(0, period) if self.faults.happens(due, WorldFault.EXTENDER_LATE) else 0.0
        self.scheduler.call_at(due + late, lambda: self._extender_due(index))

    def _extender_due(self, index: int) -> None:
        """One scheduled run. Faults stay within what the design survives: once
        `adaptive_lost_runs_survived` runs in a row were lost (skipped, throttled, dead, timed out, or a
        pass that could not renew what was due), the next one runs clean (it may still be a period late)."""
        self.schedule_extender(index + 1)
        now = self.scheduler.now() - START
        if any(start <= now < end for start, end in self.stage.extender_pauses):
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
                report = extend(  # the handler's own core
                    extender,
                    lambda: int((began + EXTENDER_TIMEOUT_S - self.scheduler.now()) * 1000),
                    self.recorder,
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

    # -- the watcher's asynchronous invocations -----------------------------------------------------------------

    def invoke_watcher(self, change: ExecutionStatusChange, *, at: float, attempt: int = 1) -> None:
        """An asynchronous invocation of the watcher with the event: its `attempt` (1 to 3) at `at`."""
        self.scheduler.spawn(lambda: self.watch(change, attempt), at=at, group=Group("watcher"))

    def watch(self, change: ExecutionStatusChange, attempt: int = 1) -> None:
        group = self.scheduler.group_of_current()
        if group is not None:
            self._arm_timeout(group, WATCHER_TIMEOUT_S, "watcher")
        containers = self.watchers
        watcher = containers.take()
        try:
            # the handler's own core, pricing each attempt as the handler does
            outcome = watch(watcher, status_event(change), self.recorder, job_catalog=self.catalog)
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
            self.invoke_watcher(change, at=self.scheduler.now() + delay, attempt=attempt + 1)
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


class RecordsSeen:
    """What the simulation sees of one receiver invocation's records (`longjobs.functions.receiver.Observer`):
    each outcome traced and counted as coverage, and which records were handled rather than deferred."""

    def __init__(self, service: LambdaService) -> None:
        self._service = service
        self.not_deferred: set[str] = set()
        self.outcomes: Counter[str] = Counter()  # message id -> its records that reached an outcome

    def handled(self, delivery: Delivery, outcome: Outcome) -> None:
        service = self._service
        self.outcomes[delivery.message_id] += 1
        service.monitor.reach(f"receiver:{outcome.value}")
        service.monitor.handled(delivery.message_id)
        if outcome is Outcome.INLINE_DONE:
            service.monitor.job_done(_job_key(delivery.body), delivery.message_id)
        service.trace.event(
            "receiver",
            "outcome",
            message_id=delivery.message_id,
            job_id=service.stage.job_of_message.get(delivery.message_id) or _job_key(delivery.body),
            outcome=outcome.value,
        )
        if not outcome.deferred:
            self.not_deferred.add(delivery.message_id)
        if outcome is Outcome.NOT_STARTED:
            self._given_back(delivery.message_id)

    def _given_back(self, message_id: str) -> None:
        """A start refused and given back: the lease closed RELEASED for it, on the jobs queue."""
        service = self._service
        lease = service.aws.dynamodb.items.get(message_id, {})
        released = lease.get("status", {}).get("S") == LeaseStatus.RELEASED.value
        error = json.dumps(lease.get("last_error", {}))
        if not (released and START_REFUSED in error):
            # its lease stays ACTIVE: a start that may have landed, and did when Step Functions has it
            landed = lease.get("execution_arn", {}).get("S") in service.aws.stepfunctions.executions
            service.monitor.reach("refused_start:landed_kept" if landed else "refused_start:left_to_reconciliation")
            return
        if START_REFUSED_EVERY_ATTEMPT in error:
            service.monitor.reach("refused_start:every_attempt")
        if lease.get("queue_url", {}).get("S", service.queue.url) != service.queue.url:
            return  # a waiting queue's message: admission, not the mapping, receives it
        if RELEASE_FAILED in error:
            # its release's visibility change failed, noted before the receiver returned: it shows when its
            # chunk ends, which the property exempts (a note written later is caught by `lease_written`)
            service.monitor.reach("refused_start:release_failed")
            return
        # The documented bound (docs/engine.md), from the settings, not from the engine's own choice of delay.
        before = int(lease.get("refused_starts", {}).get("N", "0"))
        settings = service.settings
        backoff = min(float(settings.extender_period_s), 2.0 ** (min(before, 16) - 1))
        now = service.scheduler.now() - START
        service.monitor.start_refused(
            message_id, due=now + backoff + settings.receiver_timeout_s + REFUSED_START_REACH_S
        )

    def raised(self, delivery: Delivery, error: Exception) -> None:
        self._service.monitor.reach(f"receiver:raised:{type(error).__name__}")


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


def _job_key(body: str) -> str:
    try:
        return str(json.loads(body)["job_id"])
    except (ValueError, KeyError, TypeError):
        return ""
