"""Shrink a failing seed to a scenario file: the fewest jobs and faults that still break its property.

A seed's failure is hard to read: twenty jobs, faults drawn at random over two hours, thousands of
calls. Shrinking turns it into a scenario file of the offline runtime (`longjobs.offline.scenario`, the
file `python -m offline sim --scenario FILE` runs) holding only what the failure needs:

1. **Record.** The seed runs once with a fault plan that notes every fault that fired (the call faults
   with their actor, operation and time; the world faults with their time and the job they struck),
   drawing exactly as the seed's own plan does, so the run is the seed's.
2. **Write it out.** Each job becomes a job of the file (a second message of one job id, a raw body
   naming it) and each fired fault an explicit item: a call fault an `aws_fault` on the first call of
   its operation by its function from the moment it fired (`count` 1), a duplicate delivery a
   `duplicate_delivery`, a skipped extender run a `pause_extender` around it, a Spark run that vanished
   a `kill_worker` (a scenario's pause is beyond the design: it excuses lapses). What has no item in
   the format (the workflow's or a Spark run's own calls failing, a status event lost, duplicated or
   late, an extender run late, a function timing out half-way, a Spark run that fails or hangs) is left
   out and named. A scenario sends its jobs at once in file order, not at the seed's times, and runs
   its Spark jobs 30 s each.
3. **Check.** The written scenario must break the same property. If it does not, the failure needs
   what the format cannot say: `Inexpressible` names it rather than writing a file that passes.
4. **Minimize.** Delta debugging (Zeller's ddmin) over the jobs and faults together, each candidate
   validated as a scenario and run in the simulation; a fault naming a job that was taken out goes
   with it. The result is 1-minimal: taking out any one job or fault left makes the property hold
   (or another one break).
5. **Time it.** The file gets the `timeout_s` that `offline run` needs to settle it (`offline_timeout_s`):
   messages of one job id run one after another, which may take longer than the runtime's default.

Every run is deterministic, so the same seed shrinks to the same file.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from longjobs.history.faults import CallFault, WorldFault
from longjobs.offline.scenario import (
    DEFAULT_TIMEOUT_S,
    MAX_TIMEOUT_S,
    GenericJob,
    JobSpec,
    Scenario,
    ScenarioError,
    SparkJob,
    WaitJob,
    parse_scenario,
)
from longjobs.sim.faults import CRASHING_ACTORS, FaultPlan
from longjobs.sim.trace import Trace
from longjobs.sim.workload import ADDED_TYPE, CATALOG, PARTITION_SECONDS, JobPlan, Workload, notification_markers

SPARK_EVENTS = 100  # a Spark job's partition size in the file (the simulation does not read it)
PAUSE_AROUND_S = 0.5  # a skipped extender run is written as a pause this long either side of it
OFFLINE_SPARK_RUN_S = 120.0
"""A Spark run under `offline run`: a local Spark's start and a small partition (the simulation's take 30 s)."""
ATTEMPT_S = 60.0
"""An attempt besides its job's run: the receive, the start, the workflow's own steps and the delete."""
TIMEOUT_MARGIN = 1.25
"""The share added to a written scenario's bound, for the real time the offline runtime spends (moto, threads)."""


class Inexpressible(ValueError):
    """The seed's failure does not survive being written as a scenario; the message names what the
    scenario format could not express."""


@dataclass(frozen=True)
class Fired:
    """One fault that fired: when (virtual seconds since the start), what, and where."""

    t: float
    fault: CallFault | WorldFault
    actor: str | None = None  # a call fault's caller
    operation: str | None = None  # a call fault's operation (snake_case)
    context: str | None = None  # a world fault's: the trace record just before it (what it struck)


