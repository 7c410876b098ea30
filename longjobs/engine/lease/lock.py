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
message id (SQS message ids are UUIDs). The same item shape, keyed otherwise, holds the per-type
admission slots (`slot#<type>#<i>`, `longjobs.engine.admission.slots`): a job lock is a type's one slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from longjobs.engine.lease.schema import META_PREFIX, PARTITION_KEY, TTL_ATTR, attribute_time
from longjobs.engine.lease.writes import conditional, is_conditional_failure

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from longjobs.engine.lease.types import Lease

JOB_LOCK_PREFIX = "job#"
SLOT_PREFIX = "slot#"
LOCK_STATE_ATTR = "lock_state"
HOLDER_ATTR = "holder"
LOCK_EXECUTION_ATTR = "execution_arn"
ACQUIRED_AT_ATTR = "acquired_at"
RELEASED_AT_ATTR = "released_at"  # epoch seconds (N) from the functions, ISO 8601 (S) from the workflow
LAST_DURATION_ATTR = "last_duration_s"  # how long the slot's previous holder held it (admission's estimate)
BATCH_GET_LIMIT = 100
BATCH_GET_ATTEMPTS = 8
HELD = "HELD"
FREE = "FREE"


def job_lock_key(job_id: str) -> str:
    return JOB_LOCK_PREFIX + job_id


def hold_keys(lease: Lease) -> tuple[str, ...]:
    """The keys of what a lease's attempt holds with its execution: its job id's lock and its slot."""
    return tuple(key for key in (job_lock_key(lease.job_id) if lease.job_id else None, lease.slot) if key)


def is_lock_key(key: str) -> bool:
    """Whether a table item's key is a lock's or a slot's (not a lease's)."""
    return key.startswith((JOB_LOCK_PREFIX, SLOT_PREFIX))


def is_lease_key(key: str) -> bool:
    """Whether a table item's key is a lease's: not a lock's, a slot's or the deployment's own (`META_PREFIX`)."""
    return not key.startswith((JOB_LOCK_PREFIX, SLOT_PREFIX, META_PREFIX))


@dataclass(frozen=True)
class Lock:
    key: str
    holder: str  # the message id of the attempt that took it
    execution_arn: str
    acquired_at: float
    held: bool
    released_at: float | None = None
    last_duration_s: float | None = None

    @property
    def held_for_s(self) -> float | None:
        """How long its last holder held it, once released."""
        if self.held or self.released_at is None:
            return None
        return max(0.0, self.released_at - self.acquired_at)


@dataclass(frozen=True)
class Hold:
    """A lock or slot an attempt takes with its lease (`LeaseStore.take_holds`): free, absent or already
    its execution's, or, with `over`, that very holding of an execution found not running (taken over),
    or, `fresh`, only absent or its execution's (a lock that exists is read first: its last run may go on)."""

    key: str
    over: Lock | None = None
    last_duration_s: float | None = None
    fresh: bool = False


def _num(seconds: float) -> dict[str, str]:
    return {"N": str(Decimal(f"{seconds:.3f}"))}


def lock_of(key: str, item: dict[str, Any]) -> Lock:
    return Lock(
        key=key,
        holder=item.get(HOLDER_ATTR, {}).get("S", ""),
        execution_arn=item.get(LOCK_EXECUTION_ATTR, {}).get("S", ""),
        acquired_at=float(item.get(ACQUIRED_AT_ATTR, {}).get("N", "0")),
        held=item.get(LOCK_STATE_ATTR, {}).get("S") == HELD,
        released_at=attribute_time(item.get(RELEASED_AT_ATTR)),
        last_duration_s=attribute_time(item.get(LAST_DURATION_ATTR)),
    )


