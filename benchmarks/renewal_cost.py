"""Renewal cost: SQS requests, DynamoDB writes, lapses and dead-job exposure of each renewal policy.

A deterministic simulation on a virtual clock (no network, no AWS code) that drives the project's
real policy objects, `build_policy(Settings(...))`, the way the extender drives them.

Workload. `--jobs` jobs (default 10,000) arrive uniformly at random over a 24 h window; each runs for
a duration drawn log-uniformly between 60 s and 6 h, then succeeds. Every policy sees the same jobs
and the same extender schedule (both come from `--seed`).

Receiver. At arrival the lease gets `visible_until = received_at + policy.initial_timeout_s()`,
`last_renewed_at = received_at` and `renew_at = policy.renew_at(lease)` (one DynamoDB write).

Extender schedule (`longjobs/engine/extender/invocation.py`). EventBridge fires every `extender_period_s`
(60 s). Each scheduled run is late by uniform(0, `lateness` x period) and lost entirely with
probability `loss_rate` (default 1 in 20), independently per run. Reserved concurrency is 1: a run
that would overlap the previous invocation starts when that one ends. An invocation runs a pass at
`start + i * settings.tick_s` for every i with that time before its deadline `start + period` (the
first pass always runs), and ends with its last pass; passes take no virtual time. So the sub-minute
policies (tick 1 s) pass every second within an invocation, and adaptive (tick = period) passes once.
The Lambda timeout is taken to be longer than the period, so the period is the deadline.

Pass (`longjobs/engine/extender/service.py`). Every ACTIVE lease with `renew_at <= now` is due (a heap keyed
by `renew_at` stands in for the due-index). A due lease with `now >= received_at + settings.renewal_s`
is closed CAPPED with no call. Otherwise `policy.decide(now, lease)`; on renew the timeout is cut to
`floor(received_at + 43200 - cap_safety_s - now)` (closed CAPPED if that is <= 0), the renewal is sent
at `now` and always succeeds: `visible_until = now + timeout`, `last_renewed_at = now`,
`renew_at = policy.renew_at(renewed lease)`, one DynamoDB write. A due lease the policy keeps stays due.
A pass sends its renewals as `ChangeMessageVisibilityBatch` calls of up to 10 entries.

A job's end closes its lease (one DynamoDB write; none for a lease already closed CAPPED) and
removes it from the due set.

Measures, per policy (message-hours = sum of job durations / 3600):

- `requests_per_message_hour`: batch calls; `unbatched_requests_per_message_hour`: renewals (one
  `ChangeMessageVisibility` each).
- `writes_per_message_hour`: DynamoDB writes (create + one per renewal + close).
- `lapses`: visibility gaps of a running job with an ACTIVE lease. A gap opens when `visible_until`
  passes while the job runs and closes at the first moment the simulation touches the lease again: a
  renewal (or CAPPED close) at a pass with `now > visible_until`, or the job's end with
  `visible_until < end`. Each gap is counted once, where it closes. A lease is never looked at between
  its `visible_until` and its next pass without being due, since every policy sets
  `renew_at <= visible_until`, so no gap is missed. Visibility after a CAPPED close is not a lapse
  (the cap makes the message reappear by design); it is what `capped` counts.
- `dead_job_hidden_s_max` / `dead_job_hidden_s_p50`: each job's end read as a silent death instead:
  renewals stop then, and the message stays hidden for `max(0, visible_until - end)` more seconds.
  Renewals before the end are the same in both readings, so one run measures both.
- `capped`: leases closed CAPPED while their job was still running.

Also reported: renewals, batch calls, passes, invocations, lost runs and the longest streak of
consecutive lost runs, and the longest time between two passes (`max_pass_gap_s`), to read lapses
against: adaptive renews `longjobs.engine.policies.adaptive.lead_s` (300.5 s by default) before visible, which covers
three lost runs in a row followed by one late by a full period (a 300 s gap).

Run from the repository root: `python -m benchmarks.renewal_cost [--jobs N] [--seed S] [--lateness F]
[--loss-rate P] [--json]`.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import math
import random
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field

from longjobs.engine.policies import RenewalPolicy, build_policy, hold_limit
from longjobs.engine.settings import Settings
from longjobs.engine.visibility import BATCH_LIMIT

DESCRIPTION = "Renewal cost: SQS requests, DynamoDB writes, lapses and dead-job exposure of each policy."
ARRIVAL, END = 0, 1

POLICY_SETTINGS: dict[str, Settings] = {
    # `remaining` and `threshold` with a 30 s VT and a 1 s heartbeat. The settings refuse both on the
    # 1-minute schedule: one lost run leaves a 61 s gap, longer than either renews ahead. They are
    # built here without validation, to show what that refusal prevents.
    "remaining": Settings.model_construct(
        policy="remaining", visibility_timeout_s=30, max_renewal_s=43_200, heartbeat_s=1
    ),
    "threshold": Settings.model_construct(policy="threshold", visibility_timeout_s=30, threshold_s=5, heartbeat_s=1),
    # The threshold policy as the settings accept it on this schedule: renew 62 s ahead, by 5 minutes.
    "threshold-safe": Settings(policy="threshold", visibility_timeout_s=300, threshold_s=62, heartbeat_s=1),
    "adaptive": Settings(),
}


@dataclass(frozen=True)
class SimParams:
    """The workload and the extender's unreliability."""

    jobs: int = 10_000
    seed: int = 1
    lateness: float = 1.0
    """Each scheduled run is late by uniform(0, lateness x extender period)."""
    loss_rate: float = 0.05
    """Probability that a scheduled run is lost entirely."""
    window_s: float = 86_400.0
    min_duration_s: float = 60.0
    max_duration_s: float = 6 * 3_600.0


