"""The lease: record, table schema and the DynamoDB store."""

from __future__ import annotations

from longjobs.engine.lease.lock import Hold, Lock, Locks, hold_keys, is_lease_key, is_lock_key, job_lock_key
from longjobs.engine.lease.renewals import Renewal
from longjobs.engine.lease.schema import table_definition
from longjobs.engine.lease.store import LeaseStore
from longjobs.engine.lease.types import CLOSED_STATUSES, LastError, Lease, LeaseStatus, successor_version

__all__ = [
    "CLOSED_STATUSES",
    "Hold",
    "LastError",
    "Lease",
    "LeaseStatus",
    "LeaseStore",
    "Lock",
    "Locks",
    "Renewal",
    "hold_keys",
    "is_lease_key",
    "is_lock_key",
    "job_lock_key",
    "successor_version",
    "table_definition",
]
