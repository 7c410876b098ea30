"""One scheduled invocation: a single pass for adaptive, sub-minute ticks bounded by time for the others."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from longjobs.engine.extender.invocation import run_invocation
from longjobs.engine.settings import Settings
from longjobs.sim.clock import FakeClock
from tests.functional.conftest import Harness


def remaining_from(clock: FakeClock, budget_s: float) -> Callable[[], int]:
    """A Lambda context's get_remaining_time_in_millis, on the fake clock."""
    deadline = clock.now() + budget_s
    return lambda: int((deadline - clock.now()) * 1000)


def test_invocation_runs_one_pass_for_adaptive(harness: Harness) -> None:
    clock = FakeClock(time.time())
    remaining = remaining_from(clock, 60)
    report = run_invocation(harness.extender(Settings(), clock), remaining_ms=remaining)
    assert report.ticks == 1 and clock.now() - time.time() < 60


def test_invocation_ticks_every_heartbeat_until_the_next_scheduled_run(harness: Harness) -> None:
    settings = Settings(
        policy="threshold", visibility_timeout_s=90, threshold_s=62, heartbeat_s=1, extender_period_s=60
    )
    clock = FakeClock(time.time())
    start = clock.now()
    remaining = remaining_from(clock, 900)  # a long Lambda timeout: the period bounds the loop
    report = run_invocation(harness.extender(settings, clock), remaining_ms=remaining)
    assert report.ticks == 60 and 59 <= clock.now() - start < 60


def test_invocation_stops_before_the_lambda_timeout(harness: Harness) -> None:
    settings = Settings(
        policy="threshold", visibility_timeout_s=90, threshold_s=62, heartbeat_s=1, invocation_margin_s=2
    )
    clock = FakeClock(time.time())
    start = clock.now()
    remaining = remaining_from(clock, 10)
    report = run_invocation(harness.extender(settings, clock), remaining_ms=remaining)
    assert report.ticks == 8 and clock.now() - start < 8


def test_invocation_renews_a_lease_that_falls_due_between_ticks(harness: Harness) -> None:
    settings = Settings(policy="threshold", visibility_timeout_s=90, threshold_s=70, heartbeat_s=1)
    clock = FakeClock(time.time())
    harness.send()
    [lease] = harness.receive_and_lease(settings, clock)
    remaining = remaining_from(clock, 60)
    report = run_invocation(harness.extender(settings, clock), remaining_ms=remaining)
    # due at +20 (70 s threshold of a 90 s VT) and again 20 s after that renewal; the next at +60 is too late
    assert report.renewal.renewed == 2 and report.renewal.lapses == 0
    stored = harness.store(settings).get(lease.message_id)
    assert stored is not None and stored.renewal_count == 2


def test_invocation_admission_pass_stops_beginning_work_at_the_next_tick(harness: Harness) -> None:
    """Protocol review, defect 4: admission ran unbounded inside the first tick, so with a short tick a
    long pass held back the renewals due meanwhile. It is given the next tick as its deadline, and a
    pass that takes longer leaves the second tick's renewal on time."""
    settings = Settings(policy="threshold", visibility_timeout_s=90, threshold_s=70, heartbeat_s=1)
    clock = FakeClock(time.time())
    start = clock.now()
    harness.send()
    [lease] = harness.receive_and_lease(settings, clock)
    deadlines: list[float] = []

    def slow_admission(deadline: float) -> list[object]:
        deadlines.append(deadline)
        clock.advance(max(0.0, deadline - clock.now()))  # works right up to its deadline, no further
        return []

    extender = replace(harness.extender(settings, clock), admit=slow_admission)
    report = run_invocation(extender, remaining_ms=remaining_from(clock, 60))

    assert deadlines == [start + settings.tick_s]
    assert report.renewal.renewed == 2 and report.renewal.lapses == 0
    stored = harness.store(settings).get(lease.message_id)
    assert stored is not None and stored.renewal_count == 2


