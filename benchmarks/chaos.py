"""Chaos campaign: does the processor keep its invariants under faults? The goal is 0 violations in 50 runs.

Each run is a scenario drawn by `longjobs.offline.chaos.draw_scenario` from the seed (3 to 6 `wait` jobs of 1 to
8 s, sometimes a job that always fails and a poison message, short `threshold` or `adaptive` settings, and
a random mix of every fault type but `kill_worker`), run whole on the offline runtime (moto's server, the
real handlers, the real workflow) by `longjobs.offline.runtime.run_scenario`. See `longjobs/offline/chaos.py`
for the draw and `longjobs/offline/report.py` for the checks behind each run's `ok`.

Measures, over the campaign: runs with a violation, violations (each a sentence in the run's report),
double runs (a message with two executions RUNNING at once, invariant 8), lapses no fault explains, lost
messages, stuck leases (ACTIVE at the end with no running execution), faults injected by mode, faults that
could not be applied, and the wall time. A run takes 10 to 25 s on a shared 2-core machine.

Run from the repository root: `python -m benchmarks.chaos [--runs N] [--seed S] [--out DIR] [--json]`.
The campaign's full report (every run's scenario and violations) is written to `DIR/chaos.json`; each
run's logs are under `DIR/chaos-work/`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from longjobs.offline.chaos import Campaign, RunOutcome, run_campaign, summary

DESCRIPTION = __doc__.split("\n")[0] if __doc__ else ""


def measures(campaign: Campaign, wall_s: float) -> dict[str, Any]:
    totals = campaign.totals()
    return {
        "runs": len(campaign.runs),
        "seed": campaign.seed,
        "runs_with_violations": sum(1 for run in campaign.runs if run.violations),
        **totals,
        "wall_s": round(wall_s, 1),
        "run_wall_s_max": max((run.wall_s for run in campaign.runs), default=0.0),
    }


def build_parser() -> argparse.ArgumentParser:
    """The command line (apart from the run: docs/benchmarks.md's commands are parsed by a test)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=DESCRIPTION)
    parser.add_argument("--runs", type=int, default=50, help="chaos runs (default 50)")
    parser.add_argument("--seed", type=int, default=1, help="the campaign's seed (default 1)")
    parser.add_argument(
        "--out", type=Path, default=Path("out/bench/chaos"), help="where the runs go (default out/bench/chaos)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out}: a file, not a directory")

    def progress(run: RunOutcome) -> None:
        print(f"run {run.index}/{args.runs}: {len(run.violations)} violation(s), {run.wall_s:.1f} s", file=sys.stderr)

    started = time.monotonic()
    campaign = run_campaign(args.runs, args.seed, args.out / "chaos-work", on_run=progress)
    result = measures(campaign, time.monotonic() - started)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "chaos.json").write_text(json.dumps({**result, **campaign.as_json()}, indent=2) + "\n", "utf-8")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(summary(campaign))
        print(f"{result['runs_with_violations']} of {result['runs']} runs broke an invariant; {result['wall_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
