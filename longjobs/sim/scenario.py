"""A scenario file of the offline runtime (`longjobs.offline.scenario`), run in the simulation.

The same JSON that `python -m offline run --scenario FILE` runs on the real offline runtime (moto's
server, threads, local Spark, real time) runs here on virtual time in a fraction of a second, with its
jobs, settings and faults mapped onto the world:

| scenario | simulation |
| --- | --- |
| `wait`, generic jobs (of any declared type), `raw_body` | job messages sent in file order |
| `spark` jobs, jobs of a pyspark type | a Spark run of 30 s that succeeds (`kill_worker`: silent after `after_s`) |
| jobs of an emr_serverless type | the same run, on EMR Serverless (`longjobs.sim.emr`) |
| `pause_extender`, `lose_scheduled_runs` | scheduled extender runs lost (beyond the design's bound, as written) |
| `throttle`, `aws_fault` | call rules: throttle, 5xx, answer lost after the call took effect, crash before it |
| `abort_execution`, `duplicate_delivery` | the world stops the execution, or shows the message again, at `at_s` |
| `drop_status_events` | status events lost |

`run_scenario` returns the world's result and a report per job (final state, deliveries, executions and
their statuses, releases, renewals, redeliveries while running, the DLQ's reason), read from the trace.
A raw body that names a job id is a message of that job (a second message of one job id). A given
`dedup_id` is refused, naming what is not modelled (content-based deduplication is); a scenario's own
job types are rendered into the workflow as the stack renders them (those of the simulation's catalog
are its own already); `spark_heartbeat_s` is the simulation's (60 s), not the file's.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from longjobs.history.faults import CallFault, WorldFault
from longjobs.offline.resources import RUNTIME_SETTINGS
from longjobs.offline.scenario import (
    AbortExecution,
    AwsFault,
    DropStatusEvents,
    DuplicateDelivery,
    GenericJob,
    KillWorker,
    LoseScheduledRuns,
    PauseExtender,
    RawJob,
    Scenario,
    SparkJob,
    Throttle,
    WaitJob,
)
from longjobs.sim.faults import CRASHING_ACTORS, CallRule, FaultPlan
from longjobs.sim.workload import (
    CATALOG,
    PARTITION_SECONDS,
    SPARK_PARAMS,
    JobPlan,
    SparkBehaviour,
    Workload,
    notification_markers,
)

SPARK_RUN_S = 30.0


class NotModelled(ValueError):
    """The scenario uses something the simulation does not model; the message names it."""


@dataclass
class JobReport:
    final: str = "queued"  # deleted | dlq | queued
    deliveries: int = 0
    executions: list[str] = field(default_factory=list)  # each execution's end status, in start order
    released: int = 0
    renewals: int = 0
    redelivered_while_running: int = 0
    dlq_error: str | None = None


@dataclass
class ScenarioRun:
    result: Any  # the world's SeedResult
    jobs: dict[str, JobReport]
    calls: Counter[str]  # service.operation -> calls, every actor's


def _snake(operation: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower()


def _plan(scenario: Scenario) -> list[JobPlan]:
    names = {str(declared["name"]) for declared in [*CATALOG["job_types"], *scenario.job_types]}
    names |= {"wait", "spark", "echo"}
    pyspark = {
        str(declared["name"])
        for declared in [*CATALOG["job_types"], *scenario.job_types]
        if declared.get("runner") == "pyspark"
    }
    kills = {fault.job: fault.after_s for fault in scenario.faults if isinstance(fault, KillWorker)}
    plans = []
    for index, job in enumerate(scenario.jobs):
        at = index * 0.001  # in file order
        if job.dedup_id is not None:
            raise NotModelled(f"jobs[{index}].dedup_id: a given deduplication id (content-based is modelled)")
        if isinstance(job, WaitJob):
            params: dict[str, Any] = {"seconds": job.seconds, **({"fail": True} if job.fail else {})}
            plans.append(JobPlan(job.id, "wait", params, at))
        elif isinstance(job, RawJob) and (markers := notification_markers(job.raw_body)) is not None:
            folders, sequencers = markers  # a seed's S3 notification, as its shrink writes it
            params = {"seconds": PARTITION_SECONDS}
            plans.append(JobPlan(job.id, "s3", params, at, partitions=folders, sequencers=sequencers))
        elif isinstance(job, RawJob):
            plans.append(JobPlan(_job_named(job.raw_body) or job.id, "raw", {}, at, raw_body=job.raw_body))
        elif isinstance(job, SparkJob):
            first = (
                SparkBehaviour("vanish", 2 * kills[job.id]) if job.id in kills else SparkBehaviour("ok", SPARK_RUN_S)
            )
            plans.append(
                JobPlan(job.id, "spark", dict(SPARK_PARAMS), at, spark=[first, SparkBehaviour("ok", SPARK_RUN_S)])
            )
        elif isinstance(job, GenericJob):
            if job.type not in names:
                raise NotModelled(
                    f"jobs[{index}].type: {job.type!r} is not in the simulation's catalog ({sorted(names)})"
                )
            spark = [SparkBehaviour("ok", SPARK_RUN_S)] * 2 if job.type in pyspark else []
            plans.append(JobPlan(job.id, job.type, dict(job.params), at, spark=spark))
        plans[-1].group = job.group
    return plans


def _job_named(raw_body: str) -> str | None:
    """The job id a raw body names, if it is a job message: the simulated SQS keys the message by it (a
    second message of one job id, as a shrunk seed writes it), so the world expects that job to end."""
    try:
        body = json.loads(raw_body)
    except ValueError:
        return None
    job_id = body.get("job_id") if isinstance(body, dict) else None
    return str(job_id) if job_id is not None else None


def _faults(scenario: Scenario) -> tuple[FaultPlan, list[tuple[float, float]], list[tuple[float, Any]]]:
    from longjobs.sim.world import START

    rules: list[CallRule] = []
    world: dict[WorldFault, float] = {}
    pauses: list[tuple[float, float]] = []
    actions: list[tuple[float, Any]] = []
    within_design = True
    for fault in scenario.faults:
        if isinstance(fault, PauseExtender):
            pauses.append((fault.at_s, fault.at_s + fault.for_s))
            within_design = False
        elif isinstance(fault, LoseScheduledRuns):
            world[WorldFault.EXTENDER_SKIPPED] = fault.probability
            within_design = False
        elif isinstance(fault, DropStatusEvents):
            world[WorldFault.EVENT_LOST] = fault.probability
        elif isinstance(fault, Throttle):
            rules.append(
                CallRule(CallFault.THROTTLED, frozenset({"extender"}), _snake(fault.operation), fault.probability)
            )
        elif isinstance(fault, AwsFault):
            actors = CRASHING_ACTORS if fault.function == "any" else frozenset({fault.function})
            rules.append(
                CallRule(
                    CallFault(fault.mode),
                    frozenset(actors),
                    None if fault.operation == "*" else _snake(fault.operation),
                    fault.probability,
                    fault.count,
                    START + fault.at_s,
                    START + fault.until_s if fault.until_s is not None else float("inf"),
                )
            )
        elif isinstance(fault, AbortExecution):
            actions.append((fault.at_s, lambda world, job=fault.job: world.abort(job)))
        elif isinstance(fault, DuplicateDelivery):
            actions.append((fault.at_s, lambda world, job=fault.job: world.redeliver(job)))
    plan = FaultPlan.scenario(rules=rules, world=world, within_design=within_design, seed=scenario.seed)
    return plan, pauses, actions


def run_scenario(
    scenario: Scenario,
    *,
    definition: dict[str, Any] | None = None,
    timeout_s: float | None = None,
    waiting_queues: bool = True,
) -> ScenarioRun:
    """Run `scenario` in the simulation (on virtual time) and report each job; `waiting_queues` False
    builds no waiting queue (as the offline runtime), so a full type's messages only wait in flight."""
    from longjobs.offline.resources import workflow_definition
    from longjobs.sim.campaign import deployed_workflow
    from longjobs.sim.workload import CATALOG_JSON, SPARK_HEARTBEAT_S
    from longjobs.sim.world import World

    workflow = deployed_workflow()
    catalog_json = CATALOG_JSON
    own_types = [declared for declared in scenario.job_types if declared not in CATALOG["job_types"]]
    if own_types:  # the scenario's own types too: the workflow is rendered with a branch for each
        catalog_json = json.dumps(
            {"job_types": [*CATALOG["job_types"], *own_types], "s3_triggers": CATALOG["s3_triggers"]}, sort_keys=True
        )
        definition = definition or json.loads(workflow_definition(SPARK_HEARTBEAT_S, catalog_json, emr_serverless=True))
    settings = {
        key: value
        for key, value in scenario.settings.model_dump(exclude_unset=True).items()
        if key not in RUNTIME_SETTINGS
    }
    plan, pauses, actions = _faults(scenario)
    plans = _plan(scenario)
    workload = Workload(plans, fifo=scenario.settings.fifo, settings=settings, spark_heartbeat_s=SPARK_HEARTBEAT_S)
    world = World(
        scenario.seed,
        workload,
        definition or workflow.definition,
        catalog_json,
        faults=plan,
        execution_timeout_s=workflow.timeout_s,
        actions=actions,
        extender_pauses=pauses,
        until_s=timeout_s if timeout_s is not None else max(scenario.timeout_s, workload.settle_bound_s),
        waiting_queues=waiting_queues,
    )
    result = world.run()
    partition_jobs = [key for plan in plans for key in plan.partition_jobs]
    records = result.trace.records if result.trace else []
    return ScenarioRun(result, *_reports(records, world.job_of_message, partition_jobs))


