"""What an attempt cost (`longjobs.engine.cost`): each runner's billed usage, reported or estimated, and
the processor's share, in a table; and the watcher's metric per job type."""

from __future__ import annotations

import json
from typing import Any

import pytest

from longjobs.engine.cost import PRICES, PROCESSOR_PER_ATTEMPT, attempt_usage, processor_share
from longjobs.engine.jobs import JobType, load_catalog
from longjobs.engine.watcher.attempt_cost import attempt_cost, record_attempt_cost
from longjobs.engine.watcher.models import ExecutionStatusChange

SCHEMA = {"type": "object"}
GLUE = JobType(name="rows", runner="pyspark", entry="jobs/x.py:run", glue={"workers": 5, "worker_type": "G.2X"})
GLUE_DEFAULTS = JobType(name="plain", runner="pyspark", entry="jobs/x.py:run")
EMR = JobType(
    name="rows-emr",
    runner="pyspark",
    entry="jobs/x.py:run",
    platform="emr_serverless",
    emr_serverless={"executor_cores": 4, "executor_memory_gb": 16},
)
WAIT = JobType(
    name="nap", runner="wait", params_schema={"type": "object", "required": ["seconds"], "properties": {"seconds": {}}}
)
DPU_HOUR = PRICES["glue_dpu_hour"][0]
VCPU_HOUR, GB_HOUR = PRICES["emr_serverless_vcpu_hour"][0], PRICES["emr_serverless_gb_hour"][0]


@pytest.mark.parametrize(
    ("job_type", "seconds", "outcome", "runner", "reported", "runner_usd"),
    [
        # Glue: execution time x DPUs (5 G.2X = 10 DPU), at least a minute; the attempt's time when stopped
        (GLUE, 600.0, None, "glue", False, 10 * 600 / 3600 * DPU_HOUR),
        (GLUE, 20.0, None, "glue", False, 10 * 60 / 3600 * DPU_HOUR),
        (GLUE, 900.0, {"execution_time_s": 480, "state": "SUCCEEDED"}, "glue", True, 10 * 480 / 3600 * DPU_HOUR),
        (GLUE, 900.0, {"execution_time_s": 480, "dpu_seconds": 3_600}, "glue", True, DPU_HOUR),
        # a declaration that leaves the workers to the stack: its defaults, 2 G.1X
        (GLUE_DEFAULTS, 600.0, None, "glue", False, 2 * 600 / 3600 * DPU_HOUR),
        # EMR Serverless: its billed usage found whatever the casing and nesting; else a driver and an executor
        (
            EMR,
            900.0,
            {"emr_job_run": {"JobRun": {"BilledResourceUtilization": {"VCPUHour": 2.0, "MemoryGBHour": 8.0}}}},
            "emr_serverless",
            True,
            2.0 * VCPU_HOUR + 8.0 * GB_HOUR,
        ),
        (EMR, 1_800.0, None, "emr_serverless", False, 0.5 * (8 * VCPU_HOUR + 32 * GB_HOUR)),
        (WAIT, 600.0, None, "none", False, 0.0),
        (None, 600.0, None, "none", False, 0.0),
    ],
    ids=[
        "glue-stopped",
        "glue-minimum-minute",
        "glue-reported-time",
        "glue-reported-dpu-seconds",
        "glue-stack-defaults",
        "emr-billed",
        "emr-estimated",
        "wait",
        "unknown-type",
    ],
)
def test_cost_attempt_usage_by_runner(
    job_type: JobType | None,
    seconds: float,
    outcome: dict[str, Any] | None,
    runner: str,
    reported: bool,
    runner_usd: float,
) -> None:
    usage = attempt_usage(job_type, seconds, outcome)
    assert (usage.runner, usage.reported) == (runner, reported)
    assert usage.runner_usd == pytest.approx(runner_usd)
    assert usage.total_usd == pytest.approx(runner_usd + usage.processor_usd)


