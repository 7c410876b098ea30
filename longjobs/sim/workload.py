"""What a seed sends: about 20 job messages across the job types, drawn from the seed by profile.

Profiles: `standard` (wait and Spark jobs, one echo, one poison message, two messages of one job id, and
in some seeds S3 notifications of one or more completion markers, each fanned out into a job message per
marker),
`admission` (mostly jobs of a type limited to 2 at once), `mixed` (both, the default). Durations run
from seconds to, now and then, past SQS's 12 hours (the cap). A Spark job's attempts each succeed, fail
with an `AnalysisException`, hang (heartbeats, never ends) or vanish (goes silent), by the seed.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from longjobs.offline import lambdas
from longjobs.offline.resources import SPARK_TASK_TIMEOUT_S

PROFILES = ("standard", "fifo", "admission", "mixed")
FIFO_SHARE = 3  # the mixed profile runs one seed in this many on a FIFO queue (a stack is one or the other)
OLD_SHARDS = 8
"""The shard count an upgrading stack comes from: the default of `Settings.previous_shards`, above the
default `shards` of 1."""
LAYOUTS = ("default", "upgrade", "eight", "raise", "lower")
"""How a seed's lease table is sharded, drawn on its own stream: the default (one shard); an upgrade (the
functions run with `OLD_SHARDS` until `Workload.upgrade_at_s`, then with the default, the extender in a
new container watching the old shards: `longjobs.engine.lease.legacy`); eight shards throughout; a deploy
that raises the count (1 to 4: the old leases are on a shard still watched); one that lowers it (4 to 2,
`previous_shards` set to 4 as docs/deploy.md asks: the extender watches shards 2 and 3 until empty)."""
LAYOUT_WEIGHTS = (2, 1, 1, 1, 1)
SHARD_CHANGES = {"upgrade": (OLD_SHARDS, 1), "raise": (1, 4), "lower": (4, 2)}
"""Each layout that changes the count during the seed: (before, after)."""
UPGRADE_WINDOW_S = 900.0
"""An upgrade happens this long after the start at most: while the jobs are sent and run."""
RESERVED_SHARE = 0.5
"""The share of seeds whose stack reserves concurrency 1 for the extender (`reserve_concurrency`)."""
LIMITED_TYPE = "limited"
LIMIT = 2
SPARK_PARAMS = {
    "input": "s3://raw-bucket/events/2026-01-01/",
    "date": "2026-01-01",
    "output": "s3://curated-bucket/events/",
    "quarantine": "s3://quarantine-bucket/events/",
}
EMR_TYPE = "spark-emr"
EMR_LIMIT_MINUTES = 60
"""The simulation's emr_serverless type and its runs' `executionTimeoutMinutes`."""
CATALOG: dict[str, list[dict[str, Any]]] = {
    "job_types": [
        {
            "name": EMR_TYPE,
            "runner": "pyspark",
            "platform": "emr_serverless",
            "entry": "longjobs/pipeline/events.py:run",
            "emr_serverless": {"timeout_minutes": EMR_LIMIT_MINUTES},
            "description": "A Spark job on EMR Serverless (the simulation's `.sync` runs: longjobs.sim.emr).",
        },
        {
            "name": LIMITED_TYPE,
            "runner": "wait",
            "max_concurrency": LIMIT,
            "description": "A wait job of a type limited to 2 at once (the simulation's admission type).",
            "params_schema": {
                "type": "object",
                "required": ["seconds"],
                "additionalProperties": False,
                "properties": {
                    "seconds": {"type": "integer", "minimum": 0, "maximum": 43_200},
                    "fail": {"type": "boolean"},
                },
            },
        },
    ],
    "s3_triggers": [
        {
            "bucket": "raw-bucket",
            "prefix": "parts/",
            "marker": "_SUCCESS",
            "job_type": "wait",
            "params": {"seconds": 120},
        }
    ],
}
PARTITION_BUCKET = "raw-bucket"
PARTITION_SECONDS = 120
"""The wait each partition's job runs (the simulation's trigger: `_SUCCESS` markers under `parts/`)."""
CATALOG_JSON = json.dumps(CATALOG, sort_keys=True)
ADDED_TYPE = "wait-added"
"""The job type a deploy adds during some seeds (`DEFINITION_DEPLOY_SHARE`), with the workflow it renders."""
CATALOG_ADDED_JSON = json.dumps(
    {
        **CATALOG,
        "job_types": [
            *CATALOG["job_types"],
            {
                "name": ADDED_TYPE,
                "runner": "wait",
                "description": "A wait job of a type a deploy adds while others run (longjobs.sim.deployer).",
                "params_schema": {
                    "type": "object",
                    "required": ["seconds"],
                    "properties": {"seconds": {"type": "integer", "minimum": 0, "maximum": 43_200}},
                },
            },
        ],
    },
    sort_keys=True,
)
SETTINGS: dict[str, Any] = {"max_attempts": 3}
MAX_ATTEMPTS = 3
SPARK_HEARTBEAT_S = 60  # the rendered definition's HeartbeatSeconds
TWELVE_HOURS_S = 43_200


@dataclass(frozen=True)
class SparkBehaviour:
    kind: str  # ok | fail | hang | vanish
    seconds: float


@dataclass
class JobPlan:
    job_id: str
    type: str
    params: dict[str, Any]
    send_at_s: float
    spark: list[SparkBehaviour] = field(default_factory=list)  # one per attempt (the last repeats)
    poison: bool = False  # a message the receiver must refuse: its params break the type's schema
    raw_body: str | None = None  # a body sent as it is (a written scenario's)
    group: str | None = None  # FIFO: its message group
    partitions: tuple[str, ...] = ()
    """An S3 notification: the folders (under `parts/`) whose completion markers it names, each of which
    the receiver fans out into its partition's job (`partition_jobs`)."""
    sequencers: tuple[str, ...] = ()
    """Each marker's S3 `sequencer`: the same for a notification S3 delivers a second time."""

    @property
    def partition_jobs(self) -> tuple[str, ...]:
        """The job ids a notification's markers start (`<type>:<bucket>/<folder>`)."""
        return tuple(f"wait:{PARTITION_BUCKET}/parts/{folder}/" for folder in self.partitions)

    @property
    def job_keys(self) -> tuple[str, ...]:
        """The job ids this message asks for: its own, or its markers' partition jobs."""
        return self.partition_jobs if self.partitions else (self.job_id,)

    @property
    def fanned_events(self) -> tuple[str | None, ...]:
        """Beside each of `job_keys`, the S3 event a fan-out dedups its job by (its marker's sequencer), else
        None. S3 delivers an event at least once: a notification that names an event sent before is that
        event again, not a new message of its job (every marker the workload writes has a sequencer, so
        every notification is fanned out, one of a single marker too)."""
        return self.sequencers if self.partitions else (None,) * len(self.job_keys)

    @property
    def body(self) -> str:
        if self.raw_body is not None:
            return self.raw_body
        if self.partitions:
            return s3_notification(self.partitions, self.sequencers)
        params = {"seconds": "soon"} if self.poison else self.params
        return json.dumps({"job_id": self.job_id, "type": self.type, "params": params}, sort_keys=True)

    @property
    def expected(self) -> str:
        """`succeed` or `dlq` if nothing went wrong but what the job itself does."""
        if self.poison or self.raw_body is not None or self.params.get("fail"):
            return "dlq"
        if self.type == "spark":
            return "succeed" if any(b.kind == "ok" for b in self.spark[:MAX_ATTEMPTS]) else "dlq"
        if self.type == EMR_TYPE:  # a run past its limit is cancelled (its start takes up to a minute)
            in_time = [b.kind == "ok" and b.seconds < EMR_LIMIT_MINUTES * 60 - 60 for b in self.spark[:MAX_ATTEMPTS]]
            return "succeed" if any(in_time) else "dlq"
        if float(self.params.get("seconds", 0)) >= TWELVE_HOURS_S - 3_600:
            return "dlq"  # held at most 12 h less a margin: capped on every attempt
        return "succeed"

    @property
    def duration_s(self) -> float:
        if self.partitions:
            return float(PARTITION_SECONDS)
        if self.type in ("spark", EMR_TYPE):
            return max(b.seconds for b in self.spark)
        return float(self.params.get("seconds", 0))

    def spark_behaviour(self, attempt: int) -> SparkBehaviour:
        return self.spark[min(attempt, len(self.spark)) - 1] if self.spark else SparkBehaviour("ok", 1.0)


