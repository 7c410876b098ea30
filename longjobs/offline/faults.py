"""The scenario's faults, applied to the running processor from outside its code.

Hooks on the functions' own clients. `Faults.install(function, service)` finds the boto3 clients of a
function's service object (its attributes, and one level into them, de-duplicated) and registers
botocore hooks on each; the functions keep no offline-only code path.

- `aws_fault` (`before-send`): a matching call (function, operation or `*`, inside `at_s`..`until_s`,
  fewer than `count` injections so far) is answered with the fault with its `probability`. Each fault
  draws from its own `random.Random`, seeded by the scenario's seed and the fault's index, so adding a
  fault does not change another's draws; every matching fault draws, and the first that hits applies.
  The modes are the simulation's names for a call's faults (`longjobs.history.faults.CallFault`):
  - `throttled`: the service's throttling answer: SQS HTTP 400 `ThrottlingException` with the query
    code `RequestThrottled`; DynamoDB HTTP 400 `ProvisionedThroughputExceededException`; Step
    Functions HTTP 400 `ThrottlingException`.
  - `server_error`: HTTP 500 with the service's internal error: SQS `InternalError`, DynamoDB
    `InternalServerError`, Step Functions `InternalFailure`.
  - `timeout`: botocore's `ReadTimeoutError` before the request is sent: no answer and no effect.
  - `answer_lost`: the hook sends the request to the emulator itself (it takes effect), drops the
    answer and returns the `server_error` answer instead.
  - `crash_before`: `InvocationCrashed` (a `BaseException`) is raised before the request is sent. Every
    later call of that function's clients raises it too, until its next invocation begins: a dead
    invocation does nothing more, not even on the extender's worker threads.
  - `crash_after`: the hook sends the request (it takes effect), then the invocation dies as above.
  An invocation past its Lambda timeout dies the same way at its next call (`function_timeout`):
  offline, nothing else would stop a handler that botocore's backoff kept waiting past its deadline.
  botocore parses and retries these answers as it would AWS's; each retry is a new call, drawn again.
- `throttle` (a shorthand): an `aws_fault` of the extender, mode `throttled`.
- `after-call` of `StopExecution`: which executions the functions stopped (the report's `stopped`).

The schedule asks `skip_run()` before each extender run: `pause_extender` skips the runs inside its
window, `lose_scheduled_runs` each run with its probability. The status events ask `drop_event()`.
`TimedActions` runs `abort_execution` and `duplicate_delivery`; each either takes effect or is reported
in `missed` with the reason. Every injection is counted by mode (`injected`).
"""

from __future__ import annotations

import json
import logging
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, Protocol

from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.client import BaseClient
from botocore.compat import HTTPHeaders
from botocore.exceptions import ReadTimeoutError
from botocore.httpsession import URLLib3Session

from longjobs.engine.lease import Lease, LeaseStore
from longjobs.history.faults import CallFault, WorldFault
from longjobs.offline.lambdas import InvocationCrashed
from longjobs.offline.observe import Delivery
from longjobs.offline.scenario import (
    AbortExecution,
    AwsFault,
    DropStatusEvents,
    DuplicateDelivery,
    KillWorker,
    LoseScheduledRuns,
    PauseExtender,
    Throttle,
)

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

    from longjobs.engine.settings import Settings
    from longjobs.offline.scenario import Fault

log = logging.getLogger(__name__)

ACTION_PATIENCE_S = 30.0
"""How long a timed action waits for its job to reach the state it acts on."""
STOP_PATIENCE_S = 5.0
"""How long `abort_execution` waits for the execution it stopped to read ABORTED."""
EVENT_DELAY_S = (0.5, 1.5)
"""A status event reaches the watcher this long after the execution ends (seeded, uniform)."""
RENEWAL_OPERATIONS = frozenset(
    {"Query", "ChangeMessageVisibility", "ChangeMessageVisibilityBatch", "TransactWriteItems", "UpdateItem"}
)
"""The extender's calls on its renewal path: one that fails for good leaves the run's renewals undone."""
VISIBILITY_OPERATIONS = frozenset({"ChangeMessageVisibility", "ChangeMessageVisibilityBatch"})
CRASHES = (CallFault.CRASH_BEFORE, CallFault.CRASH_AFTER)
"""The call faults that end the invocation."""
RUN_FAULTS = {"lost": WorldFault.EXTENDER_SKIPPED, "paused": "extender_paused"}
"""What a scheduled extender run that never ran counts as, by why: the simulation's name for a lost run;
a paused extender's skipped runs apart (the simulation pauses no extender outside a written scenario)."""
LOST_OUTCOMES = frozenset({"paused", "lost", "crashed", "impaired"})
"""Scheduled extender runs that renewed nothing, or not all they should have, because of a fault."""

