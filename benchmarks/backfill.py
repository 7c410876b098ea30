"""Backfill: 10,000 jobs of one type at once, on a runner that runs 50 at a time, with admission on and off.

What runs is the simulation's world (`longjobs.sim.world.World`, docs/simulation.md), as in the burst
benchmark: the real receiver, extender and watcher built by the factory, the workflow as deployed (the
ASL the construct renders for this catalog, interpreted), on the simulated AWS on virtual time.

Workload. `--jobs` messages of one emr_serverless type are sent at once. Each job's Spark run takes a
duration drawn log-uniformly between `--min-minutes` and `--max-minutes`, and succeeds. The type's
EMR Serverless application runs `--slots` runs at once and queues the rest, in order, for at most its
queue timeout: the application's job concurrency and queuing (`maxConcurrentRuns`, and
`queueTimeoutMinutes` at its documented default of 360; `longjobs.sim.emr`,
https://docs.aws.amazon.com/emr/latest/EMR-Serverless-UserGuide/applications-concurrency-queuing.html).

- **admission on**: the type declares `max_concurrency` = `--slots` and has its waiting queue.
- **admission off**: no limit: every message starts an execution at once, and the application queues
  their runs.

Faults, as an ordinary day brings them: every extender run late by up to a period, one in 20 lost, one
status event in 100 lost (`FAULTS`). The world's SQS also hands one first receive in ten out again hours
later, while its job runs (at-least-once delivery).

Measures: `makespan_ratio` (the last run's end over the ideal: total work / slots + the longest job),
`receives_per_job` (messages handed out by ReceiveMessage, every queue), `requests_per_job` (every SQS,
DynamoDB and Step Functions request of the functions, the workflow and the producer; the mapping's
empty polls are not counted: a fixed cost of any mapping), `dlq` (jobs in the DLQ), `violation` (the
first property the monitor found broken: a lapse, a second run of a message, the type's limit
exceeded), `max_concurrent` (the most executions in their job step at once, from the trace: what
admission bounds; the application bounds its RUNNING runs itself), `queue_timeouts` (runs that timed out in
the application's queue).

Run from the repository root: `python -m benchmarks.backfill [--jobs N] [--slots K] [--seed S]
[--only on|off] [--json]`.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from longjobs.construct.constants import STATE_MACHINE_TIMEOUT
from longjobs.history.faults import WorldFault
from longjobs.sim.aws import FakeQueue, Message
from longjobs.sim.deployer import rendered_definition
from longjobs.sim.emr import SchedulerConfiguration
from longjobs.sim.faults import FaultPlan
from longjobs.sim.workload import JobPlan, SparkBehaviour, Workload
from longjobs.sim.world import START, World

JOB_TYPE = "backfill"
RUN_LIMIT_MINUTES = 120
"""The type's `timeout_minutes`: above the longest job, so that no run is cut at its limit."""
QUEUE_TIMEOUT_S = 360 * 60.0
"""The application's `queueTimeoutMinutes`, at its documented default."""
FAULTS = {WorldFault.EXTENDER_LATE: 1.0, WorldFault.EXTENDER_SKIPPED: 0.05, WorldFault.EVENT_LOST: 0.01}


@dataclass(frozen=True)
class Params:
    jobs: int = 10_000
    slots: int = 50
    min_minutes: float = 5.0
    max_minutes: float = 60.0
    seed: int = 1
    limit_days: float = 30.0


@dataclass
class Result:
    admission: str
    jobs: int
    succeeded: int
    dlq: int
    makespan_h: float
    ideal_h: float
    makespan_ratio: float
    receives_per_job: float
    requests_per_job: float
    violation: str | None
    max_concurrent: int
    executions: int
    queue_timeouts: int
    parked: int
    requests: dict[str, int] = field(default_factory=dict)
    virtual_h: float = 0.0
    wall_s: float = 0.0


def durations(params: Params) -> list[float]:
    rng = random.Random(f"backfill:{params.seed}:durations")
    low, high = math.log(params.min_minutes * 60), math.log(params.max_minutes * 60)
    return [float(round(math.exp(rng.uniform(low, high)))) for _ in range(params.jobs)]


