"""Deploys inside the simulation (`longjobs.sim.deployer`): a change of what the receiver accepts, or of a job's
attempts, while jobs run, wait and retry; and the property that a DLQ copy keeps its attempts."""

from __future__ import annotations

import io
import json

import pytest

from longjobs.sim.campaign import run_seed
from longjobs.sim.properties import Monitor, PropertyViolation
from longjobs.sim.workload import DEPLOY_CHANGES, draw

REFUSED_AS = {"stricter_schema": "InvalidParameters", "type_removed": "UnknownJobType", "smaller_bodies": "TooLarge"}
"""The DLQ reason of a body the deploy makes this receiver refuse."""


def _seeds_deploying(change: str, count: int) -> list[int]:
    seeds = (seed for seed in range(3_000) if (plan := draw(seed).deploy) is not None and plan.change == change)
    return [next(seeds) for _ in range(count)]


def _dead_letter_reasons(seed: int) -> list[str]:
    result = run_seed(seed)
    assert result.violation is None, (seed, result.violation)
    assert result.coverage[f"sim:deployed:{draw(seed).deploy.change}"] == 1  # type: ignore[union-attr]
    out = io.StringIO()
    result.trace.write(out)
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    return [str(e["reason"].get("ErrorType")) for e in events if e.get("event") == "dead_lettered"]


@pytest.mark.parametrize("change", DEPLOY_CHANGES)
def test_deploy_of_each_change_holds_every_property(change: str) -> None:
    """Each change, deployed while jobs run: every property holds, and some seed's messages meet it (a body
    the new receiver refuses goes to the DLQ with its reason, and with the attempts it had before)."""
    reasons = [reason for seed in _seeds_deploying(change, 4) for reason in _dead_letter_reasons(seed)]
    if change in REFUSED_AS:
        assert REFUSED_AS[change] in reasons, reasons
    else:
        assert "AttemptsExhausted" in reasons, reasons


def test_deploys_are_drawn_on_their_own_stream_and_fit_the_seed() -> None:
    """A change needs jobs it acts on: a stricter schema of the limited type, the EMR type removed."""
    for seed in range(200):
        workload = draw(seed)
        plan = workload.deploy
        if plan is None:
            continue
        types = {job.type for job in workload.jobs}
        needs = {"stricter_schema": "limited", "type_removed": "spark-emr", "smaller_bodies": "spark"}
        assert needs.get(plan.change) in types | {None}


def test_dlq_keeps_history_counts_the_attempts_a_copy_left_out() -> None:
    """A DLQ copy's `Attempts` may leave the oldest out (`{"omitted": n}`, SQS's size): they still count."""
    lease = json.dumps([{"execution": f"e{n}"} for n in range(3)])
    monitor = Monitor(limits={})
    monitor.started.update({"e0", "e1", "e2"})
    reason = {"ErrorType": {"StringValue": "InvalidParameters"}}
    kept = json.dumps([{"omitted": 2}, {"execution": "e2"}])
    monitor.dead_lettered_copy("j", {**reason, "Attempts": {"StringValue": kept}}, "d1", lease)
    with pytest.raises(PropertyViolation, match=r"dlq_keeps_history: .* carries 0 attempt\(s\); its lease records 3"):
        monitor.dead_lettered_copy("j", reason, "d2", lease)
    monitor.dead_lettered_copy("j", {}, "m1", lease)  # SQS's redrive moved the message itself: no reason, no copy