CANCEL_CUTS = (None, "update_item", "stop_execution", "send_message", "delete_message")
"""Where an operator's cancel dies (crashes right after that call of its; None: it runs to its end): the
mark, the stop, the DLQ copy's send, the message's delete (`longjobs.engine.cancel`'s steps)."""


@dataclass(frozen=True)
class CancelPlan:
    """An operator's `longjobs cancel` of a job's message, at `at_s`: cut short after its first
    `cut_after` call (None: whole), then run again `again_after_s` later (None: never; the extender
    finishes it)."""

    job_id: str
    at_s: float
    cut_after: str | None = None
    again_after_s: float | None = None


REDRIVE_METHODS = ("cli", "cli_all", "cli_filtered", "console")
"""How the operator redrives the DLQ: `longjobs dlq redrive` (its copy loop, poison and cancelled messages
left), with `--include-poison` (everything: SQS's move task to the jobs queue), with `--error-type
AttemptsExhausted` (the copy loop, one reason), or the console's "redrive to source" (a move task
without a destination)."""


DEPLOY_CHANGES = (
    "stricter_schema",
    "type_removed",
    "smaller_bodies",
    "fewer_attempts",
    "limit_removed",
    "limit_added",
)
"""What a deploy during the seed changes for the functions (`longjobs.sim.deployer`): the limited type's
`params_schema` made stricter (`seconds` at most `STRICTER_MAX_SECONDS`), the EMR Serverless type
removed from the catalog, `max_body_bytes` lowered to `SMALLER_BODY_BYTES` (a Spark job's body is
longer), `max_attempts` lowered to 1, the limited type's `max_concurrency` removed (its waiting queue
stays, with what is parked in it and the running jobs unparked from it), or the EMR Serverless type limited
to `ADDED_LIMIT` at once."""
ADDED_LIMIT = 1
STRICTER_MAX_SECONDS = 600
SMALLER_BODY_BYTES = 200


