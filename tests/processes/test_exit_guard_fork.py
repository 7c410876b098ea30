"""The exit guard ends a process the job forks: only the process that entered the block is guarded.

A forked child inherits the forking thread, inside the job's guarded block. Its `os._exit` must still end
it: multiprocessing's fork start ends each child so, and a child that raised instead would run on in the
job's code, a second copy of it. A fresh interpreter stands in for the runtime's process."""

from __future__ import annotations

import os

import pytest

from tests import run_python

JOB = r"""
import multiprocessing
import os

from longjobs.pipeline.glue_entry import exit_fails_the_job


def work():
    print("child works", flush=True)


with exit_fails_the_job():
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    print("fork exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
    child = multiprocessing.get_context("fork").Process(target=work)
    child.start()
    child.join()
    print("multiprocessing exit", child.exitcode, flush=True)
print("job ends", flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_exit_guard_forked_child_exits_for_real() -> None:
    ended = run_python(["-c", JOB], timeout=60)

    assert ended.returncode == 0, ended.stderr
    assert ended.stdout.splitlines() == ["fork exit 7", "child works", "multiprocessing exit 0", "job ends"]
