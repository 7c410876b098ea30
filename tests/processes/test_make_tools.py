"""`make tools` states the Node versions the CDK supports: a note on Node 20 (or any other) and no failure;
silence on 22 and 24; a missing Node or Python 3.13 stops it with what to install, and `make test` stops so
without a Python 3.11. Stand-in `node`, `java` and Python scripts on PATH stand for each machine (no JVM or
Node starts).

`make` finds Python 3.13 where pyenv keeps it when the PATH's `python3.13` is a shim that fails, and makes
a .venv on another Python anew: real interpreters for the first, whose version check is what is tested;
stand-ins for the second (a real venv takes 20 s on a busy machine)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import REPO_ROOT, find_python

WORKING_PYTHON = '#!/bin/sh\necho "$0"\n'
"""A Python that runs: the Makefile's check prints the interpreter's path (`sys.executable`) and exits 0."""
PYENV_SHIM = '#!/bin/sh\necho "pyenv: $(basename $0): command not found" >&2\nexit 127\n'
"""pyenv's shim for a Python that is installed but not selected (`pyenv global` is another version)."""


def stand_ins(folder: Path, scripts: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in scripts.items():
        script = folder / name
        script.write_text(body if body.startswith("#!") else f"#!/bin/sh\n{body}\n", encoding="utf-8")
        script.chmod(0o755)


def run_make(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """make in the repository with only `tmp_path/bin` on the PATH and `tmp_path` as HOME (its pyenv, if any,
    is `tmp_path/.pyenv`)."""
    bin_dir = tmp_path / "bin"
    for tool in ("sed", "sh", "echo", "ls", "sort", "mkdir", "cp", "rm", "touch"):  # what the recipes run
        found = shutil.which(tool)
        if found is not None and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    make = shutil.which("make")
    assert make is not None
    return subprocess.run(
        [make, "--no-print-directory", "-C", str(REPO_ROOT), *args],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def make_tools(
    tmp_path: Path, node_version: str | None, *, pythons: tuple[str, ...] = ("3.13",)
) -> subprocess.CompletedProcess[str]:
    """`make tools` with only stand-ins for `java`, the `pythons` and (unless None) `node`."""
    scripts = {"java": 'echo "openjdk version \\"17.0.2\\"" >&2'}
    scripts.update({f"python{version}": WORKING_PYTHON for version in pythons})
    if node_version is not None:
        scripts["node"] = f"echo {node_version}"
    stand_ins(tmp_path / "bin", scripts)
    return run_make(tmp_path, "tools")


def test_make_tools_notes_node_20_and_goes_on(tmp_path: Path) -> None:
    done = make_tools(tmp_path, "v20.20.2")

    assert done.returncode == 0, done.stderr
    assert "Node 20 works here, but it is past its end of life" in done.stderr
    assert "the CDK supports Node 22 and 24" in done.stderr


@pytest.mark.parametrize("version", ["v22.11.0", "v24.1.0"])
def test_make_tools_says_nothing_on_a_supported_node(tmp_path: Path, version: str) -> None:
    done = make_tools(tmp_path, version)

    assert (done.returncode, done.stderr) == (0, "")


def test_make_tools_names_the_supported_versions_on_another_node(tmp_path: Path) -> None:
    done = make_tools(tmp_path, "v18.20.4")

    assert done.returncode == 0
    assert "Node 18 is not one the CDK supports; it supports Node 22 and 24" in done.stderr


def test_make_tools_stops_without_node_naming_what_to_install(tmp_path: Path) -> None:
    done = make_tools(tmp_path, None)

    assert done.returncode != 0
    assert "needs Node.js for the CDK: install Node 22 or 24" in done.stderr


def test_make_tools_stops_without_python_3_13_naming_what_to_install(tmp_path: Path) -> None:
    done = make_tools(tmp_path, "v22.11.0", pythons=())

    assert done.returncode != 0
    assert "make tools needs Python 3.13, the functions' Lambda runtime: found no python3.13" in done.stderr
    assert "pyenv install 3.13" in done.stderr


def test_make_test_stops_without_python_3_11_naming_what_to_install(tmp_path: Path) -> None:
    """`make test` checks for Glue's Python (`glue-python`) beside `tools`; the demo does not need it."""
    stand_ins(tmp_path / "bin", {"python3.13": WORKING_PYTHON})

    done = run_make(tmp_path, "glue-python")

    assert done.returncode != 0
    assert "make glue-python needs Python 3.11 too, Glue 5.x's Python" in done.stderr
    assert "pyenv install 3.11" in done.stderr
    assert make_tools(tmp_path, "v22.11.0", pythons=("3.13",)).returncode == 0, "make tools needs no 3.11"

    stand_ins(tmp_path / "bin", {"python3.11": WORKING_PYTHON})

    assert run_make(tmp_path, "glue-python").returncode == 0


def test_make_takes_pyenvs_python_3_13_when_the_path_has_a_failing_shim(tmp_path: Path) -> None:
    """The PATH's `python3.13` is pyenv's shim, which fails; pyenv's versions folder has a 3.13.9 that is
    really another Python (the check runs it) and a 3.13.0 that is 3.13: make creates .venv with the latter."""
    other = find_python((3, 11))
    assert other is not None, "tests/processes/test_python_versions.py needs a Python 3.11 too"
    versions = tmp_path / ".pyenv" / "versions"
    for version, target in (("3.13.0", os.path.realpath(sys.executable)), ("3.13.9", other)):
        (versions / version / "bin").mkdir(parents=True)
        (versions / version / "bin" / "python3.13").symlink_to(target)
    stand_ins(tmp_path / "bin", {"python3.13": PYENV_SHIM})
    venv = tmp_path / "venv"

    done = run_make(tmp_path, "-n", f"VENV={venv}", f"{venv}/.python-3.13")  # -n: prints the recipe, runs none

    assert done.returncode == 0, done.stderr
    assert f"{versions}/3.13.0/bin/python3.13 -m venv {venv}" in done.stdout


def test_make_stops_when_no_python_3_13_runs(tmp_path: Path) -> None:
    stand_ins(tmp_path / "bin", {"python3.13": PYENV_SHIM})

    done = run_make(tmp_path, f"VENV={tmp_path}/venv", "install")

    assert done.returncode != 0
    assert "make install needs Python 3.13" in done.stderr
    assert not (tmp_path / "venv").exists()


def test_make_makes_a_venv_on_another_python_anew(tmp_path: Path) -> None:
    """A .venv from before the move to 3.13: its Python is 3.11 (a stand-in that fails the version check).
    make removes it, says so, and creates it on Python 3.13 (a stand-in that makes a venv of itself)."""
    venv = tmp_path / "venv"
    stand_ins(venv / "bin", {"python": 'case "$1" in --version) echo "Python 3.11.7" ;; *) exit 1 ;; esac'})
    (venv / ".installed").touch()
    python = '#!/bin/sh\nif [ "$1" = -m ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; else echo "$0"; fi\n'
    stand_ins(tmp_path / "bin", {"python3.13": python})

    done = run_make(tmp_path, f"VENV={venv}", f"{venv}/.python-3.13")

    assert done.returncode == 0, done.stderr
    assert f"{venv} runs Python 3.11.7, not Python 3.13: making it anew" in done.stderr
    assert f"{tmp_path}/bin/python3.13 -m venv {venv}" in done.stdout
    assert (venv / "bin" / "python").read_text(encoding="utf-8") == python, "the new venv's Python"
    assert not (venv / ".installed").exists(), "nothing of the old venv is kept"

    again = run_make(tmp_path, f"VENV={venv}", f"{venv}/.python-3.13")

    assert (again.returncode, again.stderr) == (0, "")
    assert "is up to date" in again.stdout
