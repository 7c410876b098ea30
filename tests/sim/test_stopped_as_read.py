"""`stopped_as_read` (longjobs/sim/properties.py): the extender stops an execution only on what it read, its
consistent re-read of the lease showing it ACTIVE, naming the execution, of the receive it planned on.
The campaign's side of it: `tests/sim/test_planted.py` (`handle_check`)."""

from __future__ import annotations

from typing import Any

import pytest

from longjobs.sim.properties import Monitor, PropertyViolation

ARN = "arn:aws:states:us-east-1:123456789012:execution:long-jobs:m-1-1"
KEY = {"pk": {"S": "m-1"}}


def item(receive_count: int, *, status: str = "ACTIVE", arn: str = ARN) -> dict[str, Any]:
    return {
        **KEY,
        "status": {"S": status},
        "execution_arn": {"S": arn},
        "receive_count": {"N": str(receive_count)},
        "receipt_handle": {"S": f"m-1#{receive_count}"},
    }


def monitor(planned: dict[str, Any], read: dict[str, Any] | None, *, invocation: str = "extender:1") -> Monitor:
    watched = Monitor(limits={})
    watched.extender_answered("extender:1", "query", {"IndexName": "due"}, {"Items": [planned]})
    if read is not None:
        watched.extender_answered(invocation, "get_item", {"Key": KEY, "ConsistentRead": True}, {"Item": read})
    return watched


def test_stopped_as_read_stopped_as_read_passes_a_stop_of_the_receive_it_planned_on() -> None:
    watched = monitor(item(1), item(1))
    watched.extender_stops("extender:1", ARN)
    assert watched.coverage["extender:stop_as_read"] == 1


@pytest.mark.parametrize(
    ("read", "invocation", "found"),
    [
        (item(2), "extender:1", "for the receive ('2', 'm-1#2')"),  # a redelivery adopted the execution
        (item(1, status="LOST"), "extender:1", "is LOST naming"),
        (item(1, arn=ARN.replace("-1-1", "-1-2")), "extender:1", "naming arn:aws:states:us-east-1:123456789012"),
        (None, "extender:1", "no read of its lease"),
        (item(1), "extender:2", "no read of its lease"),  # another invocation's read is not this one's evidence
    ],
    ids=["newer-receive", "closed", "other-execution", "no-read", "other-invocation"],
)
def test_stopped_as_read_stopped_as_read_refuses_a_stop_the_read_does_not_bear(
    read: dict[str, Any] | None, invocation: str, found: str
) -> None:
    watched = monitor(item(1), read, invocation=invocation)
    with pytest.raises(PropertyViolation, match="stopped_as_read") as raised:
        watched.extender_stops("extender:1", ARN)
    assert found in raised.value.detail
