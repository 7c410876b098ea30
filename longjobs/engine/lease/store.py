"""Lease persistence on DynamoDB: conditional writes fenced by receive count and version.

Every write that changes who owns a message is conditional: a newer receive (higher receive count)
can never be overwritten by an older one, and two writers of the same lease version cannot both win.
A conditional write that loses returns `None` rather than raising: losing the race is a normal event
(another extender run, or a redelivery, got there first) and the caller simply moves on.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from longjobs.engine.lease.attributes import deserialize, serialize
from longjobs.engine.lease.legacy import LegacyShards
from longjobs.engine.lease.lock import Hold, Lock, Locks, batch_get, hold_keys, lock_of
from longjobs.engine.lease.schema import (
    CHECKED_AT_ATTR,
    DUE_INDEX,
    ERROR_ATTR,
    HISTORY_ATTR,
    PARTITION_KEY,
    RECONCILE_INDEX,
    RENEW_AT_ATTR,
    RESULT_ATTR,
    SHARD_ATTR,
    TTL_ATTR,
    WAITING_INDEX,
    WAITING_ORDER_ATTR,
    WAITING_TYPE_ATTR,
    parked_line,
)
from longjobs.engine.lease.types import CLOSED_STATUSES, COPIED_STATUSES, Attempt, LastError, Lease, LeaseStatus
from longjobs.engine.observability import logger

if TYPE_CHECKING:
    from concurrent.futures import Executor  # a type only: the receiver and watcher never make one

    from mypy_boto3_dynamodb import DynamoDBClient


_FLOAT_FIELDS = (
    "received_at",
    "visible_until",
    "renew_until",
    "renew_at",
    "renewed_at",
    "closed_at",
    "checked_at",
    "waiting_since",
    "waiting_order",
    "claimed_at",
    "claim_kept_until",
)
_INT_FIELDS = ("receive_count", "version", "renewal_count", "release_delay_s", "attempt", "waits", "refused_starts")
_STR_FIELDS = (
    "queue_url",
    "receipt_handle",
    "execution_arn",
    "job_type",
    "job_id",
    "slot",
    "job",
    "copy_id",
    "claimed_by",
    "parked_message",
)


def _num(seconds: float) -> Decimal:
    return Decimal(f"{seconds:.3f}")


def _is_conditional_failure(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


def _conditional(write: Callable[..., object], **request: Any) -> bool:
    """Send one conditional write; False when its condition failed (another writer got there first, a
    normal event), any other error raised."""
    try:
        write(**request)
    except ClientError as exc:
        if _is_conditional_failure(exc):
            return False
        raise
    return True


def lease_to_item(lease: Lease, shard: int) -> dict[str, Any]:
    """The DynamoDB item (typed attribute values) of a lease."""
    plain: dict[str, Any] = {PARTITION_KEY: lease.message_id, "status": lease.status.value}
    for name in _FLOAT_FIELDS:
        value = getattr(lease, name)
        if value is not None:
            plain[name] = _num(value)
    for name in _INT_FIELDS:
        plain[name] = getattr(lease, name)
    for name in _STR_FIELDS:
        value = getattr(lease, name)
        if value is not None:
            plain[name] = value
    if lease.last_error is not None:
        plain[ERROR_ATTR] = lease.last_error.to_data()
    if lease.never_started:
        plain["never_started"] = True
    if lease.result is not None:
        plain[RESULT_ATTR] = json.dumps(lease.result, separators=(",", ":"))
    if lease.history:
        plain[HISTORY_ATTR] = json.dumps([a.to_data() for a in lease.history], separators=(",", ":"))
    if lease.waiting:
        if lease.job_type is None or lease.waiting_order is None:
            raise ValueError(f"WAITING lease {lease.message_id} needs its job type and waiting_order (the index)")
        plain[WAITING_TYPE_ATTR] = lease.job_type
    elif in_parked_line(lease):
        plain[WAITING_TYPE_ATTR] = parked_line(lease.job_type or "")
        plain[WAITING_ORDER_ATTR] = _num(lease.copy_sent_at or 0.0)
    if lease.checked_at is None:  # not reconciled since this receive: sorts by the receive in the index
        plain[CHECKED_AT_ATTR] = _num(lease.received_at)
    if lease.active:
        if lease.renew_at is None:
            raise ValueError(f"ACTIVE lease {lease.message_id} needs renew_at, or the extender never sees it")
        plain[SHARD_ATTR] = shard
    else:
        plain.pop(RENEW_AT_ATTR, None)
    return {key: serialize(value) for key, value in plain.items()}


def item_to_lease(item: dict[str, Any]) -> Lease:
    """The lease of a DynamoDB item (typed attribute values)."""
    plain = {key: deserialize(value) for key, value in item.items()}
    fields: dict[str, Any] = {"message_id": plain[PARTITION_KEY], "status": LeaseStatus(plain["status"])}
    for name in _FLOAT_FIELDS:
        if name in plain:
            fields[name] = float(plain[name])
    for name in _INT_FIELDS:
        if name in plain:
            fields[name] = int(plain[name])
    for name in _STR_FIELDS:
        if name in plain:
            fields[name] = plain[name]
    if ERROR_ATTR in plain:
        fields["last_error"] = LastError.from_data(plain[ERROR_ATTR])
    if plain.get("never_started"):
        fields["never_started"] = True
    if RESULT_ATTR in plain:
        fields["result"] = json.loads(plain[RESULT_ATTR])
    if HISTORY_ATTR in plain:
        fields["history"] = tuple(Attempt.from_data(a) for a in json.loads(plain[HISTORY_ATTR]))
    if fields["status"] is LeaseStatus.PARKED and "waiting_order" in fields:
        fields["copy_sent_at"] = fields.pop("waiting_order")  # a marker's key in its type's parked line
    if fields.get("checked_at") == fields.get("received_at"):
        fields["checked_at"] = None  # written at the receive, not by a reconciliation look
    return Lease(**fields)


def in_parked_line(lease: Lease) -> bool:
    """Whether a lease is a PARKED marker in its type's parked line (`parked_line`): with its message
    stored and the send time of the copy that may run it (its newest copy's while unclaimed, its
    claimant's once claimed), so admission sends a fresh copy, or parks the claimant again, before the
    waiting queue's retention runs out (`longjobs.engine.admission.parking.refresh_parked`)."""
    return (
        lease.status is LeaseStatus.PARKED
        and lease.parked_message is not None
        and lease.job_type is not None
        and lease.copy_sent_at is not None
    )


def _up_to(
    partition: str, value: dict[str, str], sort: str, before: float | None
) -> tuple[str, dict[str, str], dict[str, Any]]:
    """An index query's key condition, names and values: the partition `value`, with the sort key at or
    before `before` (any for None)."""
    names = {"#part": partition}
    values: dict[str, Any] = {":part": value}
    condition = "#part = :part"
    if before is not None:
        names["#sort"] = sort
        values[":before"] = {"N": str(_num(before))}
        condition += " AND #sort <= :before"
    return condition, names, values


def _values(**values: Any) -> dict[str, Any]:
    return {f":{key}": serialize(value) for key, value in values.items()}


TRANSACT_LIMIT = 100


@dataclass(frozen=True)
class CopyNote:
    """A copy sent of a PARKED or REQUEUED marker, to note on it (`LeaseStore.note_copy`)."""

    marker: Lease
    copy_id: str
    sent_at: float
    kept_until: float


WAITING_PAGE = 25
"""WAITING leases a page of the `waiting` index reads at least (some may be filtered out as shown again)."""
TRANSACT_ATTEMPTS = 3


LEASE_KEY = "lease"
"""`HoldsTaken.lost`'s name for the lease's own condition."""


@dataclass(frozen=True)
class HoldsTaken:
    """What `take_holds` did: `written` (the lease and every hold), else the conditions that failed (a
    hold's key, or `LEASE_KEY`; none for a transaction cancelled by a conflict or a throttle)."""

    written: bool
    lost: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Renewal:
    """A renewal SQS accepted, to be recorded on its lease."""

    lease: Lease
    sent_at: float
    visibility_timeout_s: int
    renew_at: float

    @property
    def visible_until(self) -> float:
        return self.sent_at + self.visibility_timeout_s

    def renewed(self) -> Lease:
        return replace(
            self.lease,
            visible_until=self.visible_until,
            renew_at=self.renew_at,
            renewed_at=self.sent_at,
            renewal_count=self.lease.renewal_count + 1,
            version=self.lease.version + 1,
        )


class LeaseStore:
    """Reads and conditional writes of leases in one table."""

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        *,
        shards: int,
        closed_ttl_s: int,
        executor: Executor | None = None,
        legacy: LegacyShards | None = None,
    ) -> None:
        self._client = client
        self._table = table_name
        self._shards = shards
        self._closed_ttl_s = closed_ttl_s
        self._executor = executor
        self._legacy = legacy

    @property
    def shards(self) -> int:
        return self._shards

    @property
    def legacy(self) -> LegacyShards | None:
        """The shards of a previous, larger shard count that the extender still watches (`LegacyShards`)."""
        return self._legacy

    @property
    def locks(self) -> Locks:
        """The execution-owned locks kept in the same table (job locks)."""
        return Locks(self._client, self._table, closed_ttl_s=self._closed_ttl_s)

    def shard_of(self, message_id: str) -> int:
        """Stable shard of a message id (crc32, not `hash`, which changes between processes)."""
        return zlib.crc32(message_id.encode()) % self._shards

    # -- reads ---------------------------------------------------------------------------------

    def get(self, message_id: str) -> Lease | None:
        response = self._client.get_item(
            TableName=self._table, Key={PARTITION_KEY: {"S": message_id}}, ConsistentRead=True
        )
        item = response.get("Item")
        return item_to_lease(item) if item else None

    def get_with_lock(self, message_id: str, lock_key: str) -> tuple[Lease | None, Lock | None]:
        """A message's lease and a lock item (its job lock), read consistently in one request
        (BatchGetItem): a receive reads both, and a request is what each AWS call costs."""
        return self.get_many_with_locks({message_id: lock_key})[message_id]

    def get_many_with_locks(self, locks: dict[str, str]) -> dict[str, tuple[Lease | None, Lock | None]]:
        """`get_with_lock` for many messages at once (message id -> its job lock's key), in as few
        BatchGetItem requests as their keys take (100 a request)."""
        items = batch_get(self._client, self._table, list(dict.fromkeys([*locks, *locks.values()])))
        return {
            message_id: (
                item_to_lease(items[message_id]) if message_id in items else None,
                lock_of(lock_key, items[lock_key]) if lock_key in items else None,
            )
            for message_id, lock_key in locks.items()
        }

    def get_many(self, message_ids: Sequence[str]) -> dict[str, Lease]:
        """The leases of `message_ids` that exist, read consistently (BatchGetItem)."""
        items = batch_get(self._client, self._table, list(dict.fromkeys(message_ids)))
        return {key: item_to_lease(item) for key, item in items.items()}

    def due(self, before: float | None = None, *, with_cancelled: bool = False) -> list[Lease]:
        """ACTIVE leases whose renew-at is at or before `before` (all of them for `None`), soonest first;
        `with_cancelled`: also the CANCELLED leases whose cancel is not finished yet, which stay in the index
        until it is (`mark_cancelled`), so the extender keeps their message hidden and finishes the cancel.

        Each shard of the sparse index is queried, in parallel when the store has an executor, and so are
        the legacy shards the store watches (`LegacyShards`: shards of a previous, larger count).
        The index is eventually consistent: a lease read here may be a version behind, which the
        version condition on every write makes harmless.
        """
        legacy = self._legacy.to_query() if self._legacy is not None else []
        held: dict[int, bool] = {}

        def query(shard: int) -> list[Lease]:
            if shard < self._shards:
                return list(self._query_shard(shard, before))
            found, held[shard] = self._query_legacy_shard(shard, before)
            return found

        chunks = list(self._each_shard(query, [*range(self._shards), *legacy]))
        if self._legacy is not None and legacy:
            self._legacy.found(held)
        leases = [
            lease
            for chunk in chunks
            for lease in chunk
            if lease.active or (with_cancelled and lease.status is LeaseStatus.CANCELLED)
        ]
        leases.sort(key=lambda lease: lease.renew_at or 0.0)
        return leases

    def reconcile_due(self, checked_before: float) -> list[Lease]:
        """Every ACTIVE lease reconciliation last looked at (DescribeExecution; checked-at, set at the receive
        and at each such look) at or before `checked_before`, least recently first: the whole `reconcile`
        index up to there, each shard read in pages (a page is one request, up to 1 MB of leases).

        A look moves a lease to the back, and a lease the list of running executions vouches for is not
        looked at (`longjobs.engine.extender.reconcile`), so every lease due is read at every sweep: a
        per-run cap on what is read would return the same healthy leases first every time.
        """

        def query(shard: int) -> list[Lease]:
            return list(self._index_up_to(RECONCILE_INDEX, shard, CHECKED_AT_ATTR, checked_before))

        leases = [lease for chunk in self._each_shard(query) for lease in chunk if lease.active]
        leases.sort(key=lambda lease: lease.checked_at or lease.received_at)
        return leases

    def waiting(self, job_type: str, limit: int, *, hidden_after: float) -> list[Lease]:
        """Up to `limit` WAITING leases of `job_type` still hidden after `hidden_after`, longest waiting
        first (the `waiting` index, which is eventually consistent: what is written on the strength of a
        lease read here is conditional on its version). One whose delay has run out is left out: its
        message shows again, to be received afresh."""
        if limit <= 0:
            return []
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": WAITING_INDEX,
            "KeyConditionExpression": "#type = :type",
            "FilterExpression": "#visible > :after",
            "ExpressionAttributeNames": {"#type": WAITING_TYPE_ATTR, "#visible": "visible_until"},
            "ExpressionAttributeValues": {":type": {"S": job_type}, ":after": {"N": str(_num(hidden_after))}},
            "Limit": max(limit, WAITING_PAGE),
        }
        found: list[Lease] = []
        while len(found) < limit:
            page = self._client.query(**kwargs)
            found += [lease for lease in map(item_to_lease, page.get("Items", [])) if lease.waiting]
            last = page.get("LastEvaluatedKey")
            if not last:
                break
            kwargs["ExclusiveStartKey"] = last
        return found[:limit]

    def count_waiting(self, job_type: str, *, now: float, ahead_of: tuple[float, str] | None = None) -> int:
        """How many messages of `job_type` wait in flight for a slot (ahead of a place in line, `ahead_of` =
        (waiting order, message id): the index's order): a COUNT query of the `waiting` index. A WAITING
        lease whose delay has run out is not counted: its message shows again, to be received afresh."""
        names = {"#type": WAITING_TYPE_ATTR, "#visible": "visible_until"}
        values: dict[str, Any] = {":type": {"S": job_type}, ":now": {"N": str(_num(now))}}
        condition = "#type = :type"
        kept = "#visible > :now"
        if ahead_of is not None:
            names["#since"] = WAITING_ORDER_ATTR
            names["#pk"] = PARTITION_KEY
            values[":since"] = {"N": str(_num(ahead_of[0]))}
            values[":pk"] = {"S": ahead_of[1]}
            condition += " AND #since <= :since"
            kept += " AND (#since < :since OR #pk < :pk)"
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": WAITING_INDEX,
            "KeyConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "FilterExpression": kept,
            "Select": "COUNT",
        }
        count = 0
        while True:
            page = self._client.query(**kwargs)
            count += int(page.get("Count", 0))
            last = page.get("LastEvaluatedKey")
            if not last:
                return count
            kwargs["ExclusiveStartKey"] = last

    def _each_shard(
        self, query: Callable[[int], list[Lease]], shards: Sequence[int] | None = None
    ) -> Iterable[list[Lease]]:
        """`query` on each of `shards`, in parallel when the store has an executor. By default the shards
        of the current count and the legacy shards the extender queries on every run (`LegacyShards.live`:
        the `reconcile` index holds the same leases as the `due` one, under the same shards)."""
        if shards is None:
            shards = [*range(self._shards), *(self._legacy.live if self._legacy is not None else [])]
        if self._executor is None or len(shards) <= 1:
            return map(query, shards)
        return self._executor.map(query, shards)

    def _query_legacy_shard(self, shard: int, before: float | None) -> tuple[list[Lease], bool]:
        """A legacy shard's due leases, and whether it holds any lease at all: its soonest lease first
        (`Limit=1`, no bound), then, only when that one is due, the shard's due query. So an empty shard,
        or one with nothing due, costs one query."""
        if before is None:
            found = list(self._query_shard(shard, None))
            return found, bool(found)
        page = self._client.query(
            TableName=self._table,
            IndexName=DUE_INDEX,
            KeyConditionExpression="#shard = :shard",
            ExpressionAttributeNames={"#shard": SHARD_ATTR},
            ExpressionAttributeValues={":shard": {"N": str(shard)}},
            Limit=1,
        )
        items = page.get("Items", [])
        if not items:
            return [], False
        soonest = item_to_lease(items[0])
        if soonest.renew_at is not None and soonest.renew_at > before:
            return [], True
        return list(self._query_shard(shard, before)), True

    def _query_shard(self, shard: int, before: float | None) -> Iterator[Lease]:
        return self._index_up_to(DUE_INDEX, shard, RENEW_AT_ATTR, before)

    def _index_up_to(self, index: str, shard: int, sort_attr: str, bound: float | None) -> Iterator[Lease]:
        """The leases of one shard of a sparse index whose sort key is at or below `bound`, page by page."""
        condition, names, values = _up_to(SHARD_ATTR, {"N": str(shard)}, sort_attr, bound)
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": index,
            "KeyConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        while True:
            page = self._client.query(**kwargs)
            for item in page.get("Items", []):
                yield item_to_lease(item)
            last = page.get("LastEvaluatedKey")
            if not last:
                return
            kwargs["ExclusiveStartKey"] = last

    # -- writes --------------------------------------------------------------------------------

    def create(self, lease: Lease, *, replacing: Lease | None = None) -> bool:
        """Store the lease of a new attempt. False if another writer got there first (the caller decides).

        Without `replacing` no lease may exist yet. With it, the lease of an earlier receive that has
        closed without success (released, capped, lost, rejected) is replaced, on condition that it is
        still that version: a newer receive, or the workflow, may have written it meanwhile. The new lease
        may name a new execution (a new attempt) or the closed one's, when that execution still runs (the
        newer receive adopts it: an execution runs only while its message is held).
        While ACTIVE the TTL stays past renew-until, so an abandoned lease still expires one day.
        """
        return _conditional(self._client.put_item, **self.create_request(lease, replacing=replacing)["Put"])

    def create_request(self, lease: Lease, *, replacing: Lease | None = None) -> dict[str, Any]:
        """`create`'s conditional write as a transaction action (`take_holds`)."""
        item = lease_to_item(lease, self.shard_of(lease.message_id))
        item[TTL_ATTR] = {"N": str(int(lease.renew_until) + self._closed_ttl_s)}
        put: dict[str, Any] = {"TableName": self._table, "Item": item}
        if replacing is None:
            put["ConditionExpression"] = "attribute_not_exists(#pk)"
            put["ExpressionAttributeNames"] = {"#pk": PARTITION_KEY}
        else:
            if replacing.status in (LeaseStatus.ACTIVE, LeaseStatus.SUCCEEDED):
                raise ValueError(f"lease {replacing.message_id} is {replacing.status}: it cannot be replaced")
            if lease.version <= replacing.version:
                # A writer holding a copy of an earlier lease of the message must never find its version
                # again on a later one (an ABA its version condition would let through).
                raise ValueError(
                    f"lease {lease.message_id} replaces version {replacing.version}: it must be written at a "
                    f"later version (successor_version), not {lease.version}"
                )
            put["ConditionExpression"] = "version = :version AND #status = :status AND receive_count < :rc"
            put["ExpressionAttributeNames"] = {"#status": "status"}
            put["ExpressionAttributeValues"] = _values(
                version=replacing.version, status=replacing.status.value, rc=lease.receive_count
            )
        return {"Put": put}

    def create_markers(self, markers: Sequence[Lease]) -> list[bool]:
        """Write new markers (`create` of each, none of which may exist yet): up to `TRANSACT_LIMIT` in one
        `TransactWriteItems`, one alone in a `PutItem`. Per marker, True when this writer wrote it, False
        when it existed already (a retry, or another writer first). Raises on any other error: a 5xx may
        come after the write landed (a retry then finds the markers)."""
        puts = [self.create_request(marker)["Put"] for marker in markers]
        if len(puts) == 1:
            return [_conditional(self._client.put_item, **puts[0])]
        created: list[bool] = []
        for start in range(0, len(puts), TRANSACT_LIMIT):
            chunk = puts[start : start + TRANSACT_LIMIT]
            written = self._conditional_updates(chunk, "Put")
            created += [
                landed if landed is not None else _conditional(self._client.put_item, **put)
                for put, landed in zip(chunk, written, strict=True)
            ]
        return created

    def park_in_place(self, marker: Lease, *, replacing: Lease | None) -> bool:
        """Write the PARKED marker of a message that admission parks without receiving it (a claimed
        parked copy near its retention), replacing its lease as read, whatever its receive count (no
        receive is made: the version condition alone fences it). False when the lease changed meanwhile
        (or, with `replacing` None, one was written)."""
        return self.replace_in_place(marker, replacing=replacing)

    def replace_in_place(self, record: Lease, *, replacing: Lease | None) -> bool:
        """Write `record` over a message's lease as read without a receive of it (its receive count may be
        the same): `park_in_place`, or a claimant sent to the DLQ from its marker. Fenced by the version
        and status read; False when the lease changed meanwhile."""
        put = self.create_request(record)["Put"]
        if replacing is not None:
            put["ConditionExpression"] = "version = :version AND #status = :status"
            put["ExpressionAttributeNames"] = {"#status": "status"}
            put["ExpressionAttributeValues"] = _values(version=replacing.version, status=replacing.status.value)
        return _conditional(self._client.put_item, **put)

    def admit(self, waiting: Lease, active: Lease) -> bool:
        """Turn a WAITING lease into the ACTIVE lease of an attempt, on the same receive (the message is
        still hidden under that receive's handle): conditional on the WAITING lease being unchanged."""
        return _conditional(self._client.put_item, **self.admit_request(waiting, active)["Put"])

    def admit_request(self, waiting: Lease, active: Lease) -> dict[str, Any]:
        """`admit`'s conditional write as a transaction action (`take_holds`)."""
        if not waiting.waiting or not active.active or active.receive_count != waiting.receive_count:
            raise ValueError(f"admit() needs a WAITING lease and an ACTIVE one of its receive ({waiting.message_id})")
        item = lease_to_item(active, self.shard_of(active.message_id))
        item[TTL_ATTR] = {"N": str(int(active.renew_until) + self._closed_ttl_s)}
        return {
            "Put": {
                "TableName": self._table,
                "Item": item,
                "ConditionExpression": "version = :version AND #status = :waiting AND receive_count = :rc",
                "ExpressionAttributeNames": {"#status": "status"},
                "ExpressionAttributeValues": _values(
                    version=waiting.version, waiting=LeaseStatus.WAITING.value, rc=waiting.receive_count
                ),
            }
        }

    def unchanged_request(self, lease: Lease) -> dict[str, Any]:
        """A transaction action that writes nothing: the ACTIVE lease is still this version (`take_holds`
        of an attempt that takes its holds again before it starts)."""
        return {
            "ConditionCheck": {
                "TableName": self._table,
                "Key": {PARTITION_KEY: {"S": lease.message_id}},
                "ConditionExpression": "version = :version AND #status = :active",
                "ExpressionAttributeNames": {"#status": "status"},
                "ExpressionAttributeValues": _values(version=lease.version, active=LeaseStatus.ACTIVE.value),
            }
        }

    def take_holds(self, lease: Lease, action: dict[str, Any], holds: Sequence[Hold], *, now: float) -> HoldsTaken:
        """Write `lease` (`action`: `create_request`, `admit_request` or `unchanged_request`) and take the
        holds of its execution (job lock, slot) in one transaction: all or nothing, so the loser of a race
        holds nothing and has nothing to release. Raises on any error but a cancelled transaction: a 5xx
        may come after it took effect (the caller reads the lease to know)."""
        if not holds:
            if "ConditionCheck" in action:
                return HoldsTaken(written=True)
            written = _conditional(self._client.put_item, **action["Put"])
            return HoldsTaken(written=written, lost=frozenset() if written else frozenset({LEASE_KEY}))
        takes = [
            {
                "Put": self.locks.take_request(
                    hold.key,
                    holder=lease.message_id,
                    execution_arn=lease.execution_arn or "",
                    now=now,
                    hold_until=lease.renew_until,
                    over=hold.over,
                    last_duration_s=hold.last_duration_s,
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

    def note_copy(self, marker: Lease, copy_id: str, *, sent_at: float, kept_until: float) -> bool:
        """Record on a PARKED or REQUEUED marker the copy that was sent: its id (a redelivery of the
        original is then acknowledged without sending another) and, for a PARKED one, when it was sent at
        the latest (`sent_at`: its place in its type's parked line, so it is sent again before its
        retention runs out); the marker is kept until `kept_until` (the copy's retention) and its TTL
        past that. False when the marker changed meanwhile (claimed by a copy, cancelled, or noted by
        another sender)."""
        return _conditional(
            self._client.update_item, **self._note_update(CopyNote(marker, copy_id, sent_at, kept_until))
        )

    def note_copies(self, notes: Sequence[CopyNote]) -> list[bool]:
        """`note_copy` for many markers (a batch's parked copies, sent together): up to `TRANSACT_LIMIT` in
        one `TransactWriteItems`, each conditional on its marker's version; one alone in an `UpdateItem`."""
        updates = [self._note_update(note) for note in notes]
        if len(updates) == 1:
            return [_conditional(self._client.update_item, **updates[0])]
        noted: list[bool] = []
        for start in range(0, len(updates), TRANSACT_LIMIT):
            chunk = updates[start : start + TRANSACT_LIMIT]
            written = self._conditional_updates(chunk)
            noted += [
                landed if landed is not None else _conditional(self._client.update_item, **update)
                for update, landed in zip(chunk, written, strict=True)
            ]
        return noted

    def _note_update(self, note: CopyNote) -> dict[str, Any]:
        marker = note.marker
        names = {"#status": "status", "#ttl": TTL_ATTR}
        update = "SET copy_id = :copy, renew_until = :until, #ttl = :ttl, version = version + :one"
        values: dict[str, Any] = {
            "copy": note.copy_id,
            "until": _num(note.kept_until),
            "ttl": int(note.kept_until) + self._closed_ttl_s,
            "one": 1,
            "version": marker.version,
            "marker": marker.status.value,
        }
        if marker.status is LeaseStatus.PARKED:
            update += ", #order = :sent"
            names["#order"] = WAITING_ORDER_ATTR
            values["sent"] = _num(note.sent_at)
        return {
            "TableName": self._table,
            "Key": {PARTITION_KEY: {"S": marker.message_id}},
            "UpdateExpression": update,
            "ConditionExpression": "version = :version AND #status = :marker",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": _values(**values),
        }

    def move_in_parked_line(self, marker: Lease, *, sent_at: float | None) -> bool:
        """Give a PARKED marker another place in its parked line (its claimant runs: look again later), or
        take it out of the line (`sent_at` None: its claimant is done, or parked in turn with a marker of
        its own). False when the marker changed meanwhile."""
        names = {"#status": "status"}
        values: dict[str, Any] = {"one": 1, "version": marker.version, "parked": LeaseStatus.PARKED.value}
        if sent_at is None:
            update = "SET version = version + :one REMOVE #line"
            names["#line"] = WAITING_TYPE_ATTR
        else:
            update = "SET #order = :sent, version = version + :one"
            names["#order"] = WAITING_ORDER_ATTR
            values["sent"] = _num(sent_at)
        return _conditional(
            self._client.update_item,
            TableName=self._table,
            Key={PARTITION_KEY: {"S": marker.message_id}},
            UpdateExpression=update,
            ConditionExpression="version = :version AND #status = :parked",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=_values(**values),
        )

    def parked_due(self, job_type: str, *, sent_before: float | None, limit: int) -> list[Lease]:
        """Up to `limit` PARKED markers of `job_type` in its parked line whose copy was sent at or before
        `sent_before` (all for None), oldest copy first (the `waiting` index, eventually consistent:
        read a marker again before acting on it)."""
        condition, names, values = _up_to(
            WAITING_TYPE_ATTR, {"S": parked_line(job_type)}, WAITING_ORDER_ATTR, sent_before
        )
        page = self._client.query(
            TableName=self._table,
            IndexName=WAITING_INDEX,
            KeyConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            Limit=limit,
        )
        return [lease for lease in map(item_to_lease, page.get("Items", [])) if lease.status is LeaseStatus.PARKED]

    def claim_parked(self, original_id: str, copy_id: str, *, sent_at: float, now: float) -> bool | None:
        """Claim the run of a parked message for one of its copies: True when this copy may run it (it
        claimed it now or before), False when another copy has, None when the original has no PARKED
        marker (parked before markers existed, or expired): the copy then runs as it is. A marker an
        operator cancelled (`longjobs cancel`: CANCELLED) refuses every copy, so none runs. The marker's
        place in its parked line becomes the claimant's send time (`sent_at`): the claimant may wait in
        its waiting queue in turn, and its retention runs from then."""
        return self._claim(original_id, copy_id, LeaseStatus.PARKED, now=now, order=sent_at)

    def claim_requeued(self, original_id: str, copy_id: str, *, now: float) -> bool | None:
        """Claim the run of a message sent back to wait for its job id for one of its copies, as
        `claim_parked` does for a parked one (a REQUEUED marker has no place in a line)."""
        return self._claim(original_id, copy_id, LeaseStatus.REQUEUED, now=now)

    def _claim(
        self, original_id: str, copy_id: str, status: LeaseStatus, *, now: float, order: float | None = None
    ) -> bool | None:
        if self._claim_write(original_id, copy_id, status, now=now, order=order):
            return True
        marker = self.get(original_id)
        if marker is not None and marker.status is LeaseStatus.CANCELLED:
            return False
        if marker is None or marker.status is not status:
            return None
        return marker.claimed_by == copy_id

    def take_over_claim(self, marker: Lease, copy_id: str, *, now: float, order: float | None = None) -> bool:
        """Give the run of a PARKED or REQUEUED marker to `copy_id`, away from a claimant that lost it
        (`longjobs.engine.delivery.requeue.claim_answer` judges that), or claim it again for its claimant
        (a fence before parking it in place), conditional on the marker as read: False when it changed
        meanwhile (its claimant came back, another copy took it over, a cancel)."""
        return self._claim_write(marker.message_id, copy_id, marker.status, now=now, order=order, over=marker)

    def _claim_write(
        self,
        marker_id: str,
        copy_id: str,
        status: LeaseStatus,
        *,
        now: float,
        order: float | None,
        over: Lease | None = None,
    ) -> bool:
        """The claim's conditional write: on a marker of `status` unclaimed or claimed by `copy_id`, or, with
        `over`, on that marker's version as read. It records until when a lease the claimant writes is
        surely kept (`claim_kept_until`) and, for a PARKED marker, its place in its parked line (`order`)."""
        update = "SET claimed_by = :copy, claimed_at = :now, claim_kept_until = :kept, version = version + :one"
        names = {"#status": "status"}
        values: dict[str, Any] = {
            "copy": copy_id,
            "now": _num(now),
            "kept": _num(now + self._closed_ttl_s),
            "one": 1,
            "marker": status.value,
        }
        if order is not None:
            update += ", #order = :sent"
            names["#order"] = WAITING_ORDER_ATTR
            values["sent"] = _num(order)
        condition = "#status = :marker AND (attribute_not_exists(claimed_by) OR claimed_by = :copy)"
        if over is not None:
            condition = "#status = :marker AND version = :version"
            values["version"] = over.version
        return _conditional(
            self._client.update_item,
            TableName=self._table,
            Key={PARTITION_KEY: {"S": marker_id}},
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=_values(**values),
        )

    def record_rejection(self, lease: Lease, *, now: float, error: str) -> bool:
        """Keep a REJECTED lease for a poison message sent to the DLQ (so the table answers "where did it
        go?"), `error` (what was wrong with the body) as its last error. False when a lease of this message
        exists already: that one is kept."""
        rejected = replace(
            lease, status=LeaseStatus.REJECTED, last_error=LastError(error), closed_at=now, renew_at=None
        )
        item = lease_to_item(rejected, self.shard_of(lease.message_id))
        item[TTL_ATTR] = {"N": str(int(now) + self._closed_ttl_s)}
        return _conditional(
            self._client.put_item,
            TableName=self._table,
            Item=item,
            ConditionExpression="attribute_not_exists(#pk)",
            ExpressionAttributeNames={"#pk": PARTITION_KEY},
        )

    def refresh_handle(self, current: Lease, newer: Lease) -> Lease | None:
        """Adopt a newer receive of an ACTIVE lease: its handle, count and timing.

        Fenced by version and by receive count: a strictly newer receive wins, or one with the same
        count and another handle (SQS's count is approximate), which the receiver adopts only once SQS
        has accepted that handle.
        """
        if not _conditional(
            self._client.update_item,
            TableName=self._table,
            Key={PARTITION_KEY: {"S": current.message_id}},
            UpdateExpression=(
                "SET receipt_handle = :handle, receive_count = :rc, received_at = :received, "
                "visible_until = :visible, renew_at = :renew_at, renew_until = :renew_until, "
                f"renewed_at = :received, {CHECKED_AT_ATTR} = :received, version = version + :one, "
                f"{TTL_ATTR} = :ttl"
            ),
            ConditionExpression=(
                "#status = :active AND version = :version"
                " AND (receive_count < :rc OR (receive_count = :rc AND receipt_handle <> :handle))"
            ),
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=_values(
                handle=newer.receipt_handle,
                rc=newer.receive_count,
                received=_num(newer.received_at),
                visible=_num(newer.visible_until),
                renew_at=_num(newer.renew_at if newer.renew_at is not None else newer.visible_until),
                renew_until=_num(newer.renew_until),
                ttl=int(newer.renew_until) + self._closed_ttl_s,
                one=1,
                active=LeaseStatus.ACTIVE.value,
                version=current.version,
            ),
        ):
            return None
        return replace(
            current,
            receipt_handle=newer.receipt_handle,
            receive_count=newer.receive_count,
            received_at=newer.received_at,
            visible_until=newer.visible_until,
            renew_at=newer.renew_at,
            renew_until=newer.renew_until,
            renewed_at=newer.received_at,
            version=current.version + 1,
        )

    def record_renewal(self, renewal: Renewal) -> Lease | None:
        """Record one successful renewal (one conditional `UpdateItem`)."""
        if not _conditional(self._client.update_item, **self._renewal_update(renewal)):
            return None
        return renewal.renewed()

    def record_renewals(self, renewals: Sequence[Renewal]) -> list[Lease | None]:
        """Record many renewals: 100 conditional updates per `TransactWriteItems` call.

        One call per lease would make the extender CPU-bound on the SDK's per-call cost (about 1 ms
        each). A transaction keeps every update conditional on its version; when one loses its race
        the transaction is cancelled and the others are sent again. Results follow the input order;
        None marks a lease another writer changed first.

        The calls go one after another: 10,000 renewals are 100 calls, and moto (the offline
        runtime's DynamoDB) is not safe with concurrent transactions.
        """
        return [
            lease
            for start in range(0, len(renewals), TRANSACT_LIMIT)
            for lease in self._record_chunk(renewals[start : start + TRANSACT_LIMIT])
        ]

    def _record_chunk(self, chunk: Sequence[Renewal]) -> list[Lease | None]:
        written = self._conditional_updates([self._renewal_update(renewal) for renewal in chunk])
        return [
            renewal.renewed() if landed else None if landed is False else self.record_renewal(renewal)
            for renewal, landed in zip(chunk, written, strict=True)
        ]

    def _conditional_updates(self, updates: Sequence[Any], kind: str = "Update") -> list[bool | None]:
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
                self._client.transact_write_items(TransactItems=cast(Any, [{kind: updates[i]} for i in pending]))
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

    def _renewal_update(self, renewal: Renewal) -> Any:
        """The conditional update of one renewal: visible-until counted from the send time. Conditional on
        the version and the status as read: ACTIVE, or CANCELLED while the extender keeps a cancelled
        message hidden until its cancel is finished."""
        return {
            "TableName": self._table,
            "Key": {PARTITION_KEY: {"S": renewal.lease.message_id}},
            "UpdateExpression": (
                "SET visible_until = :visible, renew_at = :renew_at, renewed_at = :sent, "
                "renewal_count = renewal_count + :one, version = version + :one"
            ),
            "ConditionExpression": "version = :version AND #status = :status",
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": _values(
                visible=_num(renewal.visible_until),
                renew_at=_num(renewal.renew_at),
                sent=_num(renewal.sent_at),
                one=1,
                version=renewal.lease.version,
                # a renewal never lands on a closed lease: only a cancelled one's message is kept hidden
                status=(
                    LeaseStatus.CANCELLED if renewal.lease.status is LeaseStatus.CANCELLED else LeaseStatus.ACTIVE
                ).value,
            ),
        }

    def close(
        self,
        lease: Lease,
        status: LeaseStatus,
        *,
        now: float,
        error: LastError | None = None,
        result: dict[str, Any] | None = None,
        visible_until: float | None = None,
        never_started: bool = False,
    ) -> Lease | None:
        """Close an ACTIVE lease: leave the due-index, set the TTL, keep the reason. `never_started`: its
        execution was found not to exist, so this attempt does not count toward `max_attempts`.

        The holds of its execution (job lock, slot) are freed in the same transaction, each where it
        still names that execution: no crash between the close and a release can leave a hold on a
        closed lease, and a close that loses its race frees nothing. Returns None when another writer
        changed the lease first; a close that landed with its answer lost (its retry finds the lease
        closed) is recognised as this one by a consistent read."""
        update = self._close_update(lease, status, now, error, result, visible_until, never_started)
        closed = replace(
            lease,
            status=status,
            renew_at=None,
            closed_at=now,
            version=lease.version + 1,
            last_error=error if error is not None else lease.last_error,
            result=result if result is not None else lease.result,
            visible_until=visible_until if visible_until is not None else lease.visible_until,
            never_started=never_started or lease.never_started,
        )
        execution = lease.execution_arn or ""
        holds = list(hold_keys(lease)) if execution else []
        for _ in range(TRANSACT_ATTEMPTS if holds else 0):
            releases = [{"Update": self.locks.release_request(key, execution, now=now)} for key in holds]
            try:
                self._client.transact_write_items(TransactItems=cast(Any, [{"Update": update}, *releases]))
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                    raise
                codes = [reason.get("Code") for reason in exc.response.get("CancellationReasons", [])]
                if codes[:1] == ["ConditionalCheckFailed"]:  # another's close, or this one's landed before
                    return closed if self._closed_by(closed) else None
                # a hold no longer this execution's is left out (one without a reason is kept); a conflict
                # or throttle: sent again
                refused = {key for key, code in zip(holds, codes[1:], strict=False) if code == "ConditionalCheckFailed"}
                holds = [key for key in holds if key not in refused]
                continue
            return closed
        # no holds, or a transaction refused each time: the close alone, then each hold on its own
        if not (_conditional(self._client.update_item, **update) or self._closed_by(closed)):
            return None
        for key in holds:
            try:
                self.locks.release(key, execution, now=now)
            except ClientError as exc:  # best effort only here, after transactions refused each time
                logger.warning("could not release a hold", extra={"key": key, "error": str(exc)})
        return closed

    def _closed_by(self, closed: Lease) -> bool:
        """Whether the lease as stored is `closed`, the close this writer sent: its retry of a close that
        landed with its answer lost fails its own condition. The version, the status, the close time (to
        the millisecond stored), the reason and the time the message shows again identify it; another
        writer's close of the same version that matches them all to the millisecond did what this one would."""
        current = self.get(closed.message_id)
        return (
            current is not None
            and current.version == closed.version
            and current.status is closed.status
            and current.closed_at is not None
            and _num(current.closed_at) == _num(closed.closed_at or 0.0)
            and current.last_error == closed.last_error
            and current.visible_until == closed.visible_until
        )

    def _close_update(
        self,
        lease: Lease,
        status: LeaseStatus,
        now: float,
        error: LastError | None,
        result: dict[str, Any] | None,
        visible_until: float | None,
        never_started: bool,
    ) -> dict[str, Any]:
        if status not in CLOSED_STATUSES:
            raise ValueError(f"close() takes a closed status, not {status}")
        sets = ["#status = :status", "closed_at = :now", f"{TTL_ATTR} = :ttl", "version = version + :one"]
        values: dict[str, Any] = {
            "status": status.value,
            "now": _num(now),
            "ttl": int(now) + self._closed_ttl_s,
            "one": 1,
            "version": lease.version,
            "active": LeaseStatus.ACTIVE.value,
        }
        if error is not None:
            sets.append("last_error = :error")
            values["error"] = error.to_data()
        if result is not None:
            sets.append("#result = :result")
            values["result"] = json.dumps(result, separators=(",", ":"))
        if visible_until is not None:
            sets.append("visible_until = :visible")
            values["visible"] = _num(visible_until)
        if never_started:
            sets.append("never_started = :never_started")
            values["never_started"] = True
        names = {"#status": "status", "#shard": SHARD_ATTR, "#renew_at": RENEW_AT_ATTR}
        if result is not None:
            names["#result"] = RESULT_ATTR
        return {
            "TableName": self._table,
            "Key": {PARTITION_KEY: {"S": lease.message_id}},
            "UpdateExpression": "SET " + ", ".join(sets) + " REMOVE #shard, #renew_at",
            "ConditionExpression": "version = :version AND #status = :active",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": _values(**values),
        }

    def note_error(self, lease: Lease, error: LastError) -> bool:
        """Keep the last renewal error on an ACTIVE lease (a note: it does not bump the version)."""
        return _conditional(
            self._client.update_item,
            TableName=self._table,
            Key={PARTITION_KEY: {"S": lease.message_id}},
            UpdateExpression="SET last_error = :error",
            ConditionExpression="version = :version AND #status = :active",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=_values(
                error=error.to_data(), version=lease.version, active=LeaseStatus.ACTIVE.value
            ),
        )

    def mark_checked(self, lease: Lease, now: float) -> bool:
        """Move an ACTIVE lease to the back of the reconcile index (a note: the version is not bumped,
        so it never makes a renewal or a settlement lose its race)."""
        return _conditional(
            self._client.update_item,
            TableName=self._table,
            Key={PARTITION_KEY: {"S": lease.message_id}},
            UpdateExpression=f"SET {CHECKED_AT_ATTR} = :now",
            ConditionExpression="#status = :active AND attribute_exists(#shard)",
            ExpressionAttributeNames={"#status": "status", "#shard": SHARD_ATTR},
            ExpressionAttributeValues=_values(now=_num(now), active=LeaseStatus.ACTIVE.value),
        )

    def mark_due_now(self, lease: Lease, now: float) -> Lease | None:
        """Believe the message may show again at `now` (a visibility change whose outcome is unknown):
        the belief must never be later than the truth, so the next extender pass renews it."""
        if not _conditional(
            self._client.update_item,
            TableName=self._table,
            Key={PARTITION_KEY: {"S": lease.message_id}},
            UpdateExpression="SET visible_until = :now, renew_at = :now, version = version + :one",
            ConditionExpression="version = :version AND #status = :active",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=_values(
                now=_num(now), one=1, version=lease.version, active=LeaseStatus.ACTIVE.value
            ),
        ):
            return None
        return replace(lease, visible_until=now, renew_at=now, version=lease.version + 1)

    def amend(self, closed: Lease, *, status: LeaseStatus, error: LastError) -> Lease | None:
        """Correct a closed lease's status and reason (a release whose handle SQS refused is LOST)."""
        if closed.active or status not in CLOSED_STATUSES:
            raise ValueError("amend() changes a closed lease into a closed status")
        if not _conditional(
            self._client.update_item,
            TableName=self._table,
            Key={PARTITION_KEY: {"S": closed.message_id}},
            UpdateExpression="SET #status = :new, last_error = :error, version = version + :one",
            ConditionExpression="version = :version AND #status = :old",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=_values(
                new=status.value, error=error.to_data(), one=1, version=closed.version, old=closed.status.value
            ),
        ):
            return None
        return replace(closed, status=status, last_error=error, version=closed.version + 1)

    def mark_cancelled(
        self, lease: Lease, *, now: float, error: LastError, record: dict[str, Any], due_at: float | None = None
    ) -> Lease | None:
        """Close a lease CANCELLED (an operator's `longjobs cancel`, `longjobs.engine.cancel`), or note a
        cancel's progress on a lease already CANCELLED. One write, conditional on the version and status as
        read: a cancel racing a success, an admission in place or a parked copy's claim settles once, and
        None tells the caller another writer got there first (read again).

        It leaves the reconcile and waiting indexes' reach (nothing reconciles or admits a CANCELLED lease).
        With `due_at` (a cancel not finished yet) it stays in the `due` index with that renew-at, in its
        shard: the extender then keeps its message hidden and finishes the cancel (`longjobs.engine.cancel.
        finish`), so a cancel cut short after its mark converges without its operator; without, it leaves
        the index. `record` (the cancel's reason and progress) is kept as the lease's result. A PARKED or
        REQUEUED marker keeps its TTL (it must outlive its copy on its queue, which it now refuses); any
        other expires as a closed lease does."""
        first = lease.status is not LeaseStatus.CANCELLED
        sets = ["#status = :cancelled", "last_error = :error", "#result = :result", "version = version + :one"]
        values: dict[str, Any] = {
            "cancelled": LeaseStatus.CANCELLED.value,
            "error": error.to_data(),
            "result": json.dumps(record, separators=(",", ":")),
            "one": 1,
            "version": lease.version,
            "old": lease.status.value,
        }
        if first:
            sets.append("closed_at = :now")
            values["now"] = _num(now)
        if first and lease.status not in COPIED_STATUSES:
            sets.append(f"{TTL_ATTR} = :ttl")
            values["ttl"] = int(now) + self._closed_ttl_s
        removed = ["#waiting"]
        if due_at is None:
            removed[:0] = ["#shard", "#renew_at"]
        else:
            sets += ["#shard = :shard", "#renew_at = :due"]
            values.update(shard=self.shard_of(lease.message_id), due=_num(due_at))
        if not _conditional(
            self._client.update_item,
            TableName=self._table,
            Key={PARTITION_KEY: {"S": lease.message_id}},
            UpdateExpression="SET " + ", ".join(sets) + " REMOVE " + ", ".join(removed),
            ConditionExpression="version = :version AND #status = :old",
            ExpressionAttributeNames={
                "#status": "status",
                "#result": RESULT_ATTR,
                "#shard": SHARD_ATTR,
                "#renew_at": RENEW_AT_ATTR,
                "#waiting": WAITING_TYPE_ATTR,
            },
            ExpressionAttributeValues=_values(**values),
        ):
            return None
        return replace(
            lease,
            status=LeaseStatus.CANCELLED,
            renew_at=due_at,
            closed_at=now if first else lease.closed_at,
            last_error=error,
            result=record,
            version=lease.version + 1,
        )