@dataclass
class RecordingPlan(FaultPlan):
    """A seed's fault plan that notes each fault it gives, drawing exactly as `FaultPlan` draws."""

    fired: list[Fired] = field(default_factory=list)
    trace: Trace | None = None  # the world's, once built: a world fault is read from its last record
    start: float = 0.0  # the world's start on the virtual clock

    @classmethod
    def of(cls, plan: FaultPlan, *, start: float) -> RecordingPlan:
        """`plan`, recording (its random stream included: it draws on from where `plan` is)."""
        return cls(**{name.name: getattr(plan, name.name) for name in fields(FaultPlan)}, start=start)

    def at_call(self, now: float, actor: str, operation: str) -> CallFault | None:
        fault = super().at_call(now, actor, operation)
        if fault is not None:
            self.fired.append(Fired(now - self.start, fault, actor=actor, operation=operation))
        return fault

    def happens(self, now: float, fault: WorldFault) -> bool:
        fired = super().happens(now, fault)
        if fired:
            last = self.trace.records[-1] if self.trace is not None and self.trace.records else None
            self.fired.append(Fired(now - self.start, fault, context=last))
        return fired


@dataclass(frozen=True)
class Entry:
    """A job or a fault of the scenario being shrunk, with the job it names (faults that name one)."""

    kind: str  # "job" | "fault"
    value: dict[str, Any]
    job: str | None = None


@dataclass
class Translation:
    """A seed written as a scenario: its settings, its jobs and faults, and what could not be written."""

    settings: dict[str, Any]
    seed: int
    entries: list[Entry]
    left_out: list[str]

    def scenario(self, entries: Sequence[Entry]) -> dict[str, Any]:
        """The scenario file's content with these entries (a fault naming a job not among them is
        dropped with it)."""
        jobs = [entry.value for entry in entries if entry.kind == "job"]
        ids = {job["id"] for job in jobs}
        faults = [entry.value for entry in entries if entry.kind == "fault" and entry.job in (None, *ids)]
        data: dict[str, Any] = {"settings": self.settings, "seed": self.seed, "jobs": jobs, "faults": faults}
        used_types = {job.get("type") for job in jobs}
        sim_types = [declared for declared in CATALOG["job_types"] if declared["name"] in used_types]
        if sim_types:  # declared, so that the offline runtime's loader knows them too
            data["job_types"] = sim_types
        return data


@dataclass
class Shrunk:
    """A seed's failure as the smallest scenario found."""

    seed: int
    profile: str
    broken: str  # the property the seed breaks, and the scenario too
    jobs_before: int  # the seed's job messages
    faults_before: int  # the faults that fired in the seed
    scenario: dict[str, Any]
    runs: int  # scenario runs the search took
    wall_s: float
    left_out: list[str]  # what the seed had that the format could not express (not needed to fail)

    @property
    def jobs_after(self) -> int:
        return len(self.scenario["jobs"])

    @property
    def faults_after(self) -> int:
        return len(self.scenario["faults"])


def record_seed(
    seed: int, profile: str, *, notifications: bool = True, one_marker: bool = True, fifo_operator: bool = True
) -> tuple[Any, Workload, RecordingPlan]:
    """Run the seed as `longjobs.sim.campaign.run_seed` does, noting every fault that fires: its
    `SeedResult`, its workload and the plan with the faults that fired (`notifications`: see
    `longjobs.sim.workload.draw`)."""
    from longjobs.sim.campaign import FAULT_WINDOW_S, deployed_workflow
    from longjobs.sim.workload import CATALOG_JSON, draw
    from longjobs.sim.world import START, World

    workflow = deployed_workflow()
    plan = RecordingPlan.of(FaultPlan.draw(seed, start=START, quiet_after_s=FAULT_WINDOW_S), start=START)
    workload = draw(seed, profile, notifications=notifications, one_marker=one_marker, fifo_operator=fifo_operator)
    world = World(
        seed, workload, workflow.definition, CATALOG_JSON, faults=plan, execution_timeout_s=workflow.timeout_s
    )
    plan.trace = world.trace
    return world.run(), workload, plan