@dataclass(frozen=True)
class Job:
    received_at: float
    duration_s: float

    @property
    def end(self) -> float:
        return self.received_at + self.duration_s


@dataclass(frozen=True)
class LeaseState:
    """The timing of one lease (satisfies `longjobs.engine.policies.LeaseTiming`)."""

    received_at: float
    visible_until: float
    last_renewed_at: float


@dataclass
class Tally:
    """Raw counts of one simulated run."""

    renewals: int = 0
    batch_calls: int = 0
    writes: int = 0
    lapses: int = 0
    capped: int = 0
    passes: int = 0
    invocations: int = 0
    lost_runs: int = 0
    longest_lost_streak: int = 0
    max_pass_gap_s: float = 0.0
    dead_hidden_s: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class PolicyResult:
    """The measures of one policy (see the module docstring)."""

    requests_per_message_hour: float
    unbatched_requests_per_message_hour: float
    writes_per_message_hour: float
    lapses: int
    dead_job_hidden_s_max: float
    dead_job_hidden_s_p50: float
    capped: int
    message_hours: float
    renewals: int
    batch_calls: int
    passes: int
    invocations: int
    lost_runs: int
    longest_lost_streak: int
    max_pass_gap_s: float


def make_jobs(params: SimParams) -> list[Job]:
    """Arrivals uniform over the window, durations log-uniform, sorted by arrival."""
    rng = random.Random(f"jobs:{params.seed}")
    low, high = math.log(params.min_duration_s), math.log(params.max_duration_s)
    jobs = [Job(rng.uniform(0, params.window_s), math.exp(rng.uniform(low, high))) for _ in range(params.jobs)]
    return sorted(jobs, key=lambda job: job.received_at)


def invocation_passes(start: float, settings: Settings) -> list[float]:
    """The pass times of one invocation: a tick apart until its deadline, as `run_invocation` does."""
    deadline = start + settings.extender_period_s
    passes = [start]
    while start + len(passes) * settings.tick_s < deadline:
        passes.append(start + len(passes) * settings.tick_s)
    return passes


def pass_times(settings: Settings, params: SimParams, tally: Tally) -> Iterator[float]:
    """Every pass of the extender, in time order, forever; counts invocations and lost runs."""
    rng = random.Random(f"schedule:{params.seed}")
    period = settings.extender_period_s
    previous_end = -math.inf
    streak = 0
    for run in itertools.count():
        late = rng.uniform(0, params.lateness * period)
        if rng.random() < params.loss_rate:
            tally.lost_runs += 1
            streak += 1
            tally.longest_lost_streak = max(tally.longest_lost_streak, streak)
            continue
        streak = 0
        passes = invocation_passes(max(run * period + late, previous_end), settings)
        tally.invocations += 1
        previous_end = passes[-1]
        yield from passes


