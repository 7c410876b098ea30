"""Step Functions: executions by name, described, listed and stopped, and the token buckets of the operations
the functions call in bursts; what an execution does is the caller's.

StartExecution, DescribeExecution, StopExecution and ListExecutions are throttled as AWS throttles them: a
token bucket per operation, account and region, of `bucket` tokens refilled at `refill_per_s` a second on
the fake's clock. A request beyond its bucket answers `ThrottlingException` (HTTP 400, "Rate exceeded")
and has no effect. The defaults are the documented Standard-workflow quotas of the simulation's region
(`REGION`), from https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html: "Quotas related
to API action throttling" for StartExecution (1,300 tokens refilled at 300 a second in US East
(N. Virginia), US West (Oregon) and Europe (Ireland), 800 at 150 elsewhere) and ListExecutions (200 at 5;
100 at 2 elsewhere), and "Other quotas" for DescribeExecution (300 at 15; 250 at 10 elsewhere) and
StopExecution (1,000 at 200; 500 at 25 elsewhere). They are soft quotas (an account may have more):
`FakeStepFunctions.set_quota` sets another, or None for no throttling (`start_quota` for StartExecution).
SendTask* (3,000 at 500) is not throttled here: the Spark runs never come near it.

ListExecutions is eventually consistent: "The results are best effort and may not reflect very recent
updates and changes" (https://docs.aws.amazon.com/step-functions/latest/apireference/API_ListExecutions.html).
With a `ListLag`, an execution shows in it a seeded delay after its start, and shows its end a seeded
delay after the end (until then it still shows RUNNING); DescribeExecution is always current.

GetExecutionHistory answers the events the processor reads, in the shape of `HistoryEvent`
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_HistoryEvent.html): the execution's start
and end, and the events its world records (`record`; the EMR Serverless task's). It pages 100 events by
default, at most 1,000, oldest first unless `reverseOrder`. It is not throttled here: no quota of it is
modelled.
"""

from __future__ import annotations

import base64
import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from longjobs.sim.aws.base import REGION, Account, client_error


class TaskWaiter(Protocol):
    """A task-token task of an execution, answered by SendTask*; `closed` once the task is over."""

    closed: bool

    def succeed(self, output: str) -> None: ...

    def fail(self, error: str, cause: str) -> None: ...

    def heartbeat(self) -> None: ...


LARGE_REGIONS = frozenset({"us-east-1", "us-west-2", "eu-west-1"})
"""The regions with Step Functions' larger API throttling quotas (service-quotas.html)."""


@dataclass(frozen=True)
class Quota:
    """A token bucket's size and its refill rate (tokens a second)."""

    bucket: int
    refill_per_s: float

    def drain_s(self, requests: int) -> float:
        """The least time `requests` requests sent at once take to be admitted by a full bucket: the
        bucket's tokens at once, the rest at the refill rate."""
        return max(0, requests - self.bucket) / self.refill_per_s


THROTTLED_OPERATIONS = ("StartExecution", "DescribeExecution", "StopExecution", "ListExecutions")
"""The operations with a token bucket in the fake."""


def default_quotas(region: str = REGION) -> dict[str, Quota]:
    """The documented default quotas (Standard workflows) of `THROTTLED_OPERATIONS` in `region`."""
    if region in LARGE_REGIONS:
        return {
            "StartExecution": Quota(1_300, 300.0),
            "DescribeExecution": Quota(300, 15.0),
            "StopExecution": Quota(1_000, 200.0),
            "ListExecutions": Quota(200, 5.0),
        }
    return {
        "StartExecution": Quota(800, 150.0),
        "DescribeExecution": Quota(250, 10.0),
        "StopExecution": Quota(500, 25.0),
        "ListExecutions": Quota(100, 2.0),
    }


def start_execution_quota(region: str = REGION) -> Quota:
    """StartExecution's documented default quota (Standard workflows) in `region`."""
    return default_quotas(region)["StartExecution"]


