"""`cancelled_never_succeeds` (longjobs/sim/properties.py): a message in the DLQ as `Cancelled` never has an
execution of it end SUCCEEDED afterwards (issue 38). The simulation has no operator actor yet, so the
campaign holds it vacuously; here the monitor is driven by hand, and tests/functional/test_cancel_cut_short.py
drives the engine on moto. Also `stopped_as_read`'s allowance for the stop of a cancel the extender finishes."""

from __future__ import annotations

from typing import Any

import pytest

from longjobs.sim.properties import ALWAYS, Monitor, PropertyViolation

ARN = "arn:aws:states:us-east-1:123456789012:execution:long-jobs:m-1-1"
KEY = {"pk": {"S": "m-1"}}


def dlq_attributes(error_type: str, original: str = "m-1") -> dict[str, Any]:
    return {
        "ErrorType": {"DataType": "String", "StringValue": error_type},
        "OriginalMessageId": {"DataType": "String", "StringValue": original},
    }


def test_cancelled_never_succeeds_is_an_always_property() -> None:
    assert "cancelled_never_succeeds" in ALWAYS


def test_cancelled_never_succeeds_a_success_after_the_cancelled_dlq_copy_breaks_it() -> None:
    watched = Monitor(limits={})
    watched.sent["job-1"] = 1
    watched.dead_lettered_copy("job-1", dlq_attributes("Cancelled"), "dlq-copy-1")

    with pytest.raises(PropertyViolation, match="cancelled_never_succeeds: job job-1 succeeded from message m-1"):
        watched.job_recorded("job-1", "m-1")


def test_cancelled_never_succeeds_a_success_of_a_copy_of_the_cancelled_message_breaks_it() -> None:
    watched = Monitor(limits={})
    watched.copied("copy-1", "m-1")
    watched.dead_lettered_copy("job-1", dlq_attributes("Cancelled", original="copy-1"), "dlq-copy-1")

    with pytest.raises(PropertyViolation, match="cancelled_never_succeeds"):
        watched.job_recorded("job-1", "m-1")


@pytest.mark.parametrize(("error_type", "message_id"), [("AttemptsExhausted", "m-1"), ("Cancelled", "m-2")])
def test_cancelled_never_succeeds_other_dlq_copies_and_other_messages_leave_it_alone(
    error_type: str, message_id: str
) -> None:
    watched = Monitor(limits={})
    watched.sent["job-1"] = 2
    watched.dead_lettered_copy("job-1", dlq_attributes(error_type), "dlq-copy-1")

    watched.job_recorded("job-1", message_id)

    assert watched.done["job-1"] == 1


def test_cancelled_never_succeeds_stopped_as_read_allows_the_extender_to_stop_a_cancelled_leases_own_execution() -> (
    None
):
    planned = {**KEY, "status": {"S": "CANCELLED"}, "execution_arn": {"S": ARN}}
    watched = Monitor(limits={})
    watched.extender_answered("extender:1", "query", {"IndexName": "due"}, {"Items": [planned]})
    watched.extender_answered("extender:1", "get_item", {"Key": KEY, "ConsistentRead": True}, {"Item": planned})

    watched.extender_stops("extender:1", ARN)

    other = {**planned, "execution_arn": {"S": ARN.replace("m-1-1", "m-1-2")}}
    watched.extender_answered("extender:2", "query", {"IndexName": "due"}, {"Items": [other]})
    watched.extender_answered("extender:2", "get_item", {"Key": KEY, "ConsistentRead": True}, {"Item": other})
    with pytest.raises(PropertyViolation, match="stopped_as_read"):
        watched.extender_stops("extender:2", ARN)
