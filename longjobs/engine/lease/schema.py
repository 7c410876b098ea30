"""Names of the lease table's keys and index, shared by the store, the stack and the offline runtime."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PARTITION_KEY = "pk"
DUE_INDEX = "due"
RECONCILE_INDEX = "reconcile"
WAITING_INDEX = "waiting"
WAITING_TYPE_ATTR = "waiting_type"  # set only on WAITING leases: the waiting index's partition key
WAITING_ORDER_ATTR = "waiting_order"  # a WAITING lease's place in its type's line (the index's sort key)
META_PREFIX = "meta#"  # items about the deployment, not about a message: the published job catalog
PARKED_LINE_PREFIX = "parked#"  # a PARKED marker's partition of the waiting index, by when its copy was sent
HISTORY_ATTR = "attempts"  # the message's ended attempts, as a JSON string
SHARD_ATTR = "shard"
RENEW_AT_ATTR = "renew_at"
CHECKED_AT_ATTR = "checked_at"
TTL_ATTR = "expires_at"
# Attributes the workflow reads and writes itself (its DynamoDB tasks), named once here.
STATUS_ATTR = "status"
HANDLE_ATTR = "receipt_handle"
VERSION_ATTR = "version"
ERROR_ATTR = "last_error"
EXECUTION_ATTR = "execution_arn"
RESULT_ATTR = "result"  # the job's summary, as a JSON string (a state machine can write no typed map)
WORKFLOW_CLOSED_AT_ATTR = "workflow_closed_at"  # when the workflow closed the lease: its ISO 8601 time (a string)


def attribute_time(value: dict[str, str] | None) -> float | None:
    """A time attribute in epoch seconds: a number (N), or an ISO 8601 timestamp (S, as Step Functions writes
    `$$.State.EnteredTime`: a JSONPath state has no epoch seconds to write)."""
    if not value:
        return None
    if "N" in value:
        return float(value["N"])
    if "S" in value:
        from datetime import datetime  # the workflow's writes only

        try:
            return datetime.fromisoformat(value["S"].replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def parked_line(job_type: str) -> str:
    """The `waiting` index partition of a type's PARKED markers (job type names have no `#`)."""
    return PARKED_LINE_PREFIX + job_type


@dataclass(frozen=True)
class Index:
    """A global secondary index of the lease table: its name and its key attributes (all projected)."""

    name: str
    partition: str
    sort: str


INDEXES = (
    Index(DUE_INDEX, SHARD_ATTR, RENEW_AT_ATTR),
    Index(RECONCILE_INDEX, SHARD_ATTR, CHECKED_AT_ATTR),
    Index(WAITING_INDEX, WAITING_TYPE_ATTR, WAITING_ORDER_ATTR),
)
"""The table's indexes, each sparse: `due` holds the ACTIVE leases by renew-at (what the extender renews),
`reconcile` the same by checked-at (least recently reconciled first); closing a lease removes its shard,
which takes it out of both. `waiting` holds the WAITING leases by job type, longest waiting first
(admission), and in a partition of each type (`parked_line`) the unclaimed PARKED markers by when their
copy was sent, oldest first: the copies to send again before the waiting queue's retention runs out.
The stack builds these (`longjobs.construct.lease_table`) and the offline runtime creates them
(`table_definition`) from this one list."""

KEY_TYPES = {
    PARTITION_KEY: "S",
    SHARD_ATTR: "N",
    RENEW_AT_ATTR: "N",
    CHECKED_AT_ATTR: "N",
    WAITING_TYPE_ATTR: "S",
    WAITING_ORDER_ATTR: "N",
}
"""Each key attribute's DynamoDB type (`S` string, `N` number)."""


def table_definition(table_name: str) -> dict[str, Any]:
    """`CreateTable` arguments for the lease table: on demand, keyed by `PARTITION_KEY`, with `INDEXES`."""
    return {
        "TableName": table_name,
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [{"AttributeName": name, "AttributeType": kind} for name, kind in KEY_TYPES.items()],
        "KeySchema": [{"AttributeName": PARTITION_KEY, "KeyType": "HASH"}],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": index.name,
                "KeySchema": [
                    {"AttributeName": index.partition, "KeyType": "HASH"},
                    {"AttributeName": index.sort, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
            for index in INDEXES
        ],
    }
