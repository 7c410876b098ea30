"""One OpenTelemetry span per job, under `tracing=opentelemetry`.

The ADOT layer traces each invocation and every boto3 call, but a job runs in Glue (or a nested state
machine), where no code of this project runs while it works. So the watcher, which hears of every
execution's end, records the job afterwards: a span from the execution's start to its stop (both in
the status event: https://docs.aws.amazon.com/step-functions/latest/dg/cw-events.html), named by the
job type, with the message, attempt, execution and outcome as attributes, and an error status with
the execution's error for an end that is not a success. It is a child of the watcher invocation's span
(the ADOT wrapper's), so it is exported with that trace.

Only `opentelemetry-api` is used, which the ADOT layer provides: nothing is imported unless the span is
recorded, so the default settings' cold start is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from longjobs.engine.execution import parse_execution_name
from longjobs.engine.observability import SERVICE, logger
from longjobs.engine.watcher.models import ENDED, ExecutionStatusChange

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

SPAN_PREFIX = "longjobs.job"
CAUSE_LIMIT = 1024
"""The longest cause a span's status carries (a Spark failure's cause can be a whole stack trace)."""


@dataclass(frozen=True)
class JobSpan:
    """What a job's span says: its name, its times (ns since the epoch), attributes and error."""

    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, str | int] = field(default_factory=dict)
    error: str | None = None


def job_span(change: ExecutionStatusChange) -> JobSpan | None:
    """The span of the job whose execution ended in `change`; None for an event that is not an end, an
    execution this project did not name, or one without its start and stop times."""
    parsed = parse_execution_name(change.name)
    if change.status not in ENDED or parsed is None or change.startDate is None or change.stopDate is None:
        return None
    message_id, attempt = parsed
    job_type = change.job_type()
    attributes: dict[str, str | int] = {
        "longjobs.message_id": message_id,
        "longjobs.attempt": attempt,
        "longjobs.execution_arn": change.executionArn,
        "longjobs.status": change.status,
    }
    if job_type is not None:
        attributes["longjobs.job_type"] = job_type
    error = None
    if change.status != "SUCCEEDED":
        error_type = change.error or change.status
        attributes["error.type"] = error_type
        error = f"{error_type}: {change.cause}"[:CAUSE_LIMIT] if change.cause else error_type
    return JobSpan(
        name=f"{SPAN_PREFIX} {job_type}" if job_type else SPAN_PREFIX,
        start_ns=change.startDate * 1_000_000,
        end_ns=max(change.stopDate, change.startDate) * 1_000_000,
        attributes=attributes,
        error=error,
    )


def record_job_span(change: ExecutionStatusChange, tracer: Tracer | None = None) -> bool:
    """Record the span of the job `change` ended, on `tracer` (the global provider's by default, which
    the ADOT layer sets up). Never raises: a span is not worth a retry of the invocation, which has
    already settled the lease. Whether a span was recorded."""
    span = job_span(change)
    if span is None:
        return False
    try:
        from opentelemetry import trace

        tracer = tracer or trace.get_tracer(SERVICE)
        recorded = tracer.start_span(span.name, start_time=span.start_ns, attributes=span.attributes)
        if span.error is not None:
            recorded.set_status(trace.Status(trace.StatusCode.ERROR, span.error))
        recorded.end(end_time=span.end_ns)
    except Exception as exc:  # ImportError without the layer, or an SDK error
        logger.warning("could not record the job's span", extra={"execution": change.executionArn, "error": str(exc)})
        return False
    return True
