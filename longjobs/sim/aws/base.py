"""What the simulated services share: the account, the region, one clock and request counter, and
AWS-shaped errors."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any, Protocol

from botocore.exceptions import ClientError

from longjobs.engine.clock import Clock

REGION = "us-east-1"
ACCOUNT = "123456789012"
SQS_MAX_VISIBILITY_S = 43_200


class Account(Protocol):
    """The account the services answer for (`FakeAws`): its clock, its random draws, its request counter
    by service and operation, and how many messages SQS has handed out."""

    clock: Clock
    rng: random.Random
    calls: Counter[str]
    receives: int


def client_error(operation: str, code: str, message: str = "", *, status: int = 400, **extra: Any) -> ClientError:
    response: dict[str, Any] = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    response.update(extra)
    return ClientError(response, operation)  # type: ignore[arg-type]
