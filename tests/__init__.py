"""The project's tests: `unit` (pure), `functional` (moto), `infra` (synth), `pipeline` (local Spark),
`e2e` (the real offline runtime)."""

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from longjobs.construct import quiet_node_notices

quiet_node_notices()  # before any test imports aws_cdk (jsii's Node process, and the `cdk` runs, inherit it)

REPO_ROOT = Path(__file__).resolve().parent.parent
"""This repository's folder: `app.py`, `cdk.json`, `jobs.json` and the `longjobs` package."""


def run_python(args: Sequence[str], *, timeout: float, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """This interpreter run on `args` in a process of its own, with this repository importable, its output
    captured as text; its exit status is the caller's to check."""
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )


class ProcessExited(BaseException):
    """What the `process_exits` fixture (tests/conftest.py) raises in the process's real exit's place."""


def find_python(version: tuple[int, int]) -> str | None:
    """A Python `version` that runs, as the Makefile's `find_python` finds one: `pythonX.Y` on the PATH, else
    the newest X.Y.z in pyenv's versions folder (under pyenv the PATH's `pythonX.Y` is a shim that fails
    unless X.Y is a selected version)."""
    name = "python{}.{}".format(*version)
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    installed = sorted(
        pyenv.glob("{}.{}.*/bin/{}".format(*version, name)),
        key=lambda path: [int(part) if part.isdigit() else -1 for part in path.parts[-3].split(".")],
        reverse=True,
    )
    check = f"import sys; print(sys.executable) if sys.version_info[:2] == {version} else sys.exit(1)"
    for candidate in [shutil.which(name), *map(str, installed)]:
        if candidate is None:
            continue
        found = subprocess.run([candidate, "-c", check], capture_output=True, text=True, check=False)
        if found.returncode == 0:
            return found.stdout.strip()
    return None