class TokenBucket:
    """A token bucket on a clock: full at first, refilled continuously, one token a request."""

    def __init__(self, quota: Quota, now: float) -> None:
        self.quota = quota
        self.tokens = float(quota.bucket)
        self._updated = now

    def take(self, now: float) -> bool:
        """Take a token at `now`; False (throttled) when the bucket holds less than one."""
        elapsed = max(0.0, now - self._updated)
        self.tokens = min(float(self.quota.bucket), self.tokens + elapsed * self.quota.refill_per_s)
        self._updated = max(self._updated, now)
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass(frozen=True)
class ListLag:
    """How long ListExecutions takes to show an execution's start, and its end: a delay drawn from `rng`
    for each, uniform up to `max_s`, except that a `slow_share` of them is uniform up to `slow_max_s` (AWS
    documents no bound: "This operation is eventually consistent. The results are best effort and may not
    reflect very recent updates and changes",
    https://docs.aws.amazon.com/step-functions/latest/apireference/API_ListExecutions.html). Until its
    start shows, an execution is missing from the list; until its end shows, it is listed RUNNING."""

    max_s: float
    rng: random.Random
    slow_share: float = 0.0
    slow_max_s: float = 0.0

    def draw(self) -> float:
        slow = self.slow_share > 0 and self.rng.random() < self.slow_share
        return self.rng.uniform(0.0, self.slow_max_s if slow else self.max_s)


LIST_STATUSES = frozenset({"RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED", "PENDING_REDRIVE"})
"""ListExecutions' `statusFilter` values (ExecutionStatus)."""
LIST_MAX_RESULTS = 1_000
LIST_DEFAULT_RESULTS = 100
TOKEN_LIFETIME_S = 86_400.0
"""A ListExecutions page token "expires after 24 hours" (HTTP 400 InvalidToken after it)."""
HISTORY_DEFAULT_RESULTS = 100
HISTORY_MAX_RESULTS = 1_000
EVENT_DETAILS = {
    "ExecutionStarted": "executionStartedEventDetails",
    "ExecutionSucceeded": "executionSucceededEventDetails",
    "ExecutionFailed": "executionFailedEventDetails",
    "ExecutionAborted": "executionAbortedEventDetails",
    "ExecutionTimedOut": "executionTimedOutEventDetails",
    "TaskScheduled": "taskScheduledEventDetails",
    "TaskStarted": "taskStartedEventDetails",
    "TaskSubmitted": "taskSubmittedEventDetails",
    "TaskSucceeded": "taskSucceededEventDetails",
    "TaskFailed": "taskFailedEventDetails",
    "TaskTimedOut": "taskTimedOutEventDetails",
}
"""The history events the fake records, each with its details' field (`HistoryEvent`)."""
END_EVENTS = {
    "SUCCEEDED": "ExecutionSucceeded",
    "FAILED": "ExecutionFailed",
    "ABORTED": "ExecutionAborted",
    "TIMED_OUT": "ExecutionTimedOut",
}
"""The event that closes an execution's history, by its status."""
EXECUTION_DATA = ("input", "output")
"""The fields of an event's details that `includeExecutionData=false` leaves out."""


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
    listed_from: float = 0.0  # ListExecutions shows it from then on (its start + the list's lag)
    listed_ended_from: float | None = None  # and shows its end from then on (its end + the list's lag)
    described_from: float = 0.0  # DescribeExecution finds it from then on (its start + the read's lag)
    events: list[dict[str, Any]] = field(default_factory=list)  # its history (GetExecutionHistory), oldest first

    def listed_status(self, now: float) -> str | None:
        """What ListExecutions shows of it at `now`: None (not yet listed), RUNNING, or its end's status."""
        if now < self.listed_from:
            return None
        if self.listed_ended_from is None or now < self.listed_ended_from:
            return "RUNNING"
        return self.status


