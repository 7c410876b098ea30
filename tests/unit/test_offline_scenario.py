"""The scenario file parser: every problem named by its place, unknown keys refused, defaults applied."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

import pytest

from longjobs.engine.settings import Settings
from longjobs.history.faults import CallFault
from longjobs.offline.scenario import (
    RENAMED_MODES,
    AbortExecution,
    AwsFault,
    DropStatusEvents,
    FaultMode,
    GenericJob,
    LoseScheduledRuns,
    RawJob,
    ScenarioError,
    SparkJob,
    Throttle,
    WaitJob,
    load_scenario,
    parse_scenario,
)

DEMO = Path(__file__).parents[2] / "longjobs" / "offline" / "scenarios" / "demo.json"


def problems(data: Any) -> str:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data)
    return str(caught.value)


def test_scenario_parser_applies_defaults_to_a_minimal_file() -> None:
    scenario = parse_scenario({"jobs": [{"id": "a", "type": "wait", "seconds": 3}]})

    assert scenario.settings == Settings()
    assert (scenario.timeout_s, scenario.batch_size, scenario.spark_heartbeat_s, scenario.faults) == (180, None, 10, [])
    assert scenario.jobs == [WaitJob(id="a", type="wait", seconds=3)]


def test_scenario_parser_reads_the_documented_example() -> None:
    scenario = parse_scenario(
        {
            "settings": {
                "policy": "threshold",
                "visibility_timeout_s": 5,
                "threshold_s": 2.5,
                "heartbeat_s": 0.5,
                "extender_period_s": 1,
                "max_renewal_s": 600,
            },
            "jobs": [
                {"id": "a", "type": "wait", "seconds": 12},
                {"id": "b", "type": "wait", "seconds": 2, "fail": True},
                {"id": "c", "type": "spark", "events": 20000},
                {"id": "d", "raw_body": "{not json"},
            ],
            "faults": [
                {"type": "throttle", "operation": "ChangeMessageVisibilityBatch", "probability": 0.3},
                {"type": "abort_execution", "job": "a", "at_s": 5},
            ],
            "timeout_s": 180,
        }
    )

    assert [type(job) for job in scenario.jobs] == [WaitJob, WaitJob, SparkJob, RawJob]
    assert [job.expected for job in scenario.jobs] == ["deleted", "dlq", "deleted", "dlq"]
    assert [type(fault) for fault in scenario.faults] == [Throttle, AbortExecution]
    assert scenario.settings.policy == "threshold" and scenario.settings.max_renewal_s == 600


def test_scenario_parser_names_unknown_keys_at_every_level() -> None:
    text = problems(
        {
            "settings": {"visibility_timeout": 4},
            "jobs": [{"id": "a", "type": "wait", "seconds": 1, "sleep": 2}],
            "faults": [{"type": "pause_extender", "at_s": 1, "for_s": 1, "until_s": 3}],
            "timeout": 10,
        }
    )

    assert "settings.visibility_timeout: unknown setting" in text
    assert "jobs[0].sleep: unknown key" in text
    assert "faults[0].until_s: unknown key" in text
    assert "timeout: unknown key" in text


def test_scenario_parser_names_a_misspelt_params_key_of_a_generic_job() -> None:
    """A job of a declared type whose `params` key is misspelt has no form to be checked against: its
    unknown key is named beside the forms it may take."""
    text = problems({"jobs": [{"id": "wc", "type": "wordcount", "parmas": {"input": "docs"}}]})

    assert "jobs[0].parmas: unknown key" in text
    assert "jobs[0]: give params (any job type)" in text


def test_scenario_parser_names_the_setting_meant_by_a_misspelt_or_merged_one() -> None:
    """A scenario's unknown setting gets the hint `cdk synth` and `serve --settings` give: the nearest name,
    or the setting a retired name was merged into, so the fix is in the message."""
    text = problems({"settings": {"shard": 2, "max_receive_count": 3}, "jobs": [{"id": "a", "raw_body": "x"}]})

    assert "settings.shard: unknown setting (did you mean shards?)" in text
    assert "settings.max_receive_count: unknown setting: merged into max_attempts, set max_attempts" in text


def test_scenario_parser_refuses_settings_the_runtime_owns() -> None:
    settings = {"queue_url": "https://example", "waiting_queues": '{"wait": "https://example"}'}
    text = problems({"settings": settings, "jobs": [{"id": "a", "raw_body": "x"}]})

    assert "settings.queue_url: set by the offline runtime" in text
    assert "settings.waiting_queues: set by the offline runtime" in text


def test_scenario_parser_reports_settings_that_lapse_by_construction() -> None:
    text = problems(
        {"settings": {"policy": "threshold", "visibility_timeout_s": 1}, "jobs": [{"id": "a", "raw_body": "x"}]}
    )

    assert text.startswith("invalid scenario: settings: visibility_timeout_s=1 must be greater than tick")


def test_scenario_parser_reports_bad_values_with_their_place() -> None:
    text = problems(
        {
            "jobs": [
                {"id": "a", "type": "wait", "seconds": -1},
                {"id": "b", "type": "sleep"},
                {"id": "c", "type": "spark", "events": 0},
                "d",
            ],
            "faults": [{"type": "throttle", "operation": "DeleteMessage", "probability": 2}, {"type": "explode"}],
        }
    )

    assert "jobs[0].seconds: Input should be greater than or equal to 0" in text
    assert (
        "jobs[1]: give params (any job type), or type 'wait' or 'spark' in their short forms, "
        "or a raw_body; got type 'sleep'" in text
    )
    assert "jobs[2].events: Input should be greater than or equal to 1" in text
    assert "jobs[3]: must be an object" in text
    assert "faults[1].type: must be one of pause_extender, throttle" in text


def test_scenario_parser_checks_fault_values_and_targets() -> None:
    throttle = problems(
        {
            "jobs": [{"id": "a", "raw_body": "x"}],
            "faults": [{"type": "throttle", "operation": "Nope", "probability": 2}],
        }
    )
    assert (
        "faults[0].operation: Input should be 'ChangeMessageVisibilityBatch' or 'ChangeMessageVisibility'" in throttle
    )
    assert "faults[0].probability: Input should be less than or equal to 1" in throttle

    jobs = [{"id": "w", "type": "wait", "seconds": 1}, {"id": "p", "raw_body": "x"}]
    assert "faults[0].job: no job has id 'z'" in problems(
        {"jobs": jobs, "faults": [{"type": "abort_execution", "job": "z", "at_s": 1}]}
    )
    assert "faults[0].job: 'p' is a raw_body message, it runs no job" in problems(
        {"jobs": jobs, "faults": [{"type": "duplicate_delivery", "job": "p", "at_s": 1}]}
    )
    assert "faults[0].job: kill_worker needs a pyspark job, 'w' is wait" in problems(
        {"jobs": jobs, "faults": [{"type": "kill_worker", "job": "w"}]}
    )


def test_scenario_parser_reads_the_chaos_fault_types() -> None:
    scenario = parse_scenario(
        {
            "jobs": [{"id": "a", "type": "wait", "seconds": 1}],
            "faults": [
                {
                    "type": "aws_fault",
                    "function": "receiver",
                    "operation": "StartExecution",
                    "mode": "crash_before",
                    "probability": 0.5,
                    "count": 3,
                    "at_s": 0,
                    "until_s": 60,
                },
                {"type": "aws_fault", "operation": "*", "mode": "answer_lost"},
                {"type": "lose_scheduled_runs", "probability": 0.2},
                {"type": "drop_status_events"},
            ],
        }
    )

    crash, every_call, lose, drop = scenario.faults
    assert crash == AwsFault(
        type="aws_fault",
        function="receiver",
        operation="StartExecution",
        mode="crash_before",
        probability=0.5,
        count=3,
        at_s=0,
        until_s=60,
    )
    assert isinstance(every_call, AwsFault)
    assert (every_call.function, every_call.probability, every_call.count, every_call.until_s) == ("any", 1, None, None)
    assert every_call.matches("watcher", "UpdateItem") and not crash.matches("extender", "StartExecution")
    assert lose == LoseScheduledRuns(type="lose_scheduled_runs", probability=0.2)
    assert drop == DropStatusEvents(type="drop_status_events", probability=1.0)


def test_scenario_parser_names_each_bad_key_of_an_aws_fault() -> None:
    text = problems(
        {
            "jobs": [{"id": "a", "raw_body": "x"}],
            "faults": [
                {
                    "type": "aws_fault",
                    "function": "worker",
                    "operation": "StartExecutoin",
                    "mode": "explode",
                    "probability": 0,
                    "count": 0,
                    "at_s": 5,
                    "until_s": 2,
                    "every_s": 1,
                },
                {"type": "aws_fault", "mode": "server_error"},
            ],
        }
    )

    assert "faults[0].function: Input should be 'receiver', 'extender', 'watcher' or 'any'" in text
    assert (
        "faults[0].operation: 'StartExecutoin' is not an operation of SQS, DynamoDB or Step Functions (or '*')" in text
    )
    assert (
        "faults[0].mode: Input should be 'throttled', 'server_error', 'timeout', 'answer_lost', 'crash_before' or "
        "'crash_after'" in text
    )
    assert "faults[0].probability: Input should be greater than 0" in text
    assert "faults[0].count: Input should be greater than or equal to 1" in text
    assert "faults[0].until_s: must be later than at_s (5), got 2" in text
    assert "faults[0].every_s: unknown key" in text
    assert "faults[1].operation: Field required" in text


def test_scenario_parser_names_bad_keys_of_run_and_event_faults() -> None:
    text = problems(
        {
            "jobs": [{"id": "a", "raw_body": "x"}],
            "faults": [
                {"type": "lose_scheduled_runs"},
                {"type": "lose_scheduled_runs", "probability": 1.5},
                {"type": "drop_status_events", "probability": -1, "status": "FAILED"},
            ],
        }
    )

    assert "faults[0].probability: Field required" in text
    assert "faults[1].probability: Input should be less than or equal to 1" in text
    assert "faults[2].probability: Input should be greater than 0" in text
    assert "faults[2].status: unknown key" in text


def test_scenario_parser_refuses_duplicate_ids_and_empty_job_lists() -> None:
    assert "used twice: ['a']" in problems({"jobs": [{"id": "a", "raw_body": "x"}, {"id": "a", "raw_body": "y"}]})
    assert "jobs: List should have at least 1 item" in problems({"jobs": []})
    assert "scenario: must be a JSON object, got list" in problems([])


def test_scenario_parser_reports_duplicate_ids_with_the_other_problems() -> None:
    """A duplicate job id is named together with an unknown key and a bad fault mode, not after they are fixed."""
    text = problems(
        {
            "jobs": [{"id": "a", "type": "wait", "seconds": 1}, {"id": "a", "type": "wait", "seconds": 2}],
            "faults": [{"type": "aws_fault", "operation": "*", "mode": "sometimes"}],
            "retries": 3,
        }
    )

    assert "retries: unknown key" in text
    assert "faults[0].mode: Input should be" in text
    assert "job ids must be unique; used twice: ['a']" in text
    assert text.count("used twice") == 1


def test_scenario_loader_names_a_file_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"jobs": [', encoding="utf-8")

    with pytest.raises(ScenarioError, match=r"broken\.json is not JSON"):
        load_scenario(path)
    with pytest.raises(ScenarioError, match="cannot read the scenario"):
        load_scenario(tmp_path / "missing.json")


def test_scenario_loader_accepts_the_shipped_demo() -> None:
    scenario = load_scenario(DEMO)

    kinds = {type(job) for job in scenario.jobs}
    assert kinds == {WaitJob, SparkJob, RawJob, GenericJob}, "a user-style type in the generic form too"
    assert sum(isinstance(job, SparkJob) for job in scenario.jobs) >= 2
    assert any(isinstance(job, WaitJob) and job.fail for job in scenario.jobs)
    assert json.loads(DEMO.read_text(encoding="utf-8"))["timeout_s"] < 300


# -- job types ---------------------------------------------------------------------------------------


WORDCOUNT_JOB = {"id": "wc", "type": "wordcount", "params": {"input": "docs", "min_length": 3}}


def test_scenario_takes_job_types_and_generic_jobs_of_any_type() -> None:
    demo = load_scenario(DEMO)
    [wordcount] = demo.job_types
    scenario = parse_scenario(
        {
            "job_types": [wordcount],
            "jobs": [WORDCOUNT_JOB, {"id": "w", "type": "wait", "params": {"seconds": 1}}],
        }
    )
    first, second = scenario.jobs
    assert first == GenericJob(id="wc", type="wordcount", params={"input": "docs", "min_length": 3})
    assert isinstance(second, GenericJob) and second.expected == "deleted"
    assert scenario.job_catalog().names == ["echo", "spark", "wait", "wordcount"]
    assert scenario.runs_spark(first) and not scenario.runs_spark(second)


def test_demo_declares_the_wordcount_example_of_jobs_json() -> None:
    jobs_json = json.loads((DEMO.parents[3] / "jobs.json").read_text())
    [demo_wordcount] = load_scenario(DEMO).job_types
    assert demo_wordcount == next(t for t in jobs_json["job_types"] if t["name"] == "wordcount")
    assert any(isinstance(job, GenericJob) and job.type == "wordcount" for job in load_scenario(DEMO).jobs)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"job_types": [{"name": "x", "runner": "pyspark", "entry": "nowhere.py:run"}], "jobs": [WORDCOUNT_JOB]},
            "job_types[0] 'x': entry: cannot read",
        ),
        ({"jobs": [WORDCOUNT_JOB]}, "jobs[0].type: 'wordcount' is not a job type (known: echo, spark, wait)"),
        ({"jobs": [{"id": "a", "type": "mine"}]}, "jobs[0]: give params (any job type), or type 'wait' or 'spark'"),
        (
            {
                "job_types": [
                    {
                        "name": "nested",
                        "runner": "state_machine",
                        "state_machine": {"arn": "arn:aws:states:us-east-1:123456789012:stateMachine:m"},
                    }
                ],
                "jobs": [{"id": "a", "type": "wait", "seconds": 1}],
            },
            "'nested' runs a state machine, which the offline runtime cannot run",
        ),
        (
            {"job_types": {"name": "x"}, "jobs": [{"id": "a", "type": "wait", "seconds": 1}]},
            "job_types: must be a list",
        ),
    ],
)
def test_scenario_refuses_bad_job_types_naming_them(data: dict[str, Any], message: str) -> None:
    assert message in problems(data)


def test_scenario_fifo_jobs_name_their_group_and_may_share_a_deduplication_id() -> None:
    scenario = parse_scenario(
        {
            "settings": {"fifo": True},
            "jobs": [
                {"id": "a1", "type": "wait", "seconds": 3, "group": "tenant-a", "dedup_id": "order-1"},
                {"id": "b1", "type": "wait", "seconds": 1, "group": "tenant-b"},
                {"id": "p", "raw_body": "{not json", "group": "tenant-a"},
                {"id": "a2", "type": "wait", "seconds": 1, "group": "tenant-a", "dedup_id": "order-1"},
                {"id": "p2", "raw_body": "{not json", "group": "tenant-a"},
            ],
        }
    )

    assert [job.group for job in scenario.jobs] == ["tenant-a", "tenant-b", "tenant-a", "tenant-a", "tenant-a"]
    assert [scenario.duplicate_of(job) for job in scenario.jobs] == [None, None, None, "a1", "p"], (
        "a producer's resend (its deduplication id), and the same body (content-based deduplication)"
    )
    assert [job.id for job in scenario.group_jobs()["tenant-a"]] == ["a1", "p", "a2", "p2"], "in send order"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"settings": {"fifo": True}, "jobs": [{"id": "a", "type": "wait", "seconds": 1}]},
            "jobs[0].group: required on a FIFO queue",
        ),
        (
            {"jobs": [{"id": "a", "type": "wait", "seconds": 1, "group": "g", "dedup_id": "d"}]},
            "jobs[0].group: only on a FIFO queue (settings.fifo); jobs[0].dedup_id: only on a FIFO queue",
        ),
        (
            {
                "settings": {"fifo": True},
                "jobs": [
                    {"id": "a", "type": "wait", "seconds": 1, "group": "g1", "dedup_id": "d"},
                    {"id": "b", "type": "wait", "seconds": 1, "group": "g2", "dedup_id": "d"},
                ],
            },
            "jobs[1].dedup_id: used in groups 'g1' and 'g2'",
        ),
        (
            {"settings": {"fifo": True}, "jobs": [{"id": "a", "type": "wait", "seconds": 1, "group": "has space"}]},
            "jobs[0].group: String should match pattern",
        ),
        (
            {
                "settings": {"fifo": True},
                "batch_size": 5,
                "jobs": [{"id": "a", "type": "wait", "seconds": 1, "group": "g"}],
            },
            "batch_size: 5 on a FIFO queue",
        ),
    ],
)
def test_scenario_refuses_fifo_keys_that_do_not_fit(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(data)
    assert message in str(raised.value)


def test_spark_workers_add_one_for_each_stopped_spark_run() -> None:
    """A stopped execution's job runs on in its worker offline (the local worker cannot be interrupted),
    so the job's next execution needs a worker of its own: its task waits unheartbeated otherwise."""
    from longjobs.offline.runtime import spark_workers

    jobs = [{"id": "a", "type": "spark", "events": 10}, {"id": "w", "type": "wait", "seconds": 1}]
    assert spark_workers(parse_scenario({"jobs": jobs})) == 1
    stops = [{"type": "abort_execution", "job": "a", "at_s": 1}, {"type": "abort_execution", "job": "w", "at_s": 1}]
    assert spark_workers(parse_scenario({"jobs": jobs, "faults": stops})) == 2
    many = [{"id": f"s{n}", "type": "spark", "events": 10} for n in range(6)]
    assert spark_workers(parse_scenario({"jobs": many})) == 4, "capped at MAX_SPARK_WORKERS"