def test_invocation_admission_pass_runs_once_per_interval_and_at_the_next_run_after_a_failed_one(
    harness: Harness,
) -> None:
    """The watcher admits on every end; the extender's pass is the backstop and the measure, once per
    `admission_pass_interval_s` (its reads on every run were 2 of the backfill's 22 requests per job). A
    pass that raised or ran out of time goes on at the next run."""
    settings = Settings(admission_pass_interval_s=240)
    clock = FakeClock(time.time())
    passes: list[float] = []
    outcome = {"raise": False, "overrun": False}

    def admission(deadline: float) -> list[object]:
        passes.append(clock.now())
        if outcome["raise"]:
            raise RuntimeError("the slots could not be read")
        if outcome["overrun"]:
            clock.advance(max(0.0, deadline - clock.now()))
        return []

    extender = replace(harness.extender(settings, clock), admit=admission)

    def runs(count: int) -> int:
        before = len(passes)
        for _ in range(count):
            run_invocation(extender, remaining_ms=remaining_from(clock, 60))
            clock.advance(60 - (clock.now() - start) % 60)
        return len(passes) - before

    start = clock.now()
    assert runs(8) == 2  # at 0 s and 240 s
    outcome["raise"] = True
    assert runs(2) == 2  # failed: tried again at the next run
    outcome.update({"raise": False, "overrun": True})
    assert runs(2) == 2  # ran out of time: goes on at the next run
    outcome["overrun"] = False
    assert runs(5) == 2  # whole again: then once per interval


def test_invocation_admission_pass_every_fourth_run_of_a_schedule_that_lands_a_little_early_or_late(
    harness: Harness,
) -> None:
    """A review's repro: with the next pass due a whole interval after the invocation's start, a run that
    began a fraction of a second early was skipped, so the pass came every fifth run (300 s) and a
    5-minute period of the admission metrics could go without a datapoint."""
    settings = Settings()
    start = time.time()
    clock = FakeClock(start)
    passes: list[float] = []

    def admission(deadline: float) -> list[object]:
        passes.append(clock.now() - start)
        return []

    extender = replace(harness.extender(settings, clock), admit=admission)
    jitter = [0.0, 0.3, -0.2, 0.1, -0.4, 0.2, -0.1]  # EventBridge's runs land within half a second
    for run in range(60):
        clock.advance(max(0.0, start + 60 * run + jitter[run % len(jitter)] - clock.now()))
        run_invocation(extender, remaining_ms=remaining_from(clock, 60))

    gaps = [later - earlier for earlier, later in itertools.pairwise(passes)]
    assert all(239 < gap < 241 for gap in gaps), f"a pass every fourth run: gaps {sorted(set(gaps))}"
    assert {int(at // 300) for at in passes} == set(range(12)), "a pass in every 5-minute period of the hour"


def test_invocation_admission_pass_of_a_type_that_failed_goes_on_at_the_next_run(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A review's repro: `admit_all` logs a type whose pass raised and goes on with the others, so the
    extender took the pass as whole and the type waited a whole interval. The type is reported `failed`
    (and not published), and the pass goes on at the next run."""
    from longjobs.engine.admission import admit as admission
    from longjobs.engine.receiver.service import receive
    from tests.sim.test_retention import bench

    b = bench(limit=1)
    clock = FakeClock(time.time())
    b.receiver.clock = clock
    calls: list[float] = []
    failing = {"on": True}

    def admit_type(receiver: Any, job_type: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(clock.now())
        if failing["on"]:
            raise RuntimeError("the slots could not be read (throttled)")
        return admission.AdmitReport(job_type)

    monkeypatch.setattr(admission, "admit_type", admit_type)
    settings = Settings(admission_pass_interval_s=240)
    extender = replace(harness.extender(settings, clock), admit=admission.extender_pass(b.receiver, handle=receive))
    start = clock.now()
    [report] = run_invocation(extender, remaining_ms=remaining_from(clock, 60)).admission
    assert report.failed
    failing["on"] = False
    clock.advance(60 - (clock.now() - start) % 60)
    [report] = run_invocation(extender, remaining_ms=remaining_from(clock, 60)).admission
    assert not report.failed and len(calls) == 2, "tried again at the next run"
