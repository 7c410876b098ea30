"""The lease table's index queries: the due leases, the least recently reconciled, a type's waiting line.

Each index is sparse and eventually consistent (`longjobs.engine.lease.schema.INDEXES`): a lease read here
may be a version behind, which the version condition on every write makes harmless.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from longjobs.engine.lease.codec import item_to_lease, num
from longjobs.engine.lease.schema import (
    CHECKED_AT_ATTR,
    DUE_INDEX,
    PARTITION_KEY,
    RECONCILE_INDEX,
    RENEW_AT_ATTR,
    SHARD_ATTR,
    WAITING_INDEX,
    WAITING_ORDER_ATTR,
    WAITING_TYPE_ATTR,
)
from longjobs.engine.lease.types import Lease, LeaseStatus
from longjobs.engine.lease.writes import up_to

if TYPE_CHECKING:
    from concurrent.futures import Executor  # a type only: the receiver and watcher never make one

    from mypy_boto3_dynamodb import DynamoDBClient

    from longjobs.engine.lease.legacy import LegacyShards

__all__ = ["LeaseIndex"]

WAITING_PAGE = 25
"""WAITING leases a page of the `waiting` index reads at least (some may be filtered out as shown again)."""


class LeaseIndex:
    """The queries of the lease store's indexes (`store.index`), on its client, table and shards."""

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        *,
        shards: int,
        legacy: LegacyShards | None = None,
        executor: Executor | None = None,
    ) -> None:
        self._client = client
        self._table = table_name
        self._shards = shards
        self._legacy = legacy
        self._executor = executor

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