def translate(seed: int, workload: Workload, fired: Sequence[Fired]) -> Translation:
    """The seed's jobs and fired faults as scenario entries, and a note for each thing left out."""
    entries: list[Entry] = []
    left_out: list[str] = []
    sent: dict[str, int] = {}
    by_id = workload.by_id
    for plan in workload.jobs:
        if plan.type == ADDED_TYPE:  # a scenario's catalog has no such type: its deploy is left out too
            left_out.append(f"{plan.job_id}: a job of the type the deploy adds ({ADDED_TYPE})")
            continue
        sent[plan.job_id] = sent.get(plan.job_id, 0) + 1
        entries.append(Entry("job", _job(plan, sent[plan.job_id], left_out)))
    for fault in fired:
        entry = _fault(fault, by_id, left_out)
        if entry is not None:
            entries.append(entry)
    settings = {**workload.settings, **({"fifo": True} if workload.fifo else {})}
    if workload.upgrade_at_s is not None:
        left_out.append(
            f"the change from {workload.shards_before} shards at {workload.upgrade_at_s:g} s "
            f"(the scenario runs {workload.settings.get('shards', 1)})"
        )
    if not workload.extender_reserved:
        left_out.append("extender runs side by side (the scenario reserves the extender's concurrency)")
    left_out += [f"the operator's cancel of {plan.job_id} at {plan.at_s:g} s" for plan in workload.cancels]
    left_out += [f"the operator's redrive ({plan.method}) at {plan.at_s:g} s" for plan in workload.redrives]
    for deploy in (workload.deploy, workload.definition_deploy):
        if deploy is not None:
            left_out.append(f"the deploy ({deploy.change}) at {deploy.at_s:g} s")
    return Translation(settings, seed, entries, left_out)


def _job(plan: JobPlan, nth_message: int, left_out: list[str]) -> dict[str, Any]:
    """One message of the seed as a scenario job."""
    group = {"group": plan.group} if plan.group is not None else {}
    if nth_message > 1:  # another message of one job id: its body as it is, a message of that job
        return {"id": f"{plan.job_id}.{nth_message}", "raw_body": plan.body, "expect": "deleted", **group}
    if plan.poison or plan.partitions:  # a notification's body is read back as one (`notification_markers`)
        return {"id": plan.job_id, "raw_body": plan.body, **group}
    if plan.type == "wait":
        fail = {"fail": True} if plan.params.get("fail") else {}
        return {"id": plan.job_id, "type": "wait", "seconds": int(plan.params["seconds"]), **fail, **group}
    if plan.type == "spark":
        runs = ", ".join(f"{run.kind} {run.seconds:g} s" for run in plan.spark)
        left_out.append(f"{plan.job_id}: Spark runs of its own ({runs}); a scenario's Spark run succeeds in 30 s")
        return {"id": plan.job_id, "type": "spark", "events": SPARK_EVENTS, **group}
    return {"id": plan.job_id, "type": plan.type, "params": dict(plan.params), **group}


def _fault(fired: Fired, jobs: dict[str, JobPlan], left_out: list[str]) -> Entry | None:
    """A fired fault as a scenario entry, or None (noted in `left_out`) when the format has none."""
    at_s = math.floor(fired.t * 1000) / 1000
    if isinstance(fired.fault, CallFault):
        what = f"{fired.fault.value} on {fired.actor}'s {fired.operation} at t={at_s:g}s"
        if fired.actor not in CRASHING_ACTORS:
            left_out.append(f"{what}: an aws_fault names a function (receiver, extender, watcher)")
            return None
        operation = "".join(part.title() for part in str(fired.operation).split("_"))
        value = {"type": "aws_fault", "function": fired.actor, "operation": operation, "mode": fired.fault.value}
        return Entry("fault", {**value, "count": 1, "at_s": at_s})
    record = json.loads(fired.context) if fired.context else {}
    if fired.fault is WorldFault.DUPLICATE_DELIVERY:
        job = str(record.get("job_id"))
        if job in jobs and jobs[job].raw_body is None and not jobs[job].poison:
            return Entry("fault", {"type": "duplicate_delivery", "job": job, "at_s": at_s}, job=job)
        left_out.append(f"duplicate delivery of {job} at t={at_s:g}s: a raw body's message cannot be named")
        return None
    if fired.fault is WorldFault.EXTENDER_SKIPPED:
        window = {"at_s": max(0.0, at_s - PAUSE_AROUND_S), "for_s": 2 * PAUSE_AROUND_S}
        return Entry("fault", {"type": "pause_extender", **window})
    if fired.fault is WorldFault.JOB_VANISHES:
        task = json.loads(record.get("params", {}).get("MessageBody", "{}"))
        job, attempt = str(task.get("job", {}).get("job_id")), task.get("attempt")
        if job in jobs and attempt == 1:
            after_s = jobs[job].spark_behaviour(1).seconds / 2
            return Entry("fault", {"type": "kill_worker", "job": job, "after_s": after_s}, job=job)
        left_out.append(f"Spark run of {job} (attempt {attempt}) vanished at t={at_s:g}s: kill_worker is attempt 1's")
        return None
    left_out.append(f"{fired.fault.value} at t={at_s:g}s: no scenario item for it")
    return None


