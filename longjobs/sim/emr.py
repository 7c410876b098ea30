"""EMR Serverless in the simulation: the job runs that the workflow's `emr-serverless:startJobRun.sync`
task starts, their states, and what Step Functions does to them when the execution stops.

moto's Step Functions engine runs no `.sync` integration, and its EMR Serverless runs no job, so the
offline runtime runs an emr_serverless type's job on the local Spark worker (the token-queue step, as a
Glue type's); the simulation renders the definition with the cloud's EMR Serverless step and answers it
here. The calls the processor makes (GetJobRun, ListJobRuns) are held to moto's by the contract tests.
What AWS documents, and this model follows:

- StartJobRun takes a client token
  (https://docs.aws.amazon.com/emr-serverless/latest/APIReference/API_StartJobRun.html): a start retried
  with the same token finds the run it started.
- A run goes SUBMITTED, SCHEDULED, RUNNING, then SUCCESS or FAILED; a cancel makes it CANCELLING, then
  CANCELLED; a run past `executionTimeoutMinutes` is cancelled
  (https://docs.aws.amazon.com/emr/latest/EMR-Serverless-UserGuide/job-states.html). Here: 1 to 30 s to
  start, 5 to 60 s to cancel.
- When a `.sync` task is abandoned (its execution stopped or timed out), Step Functions makes a
  best-effort attempt to cancel the job (https://docs.aws.amazon.com/step-functions/latest/dg/connect-to-resource.html,
  "Run a Job"). Here: CancelJobRun 0.5 to 5 s later, lost now and then (`CANCEL_LOST`), when the run
  ends at its own limit.
- An application with a scheduler configuration runs at most `maxConcurrentRuns` jobs at once; the
  others wait QUEUED, in the order they came, and a run queued past `queueTimeoutMinutes` times out
  (https://docs.aws.amazon.com/emr/latest/EMR-Serverless-UserGuide/applications-concurrency-queuing.html;
  the queued run's end state is not documented: here FAILED). A run leaves the queue as PENDING and
  holds its place until its end; its `executionTimeoutMinutes` counts from then, since the queue has a
  timeout of its own (AWS does not say). Without a configuration (the campaign's), no run queues.
- The `.sync` task ends when the run does: with its output on SUCCESS, an error otherwise. The error's
  name is not documented; here `States.TaskFailed` with the run as its cause (the workflow catches every
  error of the job's step).
- The processor asks about a run by its id (GetJobRun), or looks for it in ListJobRuns, and cancels it
  (CancelJobRun). ListJobRuns pages by position in the list as it is when read: a run that leaves the
  listed states moves the runs after it forward, so one can slip into a page already read. AWS groups a
  listing of several states by state, so a run changing state between pages may slip there too
  (https://docs.aws.amazon.com/emr-serverless/latest/APIReference/API_ListJobRuns.html).

Faults are drawn on a stream of the seed's own (`emr:<seed>`), inside the fault window only: a start whose
answer is lost after it succeeded (`START_ANSWER_LOST`), a run stuck in the application's queue past its
step's timeout (`STUCK_QUEUED`), a cancel that does not happen (`CANCEL_LOST`, and every cancel in a
share of seeds, `CANCELS_LOST_SHARE`, outside the fault window too).
"""

from __future__ import annotations

import json
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from longjobs.sim.aws import ACCOUNT, REGION, client_error
from longjobs.sim.scheduler import Group, Scheduler, Signal
from longjobs.sim.trace import Trace
from longjobs.sim.workflow import StatesError
from longjobs.sim.workload import SparkBehaviour

EMR_RESOURCE = "arn:aws:states:::emr-serverless:startJobRun.sync"
SCHEDULING_S = (1.0, 30.0)
CANCELLING_S = (5.0, 60.0)
CANCEL_CALL_S = (0.5, 5.0)
START_ANSWER_LOST = 0.05
STUCK_QUEUED = 0.02
CANCEL_LOST = 0.1
CANCELS_LOST_SHARE = 0.25
"""The share of seeds whose every best-effort cancel by Step Functions is lost (a state machine role without
`emr-serverless:CancelJobRun` does this): each stopped execution leaves its run to the processor."""
TERMINAL = frozenset({"SUCCESS", "FAILED", "CANCELLED"})
LIST_PAGE = 50  # ListJobRuns' largest page
EMR_APPLICATION = "sim"  # the application's id


