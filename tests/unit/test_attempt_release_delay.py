"""A new attempt's release delay within its message's retention (`attempt.within_retention`)."""

from __future__ import annotations

import pytest

from longjobs.engine.delivery.attempt import RELEASE_SLACK_S, within_retention
from longjobs.engine.lease import Lease
from longjobs.engine.settings import Settings

SENT = 1_000.0
SETTINGS = Settings(max_renewal_s=300, queue_retention_s=1_200)
DELETED = SENT + 1_200


def _lease(renew_until: float, delay_s: int) -> Lease:
    return Lease(
        message_id="m",
        queue_url="q",
        receipt_handle="h",
        receive_count=1,
        received_at=renew_until - 300,
        visible_until=renew_until - 270,
        renew_until=renew_until,
        release_delay_s=delay_s,
    )


@pytest.mark.parametrize(
    ("sent_at", "renew_until", "delay_s", "expected"),
    [
        pytest.param(SENT, SENT + 300, 24, 24, id="room-to-spare"),
        pytest.param(SENT, DELETED - RELEASE_SLACK_S - 10, 24, 10, id="cut-to-the-room"),
        pytest.param(SENT, DELETED - RELEASE_SLACK_S, 24, 0, id="no-room"),
        pytest.param(SENT, DELETED - 1, 24, 0, id="hold-ends-at-the-deletion"),
        pytest.param(None, DELETED - 1, 24, 24, id="send-time-unknown"),
    ],
)
def test_attempt_release_delay_shows_the_message_before_sqs_deletes_it(
    sent_at: float | None, renew_until: float, delay_s: int, expected: int
) -> None:
    assert within_retention(_lease(renew_until, delay_s), sent_at, SETTINGS) == expected
