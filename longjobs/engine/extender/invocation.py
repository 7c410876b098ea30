"""One scheduled invocation of the extender: a pass, or sub-minute ticks while time allows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from longjobs.engine.extender.reconcile import ReconcileReport, reconcile
from longjobs.engine.extender.service import Extender, PassReport, renew_due
from longjobs.engine.observability import logger


@dataclass
class InvocationReport:
    ticks: int = 0
    failed_passes: int = 0  # passes that raised (a query that failed, say): the next tick goes on
    renewal: PassReport = field(default_factory=PassReport)
    reconcile: ReconcileReport = field(default_factory=ReconcileReport)
    admission: list[Any] = field(default_factory=list)  # one `AdmitReport` per limited job type


def run_invocation(ext: Extender, *, remaining_ms: Callable[[], int]) -> InvocationReport:
    """Renew on every tick until the next scheduled run is due or the Lambda time runs out.

    With the adaptive policy the tick is the schedule's period, so this is one pass. A pass retries
    throttled renewals only until the next tick, which takes them up again with whatever else fell due:
    a slow pass never starves the ticks after it. A pass that fails is logged and counted, and the
    next tick runs all the same. Reconciliation runs once per invocation, after the first pass, so it
    never delays a renewal; admission (slots freed from dead holders, waiting messages admitted, parked
    ones unparked) runs after it and begins nothing past the next tick, so a long admission pass never
    holds back the renewals due at that tick (with the threshold and remaining policies a tick is
    shorter than the time a lease may wait).
    """
    clock, settings = ext.clock, ext.settings
    start = clock.now()
    deadline = min(
        start + remaining_ms() / 1000 - settings.invocation_margin_s,
        start + settings.extender_period_s,
    )
    report = InvocationReport()
    while True:
        next_tick = start + (report.ticks + 1) * settings.tick_s
        try:
            report.renewal.add(renew_due(ext, deadline=min(deadline, next_tick)))
        except Exception:
            report.failed_passes += 1
            logger.exception("extender pass failed; the next tick goes on")
        report.ticks += 1
        if report.ticks == 1:
            try:
                report.reconcile = reconcile(ext, deadline=deadline)
            except Exception:
                report.reconcile.failed += 1
                logger.exception("reconciliation failed; the next run goes on")
            if ext.admit is not None:
                try:
                    report.admission = list(ext.admit(min(deadline, next_tick)))
                except Exception:
                    logger.exception("admission failed; the next run goes on")
        if next_tick >= deadline:
            return report
        clock.sleep(next_tick - clock.now())
