"""The watcher's span per job under tracing=opentelemetry (longjobs.engine.watcher.job_span), recorded on
the OpenTelemetry SDK's in-memory exporter: what the ADOT layer would export."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from longjobs.engine.observability import job_spans_enabled
from longjobs.engine.watcher.job_span import CAUSE_LIMIT, job_span, record_job_span
from longjobs.engine.watcher.models import ExecutionStatusChange

MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:long-jobs"
STARTED_MS = 1_780_000_000_000
STOPPED_MS = STARTED_MS + 3_600_000


def change(status: str = "SUCCEEDED", **fields: Any) -> ExecutionStatusChange:
    """A status event's detail, with the fields AWS's example carries
    (https://docs.aws.amazon.com/step-functions/latest/dg/cw-events.html)."""
    detail: dict[str, Any] = {
        "executionArn": f"{MACHINE.replace('stateMachine', 'execution')}:msg-1-2",
        "stateMachineArn": MACHINE,
        "name": "msg-1-2",
        "status": status,
        "startDate": STARTED_MS,
        "stopDate": STOPPED_MS,
        "input": json.dumps({"job": {"type": "backfill"}, "message_id": "msg-1"}),
    }
    return ExecutionStatusChange.model_validate(detail | fields)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def tracer_of(exporter: InMemorySpanExporter) -> Any:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test")


def test_job_span_covers_the_execution_from_start_to_stop(exporter: InMemorySpanExporter) -> None:
    assert record_job_span(change(), tracer_of(exporter))
    [span] = exporter.get_finished_spans()
    assert span.name == "longjobs.job backfill"
    assert (span.start_time, span.end_time) == (STARTED_MS * 1_000_000, STOPPED_MS * 1_000_000)
    assert dict(span.attributes or {}) == {
        "longjobs.message_id": "msg-1",
        "longjobs.attempt": 2,
        "longjobs.execution_arn": change().executionArn,
        "longjobs.status": "SUCCEEDED",
        "longjobs.job_type": "backfill",
    }
    assert span.status.status_code is StatusCode.UNSET


@pytest.mark.parametrize(
    ("status", "error", "cause", "expected"),
    [
        ("FAILED", "AnalysisException", "[PATH_NOT_FOUND] Path does not exist", "AnalysisException: [PATH_NOT_FOUND]"),
        ("TIMED_OUT", None, None, "TIMED_OUT"),
        ("ABORTED", None, None, "ABORTED"),
    ],
)
def test_job_span_of_an_unsuccessful_end_has_an_error_status(
    exporter: InMemorySpanExporter, status: str, error: str | None, cause: str | None, expected: str
) -> None:
    record_job_span(change(status, error=error, cause=cause), tracer_of(exporter))
    [span] = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert (span.status.description or "").startswith(expected)
    assert (span.attributes or {})["error.type"] == (error or status)


def test_job_span_cause_is_cut_to_its_limit() -> None:
    span = job_span(change("FAILED", error="Spark", cause="x" * 10_000))
    assert span is not None and span.error is not None and len(span.error) == CAUSE_LIMIT


@pytest.mark.parametrize(
    "fields",
    [
        {"status": "RUNNING", "stopDate": None},  # not an end
        {"name": "someone-elses-execution"},  # not a name this project gives
        {"startDate": None},  # no times to draw it with
    ],
)
def test_job_span_not_recorded_for_events_that_are_not_a_job_end(
    exporter: InMemorySpanExporter, fields: dict[str, Any]
) -> None:
    assert not record_job_span(change(**fields), tracer_of(exporter))
    assert exporter.get_finished_spans() == ()


def test_job_span_without_the_input_is_named_without_a_type() -> None:
    span = job_span(change(input=None))  # EventBridge leaves out an input too large for the event
    assert span is not None and span.name == "longjobs.job" and "longjobs.job_type" not in span.attributes


def test_job_span_failure_to_record_never_raises() -> None:
    class Broken:
        def start_span(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("exporter down")

    assert not record_job_span(change(), Broken())  # type: ignore[arg-type]


def test_job_spans_enabled_only_under_opentelemetry() -> None:
    assert job_spans_enabled({"TRACING": "opentelemetry"})
    assert not job_spans_enabled({"TRACING": "service"})
    assert not job_spans_enabled({})


def test_job_span_is_a_child_of_the_invocation_span(exporter: InMemorySpanExporter) -> None:
    tracer = tracer_of(exporter)
    with tracer.start_as_current_span("watcher invocation") as invocation:  # the ADOT wrapper's span
        record_job_span(change(), tracer)
    job, parent = exporter.get_finished_spans()
    assert parent is not None and job.parent is not None
    assert job.parent.span_id == invocation.get_span_context().span_id
    assert job.context is not None and job.context.trace_id == invocation.get_span_context().trace_id