@dataclass(frozen=True)
class DeployPlan:
    """A deploy of the stack at `at_s` that changes `change` (`DEPLOY_CHANGES`): invocations begun before
    it finish with the functions they began with; executions keep their definition."""

    at_s: float
    change: str


@dataclass(frozen=True)
class RedrivePlan:
    """An operator's redrive of the DLQ at `at_s`, by `method` (`REDRIVE_METHODS`)."""

    at_s: float
    method: str


@dataclass
class Workload:
    jobs: list[JobPlan]
    fifo: bool = False
    settings: dict[str, Any] = field(default_factory=lambda: dict(SETTINGS))
    spark_heartbeat_s: int = SPARK_HEARTBEAT_S
    upgrade_at_s: float | None = None
    """When the functions are updated from `shards_before` shards to `settings`' (None: no upgrade)."""
    shards_before: int = OLD_SHARDS
    """The functions' shard count until `upgrade_at_s`."""
    cancels: list[CancelPlan] = field(default_factory=list)
    """The operator's cancels (`longjobs.sim.operator`)."""
    redrives: list[RedrivePlan] = field(default_factory=list)
    """The operator's redrives of the DLQ (`longjobs.sim.operator`)."""
    deploy: DeployPlan | None = None
    """A deploy during the seed that changes a setting or the catalog (`longjobs.sim.deployer`)."""
    definition_deploy: DeployPlan | None = None
    """A deploy that adds a job type, and so a new workflow definition for new starts (`type_added`)."""
    extender_reserved: bool = True
    """The extender has reserved concurrency 1 (the stack's `reserve_concurrency`): a run due while one is
    still going is throttled; without it, the two run side by side, each in its own container."""

    @cached_property
    def by_id(self) -> dict[str, JobPlan]:
        """Each job by its id, kept from the first read: the world reads it once the jobs are all drawn."""
        return {job.job_id: job for job in self.jobs}

    @property
    def settle_bound_s(self) -> float:
        """How long after the quiet period every job must be settled: each attempt's job (held at most
        12 h), its release delay and a redelivery, plus an hour; and, when jobs of the limited type share
        its slots, every attempt of theirs run `LIMIT` at a time (a job of the type may wait for all the
        others: seed 6039 of the admission profile has two 12 h jobs that fail at the cap three times
        each, 72 h of runs on 2 slots)."""
        longest = max((job.duration_s for job in self.jobs), default=0.0)
        if any(job.type == "spark" for job in self.jobs):  # a run that hangs ends at the step's timeout
            longest = max(longest, SPARK_TASK_TIMEOUT_S)
        limited = sum(_attempt_s(job.duration_s) for job in self.jobs if job.type == LIMITED_TYPE)
        added = 0.0
        if self.deploy is not None and self.deploy.change == "limit_added":  # its runs then share its slots
            added = sum(_attempt_s(job.duration_s) for job in self.jobs if job.type == EMR_TYPE) / ADDED_LIMIT
        bound = MAX_ATTEMPTS * (_attempt_s(longest) + limited / LIMIT + added) + 3_600
        last_redrive = max((plan.at_s for plan in self.redrives), default=None)
        return bound if last_redrive is None else last_redrive + 2 * bound  # a redriven job runs its attempts anew


