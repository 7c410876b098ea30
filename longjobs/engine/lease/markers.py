"""The markers: a message's record in the lease table while a copy of it is on a queue.

A PARKED marker stands for a message parked in its type's waiting queue, a REQUEUED one for a message
sent back to wait for its job id, and an S3 notification's fan-out writes one per object creation. The
copies' first receive claims the marker's run (`claim_parked`, `claim_requeued`): the first copy to claim
runs the job, any other is acknowledged. A PARKED marker also keeps its place in its type's parked line
(the `waiting` index), so admission sends a fresh copy before the waiting queue's retention ends."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from longjobs.engine.lease.codec import item_to_lease, num
from longjobs.engine.lease.schema import (
    PARTITION_KEY,
    TTL_ATTR,
    WAITING_INDEX,
    WAITING_ORDER_ATTR,
    WAITING_TYPE_ATTR,
    parked_line,
)
from longjobs.engine.lease.types import Lease, LeaseStatus
from longjobs.engine.lease.writes import TRANSACT_LIMIT, conditional, conditional_updates, up_to, values_of

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["CopyNote", "Markers"]


@dataclass(frozen=True)
class CopyNote:
    """A copy sent of a PARKED or REQUEUED marker, to note on it (`Markers.note_copy`)."""

    marker: Lease
    copy_id: str
    sent_at: float
    kept_until: float


class Table(Protocol):
    """What the markers use of the lease store (`longjobs.engine.lease.store.LeaseStore`): its table, and
    its lease's read and create request (a marker is a lease item)."""

    @property
    def client(self) -> DynamoDBClient: ...

    @property
    def table_name(self) -> str: ...

    @property
    def closed_ttl_s(self) -> int: ...

    def get(self, message_id: str) -> Lease | None: ...

    def create_request(self, lease: Lease, *, replacing: Lease | None = None) -> dict[str, Any]: ...


