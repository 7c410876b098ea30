"""The cost of each attempt, priced when its execution ends: the durable record, a metric per job type.

The watcher hears of every end (the stack's rule sends them all). For each execution this project named,
it prices the attempt from the event alone (`longjobs.engine.cost.attempt_usage`): its time is the
execution's start to its stop, and a success's output carries what the run reported. It publishes
`AttemptCost` (dollars) and `AttemptRunnerSeconds` with the `job_type` dimension, and logs the usage.
EventBridge delivers an event at least once, so a rare duplicate counts an attempt twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from longjobs.engine.cost import AttemptUsage, attempt_usage
from longjobs.engine.execution import parse_execution_name
from longjobs.engine.observability import MetricName, MetricsSink, logger, type_metric
from longjobs.engine.watcher.models import ENDED, ExecutionStatusChange

if TYPE_CHECKING:
    from longjobs.engine.jobs import JobCatalog


def attempt_cost(change: ExecutionStatusChange, catalog: JobCatalog) -> tuple[str, AttemptUsage] | None:
    """The ended attempt's job type and usage; None for an event that is not an end, an execution this
    project did not name, or one without its type or times."""
    job_type = change.job_type()
    if (
        change.status not in ENDED
        or parse_execution_name(change.name) is None
        or job_type is None
        or change.startDate is None
        or change.stopDate is None
    ):
        return None
    seconds = max(0, change.stopDate - change.startDate) / 1000
    outcome = change.run_outcome() if change.status == "SUCCEEDED" else None
    return job_type, attempt_usage(catalog.get(job_type), seconds, outcome)


def record_attempt_cost(change: ExecutionStatusChange, catalog: JobCatalog, sink: MetricsSink | None) -> None:
    """Publish and log the ended attempt's cost (see the module). Never raises: the lease is settled."""
    try:
        priced = attempt_cost(change, catalog)
    except Exception:  # a cost is not worth a retry of the invocation
        logger.exception("could not price the attempt", extra={"execution": change.executionArn})
        return
    if priced is None:
        return
    job_type, usage = priced
    type_metric(sink, MetricName.ATTEMPT_COST, "None", usage.total_usd, job_type)
    type_metric(sink, MetricName.ATTEMPT_RUNNER_SECONDS, "Seconds", usage.seconds, job_type)
    logger.info(
        "attempt priced",
        extra={"execution": change.executionArn, "job_type": job_type, "status": change.status, **usage.to_data()},
    )
