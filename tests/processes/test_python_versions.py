"""The project's Python versions agree. The functions run on Lambda's python3.13, the Python the project
installs, lints, type-checks and tests on. The code shipped to Glue 5.x runs on Glue's Python 3.11: ruff
checks those files as 3.11 (its per-file target version) and a Python 3.11 compiles them as the construct
stages them. A Python 3.11 is found as the Makefile finds one (`make tools` names what to install)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from longjobs.construct.assets import staged_package
from longjobs.construct.constants import LAMBDA_RUNTIME, POWERTOOLS_LAYER_PARAMETER
from longjobs.engine.jobs import load_catalog_file
from tests import REPO_ROOT, find_python

PROJECT_PYTHON = (3, 13)
GLUE_PYTHON = (3, 11)
"""Glue 5.0's and 5.1's Python (https://docs.aws.amazon.com/glue/latest/dg/release-notes.html)."""
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
RUFF = Path(sys.executable).parent / "ruff"
PEP_695 = "type Alias = int\n"
"""Python 3.12 syntax: a file of the code shipped to Glue must not have it."""


@pytest.fixture(scope="module")
def glue_python() -> str:
    found = find_python(GLUE_PYTHON)
    if found is None:
        pytest.fail(
            "no Python 3.11 (Glue 5.x's) to compile the code shipped to Glue: install one (pyenv install 3.11; "
            "Debian 12: apt-get install python3; macOS: brew install python@3.11)"
        )
    return found


@pytest.fixture(scope="module")
def shipped_to_glue() -> Iterator[dict[str, Path]]:
    """Every Python file the stack ships to Glue, by its path in this repository: the pipeline package's
    asset as the construct stages it (`longjobs/__init__.py` and `longjobs/pipeline/`) and the entry of
    each pyspark job type in jobs.json (the Glue script, `glue_entry.py`, is in the pipeline package)."""
    stage = staged_package("pipeline")
    files = {path.relative_to(stage).as_posix(): path for path in sorted(stage.rglob("*.py"))}
    with contextlib.chdir(REPO_ROOT):  # jobs.json's entries are relative to where `cdk` runs
        catalog = load_catalog_file(REPO_ROOT / "jobs.json", strict=True)
        entries = [job_type.entry_file.resolve() for job_type in catalog if job_type.runner == "pyspark"]
    files.update({entry.relative_to(REPO_ROOT).as_posix(): entry for entry in entries})
    yield files
    shutil.rmtree(stage)


def compile_all(python: str, files: list[Path]) -> subprocess.CompletedProcess[str]:
    """`python` compiles each file (no bytecode written); a syntax error names the file and line."""
    script = "import sys\nfor path in sys.argv[1:]:\n    compile(open(path, 'rb').read(), path, 'exec')"
    return subprocess.run([python, "-I", "-c", script, *map(str, files)], capture_output=True, text=True, check=False)


def ruff_on(source: str, path: str) -> subprocess.CompletedProcess[str]:
    """ruff's check of `source` as if it were the file at `path` (with that path's settings)."""
    return subprocess.run(
        [str(RUFF), "check", "--no-cache", "--stdin-filename", path, "-"],
        input=source,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )


def test_python_versions_the_project_runs_on_the_functions_python() -> None:
    """The tests run on the functions' runtime, which the asset's bytecode is compiled for
    (`compile_for_lambda` compiles only on that Python), and the checks and the package name the same."""
    runtime = "python{}.{}".format(*PROJECT_PYTHON)
    assert LAMBDA_RUNTIME.name == runtime
    assert sys.version_info[:2] == PROJECT_PYTHON, f"the tests run on Python {sys.version}, the functions on {runtime}"
    assert f"/{runtime}/" in POWERTOOLS_LAYER_PARAMETER, "the Powertools layer built for the runtime's Python"
    assert PYPROJECT["project"]["requires-python"] == ">={}.{}".format(*PROJECT_PYTHON)
    assert PYPROJECT["tool"]["ruff"]["target-version"] == "py{}{}".format(*PROJECT_PYTHON)
    assert PYPROJECT["tool"]["mypy"]["python_version"] == "{}.{}".format(*PROJECT_PYTHON)


def test_python_versions_the_code_shipped_to_glue_compiles_on_python_3_11(
    glue_python: str, shipped_to_glue: dict[str, Path]
) -> None:
    assert {"longjobs/__init__.py", "longjobs/pipeline/glue_entry.py", "jobs/wordcount.py"} <= set(shipped_to_glue)

    done = compile_all(glue_python, list(shipped_to_glue.values()))

    assert done.returncode == 0, done.stderr


def test_python_3_12_syntax_does_not_compile_on_the_glue_python(glue_python: str, tmp_path: Path) -> None:
    """The compile above tells 3.11 from later Pythons."""
    newer = tmp_path / "entry.py"
    newer.write_text(PEP_695, encoding="utf-8")

    done = compile_all(glue_python, [newer])

    assert done.returncode != 0 and "SyntaxError" in done.stderr and str(newer) in done.stderr


def test_ruff_checks_the_code_shipped_to_glue_as_python_3_11(shipped_to_glue: dict[str, Path]) -> None:
    """Each shipped file is under a `py311` pattern of ruff's per-file target version: ruff refuses 3.12
    syntax there (and its pyupgrade rules keep to 3.11), while the rest of the project is 3.13."""
    for path in shipped_to_glue:
        done = ruff_on(PEP_695, path)
        assert done.returncode == 1 and "on Python 3.11" in done.stdout, f"{path}: not checked as 3.11"
    assert ruff_on(PEP_695, "longjobs/engine/settle.py").returncode == 0, "the functions' code is 3.13"
