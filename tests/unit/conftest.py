"""Unit tests are pure: any attempt to open a network connection fails the test. A Unix socket is not the
network: multiprocessing's forkserver talks to its server over one (compileall's workers use it)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest


def _local_only(original: Callable[..., Any]) -> Callable[..., Any]:
    def connect(sock: socket.socket, address: Any) -> Any:
        if sock.family == socket.AF_UNIX:
            return original(sock, address)
        raise AssertionError(f"unit tests must not touch the network: connect({address!r})")

    return connect


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _local_only(socket.socket.connect))
    monkeypatch.setattr(socket.socket, "connect_ex", _local_only(socket.socket.connect_ex))