RunOutcome = Literal["ran", "paused", "lost", "crashed", "impaired", "failed"]


@dataclass(frozen=True)
class ErrorAnswer:
    """One service's error response on its JSON protocol."""

    status: int
    type: str
    message: str
    query_error: str | None = None
    """`x-amzn-query-error` (SQS's legacy query code and fault side)."""


ANSWERS: dict[tuple[str, str], ErrorAnswer] = {
    ("sqs", "throttled"): ErrorAnswer(
        400, "com.amazonaws.sqs#ThrottlingException", "Rate exceeded", "RequestThrottled;Sender"
    ),
    ("sqs", "server_error"): ErrorAnswer(
        500,
        "com.amazonaws.sqs#InternalError",
        "We encountered an internal error. Please try again.",
        "InternalError;Receiver",
    ),
    ("dynamodb", "throttled"): ErrorAnswer(
        400,
        "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
        "The level of configured provisioned throughput for the table was exceeded. "
        "Consider increasing your provisioning level with the UpdateTable API.",
    ),
    ("dynamodb", "server_error"): ErrorAnswer(
        500, "com.amazonaws.dynamodb.v20120810#InternalServerError", "Internal server error"
    ),
    ("stepfunctions", "throttled"): ErrorAnswer(
        400, "com.amazon.coral.availability#ThrottlingException", "Rate exceeded"
    ),
    ("stepfunctions", "server_error"): ErrorAnswer(
        500, "com.amazon.coral.service#InternalFailure", "Internal failure."
    ),
}
"""What each service answers when it throttles a call, or fails inside (HTTP 500)."""


class _Body:
    """The raw stream an `AWSResponse` reads its content from."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Any:
        yield self._data


def fault_response(service: str, mode: str, url: str) -> AWSResponse:
    """The service's answer for `throttled` or `server_error` (also what `answer_lost` returns)."""
    answer = ANSWERS[(service, "server_error" if mode == "answer_lost" else mode)]
    body = json.dumps({"__type": answer.type, "message": answer.message}).encode()
    headers = HTTPHeaders()
    headers["Content-Type"] = "application/x-amz-json-1.0"
    headers["Content-Length"] = str(len(body))
    headers["x-amzn-RequestId"] = f"offline-{mode}"
    if answer.query_error is not None:
        headers["x-amzn-query-error"] = answer.query_error
    return AWSResponse(url, answer.status, headers, _Body(body))


def function_clients(service: object) -> list[BaseClient]:
    """The boto3 clients a function's service object holds: its attributes and one level into them,
    each client once."""
    found: dict[int, BaseClient] = {}

    def attributes(obj: object) -> Iterable[object]:
        if isinstance(obj, BaseClient | type) or not hasattr(obj, "__dict__"):
            return ()
        return list(vars(obj).values())

    for value in attributes(service):
        if isinstance(value, BaseClient):
            found.setdefault(id(value), value)
            continue
        for inner in attributes(value):
            if isinstance(inner, BaseClient):
                found.setdefault(id(inner), inner)
    return list(found.values())


def _attempt(request: AWSPreparedRequest) -> tuple[int, int]:
    """(attempt, max attempts) from botocore's `amz-sdk-request` header (standard retry mode)."""
    header = request.headers.get("amz-sdk-request", "")
    text = header.decode() if isinstance(header, bytes) else str(header)
    parts = dict(part.strip().split("=", 1) for part in text.split(";") if "=" in part)
    try:
        return int(parts.get("attempt", 1)), int(parts.get("max", 1))
    except ValueError:
        return 1, 1


