"""The names of the faults a run injects, as its history records them: what can happen to one AWS call,
and what can happen between the steps of a run. The simulation draws them (`longjobs.sim.faults`), and
the offline runtime injects them by the same names (`longjobs.offline.faults`)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["CallFault", "WorldFault"]


class CallFault(StrEnum):
    """What can happen to one AWS call."""

    THROTTLED = "throttled"  # refused before it took effect, with the service's throttling error
    SERVER_ERROR = "server_error"  # a 5xx before it took effect
    TIMEOUT = "timeout"  # no answer, and no effect: the client's read timed out
    ANSWER_LOST = "answer_lost"  # it took effect, then the caller saw a 5xx or a timeout
    CRASH_BEFORE = "crash_before"  # the calling function dies before the call leaves
    CRASH_AFTER = "crash_after"  # the calling function dies after the call took effect


class WorldFault(StrEnum):
    """What can happen between steps, outside any call."""

    EXTENDER_LATE = "extender_late"
    EXTENDER_SKIPPED = "extender_skipped"
    EVENT_LOST = "event_lost"
    EVENT_DUPLICATED = "event_duplicated"
    EVENT_LATE = "event_late"
    DUPLICATE_DELIVERY = "duplicate_delivery"
    FUNCTION_TIMEOUT = "function_timeout"
    JOB_HANGS = "job_hangs"
    JOB_VANISHES = "job_vanishes"
    JOB_FAILS = "job_fails"
