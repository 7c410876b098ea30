"""The one factory of AWS clients. Endpoints come from the SDK's own configuration (`AWS_ENDPOINT_URL`),
so the same code reaches AWS in the cloud and the emulator offline.

Clients are made by botocore directly: boto3 adds nothing the functions use (its resources and
transfer manager), and importing it (with s3transfer) costs a sixth of a handler's cold start. A
boto3 client is a botocore client, so the callers' types are the same. botocore's session and config
are imported with the first client, not with this module: they are about half of a handler's import,
and a handler makes its clients at its first event (`python -m benchmarks.cold_start` counts both).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from botocore.config import Config
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

RETRY_ATTEMPTS = 3
"""Attempts of one call, the first included (botocore's standard mode retries throttles, 5xx, timeouts)."""


@cache
def client_config() -> Config:
    """The configuration of every client: standard retries, short timeouts, a pool for parallel calls."""
    from botocore.config import Config

    return Config(
        retries={"mode": "standard", "max_attempts": RETRY_ATTEMPTS},
        connect_timeout=3,
        read_timeout=10,
        max_pool_connections=64,  # parallel batch calls and lease writes share one client
    )


def __getattr__(name: str) -> Any:
    """`CLIENT_CONFIG`, the same `client_config()`, made on first use (PEP 562) rather than at import."""
    if name == "CLIENT_CONFIG":
        return client_config()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _client(service: str, session: Any = None, config: Config | None = None) -> Any:
    """A client from `session` (a boto3 or botocore session), else from a new botocore session."""
    config = config or client_config()
    if session is not None and hasattr(session, "client"):  # a boto3 session
        return session.client(service, config=config)
    if session is None:
        import botocore.session

        session = botocore.session.get_session()
    return session.create_client(service, config=config)


def sqs(session: Any = None) -> SQSClient:
    return cast("SQSClient", _client("sqs", session))


def dynamodb(session: Any = None) -> DynamoDBClient:
    return cast("DynamoDBClient", _client("dynamodb", session))


def stepfunctions(session: Any = None) -> SFNClient:
    return cast("SFNClient", _client("stepfunctions", session))


def starts(session: Any = None) -> SFNClient:
    """A Step Functions client whose calls make one attempt: the receiver's starts, which it retries
    itself to tell a refused start from one that may have landed (`longjobs.engine.execution.start_or_refused`)."""
    from botocore.config import Config

    once = client_config().merge(Config(retries={"mode": "standard", "total_max_attempts": 1}))
    return cast("SFNClient", _client("stepfunctions", session, once))


def runner(service: str) -> Any:
    """A client of a job runner's service (`emr-serverless`, `glue`): made only for a deployment whose
    types run there, when the receiver first asks about a run (`longjobs.engine.runs`)."""
    return _client(service)
