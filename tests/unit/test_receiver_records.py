"""The receiver's batch processor: a standard queue's records handled at once, the partial batch response
Powertools' own."""

from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from aws_lambda_powertools.utilities.batch import process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from longjobs.engine.observability import trace_carrier
from longjobs.functions.receiver import batch_processor
from longjobs.sim.scheduler import Scheduler


def _event(count: int) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": f"m{index}",
                "receiptHandle": f"h{index}",
                "body": "{}",
                "attributes": {"ApproximateReceiveCount": "1"},
                "messageAttributes": {},
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:jobs",
                "awsRegion": "us-east-1",
            }
            for index in range(count)
        ]
    }


def test_receiver_batch_records_handled_at_once_on_virtual_time() -> None:
    """Ten records that each wait one (virtual) second take one second together, not ten; the failed
    ones are reported as Powertools reports them."""
    scheduler = Scheduler(0.0)
    ended: dict[str, float] = {}
    response: dict[str, Any] = {}

    def handle(record: SQSRecord) -> str:
        scheduler.sleep(1.0)
        ended[record.message_id] = scheduler.now()
        if record.message_id in ("m3", "m7"):
            raise ValueError("this record failed")
        return "done"

    def invocation() -> None:
        processor = batch_processor(False, cast(Any, scheduler))
        response.update(process_partial_response(event=_event(10), record_handler=handle, processor=processor))

    scheduler.spawn(invocation)
    scheduler.run(until=100.0)
    assert sorted(ended.values()) == [1.0] * 10
    assert sorted(failure["itemIdentifier"] for failure in response["batchItemFailures"]) == ["m3", "m7"]


def test_receiver_batch_records_one_after_another_on_fifo() -> None:
    """A FIFO queue's records keep their group's order: Powertools' FIFO processor, one after another."""
    scheduler = Scheduler(0.0)
    ended: list[tuple[str, float]] = []

    def handle(record: SQSRecord) -> None:
        scheduler.sleep(1.0)
        ended.append((record.message_id, scheduler.now()))

    def invocation() -> None:
        event = _event(3)
        for record in event["Records"]:
            record["attributes"]["MessageGroupId"] = "g"
        process_partial_response(event=event, record_handler=handle, processor=batch_processor(True))

    scheduler.spawn(invocation)
    scheduler.run(until=100.0)
    assert ended == [("m0", 1.0), ("m1", 2.0), ("m2", 3.0)]


def test_receiver_batch_records_on_threads_keep_the_invocation_context() -> None:
    """On a worker thread each record sees the context variables of the invocation (the logger's keys
    are such variables), as it would had it run on the handler's own thread."""
    request = contextvars.ContextVar[str]("request")
    request.set("invocation-1")
    seen: list[str] = []

    def handle(record: SQSRecord) -> None:
        seen.append(request.get("none"))

    with ThreadPoolExecutor(max_workers=4) as executor:
        process_partial_response(event=_event(4), record_handler=handle, processor=batch_processor(False, executor))
    assert seen == ["invocation-1"] * 4


def test_receiver_batch_records_of_one_lane_one_after_another() -> None:
    """Records the receiver puts in one lane (those waiting for a limited type's slots) are handled in the
    batch's order, each after the one before; the other records go at once beside them."""
    scheduler = Scheduler(0.0)
    ended: dict[str, float] = {}

    def handle(record: SQSRecord) -> None:
        scheduler.sleep(1.0)
        ended[record.message_id] = scheduler.now()

    def invocation() -> None:
        processor = batch_processor(False, cast(Any, scheduler))
        processor.lane = lambda record: "admission" if record["messageId"] in ("m1", "m2", "m4") else None  # type: ignore[attr-defined]
        process_partial_response(event=_event(5), record_handler=handle, processor=processor)

    scheduler.spawn(invocation)
    scheduler.run(until=100.0)
    assert ended == {"m0": 1.0, "m1": 1.0, "m2": 2.0, "m3": 1.0, "m4": 3.0}


