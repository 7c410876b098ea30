"""The simulator's `newest_receive` (`Monitor.lease_written`): a lease never goes back to an older receive."""

from __future__ import annotations

import pytest

from longjobs.sim.properties import Monitor, PropertyViolation


def lease(count: int) -> dict[str, dict[str, str]]:
    return {"receive_count": {"N": str(count)}, "status": {"S": "ACTIVE"}}


def test_newest_receive_newest_receive_a_lease_written_by_an_older_receive_breaks() -> None:
    monitor = Monitor(limits={})
    monitor.lease_written("m1", lease(2))
    monitor.lease_written("m1", lease(3))
    monitor.lease_written("m1", lease(3))  # the same receive writes again (a renewal, a close)
    with pytest.raises(PropertyViolation, match="newest_receive: the lease of m1 went back from receive 3 to 2"):
        monitor.lease_written("m1", lease(2))


def test_newest_receive_newest_receive_a_deleted_lease_starts_afresh() -> None:
    monitor = Monitor(limits={})
    monitor.lease_written("m1", lease(4))
    monitor.lease_written("m1", None)
    monitor.lease_written("m1", lease(1))
    monitor.lease_written("m2", lease(1))  # another message's lease counts on its own
