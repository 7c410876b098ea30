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
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from longjobs.engine.lease.codec import item_to_lease, lease_to_item, num
from longjobs.engine.lease.legacy import LegacyShards
from longjobs.engine.lease.lock import Hold, Lock, Locks, batch_get, hold_keys, lock_of
from longjobs.engine.lease.markers import Markers
from longjobs.engine.lease.schema import (
    CHECKED_AT_ATTR,
    DUE_INDEX,
    PARTITION_KEY,
    RECONCILE_INDEX,
    RENEW_AT_ATTR,
    RESULT_ATTR,
    SHARD_ATTR,
    TTL_ATTR,
    WAITING_INDEX,
    WAITING_ORDER_ATTR,
    WAITING_TYPE_ATTR,
)
from longjobs.engine.lease.types import CLOSED_STATUSES, COPIED_STATUSES, LastError, Lease, LeaseStatus
from longjobs.engine.lease.writes import (
    TRANSACT_ATTEMPTS,
    TRANSACT_LIMIT,
    conditional,
    conditional_updates,
    up_to,
    values_of,
)
from longjobs.engine.observability import logger

if TYPE_CHECKING:
    from concurrent.futures import Executor  # a type only: the receiver and watcher never make one

    from mypy_boto3_dynamodb import DynamoDBClient


