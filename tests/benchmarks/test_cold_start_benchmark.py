"""What a handler imports at its cold start: no X-Ray SDK unless it traces (the default, `tracing=service`,
does not), no boto3 and no botocore client machinery, nothing of the job catalog, schema validation, the
S3 event models or Powertools' batch utility (those load with the first event); the asset's compiled
modules; and the benchmark's parsing and its compiled layers. No timing is asserted: the figures are the
benchmark's."""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from benchmarks.cold_start import HANDLERS, Case, importtime_tree, layer_folders, table
from longjobs.construct.assets import SKIPPED
from longjobs.engine.lease.codec import deserialize, serialize
from longjobs.engine.observability import NoOpTracer, tracing_enabled
from tests import REPO_ROOT

HEAVY = (
    "aws_xray_sdk",
    "boto3",
    "botocore.session",
    "botocore.client",
    "botocore.config",
    "s3transfer",
    "aws_lambda_powertools.utilities.batch",
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
        "longjobs.functions.receiver", AWS_LAMBDA_FUNCTION_NAME="f", POWERTOOLS_TRACE_DISABLED="false"
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


def test_cold_start_default_tracing_imports_no_xray_sdk() -> None:
    """The stack's default (`service`) sets what keeps Powertools' Tracer, and so the X-Ray SDK, out."""
    from longjobs.construct.config import InfraSettings
    from longjobs.construct.functions import tracing_environment

    environment = tracing_environment(InfraSettings().tracing)
    modules = imported_after("longjobs.functions.watcher", AWS_LAMBDA_FUNCTION_NAME="f", **environment)
    assert [m for m in modules if m.startswith("aws_xray_sdk")] == []


IMPORTTIME = """\
import time:       100 |        100 | json
import time:       500 |        500 |     botocore.exceptions
import time:      2000 |       2500 |   longjobs.engine.execution
import time:      3000 |       3000 |   pydantic
import time:      1000 |       6500 | longjobs.functions.watcher
import time:       200 |        200 |   fastjsonschema
import time:       700 |        900 | longjobs.engine.jobs
"""


def test_cold_start_benchmark_reads_the_import_and_what_the_first_call_imports() -> None:
    total, under, in_call = importtime_tree(IMPORTTIME, "longjobs.functions.watcher")
    assert total == 6.5
    # another package: its cumulative time; our own module: its own time; json came before the handler
    assert under == [("pydantic", 3.0), ("longjobs.engine.execution", 2.0), ("botocore.exceptions", 0.5)]
    assert in_call == [("longjobs.engine.jobs", 0.7), ("fastjsonschema", 0.2)]
    printed = table([Case("watcher", "service", True, 9, 6.5, 6.0, 7.0, 20.0, under, in_call, 5.9)])
    assert "import ms" in printed and "cpu ms" in printed
    assert printed.splitlines()[-1].split()[3:8] == ["6.5", "6.0", "7.0", "5.9", "20.0"]


def test_cold_start_benchmark_puts_the_layers_modules_on_the_path_compiled(tmp_path: Path) -> None:
    """The Powertools layer and the runtime ship compiled modules, so the benchmark's folders standing for
    them have every module's bytecode, valid for its source (a timestamp `.pyc`: the source's time and
    size), a single-file module's included, whatever bytecode the installed packages have: a module that
    had none was compiled at every cold start the benchmark measured, which Lambda does not do."""
    layer, runtime = layer_folders(tmp_path)
    assert (layer / "typing_extensions.py").is_symlink()
    assert (layer / "pydantic").is_dir() and (runtime / "botocore").is_dir()
    for folder in (layer, runtime):
        sources = sorted(folder.rglob("*.py"))
        assert sources
        for source in sources:
            data = Path(importlib.util.cache_from_source(str(source))).read_bytes()
            assert data[:4] == importlib.util.MAGIC_NUMBER
            assert int.from_bytes(data[4:8], "little") == 0  # checked by the source's time and size
            stat = source.stat()
            assert int.from_bytes(data[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
            assert int.from_bytes(data[12:16], "little") == stat.st_size & 0xFFFFFFFF


def test_functions_asset_ships_unchecked_hash_bytecode_reproducibly(tmp_path: Path) -> None:
    """Every module of the asset has its `.pyc`, valid in Lambda whatever the zip does to file times
    (PEP 552 flags: 0b01, hash-based and unchecked), naming its source under /var/task, and the same
    source compiles to the same bytes (the asset's hash does not change from one synth to the next)."""
    from longjobs.construct.functions import compile_for_lambda

    stages = []
    for name in ("one", "two"):
        stage = tmp_path / name / "longjobs" / "engine"
        shutil.copytree(REPO_ROOT / "longjobs" / "engine" / "lease", stage / "lease", ignore=SKIPPED)
        compile_for_lambda(tmp_path / name)
        stages.append(stage)
    sources = sorted(stages[0].rglob("*.py"))
    assert sources
    for source in sources:
        compiled = Path(importlib.util.cache_from_source(str(source)))
        data = compiled.read_bytes()
        assert data[:4] == importlib.util.MAGIC_NUMBER
        assert int.from_bytes(data[4:8], "little") == 0b01  # hash-based, check_source off
        twin = stages[1] / source.relative_to(stages[0])
        assert Path(importlib.util.cache_from_source(str(twin))).read_bytes() == data
        code = marshal.loads(data[16:])
        assert code.co_filename == f"/var/task/longjobs/engine/{source.relative_to(stages[0]).as_posix()}"
