"""The lease: record, table schema and the DynamoDB store."""

from __future__ import annotations

from functions.lease.lock import Acquired, Held, Lock, Locks, is_lock_key, job_lock_key
from functions.lease.schema import table_definition
from functions.lease.store import LeaseStore, Renewal
from functions.lease.types import CLOSED_STATUSES, Lease, LeaseStatus

__all__ = [
    "CLOSED_STATUSES",
    "Acquired",
    "Held",
    "Lease",
    "LeaseStatus",
    "LeaseStore",
    "Lock",
    "Locks",
    "Renewal",
    "is_lock_key",
    "job_lock_key",
    "table_definition",
]