def batch_get(client: DynamoDBClient, table: str, keys: list[str]) -> dict[str, dict[str, Any]]:
    """The items of `keys` (partition keys) that exist, read consistently: BatchGetItem, 100 keys a call,
    its unprocessed keys asked again."""
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(keys), BATCH_GET_LIMIT):
        request: dict[str, Any] = {
            table: {
                "Keys": [{PARTITION_KEY: {"S": key}} for key in keys[start : start + BATCH_GET_LIMIT]],
                "ConsistentRead": True,
            }
        }
        for _ in range(BATCH_GET_ATTEMPTS):
            response = client.batch_get_item(RequestItems=request)
            for item in response.get("Responses", {}).get(table, []):
                found[item[PARTITION_KEY]["S"]] = item
            request = dict(response.get("UnprocessedKeys") or {})
            if not request:
                break
        else:
            raise RuntimeError(f"could not read {len(keys)} items: DynamoDB kept keys unprocessed")
    return found


LEASE_KEY = "lease"
"""`HoldsTaken.lost`'s name for the lease's own condition."""


@dataclass(frozen=True)
class HoldsTaken:
    """What `take_holds` did: `written` (the lease and every hold), else the conditions that failed (a
    hold's key, or `LEASE_KEY`; none for a transaction cancelled by a conflict or a throttle)."""

    written: bool
    lost: frozenset[str] = frozenset()


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
        return lock_of(key, item)

    def get_many(self, keys: list[str]) -> dict[str, Lock]:
        """The locks of `keys` that exist, read consistently (BatchGetItem, 100 keys a call)."""
        return {key: lock_of(key, item) for key, item in batch_get(self._client, self._table, keys).items()}

    def take(
        self,
        key: str,
        *,
        holder: str,
        execution_arn: str,
        now: float,
        hold_until: float,
        over: Lock | None = None,
        last_duration_s: float | None = None,
    ) -> bool:
        """One conditional write naming `execution_arn` as the holder: of a free (or absent, or already
        its own) lock, or, with `over`, of that very holding (taken over). False when the condition failed."""
        request = self.take_request(
            key,
            holder=holder,
            execution_arn=execution_arn,
            now=now,
            hold_until=hold_until,
            over=over,
            last_duration_s=last_duration_s,
        )
        try:
            self._client.put_item(**request)
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            return False
        return True

    def take_request(
        self,
        key: str,
        *,
        holder: str,
        execution_arn: str,
        now: float,
        hold_until: float,
        over: Lock | None = None,
        last_duration_s: float | None = None,
        fresh: bool = False,
    ) -> dict[str, Any]:
        """The conditional `PutItem` of a take (`take`), as a request: alone, or one action of a
        transaction that takes a lease's holds together (`LeaseStore.take_holds`); `fresh`: only a lock
        that does not exist yet (or is its own)."""
        item = {
            PARTITION_KEY: {"S": key},
            LOCK_STATE_ATTR: {"S": HELD},
            HOLDER_ATTR: {"S": holder},
            LOCK_EXECUTION_ATTR: {"S": execution_arn},
            ACQUIRED_AT_ATTR: _num(now),
            TTL_ATTR: {"N": str(int(hold_until) + self._closed_ttl_s)},  # past the longest the holder may run
        }
        if last_duration_s is not None:
            item[LAST_DURATION_ATTR] = _num(last_duration_s)
        names = {"#pk": PARTITION_KEY, "#state": LOCK_STATE_ATTR, "#execution": LOCK_EXECUTION_ATTR}
        if fresh:
            condition = "attribute_not_exists(#pk) OR #execution = :mine"
            values: dict[str, Any] = {":mine": {"S": execution_arn}}
        elif over is None:
            condition = "attribute_not_exists(#pk) OR #state = :free OR #execution = :mine"
            values = {":free": {"S": FREE}, ":mine": {"S": execution_arn}}
        else:
            condition = "#execution = :theirs AND #acquired = :acquired"
            values = {":theirs": {"S": over.execution_arn}, ":acquired": _num(over.acquired_at)}
            names["#acquired"] = ACQUIRED_AT_ATTR
        return {
            "TableName": self._table,
            "Item": item,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {k: v for k, v in names.items() if k in condition},
            "ExpressionAttributeValues": values,
        }

    def take_with_lease(self, lease: Lease, action: dict[str, Any], holds: Sequence[Hold], *, now: float) -> HoldsTaken:
        """Write `lease` (`action`: the store's `create_request`, `admit_request` or `unchanged_request`) and take the
        holds of its execution (job lock, slot) in one transaction: all or nothing, so the loser of a race
        holds nothing and has nothing to release. Raises on any error but a cancelled transaction: a 5xx
        may come after it took effect (the caller reads the lease to know)."""
        if not holds:
            if "ConditionCheck" in action:
                return HoldsTaken(written=True)
            written = conditional(self._client.put_item, **action["Put"])
            return HoldsTaken(written=written, lost=frozenset() if written else frozenset({LEASE_KEY}))
        takes = [
            {
                "Put": self.take_request(
                    hold.key,
                    holder=lease.message_id,
                    execution_arn=lease.execution_arn or "",
                    now=now,
                    hold_until=lease.renew_until,
                    over=hold.over,
                    last_duration_s=hold.last_duration_s,
                    fresh=hold.fresh,
                )
            }
            for hold in holds
        ]
        try:
            self._client.transact_write_items(TransactItems=cast(Any, [action, *takes]))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                raise
            reasons = exc.response.get("CancellationReasons", [])
            names = [LEASE_KEY, *(hold.key for hold in holds)]
            lost = {
                name
                for name, reason in zip(names, reasons, strict=False)
                if reason.get("Code") == "ConditionalCheckFailed"
            }
            return HoldsTaken(written=False, lost=frozenset(lost))
        return HoldsTaken(written=True)

    def free(self, lock: Lock, *, now: float) -> bool:
        """Free a holding found stale (its execution is not running), if it is still that very holding."""
        try:
            self._client.update_item(
                TableName=self._table,
                Key={PARTITION_KEY: {"S": lock.key}},
                UpdateExpression="SET #state = :free, released_at = :now, #ttl = :ttl",
                ConditionExpression="#state = :held AND #execution = :arn AND #acquired = :acquired",
                ExpressionAttributeNames={
                    "#state": LOCK_STATE_ATTR,
                    "#execution": LOCK_EXECUTION_ATTR,
                    "#acquired": ACQUIRED_AT_ATTR,
                    "#ttl": TTL_ATTR,
                },
                ExpressionAttributeValues={
                    ":free": {"S": FREE},
                    ":held": {"S": HELD},
                    ":arn": {"S": lock.execution_arn},
                    ":acquired": _num(lock.acquired_at),
                    ":now": _num(now),
                    ":ttl": {"N": str(int(now) + self._closed_ttl_s)},
                },
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise
        return True

    def release(self, key: str, execution_arn: str, *, now: float) -> bool:
        """Free the lock if it still names `execution_arn`; False when it names another (or none)."""
        try:
            self._client.update_item(**self.release_request(key, execution_arn, now=now))
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise
        return True

    def release_request(self, key: str, execution_arn: str, *, now: float) -> dict[str, Any]:
        """The conditional update that frees the lock if it still names `execution_arn` (an `UpdateItem`
        request, or a transaction's `Update`)."""
        return {
            "TableName": self._table,
            "Key": {PARTITION_KEY: {"S": key}},
            "UpdateExpression": "SET #state = :free, released_at = :now, #ttl = :ttl",
            "ConditionExpression": "#state = :held AND #execution = :arn",
            "ExpressionAttributeNames": {
                "#state": LOCK_STATE_ATTR,
                "#execution": LOCK_EXECUTION_ATTR,
                "#ttl": TTL_ATTR,
            },
            "ExpressionAttributeValues": {
                ":free": {"S": FREE},
                ":held": {"S": HELD},
                ":arn": {"S": execution_arn},
                ":now": _num(now),
                ":ttl": {"N": str(int(now) + self._closed_ttl_s)},
            },
        }
