"""Seeds and campaigns: run one seed (replayable), or many on every core, and report what failed and
what was never reached.

`run_seed(seed)` is a pure function of the seed, the profile and the code: the same arguments give the
same trace, byte for byte. A campaign runs seeds `first .. first+seeds-1` in worker processes (the
definition is rendered once, in the parent, by the construct's own code), and reports failed seeds with
the one-line command that replays each.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from longjobs.sim.coverage import never_reached
from longjobs.sim.deployer import rendered_definition
from longjobs.sim.faults import FaultPlan
from longjobs.sim.planted import planted
from longjobs.sim.workload import CATALOG_JSON, draw

FAULT_WINDOW_S = 2 * 3_600  # faults stop this long after the start: the rest is the quiet period


@dataclass(frozen=True)
class DeployedWorkflow:
    definition: dict[str, Any]
    timeout_s: float


@cache
def deployed_workflow() -> DeployedWorkflow:
    """The workflow as the stack deploys it: rendered by the construct's code (seconds: it loads the CDK),
    with the sim's catalog, and the state machine's timeout."""
    from longjobs.construct.constants import STATE_MACHINE_TIMEOUT

    return DeployedWorkflow(rendered_definition(CATALOG_JSON), float(STATE_MACHINE_TIMEOUT.to_seconds()))


_WORKFLOW: DeployedWorkflow | None = None
_PLANTED = contextlib.ExitStack()
"""A worker's planted bug, kept applied until the worker ends with its campaign."""


def _use(workflow: DeployedWorkflow, plant: str | None = None) -> None:
    """A worker's set-up: the deployed workflow, and the planted bug for the rest of its life. A worker
    ignores Ctrl-C, which the terminal sends to every process: the parent stops the campaign, and its
    workers end with it, without a traceback each."""
    from longjobs.offline.programs import quiet_stopped_node

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet_stopped_node()
    global _WORKFLOW
    _WORKFLOW = workflow
    _PLANTED.enter_context(planted(plant))


def run_seed(
    seed: int,
    profile: str = "mixed",
    *,
    keep_calls: bool = True,
    notifications: bool = True,
    one_marker: bool = True,
    fifo_operator: bool = True,
) -> Any:
    """One seed, start to end: its `SeedResult` (`notifications`, `one_marker`, `fifo_operator`: see
    `longjobs.sim.workload.draw`)."""
    from longjobs.sim.world import START, World

    workflow = _WORKFLOW or deployed_workflow()
    plan = FaultPlan.draw(seed, start=START, quiet_after_s=FAULT_WINDOW_S)
    world = World(
        seed,
        draw(seed, profile, notifications=notifications, one_marker=one_marker, fifo_operator=fifo_operator),
        workflow.definition,
        CATALOG_JSON,
        faults=plan,
        execution_timeout_s=workflow.timeout_s,
        keep_calls=keep_calls,
    )
    return world.run()


def offline_command(argv0: str | None = None) -> str:
    """The offline command as this process was started (`argv0`: `sys.argv[0]`), so a line that says what to
    run next works where its reader stands: `longjobs-offline` installed, `python -m offline` in this
    repository (its front package), `python -m longjobs.offline` anywhere the package is."""
    path = Path(sys.argv[0] if argv0 is None else argv0)
    if path.name == "__main__.py":
        return "python -m longjobs.offline" if path.parent.parent.name == "longjobs" else "python -m offline"
    return "longjobs-offline" if path.name.startswith("longjobs-offline") else "python -m offline"


def replay_command(
    seed: int,
    profile: str,
    *,
    notifications: bool = True,
    one_marker: bool = True,
    fifo_operator: bool = True,
    plant: str | None = None,
) -> str:
    return (
        f"{offline_command()} sim --seed {seed} --profile {profile}"
        + ("" if notifications else " --no-s3")
        + ("" if one_marker or not notifications else " --s3-several")
        + ("" if fifo_operator else " --fifo-no-operator")
        + (f" --plant {plant}" if plant else "")
    )


@dataclass
class SeedSummary:
    seed: int
    property: str | None
    detail: str | None
    t: float | None
    step: int | None
    virtual_h: float
    coverage: Counter[str]


def _summary(seed: int, profile: str) -> SeedSummary:
    result = run_seed(seed, profile, keep_calls=False)
    violation = result.violation
    return SeedSummary(
        seed,
        violation.property if violation else None,
        violation.detail if violation else None,
        violation.t if violation else None,
        violation.step if violation else None,
        result.virtual_h,
        result.coverage,
    )


@dataclass
class CampaignReport:
    seeds: int
    first: int
    profile: str
    failed: list[dict[str, Any]] = field(default_factory=list)
    coverage: Counter[str] = field(default_factory=Counter)
    never_reached: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    virtual_h: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "seeds": self.seeds,
            "first": self.first,
            "profile": self.profile,
            "failed": self.failed,
            "coverage": dict(sorted(self.coverage.items())),
            "never_reached": self.never_reached,
            "wall_s": round(self.wall_s, 1),
            "virtual_h": round(self.virtual_h, 1),
        }


def campaign(
    seeds: int,
    *,
    first: int = 0,
    profile: str = "mixed",
    workers: int | None = None,
    stop_on_failure: bool = False,
    plant: str | None = None,
) -> CampaignReport:
    """Run `seeds` seeds from `first`, on `workers` processes (every core by default). With one worker
    the seeds run in this process (what a test's patches apply to); `stop_on_failure` then ends the
    campaign at its first failed seed. `plant`: a planted bug of `longjobs.sim.planted`, in every worker."""
    began = time.monotonic()
    workflow = deployed_workflow()
    report = CampaignReport(seeds=seeds, first=first, profile=profile)
    numbers = range(first, first + seeds)
    workers = workers or min(os.cpu_count() or 1, seeds)
    if workers <= 1:
        summaries = []
        with planted(plant):
            for seed in numbers:
                summaries.append(_summary(seed, profile))
                if stop_on_failure and summaries[-1].property is not None:
                    break
    else:
        context = multiprocessing.get_context("spawn")  # no fork of a process that ran the CDK's node
        setup = (workflow, plant)
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_use, initargs=setup) as pool:
            try:
                chunk = max(1, seeds // (workers * 8))
                summaries = list(pool.map(_summary, numbers, [profile] * seeds, chunksize=chunk))
            except KeyboardInterrupt:  # stop now: the workers ignore it, and each would end its chunk first
                pool.shutdown(wait=False, cancel_futures=True)
                for worker in multiprocessing.active_children():
                    worker.terminate()
                raise
    for summary in summaries:
        report.coverage.update(summary.coverage)
        report.virtual_h += summary.virtual_h
        if summary.property is not None:
            report.failed.append(
                {
                    "seed": summary.seed,
                    "property": summary.property,
                    "detail": summary.detail,
                    "t": summary.t,
                    "step": summary.step,
                    "replay": replay_command(summary.seed, profile, plant=plant),
                }
            )
    report.never_reached = never_reached(report.coverage, workflow.definition, profile)
    report.wall_s = time.monotonic() - began
    return report
