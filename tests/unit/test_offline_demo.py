"""`longjobs-offline demo` outside a checkout: it runs from what the installed distribution ships (its job
and input, the wheel's data files). What `run`, `demo` and `chaos` cannot do is refused up front: a PySpark
scenario without PySpark or Java, any command without Node.js, an output path that cannot be written.
Ctrl-C ends a run or a campaign in one line."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import sysconfig
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from longjobs.offline import __main__ as command
from longjobs.offline import programs
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


def _ran(*args: Any, **kwargs: Any) -> SimpleNamespace:
    """What `run` reads from a run that ended: a report that is `ok`, and a history of one line."""
    return SimpleNamespace(report={"ok": True}, violations=[], history=['{"event": "one"}'])


def _waits(tmp_path: Path) -> Path:
    scenario_file = tmp_path / "waits.json"
    scenario_file.write_text(json.dumps({"jobs": [{"id": "w1", "type": "wait", "params": {"seconds": 1}}]}))
    return scenario_file


def _never_runs(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("the scenario ran, though the command should have refused it first")


def test_offline_run_writes_its_trace_into_a_folder_it_creates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--trace` in a folder that does not exist yet: created at the end, as the report's and the timeline's
    are, not a FileNotFoundError once the whole scenario has run."""
    from longjobs.offline import report, runtime

    monkeypatch.setattr(runtime, "run_scenario", _ran)
    monkeypatch.setattr(report, "summary_table", lambda *args: "")
    trace = tmp_path / "nodir" / "t.jsonl"

    code = command.run(_waits(tmp_path), tmp_path / "p2" / "report.json", None, quiet=True, trace_path=trace)

    assert code == 0, capsys.readouterr().err
    assert trace.read_text() == '{"event": "one"}\n'


@pytest.mark.parametrize("option", ["--report", "--timeline", "--trace"])
def test_offline_run_refuses_an_output_that_is_a_directory_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    """An output path that names an existing directory would fail only once the scenario has run (an
    IsADirectoryError): refused first, in one line, with exit code 2."""
    from longjobs.offline import runtime

    monkeypatch.setattr(runtime, "run_scenario", _never_runs)
    folder = tmp_path / "rdir"
    folder.mkdir()
    paths = {"--report": tmp_path / "report.json", "--timeline": None, "--trace": None, option: folder}

    code = command.run(
        _waits(tmp_path), paths["--report"], paths["--timeline"], quiet=True, trace_path=paths["--trace"]
    )

    assert code == 2
    assert capsys.readouterr().err.splitlines() == [f"{option} {folder}: a directory; give the path of a file to write"]


def test_offline_run_refuses_an_output_under_a_file_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from longjobs.offline import runtime

    monkeypatch.setattr(runtime, "run_scenario", _never_runs)
    (tmp_path / "afile").write_text("")
    trace = tmp_path / "afile" / "t.jsonl"

    code = command.run(_waits(tmp_path), tmp_path / "report.json", None, quiet=True, trace_path=trace)

    assert code == 2
    assert capsys.readouterr().err.splitlines() == [f"--trace {trace}: {tmp_path / 'afile'} is a file, not a directory"]


def test_offline_chaos_refuses_a_report_that_is_a_directory_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from longjobs.offline import chaos

    monkeypatch.setattr(chaos, "run_one", _never_runs)

    code = command.main(["chaos", "--runs", "1", "--report", str(tmp_path)])

    assert code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"--report {tmp_path}: a directory; give the path of a file to write"
    ]


def test_offline_demo_refuses_an_out_that_is_a_file_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from longjobs.offline import runtime

    monkeypatch.setattr(runtime, "run_scenario", _never_runs)
    out = tmp_path / "out"
    out.write_text("")

    code = command.demo(out, quiet=True)

    assert code == 2
    assert capsys.readouterr().err.splitlines() == [f"--out {out / 'report.json'}: {out} is a file, not a directory"]


def _without(monkeypatch: pytest.MonkeyPatch, *programs: str) -> None:
    """This process's view of a machine without `programs` on the PATH, and without JAVA_HOME or JSII_NODE."""
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *args, **kwargs: None if name in programs else which(name))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv("JSII_NODE", raising=False)


