"""The delivery walk (`benchmarks/delivery_walk.py`): what it counts, and that it walks the happy path."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from benchmarks.delivery_walk import Walk, walk_delivery


@pytest.fixture
def restored_environment() -> Iterator[None]:
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def test_delivery_walk_counts_a_return_for_each_stay_in_a_file_already_left() -> None:
    walk = Walk(until="start_execution")
    walk.stays = ["handler.py", "service.py", "store.py", "service.py", "store.py", "execution.py"]
    summary = walk.summary()
    assert (summary["files"], summary["stays"], summary["returns"]) == (4, 6, 2)


@pytest.mark.usefixtures("restored_environment")
def test_delivery_walk_goes_from_the_handler_to_start_execution_through_project_files_only() -> None:
    summary = walk_delivery()  # raises unless the message's execution started and the message was deferred
    walk = summary["walk"]
    assert "longjobs/functions/receiver.py" in walk[:3], walk[:3]
    assert walk[-1] == "longjobs/engine/execution.py", "StartExecution is called from the execution module"
    assert all(name.startswith("longjobs/") and not name.startswith("longjobs/sim/") for name in walk)
    assert summary["files"] == len(set(walk)) and summary["stays"] == len(walk)
    assert all(a != b for a, b in itertools.pairwise(walk)), "calls in a row into one file are one stay"
