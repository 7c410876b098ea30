"""Lease persistence on DynamoDB: conditional writes fenced by receive count and version.

Every write that changes who owns a message is conditional: a newer receive (higher receive count)
can never be overwritten by an older one, and two writers of the same lease version cannot both win.
A conditional write that loses returns `None` rather than raising: losing the race is a normal event
(another extender run, or a redelivery, got there first) and the caller simply moves on.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from longjobs.engine.lease.codec import item_to_lease, lease_to_item, num
from longjobs.engine.lease.index import LeaseIndex
from longjobs.engine.lease.legacy import LegacyShards
from longjobs.engine.lease.lock import Hold, HoldsTaken, Lock, Locks, batch_get, hold_keys, lock_of
from longjobs.engine.lease.markers import Markers
from longjobs.engine.lease.renewals import Renewals
from longjobs.engine.lease.schema import (
    CHECKED_AT_ATTR,
    PARTITION_KEY,
    RENEW_AT_ATTR,
    RESULT_ATTR,
    SHARD_ATTR,
    TTL_ATTR,
)
from longjobs.engine.lease.types import CLOSED_STATUSES, LastError, Lease, LeaseStatus
from longjobs.engine.lease.writes import (
    TRANSACT_ATTEMPTS,
    conditional,
    values_of,
)
from longjobs.engine.observability import logger

if TYPE_CHECKING:
    from concurrent.futures import Executor  # a type only: the receiver and watcher never make one

    from mypy_boto3_dynamodb import DynamoDBClient


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
        self.client = client
        self.table_name = table_name
        self.shards = shards
        self.closed_ttl_s = closed_ttl_s
        """How long a closed lease (and a marker past its copy) is kept before its TTL deletes it."""
        self.legacy = legacy
        """The shards of a previous, larger shard count that the extender still watches (`LegacyShards`)."""
        self.markers = Markers(self)
        """The PARKED and REQUEUED markers kept in the same table."""
        self.index = LeaseIndex(client, table_name, shards=shards, legacy=legacy, executor=executor)
        """The queries of the table's indexes: due, reconcile and waiting."""
        self.renewals = Renewals(client, table_name)
        """The renewals' writes."""

    @property
    def locks(self) -> Locks:
        """The execution-owned locks kept in the same table (job locks, slots)."""
        return Locks(self.client, self.table_name, closed_ttl_s=self.closed_ttl_s)

    def shard_of(self, message_id: str) -> int:
        """Stable shard of a message id (crc32, not `hash`, which changes between processes)."""
        return zlib.crc32(message_id.encode()) % self.shards

    # -- reads ---------------------------------------------------------------------------------

    def get(self, message_id: str) -> Lease | None:
        response = self.client.get_item(
            TableName=self.table_name, Key={PARTITION_KEY: {"S": message_id}}, ConsistentRead=True
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
        items = batch_get(self.client, self.table_name, list(dict.fromkeys([*locks, *locks.values()])))
        return {
            message_id: (
                item_to_lease(items[message_id]) if message_id in items else None,
                lock_of(lock_key, items[lock_key]) if lock_key in items else None,
            )
            for message_id, lock_key in locks.items()
        }

    def get_many(self, message_ids: Sequence[str]) -> dict[str, Lease]:
        """The leases of `message_ids` that exist, read consistently (BatchGetItem)."""
        items = batch_get(self.client, self.table_name, list(dict.fromkeys(message_ids)))
        return {key: item_to_lease(item) for key, item in items.items()}

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
        return conditional(self.client.put_item, **self.create_request(lease, replacing=replacing)["Put"])

    def create_request(self, lease: Lease, *, replacing: Lease | None = None) -> dict[str, Any]:
        """`create`'s conditional write as a transaction action (`take_holds`)."""
        item = lease_to_item(lease, self.shard_of(lease.message_id))
        item[TTL_ATTR] = {"N": str(int(lease.renew_until) + self.closed_ttl_s)}
        put: dict[str, Any] = {"TableName": self.table_name, "Item": item}
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
        return conditional(self.client.put_item, **self.admit_request(waiting, active)["Put"])

    def admit_request(self, waiting: Lease, active: Lease) -> dict[str, Any]:
        """`admit`'s conditional write as a transaction action (`take_holds`)."""
        if not waiting.waiting or not active.active or active.receive_count != waiting.receive_count:
            raise ValueError(f"admit() needs a WAITING lease and an ACTIVE one of its receive ({waiting.message_id})")
        item = lease_to_item(active, self.shard_of(active.message_id))
        item[TTL_ATTR] = {"N": str(int(active.renew_until) + self.closed_ttl_s)}
        return {
            "Put": {
                "TableName": self.table_name,
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
                "TableName": self.table_name,
                "Key": {PARTITION_KEY: {"S": lease.message_id}},
                "ConditionExpression": "version = :version AND #status = :active",
                "ExpressionAttributeNames": {"#status": "status"},
                "ExpressionAttributeValues": values_of(version=lease.version, active=LeaseStatus.ACTIVE.value),
            }
        }

    def take_holds(self, lease: Lease, action: dict[str, Any], holds: Sequence[Hold], *, now: float) -> HoldsTaken:
        """Write `lease` (`action`: `create_request`, `admit_request` or `unchanged_request`) with its
        execution's holds in one transaction (`Locks.take_with_lease`)."""
        return self.locks.take_with_lease(lease, action, holds, now=now)

    def record_rejection(self, lease: Lease, *, now: float, error: str) -> bool:
        """Keep a REJECTED lease for a poison message sent to the DLQ (so the table answers "where did it
        go?"), `error` (what was wrong with the body) as its last error. False when a lease of this message
        exists already: that one is kept."""
        rejected = replace(
            lease, status=LeaseStatus.REJECTED, last_error=LastError(error), closed_at=now, renew_at=None
        )
        item = lease_to_item(rejected, self.shard_of(lease.message_id))
        item[TTL_ATTR] = {"N": str(int(now) + self.closed_ttl_s)}
        return conditional(
            self.client.put_item,
            TableName=self.table_name,
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
            self.client.update_item,
            TableName=self.table_name,
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
                ttl=int(newer.renew_until) + self.closed_ttl_s,
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
                self.client.transact_write_items(TransactItems=cast(Any, [{"Update": update}, *releases]))
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
        if not (conditional(self.client.update_item, **update) or self._closed_by(closed)):
            return None
        for key in holds:
            try:
                self.locks.release(key, execution, now=now)
            except ClientError as exc:  # best effort only here, after transactions refused each time
                logger.warning("could not release a hold", extra={"key": key, "error": str(exc)})
        return closed

    def _closed_by(self, closed: Lease) -> bool:
        """Whether the lease as stored is `closed`, the close this writer sent: its retry of a close that
        landed with its answer lost fails its own condition. The version, the status, the close time and
        the time the message shows again (both to the millisecond the table keeps) and the reason identify
        it; another writer's close of the same version that matches them all did what this one would."""
        current = self.get(closed.message_id)
        return (
            current is not None
            and current.version == closed.version
            and current.status is closed.status
            and current.closed_at is not None
            and num(current.closed_at) == num(closed.closed_at or 0.0)
            and current.last_error == closed.last_error
            and num(current.visible_until) == num(closed.visible_until)
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
            "ttl": int(now) + self.closed_ttl_s,
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
            "TableName": self.table_name,
            "Key": {PARTITION_KEY: {"S": lease.message_id}},
            "UpdateExpression": "SET " + ", ".join(sets) + " REMOVE #shard, #renew_at",
            "ConditionExpression": "version = :version AND #status = :active",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values_of(**values),
        }

    def note_error(self, lease: Lease, error: LastError) -> bool:
        """Keep the last renewal error on an ACTIVE lease (a note: it does not bump the version)."""
        return conditional(
            self.client.update_item,
            TableName=self.table_name,
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
            self.client.update_item,
            TableName=self.table_name,
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
            self.client.update_item,
            TableName=self.table_name,
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
            self.client.update_item,
            TableName=self.table_name,
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