def violated_property(scenario: dict[str, Any]) -> str | None:
    """The property the scenario breaks in the simulation, or None (it holds, or it is not a valid
    scenario: a candidate the search must skip)."""
    from longjobs.sim.scenario import NotModelled, run_scenario

    try:
        run = run_scenario(parse_scenario(scenario))
    except (ScenarioError, NotModelled):
        return None
    violation = run.result.violation
    return violation.property if violation is not None else None


def ddmin[Item](items: Sequence[Item], fails: Callable[[list[Item]], bool]) -> list[Item]:
    """Zeller's delta debugging: a 1-minimal sublist of `items` (order kept) on which `fails` holds,
    given that it holds on `items`. It tries halves, then complements, then finer splits."""
    current = list(items)
    chunks = 2
    while len(current) >= 2:
        size = math.ceil(len(current) / chunks)
        parts = [current[i : i + size] for i in range(0, len(current), size)]
        reduced = next((part for part in parts if fails(part)), None)
        if reduced is not None:
            current, chunks = reduced, 2
            continue
        complements = [[item for other in parts if other is not part for item in other] for part in parts]
        reduced = next((rest for rest in complements if len(parts) > 2 and fails(rest)), None)
        if reduced is not None:
            current, chunks = reduced, max(chunks - 1, 2)
            continue
        if chunks >= len(current):
            break
        chunks = min(2 * chunks, len(current))
    return current


def shrink_seed(
    seed: int, profile: str, *, notifications: bool = True, one_marker: bool = True, fifo_operator: bool = True
) -> Shrunk | None:
    """The smallest scenario found that breaks the property seed `seed` breaks; None when the seed
    passes. Raises `Inexpressible` when the scenario written from the seed no longer breaks it. The seed is
    drawn as `--seed S` replays it, without its S3 notifications when `notifications` is false (`--no-s3`)."""
    began = time.monotonic()
    result, workload, plan = record_seed(
        seed, profile, notifications=notifications, one_marker=one_marker, fifo_operator=fifo_operator
    )
    if result.violation is None:
        return None
    target = result.violation.property
    translation = translate(seed, workload, plan.fired)

    tried: dict[tuple[int, ...], bool] = {}  # ddmin may meet a candidate twice: each runs once

    def fails(indices: list[int]) -> bool:
        key = tuple(indices)
        if key not in tried:
            tried[key] = violated_property(translation.scenario([translation.entries[i] for i in key])) == target
        return tried[key]

    everything = list(range(len(translation.entries)))
    if not fails(everything):
        left_out = "; ".join(translation.left_out) or "nothing (but the seed's send times and timings)"
        raise Inexpressible(
            f"seed {seed} ({profile}) breaks {target}, but not once written as a scenario; left out: {left_out}"
        )
    smallest = ddmin(everything, fails)
    scenario = translation.scenario([translation.entries[i] for i in smallest])
    return Shrunk(
        seed=seed,
        profile=profile,
        broken=target,
        jobs_before=len(workload.jobs),
        faults_before=len(plan.fired),
        scenario={**scenario, "timeout_s": offline_timeout_s(parse_scenario(scenario))},
        runs=len(tried),
        wall_s=round(time.monotonic() - began, 1),
        left_out=translation.left_out,
    )


