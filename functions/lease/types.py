"""The lease: one item per in-flight message, the single truth about its receipt handle and visibility."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class LeaseStatus(StrEnum):
    ACTIVE = "ACTIVE"  # being renewed
    SUCCEEDED = "SUCCEEDED"  # job done, message deleted
    RELEASED = "RELEASED"  # job failed, message visible again after the release delay
    CAPPED = "CAPPED"  # renewal stopped at the max duration; the message will reappear
    LOST = "LOST"  # SQS no longer accepts the handle: someone else may hold the message
    REJECTED = "REJECTED"  # poison, moved to the DLQ


CLOSED_STATUSES = frozenset(LeaseStatus) - {LeaseStatus.ACTIVE}


@dataclass(frozen=True)
class Lease:
    """One receive of one message. Times are epoch seconds (millisecond precision in the table)."""

    message_id: str
    queue_url: str
    receipt_handle: str
    receive_count: int  # fencing token: a write from an older receive never overwrites a newer one
    received_at: float
    visible_until: float  # our belief of when SQS shows the message again (never later than the truth)
    renew_until: float  # hard stop of renewal for this receive
    status: LeaseStatus = LeaseStatus.ACTIVE
    renew_at: float | None = None  # set only while ACTIVE (sparse due-index sort key)
    renewed_at: float | None = None  # send time of the last renewal
    version: int = 0  # optimistic concurrency
    renewal_count: int = 0
    execution_arn: str | None = None  # the attempt's execution: the one that may touch this message
    attempt: int = 0  # receive count of the receive that started the execution (its name's suffix)
    job_type: str | None = None
    job_id: str | None = None  # the job's own id: its job lock (`functions.lease.lock`) is released with the lease
    release_delay_s: int = 0
    last_error: str | None = None
    result: dict[str, Any] | None = field(default=None, hash=False)
    closed_at: float | None = None
    checked_at: float | None = None  # last reconciliation look (ACTIVE only: the reconcile index's key)

    @property
    def last_renewed_at(self) -> float:
        return self.received_at if self.renewed_at is None else self.renewed_at

    @property
    def active(self) -> bool:
        return self.status is LeaseStatus.ACTIVE
