"""Settings: ranges and lapse-by-construction combinations refused, naming the setting and the range."""

from __future__ import annotations

import pytest

from longjobs.engine.policies import build_policy
from longjobs.engine.policies.adaptive import floor_s as adaptive_floor_s
from longjobs.engine.policies.adaptive import lead_s as adaptive_lead_s
from longjobs.engine.settings import Settings, SettingsError


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


def test_settings_unknown_key_names_the_nearest_setting() -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.load({"extender_period": 2})
    assert str(raised.value) == "invalid settings: extender_period: no such setting (did you mean extender_period_s?)"


def test_settings_check_across_settings_reads_as_its_message() -> None:
    """A model-level check has no place: pydantic's empty location and its "Value error, " are left out."""
    with pytest.raises(SettingsError) as raised:
        Settings.load({"retry_base_s": 2, "retry_cap_s": 1})
    assert str(raised.value) == "invalid settings: retry_cap_s=1.0 must be >= retry_base_s=2.0"


def test_settings_threshold_default_vt_is_named_as_the_policys_default() -> None:
    """The threshold policy renews by 30 s when `visibility_timeout_s` is unset: a value the user never set,
    so the error says where it comes from and both fixes (on a short schedule a lower threshold fits)."""
    with pytest.raises(SettingsError) as raised:
        Settings.load({"policy": "threshold", "threshold_s": 40, "extender_period_s": 1})
    assert str(raised.value) == (
        "invalid settings: visibility_timeout_s=30 (the threshold policy's default, as visibility_timeout_s is "
        "unset) must be greater than threshold_s=40, or every renewal is due again at once; set "
        "visibility_timeout_s to 41 or more, or lower threshold_s below 30"
    )