class FakeStepFunctions:
    """Executions of one state machine; what each does is `workflow(execution)`, called at its start."""

    def __init__(
        self,
        aws: Account,
        state_machine_arn: str,
        *,
        start_quota: Quota | None = None,
        list_lag: ListLag | None = None,
        describe_lag: ListLag | None = None,
    ) -> None:
        """`start_quota`: StartExecution's token bucket; each throttled operation's is by default the
        documented one of `REGION`. `list_lag`: how long ListExecutions lags (none: it is current).
        `describe_lag`: how long DescribeExecution takes to find a new execution (none: at once); it is
        eventually consistent too
        (https://docs.aws.amazon.com/step-functions/latest/apireference/API_DescribeExecution.html)."""
        self._aws = aws
        self.state_machine_arn = state_machine_arn
        self.list_lag = list_lag
        self.describe_lag = describe_lag
        self.lagged_describes = 0
        """DescribeExecution's answers of "does not exist" for an execution that does (`describe_lag`)."""
        self._tokens: dict[str, tuple[float, tuple[Any, ...], tuple[float, str]]] = {}
        self._buckets: dict[str, TokenBucket] = {}
        for operation, quota in default_quotas().items():
            self.set_quota(operation, quota)
        if start_quota is not None:
            self.start_quota = start_quota
        self.throttled: Counter[str] = Counter()  # requests answered ThrottlingException, by operation
        self.executions: dict[str, Execution] = {}
        self.on_start: Callable[[Execution], None] | None = None
        self.on_stop: Callable[[Execution], None] | None = None
        self.tasks: dict[str, TaskWaiter] = {}  # task token -> the execution's task waiting on it

    def _count(self, operation: str) -> None:
        self._aws.calls[f"stepfunctions.{operation}"] += 1

    def quota(self, operation: str) -> Quota | None:
        """`operation`'s quota (`StartExecution`, ...); None: never throttled."""
        bucket = self._buckets.get(operation)
        return bucket.quota if bucket is not None else None

    def set_quota(self, operation: str, quota: Quota | None) -> None:
        """A new quota starts with a full bucket, at the clock's time; None: never throttled."""
        if operation not in THROTTLED_OPERATIONS:
            raise ValueError(f"{operation} has no token bucket in the fake (only {', '.join(THROTTLED_OPERATIONS)})")
        if quota is None:
            self._buckets.pop(operation, None)
        else:
            self._buckets[operation] = TokenBucket(quota, self._aws.clock.now())

    @property
    def start_quota(self) -> Quota | None:
        """StartExecution's quota; None: never throttled."""
        return self.quota("StartExecution")

    @start_quota.setter
    def start_quota(self, quota: Quota | None) -> None:
        self.set_quota("StartExecution", quota)

    def _admit(self, operation: str) -> None:
        """Throttle the request as AWS does when its bucket is empty: ThrottlingException, HTTP 400,
        before anything else is looked at (the request has no effect)."""
        bucket = self._buckets.get(operation)
        if bucket is not None and not bucket.take(self._aws.clock.now()):
            self.throttled[operation] += 1
            raise client_error(operation, "ThrottlingException", "Rate exceeded", status=400)

    def arn_of(self, name: str) -> str:
        parts = self.state_machine_arn.split(":")
        return ":".join([*parts[:5], "execution", parts[6], name])

    def start_execution(self, **request: Any) -> dict[str, Any]:
        self._count("StartExecution")
        self._admit("StartExecution")
        name, raw = request["name"], request.get("input", "{}")
        arn = self.arn_of(name)
        existing = self.executions.get(arn)
        if existing is not None:
            # AWS: the same name and input answers the open execution while it runs; once it has closed,
            # or when the input differs, the name is taken (Standard workflows keep names 90 days).
            if existing.raw_input != raw or existing.status != "RUNNING":
                raise client_error("StartExecution", "ExecutionAlreadyExists", f"Execution Already Exists: '{arn}'")
            return {"executionArn": arn, "startDate": existing.started}
        now = self._aws.clock.now()
        execution = Execution(arn, name, json.loads(raw), raw, now)
        execution.listed_from = now + self._list_delay()
        execution.described_from = now + (self.describe_lag.draw() if self.describe_lag is not None else 0.0)
        self.executions[arn] = execution
        self.record(execution, "ExecutionStarted", input=raw, inputDetails={"truncated": False})
        if self.on_start is not None:
            self.on_start(execution)
        return {"executionArn": arn, "startDate": execution.started}

    def describe_execution(self, **request: Any) -> dict[str, Any]:
        self._count("DescribeExecution")
        self._admit("DescribeExecution")
        execution = self.executions.get(request["executionArn"])
        if execution is not None and self._aws.clock.now() < execution.described_from:
            self.lagged_describes += 1
            execution = None
        if execution is None:
            raise client_error("DescribeExecution", "ExecutionDoesNotExist", "Execution Does Not Exist")
        return {
            "executionArn": execution.arn,
            "stateMachineArn": self.state_machine_arn,
            "name": execution.name,
            "status": execution.status,
            "input": execution.raw_input,
            # datetimes, as boto3 parses them (https://docs.aws.amazon.com/step-functions/latest/apireference/API_DescribeExecution.html)
            "startDate": datetime.fromtimestamp(execution.started, UTC),
            **({"stopDate": datetime.fromtimestamp(execution.stopped, UTC)} if execution.stopped is not None else {}),
        }

    def list_executions(self, **request: Any) -> dict[str, Any]:
        """The state machine's executions as ListExecutions shows them (`ListLag`), newest first (by start,
        then ARN), `maxResults` a page (100 by default or for 0, at most 1,000), `nextToken` to go on: a
        page goes on after the last execution of the page before, so executions started meanwhile (ahead of
        it) do not shift it. A token is good for 24 h, with the same other arguments (InvalidToken else)."""
        self._count("ListExecutions")
        self._admit("ListExecutions")
        now = self._aws.clock.now()
        machine = request.get("stateMachineArn")
        if machine is None:
            raise client_error("ListExecutions", "ValidationException", "stateMachineArn or mapRunArn is required")
        if machine != self.state_machine_arn:
            parts = str(machine).split(":")
            if len(parts) != 7 or parts[5] != "stateMachine":
                raise client_error("ListExecutions", "InvalidArn", f"Invalid Arn: '{machine}'")
            raise client_error(
                "ListExecutions", "StateMachineDoesNotExist", f"State Machine Does Not Exist: '{machine}'"
            )
        status_filter = request.get("statusFilter")
        if status_filter is not None and status_filter not in LIST_STATUSES:
            raise client_error(
                "ListExecutions",
                "ValidationException",
                f"1 validation error detected: Value '{status_filter}' at 'statusFilter' failed to satisfy "
                f"constraint: Member must satisfy enum value set: {sorted(LIST_STATUSES)}",
            )
        size = _page_size("ListExecutions", request, LIST_DEFAULT_RESULTS, LIST_MAX_RESULTS)
        arguments = (machine, status_filter, size)
        after: tuple[float, str] | None = None
        token = request.get("nextToken")
        if token is not None:
            issued = self._tokens.get(token)
            if issued is None or issued[1] != arguments or now - issued[0] > TOKEN_LIFETIME_S:
                raise client_error("ListExecutions", "InvalidToken", "Invalid Token")
            after = issued[2]
        shown: list[tuple[tuple[float, str], Execution, str]] = []
        for execution in self.executions.values():
            status = execution.listed_status(now)
            if status is None or (status_filter is not None and status != status_filter):
                continue
            order = (-execution.started, execution.arn)
            if after is not None and order <= after:
                continue
            shown.append((order, execution, status))
        shown.sort(key=lambda entry: entry[0])
        page = shown[:size]
        answer: dict[str, Any] = {
            "executions": [
                {
                    "executionArn": execution.arn,
                    "stateMachineArn": self.state_machine_arn,
                    "name": execution.name,
                    "status": status,
                    "startDate": execution.started,
                    **({"stopDate": execution.stopped} if status != "RUNNING" else {}),
                }
                for _, execution, status in page
            ]
        }
        if len(shown) > size:
            next_token = base64.b64encode(f"{machine}|{len(self._tokens)}".encode()).decode()
            self._tokens[next_token] = (now, arguments, page[-1][0])
            answer["nextToken"] = next_token
        return answer

    def get_execution_history(self, **request: Any) -> dict[str, Any]:
        """The execution's recorded events, `maxResults` a page (100 by default or for 0, at most 1,000), oldest
        first (`reverseOrder`: newest first), `nextToken` to go on. A token is the count of events already
        read. A history only grows at its end, so oldest first no event is skipped; newest first, events
        recorded meanwhile may make a page repeat some. Refused as AWS refuses an execution it does not know
        (ExecutionDoesNotExist) and a page size out of bounds."""
        self._count("GetExecutionHistory")
        execution = self.executions.get(request["executionArn"])
        if execution is None:
            raise client_error("GetExecutionHistory", "ExecutionDoesNotExist", "Execution Does Not Exist")
        size = _page_size("GetExecutionHistory", request, HISTORY_DEFAULT_RESULTS, HISTORY_MAX_RESULTS)
        token = request.get("nextToken")
        try:
            read = int(token) if token is not None else 0
        except ValueError:
            raise client_error("GetExecutionHistory", "InvalidToken", "Invalid Token") from None
        events = list(reversed(execution.events)) if request.get("reverseOrder") else execution.events
        page = events[read : read + size]
        if request.get("includeExecutionData", True) is False:
            page = [_without_data(event) for event in page]
        answer: dict[str, Any] = {"events": page}
        if read + size < len(events):
            answer["nextToken"] = str(read + size)
        return answer

    def record(self, execution: Execution, kind: str, **details: Any) -> None:
        """Add an event of `kind` (`EVENT_DETAILS`) to the execution's history, at the clock's time."""
        number = len(execution.events) + 1
        event: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(self._aws.clock.now(), UTC),
            "type": kind,
            "id": number,
            "previousEventId": number - 1,
        }
        if details:
            event[EVENT_DETAILS[kind]] = details
        execution.events.append(event)

    def stop_execution(self, **request: Any) -> dict[str, Any]:
        self._count("StopExecution")
        self._admit("StopExecution")
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

    def _list_delay(self) -> float:
        return self.list_lag.draw() if self.list_lag is not None else 0.0

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
        execution.listed_ended_from = execution.stopped + self._list_delay()
        ended = {"error": error, "cause": cause} if status != "SUCCEEDED" else {}
        self.record(execution, END_EVENTS[status], **{key: value for key, value in ended.items() if value is not None})
        if self.on_stop is not None:
            self.on_stop(execution)


def _without_data(event: dict[str, Any]) -> dict[str, Any]:
    """An event as `includeExecutionData=false` answers it: its details without their input and output."""
    return {
        key: {k: v for k, v in value.items() if k not in EXECUTION_DATA} if key.endswith("EventDetails") else value
        for key, value in event.items()
    }


def _page_size(operation: str, request: dict[str, Any], default: int, largest: int) -> int:
    """A listing's `maxResults` (`default` when absent), refused as AWS refuses one out of bounds."""
    size = int(request.get("maxResults") or default)
    if not 0 < size <= largest:
        raise client_error(
            operation,
            "ValidationException",
            f"1 validation error detected: Value '{size}' at 'maxResults' failed to satisfy constraint: "
            f"Member must have value less than or equal to {largest}",
        )
    return size