WAITING_PAGE = 25
"""WAITING leases a page of the `waiting` index reads at least (some may be filtered out as shown again)."""


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
        self.markers = Markers(self)
        """The PARKED and REQUEUED markers kept in the same table."""

    @property
    def client(self) -> DynamoDBClient:
        return self._client

    @property
    def table_name(self) -> str:
        return self._table

    @property
    def closed_ttl_s(self) -> int:
        """How long a closed lease (and a marker past its copy) is kept before its TTL deletes it."""
        return self._closed_ttl_s

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
            "ExpressionAttributeValues": {":type": {"S": job_type}, ":after": {"N": str(num(hidden_after))}},
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
        values: dict[str, Any] = {":type": {"S": job_type}, ":now": {"N": str(num(now))}}
        condition = "#type = :type"
        kept = "#visible > :now"
        if ahead_of is not None:
            names["#since"] = WAITING_ORDER_ATTR
            names["#pk"] = PARTITION_KEY
            values[":since"] = {"N": str(num(ahead_of[0]))}
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
        condition, names, values = up_to(SHARD_ATTR, {"N": str(shard)}, sort_attr, bound)
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
        return conditional(self._client.put_item, **self.create_request(lease, replacing=replacing)["Put"])

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
            put["ExpressionAttributeValues"] = values_of(
                version=replacing.version, status=replacing.status.value, rc=lease.receive_count
            )
        return {"Put": put}

    def admit(self, waiting: Lease, active: Lease) -> bool:
        """Turn a WAITING lease into the ACTIVE lease of an attempt, on the same receive (the message is
        still hidden under that receive's handle): conditional on the WAITING lease being unchanged."""
        return conditional(self._client.put_item, **self.admit_request(waiting, active)["Put"])

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
                "ExpressionAttributeValues": values_of(
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
                "ExpressionAttributeValues": values_of(version=lease.version, active=LeaseStatus.ACTIVE.value),
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
            written = conditional(self._client.put_item, **action["Put"])
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

    def record_rejection(self, lease: Lease, *, now: float, error: str) -> bool:
        """Keep a REJECTED lease for a poison message sent to the DLQ (so the table answers "where did it
        go?"), `error` (what was wrong with the body) as its last error. False when a lease of this message
        exists already: that one is kept."""
        rejected = replace(
            lease, status=LeaseStatus.REJECTED, last_error=LastError(error), closed_at=now, renew_at=None
        )
        item = lease_to_item(rejected, self.shard_of(lease.message_id))
        item[TTL_ATTR] = {"N": str(int(now) + self._closed_ttl_s)}
        return conditional(
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
        if not conditional(
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
            ExpressionAttributeValues=values_of(
                handle=newer.receipt_handle,
                rc=newer.receive_count,
                received=num(newer.received_at),
                visible=num(newer.visible_until),
                renew_at=num(newer.renew_at if newer.renew_at is not None else newer.visible_until),
                renew_until=num(newer.renew_until),
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
        if not conditional(self._client.update_item, **self._renewal_update(renewal)):
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
        written = conditional_updates(self._client, [self._renewal_update(renewal) for renewal in chunk])
        return [
            renewal.renewed() if landed else None if landed is False else self.record_renewal(renewal)
            for renewal, landed in zip(chunk, written, strict=True)
        ]

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
            "ExpressionAttributeValues": values_of(
                visible=num(renewal.visible_until),
                renew_at=num(renewal.renew_at),
                sent=num(renewal.sent_at),
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
        if not (conditional(self._client.update_item, **update) or self._closed_by(closed)):
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
            and num(current.closed_at) == num(closed.closed_at or 0.0)
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
            "now": num(now),
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
            values["visible"] = num(visible_until)
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
            "ExpressionAttributeValues": values_of(**values),
        }

    def note_error(self, lease: Lease, error: LastError) -> bool:
        """Keep the last renewal error on an ACTIVE lease (a note: it does not bump the version)."""
        return conditional(
            self._client.update_item,
            TableName=self._table,
            Key={PARTITION_KEY: {"S": lease.message_id}},
            UpdateExpression="SET last_error = :error",
            ConditionExpression="version = :version AND #status = :active",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=values_of(
                error=error.to_data(), version=lease.version, active=LeaseStatus.ACTIVE.value
            ),
        )

    def mark_checked(self, lease: Lease, now: float) -> bool:
        """Move an ACTIVE lease to the back of the reconcile index (a note: the version is not bumped,
        so it never makes a renewal or a settlement lose its race)."""
        return conditional(
            self._client.update_item,
            TableName=self._table,
            Key={PARTITION_KEY: {"S": lease.message_id}},
            UpdateExpression=f"SET {CHECKED_AT_ATTR} = :now",
            ConditionExpression="#status = :active AND attribute_exists(#shard)",
            ExpressionAttributeNames={"#status": "status", "#shard": SHARD_ATTR},
            ExpressionAttributeValues=values_of(now=num(now), active=LeaseStatus.ACTIVE.value),
        )

    def mark_due_now(self, lease: Lease, now: float) -> Lease | None:
        """Believe the message may show again at `now` (a visibility change whose outcome is unknown):
        the belief must never be later than the truth, so the next extender pass renews it."""
        if not conditional(
            self._client.update_item,
            TableName=self._table,
            Key={PARTITION_KEY: {"S": lease.message_id}},
            UpdateExpression="SET visible_until = :now, renew_at = :now, version = version + :one",
            ConditionExpression="version = :version AND #status = :active",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=values_of(
                now=num(now), one=1, version=lease.version, active=LeaseStatus.ACTIVE.value
            ),
        ):
            return None
        return replace(lease, visible_until=now, renew_at=now, version=lease.version + 1)

    def amend(self, closed: Lease, *, status: LeaseStatus, error: LastError) -> Lease | None:
        """Correct a closed lease's status and reason (a release whose handle SQS refused is LOST)."""
        if closed.active or status not in CLOSED_STATUSES:
            raise ValueError("amend() changes a closed lease into a closed status")
        if not conditional(
            self._client.update_item,
            TableName=self._table,
            Key={PARTITION_KEY: {"S": closed.message_id}},
            UpdateExpression="SET #status = :new, last_error = :error, version = version + :one",
            ConditionExpression="version = :version AND #status = :old",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=values_of(
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
            values["now"] = num(now)
        if first and lease.status not in COPIED_STATUSES:
            sets.append(f"{TTL_ATTR} = :ttl")
            values["ttl"] = int(now) + self._closed_ttl_s
        removed = ["#waiting"]
        if due_at is None:
            removed[:0] = ["#shard", "#renew_at"]
        else:
            sets += ["#shard = :shard", "#renew_at = :due"]
            values.update(shard=self.shard_of(lease.message_id), due=num(due_at))
        if not conditional(
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
            ExpressionAttributeValues=values_of(**values),
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