class Simulation:
    """One policy over one workload: the receiver, the extender passes and the job ends."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.policy: RenewalPolicy = build_policy(settings)
        self.tally = Tally()
        self.leases: dict[int, LeaseState] = {}
        self.active: set[int] = set()
        self.due: list[tuple[float, int]] = []  # (renew_at, job): the due-index
        self.last_pass: float | None = None

    def run(self, jobs: Sequence[Job], params: SimParams) -> Tally:
        """Arrivals and ends up to each pass, then the pass, until every job has ended."""
        # (time, kind, job): at a tie an arrival (0) comes before an end (1), and both before a pass.
        events = sorted(
            [(job.received_at, ARRIVAL, i) for i, job in enumerate(jobs)]
            + [(job.end, END, i) for i, job in enumerate(jobs)]
        )
        next_event = 0
        for now in pass_times(self.settings, params, self.tally):
            while next_event < len(events) and events[next_event][0] <= now:
                at, kind, i = events[next_event]
                if kind == ARRIVAL:
                    self.arrive(i, at)
                else:
                    self.end(i, at)
                next_event += 1
            if next_event == len(events):
                break
            self.run_pass(now)
        return self.tally

    def arrive(self, i: int, received_at: float) -> None:
        lease = LeaseState(received_at, received_at + self.policy.initial_timeout_s(), received_at)
        self.leases[i] = lease
        self.active.add(i)
        heapq.heappush(self.due, (self.policy.renew_at(lease), i))
        self.tally.writes += 1

    def end(self, i: int, at: float) -> None:
        lease = self.leases.pop(i)
        self.tally.dead_hidden_s.append(max(0.0, lease.visible_until - at))
        if i in self.active:
            self.active.discard(i)
            self.tally.lapses += lease.visible_until < at
            self.tally.writes += 1

    def run_pass(self, now: float) -> None:
        if self.last_pass is not None:
            self.tally.max_pass_gap_s = max(self.tally.max_pass_gap_s, now - self.last_pass)
        self.last_pass = now
        self.tally.passes += 1
        due: list[int] = []
        while self.due and self.due[0][0] <= now + self.policy.horizon_s:
            _, i = heapq.heappop(self.due)
            if i in self.active:
                due.append(i)
        renewed = sum(self.visit(i, now) for i in due)
        self.tally.renewals += renewed
        self.tally.batch_calls += math.ceil(renewed / BATCH_LIMIT)

    def visit(self, i: int, now: float) -> bool:
        """Cap, renew or keep one due lease, as `renew_due` does. True when it was renewed."""
        lease = self.leases[i]
        if now >= lease.received_at + self.settings.renewal_s:
            self.close_capped(i, now)
            return False
        decision = self.policy.decide(now, lease)
        if not decision.renew:
            heapq.heappush(self.due, (self.policy.renew_at(lease), i))
            return False
        cap_left = math.floor(hold_limit(lease.received_at, self.settings.cap_safety_s) - now)
        timeout = min(decision.visibility_timeout_s, cap_left)
        if timeout <= 0:
            self.close_capped(i, now)
            return False
        self.tally.lapses += now > lease.visible_until
        renewed = LeaseState(lease.received_at, now + timeout, now)
        self.leases[i] = renewed
        heapq.heappush(self.due, (self.policy.renew_at(renewed), i))
        self.tally.writes += 1
        return True

    def close_capped(self, i: int, now: float) -> None:
        self.tally.lapses += now > self.leases[i].visible_until
        self.active.discard(i)
        self.tally.capped += 1
        self.tally.writes += 1


def measure(tally: Tally, jobs: Sequence[Job]) -> PolicyResult:
    message_hours = sum(job.duration_s for job in jobs) / 3_600
    return PolicyResult(
        requests_per_message_hour=tally.batch_calls / message_hours,
        unbatched_requests_per_message_hour=tally.renewals / message_hours,
        writes_per_message_hour=tally.writes / message_hours,
        lapses=tally.lapses,
        dead_job_hidden_s_max=max(tally.dead_hidden_s),
        dead_job_hidden_s_p50=statistics.median(tally.dead_hidden_s),
        capped=tally.capped,
        message_hours=message_hours,
        renewals=tally.renewals,
        batch_calls=tally.batch_calls,
        passes=tally.passes,
        invocations=tally.invocations,
        lost_runs=tally.lost_runs,
        longest_lost_streak=tally.longest_lost_streak,
        max_pass_gap_s=tally.max_pass_gap_s,
    )


def run_benchmark(params: SimParams) -> dict[str, PolicyResult]:
    """Every policy of `POLICY_SETTINGS` over the same jobs and schedule."""
    jobs = make_jobs(params)
    return {name: measure(Simulation(settings).run(jobs, params), jobs) for name, settings in POLICY_SETTINGS.items()}


def format_table(results: dict[str, PolicyResult]) -> str:
    columns = list(asdict(next(iter(results.values()))))
    rows = [["policy", *columns]]
    for name, result in results.items():
        values = asdict(result)
        rows.append([name, *(f"{values[c]:.2f}" if isinstance(values[c], float) else str(values[c]) for c in columns)])
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in rows)


def parse_args(argv: Sequence[str] | None) -> tuple[SimParams, bool]:
    defaults = SimParams()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.renewal_cost", description=DESCRIPTION)
    parser.add_argument("--jobs", type=int, default=defaults.jobs, help=f"jobs simulated (default {defaults.jobs})")
    parser.add_argument("--seed", type=int, default=defaults.seed, help=f"the random seed (default {defaults.seed})")
    parser.add_argument(
        "--lateness",
        type=float,
        default=defaults.lateness,
        help=f"max lateness, in periods (default {defaults.lateness})",
    )
    parser.add_argument(
        "--loss-rate", type=float, default=defaults.loss_rate, help=f"share of runs lost (default {defaults.loss_rate})"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, not {args.jobs}")
    if not (math.isfinite(args.lateness) and args.lateness >= 0):  # nan would never let a run come
        parser.error(f"--lateness must be a number of periods from 0, not {args.lateness}")
    if not 0 <= args.loss_rate < 1:
        # with every run lost, no run would ever come and the simulation would not end
        parser.error(f"--loss-rate must be from 0 to below 1, not {args.loss_rate}")
    params = SimParams(jobs=args.jobs, seed=args.seed, lateness=args.lateness, loss_rate=args.loss_rate)
    return params, bool(args.json)


def main(argv: Sequence[str] | None = None) -> int:
    params, as_json = parse_args(argv)
    results = run_benchmark(params)
    if as_json:
        print(json.dumps({name: asdict(result) for name, result in results.items()}, indent=2))
    else:
        print(format_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
