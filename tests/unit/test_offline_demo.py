"""`longjobs-offline demo` outside a checkout: it runs from what the installed distribution ships (its job
and input, the wheel's data files), and a PySpark scenario without PySpark is refused up front."""

from __future__ import annotations

import importlib.util
import json
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from longjobs.offline import __main__ as command
from longjobs.offline.runtime import prepare_spark
from longjobs.offline.scenario import ScenarioError, load_scenario
from tests import REPO_ROOT


def shipped_under(data: Path) -> Path:
    """An environment's data directory holding what the wheel installs for the demo."""
    demo = data / command.DEMO_DATA
    (demo / "jobs").mkdir(parents=True)
    (demo / "docs").mkdir()
    (demo / command.DEMO_JOB).write_text((REPO_ROOT / command.DEMO_JOB).read_text())
    (demo / "docs" / "page.md").write_text("words words words\n")
    return data


def test_demo_workspace_is_the_checkout_when_it_holds_the_demos_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    assert command.demo_workspace(Path("out/demo")) == REPO_ROOT


def test_demo_workspace_outside_a_checkout_is_a_copy_of_what_the_distribution_ships(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = shipped_under(tmp_path / "env")
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(data) if name == "data" else "")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")

    workspace = command.demo_workspace(Path("out"))

    assert workspace == tmp_path / "elsewhere" / "out" / "workspace"
    assert (workspace / command.DEMO_JOB).read_text() == (REPO_ROOT / command.DEMO_JOB).read_text()
    assert (workspace / "docs" / "page.md").is_file(), "the wordcount job's input"


def test_demo_without_its_job_anywhere_names_both_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path / "empty"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ScenarioError, match=r"checkout of the repository.*install the distribution"):
        command.demo_workspace(Path("out"))


def test_run_refuses_a_pyspark_scenario_without_pyspark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    find_spec = importlib.util.find_spec

    def without_pyspark(name: str, *args: Any) -> Any:
        return None if name == "pyspark" else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_pyspark)
    monkeypatch.chdir(REPO_ROOT)  # the demo's job and input
    code = command.run(command.DEMO_SCENARIO, tmp_path / "report.json", None, quiet=True)

    err = capsys.readouterr().err
    assert code == 2
    assert "PySpark is not installed" in err and "`pipeline` extra" in err
    assert not (tmp_path / "report.json").exists(), "nothing ran"


def test_a_scenario_without_spark_jobs_prepares_without_pyspark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`longjobs-offline run` of wait jobs, in an environment without the `pipeline` extra: nothing imports
    PySpark (an import of it fails here, as it does there)."""
    for name in ["pyspark", *(name for name in sys.modules if name.startswith("pyspark."))]:
        monkeypatch.setitem(sys.modules, name, None)
    for name in ("longjobs.pipeline.generate", "longjobs.pipeline.schema"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    scenario_file = tmp_path / "waits.json"
    scenario_file.write_text(json.dumps({"jobs": [{"id": "w1", "type": "wait", "params": {"seconds": 1}}]}))

    prepare_spark(load_scenario(scenario_file), tmp_path / "work")

    assert not (tmp_path / "work").exists(), "no partition generated, no session started"


def test_run_interrupted_says_so_in_one_line_and_writes_no_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C during a run: the runtime stops its services, then the command says what happened instead of
    printing the interrupt's traceback, and exits as a shell reports an interrupted command (130)."""
    from longjobs.offline import runtime

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(runtime, "run_scenario", interrupted)
    scenario_file = tmp_path / "waits.json"
    scenario_file.write_text(json.dumps({"jobs": [{"id": "w1", "type": "wait", "params": {"seconds": 1}}]}))

    code = command.run(scenario_file, tmp_path / "out" / "report.json", None, quiet=True)

    assert code == 130
    assert (
        capsys.readouterr().err.splitlines()[-1] == "interrupted: the run stopped before its end, and wrote no report"
    )
    assert not (tmp_path / "out" / "report.json").exists()
