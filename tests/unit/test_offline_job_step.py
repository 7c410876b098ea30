"""`longjobs.offline.observe.job_step`: whether an execution's job step succeeded, from its history events.

Step Functions ends a state a `StopExecution` interrupts with its own aborted event; the HistoryEvent
types include `ParallelStateAborted` and `WaitStateAborted`
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_HistoryEvent.html). moto's interpreter
writes `ParallelStateSucceeded` there instead, then `ExecutionAborted`
(`tests/functional/test_offline_job_step_moto.py` pins that). A stopped job step is no success: its
workflow never went on to delete the message.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from longjobs.offline.observe import JOB_STATE, job_step


def event(at: int, kind: str, state: str | None = None) -> dict[str, Any]:
    entered = {"stateEnteredEventDetails": {"name": state}} if state is not None else {}
    return {"timestamp": datetime.fromtimestamp(at, UTC), "type": kind, **entered}


START = [event(0, "ExecutionStarted"), event(1, "ParallelStateEntered", JOB_STATE), event(1, "ParallelStateStarted")]


@pytest.mark.parametrize(
    ("history", "expected", "why"),
    [
        (
            [*START, event(9, "ParallelStateSucceeded"), event(9, "TaskStateEntered", "ReadLease")],
            (1, 9, True),
            "the job step succeeded and the workflow went on to its success path",
        ),
        (
            [*START, event(9, "ParallelStateAborted"), event(9, "ExecutionAborted")],
            (1, 9, False),
            "stopped, as Step Functions writes it",
        ),
        (
            [*START, event(9, "ParallelStateSucceeded"), event(9, "ExecutionAborted")],
            (1, 9, False),
            "stopped, as moto's interpreter writes it",
        ),
        (
            [*START, event(9, "ParallelStateFailed"), event(9, "TaskStateEntered", "ReadLeaseForRelease")],
            (1, 9, False),
            "the job failed",
        ),
        (START, (1, None, False), "still running"),
        ([event(0, "ExecutionStarted")], (None, None, False), "never got to its job"),
    ],
)
def test_offline_job_step_success_only_when_the_workflow_went_on(
    history: list[dict[str, Any]], expected: tuple[float | None, float | None, bool], why: str
) -> None:
    assert job_step(history) == expected, why
