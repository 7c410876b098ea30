"""The Glue entry's exit guard (`longjobs.pipeline.glue_entry.exit_fails_the_job`), used by both runtimes.

A job's `os._exit(n)` on the thread that runs it must fail that job, as its `sys.exit(n)` does, and leave
the process alive. Any other thread's `os._exit` still ends the process: the offline runtime runs its own
threads beside the jobs'. The process's real exit is replaced by a recorder here, so a call the guard
lets through fails the test rather than ending pytest (with status 0, for `os._exit(0)`)."""

from __future__ import annotations

import os
import re
import sys
import threading

import pytest

from longjobs.pipeline import glue_entry
from longjobs.pipeline.glue_entry import JobExit, exit_fails_the_job
from tests import ProcessExited


def test_exit_guard_os_exit_on_its_thread_is_job_exit(process_exits: list[int]) -> None:
    with (
        pytest.raises(JobExit, match=re.escape("the job called os._exit(3): it returned no summary")),
        exit_fails_the_job(),
    ):
        os._exit(3)

    assert process_exits == []


def test_exit_guard_os_exit_is_not_an_error_the_job_handles(process_exits: list[int]) -> None:
    """Where the job called it, `os._exit` raises a SystemExit, as `sys.exit` does: the job's own
    `except Exception` does not take it and go on as if nothing ended."""
    handled: list[Exception] = []
    went_on = []
    with pytest.raises(JobExit, match=re.escape("os._exit(3)")), exit_fails_the_job():
        try:
            os._exit(3)
        except Exception as exc:  # what a job may write around its work
            handled.append(exc)
        went_on.append(True)

    assert handled == []
    assert went_on == []
    assert process_exits == []


def test_exit_guard_sys_exit_is_job_exit(process_exits: list[int]) -> None:
    with (
        pytest.raises(JobExit, match=re.escape("the job called sys.exit(0): it returned no summary")),
        exit_fails_the_job(),
    ):
        sys.exit(0)

    assert process_exits == []


def test_exit_guard_os_exit_on_another_thread_exits(process_exits: list[int]) -> None:
    """The wrapper delegates to the process's exit for a thread outside any guarded block, while another
    thread is inside one: the runtime's own threads still exit for real."""
    inside, done = threading.Event(), threading.Event()

    def job() -> None:
        with exit_fails_the_job():
            inside.set()
            done.wait(10)

    guarded = threading.Thread(target=job)
    guarded.start()
    try:
        assert inside.wait(10)
        with pytest.raises(ProcessExited):
            os._exit(5)
    finally:
        done.set()
        guarded.join(10)

    assert process_exits == [5]


def test_exit_guard_nesting_and_exceptions_restore_the_thread(process_exits: list[int]) -> None:
    with pytest.raises(JobExit, match=re.escape("os._exit(2)")), exit_fails_the_job():
        with pytest.raises(JobExit, match=re.escape("os._exit(1)")), exit_fails_the_job():
            os._exit(1)
        os._exit(2)  # the outer block still guards
    with pytest.raises(ValueError, match="the job's own error"), exit_fails_the_job():
        raise ValueError("the job's own error")
    with pytest.raises(JobExit, match=re.escape("sys.exit(1)")), exit_fails_the_job():
        sys.exit(1)

    assert process_exits == []
    with pytest.raises(ProcessExited):
        os._exit(4)  # outside every block: the process's exit
    assert process_exits == [4]


def test_exit_guard_installs_its_wrapper_once(process_exits: list[int]) -> None:
    with exit_fails_the_job():
        wrapper = os._exit
    with exit_fails_the_job():
        assert os._exit is wrapper

    assert wrapper is not glue_entry._os_exit