def test_receiver_metrics_added_under_the_log_handlers_lock() -> None:
    """A typed metric is printed at once, in two writes: the sink adds it holding the logger's handler's
    lock, so a log line of another record's thread cannot land between the record and its newline."""
    import logging

    from longjobs.engine.observability import SerializedSink

    handler = logging.StreamHandler()
    held: list[tuple[str, bool]] = []

    class Recorder:
        def add_metric(self, name: str, unit: str, value: float) -> None:
            held.append((name, handler.lock._is_owned()))  # type: ignore[union-attr]

        def add_type_metric(self, name: str, unit: str, value: float, job_type: str) -> None:
            held.append((f"{name}:{job_type}", handler.lock._is_owned()))  # type: ignore[union-attr]

    sink = SerializedSink(Recorder(), handler)
    sink.add_metric(name="JobsStarted", unit="Count", value=1)
    sink.add_type_metric(name="AdmissionDelay", unit="Seconds", value=3, job_type="etl")
    assert held == [("JobsStarted", True), ("AdmissionDelay:etl", True)]
    assert not handler.lock._is_owned()  # type: ignore[union-attr]


class _Tracer:
    """Powertools' `Tracer` as `trace_carrier` sees it: its X-Ray recorder is its `provider`."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider


def _traced_batch(tracer: Any, recorder: Any) -> dict[str, Any]:
    """Three records handled at once on a pool, inside the handler's subsegment; each makes one traced call
    (a subsegment, as the SDK's botocore patch opens). What each call hangs from, and what the pool's
    threads keep afterwards."""
    parents: dict[str, str | None] = {}

    def handle(record: SQSRecord) -> str:
        call = recorder.begin_subsegment("sqs")
        parents[record.message_id] = call.parent_id if call is not None else None
        if call is not None:
            recorder.end_subsegment()
        return "done"

    recorder.begin_segment("receiver")
    handler = recorder.begin_subsegment("## handler")
    with ThreadPoolExecutor(max_workers=3) as pool:
        processor = batch_processor(False, pool)
        processor.carry = lambda: trace_carrier(tracer)  # type: ignore[attr-defined]
        process_partial_response(event=_event(3), record_handler=handle, processor=processor)
        left = list(pool.map(lambda _: recorder.context.get_trace_entity(), range(6)))
    recorder.end_subsegment()
    recorder.end_segment()
    return {"handler": handler.id, "parents": parents, "left": left}


def test_receiver_batch_records_traced_under_the_handlers_subsegment() -> None:
    """With the X-Ray SDK (`tracing=xray-sdk`), each record's calls on a worker thread hang from the
    handler's subsegment, as on one thread, and the pool's threads keep no entity for the next invocation.
    The SDK keeps its entity in a `threading.local` and documents `get_trace_entity` in the parent thread,
    `set_trace_entity` in the child and `clear_trace_entities` after. Without the entity carried (a tracer
    with no X-Ray provider), the threads find none: their calls would begin segments of their own."""
    from aws_xray_sdk.core.context import Context
    from aws_xray_sdk.core.recorder import AWSXRayRecorder

    class Emitter:  # no daemon: the entities are kept in memory
        def send_entity(self, entity: Any) -> None: ...

        def set_daemon_address(self, address: Any) -> None: ...

    def recorder() -> Any:
        made = AWSXRayRecorder()
        made.configure(sampling=False, context=Context(context_missing="IGNORE_ERROR"), emitter=Emitter())
        return made

    xray = recorder()
    carried = _traced_batch(_Tracer(xray), xray)
    assert carried["parents"] == dict.fromkeys(["m0", "m1", "m2"], carried["handler"])
    assert carried["left"] == [None] * 6
    bare_recorder = recorder()
    bare = _traced_batch(object(), bare_recorder)
    assert bare["parents"] == dict.fromkeys(["m0", "m1", "m2"], None)
