"""The contract between the receiver, the workflow and the watcher: execution names, ARNs and input.

An execution is named `<message id>-<receive count>` after the receive that started it, so its ARN is
known before it starts (the lease stores it up front), a second start of the same attempt is
idempotent, and the watcher can find the lease of any execution from its name alone.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import cache
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field

from longjobs.engine.aws import RETRY_ATTEMPTS
from longjobs.engine.clock import Clock

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient

EXECUTION_NAME_MAX = 80
RUNNING_STATUSES = frozenset({"RUNNING", "PENDING_REDRIVE"})
NEVER_STARTED = "NEVER_STARTED"
"""Stands for an execution that does not exist: the receiver stopped between the lease and the start."""
STOP_ERROR = "LeaseNotHeld"
"""The error of an execution the processor stopped because its message could no longer be held."""
JOB_FAILED_CAUSE = "the job failed; the lease's last_error has its cause"
"""The cause of an execution whose attempt failed (the workflow's `JobFailed` state): the job's own cause
is on the lease (`last_error`), and in the history each newer lease of the message carries."""
JOB_STEP_ERRORS = frozenset({"JobTimedOut", "UnknownJobType", "WaitJobFailed"})
"""The errors the workflow's job step raises by itself (its Fail states), not a runner's report of its run.
`JobTimedOut` is a task that timed out: its run may go on."""


def execution_name(message_id: str, attempt: int) -> str:
    name = f"{message_id}-{attempt}"
    if len(name) > EXECUTION_NAME_MAX:
        raise ValueError(f"execution name {name!r} is longer than Step Functions' {EXECUTION_NAME_MAX} characters")
    return name


def parse_execution_name(name: str) -> tuple[str, int] | None:
    """(message id, attempt) of an execution this project named; None for any other name."""
    message_id, _, attempt = name.rpartition("-")
    if not message_id or not attempt.isdigit():
        return None
    return message_id, int(attempt)


def execution_arn(state_machine_arn: str, name: str) -> str:
    """The ARN an execution of `name` gets: `...:execution:<state machine name>:<name>`."""
    parts = state_machine_arn.split(":")
    if len(parts) != 7 or parts[5] != "stateMachine":
        raise ValueError(f"not a state machine ARN: {state_machine_arn!r}")
    return ":".join([*parts[:5], "execution", parts[6], name])


class ExecutionInput(BaseModel):
    """What the workflow reads (docs/design.md, section 7). Built only from the lease and the message
    body, so starting the same attempt twice sends the same input (StartExecution is then idempotent)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    message_id: str
    attempt: int = Field(ge=1, description="Receive count of the receive that started this execution.")
    queue_url: str
    release_delay_s: int = Field(ge=0, description="Visibility the failure path gives the message back with.")
    job: dict[str, Any]
    slot: str | None = Field(
        default=None, description="The admission slot the attempt holds (released on each end); absent: none."
    )

    def to_json(self) -> str:
        """The input as sent. Step Functions counts its UTF-8 bytes: an escaped character would cost six."""
        return json.dumps(self.model_dump(exclude_none=True), separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def execution_status(stepfunctions: SFNClient, arn: str | None) -> str:
    """The execution's status, or NEVER_STARTED when it does not exist."""
    return execution_times(stepfunctions, arn).status


@dataclass(frozen=True)
class ExecutionTimes:
    """An execution as DescribeExecution tells it: its status (NEVER_STARTED when it does not exist), and
    when it started and ended (epoch seconds; None when it never started, or runs still)."""

    status: str
    started_at: float | None = None
    stopped_at: float | None = None


def execution_times(stepfunctions: SFNClient, arn: str | None) -> ExecutionTimes:
    """The execution's status and times (`ExecutionTimes`)."""
    if not arn:
        return ExecutionTimes(NEVER_STARTED)
    try:
        described = stepfunctions.describe_execution(executionArn=arn)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ExecutionDoesNotExist":
            return ExecutionTimes(NEVER_STARTED)
        raise
    started, stopped = described.get("startDate"), described.get("stopDate")
    return ExecutionTimes(
        described["status"],
        started.timestamp() if started is not None else None,
        stopped.timestamp() if stopped is not None else None,
    )


def start_execution(stepfunctions: SFNClient, state_machine_arn: str, payload: ExecutionInput) -> str:
    """Start the attempt's execution (a second start of the same attempt returns the same ARN)."""
    name = execution_name(payload.message_id, payload.attempt)
    try:
        response = stepfunctions.start_execution(stateMachineArn=state_machine_arn, name=name, input=payload.to_json())
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ExecutionAlreadyExists":
            raise
        # Same name, other input: only an older build could have started it. It is this attempt's run.
        return execution_arn(state_machine_arn, name)
    return response["executionArn"]


class StartRefused(Exception):
    """Step Functions refused every attempt of a start (a throttle, or an error StartExecution documents):
    the execution was not started."""


START_BACKOFF_CAP_S = 20.0
"""botocore's standard mode: the n-th retry waits a random time below min(20, 2^(n-1)) seconds."""


def start_or_refused(
    starts: SFNClient, state_machine_arn: str, payload: ExecutionInput, *, clock: Clock, rng: random.Random
) -> str:
    """Start the attempt's execution as `start_execution`, on a client that makes one attempt a call
    (`longjobs.engine.aws.starts`), retried as botocore's standard mode retries (its own rules decide
    what is retried; full-jitter backoff; `RETRY_ATTEMPTS` attempts). Raises `StartRefused` when every
    attempt was refused: a throttle, or an error StartExecution itself documents (a missing state
    machine, an invalid input). Such a request was not processed, so the execution surely does not
    exist. botocore's own retries would hide the earlier attempts: one that timed out or met a 5xx may
    have started it, and its error is lost behind the last attempt's throttle. Any other last error is
    raised as it is, for the caller to ask whether the execution exists."""
    from botocore.retries.standard import RetryContext, StandardRetryConditions

    conditions = StandardRetryConditions(max_attempts=RETRY_ATTEMPTS)
    maybe_landed = False
    for attempt in range(1, RETRY_ATTEMPTS + 1):
        try:
            return start_execution(starts, state_machine_arn, payload)
        except Exception as exc:
            answer = exc.response if isinstance(exc, ClientError) else None
            model = _start_model(starts)
            context = RetryContext(
                attempt_number=attempt,
                operation_model=model,
                parsed_response=answer,
                http_response=None if answer is None else _status(answer),
                caught_exception=exc if answer is None else None,
            )
            maybe_landed = maybe_landed or not _refused(context, model)
            if not conditions.is_retryable(context):
                if maybe_landed:
                    raise
                raise StartRefused(str(exc)) from exc
            clock.sleep(rng.random() * min(START_BACKOFF_CAP_S, 2.0 ** (attempt - 1)))
    raise AssertionError("unreachable: the last attempt is never retried")


def refused_outright(exc: Exception, stepfunctions: SFNClient) -> bool:
    """Whether a start's error, from a client that retries by itself, says Step Functions refused its only
    attempt unprocessed (`_refused`). A retried call's earlier attempt may have met a 5xx or a timeout after
    it landed, and its last error hides it; so may any error that is no answer of Step Functions."""
    if not isinstance(exc, ClientError) or exc.response.get("ResponseMetadata", {}).get("RetryAttempts"):
        return False
    from botocore.retries.standard import RetryContext

    model = _start_model(stepfunctions)
    context = RetryContext(
        attempt_number=1,
        operation_model=model,
        parsed_response=exc.response,
        http_response=_status(exc.response),
        caught_exception=None,
    )
    return _refused(context, model)


def _status(answer: Any) -> SimpleNamespace:
    """The HTTP response botocore's retry rules read: its status code alone."""
    return SimpleNamespace(status_code=answer.get("ResponseMetadata", {}).get("HTTPStatusCode"))


def _refused(context: Any, model: Any) -> bool:
    """Whether an attempt's answer says Step Functions refused it unprocessed: a throttle (botocore's
    list of throttling codes) or one of the errors StartExecution documents (its operation `model`'s:
    `ExecutionLimitExceeded`, `StateMachineDoesNotExist`, ...)."""
    from botocore.retries.standard import ThrottledRetryableChecker

    code = context.get_error_code()
    documented = {shape.name for shape in model.error_shapes}
    return code is not None and (ThrottledRetryableChecker().is_retryable(context) or code in documented)


def _start_model(starts: SFNClient) -> Any:
    """StartExecution's operation model (botocore's retry rules read it): the client's own, else (a
    simulated client) botocore's service description, loaded once."""
    model = getattr(getattr(starts, "meta", None), "service_model", None)
    return _described_start_model() if model is None else model.operation_model("StartExecution")


@cache
def _described_start_model() -> Any:
    import botocore.session

    return botocore.session.get_session().get_service_model("stepfunctions").operation_model("StartExecution")


def stop_execution(stepfunctions: SFNClient, arn: str, *, cause: str) -> bool:
    """Stop the execution; one that does not exist or has already ended is left as it is. False when it
    does not exist (its start never landed: a start that lands later finds its lease no longer names it,
    and ends before its job)."""
    try:
        stepfunctions.stop_execution(executionArn=arn, error=STOP_ERROR, cause=cause[:32_768])
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code")
        if code == "ExecutionDoesNotExist":
            return False
        if code == "ValidationException" and execution_status(stepfunctions, arn) not in RUNNING_STATUSES:
            return True  # already ended
        raise
    return True
