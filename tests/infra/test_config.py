"""CDK context settings: defaults, and every bad value refused with a message naming its key."""

from __future__ import annotations

import re
import tomllib

import aws_cdk as cdk
import pytest

import app
from longjobs.construct.config import ConfigError, context_keys, load_config, make_config
from longjobs.construct.constants import POWERTOOLS_LAYER_PARAMETER, POWERTOOLS_VERSION
from longjobs.engine.jobs import load_catalog
from longjobs.engine.jobs.builtin import MAX_WAIT_S, SPARK
from tests import REPO_ROOT


def test_config_defaults_without_context() -> None:
    config = load_config({})
    assert config.infra.stage == "dev"
    assert config.infra.table_deletion_protection is False
    assert config.infra.queue_visibility_timeout_s >= config.infra.receiver_timeout_s
    assert config.engine.policy == "adaptive"
    assert config.engine.max_attempts == 5
    spark = load_catalog(include_builtins=False, job_types=[SPARK])
    assert config.infra.oldest_message_alarm_threshold_s(spark) == 360 * 60 + 3600, "a Glue run plus an hour"
    assert config.infra.oldest_message_alarm_threshold_s(load_catalog()) == MAX_WAIT_S + 3600, "a wait job's longest"


def test_config_deletion_protection_defaults_on_for_prod_only() -> None:
    assert load_config({"stage": "prod"}).infra.table_deletion_protection is True
    assert load_config({"stage": "prod", "deletion_protection": "false"}).infra.table_deletion_protection is False
    assert load_config({"stage": "qa", "deletion_protection": "true"}).infra.table_deletion_protection is True


def test_config_reads_command_line_strings_as_typed_values() -> None:
    config = load_config({"max_attempts": "7", "s3_notifications": "true", "heartbeat_s": "0.5", "stage": None})
    assert config.engine.max_attempts == 7
    assert config.infra.s3_notifications is True
    assert config.engine.heartbeat_s == 0.5
    assert config.infra.stage == "dev", "a None value (absent context key) takes the default"


@pytest.mark.parametrize(("given", "version"), [(6.0, "6.0"), (6, "6.0"), (5.1, "5.1"), ("5.0", "5.0")])
def test_config_glue_version_as_a_json_number(given: object, version: str) -> None:
    """`"glue_version": 5.1` in cdk.json's context reaches the app as a number, not the string -c gives."""
    assert load_config({"glue_version": given}).infra.glue_version == version


def test_config_engine_environment_holds_chosen_settings_and_the_fixed_period() -> None:
    env = load_config({"policy": "adaptive", "adaptive_ceiling_s": "1200", "glue_workers": "4"}).engine_environment()
    assert env == {
        "POLICY": "adaptive",
        "ADAPTIVE_CEILING_S": "1200",
        "EXTENDER_PERIOD_S": "60.0",
        "RECEIVER_TIMEOUT_S": "30.0",  # the receiver function's own timeout, checked against the grace
    }


def test_config_refuses_a_reconcile_grace_within_the_receivers_timeout() -> None:
    with pytest.raises(ConfigError, match=r"reconcile_grace_s=60 must be greater than receiver_timeout_s=90"):
        load_config({"reconcile_grace_s": "60", "receiver_timeout_s": "90", "queue_visibility_timeout_s": "180"})


def test_config_refuses_the_seed_policies_on_the_one_minute_schedule() -> None:
    with pytest.raises(ConfigError, match=r"threshold_s=5 must be greater than extender_period_s \(60 s\)"):
        load_config({"policy": "threshold", "visibility_timeout_s": "30", "threshold_s": "5"})
    load_config({"policy": "threshold", "visibility_timeout_s": "300", "threshold_s": "62"})


def test_config_resource_settings_are_not_context_keys() -> None:
    keys = set(context_keys())
    assert {"table_name", "queue_url", "dlq_url", "state_machine_arn", "extender_period_s", "job_runs"}.isdisjoint(keys)
    assert context_keys().count("receiver_timeout_s") == 1, "the infrastructure's key, passed to the engine"
    assert {"policy", "max_attempts", "stage", "glue_workers", "alarm_email"} <= keys


