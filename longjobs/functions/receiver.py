"""The receiver Lambda: the jobs queue's event source mapping calls it with batches of records, and it
answers with the records not done (a partial batch response)."""

from __future__ import annotations

import random
from concurrent.futures import Executor, ThreadPoolExecutor
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from longjobs.engine.clock import SystemClock
from longjobs.engine.delivery.types import Delivery, Outcome, Receiver
from longjobs.engine.factory import Clients, Factory, require
from longjobs.engine.observability import MetricName, SerializedSink, logger, metrics, trace_carrier, tracer
from longjobs.engine.policies import resolve_visibility_timeout
from longjobs.engine.receiver.batch import lane, receive_batch
from longjobs.engine.receiver.service import receive
from longjobs.engine.settings import MAX_BATCH_SIZE, Settings
from longjobs.functions.restore import on_restore

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch import BatchProcessor
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext  # the type only: its import costs ~25 ms

SETTINGS = Settings.from_env()  # a bad setting fails the cold start, naming the setting
REQUIRED = ("table_name", "queue_url", "dlq_url", "state_machine_arn")


def batch_processor(fifo: bool, executor: Executor | None = None) -> BatchProcessor:
    """Standard queues: every record on its own, the batch's records at once on `executor`
    (`longjobs.functions.records`). FIFO queues: Powertools' FIFO processor, per message
    group: once a record of a group is not done (its long job deferred, failed, or not started), every
    later record of that group in the batch is reported not done without being processed, so jobs of a
    group start in order; other groups go on. A batch of deferred long jobs is all "failures" by
    design, not an error of the batch. The stack's FIFO mapping sends one record a batch, but its batch
    size can be changed outside the stack (the console, the API): the FIFO processor keeps group order
    then too. Powertools' batch utility (a fifth of the import) loads here, with the first batch, as
    the clients do."""
    from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor

    if not fifo:
        from longjobs.functions.records import ConcurrentBatchProcessor

        return ConcurrentBatchProcessor(executor, carry=lambda: trace_carrier(tracer))
    fifo_processor = SqsFifoPartialProcessor(skip_group_on_error=True)
    fifo_processor.raise_on_entire_batch_failure = False  # its constructor does not take the option
    return fifo_processor


@cache
def processor() -> BatchProcessor:
    """This container's batch processor, made at its first batch, with a thread for each record of the
    largest batch the mapping sends."""
    return batch_processor(SETTINGS.fifo, ThreadPoolExecutor(max_workers=MAX_BATCH_SIZE, thread_name_prefix="record"))


OUTCOME_METRIC = {
    Outcome.STARTED: MetricName.JOBS_STARTED,
    Outcome.REJECTED: MetricName.JOBS_REJECTED,
    Outcome.INLINE_DONE: MetricName.JOBS_INLINE,
    Outcome.FANNED_OUT: MetricName.JOBS_FANNED_OUT,
    Outcome.IGNORED: MetricName.JOBS_IGNORED,
    Outcome.ALREADY_SUCCEEDED: MetricName.JOBS_ALREADY_SUCCEEDED,
    Outcome.CANCELLED: MetricName.JOBS_ALREADY_CANCELLED,
    Outcome.RUNNING: MetricName.REDELIVERED_WHILE_RUNNING,
    Outcome.SETTLED: MetricName.JOBS_SETTLED_ON_REDELIVERY,
    Outcome.NOT_STARTED: MetricName.JOBS_NOT_STARTED,
    Outcome.STALE: MetricName.RECORDS_STALE,
    Outcome.WAITING: MetricName.JOBS_WAITING,
    Outcome.WAITING_FOR_SLOT: MetricName.JOBS_WAITING_FOR_SLOT,
    Outcome.PARKED: MetricName.JOBS_PARKED,
    Outcome.DUPLICATE: MetricName.PARKED_DUPLICATES,
    Outcome.HELD: MetricName.JOBS_WAITING,
}


class Observer(Protocol):
    """Who watches each record's handling besides the metrics (the simulation's trace and coverage)."""

    def handled(self, delivery: Delivery, outcome: Outcome) -> None: ...

    def raised(self, delivery: Delivery, error: Exception) -> None: ...


