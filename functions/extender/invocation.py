"""One scheduled invocation of the extender: a pass, or sub-minute ticks while time allows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from functions.extender.reconcile import ReconcileReport, reconcile
from functions.extender.service import Extender, PassReport, renew_due


@dataclass
class InvocationReport:
    ticks: int = 0
    renewal: PassReport = field(default_factory=PassReport)
    reconcile: ReconcileReport = field(default_factory=ReconcileReport)


def run_invocation(ext: Extender, *, remaining_ms: Callable[[], int]) -> InvocationReport:
    """Renew on every tick until the next scheduled run is due or the Lambda time runs out.

    With the adaptive policy the tick is the schedule's period, so this is one pass. Reconciliation
    runs once per invocation, after the first pass, so it never delays a renewal.
    """
    clock, settings = ext.clock, ext.settings
    start = clock.now()
    deadline = min(
        start + remaining_ms() / 1000 - settings.invocation_margin_s,
        start + settings.extender_period_s,
    )
    report = InvocationReport()
    while True:
        report.renewal.add(renew_due(ext, deadline=deadline))
        report.ticks += 1
        if report.ticks == 1:
            report.reconcile = reconcile(ext, deadline=deadline)
        next_tick = start + report.ticks * settings.tick_s
        if next_tick >= deadline:
            return report
        clock.sleep(next_tick - clock.now())