@pytest.mark.parametrize(
    ("context", "named"),
    [
        ({"glue_workers": "1"}, "glue_workers='1'"),
        ({"stage": "Prod!"}, "stage='Prod!'"),
        ({"glue_version": "4.0"}, "glue_version='4.0'"),
        ({"receiver_max_concurrency": "1"}, "receiver_max_concurrency='1'"),
        ({"log_retention_days": "31"}, "log_retention_days='31'"),
        ({"alarm_email": "ops"}, "alarm_email='ops'"),
        ({"powertools_layer_arn": "layer:3"}, "powertools_layer_arn='layer:3'"),
        ({"s3_notifications": "maybe"}, "s3_notifications='maybe'"),
        ({"policy": "fastest"}, "policy='fastest': Input should be 'adaptive'"),
        ({"max_attempts": "0"}, "max_attempts='0': Input should be greater than or equal to 1"),
        ({"shards": "many"}, "shards='many': Input should be a valid integer"),
        ({"max_receive_count": "7"}, "max_receive_count is merged into max_attempts: set max_attempts"),
        ({"adaptive_ceiling_s": "100"}, "adaptive_ceiling_s=100"),
        ({"release_delay_base_s": "60", "release_delay_cap_s": "30"}, "release_delay_cap_s=30"),
    ],
)
def test_config_refuses_bad_value_naming_it(context: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match="invalid CDK context") as caught:
        load_config(context)
    assert named in str(caught.value)


def test_config_refuses_a_boolean_for_a_number_naming_it() -> None:
    """cdk.json's JSON `true` for a numeric setting is a mistake, not 1: pydantic would read it as 1 (a 1 s
    receiver timeout, one shard), so the app stops naming each key, infrastructure's and engine's alike."""
    with pytest.raises(SystemExit) as exited:
        app.main(cdk.App(context={"receiver_timeout_s": True, "glue_workers": True, "shards": False}))
    text = str(exited.value.code)
    for key in ("receiver_timeout_s=true", "glue_workers=true", "shards=false"):
        assert f"{key}: a number is needed, not a boolean" in text, text
    with pytest.raises(ConfigError, match=r"receiver_timeout_s=true: .*; glue_version='9': Input should be"):
        load_config({"receiver_timeout_s": True, "glue_version": "9"})  # each bad key named, as always
    assert load_config({"snapstart": True, "receiver_timeout_s": 60}).infra.snapstart is True


def test_config_reports_every_bad_key_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({"glue_workers": "1", "max_attempts": "0"})
    assert "glue_workers" in str(caught.value) and "max_attempts" in str(caught.value)


def test_config_refuses_queue_vt_shorter_than_receiver_timeout() -> None:
    with pytest.raises(ConfigError, match=r"queue_visibility_timeout_s=60 must be >= receiver_timeout_s=90"):
        load_config({"queue_visibility_timeout_s": "60", "receiver_timeout_s": "90"})


def test_config_refuses_a_retention_whose_margin_a_failed_receive_outlasts() -> None:
    """A message that waits for a slot is sent afresh `retention_margin_s` (a quarter of a short retention)
    before SQS deletes it. A receive then that fails shows it again only after the queue's VT, so the
    margin must outlast that and the retry's invocation, or the message is deleted unseen. SQS deletes a
    message at the end of its retention whether or not it was received ("the message retention period",
    https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SetQueueAttributes.html)."""
    with pytest.raises(ConfigError, match=r"queue_retention_s=600 sends a waiting message afresh 150 s before"):
        load_config({"queue_retention_s": "600", "max_renewal_s": "120"})
    assert (
        load_config(
            {"queue_retention_s": "840", "max_renewal_s": "120", "glue_timeout_minutes": "1"}
        ).engine.retention_margin_s
        == 210
    )


def test_config_smallest_retention_is_the_one_deploy_md_names() -> None:
    """deploy.md's settings table gives the smallest `queue_retention_s` of the default stack: the margin before
    a waiting message's resend must outlast max_renewal_s (12 h by default) as well as a failed receive."""
    page = (REPO_ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if line.startswith("| `max_refused_starts`"))
    documented = re.search(r"\((\d+) s by default\)", row)
    assert documented is not None, "the row names the smallest retention"
    smallest = int(documented[1])
    assert load_config({"queue_retention_s": str(smallest)}).engine.queue_retention_s == smallest
    with pytest.raises(ConfigError, match=rf"smallest queue_retention_s: {smallest}"):
        load_config({"queue_retention_s": str(smallest - 1)})