def offline_timeout_s(scenario: Scenario) -> int:
    """The `timeout_s` a shrunk scenario is written with: a bound on how long `offline run` takes to settle
    it, plus `TIMEOUT_MARGIN`, between the runtime's default and the format's maximum. The run ends once
    every message is settled, so a generous timeout only lengthens a run that fails.

    Jobs of one job id run one after another, so their times add up; on FIFO, so do a group's. A message
    waiting for its job id tries again after delays that double with equal jitter. When the job before it
    ends at t, it starts by 3t plus `job_wait_base_s`, and by t plus `job_wait_cap_s`. A job runs once; one
    that fails by design runs every attempt, with its release delays between. Each fault may cost one more
    attempt of the longest job, held back the longest release delay. A type limited to n jobs at once adds
    its jobs' time over n."""
    settings = scenario.settings

    def release_delay_s(attempt: int) -> float:
        """The longest release delay after `attempt` (as `longjobs.engine.delivery.attempt` draws it)."""
        if settings.fifo:
            return float(settings.fifo_release_delay_s)
        return min(float(settings.release_delay_cap_s), settings.release_delay_base_s * 2.0 ** (attempt - 1))

    lines: dict[str, list[float]] = {}
    by_type: dict[str, float] = {}
    longest_attempt_s = 0.0
    for job in scenario.jobs:
        job_id, job_type, params = _message_job(job)
        job_type_spec = scenario.job_catalog().get(job_type) if job_type is not None else None
        if isinstance(job, SparkJob) or (job_type_spec is not None and job_type_spec.runner == "pyspark"):
            run_s = OFFLINE_SPARK_RUN_S
        else:
            seconds = params.get("seconds")
            run_s = float(seconds) if isinstance(seconds, int | float) and not isinstance(seconds, bool) else 0.0
        attempts = settings.max_attempts if params.get("fail") is True else 1
        job_s = attempts * (run_s + ATTEMPT_S) + sum(release_delay_s(attempt) for attempt in range(1, attempts))
        longest_attempt_s = max(longest_attempt_s, run_s + ATTEMPT_S)
        lines.setdefault(job.group if settings.fifo and job.group is not None else job_id, []).append(job_s)
        if job_type_spec is not None and job_type_spec.max_concurrency is not None:
            by_type[job_type_spec.name] = by_type.get(job_type_spec.name, 0.0) + job_s / job_type_spec.max_concurrency
    longest_line_s = 0.0
    for times in lines.values():
        ended = times[0]
        for job_s in times[1:]:
            if not settings.fifo:  # it waits for its job id (FIFO: it is received once the one before is deleted)
                ended = min(3 * ended + settings.job_wait_base_s, ended + settings.job_wait_cap_s)
            ended += job_s
        longest_line_s = max(longest_line_s, ended)
    faults_s = len(scenario.faults) * (longest_attempt_s + release_delay_s(max(1, settings.max_attempts - 1)))
    bound_s = longest_line_s + faults_s + sum(by_type.values())
    return math.ceil(min(MAX_TIMEOUT_S, max(DEFAULT_TIMEOUT_S, TIMEOUT_MARGIN * bound_s)))


def _message_job(job: JobSpec) -> tuple[str, str | None, dict[str, Any]]:
    """The job id, type and params a scenario job's message carries: a raw body's own (a second message of
    a job, or an S3 notification, whose partition jobs wait `PARTITION_SECONDS`); a poison one's type is None."""
    if isinstance(job, WaitJob):
        return job.id, "wait", {"seconds": job.seconds, "fail": job.fail}
    if isinstance(job, SparkJob):
        return job.id, "spark", {}
    if isinstance(job, GenericJob):
        return job.id, job.type, job.params
    if notification_markers(job.raw_body) is not None:
        return job.id, "wait", {"seconds": PARTITION_SECONDS}
    try:
        body = json.loads(job.raw_body)
    except ValueError:
        return job.id, None, {}
    if not isinstance(body, dict) or not isinstance(body.get("params"), dict):
        return job.id, None, {}
    job_type = body.get("type")
    return str(body.get("job_id", job.id)), job_type if isinstance(job_type, str) else None, body["params"]
