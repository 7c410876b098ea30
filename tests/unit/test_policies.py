"""Policies on a fake clock: the seeds' own numbers and timelines, and adaptive's guarantees."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from longjobs.engine.policies import AdaptivePolicy, RemainingTimePolicy, RenewalPolicy, ThresholdPolicy, build_policy
from longjobs.engine.policies.adaptive import floor_s
from longjobs.engine.policies.remaining_time import extension, renew_after
from longjobs.engine.settings import Settings, SettingsError
from longjobs.sim.clock import FakeClock

T0 = 1_000.0


@dataclass(frozen=True)
class Timing:
    received_at: float
    visible_until: float
    last_renewed_at: float


def received(policy: RenewalPolicy, at: float = T0) -> Timing:
    return Timing(at, at + policy.initial_timeout_s(), at)


def drive(
    policy: RenewalPolicy, settings: Settings, *, until: float, clock: FakeClock, tick: float | None = None
) -> tuple[list[tuple[float, int]], Timing]:
    """Look at one lease every tick, as the extender does; returns (time, timeout asked) per renewal."""
    lease = received(policy, clock.now())
    renew_until = lease.received_at + settings.renewal_s
    renewals: list[tuple[float, int]] = []
    while clock.now() < until:
        now = clock.now()
        if now < renew_until:
            decision = policy.decide(now, lease)
            if decision.renew:
                renewals.append((now - T0, decision.visibility_timeout_s))
                lease = replace(lease, visible_until=now + decision.visibility_timeout_s, last_renewed_at=now)
        clock.advance(tick or settings.tick_s)
    return renewals, lease


@pytest.mark.parametrize(("remaining", "after"), [(0, 0), (1, 0.5), (20, 10), (30, 20), (160, 150)])
def test_remaining_time_renew_after_matches_seed_000(remaining: float, after: float) -> None:
    assert renew_after(remaining) == after


@pytest.mark.parametrize(("remaining", "vt", "asked"), [(10, 30, 40), (-2, 30, 32), (0, 30, 30), (0.2, 30, 31)])
def test_remaining_time_extension_matches_seed_000(remaining: float, vt: int, asked: int) -> None:
    assert extension(remaining, vt) == asked


def test_remaining_time_reproduces_seed_000_timeline() -> None:
    """VT 30 s, max 5 min: renew at T+20, 50, 80 ... each by 40 s; stop at T+300; visible again at T+330."""
    settings = Settings(policy="remaining", visibility_timeout_s=30, heartbeat_s=1, extender_period_s=1)
    policy = build_policy(settings)
    assert isinstance(policy, RemainingTimePolicy)
    clock = FakeClock(T0)

    renewals, lease = drive(policy, settings, until=T0 + 400, clock=clock)

    assert renewals == [(20.0 + 30 * k, 40) for k in range(10)]  # T+20 ... T+290, then the 5 min cap
    assert lease.visible_until - T0 == 330  # the message reappears after the last chunk


def test_remaining_time_renews_at_once_when_under_400_ms_or_late() -> None:
    policy = RemainingTimePolicy(visibility_timeout_s=30)
    fresh = Timing(T0, T0 + 0.3, T0)  # a 300 ms lease: renew-after would be 0.15 s, but under 400 ms it is now
    assert policy.decide(T0, fresh).renew
    late = Timing(T0, T0 + 30, T0)
    decision = policy.decide(T0 + 32, late)  # 2 s past visible
    assert decision.renew and decision.visibility_timeout_s == 32


def test_threshold_reproduces_seed_001_45_second_handler() -> None:
    """VT 30, threshold 5, heartbeat 1: nothing until T+25, renew to T+55, nothing to T+45 (done)."""
    settings = Settings(policy="threshold", visibility_timeout_s=30, threshold_s=5, heartbeat_s=1, extender_period_s=1)
    policy = build_policy(settings)
    assert isinstance(policy, ThresholdPolicy)
    clock = FakeClock(T0)

    renewals, lease = drive(policy, settings, until=T0 + 45, clock=clock)

    assert renewals == [(25.0, 30)]
    assert lease.visible_until == T0 + 55


def test_threshold_renew_at_is_threshold_before_visible() -> None:
    policy = ThresholdPolicy(visibility_timeout_s=30, threshold_s=5)
    assert policy.renew_at(Timing(T0, T0 + 30, T0)) == T0 + 25
    assert not policy.decide(T0 + 24.9, Timing(T0, T0 + 30, T0)).renew


def adaptive(**overrides: object) -> tuple[AdaptivePolicy, Settings]:
    settings = Settings.load({"policy": "adaptive", **overrides})
    policy = build_policy(settings)
    assert isinstance(policy, AdaptivePolicy)
    return policy, settings


def test_adaptive_chunk_grows_with_age_between_floor_and_ceiling() -> None:
    policy, settings = adaptive()
    assert policy.initial_timeout_s() == floor_s(settings) == 436
    assert policy.chunk_s(0) == 436
    assert policy.chunk_s(450) == 450
    assert policy.chunk_s(5 * 3600) == 900  # the default ceiling: 15 min


def test_adaptive_ceiling_is_configurable() -> None:
    policy, _ = adaptive(adaptive_ceiling_s=3600)
    assert policy.chunk_s(10 * 3600) == 3600


def test_adaptive_renews_far_less_often_as_the_job_ages() -> None:
    policy, settings = adaptive()
    clock = FakeClock(T0)

    renewals, _ = drive(policy, settings, until=T0 + 6 * 3600, clock=clock)

    first_hour = [t for t, _ in renewals if t < 3600]
    last_hour = [t for t, _ in renewals if t >= 5 * 3600]
    assert len(first_hour) > len(last_hour) >= 4
    assert len(renewals) / 6 < 7  # about six an hour at the ceiling (900 s chunks renewed 315 s early), not 120


@pytest.mark.parametrize("age_s", [0, 400, 3 * 3600])
def test_adaptive_survives_lost_runs_and_the_next_a_full_period_late(age_s: float) -> None:
    """Worst case: a run just misses the due time; the next runs are lost; the one after is a period late.
    That late run still finds the lease `horizon + min_remaining_life` before visible: the whole pass
    (however many leases it renews) has its pass budget before any of them lapses."""
    policy, settings = adaptive()
    period = settings.extender_period_s
    lost = settings.adaptive_lost_runs_survived
    budget = policy.horizon_s
    assert budget == 15, "a quarter of the 1-minute period, at most 15 s"
    start = T0 + age_s
    lease = Timing(T0, start + 1, start - 600)
    # The first run that sees the lease due renews it.
    run = policy.renew_at(lease) - budget
    decision = policy.decide(run, lease)
    assert decision.renew
    renewed = replace(lease, visible_until=run + decision.visibility_timeout_s, last_renewed_at=run)
    # A run a moment before the renewed lease falls due does not renew it: then `lost` runs are lost
    # and the one after is late by a full period.
    not_yet_due = policy.renew_at(renewed) - budget - 0.001
    assert not policy.decide(not_yet_due, renewed).renew
    late_run = not_yet_due + (lost + 2) * period
    assert policy.decide(late_run, renewed).renew
    assert renewed.visible_until - late_run >= budget + settings.min_remaining_life_s


def looks(settings: Settings, *, runs: int, lost: int) -> list[float]:
    """When the extender looks at leases: every tick inside each scheduled invocation, one invocation lost."""
    tick, period = settings.tick_s, settings.extender_period_s
    per_run = math.ceil(round(period / tick, 6))
    return [k * period + j * tick for k in range(runs) if k != lost for j in range(per_run)]


def worst_margin(settings: Settings, *, received: float, lost: int) -> float:
    """The smallest time left before visible at any look, for one lease received at `received`."""
    policy = build_policy(settings)
    lease = Timing(received, received + policy.initial_timeout_s(), received)
    margin = math.inf
    for now in looks(settings, runs=lost + 40, lost=lost):
        if now < received:
            continue
        margin = min(margin, lease.visible_until - now)
        decision = policy.decide(now, lease)
        if decision.renew:
            lease = replace(lease, visible_until=now + decision.visibility_timeout_s, last_renewed_at=now)
    return margin


@settings(max_examples=300, deadline=None)
@given(
    policy=st.sampled_from(["threshold", "remaining"]),
    period=st.sampled_from([0.5, 1.0, 2.0, 3.0, 5.0, 60.0]),
    heartbeat=st.sampled_from([0.25, 0.5, 1.0]),
    vt=st.integers(min_value=1, max_value=140),
    threshold=st.floats(min_value=0.5, max_value=70, allow_nan=False).map(lambda x: round(x, 1)),
    life=st.sampled_from([0.0, 0.5, 1.0]),
    received=st.floats(min_value=0, max_value=10, allow_nan=False),
    lost=st.integers(min_value=1, max_value=6),
)
def test_policies_fixed_policies_the_settings_accept_never_lapse_when_one_scheduled_run_is_lost(
    policy: str, period: float, heartbeat: float, vt: int, threshold: float, life: float, received: float, lost: int
) -> None:
    values = {
        "policy": policy,
        "extender_period_s": period,
        "heartbeat_s": heartbeat,
        "visibility_timeout_s": vt,
        "threshold_s": threshold,
        "min_remaining_life_s": life,
        "max_renewal_s": 43_200,
    }
    try:
        accepted = Settings.load(values)
    except SettingsError:
        return  # refused at start-up: it never runs
    assert worst_margin(accepted, received=received * period, lost=lost) >= life


def test_adaptive_is_not_due_at_the_next_run_after_a_renewal() -> None:
    policy, settings = adaptive()
    lease = received(policy)
    assert not policy.decide(T0 + settings.extender_period_s, lease).renew
