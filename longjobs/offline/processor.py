"""The whole processor on one machine, as one object: `run`, `demo`, `chaos` and `serve` all run on it.

    producer ──► jobs queue ──► event source mapping ──► receiver handler ──► workflow (moto)
                    ▲                                                           │ pyspark step
                    └── extender handler (scheduler) ◄── lease table            ▼
                          watcher handler ◄── status events            token queue ──► Spark workers

`LocalProcessor` starts moto's server (on a port of your choice, or one the OS picks), creates the
resources with `longjobs.offline.resources.create_resources`, writes the job catalog where the functions read
it (as the construct ships it in their asset), loads the receiver, extender and watcher handler
modules as Lambda containers load them (settings from the environment, clients from `longjobs.engine.aws`
with the endpoint override), and runs what AWS would run around them: the event source mapping, the
extender's schedule, the "Execution Status Change" events moto does not emit, and the Spark workers.
Each function's service is built eagerly so that `Faults` can hook its clients from outside; an
invocation past its Lambda timeout dies at its next call, as Lambda would end it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import time
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Protocol

from longjobs.engine.jobs import JobCatalog
from longjobs.engine.jobs.published import publish, receiver_checks
from longjobs.engine.observability import metrics
from longjobs.engine.settings import FIFO_BATCH_SIZE
from longjobs.offline.emulator import REGION, Emulator, environment, function_environment
from longjobs.offline.esm import BatchListener, EventSourceMapping, MappingConfig
from longjobs.offline.events import StatusEvents, watched_statuses
from longjobs.offline.faults import Faults
from longjobs.offline.lambdas import LambdaContext, load_function
from longjobs.offline.resources import Resources
from longjobs.offline.scheduler import Scheduler
from longjobs.offline.worker import SparkWorker

EXTENDER_TIMEOUT_S = 60.0
WATCHER_TIMEOUT_S = 30.0
FUNCTIONS = ("receiver", "extender", "watcher")
DEFAULT_BATCH_SIZE = 10
"""The stack's `receiver_batch_size` default."""