def _reports(
    lines: list[str], job_of_message: dict[str, str], partition_jobs: list[str]
) -> tuple[dict[str, JobReport], Counter[str]]:
    """Per job its report: each message the scenario sent (an S3 notification is acknowledged once fanned
    out: `deleted`), and each partition job a notification's markers ask for, which runs from the job
    message the fan-out sends."""
    jobs = {job: JobReport() for job in [*job_of_message.values(), *partition_jobs]}
    calls: Counter[str] = Counter()
    running: set[str] = set()  # executions running their job
    execution_jobs: dict[str, str] = {}
    for line in lines:
        record = json.loads(line)
        call, event = record.get("call"), record.get("event")
        if call is not None:
            calls[call] += 1
            _count_call(record, jobs, job_of_message)
            continue
        job = jobs.get(str(record.get("job_id")))
        if event == "delivered" and record["queue"] == "jobs" and job is not None:
            job.deliveries += 1
            if any(name.startswith(record["message_id"]) for name in running):
                job.redelivered_while_running += 1
        elif event == "execution_started":
            execution_jobs[record["execution"]] = str(record["job_id"])
        elif event == "job_started":
            running.add(record["execution"])
        elif event == "job_ended":
            running.discard(record["execution"])
            if record["succeeded"] and job is not None:
                job.final = "deleted"  # its message is deleted next (or, redelivered, as already succeeded)
        elif event == "execution_ended":
            running.discard(record["execution"])
            owner = jobs.get(execution_jobs.get(record["execution"], ""))
            if owner is not None:
                owner.executions.append(record["status"])
        elif event == "dead_lettered" and job is not None:
            job.final = "dlq"
            reason = record.get("reason", {})
            job.dlq_error = f"{reason.get('ErrorType')}: {reason.get('ErrorMessage')}"
        elif event == "outcome" and job is not None and record["outcome"] in DONE_OUTCOMES:
            job.final = "deleted"
    return jobs, calls