def test_settings_range_error_states_the_valid_range() -> None:
    with pytest.raises(SettingsError, match=r"visibility_timeout_s=50000: Input should be less than or equal to 43200"):
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
            {"policy": "remaining", "visibility_timeout_s": 3, "heartbeat_s": 1, "extender_period_s": 1},
            r"visibility_timeout_s=3: the remaining policy renews .*smallest safe visibility_timeout_s: 6",
        ),
        (
            {"policy": "threshold", "visibility_timeout_s": 30, "threshold_s": 1, "heartbeat_s": 1},
            r"threshold_s=1 must be greater than extender_period_s \(60 s\).*smallest safe threshold_s: 61.6",
        ),
        (
            {"policy": "threshold", "visibility_timeout_s": 62, "threshold_s": 62, "heartbeat_s": 1},
            r"greater than threshold_s=62.*smallest safe visibility_timeout_s: 63",
        ),
        (
            {"policy": "adaptive", "adaptive_ceiling_s": 200},
            r"adaptive_ceiling_s=200 is outside 436\.\.43140.*smallest safe adaptive_ceiling_s: 436",
        ),
        ({"policy": "adaptive", "adaptive_ceiling_s": 43_190}, r"adaptive_ceiling_s=43190 is outside 436\.\.43140"),
        ({"policy": "adaptive", "pass_budget_s": 60}, r"pass_budget_s=60 must be below extender_period_s=60"),
        ({"retry_base_s": 2, "retry_cap_s": 1}, r"retry_cap_s=1.0 must be >= retry_base_s"),
        (
            {"receiver_timeout_s": 30, "reconcile_grace_s": 20},
            r"reconcile_grace_s=20 must be greater than receiver_timeout_s=30.*smallest safe reconcile_grace_s: 31",
        ),
        # a copy's claim is judged by its claimant's lease, which must outlive the claim's 15 minutes
        ({"closed_ttl_s": 600}, r"closed_ttl_s=600: Input should be greater than or equal to 3600"),
        (
            {"queue_retention_s": 3_600},
            r"queue_retention_s=3600 leaves a margin of 900 s .* less than max_renewal_s=43200.*"
            r"smallest queue_retention_s: 172800",
        ),
    ],
)
def test_settings_refuse_combinations_that_lapse_by_construction(values: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.load(values)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # seed 001 (VT 30, threshold 5, heartbeat 1) and seed 000 (VT 30) on the stack's 1-minute schedule
        (
            {"policy": "threshold", "visibility_timeout_s": 30, "threshold_s": 5, "heartbeat_s": 1},
            r"threshold_s=5 must be greater than .* = 61.5 s: one lost scheduled run",
        ),
        (
            {"policy": "remaining", "visibility_timeout_s": 30, "heartbeat_s": 1},
            r"extender_period_s=60 is too long for the remaining policy.*must be below 8.5 s",
        ),
    ],
)
def test_settings_refuse_seed_policies_that_lapse_when_one_scheduled_run_is_lost(
    values: dict[str, object], message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.load(values)


def test_settings_keep_seed_values_valid_on_a_sub_second_schedule() -> None:
    Settings.load(
        {
            "policy": "threshold",
            "visibility_timeout_s": 30,
            "threshold_s": 5,
            "heartbeat_s": 1,
            "extender_period_s": 0.5,
        }
    )
    Settings.load({"policy": "remaining", "visibility_timeout_s": 30, "heartbeat_s": 1, "extender_period_s": 0.5})


def test_settings_zero_max_renewal_disables_renewal_and_its_checks() -> None:
    settings = Settings.load({"policy": "threshold", "visibility_timeout_s": 1, "max_renewal_s": 0})
    assert not settings.renewal_enabled
    assert settings.renewal_s == 0


def test_settings_max_renewal_defaults_per_policy_and_never_passes_12_hours() -> None:
    assert Settings(policy="remaining", visibility_timeout_s=30, extender_period_s=1).effective_max_renewal_s == 300
    assert Settings(policy="threshold", threshold_s=62, visibility_timeout_s=300).effective_max_renewal_s == 43_200
    adaptive = Settings()
    assert adaptive.renewal_s == 43_200 - adaptive.cap_safety_s


def test_settings_adaptive_bounds_follow_the_schedule() -> None:
    settings = Settings(extender_period_s=60, min_remaining_life_s=0.5)
    assert settings.tick_s == 60
    # three lost runs in a row, the next a full period late, plus landing time
    assert adaptive_lead_s(settings) == 300.5
    # the floor adds the pass budget (a quarter of the period, at most 15 s) and two periods
    assert adaptive_floor_s(settings) == 436
    assert adaptive_lead_s(Settings(adaptive_lost_runs_survived=1)) == 180.5
    assert adaptive_floor_s(Settings(extender_period_s=1, adaptive_lost_runs_survived=1, adaptive_ceiling_s=6)) == 6


def test_settings_threshold_takes_seed_001_timeout_when_none_is_set() -> None:
    settings = Settings(policy="threshold", threshold_s=5, extender_period_s=1)
    assert settings.visibility_timeout_s is None
    assert build_policy(settings).initial_timeout_s() == 30, "seed 001's VT, not the queue's"
    with pytest.raises(SettingsError, match=r"visibility_timeout_s=30 \(the threshold policy's default, .*\) must "):
        Settings.load({"policy": "threshold", "threshold_s": 62})


def test_settings_from_env_reads_upper_case_names() -> None:
    settings = Settings.from_env(
        {"POLICY": "threshold", "VISIBILITY_TIMEOUT_S": "90", "THRESHOLD_S": "62", "TABLE_NAME": "leases", "X": "x"}
    )
    assert (settings.policy, settings.visibility_timeout_s, settings.table_name) == ("threshold", 90, "leases")


def test_settings_from_env_refuses_a_bad_value_naming_it() -> None:
    with pytest.raises(SettingsError, match="heartbeat_s"):
        Settings.from_env({"HEARTBEAT_S": "-2"})


def test_settings_queue_vt_is_validated_when_filled_in() -> None:
    settings = Settings(policy="remaining", extender_period_s=1)  # VT from the queue: not known yet
    with pytest.raises(ValueError, match="visibility_timeout_s is unset"):
        build_policy(settings)
    assert settings.with_visibility_timeout(30).visibility_timeout_s == 30
    with pytest.raises(SettingsError, match="visibility_timeout_s=1 must be greater"):
        settings.with_visibility_timeout(1)


QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"


def test_settings_fifo_needs_fifo_queues_and_a_standard_processor_refuses_them() -> None:
    fifo = Settings.load({"fifo": True, "queue_url": QUEUE_URL + ".fifo", "dlq_url": QUEUE_URL + "-dlq.fifo"})
    assert fifo.fifo and fifo.fifo_release_delay_s == 0, "a failed FIFO job is retried at once, in order"
    with pytest.raises(SettingsError, match=r"queue_url='.*/jobs' is a standard queue but fifo is true"):
        Settings.load({"fifo": True, "queue_url": QUEUE_URL})
    with pytest.raises(
        SettingsError, match=r"queue_url='.*/jobs.fifo' is a FIFO queue but fifo is false: set FIFO=true"
    ):
        Settings.load({"queue_url": QUEUE_URL + ".fifo"})
    with pytest.raises(SettingsError, match=r"dlq_url='.*-dlq' is a standard queue but fifo is true"):
        Settings.load({"fifo": True, "queue_url": QUEUE_URL + ".fifo", "dlq_url": QUEUE_URL + "-dlq"})
    assert Settings.from_env({"FIFO": "true", "FIFO_RELEASE_DELAY_S": "60"}).fifo_release_delay_s == 60
    with pytest.raises(SettingsError, match="fifo_release_delay_s"):
        Settings.load({"fifo": True, "fifo_release_delay_s": -1})


@pytest.mark.parametrize(
    ("retention_s", "resend_after_s"),
    [(14 * 86_400, 12 * 86_400), (8 * 86_400, 6 * 86_400), (172_800, 129_600)],
    ids=["14 days: two days' margin", "8 days: a quarter", "the shortest a 12 h job allows"],
)
def test_settings_resend_after_leaves_the_retention_margin(retention_s: int, resend_after_s: int) -> None:
    """A waiting message is sent again two days before its queue's retention runs out, or a quarter of
    the retention before when that is shorter."""
    assert Settings(queue_retention_s=retention_s).resend_after_s == resend_after_s


def test_settings_admission_pass_interval_defaults_to_every_fourth_extender_run() -> None:
    assert Settings().effective_admission_pass_interval_s == 240
    assert Settings(extender_period_s=1).effective_admission_pass_interval_s == 4  # offline: seconds
    assert Settings(admission_pass_interval_s=60).effective_admission_pass_interval_s == 60
    assert Settings(extender_period_s=120).effective_admission_pass_interval_s == 240, "at least every 4 minutes"
    slow = Settings(extender_period_s=300, adaptive_ceiling_s=3_600)
    assert slow.effective_admission_pass_interval_s == 300, "at most every run"


def test_settings_merged_name_is_refused_with_the_one_to_set() -> None:
    """`max_receive_count` only gave `max_attempts` its default: merged into it, the old name says so."""
    with pytest.raises(SettingsError, match="max_receive_count is merged into max_attempts: set max_attempts"):
        Settings.load({"max_receive_count": 7})
    assert Settings().max_attempts == 5


def test_settings_copy_derives_its_values_from_its_own_settings() -> None:
    """pydantic's `model_copy` copies `cached_property` values as they are (pydantic issue 11428); a copy
    that changes `max_renewal_s` or `queue_retention_s` must not keep the original's renewal or resend."""
    settings = Settings()
    assert (settings.renewal_s, settings.renewal_enabled, settings.resend_after_s) == (43_140, True, 1_036_800)
    shorter = settings.model_copy(update={"max_renewal_s": 0, "queue_retention_s": 7_200})
    assert (shorter.renewal_s, shorter.renewal_enabled, shorter.effective_max_renewal_s) == (0, False, 0)
    assert shorter.resend_after_s == 7_200 - shorter.retention_margin_s == 5_400
    assert settings.model_copy().renewal_s == 43_140


def test_settings_copy_of_a_subclass_derives_its_values_from_its_own_settings() -> None:
    """The derived values are the base class's: a subclass's copy forgets them too."""

    class Tuned(Settings):
        pass

    settings = Tuned(max_renewal_s=600)
    assert settings.renewal_s == 600
    assert settings.model_copy(update={"max_renewal_s": 0}).renewal_s == 0