class Stoppable(Protocol):
    """A thread that can be told to stop (the mapping, the schedule, the workers, timed actions)."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def join(self, timeout: float | None = None) -> None: ...


PUBLISHED_BY = "the local service"
"""Who published the catalog the offline runtime writes into its lease table (named in the CLI's errors)."""
NO_PYSPARK = "PySpark is not installed (the `pipeline` extra, and Java 17)"


def pyspark_types(catalog: JobCatalog) -> list[str]:
    """The types whose jobs run on the local Spark."""
    return sorted(job_type.name for job_type in catalog if job_type.runner == "pyspark")


def has_pyspark() -> bool:
    """Whether the distribution's `pipeline` extra (PySpark) is installed: without it the service runs the
    other types, and a pyspark type's job fails its attempts."""
    return importlib.util.find_spec("pyspark") is not None


def unrunnable(catalog: JobCatalog) -> dict[str, str]:
    """The types this machine cannot run, with why (published, so `longjobs submit` refuses their jobs)."""
    return {} if has_pyspark() else dict.fromkeys(pyspark_types(catalog), NO_PYSPARK)


class LocalProcessor:
    """One local processor. Use it as a context manager: the environment the functions read is set
    inside it (and put back after), and the server stops on the way out.

    `start()` starts the threads; `stop_receiving()` stops the mapping alone (a drain); `stop()` stops
    everything. The resources, clients and functions are attributes, for callers that observe or act
    on the processor from outside (the scenario runner, `serve`).
    """

    def __init__(
        self,
        settings: Any,
        *,
        catalog: JobCatalog,
        work_dir: Path,
        faults: Faults,
        port: int = 0,
        spark_heartbeat_s: int = 10,
        batch_size: int | None = None,
        spark_workers: int = 1,
        on_batch: BatchListener | None = None,
    ) -> None:
        work_dir.mkdir(parents=True, exist_ok=True)
        self.catalog = catalog
        self.faults = faults
        # The stack's: 10, on FIFO 1 (longjobs.engine.settings.FIFO_BATCH_SIZE).
        self.batch_size = batch_size or (FIFO_BATCH_SIZE if settings.fifo else DEFAULT_BATCH_SIZE)
        self.spark_heartbeat_s = spark_heartbeat_s
        self.spark_workers = spark_workers
        self.on_batch = on_batch
        self.emulator = Emulator(port)
        try:
            self.resources: Resources = self.emulator.create(
                settings, spark_heartbeat_s=spark_heartbeat_s, catalog=catalog
            )
        except BaseException:
            self.emulator.stop()
            raise
        self.catalog_file = work_dir / "job_types.json"  # what the construct ships in the functions' asset
        self.catalog_file.write_text(catalog.to_json(), encoding="utf-8")
        self.functions: dict[str, ModuleType] = {}
        self.threads: list[Stoppable] = []
        self.mapping: EventSourceMapping | None = None
        self._exit = contextlib.ExitStack()

    @property
    def endpoint(self) -> str:
        return self.emulator.endpoint

    @property
    def settings(self) -> Any:
        return self.resources.settings

    def __enter__(self) -> LocalProcessor:
        # what `longjobs submit` and `top` validate with, as a deployed stack publishes its own
        publish(
            self.emulator.dynamodb(),
            self.resources.table_name,
            self.catalog,
            PUBLISHED_BY,
            unrunnable(self.catalog),
            receiver_checks(self.settings),
        )
        env = {**function_environment(self.resources, self.emulator), "JOB_TYPES_FILE": str(self.catalog_file)}
        self._exit.enter_context(environment(env))
        for name in FUNCTIONS:
            self.functions[name] = load_function(f"longjobs.functions.{name}")
        # Each container's service, built once: the faults hook the clients it holds. The watcher's
        # admission receiver, which the cloud builds at its first event, is built now too, while the
        # endpoint is in the environment, so its clients reach the emulator and are hooked as well.
        for name in FUNCTIONS:
            self.faults.install(name, getattr(self.functions[name], name)())
        if (admitter := self.functions["watcher"].admitter()) is not None:
            self.faults.install("watcher", admitter)
        self.mapping = self._mapping()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        try:
            self.stop()
            self.abort_running()
        finally:
            self._exit.close()
            self.emulator.stop()

    # -- the functions, invoked as Lambda invokes them ----------------------------------------------
    # They share this process's Powertools `Metrics`, disabled here. Disabled, it never clears what it
    # gathered and prints it once a name holds 100 values; it is cleared after each invocation
    # instead, as a flush would.

    def invoke_receiver(self, event: dict[str, Any], context: LambdaContext) -> Any:
        handles = {record["receiptHandle"]: record["messageId"] for record in event["Records"]}
        self.faults.begin_invocation("receiver", handles, deadline=context.deadline)
        try:
            return self.functions["receiver"].handler(event, context)
        finally:
            self.faults.end_invocation("receiver")
            metrics.clear_metrics()

    def invoke_extender(self) -> None:
        context = LambdaContext(function_name="extender", deadline=time.time() + EXTENDER_TIMEOUT_S)
        self.faults.begin_invocation("extender", deadline=context.deadline)
        try:
            self.functions["extender"].handler({"source": "aws.scheduler"}, context)
        finally:
            self.faults.end_invocation("extender", period_s=self.settings.extender_period_s)
            metrics.clear_metrics()

    def invoke_watcher(self, event: dict[str, Any]) -> Any:
        context = LambdaContext(function_name="watcher", deadline=time.time() + WATCHER_TIMEOUT_S)
        self.faults.begin_invocation("watcher", deadline=context.deadline)
        try:
            return self.functions["watcher"].handler(event, context)
        finally:
            self.faults.end_invocation("watcher")
            metrics.clear_metrics()

    # -- what runs around them ----------------------------------------------------------------------

    def _mapping(self) -> EventSourceMapping:
        resources = self.resources
        return EventSourceMapping(
            self.emulator.sqs(app_id="lambda-event-source-mapping"),
            MappingConfig(
                queue_url=resources.queue_url,
                queue_arn=resources.queue_arn,
                region=REGION,
                batch_size=self.batch_size,
                # Lambda refuses a mapping whose queue's VT is shorter than the function's timeout.
                function_timeout_s=min(self.settings.receiver_timeout_s, resources.queue_visibility_timeout_s),
            ),
            self.invoke_receiver,
            on_batch=self.on_batch,
        )

    def start(self, *extra: Stoppable) -> None:
        """Start the mapping, the schedule, the status events, the Spark workers and `extra` threads."""
        if self.mapping is None:
            raise RuntimeError("use the processor as a context manager: `with LocalProcessor(...) as processor`")
        resources = self.resources
        schedule = Scheduler(self.invoke_extender, self.settings.extender_period_s, skip=self.faults.skip_run)
        workers = [
            SparkWorker(
                self.emulator.sqs(app_id="spark-worker"),
                self.emulator.stepfunctions(app_id="spark-worker"),
                resources.token_queue_url,
                heartbeat_timeout_s=self.spark_heartbeat_s,
                catalog=self.catalog,
                kill_after=self.faults.kill_after,
            )
            for _ in range(self.spark_workers)
        ]
        events = StatusEvents(
            self.emulator.stepfunctions(),
            resources.state_machine_arn,
            self.invoke_watcher,
            self.faults,
            statuses=watched_statuses(),
        )
        self.threads = [self.mapping, schedule, *workers, events, *extra]
        for thread in self.threads:
            thread.start()

    def stop_receiving(self) -> None:
        """Stop the event source mapping only: nothing new starts, what runs goes on being renewed."""
        if self.mapping is not None and self.mapping.is_alive():
            self.mapping.stop()
            self.mapping.join()

    def stop(self, join_timeout_s: float | None = None) -> None:
        """Stop every thread: all told first, then waited for (each may be in a 1 s long poll); with
        `join_timeout_s`, a thread still busy after it (a Spark job) is left to the process's exit."""
        threads, self.threads = self.threads, []
        for thread in threads:
            thread.stop()
        for thread in threads:
            thread.join(join_timeout_s)

    def abort_running(self) -> None:
        """Abort the executions that still run, so no engine thread outlives the server."""
        self.emulator.stop_executions(self.resources.state_machine_arn)

    def running_executions(self) -> list[str]:
        """ARNs of this state machine's executions that are RUNNING now."""
        pages = (
            self.emulator.stepfunctions()
            .get_paginator("list_executions")
            .paginate(stateMachineArn=self.resources.state_machine_arn, statusFilter="RUNNING")
        )
        return [execution["executionArn"] for page in pages for execution in page["executions"]]
