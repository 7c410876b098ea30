"""`stopped_with_cause` (longjobs/sim/properties.py): every stop the extender makes has a cause the trace
shows. An execution whose job succeeded and whose message was then deleted is not stopped: its handle was
refused because the work was done (corpus seed 78; the offline demo under load, issue 37). Nor is one whose
message SQS still hides under the handle its lease names, well before its hard stop: that job is healthy
and its lease holdable (the plant `lost_on_any_error`, a throttle taken for a lost handle, is reported by it;
`tests/sim/test_planted.py`)."""

from __future__ import annotations

from typing import Any

import pytest

from longjobs.sim.properties import Monitor, PropertyViolation, Running
from tests.sim.test_stopped_as_read import ARN, item, monitor


def ran(watched: Monitor, *, succeeded: bool) -> Monitor:
    watched.job_started(Running(ARN, "m-1", "j1", "wait"), item(1))
    watched.job_ended(ARN, succeeded=succeeded)
    return watched


def test_stopped_with_cause_a_stop_after_the_job_succeeded_and_its_message_was_deleted_has_no_cause() -> None:
    watched = ran(monitor(item(1), item(1)), succeeded=True)
    with pytest.raises(PropertyViolation, match="stopped_with_cause") as raised:
        watched.extender_stops("extender:1", ARN, message_deleted=True)
    assert "stopped after its job succeeded" in raised.value.detail


@pytest.mark.parametrize(
    ("succeeded", "deleted"),
    [(True, False), (False, True), (False, False)],
    ids=["succeeded-message-held", "failed-message-gone", "running"],
)
def test_stopped_with_cause_a_stop_of_a_job_not_done_or_a_message_still_held_passes(
    succeeded: bool, deleted: bool
) -> None:
    """A job that failed (its message gone elsewhere) or still holds its message: a cap or a lost handle
    may stop it; the 12 h limit may meet a job that just succeeded before its close lands."""
    watched = monitor(item(1), item(1))
    if succeeded or deleted:
        watched = ran(watched, succeeded=succeeded)
    watched.extender_stops("extender:1", ARN, message_deleted=deleted)
    assert watched.coverage["extender:stop_as_read"] == 1


NOW = 1_700_000_000.0
EARLY = 960.0  # `Monitor.cap_early_s` as the world sets it: the adaptive ceiling (900 s) and the safety (60 s)


def capped(renew_until: float) -> dict[str, Any]:
    return {**item(1), "renew_until": {"N": str(renew_until)}}


@pytest.mark.parametrize(
    ("renew_until", "sqs_limit"),
    [(NOW + 6 * 3_600, NOW + 12 * 3_600), (NOW + 12 * 3_600, NOW + 2_000)],
    ids=["hours-before-the-max-renewal", "before-sqs-12h"],
)
def test_stopped_with_cause_a_stop_of_a_message_sqs_still_hides_under_its_handle_before_the_cap_has_no_cause(
    renew_until: float, sqs_limit: float
) -> None:
    watched = monitor(capped(renew_until), capped(renew_until))
    watched.cap_early_s = EARLY
    with pytest.raises(PropertyViolation, match="stopped_with_cause") as raised:
        watched.extender_stops("extender:1", ARN, held=("m-1#1", sqs_limit, NOW))
    assert "a healthy job, its lease holdable" in raised.value.detail


@pytest.mark.parametrize(
    ("held", "renew_until"),
    [
        (("m-1#1", NOW + 12 * 3_600, NOW), NOW + 30),  # at its max renewal
        (("m-1#1", NOW + 500, NOW), NOW + 12 * 3_600),  # SQS refused a chunk past its 12 h
        (("m-1#2", NOW + 12 * 3_600, NOW), NOW + 12 * 3_600),  # the handle was truly lost: a newer receive
        (None, NOW + 12 * 3_600),  # the message is no longer hidden: its handle expired
    ],
    ids=["max-renewal", "sqs-12h", "newer-handle", "not-in-flight"],
)
def test_stopped_with_cause_a_stop_at_the_cap_or_of_a_handle_truly_lost_passes(
    held: tuple[str, float, float] | None, renew_until: float
) -> None:
    watched = monitor(capped(renew_until), capped(renew_until))
    watched.cap_early_s = EARLY
    watched.extender_stops("extender:1", ARN, held=held)
    assert watched.coverage["extender:stop_as_read"] == 1
