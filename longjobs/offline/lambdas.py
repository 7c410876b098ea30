"""What the Lambda service gives a handler, made locally: its module loaded under its configuration,
a context object, and real-shaped SQS events."""

from __future__ import annotations

import base64
import importlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

HANDLER_CACHES = ("extender", "receiver", "watcher", "admitter", "clients", "catalog")
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
    """One record of the event an SQS event source mapping sends, from a `ReceiveMessage` message (binary
    attribute values in base64, as Lambda's event carries them)."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes", {})),
        "messageAttributes": {
            name: {
                "stringValue": value.get("StringValue"),
                "binaryValue": base64.b64encode(value["BinaryValue"]).decode() if "BinaryValue" in value else None,
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


def s3_notification(
    bucket: str,
    keys: Sequence[str],
    *,
    sequencers: Sequence[str] | None = None,
    region: str = "us-east-1",
    event_time: str = "2026-01-01T00:00:00.000Z",
) -> str:
    """The body S3 sends to a queue when objects are created at `keys` in `bucket`: one record a key, in
    the shape of https://docs.aws.amazon.com/AmazonS3/latest/userguide/notification-content-structure.html.
    Each record's sequencer is the one given for it, else one made from its position."""
    sequencers = list(sequencers) if sequencers is not None else [f"0A{index}" for index in range(len(keys))]

    def record(key: str, sequencer: str) -> dict[str, Any]:
        return {
            "eventVersion": "2.1",
            "eventSource": "aws:s3",
            "awsRegion": region,
            "eventTime": event_time,
            "eventName": "ObjectCreated:Put",
            "userIdentity": {"principalId": "AWS:EXAMPLE"},
            "requestParameters": {"sourceIPAddress": "127.0.0.1"},
            "responseElements": {"x-amz-request-id": "R", "x-amz-id-2": "I"},
            "s3": {
                "s3SchemaVersion": "1.0",
                "configurationId": "markers",
                "bucket": {
                    "name": bucket,
                    "ownerIdentity": {"principalId": "EXAMPLE"},
                    "arn": f"arn:aws:s3:::{bucket}",
                },
                "object": {"key": key, "size": 0, "eTag": "d41d8cd98f00b204e9800998ecf8427e", "sequencer": sequencer},
            },
        }

    return json.dumps({"Records": [record(k, s) for k, s in zip(keys, sequencers, strict=True)]}, sort_keys=True)
