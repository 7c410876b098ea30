"""Unit tests are pure: any attempt to open a network connection or to start a program fails the test
(tests that start processes live in tests/processes, tests/e2e and tests/infra). A Unix socket is not the
network: multiprocessing's forkserver talks to its server over one (compileall's workers use it)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest


def _local_only(original: Callable[..., Any]) -> Callable[..., Any]:
    def connect(sock: socket.socket, address: Any) -> Any:
        if sock.family == socket.AF_UNIX:
            return original(sock, address)
        raise AssertionError(f"unit tests must not touch the network: connect({address!r})")

    return connect


def _no_process(original: Callable[..., Any]) -> Callable[..., Any]:
    def popen(process: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.startswith("jsii."):  # the CDK's own Node process, which the workflow's rendering needs
            return original(process, *args, **kwargs)
        raise AssertionError(f"unit tests must not start programs: subprocess.Popen({args[:1]!r})")

    return popen


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _local_only(socket.socket.connect))
    monkeypatch.setattr(socket.socket, "connect_ex", _local_only(socket.socket.connect_ex))


@pytest.fixture(autouse=True)
def _no_program(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess.Popen, "__init__", _no_process(subprocess.Popen.__init__))
