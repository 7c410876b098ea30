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
    REJECTED = "REJECTED"  # moved to the DLQ by the processor: poison, or its attempts used up
    DEAD_LETTERING = "DEAD_LETTERING"  # its DLQ send claimed, no copy noted yet (`dlq_claim`): REJECTED once noted
    WAITING = "WAITING"  # its type is full: no attempt, the message is held hidden until about when a slot frees
    PARKED = "PARKED"  # copied to its type's waiting queue: the marker that keeps a redelivery from a second copy
    REQUEUED = "REQUEUED"  # its job id ran: copied back to its queue with a delay, the marker names the copy that runs
    CANCELLED = "CANCELLED"  # cancelled by an operator (`longjobs cancel`): stopped, sent to the DLQ, never run again


@dataclass(frozen=True)
class LastError:
    """Why a lease closed (or its last renewal failed), shaped as Step Functions reports an error: a name
    and, when one is known, its cause. The workflow stores what its Catch caught as is, so a job's own
    failure (a Spark `AnalysisException` and its message) reads the same here as in the execution history.

    In the table it is the map `{"Error": ..., "Cause": ...}` (`Cause` left out when there is none);
    `str()` is `"<Error>: <Cause>"`, or the name alone."""

    error: str
    cause: str | None = None

    def __str__(self) -> str:
        return f"{self.error}: {self.cause}" if self.cause else self.error

    def to_data(self) -> dict[str, str]:
        """The stored map, as the workflow writes it."""
        return {"Error": self.error} if self.cause is None else {"Error": self.error, "Cause": self.cause}

    @classmethod
    def from_data(cls, data: Any) -> LastError | None:
        """A stored last error: the map (an empty or missing `Cause` is none), or a plain string (read as
        the name, without a cause), the form older items of a deployed table still hold."""
        if data is None:
            return None
        if isinstance(data, str):
            return cls(data)
        if isinstance(data, dict) and isinstance(data.get("Error"), str):
            cause = data.get("Cause")
            return cls(data["Error"], str(cause) if cause else None)
        raise ValueError(f"not a last error: {data!r}")


CLOSED_STATUSES = frozenset(LeaseStatus) - {LeaseStatus.ACTIVE, LeaseStatus.WAITING}
DONE_STATUSES = frozenset(
    {LeaseStatus.SUCCEEDED, LeaseStatus.REJECTED, LeaseStatus.DEAD_LETTERING, LeaseStatus.CANCELLED}
)
"""The message is done with: deleted after its job succeeded, or in the DLQ (or on its way there)."""
COPIED_STATUSES = frozenset({LeaseStatus.PARKED, LeaseStatus.REQUEUED})
"""The message was acknowledged and a copy carries it on: its marker names the one copy that runs it."""
ENDED_ATTEMPT_STATUSES = frozenset({LeaseStatus.RELEASED, LeaseStatus.CAPPED, LeaseStatus.LOST})
"""How an attempt ends without success: each is a failed attempt in the message's history."""


