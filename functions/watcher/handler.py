"""Watcher Lambda: an EventBridge rule sends it this state machine's FAILED, TIMED_OUT and ABORTED events."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from functions import aws
from functions.clock import SystemClock
from functions.lease import LeaseStore
from functions.observability import MetricName, logger, metrics, tracer
from functions.settings import Settings, SettingsError
from functions.visibility import VisibilityClient
from functions.watcher.models import ExecutionStatusChangeEvent
from functions.watcher.service import Watcher, WatchOutcome, on_status_change

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext  # the type only: its import costs ~25 ms

SETTINGS = Settings.from_env()


@cache
def watcher() -> Watcher:
    if not SETTINGS.table_name or not SETTINGS.state_machine_arn:
        raise SettingsError("the watcher needs TABLE_NAME and STATE_MACHINE_ARN")
    clock = SystemClock()
    return Watcher(
        store=LeaseStore(
            aws.dynamodb(), SETTINGS.table_name, shards=SETTINGS.shards, closed_ttl_s=SETTINGS.closed_ttl_s
        ),
        visibility=VisibilityClient(aws.sqs(), clock=clock),
        clock=clock,
        state_machine_arn=SETTINGS.state_machine_arn,
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(raw_event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    event = ExecutionStatusChangeEvent.model_validate(raw_event)  # a bad event raises: EventBridge retries it
    outcome = on_status_change(watcher(), event.detail)
    if outcome is not WatchOutcome.UNCHANGED:  # duplicates, other machines' and superseded attempts' events
        metrics.add_metric(name=MetricName.EXECUTIONS_ENDED, unit="Count", value=1)
    logger.info(
        "execution status change",
        extra={"execution": event.detail.executionArn, "status": event.detail.status, "outcome": outcome.value},
    )
    return {"outcome": outcome.value}
