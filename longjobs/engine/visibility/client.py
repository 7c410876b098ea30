"""Changing message visibility in bulk: `ChangeMessageVisibilityBatch`, 10 entries a call, calls in parallel.

A batch call answers per entry, so one call can hold successes, lost handles and capped messages at
once; each failed entry is classified on its own. When the whole call fails with an error that is not
transient, the entries are retried one by one so each gets its own verdict (an emulator can fail a
whole batch for one capped entry; real SQS reports it in `Failed`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from longjobs.engine.clock import Clock
from longjobs.engine.visibility.errors import FailureClass, classify, classify_exception, describe_exception

if TYPE_CHECKING:
    from concurrent.futures import Executor  # a type only: the receiver and watcher never make one

    from mypy_boto3_sqs import SQSClient

BATCH_LIMIT = 10


@dataclass(frozen=True)
class VisibilityChange:
    """One request: make `receipt_handle` visible again `visibility_timeout_s` from the call."""

    key: str  # the caller's name for it (a message id)
    queue_url: str
    receipt_handle: str
    visibility_timeout_s: int


@dataclass(frozen=True)
class ChangeOutcome:
    """What SQS said about one change; `sent_at` is taken just before the request left."""

    key: str
    sent_at: float
    failure: FailureClass | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


class VisibilityClient:
    """Visibility changes against SQS, each outcome classified (see `errors`)."""

    def __init__(self, sqs: SQSClient, *, clock: Clock, executor: Executor | None = None) -> None:
        self._sqs = sqs
        self._clock = clock
        self._executor = executor

    def change(self, change: VisibilityChange) -> ChangeOutcome:
        """One `ChangeMessageVisibility` call."""
        sent_at = self._clock.now()
        try:
            self._sqs.change_message_visibility(
                QueueUrl=change.queue_url,
                ReceiptHandle=change.receipt_handle,
                VisibilityTimeout=change.visibility_timeout_s,
            )
        except Exception as exc:  # classified, never swallowed silently: the outcome carries it
            return ChangeOutcome(change.key, sent_at, classify_exception(exc), describe_exception(exc))
        return ChangeOutcome(change.key, sent_at)

    def change_many(self, changes: Iterable[VisibilityChange]) -> list[ChangeOutcome]:
        """All changes, grouped by queue into batches of 10, batches sent in parallel."""
        by_queue: dict[str, list[VisibilityChange]] = defaultdict(list)
        for change in changes:
            by_queue[change.queue_url].append(change)
        chunks = [
            entries[i : i + BATCH_LIMIT] for entries in by_queue.values() for i in range(0, len(entries), BATCH_LIMIT)
        ]
        results: Iterable[list[ChangeOutcome]]
        if self._executor is None or len(chunks) <= 1:
            results = map(self._change_chunk, chunks)
        else:
            results = self._executor.map(self._change_chunk, chunks)
        return [outcome for chunk in results for outcome in chunk]

    def _change_chunk(self, chunk: Sequence[VisibilityChange]) -> list[ChangeOutcome]:
        sent_at = self._clock.now()
        try:
            response = self._sqs.change_message_visibility_batch(
                QueueUrl=chunk[0].queue_url,
                Entries=[
                    {
                        "Id": str(index),
                        "ReceiptHandle": change.receipt_handle,
                        "VisibilityTimeout": change.visibility_timeout_s,
                    }
                    for index, change in enumerate(chunk)
                ],
            )
        except Exception as exc:
            failure = classify_exception(exc)
            if failure is FailureClass.THROTTLED or len(chunk) == 1:
                error = describe_exception(exc)
                return [ChangeOutcome(change.key, sent_at, failure, error) for change in chunk]
            return [self.change(change) for change in chunk]
        return self._read_batch_response(chunk, response, sent_at)

    @staticmethod
    def _read_batch_response(chunk: Sequence[VisibilityChange], response: Any, sent_at: float) -> list[ChangeOutcome]:
        outcomes: dict[int, ChangeOutcome] = {}
        for entry in response.get("Successful", []):
            index = int(entry["Id"])
            outcomes[index] = ChangeOutcome(chunk[index].key, sent_at)
        for entry in response.get("Failed", []):
            index = int(entry["Id"])
            code, message = entry.get("Code"), entry.get("Message")
            outcomes[index] = ChangeOutcome(
                chunk[index].key, sent_at, classify(code, message), f"{code}: {message or ''}".strip()
            )
        for index, change in enumerate(chunk):
            if index not in outcomes:  # SQS answers every entry; if it ever does not, do not assume success
                outcomes[index] = ChangeOutcome(
                    change.key, sent_at, FailureClass.OTHER, "no result for this entry in the batch response"
                )
        return [outcomes[index] for index in range(len(chunk))]