def _attempt_s(duration_s: float) -> float:
    """The longest one attempt of a job takes to settle: its run (held at most 12 h), the chunk it may
    be hidden for past its end, a release delay and a redelivery."""
    return min(duration_s, TWELVE_HOURS_S) + 900 + 2 * 180 + 2 * 60 + 600


def _duration(rng: random.Random) -> int:
    """Mostly seconds to half an hour; now and then hours; rarely past the 12 h cap."""
    draw = rng.random()
    if draw < 0.02:
        return TWELVE_HOURS_S
    if draw < 0.08:
        return int(math.exp(rng.uniform(math.log(3_600), math.log(6 * 3_600))))
    return int(math.exp(rng.uniform(math.log(5), math.log(1_800))))


def _spark(rng: random.Random) -> list[SparkBehaviour]:
    behaviours = []
    for _ in range(MAX_ATTEMPTS):
        kind = rng.choices(("ok", "fail", "hang", "vanish"), weights=(75, 15, 3, 7))[0]
        behaviours.append(SparkBehaviour(kind, float(_duration(rng) if kind != "hang" else 60)))
    return behaviours


def draw(
    seed: int,
    profile: str = "mixed",
    *,
    notifications: bool = True,
    one_marker: bool = True,
    fifo_operator: bool = True,
) -> Workload:
    """The seed's jobs, and its lease table's layout (`LAYOUTS`), each on its own stream. `notifications`
    False: without the S3 notifications (`_notifications`), the world of the corpus seeds recorded without
    them; `one_marker` False: every notification names several markers, the world of the corpus seeds
    recorded before notifications of one marker; `fifo_operator` False: no operator cancels or redrives on
    a FIFO queue, the world of the corpus seeds recorded before it did (tests/sim/corpus.json)."""
    workload = _draw(seed, profile, notifications, one_marker, fifo_operator)
    workload.deploy = _deploy(seed, workload.jobs)
    if not workload.fifo:
        workload.definition_deploy, added = _definition_deploy(seed, len(workload.jobs))
        workload.jobs += added
    renewal_rng = random.Random(f"workload:{seed}:max_renewal")
    if renewal_rng.random() < SHORT_CAP_SHARE:  # a hard stop below SQS's 12 h: long jobs meet it
        workload.settings["max_renewal_s"] = renewal_rng.randint(1_800, 6 * 3_600)
    layout_rng = random.Random(f"workload:{seed}:shards")
    layout = layout_rng.choices(LAYOUTS, weights=LAYOUT_WEIGHTS)[0]
    if layout == "eight":
        workload.settings["shards"] = OLD_SHARDS
    elif layout in SHARD_CHANGES:
        workload.upgrade_at_s = round(layout_rng.uniform(0, UPGRADE_WINDOW_S), 3)
        workload.shards_before, after = SHARD_CHANGES[layout]
        if layout != "upgrade":  # the upgrade keeps the default count and `previous_shards` (8)
            workload.settings |= {"shards": after, "previous_shards": max(workload.shards_before, after)}
    # The stack's default reserves no concurrency (a new account has none to spare), so runs may overlap.
    workload.extender_reserved = random.Random(f"workload:{seed}:concurrency").random() < RESERVED_SHARE
    return workload


