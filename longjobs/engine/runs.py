"""Whether an execution's job run has ended: a job run outlives its execution.

A stopped or timed-out execution leaves its job run to end later. On a `.sync` task, Step Functions asks
the service to stop the run and does not wait for it, best effort
(https://docs.aws.amazon.com/step-functions/latest/dg/connect-to-resource.html, "Run a Job"); the offline
worker learns of its task's end at its next heartbeat. So a job lock freed by an execution's end does
not say that its run ended. Before a new attempt takes a job id's lock that another execution held, the
receiver asks the type's runner (`RunPlace`, from the `job_runs` setting) about that execution's run:

- EMR Serverless (the type's application): the run is read by its id. The execution's history
  (GetExecutionHistory) holds a `TaskSubmitted` event for each StartJobRun of its `startJobRun.sync` task,
  whose output is StartJobRun's answer: the application and the run's id. GetJobRun then gives the run's
  state; CancelJobRun asks a live one to stop. A listing cannot be trusted for this: ListJobRuns of several
  states comes grouped by state, so a run that changes state between two pages can be missed. The
  listing (ListJobRuns in the live states, created within the execution's life, named after it) is kept
  for what the history cannot tell: a start whose answer never reached it, or a history no longer kept.
- Glue (the type's job): GetJobRuns, newest first, back to the lock's taking, finds the run whose
  `--longjobs-execution` argument names the execution; BatchStopJobRun asks it to stop.
- The offline worker (the step's heartbeat timeout): its run may go on until that long after the lock's
  release. It stops at its first refused heartbeat, and by itself once none was accepted for that long.

The workflow names each run after its execution (EMR's `Name`, Glue's `--longjobs-execution`). A run
found running is asked to stop: its execution is gone, and Step Functions' own request may have been lost.

A run still running holds its job id: the new attempt waits in place (`LockState.RUN_ENDING`). An answer
that cannot be had counts as running: waiting is safe, running twice is not. A type with no place (an
inline type) has no run to wait for.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from botocore.exceptions import ClientError

from longjobs.engine.observability import logger

__all__ = [
    "EMR_LIVE",
    "EMR_TASK",
    "EXECUTION_ARGUMENT",
    "GLUE_LIVE",
    "EmrStarts",
    "JobRuns",
    "RunPlace",
    "emr_starts",
    "encode_places",
    "parse_places",
    "place_setting",
]

EMR_LIVE = ("SUBMITTED", "PENDING", "SCHEDULED", "RUNNING", "QUEUED", "CANCELLING")
"""EMR Serverless's states of a run not ended (https://docs.aws.amazon.com/emr/latest/EMR-Serverless-UserGuide/job-states.html)."""
GLUE_LIVE = ("STARTING", "RUNNING", "STOPPING", "WAITING")
"""Glue's states of a run not ended (https://docs.aws.amazon.com/glue/latest/dg/job-run-statuses.html)."""
EXECUTION_ARGUMENT = "--longjobs-execution"
"""The Glue run's argument naming the execution that started it (Glue runs have no name of their own)."""
CREATED_SLACK_S = 60.0
"""How much earlier than its lock's taking a run's creation time may read: the clocks of two services."""
GLUE_PAGE = 200
"""GetJobRuns' largest page."""
EMR_TASK = ("emr-serverless", "startJobRun.sync")
"""The workflow's EMR Serverless task as its history events name it, their `resourceType` and `resource`: the
Task's resource `arn:aws:states:::emr-serverless:startJobRun.sync`, split at its last colon
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_TaskSubmittedEventDetails.html)."""
HISTORY_PAGE = 1000
"""GetExecutionHistory's largest page (https://docs.aws.amazon.com/step-functions/latest/apireference/API_GetExecutionHistory.html)."""
EXECUTION_ENDS = frozenset({"ExecutionSucceeded", "ExecutionFailed", "ExecutionAborted", "ExecutionTimedOut"})
"""The history events that end an execution; `ExecutionRedriven` begins it again
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_HistoryEvent.html)."""

Runner = Literal["emr_serverless", "glue", "worker"]


