"""Waiting on the real offline runtime in tests of its wiring (its threads act on their own schedule):
poll with a generous bound, since the machine may be busy. Protocol logic is checked on virtual time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def eventually(check: Callable[[], Any], what: str, timeout_s: float = 90) -> Any:
    """Poll `check` until it returns a true value; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def past_start_check(stepfunctions: Any, execution_arn: str) -> None:
    """Wait until an execution's workflow is past its start check, in its job (moto refuses a stop
    before the first state)."""
    eventually(
        lambda: (
            "ParallelStateEntered"
            in [event["type"] for event in stepfunctions.get_execution_history(executionArn=execution_arn)["events"]]
        ),
        "the workflow past its start check, in its job",
    )