def _draw(
    seed: int, profile: str, notifications: bool = True, one_marker: bool = True, fifo_operator: bool = True
) -> Workload:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: one of {', '.join(PROFILES)}")
    rng = random.Random(f"workload:{seed}:{profile}")
    jobs: list[JobPlan] = []

    def send_at() -> float:
        return round(rng.uniform(0, 600), 3)

    def add(kind: str, params: dict[str, Any], **extra: Any) -> JobPlan:
        job = JobPlan(f"j{len(jobs):02d}", kind, params, send_at(), **extra)
        jobs.append(job)
        return job

    if profile == "fifo" or (profile == "mixed" and random.Random(f"workload:{seed}:fifo").randrange(FIFO_SHARE) == 0):
        fifo = _fifo(rng)  # (its own stream: it changes no other seed's jobs in the mixed profile)
        if fifo_operator:  # a cancelled job's DLQ copy, redriven, goes back into its group (`fifo_order`)
            fifo.cancels = _cancels(seed, fifo.jobs) + _late_cancel(seed, fifo.jobs)
            fifo.redrives = _redrives(seed)
        return fifo
    standard = profile in ("standard", "mixed")
    limited = profile in ("admission", "mixed")
    for _ in range(rng.randint(6, 9) if standard else 2):
        add("wait", {"seconds": _duration(rng)})
    if standard:
        for _ in range(rng.randint(0, 2)):
            add("wait", {"seconds": rng.randint(5, 300), "fail": True})
        for _ in range(rng.randint(2, 5)):
            add("spark", dict(SPARK_PARAMS), spark=_spark(rng))
        add("echo", {"text": "hello"})
        add("wait", {}, poison=True)
        twin = add("wait", {"seconds": rng.randint(30, 900)})
        jobs.append(JobPlan(twin.job_id, "wait", dict(twin.params), send_at()))  # a second message of one job id
    if limited:
        for _ in range(rng.randint(3, 6) if standard else rng.randint(12, 18)):
            params: dict[str, Any] = {"seconds": _duration(rng)}
            if rng.random() < 0.1:
                params["fail"] = True
            add(LIMITED_TYPE, params)
        jobs += _bursts_at_ends(seed, jobs)
    if notifications:
        jobs += _notifications(seed, len(jobs), one_marker=one_marker)
    if standard:
        jobs += _emr_jobs(seed, len(jobs))
    jobs.sort(key=lambda job: (job.send_at_s, job.job_id))
    return Workload(
        jobs,
        cancels=_cancels(seed, jobs) + _late_cancel(seed, jobs) if standard else [],
        redrives=_redrives(seed) if standard else [],
    )


CANCEL_SHARE = 0.4


