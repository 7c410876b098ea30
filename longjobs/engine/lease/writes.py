"""The lease table's conditional writes, shared by the lease store and the markers: one write that may lose
its race, a transaction of many, and the expressions' values and key conditions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from longjobs.engine.lease.codec import num, serialize

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = [
    "TRANSACT_ATTEMPTS",
    "TRANSACT_LIMIT",
    "conditional",
    "conditional_updates",
    "is_conditional_failure",
    "up_to",
    "values_of",
]

TRANSACT_LIMIT = 100
"""The items one `TransactWriteItems` may hold (DynamoDB's limit)."""
TRANSACT_ATTEMPTS = 3
"""Tries of a transaction cancelled for a reason other than its own items' conditions."""


def is_conditional_failure(exc: ClientError) -> bool:
    """Whether a write failed on its condition: another writer got there first."""
    return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


def conditional(write: Callable[..., object], **request: Any) -> bool:
    """Send one conditional write; False when its condition failed (another writer got there first, a
    normal event), any other error raised."""
    try:
        write(**request)
    except ClientError as exc:
        if is_conditional_failure(exc):
            return False
        raise
    return True


def up_to(
    partition: str, value: dict[str, str], sort: str, before: float | None
) -> tuple[str, dict[str, str], dict[str, Any]]:
    """An index query's key condition, names and values: the partition `value`, with the sort key at or
    before `before` (any for None)."""
    names = {"#part": partition}
    values: dict[str, Any] = {":part": value}
    condition = "#part = :part"
    if before is not None:
        names["#sort"] = sort
        values[":before"] = {"N": str(num(before))}
        condition += " AND #sort <= :before"
    return condition, names, values


def values_of(**values: Any) -> dict[str, Any]:
    return {f":{key}": serialize(value) for key, value in values.items()}


def conditional_updates(client: DynamoDBClient, updates: Sequence[Any], kind: str = "Update") -> list[bool | None]:
    """Send at most `TRANSACT_LIMIT` conditional updates (or puts, `kind`) in one `TransactWriteItems`:
    True for each that landed, False for each whose condition failed (another writer first). A
    transaction is all or nothing: when one loses its race it is cancelled and the others are sent
    again, up to `TRANSACT_ATTEMPTS` tries; None for those still not sent (the caller sends each on its
    own)."""
    outcome: dict[int, bool] = {}
    pending = list(range(len(updates)))
    for _ in range(TRANSACT_ATTEMPTS):
        if not pending:
            break
        try:
            client.transact_write_items(TransactItems=cast(Any, [{kind: updates[i]} for i in pending]))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                raise
            reasons = exc.response.get("CancellationReasons", [])
            retry = []
            for index, reason in zip(pending, reasons, strict=False):
                if reason.get("Code") == "ConditionalCheckFailed":
                    outcome[index] = False  # lost the race: another writer changed this item
                else:
                    retry.append(index)  # cancelled for another item, or a conflict/throttle: again
            pending = retry
            continue
        for index in pending:
            outcome[index] = True
        pending = []
    return [outcome.get(index) for index in range(len(updates))]
