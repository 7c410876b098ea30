"""Execution names and ARNs: the contract that lets anyone find a lease from its execution; and a start
told apart as refused (surely not started) or unknown (to be asked about)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from longjobs.engine.execution import (
    ExecutionInput,
    StartRefused,
    execution_arn,
    execution_name,
    parse_execution_name,
    start_or_refused,
)
from longjobs.engine.settings import BODY_MAX_BYTES, EXECUTION_INPUT_MAX_BYTES, Settings
from longjobs.sim.clock import FakeClock

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


def test_execution_input_of_the_largest_body_fits_step_functions() -> None:
    """The largest body `max_body_bytes` allows, all of it three-byte characters, travels in an input
    under Step Functions' 256 KiB of UTF-8 (https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html):
    escaped, each character would cost six bytes, twice its own."""
    text = "é€" * ((BODY_MAX_BYTES - 200) // 5)
    job = {"job_id": "j", "type": "mine", "params": {"text": text}}
    assert len(json.dumps(job, ensure_ascii=False).encode()) <= BODY_MAX_BYTES
    payload = ExecutionInput(
        message_id=MESSAGE_ID,
        attempt=99,
        queue_url="https://sqs.eu-west-1.amazonaws.com/111122223333/" + "q" * 80,
        release_delay_s=900,
        job=job,
        slot="slot#" + "t" * 64 + "#9",
    )
    assert len(payload.to_json().encode()) <= EXECUTION_INPUT_MAX_BYTES
    assert json.loads(payload.to_json())["job"]["params"]["text"] == text
    with pytest.raises(ValueError, match="less than or equal to"):
        Settings(max_body_bytes=BODY_MAX_BYTES + 1)


# -- a start refused, or unknown -----------------------------------------------------------------------
# Step Functions' common errors (https://docs.aws.amazon.com/step-functions/latest/apireference/CommonErrors.html):
# ThrottlingException "The request was denied due to request throttling" (HTTP 400), InternalFailure
# "The request processing has failed" (HTTP 500). StartExecution's own errors
# (https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html) refuse the
# request too: StateMachineDoesNotExist, InvalidExecutionInput, ExecutionLimitExceeded, ...


def _error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "StartExecution"
    )


THROTTLED = _error("ThrottlingException", 400)
MISSING = _error("StateMachineDoesNotExist", 400)
ABORTED = _error("RequestAbortedException", 400)  # a common error, neither a throttle nor StartExecution's own
INTERNAL = _error("InternalFailure", 500)
TIMEOUT = ReadTimeoutError(endpoint_url="https://states.eu-west-1.amazonaws.com/")
STARTED = {"executionArn": "started"}


class ScriptedStarts:
    """A Step Functions client whose StartExecution answers, in turn, as scripted."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = list(answers)
        self.calls = 0

    def start_execution(self, **request: Any) -> dict[str, Any]:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)


@pytest.mark.parametrize(
    ("answers", "expected", "calls"),
    [
        ([STARTED], "started", 1),
        ([THROTTLED, STARTED], "started", 2),
        ([THROTTLED, THROTTLED, THROTTLED], "refused", 3),
        ([MISSING], "refused", 1),  # not retried: no retry can make it exist
        ([THROTTLED, MISSING], "refused", 2),
        ([TIMEOUT, THROTTLED, THROTTLED], "unknown", 3),  # the timed-out attempt may have started it
        ([INTERNAL, THROTTLED, THROTTLED], "unknown", 3),
        ([THROTTLED, THROTTLED, INTERNAL], "unknown", 3),
        ([INTERNAL, INTERNAL, INTERNAL], "unknown", 3),
        ([ABORTED], "unknown", 1),
        ([_error("ExecutionAlreadyExists", 400)], "started", 1),  # this attempt's execution, started before
    ],
    ids=[
        "started",
        "throttled-then-started",
        "throttled-every-attempt",
        "state-machine-missing",
        "throttled-then-missing",
        "timeout-then-throttled",
        "5xx-then-throttled",
        "throttled-then-5xx",
        "5xx-every-attempt",
        "undocumented-4xx",
        "already-exists",
    ],
)
def test_execution_start_refused_only_when_every_attempt_was(answers: list[Any], expected: str, calls: int) -> None:
    starts, clock = ScriptedStarts(answers), FakeClock()
    before = clock.now()
    payload = ExecutionInput(message_id=MESSAGE_ID, attempt=1, queue_url="q", release_delay_s=0, job={"job_id": "j"})
    try:
        start_or_refused(starts, SM, payload, clock=clock, rng=random.Random(3))  # type: ignore[arg-type]
        outcome = "started"
    except StartRefused:
        outcome = "refused"
    except (ClientError, ReadTimeoutError):
        outcome = "unknown"
    assert (outcome, starts.calls) == (expected, calls)
    # botocore's standard backoff: below 1 s before the second attempt, below 2 s before the third
    assert clock.now() - before <= sum(2.0**retry for retry in range(calls - 1))
