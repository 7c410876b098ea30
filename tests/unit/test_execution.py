"""Execution names and ARNs: the contract that lets anyone find a lease from its execution."""

from __future__ import annotations

import pytest

from longjobs.engine.execution import ExecutionInput, execution_arn, execution_name, parse_execution_name

SM = "arn:aws:states:eu-west-1:111122223333:stateMachine:long-jobs"
MESSAGE_ID = "0f6a3c52-5a7e-4a0e-9b8b-2f2f0c1e9d11"


def test_execution_name_round_trips_to_message_and_attempt() -> None:
    name = execution_name(MESSAGE_ID, 3)
    assert name == f"{MESSAGE_ID}-3"
    assert parse_execution_name(name) == (MESSAGE_ID, 3)


@pytest.mark.parametrize("name", ["manual-run", "abc", "-3", "x-3a"])
def test_parse_execution_name_refuses_foreign_names(name: str) -> None:
    assert parse_execution_name(name) is None


def test_execution_name_too_long_is_refused() -> None:
    with pytest.raises(ValueError, match="80 characters"):
        execution_name("m" * 80, 1)


def test_execution_arn_from_state_machine_arn() -> None:
    assert execution_arn(SM, "n-1") == "arn:aws:states:eu-west-1:111122223333:execution:long-jobs:n-1"
    with pytest.raises(ValueError, match="not a state machine ARN"):
        execution_arn("arn:aws:sqs:eu-west-1:111122223333:jobs", "n-1")


def test_execution_input_is_canonical_json() -> None:
    payload = ExecutionInput(message_id="m", attempt=2, queue_url="q", release_delay_s=30, job={"b": 1, "a": 2})
    assert (
        payload.to_json() == '{"attempt":2,"job":{"a":2,"b":1},"message_id":"m","queue_url":"q","release_delay_s":30}'
    )