@pytest.mark.parametrize(
    "context",
    [
        {"policy": "remaining"},  # the queue's VT, read by the functions
        {"policy": "remaining", "max_renewal_s": "43000", "queue_visibility_timeout_s": "30"},
        {"policy": "remaining", "visibility_timeout_s": "300"},
    ],
)
def test_config_remaining_policy_names_the_policies_that_fit_the_schedule(context: dict[str, str]) -> None:
    """On the 1-minute schedule no VT is safe for the remaining policy, and the stack has no extender_period_s
    to lower: the error names the policies that renew on it instead."""
    with pytest.raises(ConfigError) as caught:
        load_config(context)
    assert str(caught.value) == (
        "invalid CDK context: policy=remaining cannot renew on the stack's 60 s extender schedule: it renews at "
        "most 10 s before visible, and one lost scheduled run leaves 61.5 s (the period, a tick of heartbeat_s "
        "and min_remaining_life_s); use policy=adaptive (the default), or policy=threshold with threshold_s above "
        "61.5 and visibility_timeout_s above that"
    )
    load_config({"policy": "threshold", "threshold_s": "62", "visibility_timeout_s": "300"})


def test_config_threshold_vt_unset_is_named_as_the_policys_default() -> None:
    """The threshold policy renews by 30 s unless set, not by the queue's VT: the error says so, and that
    on the stack (threshold_s above 61.5 s) the fix is to set visibility_timeout_s."""
    with pytest.raises(ConfigError) as caught:
        load_config({"policy": "threshold", "threshold_s": "70"})
    assert str(caught.value) == (
        "invalid CDK context: visibility_timeout_s=30 (the threshold policy's default, as visibility_timeout_s is "
        "unset) must be greater than threshold_s=70, or every renewal is due again at once; set "
        "visibility_timeout_s to 71 or more"
    )
    assert load_config({"policy": "threshold", "threshold_s": "70", "visibility_timeout_s": "71"}).engine.policy


def test_config_check_across_keys_reads_as_its_message() -> None:
    """A model-level check has no key of its own: no `={...}` of the whole input, no "Value error, "."""
    with pytest.raises(ConfigError) as caught:
        load_config({"tracing": "opentelemetry"})
    assert str(caught.value).startswith("invalid CDK context: tracing=opentelemetry needs otel_layer_arn: ")
    with pytest.raises(ConfigError) as caught:
        load_config({"alarm_email": "ops", "retry_base_s": "2", "retry_cap_s": "1"})
    assert str(caught.value) == (
        "invalid CDK context: alarm_email='ops': must be an email address; retry_cap_s=1.0 must be >= retry_base_s=2.0"
    )


def test_config_refuses_a_glue_run_longer_than_renewal_lasts() -> None:
    # renewal stopped after an hour: a 6 h run would lose its message.
    with pytest.raises(ConfigError, match=r"glue_timeout_minutes=360 \(21600 s\) is longer than renewal lasts"):
        load_config({"max_renewal_s": "3600"})
    with pytest.raises(ConfigError, match="glue_timeout_minutes=720"):
        load_config({"glue_timeout_minutes": "720"})  # past 12 h less the cap safety
    assert load_config({"glue_timeout_minutes": "719"}).infra.glue_timeout_minutes == 719


def test_config_glue_run_past_twelve_hours_names_the_longest_timeout_not_max_renewal() -> None:
    """At its default max_renewal_s (12 h) renewal is bounded by SQS's 12 h less cap_safety_s, so raising
    max_renewal_s cannot help: the message names the longest timeout that fits instead."""
    with pytest.raises(ConfigError) as caught:
        load_config({"glue_timeout_minutes": "720"})
    assert "lower glue_timeout_minutes to 719 or less" in str(caught.value)
    assert "raise max_renewal_s" not in str(caught.value)
    with pytest.raises(ConfigError, match=r"lower glue_timeout_minutes to 60 or less, or raise max_renewal_s"):
        load_config({"max_renewal_s": "3600"})