def catalog_json(slots: int | None) -> str:
    """The stack's catalog: one emr_serverless type, limited to `slots` at once (None: no limit)."""
    job_type: dict[str, Any] = {
        "name": JOB_TYPE,
        "runner": "pyspark",
        "platform": "emr_serverless",
        "entry": "longjobs/pipeline/events.py:run",
        "emr_serverless": {"timeout_minutes": RUN_LIMIT_MINUTES},
        "description": "A backfill's partition, on EMR Serverless.",
    }
    if slots is not None:
        job_type["max_concurrency"] = slots
    return json.dumps({"job_types": [job_type]}, sort_keys=True)


def workload(params: Params) -> Workload:
    jobs = [
        JobPlan(f"p{index:05d}", JOB_TYPE, {}, 0.0, spark=[SparkBehaviour("ok", seconds)])
        for index, seconds in enumerate(durations(params))
    ]
    return Workload(jobs, settings={})


class BackfillWorld(World):
    """The simulation's world with a backfill, an application that queues its runs, and the receives and
    parked copies counted."""

    def __init__(self, params: Params, *, admission: bool) -> None:
        self.params = params
        self.receives = 0
        self.parked = 0
        catalog = catalog_json(params.slots if admission else None)
        faults = FaultPlan.scenario(rules=[], world=dict(FAULTS), within_design=True, seed=params.seed)
        super().__init__(
            params.seed,
            workload(params),
            rendered_definition(catalog),
            catalog,
            faults=faults,
            execution_timeout_s=float(STATE_MACHINE_TIMEOUT.to_seconds()),
            keep_calls=False,
            until_s=params.limit_days * 86_400,
        )
        emr = self.executions.emr
        emr.configuration = SchedulerConfiguration(params.slots, QUEUE_TIMEOUT_S)
        emr.faults_active = lambda _: False  # its runs start, end and cancel as asked (`FAULTS` only)
        emr.cancels_lost = False

    def _on_receive(self, queue: FakeQueue, message: Message) -> None:
        self.receives += 1
        super()._on_receive(queue, message)

    def _on_sent(self, queue: FakeQueue, message: Message) -> None:
        self.parked += queue in self.waiting.values()
        super()._on_sent(queue, message)


