"""Watcher Lambda: an EventBridge rule sends it this state machine's executions' ends (FAILED, TIMED_OUT,
ABORTED to release; SUCCEEDED too, for admission)."""

from __future__ import annotations

import random
from functools import cache
from typing import TYPE_CHECKING, Any

from longjobs.engine import aws
from longjobs.engine.clock import SystemClock
from longjobs.engine.lease import LeaseStore
from longjobs.engine.lease.lock import Hold
from longjobs.engine.observability import MetricName, job_spans_enabled, logger, metrics, tracer
from longjobs.engine.settings import Settings, SettingsError
from longjobs.engine.visibility import VisibilityClient
from longjobs.engine.watcher.job_span import record_job_span
from longjobs.engine.watcher.models import ExecutionStatusChangeEvent
from longjobs.engine.watcher.service import Watcher, WatchOutcome, on_status_change

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext  # the type only: its import costs ~25 ms

    from longjobs.engine.receiver.types import Receiver

SETTINGS = Settings.from_env()
JOB_SPANS = job_spans_enabled()


@cache
def watcher() -> Watcher:
    if not SETTINGS.table_name or not SETTINGS.state_machine_arn:
        raise SettingsError("the watcher needs TABLE_NAME and STATE_MACHINE_ARN")
    clock = SystemClock()
    store = LeaseStore(aws.dynamodb(), SETTINGS.table_name, shards=SETTINGS.shards, closed_ttl_s=SETTINGS.closed_ttl_s)
    visibility = VisibilityClient(aws.sqs(), clock=clock)
    return Watcher(
        store=store,
        visibility=visibility,
        clock=clock,
        state_machine_arn=SETTINGS.state_machine_arn,
        admit=_admit if SETTINGS.queue_url else None,
    )


def _admit(job_type: str, freed: Hold | None) -> object:
    """Admission's pass over the ended execution's type; nothing when no type is limited."""
    from longjobs.engine.admission.admit import watcher_pass
    from longjobs.engine.receiver.service import receive

    receiver = admitter()
    return watcher_pass(receiver, handle=receive)(job_type, freed) if receiver is not None else None


@cache
def admitter() -> Receiver | None:
    """The receiver admission runs as, with the watcher's store and clock and its own SQS and Step Functions
    clients; None when no type is limited. Built on the first event that ends an execution, so neither its
    imports nor its clients weigh on the cold start of a watcher without limits."""
    from longjobs.engine.jobs import catalog_from_env
    from longjobs.engine.policies import build_policy, resolve_visibility_timeout
    from longjobs.engine.receiver.types import Receiver

    catalog = catalog_from_env()
    if not catalog.limited():
        return None
    base = watcher()
    sqs = aws.sqs()
    settings = resolve_visibility_timeout(SETTINGS, sqs)
    return Receiver(
        settings=settings,
        policy=build_policy(settings),
        store=base.store,
        sqs=sqs,
        visibility=VisibilityClient(sqs, clock=base.clock),
        stepfunctions=aws.stepfunctions(),
        clock=base.clock,
        rng=random.Random(),
        catalog=catalog,
        metrics=metrics,
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(raw_event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    event = ExecutionStatusChangeEvent.model_validate(raw_event)  # a bad event raises: EventBridge retries it
    outcome = on_status_change(watcher(), event.detail)
    if JOB_SPANS:
        record_job_span(event.detail)
    if outcome is not WatchOutcome.UNCHANGED:  # duplicates, other machines' and superseded attempts' events
        metrics.add_metric(name=MetricName.EXECUTIONS_ENDED, unit="Count", value=1)
    logger.info(
        "execution status change",
        extra={"execution": event.detail.executionArn, "status": event.detail.status, "outcome": outcome.value},
    )
    return {"outcome": outcome.value}