def test_config_refuses_an_invocation_margin_that_cuts_the_extenders_period_short() -> None:
    """The extender runs for its period, within a 90 s timeout less invocation_margin_s. A larger margin ends
    every invocation early: sub-minute ticks stop before the next run, and reconciliation and admission,
    which begin nothing past that deadline, never run."""
    with pytest.raises(ConfigError, match=r"invocation_margin_s=100 leaves the extender less than its 60 s period"):
        load_config({"invocation_margin_s": "100"})
    with pytest.raises(ConfigError, match=r"invocation_margin_s=31"):
        load_config({"invocation_margin_s": "31"})
    assert load_config({"invocation_margin_s": "30"}).engine.invocation_margin_s == 30


def test_config_refuses_an_emr_serverless_run_longer_than_renewal_lasts() -> None:
    """An emr_serverless type's `timeout_minutes` is its run's limit: checked as a Glue run's is."""
    from longjobs.construct.config import check_job_types
    from longjobs.engine.jobs import load_catalog

    def emr(minutes: int) -> dict[str, object]:
        return {
            "name": "rows",
            "runner": "pyspark",
            "platform": "emr_serverless",
            "entry": "jobs/wordcount.py:run",
            "emr_serverless": {"timeout_minutes": minutes},
        }

    config = load_config({"max_renewal_s": "7200", "glue_timeout_minutes": "60"})
    with pytest.raises(ConfigError, match=r"'rows': emr_serverless.timeout_minutes=180 \(10800 s\) is longer than"):
        check_job_types(config, load_catalog(job_types=[emr(180)]))
    check_job_types(config, load_catalog(job_types=[emr(100)]))


def test_config_limited_run_too_long_for_any_admission_horizon_names_its_timeout_instead() -> None:
    """A limited type's message may wait hidden twice `admission_horizon_s` and a period on its receive, then
    run, all within SQS's 12 h hold less cap_safety_s. A Glue run of 719 minutes (renewal's longest) leaves
    less than twice the smallest horizon the settings take (60 s), so no horizon fits: the refusal names the
    run timeout that fits with the horizon set, never a horizon of 0 or less, which the settings refuse."""
    from longjobs.construct.config import check_job_types

    def rows(minutes: int) -> dict[str, object]:
        declared = {"name": "rows", "runner": "pyspark", "entry": "jobs/wordcount.py:run", "max_concurrency": 2}
        return {**declared, "glue": {"timeout_minutes": minutes}}

    with pytest.raises(ConfigError) as caught:
        check_job_types(load_config({}), load_catalog(job_types=[rows(719)]))
    text = str(caught.value)
    assert "lower admission_horizon_s to" not in text, text
    assert "lower glue.timeout_minutes to 598 or less" in text, "(43140 s - 2 x 3600 s - 60 s) // 60"
    check_job_types(load_config({}), load_catalog(job_types=[rows(598)]))
    with pytest.raises(ConfigError, match=r"lower admission_horizon_s to 240 or less"):
        check_job_types(load_config({}), load_catalog(job_types=[rows(710)]))


def test_config_limited_run_of_the_context_timeout_names_the_context_key() -> None:
    """A pyspark type that declares no timeout runs for `-c glue_timeout_minutes`: the refusal names that key,
    as `glue.timeout_minutes` is in no declaration for the deployer to lower."""
    from longjobs.construct.config import check_job_types

    limited = {"name": "rows", "runner": "pyspark", "entry": "jobs/wordcount.py:run", "max_concurrency": 2}
    with pytest.raises(ConfigError) as caught:
        check_job_types(load_config({"glue_timeout_minutes": "719"}), load_catalog(job_types=[limited]))
    assert "lower glue_timeout_minutes to 598 or less" in str(caught.value), str(caught.value)
    with pytest.raises(SystemExit) as exited:
        app.main(cdk.App(context={"glue_timeout_minutes": "719"}))  # the bundled `spark` type declares none
    assert "lower glue_timeout_minutes to 598 or less" in str(exited.value.code)