def test_cost_processor_share_is_the_measured_job_and_renewals_per_hour() -> None:
    """13 transitions, 2.3 SQS requests, 11.6 + 1.3 DynamoDB units, 1.1 Lambda invocations per job (the
    burst benchmark), plus 0.83 SQS requests and 9.61 DynamoDB writes per hour kept hidden."""
    base = dict(processor_share(0))
    assert base == {**{name: 0.0 for name in base}, **PROCESSOR_PER_ATTEMPT}
    two_hours = dict(processor_share(7_200))
    assert two_hours["sqs_request"] == pytest.approx(2.3 + 2 * 0.83)
    assert two_hours["dynamodb_wru"] == pytest.approx(11.6 + 2 * 9.61)
    usd = attempt_usage(WAIT, 0).processor_usd
    assert usd == pytest.approx(13 * 0.025 / 1_000, rel=0.05), "the transitions are most of it"


def test_cost_every_price_names_its_aws_page() -> None:
    assert all(source.startswith("https://aws.amazon.com/") for _, source in PRICES.values())


def _ended(status: str, *, output: Any = None, job_type: str = "rows", seconds: int = 600) -> ExecutionStatusChange:
    return ExecutionStatusChange(
        executionArn="arn:aws:states:us-east-1:123456789012:execution:m:msg-1-2",
        stateMachineArn="arn:aws:states:us-east-1:123456789012:stateMachine:m",
        name="msg-1-2",
        status=status,
        input=json.dumps({"job": {"job_id": "j", "type": job_type, "params": {}}, "attempt": 2}),
        output=None if output is None else json.dumps(output),
        startDate=1_700_000_000_000,
        stopDate=1_700_000_000_000 + seconds * 1000,
    )


class Recorder:
    def __init__(self) -> None:
        self.typed: list[tuple[str, str, float, str]] = []

    def add_metric(self, name: str, unit: str, value: float) -> None:  # pragma: no cover - typed only
        raise AssertionError("cost metrics carry the job type")

    def add_type_metric(self, *, name: str, unit: str, value: float, job_type: str) -> None:
        self.typed.append((name, unit, value, job_type))


def test_cost_watcher_prices_every_end_from_the_event_alone() -> None:
    """A stopped attempt is its time x capacity; a success uses what its run reported (the output's
    `summary`, as the workflow's `$.outcome` holds it)."""
    catalog = load_catalog(job_types=[GLUE.declaration()])
    stopped = attempt_cost(_ended("ABORTED"), catalog)
    succeeded = attempt_cost(_ended("SUCCEEDED", output={"summary": {"execution_time_s": 120}}), catalog)
    assert stopped is not None and succeeded is not None
    assert stopped[0] == "rows" and stopped[1].runner_usd == pytest.approx(10 * 600 / 3600 * DPU_HOUR)
    assert succeeded[1].reported and succeeded[1].runner_usd == pytest.approx(10 * 120 / 3600 * DPU_HOUR)
    foreign = _ended("FAILED").model_copy(update={"name": "not-ours"})
    assert attempt_cost(foreign, catalog) is None and attempt_cost(_ended("RUNNING"), catalog) is None

    sink = Recorder()
    record_attempt_cost(_ended("TIMED_OUT"), catalog, sink)
    assert [(name, unit, job_type) for name, unit, _, job_type in sink.typed] == [
        ("AttemptCost", "None", "rows"),
        ("AttemptRunnerSeconds", "Seconds", "rows"),
    ]
    assert sink.typed[0][2] == pytest.approx(stopped[1].total_usd)


def test_cost_type_metric_honours_metrics_disabled(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Offline, the functions run with POWERTOOLS_METRICS_DISABLED: a type metric prints no EMF record on
    the terminal (Powertools' `single_metric` would), and prints one when enabled."""
    from aws_lambda_powertools import Metrics

    from longjobs.engine.observability import type_metric

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    type_metric(Metrics(namespace="Test"), "AttemptCost", "None", 0.5, "rows")
    assert capsys.readouterr().out == ""
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    type_metric(Metrics(namespace="Test"), "AttemptCost", "None", 0.5, "rows")
    record = json.loads(capsys.readouterr().out)
    assert record["AttemptCost"] in (0.5, [0.5]) and record["job_type"] == "rows"
