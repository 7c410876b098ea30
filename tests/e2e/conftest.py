"""End-to-end scenarios on the offline runtime: the real functions, workflow and pipeline on moto's server.

Scenarios use short timeouts (a few seconds) and a 1 s extender period so the whole directory runs in
minutes; the Spark worker's session is created once per test session (see `longjobs.offline.spark`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from longjobs.offline.runtime import RunResult, run_scenario
from longjobs.offline.scenario import parse_scenario

SPARK_HEARTBEAT_S = 10
"""The heartbeat timeout of scenarios whose worker is killed or whose run is stopped: the release, and the
next attempt's wait for the previous run, each take that long."""
UNHURRIED_HEARTBEAT_S = 30
"""The heartbeat timeout of scenarios whose every run is meant to run once: on a machine busy with other
work, the worker may send a task's first heartbeat more than 10 s after Step Functions sent its token, and
the task would time out before it ran (the processor then retries it, as designed). A second rendering of
the workflow takes a fraction of a second."""

Runner = Callable[..., RunResult]


@pytest.fixture
def run(tmp_path: Path) -> Runner:
    """Run a scenario given as keyword parts of the file (settings, jobs, faults, ...)."""

    def runner(**scenario: Any) -> RunResult:
        scenario.setdefault("spark_heartbeat_s", SPARK_HEARTBEAT_S)
        scenario.setdefault("timeout_s", 90)
        return run_scenario(parse_scenario(scenario), work_dir=tmp_path)

    return runner


def assert_hidden_while_running(result: RunResult, job_id: str) -> None:
    """Each change of the lease's visible-until landed before the previous one ran out: the message
    was never visible while the lease was held."""
    points = result.tracks[job_id].visibility
    assert points, f"{job_id}: no lease was ever written"
    for (_, hidden_until), (changed, _) in itertools.pairwise(points):
        assert changed < hidden_until, (
            f"{job_id}: renewed at {changed:.2f}, after it became visible at {hidden_until:.2f}"
        )