def _cancels(seed: int, jobs: list[JobPlan]) -> list[CancelPlan]:
    """In some seeds, an operator cancels one or two jobs while they may run: at a time drawn within the
    job's run, now and then cut short at one of the cancel's steps and run again later, or never. Drawn on
    a stream of its own: it changes no other draw of the seed."""
    rng = random.Random(f"workload:{seed}:operator")
    if rng.random() >= CANCEL_SHARE:
        return []
    candidates = [
        job for job in jobs if not job.poison and job.raw_body is None and not job.partitions and job.type != "echo"
    ]
    plans = []
    for job in rng.sample(candidates, min(len(candidates), rng.randint(1, 2))):
        at = round(job.send_at_s + rng.uniform(5, max(10.0, min(job.duration_s, 1_800.0))), 3)
        cut = rng.choice(CANCEL_CUTS) if rng.random() < 0.6 else None
        # run again before the extender's hand-over (60 s) as often as after it: either may finish it
        again = round(rng.uniform(5, 120), 3) if cut is not None and rng.random() < 0.5 else None
        plans.append(CancelPlan(job.job_id, at, cut, again))
    return plans


LATE_CANCEL_SHARE = 0.15


def _late_cancel(seed: int, jobs: list[JobPlan]) -> list[CancelPlan]:
    """In some seeds, an operator cancels a wait job in about its last half minute, and the cancel is cut
    short after its mark: the job may succeed while its lease is CANCELLED, before the extender finishes
    the cancel, so the workflow's success close meets the mark (and must refuse it). Drawn on a stream of
    its own: it changes no other draw of the seed."""
    rng = random.Random(f"workload:{seed}:late-cancel")
    if rng.random() >= LATE_CANCEL_SHARE:
        return []
    candidates = [job for job in jobs if job.type == "wait" and not job.poison and job.duration_s >= 60]
    if not candidates:
        return []
    job = rng.choice(candidates)
    return [CancelPlan(job.job_id, round(job.send_at_s + job.duration_s - rng.uniform(0, 30), 3), "update_item")]


REDRIVE_SHARE = 0.5


def _redrives(seed: int) -> list[RedrivePlan]:
    """In some seeds, an operator redrives the DLQ once: a quarter of an hour to four hours in, while jobs
    may still run (some of them the DLQ's jobs' twins, or a cancelled job's run not yet stopped) or after
    all have settled. Drawn on a stream of its own: it changes no other draw of the seed."""
    rng = random.Random(f"workload:{seed}:redrive")
    if rng.random() >= REDRIVE_SHARE:
        return []
    return [RedrivePlan(round(rng.uniform(900, 4 * 3_600), 3), rng.choice(REDRIVE_METHODS))]


DEPLOY_SHARE = 0.3
SHORT_CAP_SHARE = 0.2
"""Seeds whose `max_renewal_s` is drawn between half an hour and six hours (else the policy's 12 h)."""


def _deploy(seed: int, jobs: list[JobPlan]) -> DeployPlan | None:
    """In some seeds, a deploy a minute to an hour in changes what the receiver accepts or how many
    attempts a job has, while jobs run, wait and retry: one of the changes the seed's jobs can meet. Drawn
    on a stream of its own: it changes no other draw of the seed."""
    rng = random.Random(f"workload:{seed}:deploy")
    if rng.random() >= DEPLOY_SHARE:
        return None
    types = {job.type for job in jobs}
    needs = (LIMITED_TYPE, EMR_TYPE, "spark", None, LIMITED_TYPE, EMR_TYPE)
    changes = [change for change, need in zip(DEPLOY_CHANGES, needs, strict=True) if need is None or need in types]
    at_s, change = round(rng.uniform(60, 3_600), 3), rng.choice(changes)
    if change == "limit_removed":  # while the limited type's jobs arrive, when some of them are parked
        sends = [job.send_at_s for job in jobs if job.type == LIMITED_TYPE]
        window = random.Random(f"workload:{seed}:deploy:limit")
        at_s = round(window.uniform(min(sends), max(sends) + 300), 3)
    return DeployPlan(at_s, change)


DEFINITION_DEPLOY_SHARE = 0.2


