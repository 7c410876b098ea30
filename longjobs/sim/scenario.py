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

`run_scenario` returns the world's result and a report per job of the file, by its id (final state,
deliveries, executions and their statuses, releases, renewals, redeliveries while running, the DLQ's
reason), read from the trace. A raw body that names a job id is a message of that job (a second message
of one job id); it keeps its own report, as the offline runtime's report keeps it. A given
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

from longjobs.engine.delivery.dlq import ORIGINAL_MESSAGE_ID
from longjobs.engine.execution import parse_execution_name
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
    executions: list[str] = field(default_factory=list)  # each execution's end status (or RUNNING), in start order
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
    names = {id(plan): job.id for plan, job in zip(plans, scenario.jobs, strict=True)}
    messages = Messages(
        {message: [names[id(plan)] for plan in sent] for message, sent in world.plans_of_message.items()},
        world.job_of_message,
        world.monitor.originals,
    )
    return ScenarioRun(result, *_reports(records, [job.id for job in scenario.jobs], messages, partition_jobs))


@dataclass
class Messages:
    """Which scenario jobs sent each of the producer's messages, so that a report is kept per scenario job
    (two jobs may send messages of one job id), as the offline runtime keeps one per job of the file."""

    senders: dict[str, list[str]]  # the producer's message id -> the scenario jobs that sent it (FIFO: duplicates too)
    job_of_message: dict[str, str]  # the producer's message id -> the job id the world keys it by
    originals: dict[str, str]  # a copy's message id (waiting, or parked) -> the producer's message id

    def reports(self, jobs: dict[str, JobReport], message_id: str | None, job_id: object) -> list[JobReport]:
        """The reports a record of this message (a copy: of its original) and job id is for: those of the
        jobs that sent the message, when the record is of its own job; else the job id's (a partition job's)."""
        original = self.originals.get(message_id, message_id) if message_id is not None else None
        if original is not None and self.job_of_message.get(original) == str(job_id):
            return [jobs[name] for name in self.senders.get(original, [])]
        job = jobs.get(str(job_id))
        return [job] if job is not None else []

    def of_call(self, jobs: dict[str, JobReport], message_id: str) -> list[JobReport]:
        """The reports of the jobs that sent this message (a copy: its original), named by a call's handle or key."""
        original = self.originals.get(message_id, message_id)
        return [jobs[name] for name in self.senders.get(original, [])]


def _reports(
    lines: list[str], names: list[str], messages: Messages, partition_jobs: list[str]
) -> tuple[dict[str, JobReport], Counter[str]]:
    """Per job its report: each job of the file by its name (an S3 notification is acknowledged once fanned
    out: `deleted`), and each partition job a notification's markers ask for, which runs from the job
    message the fan-out sends. An execution is reported from its start: RUNNING until it ends."""
    jobs = {job: JobReport() for job in [*names, *partition_jobs]}
    calls: Counter[str] = Counter()
    running: set[str] = set()  # executions running their job
    execution_jobs: dict[str, list[tuple[JobReport, int]]] = {}  # execution -> its reports and its place in them
    for line in lines:
        record = json.loads(line)
        call, event = record.get("call"), record.get("event")
        if call is not None:
            calls[call] += 1
            _count_call(record, jobs, messages)
            continue
        if event == "delivered" and record["queue"] == "jobs":
            for job in messages.reports(jobs, record["message_id"], record["job_id"]):
                job.deliveries += 1
                if any(name.startswith(record["message_id"]) for name in running):
                    job.redelivered_while_running += 1
        elif event == "execution_started" and record["execution"] not in execution_jobs:
            parsed = parse_execution_name(record["execution"])
            owners = messages.reports(jobs, parsed[0] if parsed else None, record["job_id"])
            execution_jobs[record["execution"]] = [(owner, len(owner.executions)) for owner in owners]
            for owner in owners:
                owner.executions.append("RUNNING")
        elif event == "job_started":
            running.add(record["execution"])
        elif event == "job_ended":
            running.discard(record["execution"])
            for owner, _ in execution_jobs.get(record["execution"], []) if record["succeeded"] else []:
                owner.final = "deleted"  # its message is deleted next (or, redelivered, as already succeeded)
        elif event == "execution_ended":
            running.discard(record["execution"])
            for owner, index in execution_jobs.get(record["execution"], []):
                owner.executions[index] = record["status"]
        elif event == "dead_lettered":
            reason = record.get("reason", {})
            message_id = reason.get(ORIGINAL_MESSAGE_ID) or record["message_id"]
            for job in messages.reports(jobs, message_id, record["job_id"]):
                job.final = "dlq"
                job.dlq_error = f"{reason.get('ErrorType')}: {reason.get('ErrorMessage')}"
        elif event == "outcome" and record["outcome"] in DONE_OUTCOMES:
            for job in messages.reports(jobs, record["message_id"], record["job_id"]):
                job.final = "deleted"
    return jobs, calls


DONE_OUTCOMES = ("inline_done", "already_succeeded", "fanned_out")
"""Receiver outcomes after which a message is deleted without an execution of its own."""


def _count_call(record: dict[str, Any], jobs: dict[str, JobReport], messages: Messages) -> None:
    """Renewals (the extender's accepted visibility changes), releases (a lease closed RELEASED) and
    deletions (the workflow's DeleteMessage that took effect), per job."""
    if "error" in record or record.get("fault") in ("throttled", "server_error", "timeout", "crash_before"):
        return
    params, call = record["params"], record["call"]
    if call == "sqs.change_message_visibility_batch" and record["actor"] == "extender":
        ok = {entry["Id"] for entry in record.get("answer", {}).get("Successful", [])}
        for entry in params["Entries"]:
            for job in messages.of_call(jobs, entry["ReceiptHandle"].partition("#")[0]) if entry["Id"] in ok else []:
                job.renewals += 1
    elif call == "dynamodb.update_item":
        _count_release(params, jobs, messages)
    elif call == "dynamodb.transact_write_items":  # a close frees its holds in the same transaction
        for item in params["TransactItems"]:
            if "Update" in item:
                _count_release(item["Update"], jobs, messages)
    elif call == "sqs.delete_message":
        for job in messages.of_call(jobs, params["ReceiptHandle"].partition("#")[0]):
            job.final = "deleted"


def _count_release(update: dict[str, Any], jobs: dict[str, JobReport], messages: Messages) -> None:
    """A lease's close RELEASED, counted for its job."""
    status = update.get("ExpressionAttributeValues", {}).get(":status", {}).get("S")
    for job in messages.of_call(jobs, update["Key"]["pk"]["S"]) if status == "RELEASED" else []:
        job.released += 1
