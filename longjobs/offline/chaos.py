"""The chaos campaign: `python -m offline chaos --runs N --seed S --report FILE`.

Each run is a scenario drawn from the campaign's seed (run `i` of seed `S` is always the same scenario):

- 3 to 6 `wait` jobs of 1 to 8 s, sometimes one that fails on every attempt, sometimes a poison body; no
  Spark, so a run takes seconds;
- short settings: the `threshold` policy on 4 s timeouts, or `adaptive` on 6 s chunks with a 1 s
  schedule, a reconcile grace of 2 or 3 s (past the receiver's timeout where the engine has that
  setting), and a queue that moves a message to the DLQ after 10 receives;
- a random mix of every fault type but `kill_worker` (it needs Spark): 1 to 3 `aws_fault`s on the
  operations each function calls (`MODES`, any probability and window; counts of 2 to 12, so that most
  outlast botocore's 4 attempts and the function sees the failure; 1 to 3 crashes), and sometimes
  `lose_scheduled_runs`, `drop_status_events`, `pause_extender`, `throttle`, `abort_execution` and
  `duplicate_delivery`.

Faults burn receives (a receiver crash fails its whole batch; a record fails once all 4 attempts of one
of its calls were answered by faults; a duplicate, an abort and an excused lapse each cost one): the
faults that reach the receiver can cost a message at most 3 receives in a run, and a queue's 10 receives
leave room for 1 receive, those 3, a duplicate, an aborted attempt and 4 excused lapses before a job
expected to be deleted could reach the DLQ on faults alone.

With `--fifo` every run is the same scenario on FIFO queues (`fifo_variant`): the wait jobs are dealt
into message groups of at most two, in send order; the poison body goes into the middle of one, the job
that always fails into a group of its own (its attempts hold nobody else's), and sometimes a job is sent
again with the same deduplication id (SQS drops it). The mapping takes one record at a time, as the
stack's FIFO mapping does, so only a group's head is received and the queue keeps the standard run's 10
receives. The report's checks add
each group's order: jobs of one group run one after the other, in send order.

Every run goes through `longjobs.offline.runtime.run_scenario`; the campaign prints one row per run and the
totals, and writes the JSON report: every run (its scenario, its violations and its report's totals) and
the campaign's `double_runs`, `lapses`, `lost_messages`, `stuck_leases`, `violations` (their number; the
sentences are in the runs) and `faults_injected` by mode. Exit code 0 only with no violation.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from longjobs.offline.scenario import parse_scenario

POLICIES: dict[str, dict[str, Any]] = {
    "threshold": {
        "policy": "threshold",
        "visibility_timeout_s": 5,
        "threshold_s": 2.5,
        "heartbeat_s": 0.5,
        "extender_period_s": 1,
    },
    # Chunks of 6 s: the lead survives one lost run followed by one a full period late (1 s period). The
    # queue's 8 s VT lets the receiver run up to 8 s, so its own retries can run out (at 4 s they seldom do).
    "adaptive": {
        "policy": "adaptive",
        "visibility_timeout_s": 8,
        "extender_period_s": 1,
        "adaptive_lost_runs_survived": 1,
        "adaptive_ceiling_s": 6,
    },
}
MAX_RECEIVES = 10
RECEIVER_TIMEOUT_S = 3
OPERATIONS: dict[str, tuple[str, ...]] = {
    "receiver": (
        "BatchGetItem",  # the lease and the job lock, read together
        "TransactWriteItems",  # a new attempt's lease with its holds
        "UpdateItem",
        "ChangeMessageVisibility",
        "ChangeMessageVisibility",
        "StartExecution",
        "StartExecution",
        "DescribeExecution",
        "SendMessage",
        "*",
    ),
    "extender": (
        "Query",
        "ChangeMessageVisibilityBatch",
        "TransactWriteItems",
        "UpdateItem",
        "ListExecutions",  # reconciliation's list of the running executions
        "ChangeMessageVisibility",
        "*",
    ),
    "watcher": ("GetItem", "UpdateItem", "ChangeMessageVisibility", "*"),
    "any": ("UpdateItem", "ChangeMessageVisibility", "BatchGetItem", "*"),
}
"""Operations each function calls (`any`: ones several call), and every operation; the receiver's
visibility change and start, where its crash windows are, twice as often."""
FUNCTIONS = ("receiver", "extender", "watcher", "any")
FUNCTION_WEIGHTS = (4, 3, 2, 2)
"""The receiver's calls decide whether an execution starts: they get the most faults."""
MODES = ("throttled", "server_error", "answer_lost", "crash_before")
"""The call faults the campaign draws (`longjobs.history.faults.CallFault`'s names)."""
RECEIVER_BUDGET = 3
"""Receives the faults that reach the receiver may cost a message in one run (see the module's docstring)."""
BOTOCORE_ATTEMPTS = 4
"""`longjobs.engine.aws.CLIENT_CONFIG`: standard retries, `max_attempts` 3 retries after the first attempt."""
RUN_TIMEOUT_S = 60.0
FIFO_RUN_TIMEOUT_S = 240.0
"""A group's jobs run one after the other, one record per receive: a run takes 20 to 55 s on an idle
2-core machine, and well over twice that on a loaded one."""
FIFO_GROUP_SIZE = 2
INTERRUPTED = 130
"""The exit code of a command stopped by Ctrl-C (a campaign, or any offline run): 128 + SIGINT, as a shell
reports it."""