class JobDeferred(Exception):
    """Reported in batchItemFailures so the mapping leaves the message to its lease (not an error)."""


@cache
def receiver() -> Receiver:
    """This container's receiver, built at its first record with its clients and job catalog."""
    from longjobs.engine.jobs import catalog_from_env

    require(SETTINGS, "receiver", REQUIRED)
    clients = Clients.from_sdk()
    settings = resolve_visibility_timeout(SETTINGS, clients.sqs)
    factory = Factory(settings, SystemClock(), catalog_from_env(), SerializedSink(metrics, logger.registered_handler))
    return factory.receiver(clients, random.Random())


on_restore(receiver, processor)  # SnapStart: a restored container builds its own


def _deliveries(event: dict[str, Any]) -> list[Delivery]:
    """The batch's records as deliveries, for the read ahead; a record that is not one is left to its
    own handling (which reports it)."""
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    deliveries = []
    for record in event.get("Records", []):
        try:
            deliveries.append(Delivery.from_record(SQSRecord(record)))
        except Exception:  # reported by the record's own handling
            continue
    return deliveries


def handle_record(
    receiver: Receiver, record: SQSRecord, observer: Observer | None = None, delivery: Delivery | None = None
) -> str:
    """One record received: its outcome counted in the receiver's metrics (and told to `observer`); a
    deferred long job, or an error, reported as the record's failure, so the mapping leaves it.
    `delivery`: the record's delivery as the batch's read-ahead made it, whose body is parsed already."""
    delivery = delivery or Delivery.from_record(record)
    sink = receiver.metrics
    try:
        outcome = receive(receiver, delivery)
    except Exception as exc:
        if observer is not None:
            observer.raised(delivery, exc)
        if sink is not None:
            sink.add_metric(name=MetricName.RECORDS_FAILED, unit="Count", value=1)
        logger.exception("record failed; SQS will redeliver it", extra={"message_id": record.message_id})
        raise
    if sink is not None:
        sink.add_metric(name=OUTCOME_METRIC[outcome], unit="Count", value=1)
    if observer is not None:
        observer.handled(delivery, outcome)
    if outcome.deferred:
        raise JobDeferred(f"{record.message_id}: {outcome}")
    return outcome.value


def receive_records(
    receiver: Receiver,
    event: dict[str, Any],
    processor: BatchProcessor,
    observer: Observer | None = None,
) -> PartialItemFailureResponse:
    """The receiver's Lambda-free core: a batch's records read ahead together, each handled on its own
    by Powertools' partial batch processing, and the response the mapping reads (the records not done,
    with those whose parked copy was not sent). Each record's delivery is made once, so its body is
    parsed and validated once, for the read-ahead and its handling alike."""
    from aws_lambda_powertools.utilities.batch import process_partial_response

    deliveries = _deliveries(event)
    made = {(delivery.message_id, delivery.receipt_handle): delivery for delivery in deliveries}
    if hasattr(processor, "lane"):  # a standard queue's records at once, those waiting for slots in one lane
        processor.lane = lambda record: lane(receiver, made.get((record["messageId"], record["receiptHandle"])))
    with receive_batch(receiver, deliveries) as unsent:
        response = process_partial_response(
            event=event,
            record_handler=lambda record: handle_record(
                receiver, record, observer, made.get((record.message_id, record.receipt_handle))
            ),
            processor=processor,
        )
    return with_unsent(receiver, response, unsent)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return receive_records(receiver(), event, processor())


def with_unsent(
    receiver: Receiver, response: PartialItemFailureResponse, unsent: set[str]
) -> PartialItemFailureResponse:
    """The batch's response with the records whose parked copy was not sent reported failed too (their
    redelivery sends it): the mapping deletes every record not listed."""
    listed = {failure["itemIdentifier"] for failure in response["batchItemFailures"]}
    for message_id in sorted(unsent - listed):
        if receiver.metrics is not None:
            receiver.metrics.add_metric(name=MetricName.RECORDS_FAILED, unit="Count", value=1)
        response["batchItemFailures"].append({"itemIdentifier": message_id})
    return response
