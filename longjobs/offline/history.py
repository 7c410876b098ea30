"""An offline run's history in the simulation's trace format, and the independent checker's verdict on it.

The observer (`longjobs.offline.observe`) watches a run from outside the processor: the sends, each
delivery the event source mapping hands out, every execution's history, where each message ends. This
module writes what it saw as trace records (`longjobs.sim.trace`: `t` in seconds since the run's start,
an `actor`, an `event`), and `longjobs.history.checker` judges them as it judges a seed's trace. So one
checker, which imports nothing from the processor, judges the simulation and the real offline runtime.

The records, from the observer's tracks:

| record | from |
| --- | --- |
| `sent` | each job's message as the scenario sent it (a FIFO send SQS dropped as a duplicate is none) |
| `copied` | each parked copy the observer attributed to its job's message |
| `delivered` | each delivery of the message or a copy (`excused`: below) |
| `execution_started`, `execution_ended` | each execution of the message or a copy, with its status |
| `job_started`, `job_ended` | the execution's job step, from its history (`succeeded` when the step did) |
| `outcome` `inline_done` | a message deleted with no execution and no lease: a job the receiver ran inline |
| `dead_lettered` | the message's copy in the DLQ, with its attributes as the reason |
| `end` | the messages on the jobs or waiting queues at the last look, by job id; `stopped` (below) |

A delivery while the job ran is `excused` (the fault's description) when an injected fault explains
it, a `duplicate_delivery` among them, as the run's report judges
(`longjobs.offline.report.redelivery_verdicts`). None is marked `duplicate`: that opens the checker's
window for a duplicate's echo, which the report's own verdict on each delivery makes needless. A
service stopped by its user (`stopped`) leaves messages on the queues on purpose.

Times are the observer's: a delivery is noted as the mapping hands its batch to the receiver, an
execution's times are Step Functions'.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from longjobs.engine.delivery.dlq import ORIGINAL_MESSAGE_ID
from longjobs.engine.execution import parse_execution_name
from longjobs.engine.jobs import JobCatalog
from longjobs.history.checker import Finding, check
from longjobs.offline.faults import Faults
from longjobs.offline.observe import Execution, Track
from longjobs.offline.programs import as_typed
from longjobs.offline.report import redelivery_verdicts
from longjobs.offline.scenario import Scenario

__all__ = ["history", "judge", "scenario_types"]


def history(
    tracks: Mapping[str, Track],
    faults: Faults | None,
    *,
    start: float,
    types: Mapping[str, str] | None = None,
    stopped: bool = False,
) -> list[str]:
    """The run's records as trace lines, in time order (see the module). `types`: each job's type by its
    id, where known (a scenario's). `stopped`: the run was stopped, not settled (a local service), so the
    messages it left on the queues wait for the next one (the `end` record says so)."""
    records: list[dict[str, Any]] = []
    left: Counter[str] = Counter()
    for track in tracks.values():
        if track.duplicate_of is not None:
            continue  # SQS dropped the send: no message of its own
        job_type = (types or {}).get(track.job_id)
        records += _track_records(_Records(track.job_id, start), track, job_type, faults)
        left[track.job_id] += track.final == "queued" and track.on_queue
    end = max((record["t"] for record in records), default=0.0)
    left_on_queues = {job_id: count for job_id, count in left.items() if count}
    records.append({"t": end, "actor": "offline", "event": "end", "left": left_on_queues, "stopped": stopped})
    records.sort(key=lambda record: record["t"])  # stable: a track's records keep their order at one time
    return [json.dumps(record, sort_keys=True, separators=(",", ":")) for record in records]


@dataclass(frozen=True)
class _Records:
    """Makes one job's records: its id in each, times in seconds since the run's start."""

    job_id: str
    start: float

    def __call__(self, epoch: float, actor: str, event: str, **fields: Any) -> dict[str, Any]:
        return {"t": round(epoch - self.start, 6), "actor": actor, "event": event, "job_id": self.job_id, **fields}


def _track_records(record: _Records, track: Track, job_type: str | None, faults: Faults | None) -> list[dict[str, Any]]:
    sent = {"type": job_type} if job_type is not None else {}
    sent |= {"group": track.group} if track.group is not None else {}
    records = [record(track.sent_at, "producer", "sent", message_id=track.message_id, **sent)]
    records += [
        record(track.sent_at, "observer", "copied", message_id=copy, original=track.message_id) for copy in track.copies
    ]
    excuses = {verdict.at: verdict.excuse for verdict in redelivery_verdicts(track, faults)}
    for delivery in track.deliveries:
        excuse = excuses.get(delivery.at) if delivery.while_running else None
        records.append(
            record(
                delivery.at,
                "sqs",
                "delivered",
                message_id=delivery.message_id or track.message_id,
                receive_count=delivery.receive_count,
                duplicate=False,  # each excused delivery names its fault: no echo window is opened
                **({"excused": excuse} if excuse is not None else {}),
            )
        )
    for execution in track.executions:
        records += _execution_records(record, track, execution)
    if track.final == "deleted" and track.lease is None and not track.executions:
        at = track.deliveries[-1].at if track.deliveries else track.sent_at
        records.append(record(at, "receiver", "outcome", outcome="inline_done", message_id=track.message_id))
    if track.final == "dlq":
        last = max([track.sent_at, *(d.at for d in track.deliveries), *(e.stopped or 0.0 for e in track.executions)])
        dead = track.dlq_attributes.get(ORIGINAL_MESSAGE_ID, track.message_id)
        records.append(record(last, "sqs", "dead_lettered", message_id=dead, reason=dict(track.dlq_attributes)))
    return records


def _execution_records(record: _Records, track: Track, execution: Execution) -> list[dict[str, Any]]:
    parsed = parse_execution_name(execution.name)
    message_id = parsed[0] if parsed is not None else track.message_id
    name = execution.name
    records = [record(execution.started, "stepfunctions", "execution_started", execution=name)]
    if execution.job_entered is not None:
        records.append(record(execution.job_entered, "workflow", "job_started", execution=name, message_id=message_id))
        if execution.job_ended is not None:
            succeeded = execution.job_succeeded
            records.append(record(execution.job_ended, "workflow", "job_ended", execution=name, succeeded=succeeded))
    if execution.stopped is not None:
        status = execution.status
        records.append(record(execution.stopped, "stepfunctions", "execution_ended", execution=name, status=status))
    return records


def scenario_types(scenario: Scenario) -> dict[str, str]:
    """Each scenario job's type by its id (a raw body has none)."""
    types = {job.id: getattr(job, "type", None) for job in scenario.jobs}
    return {job_id: job_type for job_id, job_type in types.items() if isinstance(job_type, str)}


def judge(catalog: JobCatalog, lines: Iterable[str]) -> list[Finding]:
    """The independent checker's findings on an offline run's history, with the catalog's limits."""
    return check(lines, catalog.declared_limits())


def checker_command(catalog: JobCatalog, trace: object) -> str:
    """The command that judges a written history again, with the limits the run had: without them the
    checker leaves `type_concurrency` unchecked."""
    given = "".join(f" --limit {name}={limit}" for name, limit in sorted(catalog.declared_limits().items()))
    return f"{as_typed('python')} -m longjobs.history.checker{given} {trace}"
