"""The operator inside the simulation (`longjobs.sim.operator`): `longjobs cancel` of running jobs, cut short
after each of its steps, converges with every property held; the seeds that cut it are found by drawing,
not written."""

from __future__ import annotations

import json

import pytest

from longjobs.sim.campaign import run_seed
from longjobs.sim.workload import CANCEL_CUTS, draw


def _seeds_cutting_after(operation: str, count: int = 40) -> list[int]:
    seeds = (seed for seed in range(3_000) if any(plan.cut_after == operation for plan in draw(seed).cancels))
    return [next(seeds) for _ in range(count)]


@pytest.mark.parametrize("operation", [cut for cut in CANCEL_CUTS if cut is not None])
def test_operator_cancel_cut_short_after_each_step_converges(operation: str) -> None:
    """A cancel that dies right after its mark, its stop, its DLQ send or its delete is finished by the
    extender after the hand-over, or by the operator running it again: every property holds, and some of
    the seeds that draw the cut do die there (a cancel may find its job ended before that step, or fail
    at an earlier one on an injected fault). The seeds are run until one does."""
    cut_short = 0
    for seed in _seeds_cutting_after(operation):
        result = run_seed(seed)
        assert result.violation is None, (seed, result.violation)
        cut_short += result.coverage[f"operator:cut_after:{operation}"]
        if cut_short:
            break
    assert cut_short, f"no seed's cancel died after {operation}"


def test_operator_cancels_are_drawn_on_their_own_stream() -> None:
    """The seeds keep the jobs they had: cancels are drawn apart, on FIFO queues too, and a FIFO seed drawn
    as the corpus's older seeds (`fifo_operator=False`) has none."""
    for seed in range(40):
        workload = draw(seed)
        ids = {job.job_id for job in workload.jobs}
        assert all(plan.job_id in ids for plan in workload.cancels)
        if workload.fifo:
            before = draw(seed, fifo_operator=False)
            assert before.cancels == [] and before.jobs == workload.jobs
    assert sum(bool(draw(seed).cancels) for seed in range(100)) > 20
    assert sum(bool(draw(seed, "fifo").cancels) for seed in range(100)) > 20


def test_operator_cancel_the_extender_finishes_after_the_receiver_acknowledged_keeps_the_seed_going() -> None:
    """FIFO seed 895: the operator's cancel dies after its mark, the extender claims the DLQ send and dies,
    and the message shows again: the receiver acknowledges it (the claimant sends the copy). The seed ends
    only once that cancel is done, so the job's DLQ copy is there before nothing_lost is judged."""
    result = run_seed(895, "fifo")
    assert result.violation is None, result.violation
    events = [json.loads(line) for line in result.trace.records]
    acknowledged = next(e["t"] for e in events if e.get("outcome") == "cancelled" and e.get("job_id") == "j05")
    copied = [e["t"] for e in events if e.get("event") == "dead_lettered" and e.get("job_id") == "j05"]
    assert copied and min(copied) > acknowledged
