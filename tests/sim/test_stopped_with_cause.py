"""`stopped_with_cause` (longjobs/sim/properties.py): every stop the extender makes has a cause the trace
shows. An execution whose job succeeded and whose message was then deleted is not stopped: its handle was
refused because the work was done (corpus seed 78; the offline demo under load, issue 37)."""

from __future__ import annotations

import pytest

from longjobs.sim.properties import Monitor, PropertyViolation, Running
from tests.sim.test_stopped_as_read import ARN, item, monitor


def ran(watched: Monitor, *, succeeded: bool) -> Monitor:
    watched.job_started(Running(ARN, "m-1", "j1", "wait"), item(1))
    watched.job_ended(ARN, succeeded=succeeded)
    return watched


def test_a_stop_after_the_job_succeeded_and_its_message_was_deleted_has_no_cause() -> None:
    watched = ran(monitor(item(1), item(1)), succeeded=True)
    with pytest.raises(PropertyViolation, match="stopped_with_cause") as raised:
        watched.extender_stops("extender:1", ARN, message_deleted=True)
    assert "stopped after its job succeeded" in raised.value.detail


@pytest.mark.parametrize(
    ("succeeded", "deleted"),
    [(True, False), (False, True), (False, False)],
    ids=["succeeded-message-held", "failed-message-gone", "running"],
)
def test_a_stop_of_a_job_not_done_or_a_message_still_held_passes(succeeded: bool, deleted: bool) -> None:
    """A job that failed (its message gone elsewhere) or still holds its message: a cap or a lost handle
    may stop it; the 12 h limit may meet a job that just succeeded before its close lands."""
    watched = monitor(item(1), item(1))
    if succeeded or deleted:
        watched = ran(watched, succeeded=succeeded)
    watched.extender_stops("extender:1", ARN, message_deleted=deleted)
    assert watched.coverage["extender:stop_as_read"] == 1
