"""The stack's cost: the idle month's lines from a template's resource counts, and a Glue run's price."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.stack_cost import MONTHLY, glue_run_usd, idle_month, report
from longjobs.engine.cost import PRICES


def test_stack_cost_counts_each_resource_billed_by_the_month() -> None:
    lines = idle_month(Counter({"AWS::KMS::Key": 2, "AWS::CloudWatch::Alarm": 9, "AWS::SQS::Queue": 5}))
    by_item = {line.item: line.usd for line in lines}
    assert by_item["customer-managed KMS key"] == pytest.approx(2.00)
    assert by_item["CloudWatch alarm (standard resolution)"] == pytest.approx(0.90)
    assert not any("dashboard" in item for item in by_item), "no dashboard in this template"
    assert by_item["EventBridge Scheduler invocations"] == pytest.approx(43_200 / 1_000_000)


def test_stack_cost_glue_run_bills_dpu_hours_with_a_one_minute_minimum() -> None:
    assert glue_run_usd(10, 2) == pytest.approx(2 * 10 / 60 * 0.44)
    assert glue_run_usd(0.2, 2) == glue_run_usd(1, 2), "Glue bills at least a minute"


def test_stack_cost_report_adds_the_processors_own_share_to_a_job() -> None:
    result = report(Counter({"AWS::CloudWatch::Dashboard": 1}), minutes=10, workers=2)
    assert result.job_usd == pytest.approx(result.glue_usd + result.processor_usd)
    assert result.idle_usd == pytest.approx(sum(line.usd for line in result.idle))


def test_stack_cost_prices_each_come_with_their_page() -> None:
    assert all(key in PRICES for key, _ in MONTHLY.values())
    assert all(PRICES[key][1].startswith("https://aws.amazon.com/") for key in PRICES)
