"""The run's report (JSON), the invariant checks behind its `ok`, and the summary table.

    {"ok": true,
     "jobs": {"a": {"final": "deleted|dlq|queued", "deliveries": 1, "executions": 1, "renewals": 3,
                    "redelivered_while_running": 0, "released": 0, "dlq_error": null, "summary": {...}}},
     "totals": {"jobs": 4, "deleted": 2, "dlq": 2, "renewals": 9, "redelivered_while_running": 0},
     "api_calls": {"ChangeMessageVisibility": 3, ...},
     "wall_s": 31.2}

A message that is neither queued, in the DLQ, nor deleted after its job succeeded ends `lost`.
`ok` is false when any check of `violations` fails: DESIGN section 3's invariants, as far as they
can be seen from outside.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from functions.lease import LeaseStatus
from offline.faults import Faults
from offline.observe import Track
from offline.scenario import RawJob, Scenario


def job_entry(track: Track) -> dict[str, Any]:
    succeeded = track.lease is not None and track.lease.status is LeaseStatus.SUCCEEDED
    return {
        "final": track.final,
        "deliveries": len(track.deliveries),
        "executions": len(track.executions),
        "renewals": len(track.renewals),
        "redelivered_while_running": len(track.redelivered_while_running),
        "released": track.released,
        "dlq_error": track.dlq_error,
        "summary": track.lease.result if succeeded and track.lease is not None else None,
    }


def violations(scenario: Scenario, tracks: Mapping[str, Track], faults: Faults) -> list[str]:
    """Every broken expectation, one sentence each."""
    found: list[str] = []
    period = scenario.settings.extender_period_s
    for job in scenario.jobs:
        track = tracks[job.id]
        if track.final == "lost":
            found.append(f"{job.id}: message lost: not queued, not in the DLQ, and its job did not succeed")
        elif track.final != job.expected:
            found.append(f"{job.id}: ended {track.final}, expected {job.expected}")
        lapses = [at for at in track.redelivered_while_running if not faults.lapse_excused(at, period)]
        allowed = faults.duplicates_of(job.id)
        if len(lapses) > allowed:
            found.append(
                f"{job.id}: delivered {len(lapses)} time(s) while its job ran ({allowed} caused by a fault): "
                "a lapse (invariant 1)"
            )
        succeeded = track.lease is not None and track.lease.status is LeaseStatus.SUCCEEDED
        if track.final == "deleted" and not isinstance(job, RawJob) and not succeeded:
            found.append(f"{job.id}: deleted without a succeeded job (invariant 2)")
        if track.final in ("deleted", "dlq") and track.lease is not None and track.lease.active:
            found.append(f"{job.id}: lease still ACTIVE after its message was settled (invariant 3)")
        spans = [(e.started, e.stopped if e.stopped is not None else float("inf")) for e in track.executions]
        for (_, first_end), (second_start, _) in itertools.pairwise(spans):
            if second_start < first_end:
                found.append(f"{job.id}: a second execution started while one ran (invariant 4)")
        successes = sum(1 for e in track.executions if e.status == "SUCCEEDED")
        if successes > 1:
            found.append(f"{job.id}: the job succeeded {successes} times (invariant 5)")
    return found


def build_report(
    scenario: Scenario, tracks: Mapping[str, Track], api_calls: Mapping[str, int], wall_s: float
) -> dict[str, Any]:
    jobs = {job.id: job_entry(tracks[job.id]) for job in scenario.jobs}
    return {
        "ok": True,
        "jobs": jobs,
        "totals": {
            "jobs": len(jobs),
            "deleted": sum(1 for j in jobs.values() if j["final"] == "deleted"),
            "dlq": sum(1 for j in jobs.values() if j["final"] == "dlq"),
            "renewals": sum(j["renewals"] for j in jobs.values()),
            "redelivered_while_running": sum(j["redelivered_while_running"] for j in jobs.values()),
        },
        "api_calls": dict(api_calls),
        "wall_s": round(wall_s, 1),
    }


def summary_table(report: Mapping[str, Any], expected: Mapping[str, str]) -> str:
    """The report as a table for the terminal."""
    header = ("job", "final", "expected", "deliveries", "executions", "renewals", "lapses", "released", "note")
    rows = [header]
    for job_id, job in report["jobs"].items():
        summary = job["summary"] or {}
        note = job["dlq_error"] or (f"rows_read={summary['rows_read']}" if "rows_read" in summary else "")
        rows.append(
            (
                job_id,
                job["final"],
                expected[job_id],
                str(job["deliveries"]),
                str(job["executions"]),
                str(job["renewals"]),
                str(job["redelivered_while_running"]),
                str(job["released"]),
                note[:60],
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    totals = report["totals"]
    calls = report["api_calls"]
    lines.append("")
    lines.append(
        f"{totals['jobs']} jobs: {totals['deleted']} deleted, {totals['dlq']} in the DLQ; "
        f"{totals['renewals']} renewals, {totals['redelivered_while_running']} delivered while running; "
        f"{sum(calls.values())} API calls; {report['wall_s']} s"
    )
    return "\n".join(lines)