def test_config_glue_timeout_past_renewal_names_one_admission_also_takes() -> None:
    """A Glue type is limited (its Glue job's concurrent runs), so its run must also end within 12 h after
    the longest wait admission may give it (`check_admission`). A timeout refused for outlasting renewal
    names the one that fits both, so one change synthesizes: not 719, which admission then refuses."""
    from longjobs.construct.config import check_admission, check_job_types

    with pytest.raises(SystemExit) as exited:
        app.main(cdk.App(context={"glue_timeout_minutes": "800"}))  # the bundled `spark` type declares none
    assert "lower glue_timeout_minutes to 598 or less" in str(exited.value.code), exited.value.code
    config = load_config({"glue_timeout_minutes": "598"})
    check_job_types(config, load_catalog())
    check_admission(config, load_catalog().with_glue(config.infra.glue_of))  # as the construct checks it
    own = {"name": "rows", "runner": "pyspark", "entry": "jobs/wordcount.py:run", "glue": {"timeout_minutes": 800}}
    with pytest.raises(ConfigError, match=r"lower glue.timeout_minutes to 598 or less"):
        check_job_types(load_config({}), load_catalog(job_types=[own]))
    with pytest.raises(ConfigError, match=r"lower glue_timeout_minutes to 719 or less\b"):
        load_config({"glue_timeout_minutes": "800"})  # no job types given: renewal's limit alone


def test_config_refuses_a_glue_types_limit_above_its_glue_jobs_concurrent_runs() -> None:
    """A Glue job queues the runs past its `max_concurrent_runs`: executions admitted beyond it would wait in
    Glue's queue until their step timed out, without running. Both the type's own Glue setting and the
    context's default (`glue_max_concurrent_runs`, 10) count; an EMR Serverless type has no such limit."""
    from longjobs.construct.config import check_job_types

    def rows(max_concurrency: int, **glue: int) -> dict[str, object]:
        declared: dict[str, object] = {"name": "rows", "runner": "pyspark", "entry": "jobs/wordcount.py:run"}
        return {**declared, "max_concurrency": max_concurrency, **({"glue": glue} if glue else {})}

    config = load_config({})
    with pytest.raises(ConfigError) as own:
        check_job_types(config, load_catalog(job_types=[rows(10, max_concurrent_runs=1)]))
    assert str(own.value) == (
        "invalid job type 'rows': max_concurrency=10 is more than its Glue job's max_concurrent_runs=1 (its "
        "glue.max_concurrent_runs): the executions past 1 would wait in Glue's queue until their step timed out, "
        "without running; lower max_concurrency to 1 or less, or raise glue.max_concurrent_runs"
    )
    with pytest.raises(ConfigError, match=r"max_concurrency=11 is more than its Glue job's max_concurrent_runs=10 "):
        check_job_types(config, load_catalog(job_types=[rows(11)]))
    with pytest.raises(ConfigError, match=r"\(the context setting glue_max_concurrent_runs\)"):
        check_job_types(load_config({"glue_max_concurrent_runs": "2"}), load_catalog(job_types=[rows(3)]))
    check_job_types(config, load_catalog(job_types=[rows(10), {**rows(4, max_concurrent_runs=4), "name": "b"}]))
    emr = {**rows(50), "platform": "emr_serverless"}
    check_job_types(config, load_catalog(job_types=[emr]))


def test_config_bad_context_stops_the_app_with_the_message() -> None:
    with pytest.raises(SystemExit) as caught:
        app.main(cdk.App(context={"glue_workers": "1"}))
    assert "glue_workers='1'" in str(caught.value.code)


def test_config_refuses_a_key_that_names_no_setting_with_the_nearest() -> None:
    with pytest.raises(ConfigError, match=r"shard: no such setting \(did you mean shards\?\)"):
        load_config({"shard": "4"})
    with pytest.raises(ConfigError, match=r"engine\.shard: no such setting \(did you mean shards\?\)"):
        make_config(engine={"shard": 4})


@pytest.mark.parametrize(
    ("context", "named"),
    [
        ({"shard": "4"}, "shard: no such setting (did you mean shards?)"),
        ({"jobs_files": "jobs.json"}, "jobs_files: no such setting (did you mean jobs_file?)"),
        ({"max_receive_count": "7"}, "max_receive_count is merged into max_attempts: set max_attempts"),
        ({"Stage": "prod"}, "Stage: no such setting (did you mean stage?)"),
        ({"receiverTimeoutS": "60"}, "receiverTimeoutS: no such setting (did you mean receiver_timeout_s?)"),
    ],
)
def test_config_app_refuses_a_context_key_it_would_ignore(context: dict[str, str], named: str) -> None:
    """Each would otherwise deploy the setting's default: the key is not one the app reads."""
    with pytest.raises(SystemExit) as caught:
        app.main(cdk.App(context=context))
    assert named in str(caught.value.code)


