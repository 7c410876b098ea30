"""The lease: record, table schema and the DynamoDB store."""

from __future__ import annotations

from functions.lease.schema import table_definition
from functions.lease.store import LeaseStore, Renewal
from functions.lease.types import CLOSED_STATUSES, Lease, LeaseStatus

__all__ = [
    "CLOSED_STATUSES",
    "Lease",
    "LeaseStatus",
    "LeaseStore",
    "Renewal",
    "table_definition",
]
