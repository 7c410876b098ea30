"""What the Lambda service gives a handler, made locally: its module loaded under its configuration,
a context object, and real-shaped SQS events."""

from __future__ import annotations

import importlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

HANDLER_CACHES = ("extender", "receiver", "watcher", "admitter")
"""The cached builders of the handler modules: one per container, cleared when a module is loaded afresh."""


class InvocationCrashed(BaseException):
    """The invocation died where this is raised, as a Lambda timeout or running out of memory ends it.

    A `BaseException`, so no `except Exception` in the functions can catch it: nothing more of the
    invocation runs. Whoever invoked the function (the event source mapping, the schedule, the event
    delivery) sees a failed invocation."""


def load_function(module: str) -> ModuleType:
    """Import a handler module afresh, as a new container would: it reads its settings from the
    environment at import, and its cached clients and services are built again on first use."""
    handler = importlib.reload(importlib.import_module(module))
    for cached in HANDLER_CACHES:
        if hasattr(handler, cached):
            getattr(handler, cached).cache_clear()
    return handler


@dataclass
class LambdaContext:
    """The attributes of Lambda's context object the handlers and Powertools read."""

    function_name: str = "function"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:function"
    aws_request_id: str = "req-1"
    deadline: float = field(default_factory=lambda: time.time() + 60)
    """Epoch seconds when the invocation times out."""

    def get_remaining_time_in_millis(self) -> int:
        return int((self.deadline - time.time()) * 1000)


def sqs_record(message: dict[str, Any], *, source_arn: str, region: str) -> dict[str, Any]:
    """One record of the event an SQS event source mapping sends, from a `ReceiveMessage` message."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes", {})),
        "messageAttributes": {
            name: {
                "stringValue": value.get("StringValue"),
                "binaryValue": value.get("BinaryValue"),
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": value["DataType"],
            }
            for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": source_arn,
        "awsRegion": region,
    }


def sqs_event(messages: Sequence[dict[str, Any]], *, source_arn: str, region: str) -> dict[str, Any]:
    """The event of one batch."""
    return {"Records": [sqs_record(m, source_arn=source_arn, region=region) for m in messages]}
