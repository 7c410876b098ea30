"""The extender Lambda: EventBridge Scheduler invokes it every minute; it renews the leases due, settles
those whose executions ended, and runs admission's pass."""

from __future__ import annotations

import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import TYPE_CHECKING, Any

from longjobs.engine.clock import SystemClock
from longjobs.engine.extender.invocation import InvocationReport, run_invocation
from longjobs.engine.extender.service import Extender, report_dict
from longjobs.engine.factory import Clients, Factory, require
from longjobs.engine.observability import MetricName, MetricsSink, logger, metrics, tracer
from longjobs.engine.policies import resolve_visibility_timeout
from longjobs.engine.settings import Settings
from longjobs.functions.restore import on_restore

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext  # the type only: its import costs ~25 ms

SETTINGS = Settings.from_env()  # a bad setting fails the cold start, naming the setting


@cache
def extender() -> Extender:
    """This container's extender: its clients, store and policy built once, and admission's pass on a
    standard queue (`Factory.tends_parked`)."""
    from longjobs.engine.jobs import catalog_from_env

    require(SETTINGS, "extender", ("table_name",))
    clients = Clients.from_sdk()
    settings = resolve_visibility_timeout(SETTINGS, clients.sqs)
    factory = Factory(settings, SystemClock(), catalog_from_env(), metrics)
    admitter = factory.receiver(clients, random.Random()) if factory.tends_parked else None
    executor = ThreadPoolExecutor(max_workers=settings.max_workers)
    return factory.extender(clients, random.Random(), executor=executor, admitter=admitter)


on_restore(extender)  # SnapStart: a restored container builds its own


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


def extend(extender: Extender, remaining_ms: Callable[[], int], sink: MetricsSink | None) -> InvocationReport:
    """The extender's Lambda-free core: one invocation's passes within the time it has left
    (`remaining_ms`), every counter published to `sink`, admission's too."""
    report = run_invocation(extender, remaining_ms=remaining_ms)
    if sink is not None:
        publish(sink, report)
        if report.admission:
            from longjobs.engine.admission.admit import publish as publish_admission

            publish_admission(sink, report.admission)
    logger.info("extender run", extra={"ticks": report.ticks, **report_dict(report.renewal)})
    return report


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    report = extend(extender(), context.get_remaining_time_in_millis, metrics)
    return {
        "ticks": report.ticks,
        "failed_passes": report.failed_passes,
        "renewal": report_dict(report.renewal),
        "reconcile": report_dict(report.reconcile),
        "admission": [report_dict(a) for a in report.admission],
    }
