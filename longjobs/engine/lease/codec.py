"""The lease's item in the table: a `Lease` to DynamoDB's typed attribute values and back.

Times are kept as numbers with millisecond precision (`num`), closed leases carry their history and
result as JSON, and the indexes' attributes are written from the lease's state: an ACTIVE lease's shard
(the due index), a WAITING lease's type and place in line, a PARKED marker's place in its type's parked
line (the same index).

DynamoDB's typed attribute values are made here (`serialize`, `deserialize`) for the few types a lease
holds. boto3's `TypeSerializer` does this for every type, but importing it imports boto3 (and
s3transfer), which the functions otherwise do without (see `longjobs.engine.aws`). Numbers are
`Decimal`, as boto3's."""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from longjobs.engine.lease.schema import (
    CHECKED_AT_ATTR,
    ERROR_ATTR,
    HISTORY_ATTR,
    PARTITION_KEY,
    RENEW_AT_ATTR,
    RESULT_ATTR,
    SHARD_ATTR,
    WAITING_ORDER_ATTR,
    WAITING_TYPE_ATTR,
    WORKFLOW_CLOSED_AT_ATTR,
    attribute_time,
    parked_line,
)
from longjobs.engine.lease.types import Attempt, LastError, Lease, LeaseStatus

__all__ = ["TIME_FIELDS", "deserialize", "in_parked_line", "item_to_lease", "lease_to_item", "num", "serialize"]

TIME_FIELDS = (
    "received_at",
    "visible_until",
    "renew_until",
    "renew_at",
    "renewed_at",
    "closed_at",
    "workflow_closed_at",
    "checked_at",
    "waiting_since",
    "sent_at",
    "copy_sent_at",
    "claimed_at",
    "claim_kept_until",
)
"""A lease's times, in epoch seconds (`longjobs lease --json` prints each as ISO 8601)."""
_APART = frozenset({"workflow_closed_at", "copy_sent_at"})  # read apart: an ISO string, a marker's index key
_FLOAT_FIELDS = (*(name for name in TIME_FIELDS if name not in _APART), "waiting_order")
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
    "group_id",
)


def num(seconds: float) -> Decimal:
    """A time as the table keeps it: seconds, to the millisecond."""
    return Decimal(f"{seconds:.3f}")


def lease_to_item(lease: Lease, shard: int) -> dict[str, Any]:
    """The DynamoDB item (typed attribute values) of a lease."""
    plain: dict[str, Any] = {PARTITION_KEY: lease.message_id, "status": lease.status.value}
    for name in _FLOAT_FIELDS:
        value = getattr(lease, name)
        if value is not None:
            plain[name] = num(value)
    for name in _INT_FIELDS:
        plain[name] = getattr(lease, name)
    for name in _STR_FIELDS:
        value = getattr(lease, name)
        if value is not None:
            plain[name] = value
    if lease.workflow_closed_at is not None:
        plain[WORKFLOW_CLOSED_AT_ATTR] = num(lease.workflow_closed_at)
    if lease.last_error is not None:
        plain[ERROR_ATTR] = lease.last_error.to_data()
    if lease.never_started:
        plain["never_started"] = True
    if lease.result is not None:
        plain[RESULT_ATTR] = json.dumps(lease.result, separators=(",", ":"))
    if lease.history:
        plain[HISTORY_ATTR] = json.dumps([a.to_data() for a in lease.history], separators=(",", ":"))
    if lease.status is LeaseStatus.WAITING:
        if lease.job_type is None or lease.waiting_order is None:
            raise ValueError(f"WAITING lease {lease.message_id} needs its job type and waiting_order (the index)")
        plain[WAITING_TYPE_ATTR] = lease.job_type
    elif in_parked_line(lease):
        plain[WAITING_TYPE_ATTR] = parked_line(lease.job_type or "")
        plain[WAITING_ORDER_ATTR] = num(lease.copy_sent_at or 0.0)
    if lease.checked_at is None:  # not reconciled since this receive: sorts by the receive in the index
        plain[CHECKED_AT_ATTR] = num(lease.received_at)
    if lease.status is LeaseStatus.ACTIVE:
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
    if WORKFLOW_CLOSED_AT_ATTR in item:
        fields["workflow_closed_at"] = attribute_time(item[WORKFLOW_CLOSED_AT_ATTR])
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


def serialize(value: Any) -> dict[str, Any]:
    """`{"S": ...}`, `{"N": ...}`, `{"BOOL": ...}`, `{"NULL": True}`, `{"M": ...}` or `{"L": ...}`."""
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, int | Decimal):
        return {"N": str(value)}
    if isinstance(value, float):
        raise TypeError("floats are not DynamoDB numbers: pass a Decimal")
    if isinstance(value, Mapping):
        return {"M": {str(key): serialize(item) for key, item in value.items()}}
    if isinstance(value, list | tuple):
        return {"L": [serialize(item) for item in value]}
    raise TypeError(f"cannot store a {type(value).__name__} in DynamoDB")


def deserialize(attribute: Mapping[str, Any]) -> Any:
    """The plain value of a typed attribute value (numbers as `Decimal`)."""
    [(kind, value)] = attribute.items()
    if kind == "S":
        return value
    if kind == "N":
        return Decimal(value)
    if kind == "BOOL":
        return bool(value)
    if kind == "NULL":
        return None
    if kind == "M":
        return {key: deserialize(item) for key, item in value.items()}
    if kind == "L":
        return [deserialize(item) for item in value]
    if kind in ("SS", "BS", "B"):
        return set(value) if kind != "B" else value
    if kind == "NS":
        return {Decimal(item) for item in value}
    raise TypeError(f"unknown DynamoDB type {kind!r}")
