"""jsii's Node.js version notices are silenced where this project runs the CDK, and a user's own setting wins."""

from __future__ import annotations

import pytest

import longjobs.construct as construct
from longjobs.construct import NODE_NOTICES, quiet_node_notices

END_OF_LIFE, DEPRECATED = NODE_NOTICES


def test_node_notices_silenced_for_the_node_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(construct, "_node_major", lambda: "20")
    environ: dict[str, str] = {}
    quiet_node_notices(environ)
    assert environ == {END_OF_LIFE: "20", DEPRECATED: "1"}


def test_node_notices_keep_what_the_user_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(construct, "_node_major", lambda: "20")
    environ = {END_OF_LIFE: "", DEPRECATED: ""}  # the user wants to see them
    quiet_node_notices(environ)
    assert environ == {END_OF_LIFE: "", DEPRECATED: ""}


def test_node_notices_without_node_leave_jsii_to_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(construct, "_node_major", lambda: None)
    environ: dict[str, str] = {}
    quiet_node_notices(environ)
    assert environ == {DEPRECATED: "1"}
