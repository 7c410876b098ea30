"""The focus on operations few seeds call (`RARE_OPERATIONS`, issue 21): every drawn plan fails them at the
focus rate, with every kind, on a stream of its own, so the other calls fail as they did before."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

from longjobs.construct.workflow import PATIENT_ATTEMPTS, PATIENT_MAX_DELAY
from longjobs.sim.aws.sqs import FakeSqs
from longjobs.sim.aws.stepfunctions import FakeStepFunctions
from longjobs.sim.emr import EmrServerless
from longjobs.sim.faults import (
    FOCUS_MAX_STREAK,
    OUTAGE_S,
    OUTAGES,
    RARE_FUNCTION_OPERATIONS,
    RARE_OPERATIONS,
    UNANSWERED,
    CallFault,
    CallRule,
    FaultPlan,
    Outage,
)

START = 1_000.0
QUIET_AFTER_S = 3_600.0


def _plan(seed: int) -> FaultPlan:
    return FaultPlan.draw(seed, start=START, quiet_after_s=QUIET_AFTER_S)


def _calm_seed() -> int:
    """A seed whose plan has no base rate and no focus share: only the rare operations' focus fails."""
    return next(s for s in range(1_000) if (p := _plan(s)).rate == 0 and p.focus_share == 0)


def test_faults_rare_operations_are_operations_of_the_simulated_services() -> None:
    """A renamed operation would leave its name here focusing on nothing."""
    for operation in RARE_OPERATIONS | RARE_FUNCTION_OPERATIONS:
        services = (FakeSqs, FakeStepFunctions, EmrServerless)
        assert any(callable(getattr(service, operation, None)) for service in services)


def test_faults_a_rare_operation_is_focused_in_a_seed_without_a_focus_share() -> None:
    plan = _plan(_calm_seed())
    faults = [plan.at_call(START + i, "extender", "delete_message_batch") for i in range(400)]
    kinds = Counter(fault for fault in faults if fault is not None)
    assert set(kinds) == set(CallFault)  # every kind, crashes included (the extender is a function)
    assert 120 < sum(kinds.values()) < 280  # about half the attempts
    streak = longest = 0
    for fault in faults:
        streak = streak + 1 if fault is not None else 0
        longest = max(longest, streak)
    assert longest <= FOCUS_MAX_STREAK
    assert all(plan.at_call(START + i, "extender", "query") is None for i in range(400))  # no base rate
    assert plan.at_call(START + QUIET_AFTER_S, "extender", "delete_message_batch") is None  # quiet


def test_faults_the_workflows_call_of_a_rare_operation_never_crashes() -> None:
    plan = _plan(_calm_seed())
    faults = {plan.at_call(START + i, "workflow", "stop_execution") for i in range(400)}
    assert CallFault.SERVER_ERROR in faults
    assert not faults & {CallFault.CRASH_BEFORE, CallFault.CRASH_AFTER}


def test_faults_a_functions_call_of_a_rare_function_operation_is_focused_and_the_workflows_is_not() -> None:
    plan = _plan(_calm_seed())
    assert all(plan.at_call(START + i, "workflow", "delete_message") is None for i in range(100))
    faults = Counter(plan.at_call(START + 100 + i, "extender", "delete_message") for i in range(400))
    assert set(faults) - {None} == set(CallFault)  # the crashes a function's call alone can meet included


def test_faults_the_rare_focus_leaves_the_other_streams_as_they_were() -> None:
    """Where the rare stream gives no fault, the call's base-rate draw is the one it was before: the
    seed's other calls fail exactly as without the rare focus."""
    compared = 0
    for seed in range(200):
        plan, before = _plan(seed), replace(_plan(seed), rare_rng=None)
        for i in range(300):
            operation = "delete_message_batch" if i % 7 == 3 else "query"
            base = plan.rng.getstate()
            got = plan.at_call(START + i, "extender", operation)
            if got is not None and plan.rng.getstate() == base and not plan.focused.get(operation):
                break  # the rare focus struck (no base-rate draw): from here the seed is one it changes
            assert got == before.at_call(START + i, "extender", operation), (seed, i)
            compared += operation in RARE_OPERATIONS
    assert compared > 500  # rare calls that drew no fault, each followed by calls compared


def test_faults_a_written_scenario_has_no_rare_focus() -> None:
    rules = [CallRule(CallFault.THROTTLED, frozenset({"watcher"}))]
    plan = FaultPlan.scenario(rules=rules, world={}, within_design=True, seed=1)
    assert all(plan.at_call(START + i, "extender", "delete_message_batch") is None for i in range(100))


def test_faults_an_outage_fails_the_workflows_success_path_calls_in_its_window_and_nothing_else() -> None:
    seeds = [seed for seed in range(1_000) if _plan(seed).outage is not None]
    assert 20 < len(seeds) < 90  # OUTAGE_SHARE of the seeds
    shapes = {tuple(sorted((_plan(seed).outage or Outage("", {}, 0, 0)).faults)) for seed in seeds}
    assert shapes == {tuple(sorted(operations)) for _, operations in OUTAGES}, "every shape is drawn"
    for seed in seeds[:10]:
        plan = replace(_plan(seed), rate=0.0, focus_share=0.0, rare_rng=None)
        armed = plan.outage
        assert armed is not None and armed.at_success in range(1, 5)
        assert armed.last_start + OUTAGE_S == START + QUIET_AFTER_S, "it ends before the quiet period"
        success = START + 30.0
        assert {plan.at_call(success + i, "workflow", op) for op in armed.faults for i in range(60)} == {None}
        for _ in range(armed.at_success - 1):  # the successes before its own begin nothing
            plan.job_succeeded(success - 10.0)
        assert plan.outage == armed
        plan.job_succeeded(success)
        outage = plan.outage
        assert outage is not None and (outage.start, outage.until) == (success, success + OUTAGE_S)
        plan.job_succeeded(success + 10.0)  # begun once
        assert plan.outage == outage
        for operation, fault in outage.faults.items():
            inside = {plan.at_call(outage.start + i, "workflow", operation) for i in range(int(OUTAGE_S))}
            assert inside == {fault}
            assert plan.at_call(outage.until, "workflow", operation) is None
            assert plan.at_call(outage.start, "receiver", operation) is None
        assert plan.at_call(outage.start, "workflow", "start_execution") is None
        unanswered = {fault for fault in outage.faults.values() if fault is not CallFault.ANSWER_LOST}
        assert len(unanswered) == 1 and unanswered <= set(UNANSWERED), "one drawn kind that takes no effect"


def test_faults_an_outage_whose_success_comes_too_late_to_end_before_the_quiet_period_never_begins() -> None:
    seed = next(seed for seed in range(1_000) if _plan(seed).outage is not None)
    plan = _plan(seed)
    armed = plan.outage
    assert armed is not None
    for _ in range(armed.at_success):
        plan.job_succeeded(armed.last_start + 1.0)
    assert plan.outage == armed and armed.start == math.inf


def test_faults_an_outage_outlasts_the_workflows_patient_retries() -> None:
    """Else the Catches after the success path's close and read (`MarkSucceeded->DeleteMessage`,
    `ReadLease->ReleaseJobLock`) are never reached."""
    longest = sum(min(2.0**retry, PATIENT_MAX_DELAY.to_seconds()) for retry in range(PATIENT_ATTEMPTS - 1))
    assert longest + 60 < OUTAGE_S
