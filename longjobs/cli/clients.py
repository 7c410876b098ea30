"""The one factory of AWS clients for the command, for both worlds.

- Local service (`--endpoint-url`, or `AWS_ENDPOINT_URL` when neither it nor `--stack` is given): every
  client gets the endpoint; the region is us-east-1 unless
  `--region` says otherwise;
  when no credentials are configured, fake ones are used (moto accepts any). The instance-metadata and
  container providers are left out of the chain, so a laptop does not wait for an EC2 metadata timeout.
- Deployed stack (`--stack`): the AWS CLI's default chain of credentials and region, `--profile` and
  `--region` as the AWS CLI has them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.utils import is_valid_endpoint_url, is_valid_ipv6_endpoint_url

from longjobs.cli.errors import CliError

if TYPE_CHECKING:
    from mypy_boto3_cloudformation import CloudFormationClient
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

ENDPOINT_VARIABLE = "AWS_ENDPOINT_URL"
"""The AWS SDKs' and CLI's endpoint for every service: without --stack or --endpoint-url, the local service
is there. (botocore itself honours it and the per-service `AWS_ENDPOINT_URL_SQS` and the like.)"""
LOCAL_REGION = "us-east-1"
"""The local service's region (the offline runtime creates everything there)."""
FAKE_KEY_ID = FAKE_SECRET = "offline"
MAX_ATTEMPTS = 3
"""Attempts per call (botocore's standard retry mode: throttling, 5xx and connection errors)."""
_SLOW_PROVIDERS = ("iam-role", "container-role")
EXAMPLE_ENDPOINT = "http://localhost:4566"
"""An endpoint as the local service's is written, named where a malformed one is refused."""


def endpoint_problem(url: str) -> str | None:
    """Why botocore cannot use `url` as an endpoint, or None when it can.

    botocore wants a scheme and a host (`is_valid_endpoint_url`, checked as it checks them), and reads the
    port only when it signs the first request. Each fault is named here, before any client is made."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return "it has no http:// or https:// scheme"
    if not (is_valid_endpoint_url(url) or is_valid_ipv6_endpoint_url(url)):
        return "it has no valid host"
    try:
        parts.port  # noqa: B018  # the property parses the port, and raises on a bad one
    except ValueError:
        return "its port is not a whole number from 0 to 65535"
    return None


@dataclass(frozen=True)
class Connection:
    """Where the command talks to: a local endpoint, or AWS through the default chain."""

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None

    @property
    def local(self) -> bool:
        return self.endpoint_url is not None


def make_session(connection: Connection) -> boto3.session.Session:
    """A session for the connection. Raises `CliError` when AWS mode finds no region.

    The local service's resources are in us-east-1 whatever the user's default region is, so only
    `--region` changes it there."""
    if connection.local:
        region = connection.region or LOCAL_REGION
        session = boto3.session.Session(profile_name=connection.profile, region_name=region)
        resolver = session._session.get_component("credential_provider")
        for name in _SLOW_PROVIDERS:
            resolver.remove(name)
        if session.get_credentials() is None:
            return boto3.session.Session(
                aws_access_key_id=FAKE_KEY_ID, aws_secret_access_key=FAKE_SECRET, region_name=region
            )
        return session
    # The AWS CLI v2 reads AWS_REGION before AWS_DEFAULT_REGION and the profile; botocore reads only the latter two.
    aws_region = connection.region or os.environ.get("AWS_REGION") or None
    session = boto3.session.Session(profile_name=connection.profile, region_name=aws_region)
    if session.region_name is None:
        raise CliError("no AWS region: pass --region, or set AWS_REGION or a region in your AWS profile")
    return session


class Clients:
    """Clients made on first use, all on one session and connection."""

    def __init__(self, connection: Connection, session: boto3.session.Session | None = None) -> None:
        self.connection = connection
        self.session = session if session is not None else make_session(connection)

    @property
    def region(self) -> str:
        return str(self.session.region_name)

    def _client(self, service: str, max_attempts: int | None = None) -> Any:
        retries: Any = {"mode": "standard", "max_attempts": MAX_ATTEMPTS if max_attempts is None else max_attempts}
        config = Config(retries=retries, connect_timeout=5, read_timeout=30)
        return self.session.client(service, endpoint_url=self.connection.endpoint_url, config=config)  # type: ignore[call-overload]

    @cached_property
    def sqs(self) -> SQSClient:
        client: SQSClient = self._client("sqs")
        return client

    @cached_property
    def sqs_single_attempt(self) -> SQSClient:
        """For a call whose failure is an answer (an endpoint without the operation): no retries."""
        client: SQSClient = self._client("sqs", max_attempts=1)
        return client

    @cached_property
    def dynamodb(self) -> DynamoDBClient:
        client: DynamoDBClient = self._client("dynamodb")
        return client

    @cached_property
    def stepfunctions(self) -> SFNClient:
        client: SFNClient = self._client("stepfunctions")
        return client

    @cached_property
    def cloudformation(self) -> CloudFormationClient:
        client: CloudFormationClient = self._client("cloudformation")
        return client

    @cached_property
    def cloudwatch(self) -> CloudWatchClient:
        client: CloudWatchClient = self._client("cloudwatch")
        return client
