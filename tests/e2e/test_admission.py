"""Admission end to end: a backfill of one limited type on the offline runtime."""

from __future__ import annotations

import pytest

from longjobs.engine.jobs import BUILTIN_TYPES
from tests.e2e.conftest import Runner
from tests.short_settings import SHORT_THRESHOLD

pytestmark = pytest.mark.e2e

WAIT = next(t for t in BUILTIN_TYPES if t.name == "wait")


def test_admission_backfill_runs_two_at_a_time_and_deletes_every_job(run: Runner) -> None:
    """Eight 5 s jobs of a `wait` type limited to two at once: six find it full and wait for a slot
    (no attempt, so `max_attempts` 3 is never near), each is admitted as a slot frees."""
    limited = {**WAIT.model_dump(mode="json", exclude_none=True, exclude={"description"}), "max_concurrency": 2}

    result = run(
        settings={**SHORT_THRESHOLD, "max_attempts": 3, "admission_wait_base_s": 2},
        job_types=[limited],
        jobs=[{"id": f"day{i}", "type": "wait", "seconds": 5} for i in range(8)],
    )

    totals = result.report["totals"]
    assert result.report["ok"] is True, result.violations
    assert (totals["deleted"], totals["dlq"]) == (8, 0)
    assert totals["max_concurrent_by_type"] == {"wait": 2}, "never more than two at once, and the slots used"
    assert all(job["executions"] == 1 for job in result.report["jobs"].values()), "waiting is no attempt"
    spans = [e.job for track in result.tracks.values() for e in track.executions]
    assert all(span is not None and span[1] is not None for span in spans), "measured on each job's own span"
