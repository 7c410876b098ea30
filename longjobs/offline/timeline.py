"""The run as a picture: one row per message, time across.

Each row shows the message's deliveries (triangles), its executions (bars, coloured by how they
ended), each renewal (dots), how far ahead the lease believed the message hidden after each change
(thin bars from the change to its visible-until) and the final state. Drawn with matplotlib's Agg
backend: no display needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from longjobs.offline.runtime import RunResult
from longjobs.offline.scenario import Scenario

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from longjobs.offline.observe import Track

EXECUTION_COLOURS = {"SUCCEEDED": "tab:green", "FAILED": "tab:red", "ABORTED": "tab:orange", "TIMED_OUT": "tab:red"}
FINAL_COLOURS = {"deleted": "tab:green", "dlq": "tab:red", "queued": "tab:gray", "lost": "black"}


def draw_timeline(result: RunResult, scenario: Scenario, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    tracks = [result.tracks[job.id] for job in scenario.jobs]
    end = result.end - result.start
    figure, axes = plt.subplots(figsize=(12, 1.0 + 0.6 * len(tracks)))
    for row, track in enumerate(reversed(tracks)):
        _draw_row(axes, row, track, result.start, end)
    axes.set_yticks(range(len(tracks)), [f"{t.job_id} ({t.final})" for t in reversed(tracks)])
    axes.set_ylim(-0.6, len(tracks) - 0.3)
    axes.set_xlim(0, end + 2)
    axes.set_xlabel("seconds since the jobs were sent")
    axes.grid(axis="x", alpha=0.3)
    totals = result.report["totals"]
    axes.set_title(
        f"{totals['jobs']} jobs: {totals['deleted']} deleted, {totals['dlq']} in the DLQ, "
        f"{totals['renewals']} renewals, {totals['redelivered_while_running']} delivered while running; "
        f"ok={result.report['ok']}"
    )
    axes.legend(
        handles=[
            Line2D([], [], marker="v", linestyle="", color="tab:blue", label="delivery"),
            Patch(color="tab:green", label="execution succeeded"),
            Patch(color="tab:red", label="execution failed"),
            Patch(color="tab:orange", label="execution aborted"),
            Line2D([], [], marker="o", linestyle="", color="tab:purple", markersize=4, label="renewal"),
            Patch(color="tab:purple", alpha=0.25, label="hidden until (lease's visible-until)"),
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12 - 0.3 / max(1, len(tracks))),
        ncol=6,
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
    deliveries = [d.at - start for d in track.deliveries]
    colours = ["tab:red" if d.while_running else "tab:blue" for d in track.deliveries]
    axes.scatter(deliveries, [row + 0.35] * len(deliveries), marker="v", c=colours, s=40, zorder=3)
    last = max([*deliveries, *(e.stopped - start for e in track.executions if e.stopped is not None), 0.0])
    axes.text(last + 0.5, row + 0.05, track.final, va="center", fontsize="small", color=FINAL_COLOURS[track.final])
