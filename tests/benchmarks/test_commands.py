"""The benchmarks' command lines: each names itself as it is run and says what every option does, and refuses
a number that would crash or never end, naming it, before anything runs."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

import pytest

BENCHMARKS = (
    "backfill",
    "burst",
    "chaos",
    "cold_start",
    "delivery_walk",
    "extender_throughput",
    "pipeline_throughput",
    "renewal_cost",
    "stack_cost",
)


class _Parsed(Exception):
    """Raised in place of parsing: the parser is all the test wants."""


@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_help_names_the_command_and_every_option(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    parsers: list[argparse.ArgumentParser] = []

    def keep(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        parsers.append(self)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", keep)
    with pytest.raises(_Parsed):
        importlib.import_module(f"benchmarks.{name}").main([])
    parser = parsers[-1]
    assert parser.prog == f"python -m benchmarks.{name}"
    assert [action.dest for action in parser._actions if not action.help] == []


@pytest.mark.parametrize(
    ("name", "argv", "named"),
    [
        ("renewal_cost", ["--jobs", "0"], "--jobs must be at least 1"),
        ("renewal_cost", ["--loss-rate", "1"], "--loss-rate must be from 0 to below 1"),
        ("renewal_cost", ["--lateness", "nan"], "--lateness must be a number of periods from 0"),
        ("stack_cost", ["--workers", "-1"], "--workers must be at least 1"),
        ("stack_cost", ["--minutes", "0"], "--minutes must be a number above 0"),
        ("burst", ["--messages", "0"], "--messages must be at least 1"),
        ("backfill", ["--jobs", "0"], "--jobs and --slots must be at least 1"),
        ("backfill", ["--min-minutes", "10", "--max-minutes", "5"], "0 < --min-minutes <= --max-minutes"),
        ("chaos", ["--runs", "0"], "--runs must be at least 1"),
        ("chaos", ["--out", "pyproject.toml"], "--out pyproject.toml: a file, not a directory"),
        ("cold_start", ["--runs", "0"], "--runs must be at least 1"),
    ],
)
def test_benchmark_refuses_a_number_it_cannot_run_naming_it(
    name: str, argv: list[str], named: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = importlib.import_module(f"benchmarks.{name}")

    def must_not_run(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"{name} {argv} ran instead of being refused")

    for runner in ("run_benchmark", "simulate", "run_campaign", "measure"):  # each benchmark's run
        if hasattr(module, runner):
            monkeypatch.setattr(module, runner, must_not_run)
    with pytest.raises(SystemExit) as exited:
        module.main(argv)
    assert exited.value.code == 2
    assert named in capsys.readouterr().err