def _definition_deploy(seed: int, numbered: int) -> tuple[DeployPlan | None, list[JobPlan]]:
    """In some seeds (on a standard queue), a deploy a minute to an hour in adds a job type: the workflow's
    definition gains its branch, new executions start on it while those begun before run on theirs. Its
    producer sends one or two jobs of the type once it is deployed. Drawn on a stream of its own: it
    changes no other draw of the seed."""
    rng = random.Random(f"workload:{seed}:definition")
    if rng.random() >= DEFINITION_DEPLOY_SHARE:
        return None, []
    at = round(rng.uniform(60, 3_600), 3)
    jobs = [
        JobPlan(
            f"j{numbered + index:02d}",
            ADDED_TYPE,
            {"seconds": int(math.exp(rng.uniform(math.log(5), math.log(1_800))))},
            round(at + rng.uniform(1, 600), 3),
        )
        for index in range(rng.randint(1, 2))
    ]
    return DeployPlan(at, "type_added"), jobs


EMR_SHARE = 0.5


def _emr_jobs(seed: int, numbered: int) -> list[JobPlan]:
    """In some seeds, one to three jobs of the EMR Serverless type, their runs drawn like Spark's but
    within an hour, now and then past their limit. Drawn on a stream of its own: it changes no other
    draw of the seed."""
    rng = random.Random(f"workload:{seed}:emr")
    if rng.random() >= EMR_SHARE:
        return []
    plans = []
    for index in range(rng.randint(1, 3)):
        behaviours = []
        for _ in range(MAX_ATTEMPTS):
            kind = rng.choices(("ok", "fail", "hang", "vanish"), weights=(75, 15, 3, 7))[0]
            seconds = 2 * 3_600 if rng.random() < 0.05 else int(math.exp(rng.uniform(math.log(5), math.log(2_400))))
            behaviours.append(SparkBehaviour(kind, float(seconds)))
        at = round(rng.uniform(0, 600), 3)
        plans.append(JobPlan(f"j{numbered + index:02d}", EMR_TYPE, dict(SPARK_PARAMS), at, spark=behaviours))
    return plans


NOTIFICATION_SHARE = 0.5
NOTIFICATION_MARKERS = (1, 4)
"""How many markers a notification names, at least and at most."""
SEVERAL_MARKERS = (2, 4)
"""The same, where every notification is fanned out (`one_marker` False)."""
S3_TWICE_SHARE = 0.25
"""The share of notifications S3 delivers a second time (its delivery is at least once): the same
records, sequencers and all, as a new message, some minutes later."""


def _notifications(seed: int, numbered: int, *, one_marker: bool = True) -> list[JobPlan]:
    """In some seeds (on a standard queue), one or two S3 notifications of one to four completion markers,
    sent like any message; now and then one that S3 delivers twice. Each is fanned out, one job message per
    marker. Drawn on a stream of its own: it changes no other draw of the seed."""
    rng = random.Random(f"workload:{seed}:s3")
    if rng.random() >= NOTIFICATION_SHARE:
        return []
    plans: list[JobPlan] = []
    for index in range(rng.randint(1, 2)):
        markers = rng.randint(*(NOTIFICATION_MARKERS if one_marker else SEVERAL_MARKERS))
        folders = tuple(f"n{index}p{part}" for part in range(markers))
        sequencers = tuple(f"{rng.getrandbits(64):016X}" for _ in folders)
        at = round(rng.uniform(0, 600), 3)
        kind = {"seconds": PARTITION_SECONDS}
        plans.append(
            JobPlan(f"j{numbered + len(plans):02d}", "s3", kind, at, partitions=folders, sequencers=sequencers)
        )
        if rng.random() < S3_TWICE_SHARE:
            again = round(at + rng.uniform(1, 300), 3)
            plans.append(
                JobPlan(f"j{numbered + len(plans):02d}", "s3", kind, again, partitions=folders, sequencers=sequencers)
            )
    return plans