def timing_settings(grace_s: int) -> dict[str, Any]:
    """A 3 s receiver and a reconcile grace `grace_s` longer (the settings refuse one that does not
    outlast the receiver's timeout)."""
    return {"receiver_timeout_s": RECEIVER_TIMEOUT_S, "reconcile_grace_s": RECEIVER_TIMEOUT_S + grace_s}


def draw_scenario(campaign_seed: int, index: int, *, fifo: bool = False) -> dict[str, Any]:
    """Run `index` of the campaign: a scenario as its JSON file would hold it (`fifo`: its FIFO variant)."""
    scenario = _draw_standard(campaign_seed, index)
    return fifo_variant(scenario, random.Random(f"chaos-fifo:{campaign_seed}:{index}")) if fifo else scenario


def fifo_variant(scenario: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The scenario on FIFO queues (see the module's docstring); its faults name the same jobs."""
    jobs = [dict(job) for job in scenario["jobs"]]
    waits = [job for job in jobs if job.get("type") == "wait" and not job.get("fail")]
    groups = [f"g{n + 1}" for n in range(-(-len(waits) // FIFO_GROUP_SIZE))]
    slots = [group for group in groups for _ in range(FIFO_GROUP_SIZE)]
    rng.shuffle(slots)
    for job, group in zip(waits, slots, strict=False):
        job["group"] = group
    ordered = list(waits)
    for job in jobs:
        if job.get("fail"):
            job["group"] = "alone"
            ordered.append(job)
        elif "raw_body" in job:
            job["group"] = rng.choice(groups)
            members = [i for i, other in enumerate(ordered) if other.get("group") == job["group"]]
            ordered.insert(members[0] + 1, job)  # behind the group's first job: in the middle of the group
    if rng.random() < 0.3:
        original = rng.choice(waits)
        original["dedup_id"] = f"dedup-{original['id']}"
        ordered.append(
            {"id": "resent", "type": "wait", "seconds": 1, "group": original["group"], "dedup_id": original["dedup_id"]}
        )
    settings = {**scenario["settings"], "fifo": True}
    return {**scenario, "settings": settings, "jobs": ordered, "timeout_s": FIFO_RUN_TIMEOUT_S}


def _draw_standard(campaign_seed: int, index: int) -> dict[str, Any]:
    rng = random.Random(f"chaos:{campaign_seed}:{index}")
    policy = rng.choice(sorted(POLICIES))
    settings = {
        **POLICIES[policy],
        "release_delay_base_s": 0,
        "max_attempts": MAX_RECEIVES,
        **timing_settings(rng.choice((2, 3))),
    }
    jobs: list[dict[str, Any]] = [
        {"id": f"wait{i}", "type": "wait", "seconds": rng.randint(1, 8)} for i in range(rng.randint(3, 6))
    ]
    if rng.random() < 0.5:
        jobs.append({"id": "fails", "type": "wait", "seconds": 0, "fail": True})
    if rng.random() < 0.4:
        jobs.append({"id": "poison", "raw_body": "{not json"})
    return {
        "settings": settings,
        "jobs": jobs,
        "faults": draw_faults(rng, jobs),
        "timeout_s": RUN_TIMEOUT_S,
        "seed": rng.randrange(1 << 31),
    }


def wasted_receives(mode: str, count: int) -> int:
    """Receives a receiver fault can cost each message at most: a crash fails a whole batch, and any
    other mode fails a record only once all of botocore's 4 attempts of one call were answered by it."""
    return count if mode == "crash_before" else -(-count // BOTOCORE_ATTEMPTS)


def draw_faults(rng: random.Random, jobs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    faults: list[dict[str, Any]] = []
    budget = RECEIVER_BUDGET
    for _ in range(rng.randint(1, 3)):
        function = rng.choices(FUNCTIONS, weights=FUNCTION_WEIGHTS)[0]
        mode = rng.choice(MODES)
        # Most faults outlast botocore's retries (4 attempts), so the functions see them.
        count = rng.choice((1, 2, 3)) if mode == "crash_before" else rng.choice((2, 4, 4, 8, 12))
        if function in ("receiver", "any"):
            while count > 1 and wasted_receives(mode, count) > budget:
                count //= 2
            if wasted_receives(mode, count) > budget:
                function = rng.choice(("extender", "watcher"))
            else:
                budget -= wasted_receives(mode, count)
        # The receiver makes most of its calls as the jobs arrive.
        at_s = rng.choice((0, 0, 0, 1, 2) if function == "receiver" else (0, 0, 1, 2, 4))
        faults.append(
            {
                "type": "aws_fault",
                "function": function,
                "operation": rng.choice(OPERATIONS[function]),
                "mode": mode,
                "probability": rng.choice((0.3, 0.6, 1.0, 1.0, 1.0)),
                "count": count,
                "at_s": at_s,
                "until_s": at_s + rng.choice((5, 10, 30)),
            }
        )
    if rng.random() < 0.4:
        faults.append({"type": "lose_scheduled_runs", "probability": rng.choice((0.1, 0.2, 0.3))})
    if rng.random() < 0.4:
        faults.append({"type": "drop_status_events", "probability": rng.choice((0.5, 1.0))})
    if rng.random() < 0.3:
        faults.append({"type": "pause_extender", "at_s": rng.randint(1, 5), "for_s": rng.choice((1, 2, 3))})
    if rng.random() < 0.3:
        operation = rng.choice(("ChangeMessageVisibilityBatch", "ChangeMessageVisibility"))
        faults.append({"type": "throttle", "operation": operation, "probability": rng.choice((0.2, 0.4))})
    long_jobs = [job["id"] for job in jobs if job.get("type") == "wait" and not job.get("fail") and job["seconds"] >= 4]
    if long_jobs and rng.random() < 0.35:
        faults.append({"type": "abort_execution", "job": rng.choice(long_jobs), "at_s": rng.choice((1, 2, 3))})
    if long_jobs and rng.random() < 0.5:
        faults.append({"type": "duplicate_delivery", "job": rng.choice(long_jobs), "at_s": rng.choice((1, 2, 3))})
    return faults


@dataclass
class RunOutcome:
    index: int
    scenario: dict[str, Any]
    ok: bool
    violations: list[str]
    totals: dict[str, Any]
    wall_s: float

    def as_json(self) -> dict[str, Any]:
        return {
            "run": self.index,
            "ok": self.ok,
            "violations": self.violations,
            "totals": self.totals,
            "wall_s": self.wall_s,
            "scenario": self.scenario,
        }


@dataclass
class Campaign:
    seed: int
    runs: list[RunOutcome] = field(default_factory=list)

    def totals(self) -> dict[str, Any]:
        injected: Counter[str] = Counter()
        for run in self.runs:
            injected.update(run.totals.get("faults_injected", {}))
        return {
            "double_runs": sum(run.totals["double_runs"] for run in self.runs),
            "lapses": sum(run.totals["lapses"] for run in self.runs),
            "lost_messages": sum(run.totals["lost_messages"] for run in self.runs),
            "stuck_leases": sum(run.totals["stuck_leases"] for run in self.runs),
            "violations": sum(len(run.violations) for run in self.runs),
            "faults_injected": dict(sorted(injected.items())),
            "faults_missed": sum(len(run.totals["faults_missed"]) for run in self.runs),
        }

    def as_json(self) -> dict[str, Any]:
        return {"seed": self.seed, **self.totals(), "runs": [run.as_json() for run in self.runs]}


def run_one(index: int, scenario: dict[str, Any], work_dir: Path) -> RunOutcome:
    from longjobs.offline.runtime import run_scenario

    result = run_scenario(parse_scenario(scenario), work_dir=work_dir)
    return RunOutcome(
        index=index,
        scenario=scenario,
        ok=bool(result.report["ok"]),
        violations=list(result.violations),
        totals=dict(result.report["totals"]),
        wall_s=float(result.report["wall_s"]),
    )


HEADER = ("run", "policy", "jobs", "faults", "ok", "viol.", "double", "lapses", "lost", "stuck", "injected", "wall s")


def row(run: RunOutcome) -> tuple[str, ...]:
    totals = run.totals
    injected = ",".join(f"{mode}:{n}" for mode, n in totals.get("faults_injected", {}).items())
    return (
        str(run.index),
        str(run.scenario["settings"]["policy"]) + (" fifo" if run.scenario["settings"].get("fifo") else ""),
        str(len(run.scenario["jobs"])),
        str(len(run.scenario["faults"])),
        "yes" if run.ok else "NO",
        str(len(run.violations)),
        str(totals["double_runs"]),
        str(totals["lapses"]),
        str(totals["lost_messages"]),
        str(totals["stuck_leases"]),
        injected or "-",
        f"{run.wall_s:.1f}",
    )


def table(rows: Sequence[Sequence[str]]) -> str:
    """Plain text columns (no table library is installed)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run_campaign(
    runs: int,
    seed: int,
    work_dir: Path,
    *,
    on_run: Callable[[RunOutcome], None] | None = None,
    fifo: bool = False,
    campaign: Campaign | None = None,
) -> Campaign:
    """Run the campaign's runs one after the other, each added to `campaign` as it ends. A caller that passes
    its own `campaign` keeps the runs that ended when a run is interrupted (Ctrl-C)."""
    campaign = campaign if campaign is not None else Campaign(seed)
    for index in range(1, runs + 1):
        outcome = run_one(index, draw_scenario(seed, index, fifo=fifo), work_dir / f"run-{index:03d}")
        campaign.runs.append(outcome)
        if on_run is not None:
            on_run(outcome)
    return campaign


def summary(campaign: Campaign) -> str:
    totals = campaign.totals()
    injected = ", ".join(f"{mode} {n}" for mode, n in totals["faults_injected"].items()) or "none"
    lines = [
        table([HEADER, *(row(run) for run in campaign.runs)]),
        "",
        f"{len(campaign.runs)} run(s) (seed {campaign.seed}): {totals['violations']} violations, "
        f"{totals['double_runs']} double runs, {totals['lapses']} lapses, {totals['lost_messages']} lost messages, "
        f"{totals['stuck_leases']} stuck leases; {totals['faults_missed']} faults missed",
        f"faults injected: {injected}",
    ]
    for run in campaign.runs:
        lines += [f"run {run.index}: {violation}" for violation in run.violations]
    return "\n".join(lines)


def main(runs: int, seed: int, report_path: Path, *, quiet: bool = False, fifo: bool = False) -> int:
    work_dir = report_path.parent / "chaos-work"
    started = time.monotonic()
    kind = " on FIFO queues" if fifo else ""
    print(f"chaos: {runs} runs from seed {seed}{kind}; logs under {work_dir}", file=sys.stderr)

    def progress(run: RunOutcome) -> None:
        if not quiet:
            print(f"run {run.index}/{runs}: {'ok' if run.ok else 'VIOLATIONS'} in {run.wall_s:.1f} s", file=sys.stderr)

    campaign = Campaign(seed)
    try:
        run_campaign(runs, seed, work_dir, on_run=progress, fifo=fifo, campaign=campaign)
    except KeyboardInterrupt:  # the run under way has stopped its services: keep the runs that ended
        return interrupted(campaign, runs, report_path, started)
    report = write_report(campaign, report_path, started)
    print(summary(campaign))
    print(f"report: {report_path}")
    return 0 if report["violations"] == 0 else 1


def write_report(campaign: Campaign, report_path: Path, started: float, **extra: Any) -> dict[str, Any]:
    report = {**campaign.as_json(), "wall_s": round(time.monotonic() - started, 1), **extra}
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def interrupted(campaign: Campaign, runs: int, report_path: Path, started: float) -> int:
    """A campaign stopped by Ctrl-C: the report of the runs that ended (`interrupted: true`), and one line."""
    ended = len(campaign.runs)
    if not ended:
        print("interrupted: the campaign stopped before its first run ended, and wrote no report", file=sys.stderr)
        return INTERRUPTED
    write_report(campaign, report_path, started, interrupted=True)
    print(
        f"interrupted: {ended} of {runs} runs ended before the campaign stopped; their report: {report_path}",
        file=sys.stderr,
    )
    return INTERRUPTED
