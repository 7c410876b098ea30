"""Locks held by executions, kept in the lease table: two messages of one job id never run at once.

A job lock is one item, `job#<job id>`, naming the execution that holds it. The receiver takes it
with a conditional write before it starts an attempt; it is released on every way an execution ends
(the workflow's success and failure paths, the watcher, reconciliation, a stop, a redelivery that
settles), always conditional on naming that execution, so a late release never frees a newer holder.

A lock can outlive its holder (a release lost to a crash, a workflow that ended before reaching its
release). It is then taken over, never trusted blindly: the taker asks Step Functions about the
holder's execution (`is_stale`), and takes the lock only if that execution is not running (and, if
it never started, only after the receiver's grace period, as reconciliation does for leases), with a
write conditional on the lock still naming it. A message that finds its job id held does not start.

Lock items carry no `shard`, so the extender's indexes never see them, and their keys cannot be a
message id (SQS message ids are UUIDs). The same item shape, keyed otherwise, can hold other
execution-owned slots (per-type admission).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from functions.lease.schema import PARTITION_KEY, TTL_ATTR

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

JOB_LOCK_PREFIX = "job#"
LOCK_STATE_ATTR = "lock_state"
HOLDER_ATTR = "holder"
LOCK_EXECUTION_ATTR = "execution_arn"
ACQUIRED_AT_ATTR = "acquired_at"
HELD = "HELD"
FREE = "FREE"
ATTEMPTS = 3


def job_lock_key(job_id: str) -> str:
    return JOB_LOCK_PREFIX + job_id


def is_lock_key(key: str) -> bool:
    """Whether a table item's key is a lock's (not a lease's)."""
    return key.startswith(JOB_LOCK_PREFIX)


@dataclass(frozen=True)
class Lock:
    key: str
    holder: str  # the message id of the attempt that took it
    execution_arn: str
    acquired_at: float
    held: bool


@dataclass(frozen=True)
class Acquired:
    """The lock now names the caller's execution."""


@dataclass(frozen=True)
class Held:
    """Another execution holds the lock, and may be running."""

    lock: Lock


def _is_conditional_failure(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


def _num(seconds: float) -> dict[str, str]:
    return {"N": str(Decimal(f"{seconds:.3f}"))}


class Locks:
    """Conditional reads and writes of lock items in the lease table."""

    def __init__(self, client: DynamoDBClient, table_name: str, *, closed_ttl_s: int) -> None:
        self._client = client
        self._table = table_name
        self._closed_ttl_s = closed_ttl_s

    def get(self, key: str) -> Lock | None:
        item = self._client.get_item(TableName=self._table, Key={PARTITION_KEY: {"S": key}}, ConsistentRead=True).get(
            "Item"
        )
        if not item:
            return None
        return Lock(
            key=key,
            holder=item.get(HOLDER_ATTR, {}).get("S", ""),
            execution_arn=item.get(LOCK_EXECUTION_ATTR, {}).get("S", ""),
            acquired_at=float(item.get(ACQUIRED_AT_ATTR, {}).get("N", "0")),
            held=item.get(LOCK_STATE_ATTR, {}).get("S") == HELD,
        )

    def acquire(
        self,
        key: str,
        *,
        holder: str,
        execution_arn: str,
        now: float,
        hold_until: float,
        is_stale: Callable[[Lock], bool],
    ) -> Acquired | Held:
        """Take the lock for `execution_arn` (again, if it holds it already). A lock held by another
        execution is taken over only when `is_stale(lock)`; else `Held` names the holder."""
        item = {
            PARTITION_KEY: {"S": key},
            LOCK_STATE_ATTR: {"S": HELD},
            HOLDER_ATTR: {"S": holder},
            LOCK_EXECUTION_ATTR: {"S": execution_arn},
            ACQUIRED_AT_ATTR: _num(now),
            TTL_ATTR: {"N": str(int(hold_until) + self._closed_ttl_s)},  # past the longest the holder may run
        }
        found: Lock | None = None
        for _ in range(ATTEMPTS):
            if found is None or not found.held or found.execution_arn == execution_arn:
                condition = "attribute_not_exists(#pk) OR #state = :free OR #execution = :mine"
                values: dict[str, Any] = {":free": {"S": FREE}, ":mine": {"S": execution_arn}}
            elif is_stale(found):
                condition = "#execution = :theirs AND #acquired = :acquired"
                values = {":theirs": {"S": found.execution_arn}, ":acquired": _num(found.acquired_at)}
            else:
                return Held(found)
            names = {"#pk": PARTITION_KEY, "#state": LOCK_STATE_ATTR, "#execution": LOCK_EXECUTION_ATTR}
            names["#acquired"] = ACQUIRED_AT_ATTR
            try:
                self._client.put_item(
                    TableName=self._table,
                    Item=item,
                    ConditionExpression=condition,
                    ExpressionAttributeNames={k: v for k, v in names.items() if k in condition},
                    ExpressionAttributeValues=values,
                )
            except ClientError as exc:
                if not _is_conditional_failure(exc):
                    raise
                found = self.get(key)  # held by someone else, or changed since it was read: look again
                continue
            return Acquired()
        assert found is not None
        return Held(found)  # others kept changing it: the caller waits and tries later

    def release(self, key: str, execution_arn: str, *, now: float) -> bool:
        """Free the lock if it still names `execution_arn`; False when it names another (or none)."""
        try:
            self._client.update_item(
                TableName=self._table,
                Key={PARTITION_KEY: {"S": key}},
                UpdateExpression="SET #state = :free, released_at = :now, #ttl = :ttl",
                ConditionExpression="#state = :held AND #execution = :arn",
                ExpressionAttributeNames={
                    "#state": LOCK_STATE_ATTR,
                    "#execution": LOCK_EXECUTION_ATTR,
                    "#ttl": TTL_ATTR,
                },
                ExpressionAttributeValues={
                    ":free": {"S": FREE},
                    ":held": {"S": HELD},
                    ":arn": {"S": execution_arn},
                    ":now": _num(now),
                    ":ttl": {"N": str(int(now) + self._closed_ttl_s)},
                },
            )
        except ClientError as exc:
            if _is_conditional_failure(exc):
                return False
            raise
        return True