@dataclass(frozen=True)
class RunPlace:
    """Where a type's runs can be asked about: its EMR Serverless application, its Glue job, or (the offline
    worker) the step's heartbeat timeout."""

    runner: Runner
    name: str = ""
    """The application's id, or the Glue job's name."""
    heartbeat_s: float = 0.0
    """The worker's step's heartbeat timeout: its run ends within this of its task's end."""


def parse_places(raw: str | None) -> dict[str, RunPlace]:
    """The `job_runs` setting decoded: `{"<type>": {"emr_application": id} | {"glue_job": name} |
    {"worker_heartbeat_s": seconds}}`. Raises ValueError naming what is wrong."""
    if not raw:
        return {}
    try:
        decoded = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"job_runs is not JSON: {exc}") from None
    if not isinstance(decoded, dict):
        raise ValueError('job_runs must be a JSON object {"<job type>": {...}, ...}')
    places: dict[str, RunPlace] = {}
    for job_type, place in decoded.items():
        if not isinstance(place, dict) or len(place) != 1:
            raise ValueError(f"job_runs[{job_type!r}] must name one of emr_application, glue_job, worker_heartbeat_s")
        ((key, value),) = place.items()
        if key == "emr_application" and isinstance(value, str) and value:
            places[str(job_type)] = RunPlace("emr_serverless", name=value)
        elif key == "glue_job" and isinstance(value, str) and value:
            places[str(job_type)] = RunPlace("glue", name=value)
        elif key == "worker_heartbeat_s" and isinstance(value, int | float) and value > 0:
            places[str(job_type)] = RunPlace("worker", heartbeat_s=float(value))
        else:
            raise ValueError(
                f"job_runs[{job_type!r}]: {key}={value!r} is not an application id, a Glue job name or a "
                "positive heartbeat timeout"
            )
    return places


def encode_places(places: Mapping[str, RunPlace]) -> dict[str, dict[str, Any]]:
    """`places` as the `job_runs` setting holds them (`parse_places` reads them back)."""
    encoded: dict[str, dict[str, Any]] = {}
    for job_type, place in sorted(places.items()):
        if place.runner == "emr_serverless":
            encoded[job_type] = {"emr_application": place.name}
        elif place.runner == "glue":
            encoded[job_type] = {"glue_job": place.name}
        else:
            encoded[job_type] = {"worker_heartbeat_s": place.heartbeat_s}
    return encoded


def place_setting(places: Mapping[str, RunPlace]) -> str:
    """The `job_runs` setting that names `places`."""
    return json.dumps(encode_places(places), sort_keys=True)


@dataclass(frozen=True)
class EmrStarts:
    """What an execution's history says of its EMR Serverless task (`EMR_TASK`): how often Step Functions
    scheduled it, the run each StartJobRun answered, and whether the execution has ended."""

    scheduled: int = 0
    """The task's attempts (`TaskScheduled`): its Retry schedules it again after a failed start."""
    runs: tuple[tuple[str | None, str], ...] = ()
    """Each answered start's application id (None when its answer names none) and run id (`TaskSubmitted`)."""
    ended: bool = False
    """The history closes with the execution's end: no task of it will be scheduled any more."""

    @property
    def unanswered(self) -> bool:
        """Some attempt has no run read from its answer: its StartJobRun failed, or created a run whose
        answer was lost, or answered what cannot be read."""
        return self.scheduled > len(self.runs)


def emr_starts(events: Iterable[Mapping[str, Any]]) -> EmrStarts:
    """The EMR Serverless task's starts in an execution's history events, read in order. A `TaskSubmitted`
    event's output is the response of the task's call
    (https://docs.aws.amazon.com/step-functions/latest/apireference/API_TaskSubmittedEventDetails.html):
    for `startJobRun.sync`, StartJobRun's, which names the application and the run
    (https://docs.aws.amazon.com/step-functions/latest/dg/connect-emr-serverless.html,
    https://docs.aws.amazon.com/emr-serverless/latest/APIReference/API_StartJobRun.html). These pages do not
    show the output's spelling: the integration's parameters are capitalized (`JobRunId`), the service's
    answer is not (`jobRunId`). Both are read."""
    scheduled, ended = 0, False
    runs: list[tuple[str | None, str]] = []
    for event in events:
        kind = event.get("type")
        if kind in EXECUTION_ENDS:
            ended = True
        elif kind == "ExecutionRedriven":
            ended = False
        elif kind == "TaskScheduled" and _names_emr_task(event.get("taskScheduledEventDetails")):
            scheduled += 1
        elif kind == "TaskSubmitted" and _names_emr_task(details := event.get("taskSubmittedEventDetails") or {}):
            run = _submitted_run(details.get("output"))
            if run is not None:
                runs.append(run)
    return EmrStarts(scheduled, tuple(runs), ended)