class Markers:
    """Reads and conditional writes of the markers, in the lease store's table."""

    def __init__(self, store: Table) -> None:
        self._store = store

    def create(self, markers: Sequence[Lease]) -> list[bool]:
        """Write new markers (`create` of each, none of which may exist yet): up to `TRANSACT_LIMIT` in one
        `TransactWriteItems`, one alone in a `PutItem`. Per marker, True when this writer wrote it, False
        when it existed already (a retry, or another writer first). Raises on any other error: a 5xx may
        come after the write landed (a retry then finds the markers)."""
        puts = [self._store.create_request(marker)["Put"] for marker in markers]
        if len(puts) == 1:
            return [conditional(self._store.client.put_item, **puts[0])]
        created: list[bool] = []
        for start in range(0, len(puts), TRANSACT_LIMIT):
            chunk = puts[start : start + TRANSACT_LIMIT]
            written = conditional_updates(self._store.client, chunk, "Put")
            created += [
                landed if landed is not None else conditional(self._store.client.put_item, **put)
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
        put = self._store.create_request(record)["Put"]
        if replacing is not None:
            put["ConditionExpression"] = "version = :version AND #status = :status"
            put["ExpressionAttributeNames"] = {"#status": "status"}
            put["ExpressionAttributeValues"] = values_of(version=replacing.version, status=replacing.status.value)
        return conditional(self._store.client.put_item, **put)

    def note_copy(self, marker: Lease, copy_id: str, *, sent_at: float, kept_until: float) -> bool:
        """Record on a PARKED or REQUEUED marker the copy that was sent: its id (a redelivery of the
        original is then acknowledged without sending another) and, for a PARKED one, when it was sent at
        the latest (`sent_at`: its place in its type's parked line, so it is sent again before its
        retention runs out); the marker is kept until `kept_until` (the copy's retention) and its TTL
        past that. False when the marker changed meanwhile (claimed by a copy, cancelled, or noted by
        another sender)."""
        return conditional(
            self._store.client.update_item, **self._note_update(CopyNote(marker, copy_id, sent_at, kept_until))
        )

    def note_copies(self, notes: Sequence[CopyNote]) -> list[bool]:
        """`note_copy` for many markers (a batch's parked copies, sent together): up to `TRANSACT_LIMIT` in
        one `TransactWriteItems`, each conditional on its marker's version; one alone in an `UpdateItem`."""
        updates = [self._note_update(note) for note in notes]
        if len(updates) == 1:
            return [conditional(self._store.client.update_item, **updates[0])]
        noted: list[bool] = []
        for start in range(0, len(updates), TRANSACT_LIMIT):
            chunk = updates[start : start + TRANSACT_LIMIT]
            written = conditional_updates(self._store.client, chunk)
            noted += [
                landed if landed is not None else conditional(self._store.client.update_item, **update)
                for update, landed in zip(chunk, written, strict=True)
            ]
        return noted

    def _note_update(self, note: CopyNote) -> dict[str, Any]:
        marker = note.marker
        names = {"#status": "status", "#ttl": TTL_ATTR}
        update = "SET copy_id = :copy, renew_until = :until, #ttl = :ttl, version = version + :one"
        values: dict[str, Any] = {
            "copy": note.copy_id,
            "until": num(note.kept_until),
            "ttl": int(note.kept_until) + self._store.closed_ttl_s,
            "one": 1,
            "version": marker.version,
            "marker": marker.status.value,
        }
        if marker.status is LeaseStatus.PARKED:
            update += ", #order = :sent"
            names["#order"] = WAITING_ORDER_ATTR
            values["sent"] = num(note.sent_at)
        return {
            "TableName": self._store.table_name,
            "Key": {PARTITION_KEY: {"S": marker.message_id}},
            "UpdateExpression": update,
            "ConditionExpression": "version = :version AND #status = :marker",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values_of(**values),
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
            values["sent"] = num(sent_at)
        return conditional(
            self._store.client.update_item,
            TableName=self._store.table_name,
            Key={PARTITION_KEY: {"S": marker.message_id}},
            UpdateExpression=update,
            ConditionExpression="version = :version AND #status = :parked",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values_of(**values),
        )

    def parked_due(self, job_type: str, *, sent_before: float | None, limit: int) -> list[Lease]:
        """Up to `limit` PARKED markers of `job_type` in its parked line whose copy was sent at or before
        `sent_before` (all for None), oldest copy first (the `waiting` index, eventually consistent:
        read a marker again before acting on it)."""
        condition, names, values = up_to(
            WAITING_TYPE_ATTR, {"S": parked_line(job_type)}, WAITING_ORDER_ATTR, sent_before
        )
        page = self._store.client.query(
            TableName=self._store.table_name,
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
        marker (none was written for it, or it expired): the copy then runs as it is. A marker an
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
        marker = self._store.get(original_id)
        if marker is not None and marker.status is LeaseStatus.CANCELLED:
            return False
        if marker is None or marker.status is not status:
            return None
        return marker.claimed_by == copy_id

    def take_over_claim(self, marker: Lease, copy_id: str, *, now: float, order: float | None = None) -> bool:
        """Give the run of a PARKED or REQUEUED marker to `copy_id`, away from a claimant that lost it
        (`longjobs.engine.delivery.copies.claim_answer` judges that), or claim it again for its claimant
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
            "now": num(now),
            "kept": num(now + self._store.closed_ttl_s),
            "one": 1,
            "marker": status.value,
        }
        if order is not None:
            update += ", #order = :sent"
            names["#order"] = WAITING_ORDER_ATTR
            values["sent"] = num(order)
        condition = "#status = :marker AND (attribute_not_exists(claimed_by) OR claimed_by = :copy)"
        if over is not None:
            condition = "#status = :marker AND version = :version"
            values["version"] = over.version
        return conditional(
            self._store.client.update_item,
            TableName=self._store.table_name,
            Key={PARTITION_KEY: {"S": marker_id}},
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values_of(**values),
        )
