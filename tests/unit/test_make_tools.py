"""`make tools` states the Node versions the CDK supports: a note on Node 20 (or any other) and no failure;
silence on 22 and 24; a missing Node stops it with what to install. Stand-in `node` and `java` scripts on
PATH stand for each machine (no JVM or Node starts)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import REPO_ROOT


def make_tools(tmp_path: Path, node_version: str | None) -> subprocess.CompletedProcess[str]:
    """`make tools` with only stand-ins for `java` and (unless None) `node` besides the shell's tools."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_ins = {"java": 'echo "openjdk version \\"17.0.2\\"" >&2'}
    if node_version is not None:
        stand_ins["node"] = f"echo {node_version}"
    for name, body in stand_ins.items():
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
        script.chmod(0o755)
    for tool in ("sed", "sh", "echo"):  # what the recipe itself runs, without the rest of the PATH
        found = shutil.which(tool)
        if found is not None:
            (bin_dir / tool).symlink_to(found)
    make = shutil.which("make")
    assert make is not None
    return subprocess.run(
        [make, "--no-print-directory", "-C", str(REPO_ROOT), "tools"],
        env={"PATH": str(bin_dir), "HOME": os.environ.get("HOME", "/")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


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
