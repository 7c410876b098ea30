"""What a handler imports at its cold start: no X-Ray SDK unless it traces, no boto3, nothing of the job
catalog, schema validation or the S3 event models (those load on first use); and the benchmark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from typing import Any

import pytest
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from benchmarks.cold_start import HANDLERS, import_times, table
from longjobs.engine.lease.attributes import deserialize, serialize
from longjobs.engine.observability import NoOpTracer, tracing_enabled
from tests import REPO_ROOT

HEAVY = (
    "aws_xray_sdk",
    "boto3",
    "s3transfer",
    "fastjsonschema",
    "longjobs.engine.jobs",
    "aws_lambda_powertools.utilities.parser",
)


def imported_after(module: str, **env: str) -> list[str]:
    code = f"import sys, json, {module}; print(json.dumps(sorted(sys.modules)))"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "POWERTOOLS_"))}
    environ.update({"AWS_DEFAULT_REGION": "us-east-1", "PYTHONPATH": str(REPO_ROOT), **env})
    out = subprocess.run(
        [sys.executable, "-c", code], env=environ, cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    return list(json.loads(out.stdout))


@pytest.mark.parametrize("module", sorted(HANDLERS.values()))
def test_handler_imports_nothing_heavy_it_does_not_use_at_once(module: str) -> None:
    modules = imported_after(module, AWS_LAMBDA_FUNCTION_NAME="f", POWERTOOLS_TRACE_DISABLED="true")
    assert [m for m in modules if m.startswith(HEAVY)] == []


def test_handler_that_traces_gets_powertools_tracer() -> None:
    modules = imported_after(
        "longjobs.engine.receiver.handler", AWS_LAMBDA_FUNCTION_NAME="f", POWERTOOLS_TRACE_DISABLED="false"
    )
    assert "aws_xray_sdk.core" in modules


@pytest.mark.parametrize(
    ("env", "enabled"),
    [
        ({"AWS_LAMBDA_FUNCTION_NAME": "f"}, True),
        ({"AWS_LAMBDA_FUNCTION_NAME": "f", "POWERTOOLS_TRACE_DISABLED": "True"}, False),
        ({"AWS_LAMBDA_FUNCTION_NAME": "f", "POWERTOOLS_TRACE_DISABLED": "0"}, True),
        ({"AWS_LAMBDA_FUNCTION_NAME": "f", "AWS_SAM_LOCAL": "true"}, False),
        ({}, False),  # outside Lambda (tests, the offline runtime): Powertools would not trace either
    ],
)
def test_tracing_follows_powertools_rules(env: dict[str, str], enabled: bool) -> None:
    assert tracing_enabled(env) is enabled


def test_noop_tracer_returns_the_handler_unchanged() -> None:
    def handler(event: Any, context: Any) -> str:
        return "ok"

    assert NoOpTracer().capture_lambda_handler(handler) is handler


@pytest.mark.parametrize("value", ["a", "", 7, Decimal("1.250"), True, None, {"a": [1, "x", {"b": False}]}, []])
def test_lease_attributes_are_typed_as_boto3_types_them(value: Any) -> None:
    assert serialize(value) == TypeSerializer().serialize(value)
    assert deserialize(serialize(value)) == TypeDeserializer().deserialize(TypeSerializer().serialize(value))


def test_cold_start_benchmark_measures_a_handler() -> None:
    total, largest = import_times("longjobs.engine.watcher.handler", tracing=False)
    assert 0 < total < 5_000 and largest and all(ms <= total for _, ms in largest)
    assert "median ms" in table([])