def _json_body(request: AWSPreparedRequest) -> Any:
    """The request's JSON body (every operation the functions call is on a JSON protocol), or None."""
    body = request.body
    if not isinstance(body, str | bytes | bytearray):
        return None
    try:
        return json.loads(body or b"null")
    except ValueError:
        return None


def _receipt_handles(request: AWSPreparedRequest) -> list[str]:
    body = _json_body(request)
    if not isinstance(body, dict):
        return []
    handles = [body["ReceiptHandle"]] if isinstance(body.get("ReceiptHandle"), str) else []
    handles += [e["ReceiptHandle"] for e in body.get("Entries", []) if isinstance(e, dict) and "ReceiptHandle" in e]
    return handles


@dataclass(frozen=True)
class Injection:
    """One call answered by a fault."""

    at: float
    fault: int
    """Index of the fault in the scenario."""
    function: str
    operation: str
    mode: str
    surfaced: bool
    """The call's last attempt: the function itself sees the failure (botocore retries no more)."""
    message_ids: tuple[str, ...] = ()
    """The messages the request names, when the invocation's batch tells (the receiver's)."""


@dataclass(frozen=True)
class AppliedAction:
    """A fault aimed at one job that took effect (`abort_execution`, `duplicate_delivery`, `kill_worker`):
    when, so the timeline can draw it on the job's row."""

    at: float
    type: str
    job: str


@dataclass(frozen=True)
class RunSlot:
    """One scheduled extender run: when, and what became of it."""

    at: float
    outcome: RunOutcome


@dataclass
class _Invocation:
    started: float
    handles: dict[str, str]
    deadline: float | None = None
    injected: int = 0
    surfaced_renewal: bool = False


@dataclass(frozen=True)
class _CallFault:
    """An `aws_fault`, or a `throttle` as one."""

    index: int
    spec: AwsFault