def test_scenario_fault_modes_are_the_simulations_call_faults() -> None:
    """One vocabulary: a scenario's `aws_fault` modes are the simulation's `CallFault` names."""
    assert set(get_args(FaultMode)) == {fault.value for fault in CallFault}


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED_MODES.items()))
def test_scenario_earlier_mode_name_is_refused_with_its_name_now(old: str, new: str) -> None:
    data = {"jobs": [{"id": "a", "type": "wait", "seconds": 1}]}
    data["faults"] = [{"type": "aws_fault", "operation": "StartExecution", "mode": old}]  # type: ignore[list-item]
    with pytest.raises(ScenarioError, match=f"mode {old!r} is named {new!r} now"):
        parse_scenario(data)


def test_scenario_refuses_a_job_expected_to_run_whose_message_the_receiver_would_dead_letter() -> None:
    """Params the type's schema refuses would send the job to the DLQ at once, and the run would report it as
    the processor's fault; a job meant to be refused says so with `expect: dlq`, and `{work_dir}` is a path."""
    text = problems({"jobs": [{"id": "a", "type": "wait", "params": {"seconds": "x"}}]})

    assert text == (
        "invalid scenario: jobs[0].params: the receiver would send its message to the DLQ (InvalidParameters: "
        'params.seconds: must be integer); fix it, or give "expect": "dlq"'
    )
    refused = {"id": "a", "type": "wait", "params": {"seconds": "x"}, "expect": "dlq"}
    paths = {"input": "{work_dir}/raw", "output": "{work_dir}/out", "quarantine": "{work_dir}/q"}
    spark = {"id": "s", "type": "spark", "params": {**paths, "date": "2026-11-20"}}
    assert [job.id for job in parse_scenario({"jobs": [refused, spark]}).jobs] == ["a", "s"]


