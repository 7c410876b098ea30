"""The one factory of AWS clients. Endpoints come from the SDK's own configuration (`AWS_ENDPOINT_URL`),
so the same code reaches AWS in the cloud and the emulator offline.

Clients are made by botocore directly: boto3 adds nothing the functions use (its resources and
transfer manager), and importing it (with s3transfer) costs a sixth of a handler's cold start. A
boto3 client is a botocore client, so the callers' types are the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import botocore.session
from botocore.config import Config

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

RETRY_ATTEMPTS = 3
"""Attempts of one call, the first included (botocore's standard mode retries throttles, 5xx, timeouts)."""

CLIENT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": RETRY_ATTEMPTS},
    connect_timeout=3,
    read_timeout=10,
    max_pool_connections=64,  # parallel batch calls and lease writes share one client
)


def _client(service: str, session: Any = None) -> Any:
    """A client from `session` (a boto3 or botocore session), else from a new botocore session."""
    if session is not None and hasattr(session, "client"):  # a boto3 session
        return session.client(service, config=CLIENT_CONFIG)
    return (session or botocore.session.get_session()).create_client(service, config=CLIENT_CONFIG)


def sqs(session: Any = None) -> SQSClient:
    return cast("SQSClient", _client("sqs", session))


def dynamodb(session: Any = None) -> DynamoDBClient:
    return cast("DynamoDBClient", _client("dynamodb", session))


def stepfunctions(session: Any = None) -> SFNClient:
    return cast("SFNClient", _client("stepfunctions", session))
