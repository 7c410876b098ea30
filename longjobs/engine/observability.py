"""Logger, metrics and tracer: one instance each, shared by every handler and service.

The tracer is Powertools' `Tracer` only when it will trace: in Lambda, with `POWERTOOLS_TRACE_DISABLED`
unset or false (Powertools' own rule). Otherwise it is `NoOpTracer`, with the one decorator the
handlers use. Powertools' `Tracer` imports the X-Ray SDK even when it is disabled, and that import is
about a third of a handler's cold start (measured with `python -m benchmarks.cold_start`): a
function deployed with tracing off, the offline runtime and the tests do not pay for it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar, cast

from aws_lambda_powertools import Logger, Metrics

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "long-jobs")
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "LongJobs")
_TRUE = frozenset({"1", "true", "yes", "on"})

Handler = TypeVar("Handler", bound=Callable[..., Any])


class HandlerTracer(Protocol):
    """What the handlers use of a tracer."""

    def capture_lambda_handler(self, lambda_handler: Handler) -> Handler: ...


class NoOpTracer:
    """Stands for Powertools' `Tracer` where it would not trace: its decorator returns the handler as it is."""

    def capture_lambda_handler(self, lambda_handler: Handler) -> Handler:
        return lambda_handler


def tracing_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Powertools traces in Lambda only (not in SAM's local emulation), unless POWERTOOLS_TRACE_DISABLED."""
    env = os.environ if environ is None else environ
    if env.get("POWERTOOLS_TRACE_DISABLED", "false").strip().lower() in _TRUE:
        return False
    if env.get("AWS_SAM_LOCAL", "").strip().lower() in _TRUE:
        return False
    return bool(env.get("AWS_LAMBDA_FUNCTION_NAME"))


def job_spans_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """The watcher records a span per job under the stack's `tracing=opentelemetry` (its `TRACING`)."""
    env = os.environ if environ is None else environ
    return env.get("TRACING", "").strip().lower() == "opentelemetry"


def make_tracer() -> HandlerTracer:
    if not tracing_enabled():
        return NoOpTracer()
    from aws_lambda_powertools import Tracer  # imports the X-Ray SDK

    return cast(HandlerTracer, Tracer(service=SERVICE))


def trace_carrier(tracer: object) -> Callable[[], AbstractContextManager[None]]:
    """Made in the invocation's thread: what a worker thread enters to trace under the invocation's current
    segment or subsegment. The X-Ray SDK keeps that entity per thread (its context is a `threading.local`),
    which a copy of the context variables does not carry, so a worker thread's calls would hang from a
    segment of their own beside the handler's. Its documented remedy: the parent's `get_trace_entity()`,
    the thread's `set_trace_entity()`, and `clear_trace_entities()` when the thread is done, since a pool's
    threads serve the next invocation too. Any other tracer needs nothing (OpenTelemetry's context is a
    context variable)."""
    provider: Any = getattr(tracer, "provider", None)
    if not hasattr(provider, "set_trace_entity"):
        return contextlib.nullcontext
    entity = provider.get_trace_entity()
    if entity is None:  # no segment to hang from (the SDK logged it): the threads trace as they would
        return contextlib.nullcontext

    @contextlib.contextmanager
    def under_entity() -> Iterator[None]:
        provider.set_trace_entity(entity)
        try:
            yield
        finally:
            provider.clear_trace_entities()

    return under_entity


INVOCATION_KEYS = ("function_name", "function_arn", "function_memory_size", "function_request_id")
"""The keys of the Lambda context `inject_lambda_context` puts on each line, kept per thread too."""


class FunctionLogger(Logger):
    """Powertools' `Logger`, whose `inject_lambda_context` also keeps the invocation's context keys per thread
    (Powertools' `thread_safe_append_keys`, a context variable that wins over the logger's shared keys) for
    the invocation's length.

    In Lambda each function is its own process and this changes no line. The offline runtime runs the three
    functions in one process on threads of their own, sharing this one logger: the keys Powertools appends
    are the logger's, so a line took the name of whichever function was invoked last (receiver work tagged
    `extender`). Kept per thread, each line names the function whose invocation logged it."""

    def inject_lambda_context(  # type: ignore[override]
        self, lambda_handler: Callable[..., Any] | None = None, **options: Any
    ) -> Any:
        if lambda_handler is None:
            return functools.partial(self.inject_lambda_context, **options)
        handler = lambda_handler

        @functools.wraps(handler)
        def tagged(event: Any, context: Any, *args: Any, **kwargs: Any) -> Any:
            keys = {
                "function_name": getattr(context, "function_name", None),
                "function_arn": getattr(context, "invoked_function_arn", None),
                "function_memory_size": getattr(context, "memory_limit_in_mb", None),
                "function_request_id": getattr(context, "aws_request_id", None),
            }
            self.thread_safe_append_keys(**{key: value for key, value in keys.items() if value is not None})
            try:
                return handler(event, context, *args, **kwargs)
            finally:
                self.thread_safe_remove_keys(INVOCATION_KEYS)

        return super().inject_lambda_context(tagged, **options)


logger = FunctionLogger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = make_tracer()


class MetricsSink(Protocol):
    """What publishing needs of Powertools `Metrics` (a recorder in tests)."""

    def add_metric(self, name: str, unit: str, value: float) -> None: ...


class MetricName:
    """Metric names, shared with the dashboard and alarms."""

    RENEWALS = "Renewals"
    RENEWAL_FAILURES_THROTTLED = "RenewalFailuresThrottled"
    RENEWAL_FAILURES_OTHER = "RenewalFailuresOther"
    RENEWALS_GIVEN_UP = "RenewalsGivenUp"
    TIME_LEFT_AT_RENEWAL = "TimeLeftAtRenewal"
    LAPSES = "Lapses"
    LEASES_CAPPED = "LeasesCapped"
    LEASES_LOST = "LeasesLost"
    LEASES_RELEASED = "LeasesReleased"
    LEASES_COMPLETED = "LeasesCompleted"
    LEASE_CONFLICTS = "LeaseConflicts"
    RECONCILE_FAILURES = "ReconcileFailures"
    EXECUTIONS_STOPPED = "ExecutionsStopped"  # their lease could no longer be held (invariant 8)
    RENEWALS_NOT_RECORDED = "RenewalsNotRecorded"  # SQS accepted, the table write failed: due again
    RELEASES_REASSERTED = "ReleasesReasserted"  # a renewal raced a release; the release was applied again
    EXTENDER_PASS_FAILURES = "ExtenderPassFailures"
    # receiver: one per outcome of a record
    JOBS_STARTED = "JobsStarted"
    JOBS_REJECTED = "JobsRejected"  # sent to the DLQ: poison, or its attempts used up
    JOBS_INLINE = "JobsInline"
    JOBS_FANNED_OUT = "JobsFannedOut"
    JOBS_IGNORED = "JobsIgnored"
    JOBS_ALREADY_SUCCEEDED = "JobsAlreadySucceeded"
    JOBS_ALREADY_CANCELLED = "JobsAlreadyCancelled"  # a redelivery of a message an operator cancelled
    REDELIVERED_WHILE_RUNNING = "RedeliveredWhileRunning"  # a lapse seen from the receiving end
    JOBS_SETTLED_ON_REDELIVERY = "JobsSettledOnRedelivery"
    JOBS_NOT_STARTED = "JobsNotStarted"
    RECORDS_STALE = "RecordsStale"
    JOBS_WAITING = "JobsWaiting"  # its job id was running: a delayed copy went back to the queue
    JOBS_WAITING_FOR_SLOT = "JobsWaitingForSlot"  # its type was full: held hidden until about when it can run
    JOBS_PARKED = "JobsParked"  # its type was full beyond the horizon: moved to the type's waiting queue
    PARKED_DUPLICATES = "ParkedDuplicates"  # a parked or requeued message again, or a twin copy: acknowledged, one runs
    S3_OBJECTS_IGNORED = "S3ObjectsIgnored"  # created objects that are no trigger's completion marker
    RECORDS_FAILED = "RecordsFailed"
    # watcher
    EXECUTIONS_ENDED = "ExecutionsEnded"
    ATTEMPT_COST = "AttemptCost"  # dollars at list price, per ended attempt, with a `job_type` dimension
    ATTEMPT_RUNNER_SECONDS = "AttemptRunnerSeconds"  # the run time priced, with a `job_type` dimension
    # admission, with a `job_type` dimension (extender, each run; AdmissionDelay at each admission)
    SLOTS_IN_USE = "SlotsInUse"
    WAITING_MESSAGES = "WaitingMessages"  # waiting in flight (WAITING leases)
    PARKED_MESSAGES = "ParkedMessages"  # in the type's waiting queue
    ADMISSION_DELAY = "AdmissionDelay"  # seconds from a message's first wait to its admission
    BACKLOG_DRAIN_TIME = "BacklogDrainTime"  # seconds until the last waiting or parked message can start
    ADMITTED_IN_PLACE = "AdmittedInPlace"
    SLOTS_FREED = "SlotsFreed"  # held by an execution found not running (its release was lost)
    PARKED_COPIES_RESENT = "ParkedCopiesResent"  # a parked copy near the waiting queue's retention, sent afresh


TYPE_DIMENSION = "job_type"


def type_metric(sink: MetricsSink | None, name: str, unit: str, value: float, job_type: str) -> None:
    """A metric with the `job_type` dimension. Powertools' `Metrics` shares one set of dimensions per
    flush, so each is its own EMF record (`single_metric`); another sink (a test's recorder) gets it with
    the type in its name's place only if it has `add_type_metric`, else without the dimension."""
    if sink is None:
        return
    typed = getattr(sink, "add_type_metric", None)
    if typed is not None:
        typed(name=name, unit=unit, value=value, job_type=job_type)
        return
    if isinstance(sink, Metrics):
        from aws_lambda_powertools.metrics import MetricUnit, single_metric
        from aws_lambda_powertools.metrics.functions import is_metrics_disabled

        if is_metrics_disabled():  # `Metrics` honours POWERTOOLS_METRICS_DISABLED when it flushes; this
            return  # `single_metric` prints its record regardless (Powertools 3), so the switch is read here

        with single_metric(
            name=name,
            unit=MetricUnit(unit),
            value=value,
            namespace=NAMESPACE,
            default_dimensions={"service": SERVICE, TYPE_DIMENSION: job_type},
        ):
            pass
        return
    sink.add_metric(name=name, unit=unit, value=value)


class SerializedSink:
    """A metrics sink that threads share (the receiver handles a batch's records on threads): each metric
    is added under one lock. Powertools' `Metrics` reads a metric's entry, changes it and stores it back
    in separate steps, so two threads adding the same metric at once could lose one value. A typed metric
    (and a full buffer's flush) is printed at once, in two writes, the record and its newline: the lock is
    the logger's handler's, so no log line lands between them and spoils both for CloudWatch."""

    def __init__(self, sink: MetricsSink, output: logging.Handler | None = None) -> None:
        self.sink = sink
        self._lock = output.lock if output is not None and output.lock is not None else threading.RLock()

    def add_metric(self, name: str, unit: str, value: float) -> None:
        with self._lock:
            self.sink.add_metric(name=name, unit=unit, value=value)

    def add_type_metric(self, name: str, unit: str, value: float, job_type: str) -> None:
        with self._lock:
            type_metric(self.sink, name, unit, value, job_type)
