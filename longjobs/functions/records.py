"""A standard queue's batch handled with its records at once.

Each record's handling waits on AWS most of its time: a lease transaction, a visibility change, a
start, each tens of milliseconds, and a throttled start waits out botocore's backoff too. One after
another, a batch of ten takes ten times one record, and a throttled record holds up the records behind
it. At once, a batch takes about its slowest record.

Powertools' `BatchProcessor` handles records one after another; its `AsyncBatchProcessor` handles them
at once only for a coroutine record handler, and the receiver's calls are boto3's, which block. So this
processor is Powertools' own with `process` mapping the record handler on an executor: a thread pool in
Lambda, the simulation's scheduler (actors on virtual time) in the simulation. Everything else (the
partial batch response, the failures, the logging of a failed record) is Powertools'. FIFO queues keep
Powertools' FIFO processor: a group's records are handled in order there.

A worker thread gets the invocation's context variables (the logger's keys, OpenTelemetry's context)
and, through `carry`, the X-Ray SDK's current entity, which the SDK keeps per thread: its calls are
traced under the handler's subsegment, as on one thread.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable
from concurrent.futures import Executor
from contextlib import AbstractContextManager
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType

__all__ = ["ConcurrentBatchProcessor"]


class ConcurrentBatchProcessor(BatchProcessor):
    """Powertools' SQS batch processor, its records handled at once on `executor` (one after another
    without one). Records `lane` puts in one lane are handled one after another, in the batch's order;
    the lanes, and the records of no lane, go at once. Each lane runs in a copy of the caller's context,
    so the logger's invocation keys (context variables) reach its log lines on a worker thread too."""

    def __init__(
        self,
        executor: Executor | None,
        carry: Callable[[], Callable[[], AbstractContextManager[None]]] = lambda: contextlib.nullcontext,
    ) -> None:
        super().__init__(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        self.executor = executor
        self.carry = carry
        """Called in the invocation's thread for each batch: what each lane enters on its thread besides
        the context variables (`longjobs.engine.observability.trace_carrier`: the X-Ray SDK's entity)."""
        self.lane: Callable[[dict[str, Any]], str | None] = lambda record: None
        """A record's lane (None: its own); the receiver sets it for each batch."""

    def process(self) -> list[tuple[Any, ...]]:
        if self.executor is None or len(self.records) <= 1:
            return super().process()
        lanes: dict[str, list[dict[str, Any]]] = {}
        units: list[list[dict[str, Any]]] = []
        for record in self.records:
            key = self.lane(record)
            if key is None:
                units.append([record])
            elif key in lanes:
                lanes[key].append(record)
            else:
                units.append(lanes.setdefault(key, [record]))
        carried = self.carry()
        runs = [(contextvars.copy_context(), unit) for unit in units]
        done = self.executor.map(lambda run: run[0].run(self._process_unit, run[1], carried), runs)
        return [result for results in done for result in results]

    def _process_unit(
        self, records: list[dict[str, Any]], carried: Callable[[], AbstractContextManager[None]]
    ) -> list[tuple[Any, ...]]:
        with carried():
            return [self._process_record(record) for record in records]
