"""The simulator's `no_lapse` (`Monitor.received`): a receive of a running job's message is a lapse, except an
injected duplicate and the echoes of one whose handling died before its lease named it."""

from __future__ import annotations

import pytest

from longjobs.sim.properties import Monitor, PropertyViolation, Running

VT = 180.0


def lease(count: int) -> dict[str, dict[str, str]]:
    return {"receive_count": {"N": str(count)}, "status": {"S": "ACTIVE"}, "execution_arn": {"S": "arn-1"}}


def running(message_id: str = "m1") -> Monitor:
    monitor = Monitor(limits={}, queue_vt_s=VT)
    monitor.job_started(Running("arn-1", message_id, "j1", "wait"), lease(1))
    monitor.lease_written(message_id, lease(1))
    return monitor


def test_no_lapse_a_duplicates_echo_is_excused_while_no_receive_of_it_held_the_lease() -> None:
    monitor = running()
    monitor.duplicates.add("m1")
    monitor.received("m1", now=100, hold_ends=None, count=2)  # the injected duplicate; its handling dies
    monitor.received("m1", now=100 + VT, hold_ends=None, count=3)  # its echo; this handling dies too
    monitor.received("m1", now=100 + 2 * VT, hold_ends=None, count=4)  # and this one adopts the attempt
    monitor.lease_written("m1", lease(4))
    with pytest.raises(PropertyViolation, match="no_lapse"):
        monitor.received("m1", now=100 + 3 * VT, hold_ends=None, count=5)  # the lease held receive 4: a lapse


def test_no_lapse_a_receive_long_after_a_duplicate_is_a_lapse() -> None:
    monitor = running()
    monitor.duplicates.add("m1")
    monitor.received("m1", now=100, hold_ends=None, count=2)
    with pytest.raises(PropertyViolation, match="no_lapse"):
        monitor.received("m1", now=100 + VT + 60, hold_ends=None, count=3)
