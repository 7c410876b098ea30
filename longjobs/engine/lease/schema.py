"""Names of the lease table's keys and index, shared by the store, the stack and the offline runtime."""

from __future__ import annotations

from typing import Any

PARTITION_KEY = "pk"
DUE_INDEX = "due"
RECONCILE_INDEX = "reconcile"
WAITING_INDEX = "waiting"
WAITING_TYPE_ATTR = "waiting_type"  # set only on WAITING leases: the waiting index's partition key
WAITING_ORDER_ATTR = "waiting_order"  # a WAITING lease's place in its type's line (the index's sort key)
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


def parked_line(job_type: str) -> str:
    """The `waiting` index partition of a type's PARKED markers (job type names have no `#`)."""
    return PARKED_LINE_PREFIX + job_type


def table_definition(table_name: str) -> dict[str, Any]:
    """`CreateTable` arguments for the lease table: on-demand, with two sparse sharded indexes of the ACTIVE
    leases: `due` by renew-at (what the extender renews) and `reconcile` by checked-at (least recently
    reconciled first). Closing a lease removes its shard, which takes it out of both. A third sparse
    index, `waiting`, holds the WAITING leases by job type, longest waiting first (admission), and in a
    partition of each type (`parked_line`) the unclaimed PARKED markers by when their copy was sent, oldest
    first: the copies to send again before the waiting queue's retention runs out."""
    return {
        "TableName": table_name,
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [
            {"AttributeName": PARTITION_KEY, "AttributeType": "S"},
            {"AttributeName": SHARD_ATTR, "AttributeType": "N"},
            {"AttributeName": RENEW_AT_ATTR, "AttributeType": "N"},
            {"AttributeName": CHECKED_AT_ATTR, "AttributeType": "N"},
            {"AttributeName": WAITING_TYPE_ATTR, "AttributeType": "S"},
            {"AttributeName": WAITING_ORDER_ATTR, "AttributeType": "N"},
        ],
        "KeySchema": [{"AttributeName": PARTITION_KEY, "KeyType": "HASH"}],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": DUE_INDEX,
                "KeySchema": [
                    {"AttributeName": SHARD_ATTR, "KeyType": "HASH"},
                    {"AttributeName": RENEW_AT_ATTR, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            },
            {
                "IndexName": RECONCILE_INDEX,
                "KeySchema": [
                    {"AttributeName": SHARD_ATTR, "KeyType": "HASH"},
                    {"AttributeName": CHECKED_AT_ATTR, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            },
            {
                "IndexName": WAITING_INDEX,
                "KeySchema": [
                    {"AttributeName": WAITING_TYPE_ATTR, "KeyType": "HASH"},
                    {"AttributeName": WAITING_ORDER_ATTR, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            },
        ],
    }