def test_config_app_leaves_cdks_own_context_keys_to_cdk() -> None:
    context = {"@aws-cdk/core:checkSecretUsage": True, "aws:cdk:enable-path-metadata": True, "availability-zones:1": 1}
    assert app.setting_context({**context, "shard": "4", "jobs_file": "x.json"}) == {"shard": "4"}


def test_config_powertools_layer_is_the_locked_version_and_the_lower_bound() -> None:
    """The layer the construct deploys is the Powertools the tests run (the lock) and the oldest the
    library admits (the range's lower bound)."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    ranges = [dep for dep in project["project"]["dependencies"] if dep.startswith("aws-lambda-powertools")]
    assert ranges == [f"aws-lambda-powertools[tracer,parser,validation]>={POWERTOOLS_VERSION},<4"]
    locked = (REPO_ROOT / "requirements-lock.txt").read_text().splitlines()
    assert f"aws-lambda-powertools=={POWERTOOLS_VERSION}" in locked
    assert POWERTOOLS_LAYER_PARAMETER.endswith(f"/arm64/python3.13/{POWERTOOLS_VERSION}")


@pytest.mark.parametrize(
    ("layer", "refused"),
    [
        ("AWSLambdaPowertoolsPythonV3-python313-arm64", False),
        ("AWSLambdaPowertoolsPythonV3-python312-arm64", True),  # pydantic-core built for 3.12
        ("AWSLambdaPowertoolsPythonV3-python313-x86_64", True),  # built for the other architecture
        ("AWSLambdaPowertoolsPythonV2-Arm64", True),  # Powertools v2: the functions import v3's API
        ("powertools-own-build", False),  # the deployer's own layer: taken as given
        ("AWSLambdaPowertoolsPythonV3-python313-arm64-patched", False),  # named by the deployer, not Powertools
    ],
)
def test_config_powertools_layer_of_another_runtime_is_refused_naming_the_one_to_use(layer: str, refused: bool) -> None:
    """Powertools publishes a layer per Python version and architecture, named
    `AWSLambdaPowertoolsPythonV3-{python_version}-{arch}` (its install page's "Lambda Layer" table). Lambda
    attaches any of them; one built for another Python or architecture fails the first cold start."""
    arn = f"arn:aws-cn:lambda:cn-north-1:498634801083:layer:{layer}:27"
    if not refused:
        assert load_config({"powertools_layer_arn": arn}).infra.powertools_layer_arn == arn
        return
    with pytest.raises(ConfigError) as caught:
        load_config({"powertools_layer_arn": arn})
    assert f"powertools_layer_arn='{arn}': the layer {layer} is not the one the functions run with" in str(caught.value)
    assert "use AWSLambdaPowertoolsPythonV3-python313-arm64" in str(caught.value)


@pytest.mark.parametrize(
    ("given", "tracing"),
    [
        ({}, "service"),  # Lambda's and Step Functions' own traces, no X-Ray SDK in the functions
        ({"tracing": "off"}, "off"),
        ({"tracing": "xray-sdk"}, "xray-sdk"),
        ({"tracing": "true"}, "xray-sdk"),  # the old boolean: true traced through the SDK
        ({"tracing": "false"}, "off"),
        (
            {
                "tracing": "opentelemetry",
                "otel_layer_arn": "arn:aws:lambda:us-east-1:901920570463:layer:aws-otel-python-arm64-ver-1-32-0:1",
            },
            "opentelemetry",
        ),
    ],
)
def test_config_tracing_options_and_the_old_boolean(given: dict[str, str], tracing: str) -> None:
    assert load_config(given).infra.tracing == tracing


def test_config_refuses_opentelemetry_without_its_layer_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="otel_layer_arn"):
        load_config({"tracing": "opentelemetry"})
    with pytest.raises(ConfigError, match="tracing="):
        load_config({"tracing": "verbose"})
