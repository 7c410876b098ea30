"""Settings: ranges and lapse-by-construction combinations refused, naming the setting and the range."""

from __future__ import annotations

import pytest

from functions.policies import build_policy
from functions.settings import Settings, SettingsError


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"visibility_timeout_s": -1}, "visibility_timeout_s"),
        ({"visibility_timeout_s": 43_201}, "visibility_timeout_s"),
        ({"max_renewal_s": -5}, "max_renewal_s"),
        ({"max_renewal_s": 43_201}, "max_renewal_s"),
        ({"heartbeat_s": 0}, "heartbeat_s"),
        ({"heartbeat_s": -1}, "heartbeat_s"),
        ({"extender_period_s": 0}, "extender_period_s"),
        ({"adaptive_lost_runs_survived": 0}, "adaptive_lost_runs_survived"),
        ({"policy": "sometimes"}, "policy"),
        ({"visibility_timeout": 30}, "visibility_timeout"),  # a misspelt key is not ignored
    ],
)
def test_settings_out_of_range_names_the_setting(values: dict[str, object], named: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.load(values)
    assert named in str(raised.value)


def test_settings_range_error_states_the_valid_range() -> None:
    with pytest.raises(SettingsError, match=r"visibility_timeout_s: Input should be less than or equal to 43200"):
        Settings.load({"visibility_timeout_s": 50_000})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # seed 004: VT must exceed tick + minimal remaining life
        (
            {"policy": "threshold", "visibility_timeout_s": 1, "heartbeat_s": 1},
            r"visibility_timeout_s=1 must be greater",
        ),
        (
            {"policy": "remaining", "visibility_timeout_s": 3, "heartbeat_s": 1, "min_remaining_life_s": 0.5},
            r"when the remaining policy renews",
        ),
        ({"policy": "threshold", "visibility_timeout_s": 30, "threshold_s": 1, "heartbeat_s": 1}, r"threshold_s=1"),
        ({"policy": "threshold", "visibility_timeout_s": 5, "threshold_s": 5}, r"greater than threshold_s=5"),
        ({"policy": "adaptive", "adaptive_ceiling_s": 200}, r"adaptive_ceiling_s=200 is below 421 s.*valid range"),
        ({"policy": "adaptive", "adaptive_ceiling_s": 43_190}, r"adaptive_ceiling_s=43190 exceeds the 12 h limit"),
        ({"retry_base_s": 2, "retry_cap_s": 1}, r"retry_cap_s=1.0 must be >= retry_base_s"),
    ],
)
def test_settings_refuse_combinations_that_lapse_by_construction(values: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.load(values)


def test_settings_zero_max_renewal_disables_renewal_and_its_checks() -> None:
    settings = Settings.load({"policy": "threshold", "visibility_timeout_s": 1, "max_renewal_s": 0})
    assert not settings.renewal_enabled
    assert settings.renew_until(1000.0) == 1000.0


def test_settings_max_renewal_defaults_per_policy_and_never_passes_12_hours() -> None:
    assert Settings(policy="remaining", visibility_timeout_s=30).effective_max_renewal_s == 300
    assert Settings(policy="threshold", visibility_timeout_s=30).effective_max_renewal_s == 43_200
    adaptive = Settings()
    assert adaptive.renew_until(0.0) == 43_200 - adaptive.cap_safety_s


def test_settings_adaptive_bounds_follow_the_schedule() -> None:
    settings = Settings(extender_period_s=60, min_remaining_life_s=0.5)
    assert settings.tick_s == 60
    # three lost runs in a row, the next a full period late, plus landing time
    assert settings.adaptive_lead_s == 300.5
    assert settings.adaptive_floor_s == 421
    assert Settings(adaptive_lost_runs_survived=1).adaptive_lead_s == 180.5


def test_settings_from_env_reads_upper_case_names() -> None:
    settings = Settings.from_env(
        {"POLICY": "threshold", "VISIBILITY_TIMEOUT_S": "45", "TABLE_NAME": "leases", "UNRELATED": "x"}
    )
    assert (settings.policy, settings.visibility_timeout_s, settings.table_name) == ("threshold", 45, "leases")


def test_settings_from_env_refuses_a_bad_value_naming_it() -> None:
    with pytest.raises(SettingsError, match="heartbeat_s"):
        Settings.from_env({"HEARTBEAT_S": "-2"})


def test_settings_queue_vt_is_validated_when_filled_in() -> None:
    settings = Settings(policy="remaining")  # VT from the queue: not known yet
    with pytest.raises(SettingsError, match="visibility_timeout_s is unset"):
        build_policy(settings)
    assert settings.with_visibility_timeout(30).visibility_timeout_s == 30
    with pytest.raises(SettingsError, match="visibility_timeout_s=1 must be greater"):
        settings.with_visibility_timeout(1)