def max_concurrent(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at once (an interval that ends as another begins is not counted with it)."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = running = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def job_steps(records: list[str]) -> list[tuple[float, float]]:
    """Each execution's job step, from its trace: from `job_started` to its `job_ended` (or its execution's
    end, whichever comes first)."""
    began: dict[str, float] = {}
    spans: list[tuple[float, float]] = []
    for line in records:
        record = json.loads(line)
        event, execution = record.get("event"), record.get("execution")
        if event == "job_started":
            began[execution] = record["t"]
        elif event in ("job_ended", "execution_ended") and execution in began:
            spans.append((began.pop(execution), record["t"]))
    return spans


def simulate(params: Params, *, admission: bool) -> Result:
    wall = time.monotonic()
    world = BackfillWorld(params, admission=admission)
    seed_result = world.run()
    runs = world.executions.emr.runs.values()
    done = [run.ended for run in runs if run.state == "SUCCESS" and run.ended is not None]
    work = durations(params)
    ideal_s = sum(work) / params.slots + max(work)
    makespan_s = max(done, default=START) - START
    requests = dict(sorted(world.aws.calls.items()))
    return Result(
        admission="on" if admission else "off",
        jobs=params.jobs,
        succeeded=sum(1 for count in world.monitor.succeeded.values() if count > 0),
        dlq=len(world.dlq.messages),
        makespan_h=round(makespan_s / 3_600, 2),
        ideal_h=round(ideal_s / 3_600, 2),
        makespan_ratio=round(makespan_s / ideal_s, 4),
        receives_per_job=round(world.receives / params.jobs, 3),
        requests_per_job=round(sum(requests.values()) / params.jobs, 2),
        violation=seed_result.violation.property if seed_result.violation else None,
        max_concurrent=max_concurrent(job_steps(world.trace.records)),
        executions=len(world.aws.stepfunctions.executions),
        queue_timeouts=seed_result.coverage.get("emr:queue_timed_out", 0),
        parked=world.parked,
        requests=requests,
        virtual_h=round(seed_result.virtual_h, 2),
        wall_s=round(time.monotonic() - wall, 1),
    )


COLUMNS = (
    ("admission", "admission", None),
    ("makespan_ratio", "makespan_ratio", "<= 1.05"),
    ("receives_per_job", "receives_per_job", "<= 3"),
    ("requests_per_job", "requests_per_job", "<= 15"),
    ("dlq", "dlq", "= 0"),
    ("violation", "properties broken", "none"),
    ("max_concurrent", "max_concurrent", "<= slots"),
    ("makespan_h", "makespan h", None),
    ("ideal_h", "ideal h", None),
    ("executions", "executions", None),
    ("queue_timeouts", "queue timeouts", None),
    ("parked", "parked", None),
    ("wall_s", "wall s", None),
)


def meets(result: Result, key: str, slots: int) -> bool | None:
    """Whether the admission-on row meets the benchmark's goal on `key` (None: no goal, or the off row)."""
    if result.admission != "on":
        return None
    goals: dict[str, Callable[[Any], bool]] = {
        "makespan_ratio": lambda v: v <= 1.05,
        "receives_per_job": lambda v: v <= 3,
        "requests_per_job": lambda v: v <= 15,
        "dlq": lambda v: v == 0,
        "violation": lambda v: v is None,
        "max_concurrent": lambda v: v <= slots,
    }
    goal = goals.get(key)
    return goal(getattr(result, key)) if goal is not None else None


def table(results: list[Result], params: Params) -> Table:
    """The results as a rich table: one row per mode; the goals in the header, the on row's figures
    green where they meet them and red where not."""
    out = Table(
        title=f"Backfill: {params.jobs:,} jobs of one type, {params.slots} runs at once, "
        f"{params.min_minutes:g}-{params.max_minutes:g} min (seed {params.seed})",
        title_justify="left",
    )
    for _, label, goal in COLUMNS:
        out.add_column(f"{label}\n{goal}" if goal else label, justify="right")
    for result in results:
        cells = []
        for key, _, _ in COLUMNS:
            value = getattr(result, key)
            text = f"{value:,}" if isinstance(value, int) else str(value or "none")
            ok = meets(result, key, params.slots)
            cells.append(text if ok is None else f"[{'green' if ok else 'red'}]{text}[/]")
        out.add_row(*cells)
    return out


def requests_table(results: list[Result], params: Params) -> Table:
    """Requests per job by operation, one column a mode, the on row's total against the goal of 15."""
    out = Table(title="AWS requests per job by operation (goal, on: <= 15)", title_justify="left")
    out.add_column("operation")
    for result in results:
        out.add_column(f"admission {result.admission}", justify="right")
    names = sorted({name for result in results for name in result.requests})
    for name in names:
        out.add_row(name, *(f"{result.requests.get(name, 0) / params.jobs:.2f}" for result in results))
    out.add_row("[b]all[/]", *(f"[b]{result.requests_per_job:.2f}[/]" for result in results))
    return out


def build_parser() -> argparse.ArgumentParser:
    """The command line (apart from the run: docs/benchmarks.md's commands are parsed by a test)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.backfill", description="Backfill: admission control on and off, simulated."
    )
    parser.add_argument("--jobs", type=int, default=Params.jobs, help=f"jobs of the one type (default {Params.jobs})")
    parser.add_argument(
        "--slots", type=int, default=Params.slots, help=f"the application's runs at once (default {Params.slots})"
    )
    parser.add_argument("--seed", type=int, default=Params.seed, help=f"the random seed (default {Params.seed})")
    parser.add_argument(
        "--min-minutes", type=float, default=Params.min_minutes, help=f"shortest job (default {Params.min_minutes:g})"
    )
    parser.add_argument(
        "--max-minutes", type=float, default=Params.max_minutes, help=f"longest job (default {Params.max_minutes:g})"
    )
    parser.add_argument("--only", choices=("on", "off"), help="run one mode only")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.slots < 1 or not 0 < args.min_minutes <= args.max_minutes:
        parser.error("--jobs and --slots must be at least 1, and 0 < --min-minutes <= --max-minutes")
    params = Params(
        jobs=args.jobs,
        slots=args.slots,
        seed=args.seed,
        min_minutes=args.min_minutes,
        max_minutes=args.max_minutes,
    )
    modes = [args.only == "on"] if args.only else [True, False]
    results = [simulate(params, admission=mode) for mode in modes]
    if args.json:
        print(json.dumps({"params": asdict(params), "results": [asdict(r) for r in results]}, indent=1))
    else:
        console = Console()
        if not console.is_terminal:  # piped: rich's 80 columns would cut the figures short
            console = Console(width=200)
        console.print(table(results, params))
        console.print(requests_table(results, params))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