def test_offline_run_without_java_says_so_in_one_line_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's scenario runs Spark jobs, whose JVM would fail to start (JAVA_GATEWAY_EXITED, a 45-line
    traceback) once the run is under way. The run is refused first, with the cause and the fix."""
    from longjobs.offline import runtime

    monkeypatch.setattr(runtime, "run_scenario", _never_runs)
    monkeypatch.chdir(REPO_ROOT)  # the demo's job and input
    _without(monkeypatch, "java")

    code = command.run(command.DEMO_SCENARIO, tmp_path / "report.json", None, quiet=True)

    assert code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("java not found: PySpark job types run on a local Spark, which needs Java 17; install")


def test_offline_java_from_java_home_as_spark_starts_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PySpark's launcher runs `$JAVA_HOME/bin/java` when JAVA_HOME is set, whatever the PATH holds."""
    _without(monkeypatch)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert programs.java_missing() == (
        f"java not found: JAVA_HOME is {tmp_path}, which has no bin/java, and Spark runs that one; point JAVA_HOME "
        f"at a Java 17 or unset it, or {programs.JAVA_INSTALL}"
    )
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "java").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "java").chmod(0o755)
    _without(monkeypatch, "java")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert programs.java_missing() is None


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--scenario", "s.json", "--report", "out/report.json"],
        ["demo", "--out", "out/demo"],
        ["chaos", "--report", "out/chaos.json"],
        ["serve", "--work-dir", "out/serve"],
        ["sim", "--seed", "1"],
    ],
    ids=lambda argv: argv[0],
)
def test_offline_commands_without_node_say_so_in_one_line_before_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Every command renders the workflow with the CDK, which jsii runs on Node.js: without `node`, a 95-line
    traceback ending in FileNotFoundError: 'node'. Refused first, with the cause and the fix, exit code 2."""
    monkeypatch.chdir(tmp_path)
    _without(monkeypatch, "node")

    code = command.main(argv)

    assert code == 2
    assert capsys.readouterr().err.splitlines() == [
        "node not found: the offline runtime renders its workflow with the AWS CDK, which runs on Node.js; "
        + programs.NODE_INSTALL
    ]
    assert not (tmp_path / "out").exists(), "nothing ran"


def test_offline_chaos_interrupted_writes_the_report_of_the_runs_that_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C in run 2 of 3: the run stops its services, and the campaign keeps run 1 in its report
    (`interrupted: true`), says so in one line, and exits as a shell reports an interrupted command (130)."""
    from longjobs.offline import chaos

    def one_then_interrupted(index: int, scenario: dict[str, Any], work_dir: Path) -> chaos.RunOutcome:
        if index > 1:
            raise KeyboardInterrupt
        totals = {"double_runs": 0, "lapses": 0, "lost_messages": 0, "stuck_leases": 0, "faults_missed": []}
        return chaos.RunOutcome(index, scenario, ok=True, violations=[], totals=totals, wall_s=1.0)

    monkeypatch.setattr(chaos, "run_one", one_then_interrupted)
    report_path = tmp_path / "chaos" / "report.json"

    try:
        code = chaos.main(3, 1, report_path, quiet=True)
    except KeyboardInterrupt:
        pytest.fail("the interrupt left the command: a traceback")

    assert code == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"interrupted: 1 of 3 runs ended before the campaign stopped; their report: {report_path}"
    )
    report = json.loads(report_path.read_text())
    assert [run["run"] for run in report["runs"]] == [1]
    assert report["interrupted"] is True


def test_offline_chaos_interrupted_in_its_first_run_writes_no_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from longjobs.offline import chaos

    def interrupted(*args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(chaos, "run_one", interrupted)

    try:
        code = chaos.main(3, 1, tmp_path / "report.json", quiet=True)
    except KeyboardInterrupt:
        pytest.fail("the interrupt left the command: a traceback")

    assert code == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        "interrupted: the campaign stopped before its first run ended, and wrote no report"
    )
    assert not (tmp_path / "report.json").exists()
