"""Pipeline tests run the real PySpark job on a local session, on small generated or hand-written input."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from longjobs.pipeline.generate import Manifest, generate
from longjobs.pipeline.job import run
from longjobs.pipeline.params import PipelineParams
from longjobs.pipeline.session import local_session

DATE = "2024-05-01"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local session for the whole test run: starting the JVM is the slow part. Its context installs
    a SIGINT handler that calls the context; once it is stopped, the worker's own handler is put back, so a
    late interrupt is not answered by a traceback from the stopped context."""
    previous = signal.getsignal(signal.SIGINT)
    session = local_session("pipeline-tests", shuffle_partitions=4)
    yield session
    session.stop()
    signal.signal(signal.SIGINT, previous)


@dataclass(frozen=True)
class Run:
    """A pipeline run on a generated partition: its parameters, the generator's truth and the summary."""

    params: PipelineParams
    manifest: Manifest
    summary: dict[str, Any]


@pytest.fixture(scope="session")
def generated_run(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The pipeline run once on 4,000 generated events (two files); several tests read its outputs."""
    root = tmp_path_factory.mktemp("generated")
    manifest = generate(DATE, 4_000, root / "raw", seed=11, files=2)
    params = params_under(root)
    return Run(params, manifest, run(spark, params))


def params_under(root: Path, date: str = DATE, **overrides: Any) -> PipelineParams:
    values: dict[str, Any] = {
        "input": str(root / "raw"),
        "date": date,
        "output": str(root / "curated"),
        "quarantine": str(root / "quarantine"),
        **overrides,
    }
    return PipelineParams(**values)


def write_lines(folder: Path, lines: list[str | dict[str, Any]]) -> Path:
    """Raw input written by hand: dicts as JSON, strings as they are."""
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join((json.dumps(line) if isinstance(line, dict) else line) + "\n" for line in lines)
    (folder / "part-00000.jsonl").write_text(text, encoding="utf-8")
    return folder
