"""`longjobs` without the distribution's `cli` extra: one line naming the extra, not an import's traceback
(tests/infra/test_install.py runs the installed console script without it)."""

from __future__ import annotations

import importlib
import importlib.util
import tomllib
from typing import Any

import pytest

from longjobs import __main__ as cli
from tests import REPO_ROOT


def test_cli_extra_missing_is_named_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    find_spec = importlib.util.find_spec

    def without_rich(name: str, *args: Any) -> Any:
        return None if name == "rich" else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_rich)

    assert cli.main() == 2
    assert capsys.readouterr().err.splitlines() == [
        "longjobs needs the distribution's `cli` extra (rich not installed): pip install 'sqs-long-jobs[cli]'"
    ]


def test_cli_extra_console_script_is_the_checking_main() -> None:
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, _, name = scripts["longjobs"].partition(":")
    assert getattr(importlib.import_module(module), name) is cli.main
