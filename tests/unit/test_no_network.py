"""The unit tests' guard: a connection over the network fails the test, a Unix socket's goes through."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest


def test_no_network_a_tcp_connection_fails_the_test() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, pytest.raises(AssertionError, match="network"):
        sock.connect(("127.0.0.1", 9))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, pytest.raises(AssertionError, match="network"):
        sock.connect_ex(("127.0.0.1", 9))


def test_no_network_a_unix_socket_connects(tmp_path: Path) -> None:
    path = str(tmp_path / "socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server, socket.socket(socket.AF_UNIX) as client:
        server.bind(path)
        server.listen(1)
        client.connect(path)
        assert client.getpeername() == path
