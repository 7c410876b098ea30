"""What the services of one seed's world share: its seed, workload and settings, its scheduler and clock,
its trace, random draws and monitor, its fault plan, and the simulated AWS with its clients.

`longjobs.sim.world.World` is the one stage; the Lambda service (`longjobs.sim.lambdas`) and the Step
Functions service (`longjobs.sim.executions`) each take it as a `Stage`, so neither imports the world. The
deployer and the operator take it as a stage with the few members more they use (`DeployerStage`,
`OperatorStage`), so the world imports them and no import runs back.
"""

from __future__ import annotations

import random
from typing import Any, Protocol

from longjobs.engine.jobs import JobCatalog
from longjobs.engine.settings import Settings
from longjobs.sim.aws import FakeAws, FakeQueue
from longjobs.sim.faults import FaultPlan
from longjobs.sim.properties import Monitor
from longjobs.sim.scheduler import Scheduler, VirtualClock
from longjobs.sim.trace import Trace
from longjobs.sim.workload import Workload

__all__ = ["START", "Stage"]

START = 1_700_000_000.0
"""Every seed's virtual time starts here (epoch seconds)."""


class Stage(Protocol):
    """One seed's world as its services see it."""

    seed: int
    workload: Workload
    settings: Settings
    catalog: JobCatalog
    scheduler: Scheduler
    clock: VirtualClock
    trace: Trace
    rng: random.Random
    monitor: Monitor
    faults: FaultPlan
    aws: FakeAws
    queue: FakeQueue
    extender_pauses: list[tuple[float, float]]
    job_of_message: dict[str, str]

    def client(self, service: str, actor: str, *, once: bool = False) -> Any:
        """A client of the simulated AWS for `actor`, observed by the monitor and the trace; `once`: one
        attempt a call."""
        ...