def test_scenario_refuses_a_type_that_is_not_a_name_and_a_day_not_of_the_calendar() -> None:
    assert "jobs[0].type: ['wait'] is not a job type" in problems(
        {"jobs": [{"id": "a", "type": ["wait"], "params": {}}]}
    )
    assert problems({"jobs": [{"id": "s", "type": "spark", "events": 10, "date": "2026-02-30"}]}) == (
        "invalid scenario: jobs[0].date: '2026-02-30' is not a day of the calendar"
    )


def test_scenario_parser_refuses_a_wait_job_longer_than_renewal_lasts() -> None:
    """Renewal stops at max_renewal_s: the receiver sends a longer wait to the DLQ, so a run expecting it
    deleted would blame the processor. A job meant to be refused says so."""
    too_long = {"id": "long", "type": "wait", "seconds": 25}
    text = problems({"settings": {"max_renewal_s": 8}, "jobs": [too_long]})

    assert "jobs[0].seconds: 25 s does not end within renewal (8 s from the receive" in text
    assert 'give "expect": "dlq"' in text
    capped = parse_scenario({"settings": {"max_renewal_s": 8}, "jobs": [{**too_long, "expect": "dlq"}]})
    assert capped.jobs[0].expected == "dlq"
    assert parse_scenario({"settings": {"max_renewal_s": 30}, "jobs": [too_long]}).jobs[0].expected == "deleted"