DONE_OUTCOMES = ("inline_done", "already_succeeded", "fanned_out")
"""Receiver outcomes after which a message is deleted without an execution of its own."""


def _count_call(record: dict[str, Any], jobs: dict[str, JobReport], job_of_message: dict[str, str]) -> None:
    """Renewals (the extender's accepted visibility changes), releases (a lease closed RELEASED) and
    deletions (the workflow's DeleteMessage that took effect), per job."""
    if "error" in record or record.get("fault") in ("throttled", "server_error", "timeout", "crash_before"):
        return
    params, call = record["params"], record["call"]
    if call == "sqs.change_message_visibility_batch" and record["actor"] == "extender":
        ok = {entry["Id"] for entry in record.get("answer", {}).get("Successful", [])}
        for entry in params["Entries"]:
            job = jobs.get(job_of_message.get(entry["ReceiptHandle"].partition("#")[0], ""))
            if job is not None and entry["Id"] in ok:
                job.renewals += 1
    elif call == "dynamodb.update_item":
        _count_release(params, jobs, job_of_message)
    elif call == "dynamodb.transact_write_items":  # a close frees its holds in the same transaction
        for item in params["TransactItems"]:
            if "Update" in item:
                _count_release(item["Update"], jobs, job_of_message)
    elif call == "sqs.delete_message":
        job = jobs.get(job_of_message.get(params["ReceiptHandle"].partition("#")[0], ""))
        if job is not None:
            job.final = "deleted"


def _count_release(update: dict[str, Any], jobs: dict[str, JobReport], job_of_message: dict[str, str]) -> None:
    """A lease's close RELEASED, counted for its job."""
    status = update.get("ExpressionAttributeValues", {}).get(":status", {}).get("S")
    job = jobs.get(job_of_message.get(update["Key"]["pk"]["S"], ""))
    if job is not None and status == "RELEASED":
        job.released += 1