class FaultPlan(Protocol):
    """What the faults of a run come from: a scenario, or no faults at all (`serve`)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def faults(self) -> Sequence[Fault]: ...
    @property
    def seed(self) -> int: ...


class Faults:
    """The faults of one run; times are seconds since `begin()`."""

    def __init__(self, scenario: FaultPlan, *, clock: Callable[[], float] = time.time) -> None:
        self.scenario = scenario
        self.clock = clock
        self.start = clock()
        self.killed: set[str] = set()
        self.done: list[str] = []
        self.applied: list[AppliedAction] = []
        """The job-aimed faults that took effect, with when (epoch s)."""
        self.missed: list[str] = []
        """Faults that could not take effect, one sentence each (timed actions add theirs as they go)."""
        self.injected: Counter[str] = Counter()
        self.injections: list[Injection] = []
        self.runs: list[RunSlot] = []
        self.processor_stops: set[str] = set()
        """ARNs of executions the functions stopped (StopExecution answered with success)."""
        self.fault_stops: set[str] = set()
        """ARNs the `abort_execution` fault stopped."""
        self.events_seen = 0
        self._lock = threading.Lock()
        self._session: URLLib3Session | None = None
        self._crashed: set[str] = set()
        self._invocations: dict[str, _Invocation] = {}
        faults = scenario.faults
        self.pauses = [f for f in faults if isinstance(f, PauseExtender)]
        self._call_faults = [
            _CallFault(i, f if isinstance(f, AwsFault) else _as_aws_fault(f))
            for i, f in enumerate(faults)
            if isinstance(f, AwsFault | Throttle)
        ]
        self._rngs = {i: random.Random(f"{scenario.seed}:{i}") for i in range(len(faults))}
        self._delay_rng = random.Random(f"{scenario.seed}:event-delay")
        self._matched: Counter[int] = Counter()
        self._hits: Counter[int] = Counter()

    # -- time -------------------------------------------------------------------------------------

    def begin(self) -> float:
        """Fault times count from now (the jobs are being sent)."""
        self.start = self.clock()
        return self.start

    def elapsed(self) -> float:
        return self.clock() - self.start

    @property
    def throttled(self) -> int:
        """Calls answered with a throttling response."""
        return self.injected[CallFault.THROTTLED]

    # -- the schedule -----------------------------------------------------------------------------

    def extender_paused(self) -> bool:
        now = self.elapsed()
        return any(p.at_s <= now < p.at_s + p.for_s for p in self.pauses)

    def skip_run(self) -> str | None:
        """Whether the scheduled run due now is skipped: `paused`, `lost`, or None (it runs)."""
        at = self.clock()
        if self.extender_paused():
            reason: RunOutcome = "paused"
        else:
            with self._lock:
                hits = [
                    self._rngs[i].random() < f.probability
                    for i, f in enumerate(self.scenario.faults)
                    if isinstance(f, LoseScheduledRuns)
                ]
            if not any(hits):
                return None
            reason = "lost"
        with self._lock:
            self.runs.append(RunSlot(at, reason))
            self.injected[RUN_FAULTS[reason]] += 1
        return reason

    # -- invocations ------------------------------------------------------------------------------

    def begin_invocation(
        self, function: str, handles: dict[str, str] | None = None, *, deadline: float | None = None
    ) -> None:
        """A new invocation of `function` starts (`handles`: receipt handle -> message id of its batch).

        At `deadline` (epoch s: its Lambda timeout) the invocation dies, as Lambda ends it: its next call
        raises `InvocationCrashed`, recorded as an injection of mode `function_timeout` (faults' retries and
        backoff are what make an offline invocation outlive its timeout)."""
        with self._lock:
            self._crashed.discard(function)
            self._invocations[function] = _Invocation(self.clock(), dict(handles or {}), deadline)

    def end_invocation(self, function: str, *, period_s: float | None = None) -> RunOutcome:
        """The invocation returned or died. For the extender, its run is recorded: `crashed`,
        `impaired` (a renewal-path call failed for good on an injected fault, or injected faults made
        it overrun its period: botocore's backoff between retries) or `ran`. The slots an impaired run
        overran are recorded impaired too: those runs came late by whole periods."""
        with self._lock:
            invocation = self._invocations.pop(function, None)
            now = self.clock()
            if invocation is None:
                return "failed"
            overran = period_s is not None and now - invocation.started > period_s
            outcome: RunOutcome = "ran"
            if function in self._crashed:
                outcome = "crashed"
            elif invocation.surfaced_renewal or (invocation.injected and overran):
                outcome = "impaired"
            if function == "extender":
                self.runs.append(RunSlot(invocation.started, outcome))
                if outcome != "ran" and period_s is not None:
                    late = int((now - invocation.started) // period_s)
                    self.runs += [RunSlot(invocation.started + k * period_s, "impaired") for k in range(1, late + 1)]
            return outcome

    # -- hooks ------------------------------------------------------------------------------------

    def install(self, function: str, service: object) -> int:
        """Hook every client of `function`'s service object; returns how many were hooked."""
        clients = function_clients(service)
        for client in clients:
            name = client.meta.service_model.service_name
            events = client.meta.events
            before_send: Callable[..., Any] = partial(self._before_send, function, name)
            events.register("before-send", before_send, unique_id=f"faults-{id(self)}")
            service_id = client.meta.service_model.service_id.hyphenize()
            if name == "stepfunctions":
                events.register(f"before-parameter-build.{service_id}.StopExecution", _note_stop_arn)
                events.register(f"after-call.{service_id}.StopExecution", self._after_stop)
        return len(clients)

    def _before_send(
        self, function: str, service: str, request: AWSPreparedRequest, event_name: str = "", **_: Any
    ) -> AWSResponse | None:
        operation = event_name.rpartition(".")[2]
        with self._lock:
            if function in self._crashed:
                raise InvocationCrashed(f"the {function} invocation died earlier; {operation} never leaves")
            invocation = self._invocations.get(function)
            handles = invocation.handles if invocation is not None else {}
            messages = tuple(handles[h] for h in _receipt_handles(request) if h in handles)
            if invocation is not None and invocation.deadline is not None and self.clock() > invocation.deadline:
                timed_out = WorldFault.FUNCTION_TIMEOUT
                self.injections.append(Injection(self.clock(), -1, function, operation, timed_out, True, messages))
                self.injected[timed_out] += 1
                self._crashed.add(function)
                log.info("%s invocation timed out before %s", function, operation)
                raise InvocationCrashed(f"the {function} invocation timed out before {operation}")
            chosen = self._draw(function, operation)
            if chosen is None:
                return None
            attempt, max_attempts = _attempt(request)
            injection = Injection(
                self.clock(), chosen.index, function, operation, chosen.spec.mode, attempt >= max_attempts, messages
            )
            self.injections.append(injection)
            self.injected[chosen.spec.mode] += 1
            if invocation is not None:
                invocation.injected += 1
                if injection.surfaced and operation in RENEWAL_OPERATIONS:
                    invocation.surfaced_renewal = True
            if chosen.spec.mode in CRASHES:
                self._crashed.add(function)
        mode = CallFault(chosen.spec.mode)
        log.info("fault %s: %s %s (%s)", mode, function, operation, event_name)
        if mode == CallFault.CRASH_BEFORE:
            raise InvocationCrashed(f"the {function} invocation died at {operation}")
        if mode == CallFault.TIMEOUT:
            raise ReadTimeoutError(endpoint_url=request.url)  # botocore retries it, as a read timeout
        if mode in (CallFault.ANSWER_LOST, CallFault.CRASH_AFTER):
            self._send(request, operation)
        if mode == CallFault.CRASH_AFTER:
            raise InvocationCrashed(f"the {function} invocation died after {operation} took effect")
        return fault_response(service, mode, request.url)

    def _draw(self, function: str, operation: str) -> _CallFault | None:
        """Every matching open fault draws; the first that hits applies. Called with the lock held."""
        elapsed = self.elapsed()
        chosen: _CallFault | None = None
        for fault in self._call_faults:
            spec = fault.spec
            if not spec.matches(function, operation) or not spec.open_at(elapsed):
                continue
            if spec.count is not None and self._hits[fault.index] >= spec.count:
                continue
            self._matched[fault.index] += 1
            if self._rngs[fault.index].random() < spec.probability and chosen is None:
                chosen = fault
        if chosen is not None:
            self._hits[chosen.index] += 1
        return chosen

    def _send(self, request: AWSPreparedRequest, operation: str) -> None:
        """Send the request to the emulator as botocore would have; its answer is dropped."""
        if self._session is None:
            self._session = URLLib3Session()
        response = self._session.send(request)
        _ = response.content
        body = _json_body(request)
        if operation == "StopExecution" and response.status_code < 300 and isinstance(body, dict):
            with self._lock:
                self.processor_stops.add(str(body.get("executionArn")))

    def _after_stop(self, http_response: Any, context: dict[str, Any], **_: Any) -> None:
        arn = context.get(_STOP_ARN)
        if arn and http_response is not None and http_response.status_code < 300:
            with self._lock:
                self.processor_stops.add(str(arn))

    # -- status events ----------------------------------------------------------------------------

    def drop_event(self) -> bool:
        """Whether this status event is dropped (each `drop_status_events` fault draws)."""
        with self._lock:
            self.events_seen += 1
            hits = [
                self._rngs[i].random() < f.probability
                for i, f in enumerate(self.scenario.faults)
                if isinstance(f, DropStatusEvents)
            ]
            if any(hits):
                self.injected[WorldFault.EVENT_LOST] += 1
                return True
        return False

    def event_delay(self) -> float:
        with self._lock:
            return self._delay_rng.uniform(*EVENT_DELAY_S)

    # -- the Spark worker -------------------------------------------------------------------------

    def kill_after(self, job_id: str) -> float | None:
        """Seconds the worker lives into this job, on its first run only; None: it does not die."""
        with self._lock:
            for fault in self.scenario.faults:
                if isinstance(fault, KillWorker) and fault.job == job_id and job_id not in self.killed:
                    self.killed.add(job_id)
                    self.injected["kill_worker"] += 1
                    self.applied.append(AppliedAction(self.clock() + fault.after_s, "kill_worker", job_id))
                    return fault.after_s
        return None

    # -- what the report asks ---------------------------------------------------------------------

    def duplicates_of(self, job_id: str) -> int:
        """How many `duplicate_delivery` faults took effect on this job."""
        return self.done.count(f"duplicate_delivery {job_id}")

    def lapse_excused(self, at: float, period_s: float) -> bool:
        """A lapse inside a pause longer than one extender period (the engine survives one lost or
        late run by design) or until the first run after it."""
        t = at - self.start
        return any(p.for_s > period_s and p.at_s <= t < p.at_s + p.for_s + period_s for p in self.pauses)

    def survivable_runs(self) -> int:
        """Lost scheduled runs in a row the settings survive: `adaptive_lost_runs_survived` for the
        adaptive policy (its lead is sized for them), one for the others (invariant 1)."""
        settings = self.scenario.settings
        return settings.adaptive_lost_runs_survived if settings.policy == "adaptive" else 1

    def outages(self) -> list[tuple[float, float]]:
        """Windows (epoch s) when faults cost more scheduled runs in a row than the settings survive:
        from the first run of the streak until one period after the first healthy run after it."""
        period = self.scenario.settings.extender_period_s
        survivable = self.survivable_runs()
        windows: list[tuple[float, float]] = []
        first: float | None = None
        streak = 0
        for slot in sorted(self.runs, key=lambda s: s.at):
            if slot.outcome in LOST_OUTCOMES:
                first = slot.at if first is None else first
                streak += 1
                continue
            if first is not None and streak > survivable:
                windows.append((first, slot.at + period))
            first, streak = None, 0
        if first is not None and streak > survivable:
            windows.append((first, math.inf))
        return windows

    def receiver_visibility_crashes(self, message_id: str) -> list[float]:
        """When a receiver invocation died (crashed or timed out) at this message's visibility change before
        the change left, after its lease write (a `crash_after` there died once the change took effect)."""
        return [
            i.at
            for i in self.injections
            if i.function == "receiver"
            and i.mode in (CallFault.CRASH_BEFORE, WorldFault.FUNCTION_TIMEOUT)
            and i.operation in VISIBILITY_OPERATIONS
            and message_id in i.message_ids
        ]

    def lapse_excuse(self, at: float, *, message_id: str, renewals: Sequence[float]) -> str | None:
        """Why a delivery of this message while its job ran was unavoidable under the faults, or None.

        - a `pause_extender` longer than one period, until one period after it;
        - more scheduled runs lost in a row than the settings survive (`outages`): runs skipped by
          `pause_extender` or `lose_scheduled_runs`, runs that crashed, and runs that were impaired (a
          renewal-path call failed for good on an injected fault, or injected faults made the run
          overrun its period), until one period after the first healthy run;
        - a receiver invocation that died at this message's visibility change, after writing its
          lease: the message is hidden only by the receive's own timeout, which the lease does not
          know, and the design lets the redelivery resume the attempt; until the next renewal.
        Throttling, 500s and ambiguous answers that botocore or the functions retried excuse nothing
        (invariant 6), nor does anything done to the watcher or the status events."""
        period = self.scenario.settings.extender_period_s
        if self.lapse_excused(at, period):
            return "extender paused for more than one period"
        if any(start <= at < end for start, end in self.outages()):
            return f"more than {self.survivable_runs()} scheduled extender run(s) in a row lost to faults"
        for crashed in self.receiver_visibility_crashes(message_id):
            renewed = min((r for r in renewals if r > crashed), default=math.inf)
            if crashed <= at < renewed:
                return "a receiver died between this message's lease write and its visibility change"
        return None

    def injected_by_mode(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted((mode, n) for mode, n in self.injected.items() if n))

    def faults_missed(self) -> list[str]:
        """Every fault that did not take effect, with the reason."""
        missed = list(self.missed)
        lost_runs = self.injected[RUN_FAULTS["lost"]]
        scheduled = len(self.runs)  # every slot: skipped, crashed or run
        for index, fault in enumerate(self.scenario.faults):
            place = f"faults[{index}] {fault.type}"
            if isinstance(fault, AwsFault | Throttle) and not self._hits[index]:
                spec = fault if isinstance(fault, AwsFault) else _as_aws_fault(fault)
                what = f"{place} ({spec.function} {spec.operation} {spec.mode})"
                matched = self._matched[index]
                missed.append(
                    f"{what}: {matched} matching call(s) in its window, none drawn"
                    if matched
                    else f"{what}: no matching call in its window"
                )
            elif isinstance(fault, PauseExtender) and not any(
                fault.at_s <= r.at - self.start < fault.at_s + fault.for_s for r in self.runs if r.outcome == "paused"
            ):
                missed.append(f"{place} at {fault.at_s:g} s: no scheduled run fell in its window")
            elif isinstance(fault, LoseScheduledRuns) and not lost_runs:
                missed.append(f"{place}: none of {scheduled} scheduled run(s) drawn")
            elif isinstance(fault, DropStatusEvents) and not self.injected[WorldFault.EVENT_LOST]:
                missed.append(
                    f"{place}: none of {self.events_seen} status event(s) drawn"
                    if self.events_seen
                    else f"{place}: no status event to drop"
                )
            elif isinstance(fault, KillWorker) and fault.job not in self.killed:
                missed.append(f"{place} on {fault.job}: the job never reached the Spark worker")
        return missed


_STOP_ARN = "offline_stop_execution_arn"


def _note_stop_arn(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    context[_STOP_ARN] = params.get("executionArn")


def _as_aws_fault(fault: Throttle) -> AwsFault:
    return AwsFault(
        type="aws_fault",
        function="extender",
        operation=fault.operation,
        mode="throttled",
        probability=fault.probability,
    )


class JobView(Protocol):
    """What the timed actions read about a job (the observer answers)."""

    def message_id(self, job_id: str) -> str: ...

    def current_message_id(self, job_id: str) -> str: ...

    def deliveries_of(self, job_id: str) -> list[Delivery]: ...

    def runs_its_job(self, job_id: str) -> bool: ...

    def settled(self, job_id: str) -> bool: ...


class PollHook(Protocol):
    """The event source mapping: runs an action on its thread just before its next receive."""

    def before_next_poll(self, action: Callable[[], object]) -> threading.Event: ...


@dataclass
class TimedActions:
    """Runs `abort_execution` and `duplicate_delivery` at their times, one thread each.

    `duplicate_delivery`: once the job runs, the mapping's own thread makes the message visible
    (`VisibilityTimeout=0` with the lease's handle) and receives at once: nothing runs between the two
    calls but the mapping's, so the next delivery is this one. If a renewal landed between them and hid
    the message again, that receive does not hold it, which the observer tells exactly (it sees every
    batch before the handler), and the two calls are repeated. It is applied only while the job runs,
    and its delivery must be seen while it still ran; otherwise it is reported missed.

    `abort_execution`: `StopExecution` of the lease's execution once it has entered a state (moto
    refuses a stop before) and while it runs; applied when the execution then reads ABORTED."""

    faults: Faults
    view: JobView
    mapping: PollHook
    store: LeaseStore
    sqs: SQSClient
    stepfunctions: SFNClient
    patience_s: float = ACTION_PATIENCE_S
    stopped: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for action in self.faults.scenario.faults:
            if isinstance(action, AbortExecution | DuplicateDelivery):
                thread = threading.Thread(
                    target=self._run, args=(action,), name=f"fault-{action.type}-{action.job}", daemon=True
                )
                self._threads.append(thread)
                thread.start()

    def stop(self) -> None:
        """Ask the threads to end; `join()` waits for them."""
        self.stopped.set()

    def join(self, timeout: float | None = None) -> None:
        for thread in self._threads:
            thread.join(timeout)

    def _run(self, action: AbortExecution | DuplicateDelivery) -> None:
        if self.stopped.wait(max(0.0, action.at_s - self.faults.elapsed())):
            self._missed(action, "the run ended first")
            return
        try:
            if isinstance(action, DuplicateDelivery):
                self._duplicate(action)
            else:
                self._abort(action)
        except Exception as exc:
            log.exception("fault %s on %s failed", action.type, action.job)
            self._missed(action, f"it failed: {exc}")

    def _missed(self, action: AbortExecution | DuplicateDelivery, reason: str) -> None:
        with self.faults._lock:
            self.faults.missed.append(f"{action.type} on {action.job} at {action.at_s:g} s: {reason}")

    def _applied(self, action: AbortExecution | DuplicateDelivery) -> None:
        with self.faults._lock:
            self.faults.done.append(f"{action.type} {action.job}")
            self.faults.applied.append(AppliedAction(self.faults.clock(), action.type, action.job))
            self.faults.injected[action.type] += 1

    def _duplicate(self, action: DuplicateDelivery) -> None:
        deadline = time.monotonic() + self.patience_s
        message_id = self.view.message_id(action.job)
        seen: int | None = None  # deliveries before the fault last made the message visible
        while not self.stopped.is_set() and time.monotonic() < deadline:
            # A delivery since the last attempt is the fault's, even if it came a poll later than the one
            # the attempt waited for (a FIFO receive may pass over a group's head just made visible).
            delivered = [] if seen is None else self.view.deliveries_of(action.job)[seen:]
            if delivered:
                if delivered[0].while_running:
                    self._applied(action)
                else:
                    self._missed(action, "delivered again, but its job had ended by then")
                return
            if self.view.settled(action.job):
                self._missed(action, "its job had ended")
                return
            lease = self.store.get(message_id)
            if lease is None or not lease.active or not self.view.runs_its_job(action.job):
                self.stopped.wait(0.1)
                continue
            seen = len(self.view.deliveries_of(action.job))
            received = self.mapping.before_next_poll(partial(self._make_visible, message_id, lease))
            while not received.wait(0.2):
                if self.stopped.is_set() or time.monotonic() >= deadline:
                    break
            else:
                if not self.view.deliveries_of(action.job)[seen:]:
                    log.info("duplicate_delivery of %s: not in the receive after; again", action.job)
                    self.stopped.wait(0.2)  # one more poll may still hand it out: looked at above
        self._missed(action, f"its job did not run while the fault waited ({self.patience_s:g} s)")

    def _make_visible(self, message_id: str, seen: Lease) -> None:
        lease = self.store.get(message_id) or seen
        self.sqs.change_message_visibility(
            QueueUrl=lease.queue_url, ReceiptHandle=lease.receipt_handle, VisibilityTimeout=0
        )

    def _abort(self, action: AbortExecution) -> None:
        deadline = time.monotonic() + self.patience_s
        while not self.stopped.is_set() and time.monotonic() < deadline:
            if self.view.settled(action.job):
                self._missed(action, "its job had ended")
                return
            # its message, or the parked copy that runs the job (a new message id)
            lease = self.store.get(self.view.current_message_id(action.job))
            if lease is not None and lease.active and lease.execution_arn and self._stoppable(lease.execution_arn):
                status = self._stop(lease.execution_arn)
                if status == "ABORTED":
                    self._applied(action)
                else:
                    self._missed(action, f"its execution ended {status} before the stop took effect")
                return
            self.stopped.wait(0.2)
        self._missed(action, f"no running execution of the job while the fault waited ({self.patience_s:g} s)")

    def _stoppable(self, arn: str) -> bool:
        """Running, and the engine has entered a state (moto refuses to stop one before)."""
        sfn = self.stepfunctions
        try:
            if sfn.describe_execution(executionArn=arn)["status"] != "RUNNING":
                return False
            events = sfn.get_execution_history(executionArn=arn)["events"]
        except sfn.exceptions.ExecutionDoesNotExist:
            return False
        return any(event["type"].endswith("StateEntered") for event in events)

    def _stop(self, arn: str) -> str:
        """StopExecution; the status it then ends in (moto's engine stops it a moment later)."""
        sfn = self.stepfunctions
        sfn.stop_execution(executionArn=arn, error="Operator", cause="abort_execution fault")
        with self.faults._lock:
            self.faults.fault_stops.add(arn)
        deadline = time.monotonic() + STOP_PATIENCE_S
        status = "RUNNING"
        while time.monotonic() < deadline:
            status = sfn.describe_execution(executionArn=arn)["status"]
            if status != "RUNNING":
                break
            time.sleep(0.05)
        return status
