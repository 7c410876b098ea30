"""The offline runtime (`demo`, `run`, `serve`, `chaos`) keeps jsii's Node.js notices out of its output.

jsii's Python side prints each line its Node process writes outside its protocol as a Python byte
string (`b'!!  Node 20 is end-of-life ...'`): eleven such lines on Node 20 each time the CDK loads.
Importing `longjobs.offline` sets jsii's own switches first (`quiet_node_notices`). Checked in a fresh
interpreter with none of the switches set, against a bare `import aws_cdk` that shows what they hide
on a Node jsii warns about."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from longjobs.construct import _node_major
from tests import REPO_ROOT

WARNED_NODE_MAJORS = {"20"}
"""Node versions jsii warns about with the pinned jsii (end of life)."""


def python(code: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter, with no JSII_* variable set (as on a user's machine)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("JSII_")}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_offline_node_notices_stay_out_of_the_runtimes_output() -> None:
    done = python("import longjobs.offline, aws_cdk")

    assert done.returncode == 0, done.stderr
    assert "end-of-life" not in done.stderr and "b'" not in done.stderr, done.stderr


def test_offline_node_notices_stay_out_of_a_benchmarks_output() -> None:
    """A benchmark's module loads the CDK at its import (the backfill's workflow constants): the README's
    `python -m benchmarks.backfill --help` prints no notice."""
    done = python("import benchmarks.backfill, aws_cdk")

    assert done.returncode == 0, done.stderr
    assert "end-of-life" not in done.stderr and "b'" not in done.stderr, done.stderr


def test_offline_node_notices_are_byte_strings_without_the_switches() -> None:
    """What the test above keeps out: on a Node jsii warns about, a bare import prints its notice as bytes."""
    if _node_major() not in WARNED_NODE_MAJORS:
        pytest.skip("jsii has no notice for this Node version")

    done = python("import aws_cdk")

    assert "b'!!  Node 20 is end-of-life" in done.stderr


def test_offline_installed_console_script_keeps_the_node_notices_out() -> None:
    """The `longjobs-offline` console script, as a user runs it (no JSII_* variable set), on a command that
    renders the workflow through the CDK (`sim` builds it with jsii): nothing of jsii's notice on stderr."""
    script = Path(sys.executable).with_name("longjobs-offline")
    assert script.exists(), "the package's console scripts are installed beside the interpreter"
    env = {key: value for key, value in os.environ.items() if not key.startswith("JSII_")}

    done = subprocess.run(
        [str(script), "sim", "--seed", "1"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )

    assert done.returncode == 0, done.stderr
    assert "every property held" in done.stdout
    assert "b'!!" not in done.stderr and "end-of-life" not in done.stderr, done.stderr


def test_offline_node_stopped_by_ctrl_c_leaves_no_traceback_at_exit() -> None:
    """Ctrl-C reaches jsii's Node.js process too, and ends it. At exit, jsii's hook (`_NodeProcess.stop`) then
    writes to the closed pipe. The offline command drops that BrokenPipeError, so its one-line message is the
    last thing printed; any other error of an exit hook is still shown."""
    code = """
import atexit
from longjobs.offline.programs import quiet_stopped_node

class _NodeProcess:
    def stop(self):
        raise BrokenPipeError(32, "Broken pipe")

class Other:
    def stop(self):
        raise BrokenPipeError(32, "not jsii's")

atexit.register(Other().stop)
atexit.register(_NodeProcess().stop)
quiet_stopped_node()
"""
    done = python(code)

    assert "_NodeProcess" not in done.stderr, done.stderr
    assert "Other.stop" in done.stderr and "not jsii's" in done.stderr, done.stderr
