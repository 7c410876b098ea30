"""The seam between the code under test and the simulated AWS: boto3-shaped clients, one per actor.

A `SimClient` takes the calls a boto3 client takes (`client.update_item(**params)`) and, for each one:
asks the fault plan for its fault, waits the request's way there (virtual latency, where other actors
run), applies it to the simulated service (or not, by the fault), records it in the trace, and waits
the answer's way back. The code under test gets botocore's own exceptions, shaped as AWS sends them.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from botocore.exceptions import ClientError, ReadTimeoutError

from longjobs.history.faults import CallFault
from longjobs.sim.aws import REGION, client_error
from longjobs.sim.faults import FaultPlan
from longjobs.sim.scheduler import Crash, Scheduler
from longjobs.sim.trace import Trace

# Each service's answer to a throttled call and to a server error (code, HTTP status).
THROTTLING = {
    "sqs": ("RequestThrottled", 403),
    "dynamodb": ("ThrottlingException", 400),
    "stepfunctions": ("ThrottlingException", 400),
    "emr-serverless": ("ThrottlingException", 400),
}
SERVER_ERROR = {
    "sqs": ("InternalError", 500),
    "dynamodb": ("InternalServerError", 500),
    "stepfunctions": ("ServiceUnavailable", 503),
    "emr-serverless": ("InternalServerException", 500),
}
LATENCY_S = (0.005, 0.060)  # a request's way to the service; the answer comes back at once (a step saved)
RETRY_CAP_S = 20.0  # botocore's standard mode: backoff of random() * 2^(attempt-1), at most 20 s
RETRYABLE_STATUS = frozenset({500, 502, 503, 504})
RETRYABLE_CODES = frozenset(code for code, _ in THROTTLING.values()) | frozenset(
    {"Throttling", "ProvisionedThroughputExceededException", "RequestLimitExceeded", "TransactionInProgressException"}
)


class SimClient:
    """A boto3-shaped client of one simulated service, for one actor."""

    def __init__(
        self,
        service: str,
        backend: Any,
        *,
        actor: str,
        scheduler: Scheduler,
        faults: FaultPlan,
        trace: Trace,
        observe: Callable[[str, str, dict[str, Any], CallFault | None], None] | None = None,
        refused: Callable[[str, str, dict[str, Any], str], None] | None = None,
        answered: Callable[[str, dict[str, Any], dict[str, Any]], None] | None = None,
        max_attempts: int = 1,
        socket_timeouts: bool = True,
    ) -> None:
        self._service = service
        self._backend = backend
        self._actor = actor
        self._scheduler = scheduler
        self._faults = faults
        self._trace = trace
        self._observe = observe
        self._refused = refused
        self._answered = answered
        self._max_attempts = max_attempts
        self._socket_timeouts = socket_timeouts
        self.meta = SimpleNamespace(region_name=REGION)  # boto3's `client.meta.region_name` (a cancel's queue ARN)

    def __getattr__(self, operation: str) -> Callable[..., dict[str, Any]]:
        if operation.startswith("_") or not callable(getattr(self._backend, operation, None)):
            raise AttributeError(f"the simulated {self._service} has no operation {operation}")
        return lambda **params: self.call(operation, params)

    def call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        """One call as the code sees it: botocore's standard retry mode (the functions' `CLIENT_CONFIG`)
        retries a throttle, a 5xx or a timeout, with full-jitter backoff, up to `max_attempts` attempts,
        so a call that took effect and lost its answer is sent again (a conditional write then meets
        its own first write)."""
        for attempt in range(1, self._max_attempts + 1):
            try:
                return self._attempt(operation, params)
            except (ClientError, ReadTimeoutError) as exc:
                if attempt == self._max_attempts or not _retryable(exc):
                    raise
                self._scheduler.sleep(self._faults.rng.random() * min(RETRY_CAP_S, 2 ** (attempt - 1)))
        raise AssertionError("unreachable")

    def _attempt(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        scheduler, trace = self._scheduler, self._trace
        group = scheduler.group_of_current()
        fault = (
            None
            if group is not None and group.protected
            else self._faults.at_call(scheduler.now(), self._actor, operation)
        )
        if self._observe is not None:
            self._observe(self._service, operation, params, fault)
        if fault is CallFault.CRASH_BEFORE:
            trace.call(self._actor, self._service, operation, params, fault=fault)
            self._die()
        scheduler.sleep(self._faults.rng.uniform(*LATENCY_S))
        if fault in (CallFault.THROTTLED, CallFault.SERVER_ERROR, CallFault.TIMEOUT):
            trace.call(self._actor, self._service, operation, params, fault=fault)
            raise self._error(operation, fault)
        try:
            answer: dict[str, Any] = getattr(self._backend, operation)(**params)
        except ClientError as exc:
            trace.call(self._actor, self._service, operation, params, error=exc.response["Error"]["Code"])
            if self._refused is not None:
                self._refused(self._service, operation, params, str(exc.response["Error"]["Code"]))
            raise
        trace.call(self._actor, self._service, operation, params, answer=answer, fault=fault)
        if fault is CallFault.CRASH_AFTER:
            self._die()
        if fault is CallFault.ANSWER_LOST:
            scheduler.sleep(self._faults.rng.uniform(*LATENCY_S))  # the caller waits for an answer that never comes
            kind = CallFault.SERVER_ERROR if self._faults.rng.random() < 0.5 else CallFault.TIMEOUT
            raise self._error(operation, kind)
        if self._answered is not None:
            self._answered(operation, params, answer)
        return answer

    def _die(self) -> None:
        group = self._scheduler.group_of_current()
        if group is not None:  # the whole invocation dies: its other actors where they wait, at once
            group.killed = True
            self._scheduler.call_at(self._scheduler.now(), lambda: self._scheduler.kill(group))
        raise Crash(f"{self._actor} died at a call")

    def _error(self, operation: str, fault: CallFault) -> Exception:
        if fault is CallFault.TIMEOUT and not self._socket_timeouts:
            # Step Functions' own calls: a service integration reports the service's error, not a socket
            # timeout (none is documented), so the workflow meets a 5xx of the service instead.
            fault = CallFault.SERVER_ERROR
        if fault is CallFault.TIMEOUT:
            return ReadTimeoutError(endpoint_url=f"https://{self._service}.us-east-1.amazonaws.com/")
        code, status = (THROTTLING if fault is CallFault.THROTTLED else SERVER_ERROR)[self._service]
        return client_error(_operation_name(operation), code, f"simulated {fault.value}", status=status)


def _retryable(exc: Exception) -> bool:
    """Whether botocore's standard retry mode retries this error (throttles, 5xx, timeouts)."""
    if isinstance(exc, ReadTimeoutError):
        return True
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return exc.response["Error"]["Code"] in RETRYABLE_CODES or status in RETRYABLE_STATUS
    return False


def _operation_name(operation: str) -> str:
    """`change_message_visibility_batch` -> `ChangeMessageVisibilityBatch`."""
    return "".join(part.title() for part in operation.split("_"))
