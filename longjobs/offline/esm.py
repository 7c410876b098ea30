"""An SQS event source mapping with Lambda's semantics, polling the jobs queue for the receiver.

Like the real one: it receives up to the batch size (long polling), calls the handler with a
real-shaped event and a context, deletes the records the handler did not report in
`batchItemFailures`, and leaves the reported ones alone (their visibility untouched). A handler that
raises, dies (`InvocationCrashed`: a timeout or out-of-memory), runs past its timeout or answers with a
malformed response fails the whole batch.

`before_next_poll` runs an action on the mapping's own thread just before its next receive (the
`duplicate_delivery` fault makes a message visible there, so the receive that follows gets it).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from longjobs.offline.lambdas import InvocationCrashed, LambdaContext, sqs_event

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], LambdaContext], Any]
BatchListener = Callable[[Sequence[dict[str, Any]]], None]


@dataclass
class PollRequest:
    action: Callable[[], object]
    received: threading.Event = field(default_factory=threading.Event)
    """Set once the receive after the action returned and `on_batch` saw what it got."""


@dataclass(frozen=True)
class MappingConfig:
    queue_url: str
    queue_arn: str
    region: str
    batch_size: int = 10
    function_timeout_s: float = 30.0
    function_name: str = "receiver"


def failed_ids(response: Any, batch_ids: set[str]) -> set[str] | None:
    """The ids a partial batch response reports; None when the response is malformed (whole batch failed)."""
    if response is None:
        return set()
    if not isinstance(response, dict):
        return None
    items = response.get("batchItemFailures", [])
    if not isinstance(items, list):
        return None
    ids: set[str] = set()
    for item in items:
        identifier = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not isinstance(identifier, str) or identifier not in batch_ids:
            return None
        ids.add(identifier)
    return ids


class EventSourceMapping(threading.Thread):
    """Polls until stopped. `on_batch` sees every received batch before the handler does."""

    def __init__(
        self,
        sqs: SQSClient,
        config: MappingConfig,
        handler: Handler,
        *,
        on_batch: BatchListener | None = None,
    ) -> None:
        super().__init__(name="event-source-mapping", daemon=True)
        self.sqs = sqs
        self.config = config
        self.handler = handler
        self.on_batch = on_batch
        self.stopped = threading.Event()
        self.invocations = 0
        self.batch_failures = 0
        self.crashes = 0
        self._requests: queue.SimpleQueue[PollRequest] = queue.SimpleQueue()

    def stop(self) -> None:
        """Ask the thread to end; `join()` waits for it."""
        self.stopped.set()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                self.poll()
            except Exception:
                log.exception("event source mapping poll failed")
                self.stopped.wait(1)

    def before_next_poll(self, action: Callable[[], object]) -> threading.Event:
        """Run `action` on the mapping's thread right before its next receive; the event is set once
        that receive returned and `on_batch` saw its messages."""
        request = PollRequest(action)
        self._requests.put(request)
        return request.received

    def poll(self) -> None:
        """One receive and, when it got messages, one invocation."""
        requests: list[PollRequest] = []
        while not self._requests.empty():
            request = self._requests.get_nowait()
            requests.append(request)
            try:
                request.action()
            except Exception:
                log.exception("action before the poll failed")
        try:
            messages = self.sqs.receive_message(
                QueueUrl=self.config.queue_url,
                MaxNumberOfMessages=self.config.batch_size,
                WaitTimeSeconds=1,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
        except Exception:
            for request in requests:
                request.received.set()
            raise
        if messages:
            self.invoke(cast("list[dict[str, Any]]", messages), requests=requests)
        else:
            for request in requests:
                request.received.set()

    def invoke(self, messages: Sequence[dict[str, Any]], *, requests: Sequence[PollRequest] = ()) -> None:
        if self.on_batch is not None:
            self.on_batch(messages)
        for request in requests:
            request.received.set()
        self.invocations += 1
        event = sqs_event(messages, source_arn=self.config.queue_arn, region=self.config.region)
        started = time.time()
        context = LambdaContext(
            function_name=self.config.function_name,
            invoked_function_arn=self.config.queue_arn.replace(":sqs:", ":lambda:").rsplit(":", 1)[0]
            + f":function:{self.config.function_name}",
            aws_request_id=f"{self.config.function_name}-{self.invocations}",
            deadline=started + self.config.function_timeout_s,
        )
        batch_ids = {m["MessageId"] for m in messages}
        try:
            failed = failed_ids(self.handler(event, context), batch_ids)
        except InvocationCrashed as crash:
            log.error("invocation died (%s): the whole batch failed", crash)
            self.crashes += 1
            failed = None
        except Exception:
            log.exception("handler raised: the whole batch failed")
            failed = None
        if failed is not None and time.time() - started > self.config.function_timeout_s:
            log.error("handler ran past its timeout: the whole batch failed")
            failed = None
        if failed is None:
            self.batch_failures += 1
            return
        done = [m for m in messages if m["MessageId"] not in failed]
        if done:
            self.sqs.delete_message_batch(
                QueueUrl=self.config.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
            )
