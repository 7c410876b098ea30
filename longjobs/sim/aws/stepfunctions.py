"""Step Functions: executions by name, described and stopped; what an execution does is the caller's."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from longjobs.sim.aws.base import client_error

if TYPE_CHECKING:
    from longjobs.sim.aws import FakeAws


class TaskWaiter(Protocol):
    """A task-token task of an execution, answered by SendTask*; `closed` once the task is over."""

    closed: bool

    def succeed(self, output: str) -> None: ...

    def fail(self, error: str, cause: str) -> None: ...

    def heartbeat(self) -> None: ...


@dataclass
class Execution:
    arn: str
    name: str
    input: dict[str, Any]
    raw_input: str
    started: float
    status: str = "RUNNING"
    stopped: float | None = None
    error: str | None = None
    cause: str | None = None
    state: dict[str, Any] = field(default_factory=dict)  # the workflow model's own notes


class FakeStepFunctions:
    """Executions of one state machine; what each does is `workflow(execution)`, called at its start."""

    def __init__(self, aws: FakeAws, state_machine_arn: str) -> None:
        self._aws = aws
        self.state_machine_arn = state_machine_arn
        self.executions: dict[str, Execution] = {}
        self.on_start: Callable[[Execution], None] | None = None
        self.on_stop: Callable[[Execution], None] | None = None
        self.tasks: dict[str, TaskWaiter] = {}  # task token -> the execution's task waiting on it

    def _count(self, operation: str) -> None:
        self._aws.calls[f"stepfunctions.{operation}"] += 1

    def arn_of(self, name: str) -> str:
        parts = self.state_machine_arn.split(":")
        return ":".join([*parts[:5], "execution", parts[6], name])

    def start_execution(self, **request: Any) -> dict[str, Any]:
        self._count("StartExecution")
        name, raw = request["name"], request.get("input", "{}")
        arn = self.arn_of(name)
        existing = self.executions.get(arn)
        if existing is not None:
            # AWS: the same name and input answers the open execution while it runs; once it has closed,
            # or when the input differs, the name is taken (Standard workflows keep names 90 days).
            if existing.raw_input != raw or existing.status != "RUNNING":
                raise client_error("StartExecution", "ExecutionAlreadyExists", f"Execution Already Exists: '{arn}'")
            return {"executionArn": arn, "startDate": existing.started}
        execution = Execution(arn, name, json.loads(raw), raw, self._aws.clock.now())
        self.executions[arn] = execution
        if self.on_start is not None:
            self.on_start(execution)
        return {"executionArn": arn, "startDate": execution.started}

    def describe_execution(self, **request: Any) -> dict[str, Any]:
        self._count("DescribeExecution")
        execution = self.executions.get(request["executionArn"])
        if execution is None:
            raise client_error("DescribeExecution", "ExecutionDoesNotExist", "Execution Does Not Exist")
        return {
            "executionArn": execution.arn,
            "stateMachineArn": self.state_machine_arn,
            "name": execution.name,
            "status": execution.status,
            "input": execution.raw_input,
        }

    def stop_execution(self, **request: Any) -> dict[str, Any]:
        self._count("StopExecution")
        execution = self.executions.get(request["executionArn"])
        if execution is None:
            raise client_error("StopExecution", "ExecutionDoesNotExist", "Execution Does Not Exist")
        if execution.status == "RUNNING":
            self.end(execution, "ABORTED", request.get("error"), request.get("cause"))
        return {"stopDate": self._aws.clock.now()}

    def send_task_success(self, **request: Any) -> dict[str, Any]:
        self._count("SendTaskSuccess")
        self._task("SendTaskSuccess", request["taskToken"]).succeed(request["output"])
        return {}

    def send_task_failure(self, **request: Any) -> dict[str, Any]:
        self._count("SendTaskFailure")
        self._task("SendTaskFailure", request["taskToken"]).fail(request.get("error", ""), request.get("cause", ""))
        return {}

    def send_task_heartbeat(self, **request: Any) -> dict[str, Any]:
        self._count("SendTaskHeartbeat")
        self._task("SendTaskHeartbeat", request["taskToken"]).heartbeat()
        return {}

    def _task(self, operation: str, token: str) -> TaskWaiter:
        waiter = self.tasks.get(token)
        if waiter is None:
            raise client_error(operation, "InvalidToken", "Invalid Token")
        if waiter.closed:
            raise client_error(operation, "TaskTimedOut", "Task Timed Out")
        return waiter

    def end(self, execution: Execution, status: str, error: str | None = None, cause: str | None = None) -> None:
        execution.status, execution.error, execution.cause = status, error, cause
        execution.stopped = self._aws.clock.now()
        if self.on_stop is not None:
            self.on_stop(execution)
