"""The run's report (JSON), the invariant checks behind its `ok`, and the summary table.

    {"ok": true,
     "jobs": {"a": {"final": "deleted|dlq|queued", "deliveries": 1, "executions": 1, "renewals": 3,
                    "redelivered_while_running": 1, "redeliveries_excused": [{"at_s": 16.2,
                    "excuse": "extender paused for more than one period"}], "released": 0,
                    "dlq_error": null, "summary": {...},
                    "max_concurrent_executions": 1, "stopped": 0, "lapses": 0, "stuck_lease": false,
                    "group": null, "started_at": 0.4, "finished_at": 6.1, "parked": 0, "copies": []}},
     "totals": {"jobs": 4, "deleted": 2, "dlq": 2, "parked": 0, "renewals": 9, "redelivered_while_running": 1,
                "redeliveries_excused": 1, "double_runs": 0, "lapses": 0, "lost_messages": 0, "stuck_leases": 0,
                "max_concurrent_by_type": {"wait": 1},
                "faults_injected": {"throttled": 3, "crash_before": 1, ...}, "faults_missed": [...]},
     "api_calls": {"ChangeMessageVisibility": 3, ...},
     "wall_s": 31.2}

A message that is neither queued, in the DLQ, nor deleted after its job succeeded ends `lost`.

- `max_concurrent_by_type`: the most jobs of a type running at one moment (for a limited type, from the
  executions' histories: entering `RunJob` to the state after it); more than the type's
  `max_concurrency` is a violation (admission).
- `max_concurrent_executions`: the most executions of the message RUNNING at one moment, swept over
  their start and stop times (one still RUNNING at the end counts to the end).
- `stopped`: executions of the message the processor stopped: a `StopExecution` through the functions'
  own clients that succeeded, on an execution that ended ABORTED (the `abort_execution` fault's stops go
  through the runtime's client and are not counted).
- `lapses`: deliveries while the job ran that no fault explains (`Faults.lapse_excuse`, less one per
  `duplicate_delivery` that took effect); `redelivered_while_running` counts them all, and
  `redeliveries_excused` lists those an injected fault explains, each with when and the excuse (see
  `redelivery_verdicts`): redelivered while running = excused + lapses.
- `stuck_lease`: the lease was left ACTIVE at the end while its execution was not running, longer than
  reconciliation needs to notice (`STUCK_AFTER_PERIODS` periods and the event delay, after the later of
  the reconcile grace and the execution's end).
- `group`: its message group (FIFO), else null. `started_at`, `finished_at`: when its last execution
  started and ended, in seconds since the jobs were sent (null when none ran, or it still ran).
- `parked`: how many times its message (or a copy of it) was parked, copied to its type's waiting queue;
  `copies`: the copies' message ids, attributed to the job (its `executions`, leases and `final` count
  them: an execution runs from the copy it was started for). `totals.parked`: the jobs parked at least once.
- `duplicate_of` (FIFO, only when it happened): SQS dropped the job's send as a duplicate of that job's
  message; the entry then reports that message.

`ok` is false when any check of `violations` fails: DESIGN section 3's invariants, as far as they can
be seen from outside.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from longjobs.engine.lease import LeaseStatus
from longjobs.offline.faults import EVENT_DELAY_S, Faults
from longjobs.offline.observe import Execution, Track
from longjobs.offline.scenario import RawJob, Scenario

STUCK_AFTER_PERIODS = 2


def max_concurrent(executions: Sequence[Execution]) -> int:
    """The most executions running at one moment; an execution that ends when another starts does not
    overlap it."""
    points = [(e.started, 1) for e in executions]
    points += [(e.stopped if e.stopped is not None else math.inf, -1) for e in executions]
    running = most = 0
    for _, step in sorted(points):  # at equal times the stop (-1) sorts first
        running += step
        most = max(most, running)
    return most


def max_concurrent_by_type(scenario: Scenario, tracks: Mapping[str, Track]) -> dict[str, int]:
    """The most jobs of each job type running at one moment (what admission bounds by the type's
    `max_concurrency`), over every message of that type: the executions' job spans where the observer
    read them (a limited type's: an execution returns its slot while it settles, before it ends), else
    the executions' own."""
    return {name: max_concurrent(executions) for name, executions in job_spans_by_type(scenario, tracks).items()}


def job_spans_by_type(scenario: Scenario, tracks: Mapping[str, Track]) -> dict[str, list[Execution]]:
    """Each job type's executions, their times the jobs' spans where known (see `max_concurrent_by_type`)."""
    by_type: dict[str, list[Execution]] = {}
    for job in scenario.jobs:
        job_type = getattr(job, "type", None)
        if isinstance(job_type, str):
            spans = [replace(e, started=e.job_span[0], stopped=e.job_span[1]) for e in tracks[job.id].executions]
            by_type.setdefault(job_type, []).extend(spans)
    return dict(sorted(by_type.items()))


def overlapping(executions: Sequence[Execution], most: int) -> list[str]:
    """The executions running at the first moment `most` of them ran at once, as `name [start, stop]`."""
    for execution in sorted(executions, key=lambda e: e.started):
        at = execution.started
        running = [e for e in executions if e.started <= at and (e.stopped is None or e.stopped > at)]
        if len(running) >= most:
            return [
                f"{e.name} [{e.started:.3f}, {e.stopped if e.stopped is None else round(e.stopped, 3)}]"
                for e in running
            ]
    return []


def processor_stopped(track: Track, faults: Faults | None) -> int:
    """Executions of this message the functions stopped (distinct, each ended ABORTED)."""
    if faults is None:
        return 0
    stopped = {arn.rpartition(":")[2] for arn in faults.processor_stops}
    return sum(1 for e in track.executions if e.name in stopped and e.status == "ABORTED")


DUPLICATE_DELIVERY_EXCUSE = "a duplicate_delivery fault made the message visible while its job ran"


@dataclass(frozen=True)
class Redelivery:
    """One delivery of a message while its job ran, and the injected fault that explains it (None: a lapse)."""

    at: float
    excuse: str | None


def redelivery_verdicts(track: Track, faults: Faults | None) -> list[Redelivery]:
    """Each delivery of the message while its job ran, in order, with its excuse: the fault that made it
    unavoidable (`Faults.lapse_excuse`), else, for as many as took effect on the job, a
    `duplicate_delivery` fault; the rest have none and are lapses. Without faults every one is a lapse.
    Evaluated on the faults recorded so far, so the live console and the final report say the same."""
    if faults is None:
        return [Redelivery(at, None) for at in track.redelivered_while_running]
    verdicts = [
        Redelivery(at, faults.lapse_excuse(at, message_id=track.message_id, renewals=track.renewals))
        for at in track.redelivered_while_running
    ]
    duplicates = faults.duplicates_of(track.job_id)
    for index, verdict in enumerate(verdicts):
        if duplicates and verdict.excuse is None:
            verdicts[index] = Redelivery(verdict.at, DUPLICATE_DELIVERY_EXCUSE)
            duplicates -= 1
    return verdicts


def unexcused_lapses(track: Track, faults: Faults) -> tuple[list[float], int]:
    """(deliveries while the job ran that no fault explains, `duplicate_delivery` faults that took effect)."""
    lapses = [
        at
        for at in track.redelivered_while_running
        if faults.lapse_excuse(at, message_id=track.message_id, renewals=track.renewals) is None
    ]
    return lapses, faults.duplicates_of(track.job_id)


def lapse_count(track: Track, faults: Faults | None) -> int:
    """Deliveries while the job ran that no injected fault explains."""
    return sum(1 for verdict in redelivery_verdicts(track, faults) if verdict.excuse is None)


def stuck_execution(track: Track, scenario: Scenario, end: float | None) -> str | None:
    """The name of the execution of a lease left ACTIVE at `end` while it was not running, or None."""
    lease = track.lease
    if end is None or lease is None or not lease.active:
        return None
    name = (lease.execution_arn or "").rpartition(":")[2]
    if name in track.running_at_end:
        return None
    settings = scenario.settings
    ended = next((e.stopped for e in track.executions if e.name == name and e.stopped is not None), None)
    noticed_by = max(lease.received_at + settings.reconcile_grace_s, ended or 0.0)
    allowance = STUCK_AFTER_PERIODS * settings.extender_period_s + EVENT_DELAY_S[1]
    if end - noticed_by <= allowance:
        return None
    return name or "(none)"


def sent_at(tracks: Mapping[str, Track]) -> float | None:
    """When the jobs were sent: the first send."""
    return min((track.sent_at for track in tracks.values()), default=None)


def job_entry(
    track: Track,
    scenario: Scenario | None = None,
    faults: Faults | None = None,
    end: float | None = None,
    *,
    origin: float | None = None,
) -> dict[str, Any]:
    """One job's entry; `origin`: when the jobs were sent (times are given from it)."""
    succeeded = track.lease is not None and track.lease.status is LeaseStatus.SUCCEEDED
    last = track.executions[-1] if track.executions else None

    def since(moment: float | None) -> float | None:
        return None if moment is None or origin is None else round(moment - origin, 2)

    entry = {
        "final": track.final,
        "deliveries": len(track.deliveries),
        "executions": len(track.executions),
        "renewals": len(track.renewals),
        "redelivered_while_running": len(track.redelivered_while_running),
        "redeliveries_excused": [
            {"at_s": since(verdict.at), "excuse": verdict.excuse}
            for verdict in redelivery_verdicts(track, faults)
            if verdict.excuse is not None
        ],
        "released": track.released,
        "dlq_error": track.dlq_error,
        "last_error": last_error(track),
        "attempts": len(track.executions),
        "summary": track.lease.result if succeeded and track.lease is not None else None,
        "max_concurrent_executions": max_concurrent(track.executions),
        "stopped": processor_stopped(track, faults),
        "lapses": lapse_count(track, faults),
        "stuck_lease": scenario is not None and stuck_execution(track, scenario, end) is not None,
        "group": track.group,
        "started_at": since(last.started if last else None),
        "finished_at": since(last.stopped if last else None),
        "parked": len(track.parked),
        "copies": list(track.copies),
    }
    if track.duplicate_of is not None:
        entry["duplicate_of"] = track.duplicate_of
    return entry


def last_error(track: Track) -> str | None:
    """The error of the job's last failed attempt, as its lease records it (`Type: message`)."""
    error = track.lease.last_error if track.lease is not None else None
    return str(error) if error else None


def failed_by_its_job(track: Track) -> bool:
    """The job's own code ended its last attempt: that execution FAILED and the lease names an error. An
    execution stopped, aborted or timed out (the processor, a fault, a limit) is not the job's failure."""
    return bool(track.executions) and track.executions[-1].status == "FAILED" and last_error(track) is not None


JOB_FAILED = "JOB FAILED"
"""How a violation begins when the job's own error explains it: the job's owner's to fix, not the processor's."""
TIMED_OUT = "TIMED OUT"
"""How a violation begins when the job's message was still queued at the run's `timeout_s`. A run ends early only
once every message is settled, so the timeout ended it: the job needed longer, or the processor kept its message
from settling. The violation says both, since only the job's owner knows how long it should take."""


def group_order_violations(scenario: Scenario, tracks: Mapping[str, Track]) -> list[str]:
    """FIFO: within a message group, jobs run one after the other in send order. Each execution's span runs
    from its start to the end of its job (the workflow's last steps after the delete may overlap the
    next job's start); a job's spans all come before the next job's."""
    found: list[str] = []
    for group, jobs in scenario.group_jobs().items():
        spans = [
            (execution.started, execution.job_end, index, job.id)
            for index, job in enumerate(jobs)
            if tracks[job.id].duplicate_of is None
            for execution in tracks[job.id].executions
        ]
        spans.sort()
        for index, (start, _, position, job_id) in enumerate(spans):
            for _, end, earlier_position, earlier_id in spans[:index]:
                if earlier_position > position:
                    problem = f"group {group}: {job_id} started after {earlier_id}, which was sent after it"
                elif earlier_position != position and start < end:
                    problem = f"group {group}: {job_id} started while {earlier_id} ran"
                else:
                    continue
                if problem not in found:
                    found.append(problem)
    return found


def duplicate_violations(scenario: Scenario, tracks: Mapping[str, Track]) -> list[str]:
    """FIFO: a send is dropped exactly when an earlier job of its group has its deduplication id."""
    found: list[str] = []
    for job in scenario.jobs:
        expected, dropped = scenario.duplicate_of(job), tracks[job.id].duplicate_of
        if expected != dropped:
            what = f"dropped as a duplicate of {dropped}" if dropped else "not dropped"
            found.append(
                f"{job.id}: {what}, expected {f'a duplicate of {expected}' if expected else 'its own message'}"
            )
    return found


def violations(
    scenario: Scenario, tracks: Mapping[str, Track], faults: Faults, *, end: float | None = None
) -> list[str]:
    """Every broken expectation, one sentence each."""
    found: list[str] = []
    if scenario.settings.fifo:
        found += duplicate_violations(scenario, tracks) + group_order_violations(scenario, tracks)
    for job in scenario.jobs:
        track = tracks[job.id]
        if track.duplicate_of is not None:
            continue  # one message with the job it duplicates: checked there
        if track.final == "lost":
            found.append(f"{job.id}: message lost: not queued, not in the DLQ, and its job did not succeed")
        elif track.final != job.expected and job.expected == "deleted" and failed_by_its_job(track):
            found.append(
                f"{JOB_FAILED}: {job.id}: {last_error(track)} ({len(track.executions)} attempt(s); "
                f"its message ended {track.final}, expected {job.expected})"
            )
        elif track.final == "queued" and job.expected != "queued":
            found.append(
                f"{TIMED_OUT}: {job.id}: its message was still queued when the run reached its timeout_s "
                f"({scenario.timeout_s:g} s), expected {job.expected}: a job that needs longer needs a longer "
                "timeout_s; one that should have ended by then is the processor's fault (its timeline shows why)"
            )
        elif track.final != job.expected:
            found.append(f"{job.id}: ended {track.final}, expected {job.expected}")
        lapses, allowed = unexcused_lapses(track, faults)
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
        concurrent = max_concurrent(track.executions)
        if concurrent > 1:
            found.append(f"{job.id}: {concurrent} executions of its message RUNNING at once (invariant 8)")
        stuck = stuck_execution(track, scenario, end)
        if stuck is not None:
            found.append(
                f"{job.id}: lease left ACTIVE at the end while its execution {stuck} was not running: a stuck lease"
            )
    catalog = scenario.job_catalog()
    for name, executions in job_spans_by_type(scenario, tracks).items():
        limit, most = catalog.limit(name), max_concurrent(executions)
        if limit is not None and most > limit:
            found.append(
                f"type {name}: {most} jobs running at once, its max_concurrency is {limit} (admission): "
                + ", ".join(overlapping(executions, most))
            )
    return found


def build_report(
    scenario: Scenario,
    tracks: Mapping[str, Track],
    api_calls: Mapping[str, int],
    wall_s: float,
    *,
    faults: Faults | None = None,
    end: float | None = None,
) -> dict[str, Any]:
    origin = sent_at(tracks)
    jobs = {job.id: job_entry(tracks[job.id], scenario, faults, end, origin=origin) for job in scenario.jobs}
    return {
        "ok": True,
        "jobs": jobs,
        "totals": {
            "jobs": len(jobs),
            "deleted": sum(1 for j in jobs.values() if j["final"] == "deleted"),
            "dlq": sum(1 for j in jobs.values() if j["final"] == "dlq"),
            "parked": sum(1 for j in jobs.values() if j.get("parked")),
            "renewals": sum(j["renewals"] for j in jobs.values()),
            "redelivered_while_running": sum(j["redelivered_while_running"] for j in jobs.values()),
            "redeliveries_excused": sum(len(j["redeliveries_excused"]) for j in jobs.values()),
            "double_runs": sum(1 for j in jobs.values() if j["max_concurrent_executions"] > 1),
            "lapses": sum(j["lapses"] for j in jobs.values()),
            "lost_messages": sum(1 for j in jobs.values() if j["final"] == "lost"),
            "stuck_leases": sum(1 for j in jobs.values() if j["stuck_lease"]),
            "max_concurrent_by_type": max_concurrent_by_type(scenario, tracks),
            "faults_injected": faults.injected_by_mode() if faults is not None else {},
            "faults_missed": faults.faults_missed() if faults is not None else [],
        },
        "api_calls": dict(api_calls),
        "wall_s": round(wall_s, 1),
    }


SUMMARY_LEGEND = (
    "redelivered: deliveries while its job still ran; excused: of those, explained by an injected fault "
    "(listed below); lapses: the rest, each a broken invariant"
)


def summary_table(report: Mapping[str, Any], expected: Mapping[str, str]) -> str:
    """The report as a table for the terminal: each column says what it counts (`SUMMARY_LEGEND`), and
    every redelivery an injected fault explains is listed with its excuse."""
    header = (
        "job",
        "final",
        "expected",
        "deliveries",
        "executions",
        "renewals",
        "redelivered",
        "excused",
        "lapses",
        "released",
        "max running",
        "note",
    )
    rows = [header]
    for job_id, job in report["jobs"].items():
        summary = job["summary"] or {}
        note = (
            job["dlq_error"]
            or job.get("last_error")
            or (f"rows_read={summary['rows_read']}" if "rows_read" in summary else "")
        )
        rows.append(
            (
                job_id,
                job["final"],
                expected[job_id],
                str(job["deliveries"]),
                str(job["executions"]),
                str(job["renewals"]),
                str(job["redelivered_while_running"]),
                str(len(job.get("redeliveries_excused", []))),
                str(job["lapses"]),
                str(job["released"]),
                str(job.get("max_concurrent_executions", "")),
                note[:60],
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    lines.append(SUMMARY_LEGEND)
    totals = report["totals"]
    calls = report["api_calls"]
    lines.append("")
    lines.append(
        f"{totals['jobs']} jobs: {totals['deleted']} deleted, {totals['dlq']} in the DLQ; "
        f"{totals['renewals']} renewals; {redelivery_phrase(totals)}; "
        f"{sum(calls.values())} API calls; {report['wall_s']} s"
    )
    parked = {job_id: job for job_id, job in report["jobs"].items() if job.get("parked")}
    if parked:
        lines.append(
            f"parked: {len(parked)} job(s), each run from its copy: "
            + ", ".join(
                f"{job_id} ({len(job['copies'])} cop{'y' if len(job['copies']) == 1 else 'ies'})"
                for job_id, job in parked.items()
            )
        )
    injected = totals.get("faults_injected") or {}
    if injected:
        lines.append("faults injected: " + ", ".join(f"{mode} {n}" for mode, n in injected.items()))
    for job_id, job in report["jobs"].items():
        for excused in job.get("redeliveries_excused", []):
            at = "" if excused["at_s"] is None else f" at {excused['at_s']:g} s"
            lines.append(f"excused: {job_id} delivered{at} while its job ran: {excused['excuse']}")
    for missed in totals.get("faults_missed") or []:
        lines.append(f"fault missed: {missed}")
    return "\n".join(lines)


def redelivery_phrase(totals: Mapping[str, Any]) -> str:
    """`N delivered while running (M excused by injected faults), L lapses`: the three counts together,
    so that no reader takes a redelivery a fault explains for a lapse."""
    redelivered = totals["redelivered_while_running"]
    excused = totals.get("redeliveries_excused", 0)
    return f"{redelivered} delivered while running ({excused} excused by injected faults), {totals['lapses']} lapses"


FIGURES_HEADER = ("job", "final", "deliveries", "executions", "released", "DLQ reason")


def figures_table(jobs: Mapping[str, Mapping[str, Any]]) -> str:
    """A run's figures that do not depend on timing, as the Markdown table README.md and docs/offline.md
    show for the demo: per job its final state, deliveries, executions, releases and the DLQ's reason.

    `jobs` is a report's `jobs` (executions a count) or the simulation's (executions a list of their
    ends): the test of the pages runs the demo's scenario on the simulation's virtual time and compares;
    `python -m offline demo` writes the same table from its real run (`figures.md`)."""
    rows = [FIGURES_HEADER, tuple("---" for _ in FIGURES_HEADER)]
    for job_id, job in jobs.items():
        executions = job["executions"]
        count = executions if isinstance(executions, int) else len(executions)
        reason = "`" + job["dlq_error"].replace("|", "\\|") + "`" if job["dlq_error"] else ""
        rows.append((f"`{job_id}`", job["final"], str(job["deliveries"]), str(count), str(job["released"]), reason))
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)
