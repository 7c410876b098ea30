"""The simulator's `no_lapse` (`Monitor.received`): a receive of a running job's message is a lapse, except an
injected duplicate and the echoes of one whose handling died (no outcome) before the next receive."""

from __future__ import annotations

import pytest

from longjobs.sim.properties import Monitor, PropertyViolation, Running

VT = 180.0


def running(message_id: str = "m1") -> Monitor:
    monitor = Monitor(limits={})
    lease = {"receive_count": {"N": "1"}, "status": {"S": "ACTIVE"}, "execution_arn": {"S": "arn-1"}}
    monitor.job_started(Running("arn-1", message_id, "j1", "wait"), lease)
    return monitor


def test_no_lapse_no_lapse_a_duplicates_echo_is_excused_until_a_receive_of_it_has_an_outcome() -> None:
    monitor = running()
    monitor.duplicates.add("m1")
    monitor.received("m1", now=100, hold_ends=None)  # the injected duplicate; its handling dies
    monitor.received("m1", now=100 + VT, hold_ends=None)  # its echo; this handling dies too
    monitor.received("m1", now=100 + 2 * VT, hold_ends=None)  # and this one adopts the attempt
    monitor.handled("m1")
    with pytest.raises(PropertyViolation, match="no_lapse"):
        monitor.received("m1", now=100 + 3 * VT, hold_ends=None)  # the lease held that receive: a lapse


def test_no_lapse_no_lapse_a_receive_after_a_handled_duplicate_is_a_lapse() -> None:
    monitor = running()
    monitor.duplicates.add("m1")
    monitor.received("m1", now=100, hold_ends=None)
    monitor.handled("m1")
    with pytest.raises(PropertyViolation, match="no_lapse"):
        monitor.received("m1", now=100 + VT, hold_ends=None)