def _names_emr_task(details: Any) -> bool:
    return isinstance(details, Mapping) and (details.get("resourceType"), details.get("resource")) == EMR_TASK


def _submitted_run(output: Any) -> tuple[str | None, str] | None:
    """The (application id, run id) a StartJobRun answer names; None when it names no run."""
    try:
        answer = json.loads(output) if isinstance(output, str) else None
    except ValueError:
        return None
    if not isinstance(answer, dict):
        return None
    run_id = answer.get("JobRunId", answer.get("jobRunId"))
    application = answer.get("ApplicationId", answer.get("applicationId"))
    if not isinstance(run_id, str) or not run_id:
        return None
    return (application if isinstance(application, str) and application else None), run_id


class JobRuns:
    """The runners of one deployment's types (see the module). `client(service)` makes a client of
    `emr-serverless` or `glue`, at its first use; `stepfunctions` reads an execution's history (an EMR
    Serverless run's id)."""

    def __init__(
        self, places: Mapping[str, RunPlace], client: Callable[[str], Any] | None, stepfunctions: Any = None
    ) -> None:
        self.places = dict(places)
        self._client = client
        self._stepfunctions = stepfunctions
        self._clients: dict[str, Any] = {}
        self._making = threading.Lock()  # a batch's records ask on threads at once: one client a service

    def _of(self, service: str) -> Any:
        if self._client is None:
            raise RuntimeError(f"no {service} client: the runner of a type cannot be asked")
        with self._making:
            if service not in self._clients:
                self._clients[service] = self._client(service)
            return self._clients[service]

    def running(self, job_type: str, execution_arn: str, *, since: float, ended_at: float | None, now: float) -> bool:
        """Whether the job run of `execution_arn` (which took its job id's lock at `since`, and ended, or
        freed the lock, at `ended_at`: None when not known) may still be running; one found running is
        asked to stop. The worker's run is judged by the time alone: with none known, long over."""
        place = self.places.get(job_type)
        if place is None:
            return False
        if place.runner == "worker":
            ended_by = self.ended_by(job_type, ended_at)
            return ended_by is not None and now < ended_by
        name = execution_arn.rpartition(":")[2]
        try:
            if place.runner == "emr_serverless":
                return self._emr(place.name, execution_arn, since=since, ended_at=ended_at)
            return self._glue(place.name, name, since)
        except Exception as exc:
            logger.warning(
                "job run's state unknown: counted as running",
                extra={"job_type": job_type, "execution": name, "error": str(exc)},
            )
            return True

    def ended_by(self, job_type: str, ended_at: float | None) -> float | None:
        """When a run whose execution ended (or freed its lock) at `ended_at` has surely ended, when that is
        known without asking: the worker's, a heartbeat timeout later. None for a runner asked by name."""
        place = self.places.get(job_type)
        if place is None or place.runner != "worker" or ended_at is None:
            return None
        return ended_at + place.heartbeat_s

    def _emr(self, application_id: str, execution_arn: str, *, since: float, ended_at: float | None) -> bool:
        """Each run the execution's history names is read by its id (a live one is asked to stop). The
        listing looks for a run that the history cannot name: an attempt with no answer read, or a history
        no longer kept. An execution that has not ended counts as running whatever its history shows so
        far: a start may be in flight, its Retry may start the task again, and a redriven execution
        schedules it again (RedriveExecution reruns the unsuccessful step,
        https://docs.aws.amazon.com/step-functions/latest/apireference/API_RedriveExecution.html). Its lock
        is freed as it ends, so that wait is short."""
        name = execution_arn.rpartition(":")[2]
        if self._stepfunctions is None:
            raise RuntimeError("no Step Functions client: an execution's history cannot be read")
        try:
            starts = emr_starts(
                _items(
                    self._stepfunctions.get_execution_history,
                    {"executionArn": execution_arn, "maxResults": HISTORY_PAGE},
                    "events",
                    "nextToken",
                )
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ExecutionDoesNotExist":
                raise
            logger.info("execution's history not kept: its run is looked for by name", extra={"execution": name})
            return self._emr_listed(application_id, name, since=since, ended_at=ended_at)
        running = False
        for application, run_id in starts.runs:
            running = self._emr_run(application or application_id, run_id, name) or running
        if not starts.ended:
            logger.info("execution has not ended: it may still start a run", extra={"execution": name})
            return True
        if starts.unanswered:
            running = self._emr_listed(application_id, name, since=since, ended_at=ended_at) or running
        return running

    def _emr_run(self, application_id: str, run_id: str, name: str) -> bool:
        """GetJobRun: whether the run is live, asking it to stop unless it is already cancelling."""
        client = self._of("emr-serverless")
        state = (client.get_job_run(applicationId=application_id, jobRunId=run_id).get("jobRun") or {}).get("state")
        if state not in EMR_LIVE:
            return False
        if state != "CANCELLING":
            client.cancel_job_run(applicationId=application_id, jobRunId=run_id)
        logger.info("job run still running: asked to stop", extra={"execution": name, "run": run_id})
        return True

    def _emr_listed(self, application_id: str, name: str, *, since: float, ended_at: float | None) -> bool:
        """ListJobRuns in the live states, named after the execution. Its window is the execution's life:
        from its start, and to its end when known (a lock is freed at or after its execution's end, and
        the run was created before it). The narrower the window, the fewer pages a run could slip between."""
        client = self._of("emr-serverless")
        params: dict[str, Any] = {
            "applicationId": application_id,
            "states": list(EMR_LIVE),
            "createdAtAfter": datetime.fromtimestamp(since - CREATED_SLACK_S, UTC),
        }
        if ended_at is not None:
            params["createdAtBefore"] = datetime.fromtimestamp(ended_at + CREATED_SLACK_S, UTC)
        for run in _items(client.list_job_runs, params, "jobRuns", "nextToken"):
            if run.get("name") == name:
                if run.get("state") != "CANCELLING":
                    client.cancel_job_run(applicationId=application_id, jobRunId=run["id"])
                logger.info("job run still running: asked to stop", extra={"execution": name, "run": run["id"]})
                return True
        return False

    def _glue(self, job_name: str, name: str, since: float) -> bool:
        """GetJobRuns lists every run of the job newest first by start: a run's place in it never changes
        with its state, so no run slips between pages as the runs' states change."""
        client = self._of("glue")
        params: dict[str, Any] = {"JobName": job_name, "MaxResults": GLUE_PAGE}
        for run in _items(client.get_job_runs, params, "JobRuns", "NextToken"):
            started = run.get("StartedOn")
            if isinstance(started, datetime) and started.timestamp() < since - CREATED_SLACK_S:
                return False  # newest first: every run from here began before the lock was taken
            if (run.get("Arguments") or {}).get(EXECUTION_ARGUMENT) != name:
                continue
            if run.get("JobRunState") not in GLUE_LIVE:
                return False
            if run.get("JobRunState") != "STOPPING":
                client.batch_stop_job_run(JobName=job_name, JobRunIds=[run["Id"]])
            logger.info("job run still running: asked to stop", extra={"execution": name, "run": run["Id"]})
            return True
        return False


def _items(call: Callable[..., Any], params: dict[str, Any], items: str, token: str) -> Iterator[dict[str, Any]]:
    """The items of every page of a listing, a page read only when the one before was used up. By hand, not
    botocore's paginator: the simulation's clients take calls, and have none."""
    while True:
        page = call(**params)
        yield from page.get(items, [])
        if not page.get(token):
            return
        params = {**params, token: page[token]}
