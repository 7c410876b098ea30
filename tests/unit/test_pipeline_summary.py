"""A job's summary as the workflow reads it: JSON Step Functions takes, within what a state may hold."""

from __future__ import annotations

import datetime as dt
import json

from longjobs.engine.delivery.models import loads_json
from longjobs.pipeline.glue_entry import SUMMARY_MAX_BYTES, summary_json


def test_pipeline_summary_names_the_numbers_json_has_no_form_for() -> None:
    """`States.StringToJson` and `SendTaskSuccess` take JSON as RFC 8259 defines it: Python's `NaN` and
    `Infinity` are not, and the workflow could not read the run's summary."""
    summary = {"mean": float("nan"), "rows": [1, float("inf")], "by": {"x": -float("inf")}, "day": dt.date(2026, 12, 6)}
    text = summary_json(summary)
    assert loads_json(text) == {"by": {"x": "-inf"}, "day": "2026-12-06", "mean": "nan", "rows": [1, "inf"]}


def test_pipeline_summary_too_large_for_a_state_is_its_size_and_keys() -> None:
    """A summary over `SUMMARY_MAX_BYTES` would fail the execution with an error no catch takes
    (States.DataLimitExceeded): its size and keys stand for it."""
    summary = {"rows": 12, "ids": ["x" * 100] * 1_000}
    text = summary_json(summary)
    assert json.loads(text) == {
        "summary_bytes": len(json.dumps(summary, sort_keys=True)),
        "summary_keys": ["ids", "rows"],
        "truncated": True,
    }
    assert len(summary_json({"rows": 12}).encode()) < SUMMARY_MAX_BYTES
    assert json.loads(summary_json({"rows": 12})) == {"rows": 12}
