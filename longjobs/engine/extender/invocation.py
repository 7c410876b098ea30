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
    ones unparked) runs after it, once per `admission_pass_interval_s`, and begins nothing past the next
    tick, so a long admission pass never holds back the renewals due at that tick (with the threshold
    and remaining policies a tick is shorter than the time a lease may wait).
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
            if ext.admit is not None and clock.now() >= ext.admissions.next_at:
                report.admission = admission_pass(ext, start, min(deadline, next_tick))
        if next_tick >= deadline:
            return report
        clock.sleep(next_tick - clock.now())


def admission_pass(ext: Extender, start: float, deadline: float) -> list[Any]:
    """Admission's pass (`Extender.admit`), then when the next is due. The watcher admits into the slot of
    every end it hears of, so this pass is the backstop (a slot whose event was lost or whose release
    failed), tops the line in flight up to the horizon and measures the backlog: it runs once per
    `admission_pass_interval_s` (every fourth run by default), which takes its reads (the slots, the
    holders' leases, the line's length, the waiting queue's depth) off most runs. A pass that failed or
    ran out of time goes on at the next run."""
    assert ext.admit is not None
    try:
        reports = list(ext.admit(deadline))
    except Exception:
        logger.exception("admission failed; the next run goes on")
        return []
    # A type whose pass failed (`AdmitReport.failed`: `admit_all` logs it and goes on with the others)
    # is passed over again at the next run, as a pass cut short by its deadline is.
    whole = ext.clock.now() < deadline and not any(getattr(report, "failed", False) for report in reports)
    # Half a period early: a scheduled run that starts a little ahead of its minute still passes (else
    # every fifth run would, and a 5-minute period of the metrics could go without a datapoint).
    settings = ext.settings
    due = start + settings.effective_admission_pass_interval_s - settings.extender_period_s / 2
    ext.admissions.next_at = due if whole else 0.0
    return reports
