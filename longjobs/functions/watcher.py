"""The watcher Lambda: an EventBridge rule sends it the ends of this state machine's executions. It
releases the message of one that failed, timed out or was aborted, and after any end (a success too)
runs admission's pass over the slot it freed."""

from __future__ import annotations

import random
from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING, Any

from longjobs.engine.clock import SystemClock
from longjobs.engine.factory import Clients, Factory, require
from longjobs.engine.lease.lock import Hold
from longjobs.engine.observability import MetricName, MetricsSink, job_spans_enabled, logger, metrics, tracer
from longjobs.engine.settings import Settings
from longjobs.engine.watcher.attempt_cost import record_attempt_cost
from longjobs.engine.watcher.job_span import record_job_span
from longjobs.engine.watcher.models import ExecutionStatusChangeEvent
from longjobs.engine.watcher.service import Watcher, WatchOutcome, on_status_change
from longjobs.functions.restore import on_restore

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext  # the type only: its import costs ~25 ms

    from longjobs.engine.delivery.types import Receiver
    from longjobs.engine.jobs import JobCatalog

SETTINGS = Settings.from_env()
JOB_SPANS = job_spans_enabled()


@cache
def watcher() -> Watcher:
    """This container's watcher, with admission's pass when the queue is set (the pass finds nothing to do
    where no type is limited)."""
    require(SETTINGS, "watcher", ("table_name", "state_machine_arn"))
    return Factory(SETTINGS, SystemClock()).watcher(clients(), admit=_admit if SETTINGS.queue_url else None)


@cache
def clients() -> Clients:
    """The watcher's SQS and DynamoDB clients; admission adds a Step Functions client to them."""
    return Clients.from_sdk(stepfunctions=False)


def _admit(job_type: str, freed: Hold | None) -> object:
    """Admission's pass over the ended execution's type; nothing when no type is limited."""
    receiver = admitter()
    return Factory.watcher_admission(receiver)(job_type, freed) if receiver is not None else None


@cache
def admitter() -> Receiver | None:
    """The receiver admission runs as, with the watcher's clock and clients; None when no type is
    limited. Built on the first event that ends an execution, so neither its imports nor its clients
    weigh on the cold start of a watcher without limits."""
    from longjobs.engine import aws
    from longjobs.engine.jobs import catalog_from_env
    from longjobs.engine.policies import resolve_visibility_timeout

    catalog = catalog_from_env()
    if not catalog.limited():
        return None
    own = replace(clients(), stepfunctions=aws.stepfunctions())
    factory = Factory(resolve_visibility_timeout(SETTINGS, own.sqs), watcher().clock, catalog, metrics)
    return factory.receiver(own, random.Random()) if factory.admits else None


on_restore(watcher, clients, admitter)  # SnapStart: a restored container builds its own


@cache
def catalog() -> JobCatalog:
    """The functions' job catalog, which prices each attempt (read on the first event, not at import)."""
    from longjobs.engine.jobs import catalog_from_env

    return catalog_from_env()


def watch(
    watcher: Watcher,
    raw_event: dict[str, Any],
    sink: MetricsSink | None,
    *,
    job_spans: bool = False,
    job_catalog: JobCatalog | None = None,
) -> WatchOutcome:
    """The watcher's Lambda-free core: an EventBridge event of an execution's end, validated (a bad event
    raises, and EventBridge's delivery retries it), handed to the watcher, and its end counted in `sink`
    unless the watcher changed nothing (duplicates, other machines' and superseded attempts' events).
    Every end's attempt is priced with `job_catalog`'s types (`longjobs.engine.watcher.attempt_cost`)."""
    event = ExecutionStatusChangeEvent.model_validate(raw_event)
    outcome = on_status_change(watcher, event.detail)
    if job_spans:
        record_job_span(event.detail)
    if job_catalog is not None:
        record_attempt_cost(event.detail, job_catalog, sink)
    if outcome is not WatchOutcome.UNCHANGED and sink is not None:
        sink.add_metric(name=MetricName.EXECUTIONS_ENDED, unit="Count", value=1)
    logger.info(
        "execution status change",
        extra={"execution": event.detail.executionArn, "status": event.detail.status, "outcome": outcome.value},
    )
    return outcome


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(raw_event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return {"outcome": watch(watcher(), raw_event, metrics, job_spans=JOB_SPANS, job_catalog=catalog()).value}
