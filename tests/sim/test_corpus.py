"""The regression corpus: every seed that ever failed, run again; any difference from its expected
result (`pass`, or the property it breaks) fails. A fix flips its entry in corpus.json. An entry with
`"notifications": false` was found before S3 notifications joined the workload: it is drawn without
them, so its world stays the one that found its defect; one with `"one_marker": false`, before notifications
of one marker joined it, is drawn with notifications of several markers only; one with `"fifo_operator": false`,
a FIFO seed found before the operator cancelled and redrove on FIFO queues, is drawn without them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from longjobs.sim.campaign import run_seed

CORPUS = json.loads((Path(__file__).parent / "corpus.json").read_text(encoding="utf-8"))["entries"]


@pytest.mark.parametrize("entry", CORPUS, ids=[f"seed{e['seed']}-{e['profile']}" for e in CORPUS])
def test_corpus_seed_gives_its_expected_result(entry: dict[str, Any]) -> None:
    result = run_seed(
        entry["seed"],
        entry["profile"],
        keep_calls=False,
        notifications=entry.get("notifications", True),
        one_marker=entry.get("one_marker", True),
        fifo_operator=entry.get("fifo_operator", True),
    )
    got = "pass" if result.violation is None else result.violation.property
    detail = "" if result.violation is None else f": {result.violation.detail}"
    assert got == entry["expected"], f"seed {entry['seed']} ({entry['found'][:80]}...) gave {got}{detail}"
