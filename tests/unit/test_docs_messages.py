"""docs/messages.md's table of job types states each built-in type's parameter ranges: a message inside a
stated range is one the receiver takes (with the default settings), so a producer reading the page does not
send what goes straight to the DLQ."""

from __future__ import annotations

import json
import re

import pytest

from longjobs.engine.delivery.models import BadInput, parse_message
from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog
from longjobs.engine.settings import Settings
from tests import REPO_ROOT


def test_docs_messages_wait_range_is_what_the_receiver_takes() -> None:
    page = (REPO_ROOT / "docs" / "messages.md").read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if line.startswith("| `wait` |"))
    found = re.search(r"`seconds` \((\d+)\.\.(\d+)", row.replace(",", ""))
    assert found, f"the wait row names no range of seconds: {row}"
    low, high = int(found[1]), int(found[2])
    settings, catalog = Settings(), JobCatalog(BUILTIN_TYPES)
    for seconds in (low, high):
        body = json.dumps({"job_id": f"wait-{seconds}", "type": "wait", "params": {"seconds": seconds}})
        parse_message(body, settings, catalog)  # BadInput (the DLQ) for a value the page says is valid
    past = json.dumps({"job_id": "wait-past", "type": "wait", "params": {"seconds": high + 1}})
    with pytest.raises(BadInput, match="does not end within renewal"):
        parse_message(past, settings, catalog)  # the page's bound is the receiver's, not one below it
