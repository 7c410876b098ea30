"""Renewals: what the extender records on a lease once SQS has accepted a visibility change."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from longjobs.engine.lease.codec import num
from longjobs.engine.lease.schema import PARTITION_KEY
from longjobs.engine.lease.types import Lease, LeaseStatus
from longjobs.engine.lease.writes import TRANSACT_LIMIT, conditional, conditional_updates, values_of

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["Renewal", "Renewals"]


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


class Renewals:
    """The renewals' conditional writes (`store.renewals`), on the store's client and table."""

    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self._client = client
        self._table = table_name

    def record(self, renewal: Renewal) -> Lease | None:
        """Record one successful renewal (one conditional `UpdateItem`)."""
        if not conditional(self._client.update_item, **self._renewal_update(renewal)):
            return None
        return renewal.renewed()

    def record_many(self, renewals: Sequence[Renewal]) -> list[Lease | None]:
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
            renewal.renewed() if landed else None if landed is False else self.record(renewal)
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
