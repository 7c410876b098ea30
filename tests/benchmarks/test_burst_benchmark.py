"""The burst benchmark's arithmetic and output, without running a world: DynamoDB's request units from
item sizes, the quota's drain time, the table and the JSON (the benchmark itself runs in benchmarks/)."""

from __future__ import annotations

import argparse
import json
from io import StringIO

import pytest
from rich.console import Console

from benchmarks.burst import (
    PRICES,
    Params,
    Result,
    as_json,
    concurrencies,
    item_size,
    read_units,
    requests_table,
    table,
    write_units,
)
from longjobs.sim.aws.stepfunctions import Quota


def result(concurrency: int, *, throttled: int) -> Result:
    return Result(
        concurrency=concurrency,
        messages=10_000,
        all_started_s=743.6,
        quota_s=29.0,
        bucket=1_300,
        refill_per_s=300.0,
        starts_throttled=throttled,
        not_started_receives=101,
        max_refused_starts=1,
        dlq=0,
        violation=None,
        succeeded=10_000,
        executions=10_000,
        settled_s=1_290.3,
        requests_per_job={"stepfunctions.StartExecution": 1.167, "stepfunctions.StateTransitions": 17.0},
        units_per_job={"dynamodb_wru": 9.3, "dynamodb_rru": 5.2},
        cost_per_job_usd={"stepfunctions": 0.000425, "sqs": 9e-7, "dynamodb": 6.6e-6, "lambda": 1.3e-6},
    )


def test_item_size_follows_dynamodb_rules_for_names_strings_and_numbers() -> None:
    item = {"pk": {"S": "m-1"}, "version": {"N": "12345"}, "ok": {"BOOL": True}}
    assert item_size(item) == (2 + 3) + (7 + 3) + (2 + 1)
    assert item_size(None) == 0


def test_request_units_round_up_and_transactions_and_eventual_reads_differ() -> None:
    small, big = {"a": {"S": "x" * 100}}, {"a": {"S": "x" * 2_500}}
    assert write_units(None, small) == 1
    assert write_units(small, big) == 3  # the larger of before and after, in 1 KB units
    assert read_units(5_000, consistent=True) == 2
    assert read_units(5_000, consistent=False) == 1
    assert read_units(0, consistent=False) == 0.5  # a read of nothing still costs half a unit


def test_burst_the_quota_alone_admits_the_bucket_at_once_and_the_rest_at_the_refill_rate() -> None:
    assert Quota(1_300, 300.0).drain_s(10_000) == pytest.approx(29.0)
    assert Quota(1_300, 300.0).drain_s(1_000) == 0


def test_burst_the_table_shows_each_row_and_the_cost() -> None:
    console = Console(file=StringIO(), width=220)
    console.print(table([result(10, throttled=0), result(1_000, throttled=1_675)], Params()))
    console.print(requests_table([result(1_000, throttled=1_675)]))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "1,675" in text and "743.6" in text and "29.0" in text
    assert "0.0004338" in text  # 0.000425 + 0.0000009 + 0.0000066 + 0.0000013
    assert "stepfunctions.StartExecution" in text


def test_burst_the_json_names_the_region_the_prices_and_their_sources() -> None:
    data = json.loads(json.dumps(as_json([result(1_000, throttled=1_675)], Params())))
    assert data["region"] == "us-east-1"
    assert set(data["prices_usd"]) == set(PRICES)
    assert all(entry["source"].startswith("https://aws.amazon.com/") for entry in data["prices_usd"].values())
    assert data["results"][0]["starts_throttled"] == 1_675
    assert data["results"][0]["cost_usd"] == pytest.approx(0.0004338)


def test_concurrency_is_what_lambdas_sqs_mapping_accepts() -> None:
    assert concurrencies("10,1000") == [10, 1_000]
    with pytest.raises(argparse.ArgumentTypeError, match="2 to 1,000"):
        concurrencies("1")
