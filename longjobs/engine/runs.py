"""Whether an execution's job run has ended: a job run outlives its execution.

A stopped or timed-out execution leaves its job run to end later. On a `.sync` task, Step Functions asks
the service to stop the run and does not wait for it, best effort
(https://docs.aws.amazon.com/step-functions/latest/dg/connect-to-resource.html, "Run a Job"); the offline
worker learns of its task's end at its next heartbeat. So a job lock freed by an execution's end does
not say that its run ended. Before a new attempt takes a job id's lock that another execution held, the
receiver asks the type's runner (`RunPlace`, from the `job_runs` setting) about that execution's run:

- EMR Serverless (the type's application): ListJobRuns in the states of a run not ended, created since
  the lock was taken, finds the run named after the execution; CancelJobRun asks it to stop.
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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from longjobs.engine.observability import logger

__all__ = [
    "EMR_LIVE",
    "EXECUTION_ARGUMENT",
    "GLUE_LIVE",
    "JobRuns",
    "RunPlace",
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


class JobRuns:
    """The runners of one deployment's types (see the module). `client(service)` makes a client of
    `emr-serverless` or `glue`, at its first use."""

    def __init__(self, places: Mapping[str, RunPlace], client: Callable[[str], Any] | None) -> None:
        self.places = dict(places)
        self._client = client
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
                return self._emr(place.name, name, since)
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

    def _emr(self, application_id: str, name: str, since: float) -> bool:
        client = self._of("emr-serverless")
        params: dict[str, Any] = {
            "applicationId": application_id,
            "states": list(EMR_LIVE),
            "createdAtAfter": datetime.fromtimestamp(since - CREATED_SLACK_S, UTC),
        }
        for run in _items(client.list_job_runs, params, "jobRuns", "nextToken"):
            if run.get("name") == name:
                if run.get("state") != "CANCELLING":
                    client.cancel_job_run(applicationId=application_id, jobRunId=run["id"])
                logger.info("job run still running: asked to stop", extra={"execution": name, "run": run["id"]})
                return True
        return False

    def _glue(self, job_name: str, name: str, since: float) -> bool:
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
