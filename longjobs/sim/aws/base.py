"""What the simulated services share: the account, the region, and AWS-shaped errors."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

REGION = "us-east-1"
ACCOUNT = "123456789012"
SQS_MAX_VISIBILITY_S = 43_200


def client_error(operation: str, code: str, message: str = "", *, status: int = 400, **extra: Any) -> ClientError:
    response: dict[str, Any] = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    response.update(extra)
    return ClientError(response, operation)  # type: ignore[arg-type]