@dataclass(frozen=True)
class SchedulerConfiguration:
    """An application's job concurrency and queuing (the API's `SchedulerConfiguration`)."""

    max_concurrent_runs: int
    queue_timeout_s: float


@dataclass
class JobRun:
    """One EMR Serverless job run."""

    run_id: str
    token: str
    name: str  # StartJobRun's `Name`
    execution_arn: str
    behaviour: SparkBehaviour
    limit_s: float  # executionTimeoutMinutes
    submitted: float
    limit_from: float = 0.0  # when its limit began to count: its submission, or its leaving the queue
    state: str = "SUBMITTED"
    ended: float | None = None
    cancel_lost: bool = False  # Step Functions' cancel of it was lost
    execution_ended: float | None = None
    declared_limit_s: float = 0.0  # the type's own limit
    running_since: float | None = None  # when it reached RUNNING
    placed: bool = False  # it holds one of the application's concurrent runs (`SchedulerConfiguration`)
    step_timeout_s: float | None = None  # its task's TimeoutSeconds
    changed: Signal = field(default_factory=Signal)  # set (and replaced) at each state change

    def describe(self) -> dict[str, Any]:
        return {"JobRunId": self.run_id, "State": self.state}


class EmrServerless:
    """The job runs of one seed's world (see the module). `on_end(run)` is told of each run's end."""

    def __init__(
        self,
        scheduler: Scheduler,
        trace: Trace,
        seed: int,
        *,
        faults_active: Callable[[float], bool],
        reach: Callable[[str], None],
        configuration: SchedulerConfiguration | None = None,
        on_run: Callable[[JobRun], None] | None = None,
    ) -> None:
        """`on_run(run)` is told when a run is submitted and when it reaches its end state."""
        self.configuration = configuration
        self._on_run = on_run
        self._placed = 0
        self._queued: deque[JobRun] = deque()
        self._scheduler = scheduler
        self._trace = trace
        self._rng = random.Random(f"emr:{seed}")
        self.cancels_lost = random.Random(f"emr:{seed}:cancels").random() < CANCELS_LOST_SHARE
        """Every cancel Step Functions makes is lost in this seed (`CANCELS_LOST_SHARE`)."""
        self.faults_active = faults_active
        """Whether the service's own faults (a lost start answer, a run stuck queued, a lost cancel) may strike now."""
        self._reach = reach
        self.runs: dict[str, JobRun] = {}
        self._by_token: dict[str, str] = {}
        self._by_execution: dict[str, list[str]] = {}

    def _fault(self, chance: float) -> bool:
        return self.faults_active(self._scheduler.now()) and self._rng.random() < chance

    # -- the `.sync` task ---------------------------------------------------------------------------------------

    def run_job(
        self,
        parameters: dict[str, Any],
        execution_arn: str,
        behaviour: SparkBehaviour,
        timeout_s: float | None,
        declared_limit_s: float,
        *,
        submitted: Callable[[dict[str, Any]], None] | None = None,
    ) -> Any:
        """The task: start the run (idempotent by its client token), then wait for its end. `declared_limit_s`
        is the type's `timeout_minutes`: the run must end by it (plus a cancel), whatever the state asked.
        `submitted(answer)` is told StartJobRun's answer when it reaches Step Functions (not when it is lost):
        the execution's history records it (`TaskSubmitted`)."""
        run = self._start(parameters, execution_arn, behaviour)
        run.step_timeout_s = timeout_s
        run.declared_limit_s = declared_limit_s
        if self._fault(START_ANSWER_LOST):
            self._reach("emr:start_answer_lost")
            raise StatesError("EMRServerless.InternalServerException", "the start's answer was lost")
        if submitted is not None:
            submitted(self.start_answer(run))
        return self._wait(run, timeout_s)

    @staticmethod
    def start_answer(run: JobRun) -> dict[str, Any]:
        """StartJobRun's answer as the `.sync` integration reports it, spelled as the integration's parameters
        are (https://docs.aws.amazon.com/emr-serverless/latest/APIReference/API_StartJobRun.html). AWS's pages
        do not show the spelling; the processor reads the service's too (`longjobs.engine.runs.emr_starts`)."""
        return {"ApplicationId": EMR_APPLICATION, "JobRunId": run.run_id, "Arn": _run_arn(run.run_id)}

    def _start(self, parameters: dict[str, Any], execution_arn: str, behaviour: SparkBehaviour) -> JobRun:
        token = str(parameters["ClientToken"])
        existing = self._by_token.get(token)
        if existing is not None:
            self._reach("emr:start_found_its_run")
            return self.runs[existing]
        now = self._scheduler.now()
        run = JobRun(
            run_id=f"00r{len(self.runs):04d}",
            token=token,
            name=str(parameters.get("Name", "")),
            execution_arn=execution_arn,
            behaviour=behaviour,
            limit_s=float(parameters.get("ExecutionTimeoutMinutes", 720)) * 60,  # the service's default: 12 h
            submitted=now,
            limit_from=now,
        )
        if parameters.get("RetryPolicy", {}).get("MaxAttempts") != 1:
            raise StatesError("States.Runtime", "the simulation models one attempt per run: RetryPolicy.MaxAttempts 1")
        self.runs[run.run_id] = run
        self._by_token[token] = run.run_id
        self._by_execution.setdefault(execution_arn, []).append(run.run_id)
        self._trace.event("emr", "job_run_started", run=run.run_id, execution=execution_arn.rsplit(":", 1)[-1])
        if self._on_run is not None:
            self._on_run(run)
        self._scheduler.spawn(lambda: self._lifecycle(run), group=Group(f"emr:{run.run_id}"))
        return run

    def _wait(self, run: JobRun, timeout_s: float | None) -> Any:
        deadline = self._scheduler.now() + (timeout_s if timeout_s is not None else 99_999_999)
        while run.state not in TERMINAL:
            try:
                self._scheduler.wait_for(run.changed, max(0.0, deadline - self._scheduler.now()))
            except TimeoutError:
                self._reach("emr:step_timed_out")
                self._cancel_soon(run, "the step timed out")
                raise StatesError("States.Timeout", "the task ran past its TimeoutSeconds") from None
        if run.state == "SUCCESS":
            return {"ApplicationId": EMR_APPLICATION, "JobRunId": run.run_id, "JobRun": run.describe()}
        raise StatesError("States.TaskFailed", json.dumps(run.describe(), sort_keys=True))

    # -- the run ----------------------------------------------------------------------------------------------

    def _set(self, run: JobRun, state: str) -> None:
        run.state = state
        changed, run.changed = run.changed, Signal()
        self._trace.event("emr", "job_run_state", run=run.run_id, state=state)
        if state in TERMINAL:
            run.ended = self._scheduler.now()
            if run.placed:
                self._place_next()
            self._reach(f"emr:run:{state}")
            if run.execution_ended is not None and run.ended > run.execution_ended:
                self._reach("emr:run_outlived_its_execution")
            if self._on_run is not None:
                self._on_run(run)
        self._scheduler.set(changed, state)

    def _lifecycle(self, run: JobRun) -> None:
        scheduler = self._scheduler
        stuck = self._fault(STUCK_QUEUED)
        if stuck:
            self._reach("emr:stuck_queued")
        if not stuck and not self._admitted(run):  # a run stuck in the application's queue holds no place
            return
        if not self._phase(run, 99_999_999 if stuck else self._rng.uniform(*SCHEDULING_S)):
            return
        run.running_since = self._scheduler.now()
        self._set(run, "RUNNING")
        behaviour = run.behaviour
        limit_left = run.limit_s - (scheduler.now() - run.limit_from)
        runs_for = behaviour.seconds / 2 if behaviour.kind == "vanish" else behaviour.seconds
        if behaviour.kind == "hang" or runs_for >= limit_left:
            if not self._phase(run, max(0.0, limit_left)):
                return
            self._reach("emr:run_past_its_limit")
            self._cancel(run)  # EMR Serverless cancels a run past executionTimeoutMinutes
            return
        if not self._phase(run, runs_for):
            return
        self._set(run, "SUCCESS" if behaviour.kind == "ok" else "FAILED")

    def _admitted(self, run: JobRun) -> bool:
        """Whether the run may go on to be scheduled: at once without a configuration or with a run free,
        else once a run ends and frees its place (False when it timed out or was cancelled in the queue)."""
        config = self.configuration
        if config is None:
            return True
        if self._placed < config.max_concurrent_runs and not self._queued:
            self._placed += 1
            run.placed = True
            return True
        self._queued.append(run)
        self._set(run, "QUEUED")
        if not self._phase(run, config.queue_timeout_s):
            return run.state == "PENDING"  # placed by an ending run (`_place_next`); else cancelled
        self._reach("emr:queue_timed_out")
        self._queued.remove(run)
        self._set(run, "FAILED")
        return False

    def _place_next(self) -> None:
        """A placed run ended: the first run still queued takes its place."""
        self._placed -= 1
        while self._queued:
            run = self._queued.popleft()
            if run.state == "QUEUED":  # not cancelled meanwhile
                self._placed += 1
                run.placed = True
                run.limit_from = self._scheduler.now()
                self._set(run, "PENDING")
                return

    def _phase(self, run: JobRun, seconds: float) -> bool:
        """Wait `seconds` in the current state; False when a cancel came meanwhile (it ends the run)."""
        state = run.state
        deadline = self._scheduler.now() + seconds
        while run.state == state and self._scheduler.now() < deadline:
            try:
                self._scheduler.wait_for(run.changed, deadline - self._scheduler.now())
            except TimeoutError:
                break
        return run.state == state

    def _cancel(self, run: JobRun) -> None:
        """CancelJobRun: CANCELLING, then CANCELLED (a run already ended or cancelling stays as it is)."""
        if run.state in TERMINAL or run.state == "CANCELLING":
            return
        self._set(run, "CANCELLING")
        at = self._scheduler.now() + self._rng.uniform(*CANCELLING_S)
        self._scheduler.call_at(at, lambda: self._set(run, "CANCELLED"))

    def _cancel_soon(self, run: JobRun, why: str) -> None:
        """Step Functions' best-effort cancel of a task it abandons."""
        if run.state in TERMINAL:
            return
        if self._fault(CANCEL_LOST) or self.cancels_lost:
            self._reach("emr:cancel_lost")
            run.cancel_lost = True
            self._trace.event("emr", "cancel_lost", run=run.run_id, why=why)
            return
        self._reach("emr:cancelled_by_step_functions")
        at = self._scheduler.now() + self._rng.uniform(*CANCEL_CALL_S)
        self._scheduler.call_at(at, lambda: self._cancel(run))

    def execution_ended(self, execution_arn: str) -> None:
        """The execution ended (stopped, timed out, or by itself): its unfinished runs are cancelled, best
        effort."""
        now = self._scheduler.now()
        for run_id in self._by_execution.get(execution_arn, []):
            run = self.runs[run_id]
            run.execution_ended = now
            if run.state not in TERMINAL:
                self._cancel_soon(run, "its execution ended")

    # -- the API the processor calls ---------------------------------------------------------------------------

    def list_job_runs(
        self,
        *,
        applicationId: str,
        states: list[str] | None = None,
        createdAtAfter: Any = None,
        createdAtBefore: Any = None,
        nextToken: str | None = None,
        maxResults: int = LIST_PAGE,
    ) -> dict[str, Any]:
        """ListJobRuns: the application's runs, newest first, in `states`, created after `createdAtAfter` and
        before `createdAtBefore` (https://docs.aws.amazon.com/emr-serverless/latest/APIReference/API_ListJobRuns.html).
        A page starts at a position in the list as it is when read: runs that left it since the page before
        move the others forward, past the reader."""
        after = createdAtAfter.timestamp() if createdAtAfter is not None else -math.inf
        before = createdAtBefore.timestamp() if createdAtBefore is not None else math.inf
        found = [
            run
            for run in sorted(self.runs.values(), key=lambda run: run.submitted, reverse=True)
            if (not states or run.state in states) and after < run.submitted < before
        ]
        start = int(nextToken or 0)
        page = found[start : start + min(maxResults, LIST_PAGE)]
        answer: dict[str, Any] = {
            "jobRuns": [
                {"applicationId": applicationId, "id": run.run_id, "name": run.name, "state": run.state} for run in page
            ]
        }
        if start + len(page) < len(found):
            answer["nextToken"] = str(start + len(page))
        return answer

    def get_job_run(self, *, applicationId: str, jobRunId: str) -> dict[str, Any]:
        """GetJobRun: the run's details, its state among them; a run the application does not hold is
        ResourceNotFoundException (HTTP 404)
        (https://docs.aws.amazon.com/emr-serverless/latest/APIReference/API_GetJobRun.html)."""
        run = self.runs.get(jobRunId)
        if applicationId != EMR_APPLICATION or run is None:
            raise client_error(
                "GetJobRun", "ResourceNotFoundException", f"Job run {jobRunId} does not exist", status=404
            )
        at = datetime.fromtimestamp(run.submitted, UTC)
        return {
            "jobRun": {
                "applicationId": applicationId,
                "jobRunId": run.run_id,
                "arn": _run_arn(run.run_id),
                "name": run.name,
                "state": run.state,
                "stateDetails": "",
                "createdAt": at,
                "updatedAt": at,
            }
        }

    def cancel_job_run(self, *, applicationId: str, jobRunId: str) -> dict[str, Any]:
        """CancelJobRun: the run goes CANCELLING, then CANCELLED (one ended stays as it is)."""
        self._reach("emr:cancelled_by_the_processor")
        self._cancel(self.runs[jobRunId])
        return {"applicationId": applicationId, "jobRunId": jobRunId}

    # -- the checks ---------------------------------------------------------------------------------------------

    def problems(self, now: float) -> list[str]:
        """Each run that broke what the design relies on: one run per execution (the client token), and
        every run ended by its limit plus a cancel (`executionTimeoutMinutes` is its backstop when a
        cancel is lost). A run stuck in the application's queue whose cancel by Step Functions was lost is
        left out: the model never starts it (whether its limit counts while it waits is not documented),
        and the processor cancels it only when the job's next attempt comes."""
        found = [
            f"execution {arn.rsplit(':', 1)[-1]} started {len(runs)} runs"
            for arn, runs in sorted(self._by_execution.items())
            if len(runs) > 1
        ]
        for run in self.runs.values():
            # a run that never left the application's queue is cancelled when its step times out
            limit_s = (
                run.declared_limit_s
                if run.running_since is not None or run.step_timeout_s is None
                else run.step_timeout_s
            )
            start = run.limit_from if run.running_since is not None else run.submitted
            bound = start + limit_s + CANCELLING_S[1] + CANCEL_CALL_S[1]
            lost = run.running_since is None and run.cancel_lost
            end = run.ended if run.ended is not None else now
            if not lost and end > bound:
                ran = end - run.submitted
                found.append(f"run {run.run_id} ran until {ran:.0f} s, past its type's limit {limit_s:.0f} s")
        return found


def _run_arn(run_id: str) -> str:
    return f"arn:aws:emr-serverless:{REGION}:{ACCOUNT}:/applications/{EMR_APPLICATION}/jobruns/{run_id}"
