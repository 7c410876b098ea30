"""The one factory of AWS clients. Endpoints come from boto3's own configuration (`AWS_ENDPOINT_URL`),
so the same code reaches AWS in the cloud and the emulator offline."""

from __future__ import annotations

from typing import TYPE_CHECKING

import boto3
from botocore.config import Config

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

CLIENT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 3},
    connect_timeout=3,
    read_timeout=10,
    max_pool_connections=64,  # parallel batch calls and lease writes share one client
)


def sqs(session: boto3.session.Session | None = None) -> SQSClient:
    return (session or boto3.session.Session()).client("sqs", config=CLIENT_CONFIG)


def dynamodb(session: boto3.session.Session | None = None) -> DynamoDBClient:
    return (session or boto3.session.Session()).client("dynamodb", config=CLIENT_CONFIG)


def stepfunctions(session: boto3.session.Session | None = None) -> SFNClient:
    return (session or boto3.session.Session()).client("stepfunctions", config=CLIENT_CONFIG)
