"""The renewal-cost simulation: a small run of each scenario, checked for what must hold structurally."""

from __future__ import annotations

import json

import pytest

from benchmarks.renewal_cost import (
    POLICY_SETTINGS,
    PolicyResult,
    SimParams,
    invocation_passes,
    main,
    run_benchmark,
)

JOBS = 200


@pytest.fixture(scope="module")
def punctual() -> dict[str, PolicyResult]:
    """Every scheduled run on time, none lost."""
    return run_benchmark(SimParams(jobs=JOBS, lateness=0.0, loss_rate=0.0))


def test_renewal_cost_an_invocation_ticks_until_its_deadline() -> None:
    assert invocation_passes(10.0, POLICY_SETTINGS["remaining"]) == [10.0 + i for i in range(60)]
    assert invocation_passes(10.0, POLICY_SETTINGS["adaptive"]) == [10.0]


def test_renewal_cost_no_policy_lapses_when_the_extender_is_punctual(punctual: dict[str, PolicyResult]) -> None:
    assert {name: result.lapses for name, result in punctual.items()} == {name: 0 for name in POLICY_SETTINGS}
    assert all(result.capped == 0 for result in punctual.values())


def test_renewal_cost_seed_policies_renew_every_few_seconds(punctual: dict[str, PolicyResult]) -> None:
    # remaining renews 10 s before a 40 s chunk ends (every 30 s); threshold 5 s before a 30 s VT (every 25 s).
    assert 100 <= punctual["remaining"].unbatched_requests_per_message_hour <= 130
    assert 130 <= punctual["threshold"].unbatched_requests_per_message_hour <= 150
    assert punctual["adaptive"].unbatched_requests_per_message_hour < 10


def test_batching_and_writes_are_counted_consistently(punctual: dict[str, PolicyResult]) -> None:
    for result in punctual.values():
        assert result.renewals / 10 <= result.batch_calls <= result.renewals
        assert result.requests_per_message_hour <= result.unbatched_requests_per_message_hour
        # create + close per job on top of one write per renewal
        extra_writes = (
            result.writes_per_message_hour - result.unbatched_requests_per_message_hour
        ) * result.message_hours
        assert extra_writes == pytest.approx(2 * JOBS)


def test_renewal_cost_a_dead_job_stays_hidden_at_most_one_chunk(punctual: dict[str, PolicyResult]) -> None:
    assert punctual["remaining"].dead_job_hidden_s_max <= 40
    assert punctual["threshold"].dead_job_hidden_s_max <= 30
    assert punctual["adaptive"].dead_job_hidden_s_max <= POLICY_SETTINGS["adaptive"].adaptive_ceiling_s
    assert all(0 <= result.dead_job_hidden_s_p50 <= result.dead_job_hidden_s_max for result in punctual.values())


def test_adaptive_survives_runs_late_by_a_full_period() -> None:
    results = run_benchmark(SimParams(jobs=JOBS, lateness=1.0, loss_rate=0.0))
    assert results["adaptive"].max_pass_gap_s > 100  # the lateness did open long gaps
    assert results["adaptive"].lapses == 0


def test_renewal_cost_lost_runs_make_the_remaining_policy_lapse() -> None:
    results = run_benchmark(SimParams(jobs=JOBS, lateness=0.0, loss_rate=0.05))
    assert results["remaining"].lost_runs > 0
    assert results["remaining"].lapses > 0


def test_renewal_cost_main_prints_one_json_object_per_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--jobs", str(JOBS), "--json"]) == 0
    output = json.loads(capsys.readouterr().out)
    assert set(output) == set(POLICY_SETTINGS)
    expected = {
        "requests_per_message_hour",
        "unbatched_requests_per_message_hour",
        "writes_per_message_hour",
        "lapses",
        "dead_job_hidden_s_max",
        "dead_job_hidden_s_p50",
        "capped",
    }
    assert all(expected <= set(measures) for measures in output.values())
