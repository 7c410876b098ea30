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
    """Wait until an execution's job branch has started, so that a StopExecution stops a running job.

    moto refuses a stop before the workflow's first state. A stop that lands before the branch starts ends
    the execution ABORTED before its job runs (`longjobs.offline.stops`), which is not the stop these tests
    mean.
    """

    def branch_started() -> bool:
        types = [event["type"] for event in stepfunctions.get_execution_history(executionArn=execution_arn)["events"]]
        return "ParallelStateStarted" in types and types[-1] != "ParallelStateStarted"

    eventually(branch_started, "the execution's job branch started")
