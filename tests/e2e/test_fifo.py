"""FIFO end to end: two message groups of three `wait` jobs on the offline runtime's FIFO queues. Within a
group the jobs run one after the other in send order; the groups run side by side."""

from __future__ import annotations

import itertools

import pytest

from tests.e2e.conftest import Runner
from tests.short_settings import SHORT_THRESHOLD

pytestmark = pytest.mark.e2e

GROUPS = {"tenant-a": (4, 1, 2), "tenant-b": (1, 3, 1)}
"""Each group's jobs, in send order: their seconds."""


def test_fifo_groups_run_in_order_within_and_side_by_side_across(run: Runner) -> None:
    jobs = [
        {"id": f"{group[-1]}{index}", "type": "wait", "seconds": seconds, "group": group}
        for index, pair in enumerate(zip(*(GROUPS[g] for g in GROUPS), strict=True))
        for group, seconds in zip(GROUPS, pair, strict=True)
    ]  # sent interleaved: a0, b0, a1, b1, a2, b2

    result = run(settings={**SHORT_THRESHOLD, "fifo": True}, jobs=jobs, timeout_s=90)

    assert result.violations == [], "the report checks each group's order too"
    report = result.report["jobs"]
    assert all(job["final"] == "deleted" and job["executions"] == 1 for job in report.values())
    for group in GROUPS:
        ids = [job["id"] for job in jobs if job["group"] == group]
        runs = [result.tracks[job_id].executions[0] for job_id in ids]
        assert [report[job_id]["group"] for job_id in ids] == [group] * 3
        assert [r.started for r in runs] == sorted(r.started for r in runs), f"{group}: started in send order"
        for earlier, later in itertools.pairwise(runs):
            assert earlier.job_end <= later.started, f"{group}: {later.name} started while {earlier.name} ran"
        started = [report[job_id]["started_at"] for job_id in ids]
        finished = [report[job_id]["finished_at"] for job_id in ids]
        assert all(s is not None and f is not None and 0 <= s < f for s, f in zip(started, finished, strict=True))
    a_span = (report["a0"]["started_at"], report["a2"]["finished_at"])
    b_span = (report["b0"]["started_at"], report["b2"]["finished_at"])
    assert a_span[0] < b_span[1] and b_span[0] < a_span[1], "the two groups ran side by side"
    assert report["a0"]["started_at"] < report["b0"]["finished_at"], "b0 did not wait for a0"
