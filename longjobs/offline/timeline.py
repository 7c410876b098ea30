"""The run as a picture: one row per message, time across, and a row of the injected faults on top.

Each message's row shows its deliveries (triangles: blue a first or ordinary delivery, orange a
delivery while its job ran that an injected fault excuses, with the excuse written beside it, red a
lapse that no fault explains), its executions (bars, coloured by how they ended), each renewal (dots),
how far ahead the lease believed the message hidden after each change (thin bars from the change to its
visible-until), the faults aimed at that job (`abort_execution`, `duplicate_delivery`, `kill_worker`:
stars, named), when its message was parked (grey, `parked`: copied to its type's waiting queue; the
executions after it run from the copy) and the final state. The top row, `injected faults`, shows
every call a fault answered (by mode) and every scheduled extender run lost to a fault; shaded spans
across all rows are the windows in which faults excuse a delivery while a job runs (a paused extender,
more lost runs in a row than the settings survive). Drawn with matplotlib's Agg backend: no display needed.

`fault_marks` and `delivery_marks` say what is drawn, so a test can check it without reading pixels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from longjobs.offline.faults import LOST_OUTCOMES, Faults
from longjobs.offline.report import redelivery_verdicts
from longjobs.offline.runtime import RunResult
from longjobs.offline.scenario import PauseExtender, Scenario

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from longjobs.offline.observe import Track

EXECUTION_COLOURS = {"SUCCEEDED": "tab:green", "FAILED": "tab:red", "ABORTED": "tab:orange", "TIMED_OUT": "tab:red"}
FINAL_COLOURS = {"deleted": "tab:green", "dlq": "tab:red", "queued": "tab:gray", "lost": "black"}
FAULT_MARKERS = {
    "throttled": "x",
    "server_error": "X",
    "timeout": "x",
    "answer_lost": "d",
    "crash_before": "s",
    "crash_after": "s",
    "function_timeout": "s",
    "run": "|",
}
FAULT_COLOURS = {
    "throttled": "tab:gray",
    "server_error": "tab:red",
    "timeout": "tab:red",
    "answer_lost": "tab:olive",
    "crash_before": "black",
    "crash_after": "black",
    "function_timeout": "black",
    "run": "tab:brown",
}
PARKED_COLOUR = "tab:gray"
DELIVERY_COLOURS = {"delivery": "tab:blue", "excused": "tab:orange", "lapse": "tab:red"}
FAULTS_ROW = "injected faults"


@dataclass(frozen=True)
class Mark:
    """One thing drawn: on the faults row (`job` None) or a job's row, at `at` seconds since the jobs
    were sent; `kind` picks its marker, `label` is written beside it or names it."""

    job: str | None
    at: float
    kind: str
    label: str


def fault_marks(faults: Faults, start: float) -> list[Mark]:
    """The injected faults as drawn: each call a fault answered (on the faults row, labelled
    `function Operation`), each scheduled extender run lost to a fault (paused, lost, crashed or
    impaired), and each job-aimed fault that took effect (on its job's row)."""
    marks = [
        Mark(None, injection.at - start, injection.mode, f"{injection.function} {injection.operation}")
        for injection in faults.injections
    ]
    marks += [
        Mark(None, slot.at - start, "run", f"extender run {slot.outcome}")
        for slot in faults.runs
        if slot.outcome in LOST_OUTCOMES
    ]
    marks += [Mark(action.job, action.at - start, "action", action.type) for action in faults.applied]
    return sorted(marks, key=lambda mark: mark.at)


def excuse_windows(faults: Faults, scenario: Scenario, start: float, end: float) -> list[tuple[float, float]]:
    """When faults excuse a delivery while a job runs (seconds since the jobs were sent): each
    `pause_extender` longer than one period, until a period after it, and each outage (more lost runs
    in a row than the settings survive, see `Faults.outages`)."""
    period = scenario.settings.extender_period_s
    windows = [
        (fault.at_s, fault.at_s + fault.for_s + period)
        for fault in scenario.faults
        if isinstance(fault, PauseExtender) and fault.for_s > period
    ]
    windows += [(begin - start, (end if math.isinf(until) else until) - start) for begin, until in faults.outages()]
    return sorted(windows)


def delivery_marks(track: Track, faults: Faults | None, start: float) -> list[Mark]:
    """The message's deliveries as drawn: `delivery`, or while its job ran `excused` (labelled with the
    fault's excuse) or `lapse`."""
    verdicts = {verdict.at: verdict.excuse for verdict in redelivery_verdicts(track, faults)}
    marks = []
    for delivery in track.deliveries:
        if not delivery.while_running:
            marks.append(Mark(track.job_id, delivery.at - start, "delivery", ""))
        elif verdicts.get(delivery.at) is not None:
            marks.append(Mark(track.job_id, delivery.at - start, "excused", f"excused: {verdicts[delivery.at]}"))
        else:
            marks.append(Mark(track.job_id, delivery.at - start, "lapse", "lapse: no injected fault explains it"))
    return marks


def draw_timeline(result: RunResult, scenario: Scenario, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    tracks = [result.tracks[job.id] for job in scenario.jobs]
    end = result.end - result.start
    rows = len(tracks) + 1  # the faults row on top
    figure, axes = plt.subplots(figsize=(12, 1.0 + 0.6 * rows))
    row_of = {track.job_id: row for row, track in enumerate(reversed(tracks))}
    for begin, until in excuse_windows(result.faults, scenario, result.start, result.end):
        axes.axvspan(begin, until, color="tab:orange", alpha=0.12, lw=0)
    for track in tracks:
        _draw_row(axes, row_of[track.job_id], track, result.start, end)
        _draw_deliveries(axes, row_of[track.job_id], delivery_marks(track, result.faults, result.start))
    _draw_faults(axes, len(tracks), row_of, fault_marks(result.faults, result.start))
    labels = [f"{t.job_id} ({t.final})" for t in reversed(tracks)] + [FAULTS_ROW]
    axes.set_yticks(range(rows), labels)
    axes.set_ylim(-0.6, rows - 0.3)
    axes.set_xlim(0, end + 2)
    axes.set_xlabel("seconds since the jobs were sent")
    axes.grid(axis="x", alpha=0.3)
    totals = result.report["totals"]
    injected = sum((totals.get("faults_injected") or {}).values())
    axes.set_title(
        f"{totals['jobs']} jobs: {totals['deleted']} deleted, {totals['dlq']} in the DLQ, "
        f"{totals['renewals']} renewals; {totals['redelivered_while_running']} delivered while running "
        f"({totals.get('redeliveries_excused', 0)} excused by injected faults), {totals['lapses']} lapses; "
        f"{injected} faults injected; ok={result.report['ok']}",
        fontsize="medium",
    )
    axes.legend(
        handles=[
            Line2D([], [], marker="v", linestyle="", color=DELIVERY_COLOURS["delivery"], label="delivery"),
            Line2D(
                [],
                [],
                marker="v",
                linestyle="",
                color=DELIVERY_COLOURS["excused"],
                label="delivered while running: excused",
            ),
            Line2D(
                [],
                [],
                marker="v",
                linestyle="",
                color=DELIVERY_COLOURS["lapse"],
                label="delivered while running: lapse",
            ),
            Patch(color="tab:green", label="execution succeeded"),
            Patch(color="tab:red", label="execution failed"),
            Patch(color="tab:orange", label="execution aborted"),
            Line2D([], [], marker="o", linestyle="", color="tab:purple", markersize=4, label="renewal"),
            Patch(color="tab:purple", alpha=0.25, label="hidden until (lease's visible-until)"),
            Line2D(
                [], [], marker="x", linestyle="", color=FAULT_COLOURS["throttled"], label="call answered by a fault"
            ),
            Line2D([], [], marker="|", linestyle="", color=FAULT_COLOURS["run"], label="extender run lost to a fault"),
            Line2D([], [], marker="*", linestyle="", color="black", label="fault on the job"),
            Line2D([], [], marker=">", linestyle="", color=PARKED_COLOUR, label="parked (to its waiting queue)"),
            Patch(color="tab:orange", alpha=0.12, label="faults excuse redeliveries"),
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12 - 0.3 / max(1, rows)),
        ncol=4,
        fontsize="small",
        frameon=False,
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _draw_row(axes: Axes, row: int, track: Track, start: float, end: float) -> None:
    for changed, visible_until in track.visibility:
        # A lease's belief ends when it closes: the message is deleted, or released with its own delay.
        until = min([visible_until, *(closed for closed in track.closes if closed > changed)])
        axes.plot([changed - start, until - start], [row - 0.25, row - 0.25], color="tab:purple", alpha=0.25, lw=5)
    renewals = [at - start for at in track.renewals]
    axes.plot(renewals, [row - 0.25] * len(renewals), "o", color="tab:purple", markersize=4)
    for execution in track.executions:
        stopped = (execution.stopped if execution.stopped is not None else start + end) - start
        axes.barh(
            row + 0.05,
            stopped - (execution.started - start),
            left=execution.started - start,
            height=0.3,
            color=EXECUTION_COLOURS.get(execution.status, "tab:gray"),
            alpha=0.8,
        )
    for parked in track.parked:
        axes.plot([parked - start], [row + 0.35], ">", color=PARKED_COLOUR, markersize=6, zorder=3)
        axes.annotate(
            "parked", (parked - start, row + 0.35), xytext=(5, 2), textcoords="offset points", fontsize="x-small"
        )
    deliveries = [d.at - start for d in track.deliveries]
    last = max([*deliveries, *(e.stopped - start for e in track.executions if e.stopped is not None), 0.0])
    axes.text(last + 0.5, row + 0.05, track.final, va="center", fontsize="small", color=FINAL_COLOURS[track.final])


def _draw_deliveries(axes: Axes, row: int, marks: list[Mark]) -> None:
    for mark in marks:
        axes.scatter([mark.at], [row + 0.35], marker="v", c=DELIVERY_COLOURS[mark.kind], s=40, zorder=3)
        if mark.label:
            axes.annotate(
                mark.label,
                (mark.at, row + 0.35),
                xytext=(4, 2),
                textcoords="offset points",
                fontsize="x-small",
                color=DELIVERY_COLOURS[mark.kind],
            )


def _draw_faults(axes: Axes, faults_row: int, row_of: dict[str, int], marks: list[Mark]) -> None:
    for mark in marks:
        if mark.job is None:
            axes.plot(
                [mark.at],
                [faults_row],
                FAULT_MARKERS.get(mark.kind, "x"),
                color=FAULT_COLOURS.get(mark.kind, "tab:gray"),
                markersize=6,
            )
        elif mark.job in row_of:
            row = row_of[mark.job]
            axes.plot([mark.at], [row - 0.05], "*", color="black", markersize=9, zorder=4)
            axes.annotate(
                mark.label, (mark.at, row - 0.05), xytext=(5, -8), textcoords="offset points", fontsize="x-small"
            )