def notification_markers(body: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The folders and sequencers of a body that `s3_notification` wrote (a seed's notification written
    into a scenario by its shrink), else None."""
    try:
        records = json.loads(body).get("Records")
        keys = [(r["s3"]["object"]["key"], r["s3"]["object"]["sequencer"]) for r in records]
    except (ValueError, AttributeError, KeyError, TypeError):
        return None
    folders = [key.removeprefix("parts/").removesuffix("/_SUCCESS") for key, _ in keys]
    if not keys or any(f"parts/{folder}/_SUCCESS" != key for folder, (key, _) in zip(folders, keys, strict=True)):
        return None
    if s3_notification(tuple(folders), tuple(seq for _, seq in keys)) != body:
        return None
    return tuple(folders), tuple(seq for _, seq in keys)


def s3_notification(folders: tuple[str, ...], sequencers: tuple[str, ...]) -> str:
    """An S3 event notification (as S3 sends it to a queue) of a completion marker in each folder."""
    keys = [f"parts/{folder}/_SUCCESS" for folder in folders]
    return lambdas.s3_notification(PARTITION_BUCKET, keys, sequencers=sequencers)


BURST_SHARE = 0.3
BURST_JOBS = (4, 8)


def _bursts_at_ends(seed: int, jobs: list[JobPlan]) -> list[JobPlan]:
    """In some seeds, a burst of short limited jobs sent within seconds of the moment one of the first
    limited jobs should end: arrivals find the type full in the same batch in which a slot frees (a case
    the rest of the draw rarely makes, where a reading of the slots kept for a batch can hold a message
    back). Drawn on a stream of its own: it changes no other draw of the seed."""
    rng = random.Random(f"workload:{seed}:bursts")
    if rng.random() >= BURST_SHARE:
        return []
    first = sorted((job for job in jobs if job.type == LIMITED_TYPE), key=lambda job: job.send_at_s)[:2]
    bursts: list[JobPlan] = []
    for ending in first:
        at = ending.send_at_s + float(ending.params["seconds"])
        for _ in range(rng.randint(*BURST_JOBS)):
            send = round(max(0.0, at + rng.uniform(-3.0, 3.0)), 3)
            job_id = f"j{len(jobs) + len(bursts):02d}"
            bursts.append(JobPlan(job_id, LIMITED_TYPE, {"seconds": rng.randint(5, 120)}, send))
    return bursts


def _fifo(rng: random.Random) -> Workload:
    """Jobs in three to five message groups of a FIFO queue, each group's sent in order: mostly short
    waits, now and then one that fails (its group waits for its attempts) or a long one, a poison
    message, an inline job."""
    jobs: list[JobPlan] = []
    at = 0.0
    for group in range(rng.randint(3, 5)):
        for _ in range(rng.randint(2, 5)):
            at += round(rng.uniform(0, 40), 3)
            params: dict[str, Any] = {"seconds": int(math.exp(rng.uniform(math.log(5), math.log(900))))}
            if rng.random() < 0.1:
                params["fail"] = True
            elif rng.random() < 0.05:
                params["seconds"] = _duration(rng)
            jobs.append(JobPlan(f"j{len(jobs):02d}", "wait", params, at, group=f"g{group}"))
    jobs.append(JobPlan(f"j{len(jobs):02d}", "wait", {}, round(rng.uniform(0, at), 3), poison=True, group="g0"))
    jobs.append(JobPlan(f"j{len(jobs):02d}", "echo", {"text": "hello"}, round(rng.uniform(0, at), 3), group="g1"))
    jobs.sort(key=lambda job: (job.send_at_s, job.job_id))
    return Workload(jobs, fifo=True)


def burst(messages: int, seed: int = 1, *, min_s: int = 60, max_s: int = 600) -> Workload:
    """A burst (the burst benchmark's workload, not a campaign profile): `messages` wait jobs sent at
    once, each running between `min_s` and `max_s` seconds (uniform), none failing."""
    rng = random.Random(f"burst:{seed}")
    jobs = [JobPlan(f"b{index:05d}", "wait", {"seconds": rng.randint(min_s, max_s)}, 0.0) for index in range(messages)]
    return Workload(jobs)
