"""Extender Lambda: invoked every minute by EventBridge Scheduler; renews due leases, reconciles."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING, Any

from longjobs.engine import aws
from longjobs.engine.clock import SystemClock
from longjobs.engine.extender.invocation import InvocationReport, run_invocation
from longjobs.engine.extender.service import Extender, legacy_shards, report_dict
from longjobs.engine.lease import LeaseStore
from longjobs.engine.observability import MetricName, MetricsSink, logger, metrics, tracer
from longjobs.engine.policies import build_policy, resolve_visibility_timeout
from longjobs.engine.settings import Settings, SettingsError
from longjobs.engine.visibility import VisibilityClient

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext  # the type only: its import costs ~25 ms

SETTINGS = Settings.from_env()  # a bad setting fails the cold start, naming the setting


@cache
def extender() -> Extender:
    """The extender of this container: clients, store and policy built once."""
    if not SETTINGS.table_name:
        raise SettingsError("table_name (TABLE_NAME) is required by the extender")
    sqs = aws.sqs()
    settings = resolve_visibility_timeout(SETTINGS, sqs)
    clock = SystemClock()
    executor = ThreadPoolExecutor(max_workers=settings.max_workers)
    ext = Extender(
        settings=settings,
        policy=build_policy(settings),
        store=LeaseStore(
            aws.dynamodb(),
            settings.table_name or "",
            shards=settings.shards,
            closed_ttl_s=settings.closed_ttl_s,
            executor=executor,
            legacy=legacy_shards(settings, clock),
        ),
        visibility=VisibilityClient(sqs, clock=clock, executor=executor),
        sqs=sqs,
        clock=clock,
        executor=executor,
        stepfunctions=aws.stepfunctions(),
    )
    return replace(ext, admit=admission(ext))


def admission(ext: Extender) -> Callable[[float], Sequence[Any]] | None:
    """Admission's pass over the limited job types, with a receiver's view of the same clients; None when
    no type has a concurrency limit (or the extender lacks what starting an attempt needs)."""
    from longjobs.engine.jobs import catalog_from_env

    catalog = catalog_from_env()
    settings = ext.settings
    if not catalog.limited() or ext.stepfunctions is None or not settings.state_machine_arn:
        return None
    from longjobs.engine.admission.admit import extender_pass
    from longjobs.engine.receiver.service import receive
    from longjobs.engine.receiver.types import Receiver

    admitter = Receiver(
        settings=settings,
        policy=ext.policy,
        store=ext.store,
        sqs=ext.sqs,
        visibility=VisibilityClient(ext.sqs, clock=ext.clock),
        stepfunctions=ext.stepfunctions,
        clock=ext.clock,
        rng=random.Random(),
        catalog=catalog,
        metrics=metrics,
    )
    return extender_pass(admitter, handle=receive)


def publish(sink: MetricsSink, report: InvocationReport) -> None:
    """Every counter as a metric, zeros included, so alarms see data rather than gaps."""
    renewal, reconciled = report.renewal, report.reconcile
    for name, value in (
        (MetricName.RENEWALS, renewal.renewed),
        (MetricName.RENEWAL_FAILURES_THROTTLED, renewal.throttled),
        (MetricName.RENEWAL_FAILURES_OTHER, renewal.failed),
        (MetricName.RENEWALS_GIVEN_UP, renewal.given_up),
        (MetricName.LAPSES, renewal.lapses),
        (MetricName.LEASES_CAPPED, renewal.capped),
        (MetricName.LEASES_LOST, renewal.lost),
        (MetricName.LEASE_CONFLICTS, renewal.conflicts),
        (MetricName.EXECUTIONS_STOPPED, renewal.stopped),
        (MetricName.RENEWALS_NOT_RECORDED, renewal.record_failures),
        (MetricName.RELEASES_REASSERTED, renewal.releases_reasserted),
        (MetricName.EXTENDER_PASS_FAILURES, report.failed_passes),
        (MetricName.LEASES_RELEASED, reconciled.released),
        (MetricName.LEASES_COMPLETED, reconciled.completed),
        (MetricName.RECONCILE_FAILURES, reconciled.failed),
    ):
        sink.add_metric(name=name, unit="Count", value=value)
    if renewal.min_time_left_s is not None:
        sink.add_metric(name=MetricName.TIME_LEFT_AT_RENEWAL, unit="Seconds", value=renewal.min_time_left_s)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    report = run_invocation(extender(), remaining_ms=context.get_remaining_time_in_millis)
    publish(metrics, report)
    if report.admission:
        from longjobs.engine.admission.admit import publish as publish_admission

        publish_admission(metrics, report.admission)
    logger.info("extender run", extra={"ticks": report.ticks, **report_dict(report.renewal)})
    return {
        "ticks": report.ticks,
        "failed_passes": report.failed_passes,
        "renewal": report_dict(report.renewal),
        "reconcile": report_dict(report.reconcile),
        "admission": [report_dict(a) for a in report.admission],
    }