@dataclass(frozen=True)
class Attempt:
    """One ended attempt of a message, kept in its lease's history (carried to each newer lease)."""

    number: int  # 1 for the message's first execution attempt
    execution: str  # the execution's name
    outcome: str  # the status its lease closed with (RELEASED, CAPPED, LOST)
    error: LastError | None
    ended_at: float | None

    def to_data(self) -> dict[str, Any]:
        return {
            "attempt": self.number,
            "execution": self.execution,
            "outcome": self.outcome,
            "error": None if self.error is None else self.error.to_data(),
            "ended_at": self.ended_at,
        }

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Attempt:
        ended = data.get("ended_at")
        return cls(
            number=int(data["attempt"]),
            execution=str(data.get("execution", "")),
            outcome=str(data.get("outcome", "")),
            error=LastError.from_data(data.get("error")),
            ended_at=float(ended) if ended is not None else None,
        )


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
    renew_at: float | None = None  # set only while ACTIVE, or CANCELLED with its cancel unfinished (due-index key)
    renewed_at: float | None = None  # send time of the last renewal
    version: int = 0  # optimistic concurrency
    renewal_count: int = 0
    execution_arn: str | None = None  # the attempt's execution: the one that may touch this message
    attempt: int = 0  # receive count of the receive that started the execution (its name's suffix)
    job_type: str | None = None
    job_id: str | None = (
        None  # the job's own id: its job lock (`longjobs.engine.lease.lock`) is released with the lease
    )
    release_delay_s: int = 0
    last_error: LastError | None = None
    result: dict[str, Any] | None = field(default=None, hash=False)
    closed_at: float | None = None  # when the processor's code closed it (and set `visible_until` with it)
    workflow_closed_at: float | None = None  # when its workflow closed it (writing no `visible_until`)
    checked_at: float | None = None  # last reconciliation look (ACTIVE only: the reconcile index's key)
    slot: str | None = (
        None  # the admission slot its attempt holds (`longjobs.engine.admission`), released with the lease
    )
    history: tuple[Attempt, ...] = ()  # the message's ended attempts before this one (carried over)
    waiting_since: float | None = None  # when the message first waited for a slot
    sent_at: float | None = None  # WAITING: when its message was sent (SQS deletes it the retention after)
    waiting_order: float | None = None  # WAITING: its place in its type's line (when it joined the line in flight)
    waits: int = 0  # how many times the message was put back to wait for a slot (its delay doubles)
    job: str | None = None  # WAITING: the job as JSON, so an admission can start it without a receive
    # PARKED, REQUEUED: the message id of the copy sent, once known; REJECTED: the DLQ copy's, once noted
    copy_id: str | None = None
    copy_sent_at: float | None = None  # PARKED: when the copy that may run it was sent, at the latest (`parked_line`)
    parked_message: str | None = None  # PARKED: the message as sent (`stored_message`), to send a fresh copy
    # PARKED, REQUEUED: when `claimed_by` last claimed it (each receive claims); DEAD_LETTERING: its send's
    claimed_at: float | None = None
    # PARKED, REQUEUED: the copy that runs the job (any other copy is acknowledged); DEAD_LETTERING, REJECTED:
    # the receive that sends the message to the DLQ (`longjobs.engine.delivery.dlq_claim`)
    claimed_by: str | None = None
    claim_kept_until: float | None = None  # PARKED, REQUEUED: until when a lease the claimant wrote is surely kept
    never_started: bool = False  # closed with its execution never started: no attempt of the message
    refused_starts: int = 0  # earlier leases of the message whose execution never started (starts refused)
    group_id: str | None = None  # FIFO: the message's group, which a cancel's DLQ copy keeps (its order on redrive)

    @property
    def waiting(self) -> bool:
        return self.status is LeaseStatus.WAITING

    def ended_attempt(self) -> Attempt | None:
        """This lease's attempt as a history entry, when it was an attempt that ended without success."""
        if self.status not in ENDED_ATTEMPT_STATUSES or not self.execution_arn or self.never_started:
            return None  # an execution that never started (a throttled StartExecution) spent no attempt
        return Attempt(
            number=len(self.history) + 1,
            execution=self.execution_arn.rpartition(":")[2],
            outcome=self.status.value,
            error=self.last_error,
            ended_at=self.closed_at if self.closed_at is not None else self.workflow_closed_at,
        )

    def refused_starts_with_this(self) -> int:
        """The starts refused so far that a newer lease of this message carries: this one's count, and
        this lease if it closed with its execution never started."""
        return self.refused_starts + int(self.never_started and self.status in ENDED_ATTEMPT_STATUSES)

    def history_with_this(self) -> tuple[Attempt, ...]:
        """The history a newer lease of this message carries: this one's, and this attempt if it failed."""
        ended = self.ended_attempt()
        return (*self.history, ended) if ended is not None else self.history

    @property
    def last_renewed_at(self) -> float:
        return self.received_at if self.renewed_at is None else self.renewed_at

    @property
    def active(self) -> bool:
        return self.status is LeaseStatus.ACTIVE


def successor_version(replaced: Lease | None) -> int:
    """The version of a lease written over `replaced` (0 for a message's first): one past it, so a
    message's versions only grow, across its leases as within one. A writer that read an earlier lease
    then never finds its version on a later one, which a restart at 0 would allow (an old extender's
    renewal, conditional on version 0, landing on a newer receive's lease)."""
    return 0 if replaced is None else replaced.version + 1
