"""Pipeline throughput: events per second through the PySpark events pipeline on `local[2]`, end to end.

What runs is `longjobs.pipeline.job.run`, the function the offline Spark worker calls and the Glue script wraps,
on one generated partition (`longjobs.pipeline.generate`, 5,000,000 events by default). The partition is
generated once and cached under `out/bench/` (keyed by events, seed and the generator's format
version), because generating it takes longer than a run.

Each timed run writes into a fresh output folder; one small untimed run first warms the JVM (class
loading, code generation), as a Glue worker or the offline worker is warm after its first job. Per
run: wall seconds of `run()`, events per second (lines read / wall), and the seconds of each stage
as the summary reports them. Peak memory is the high-water resident set (`VmHWM`) of the Python
driver and of the Spark JVM it started, read from `/proc` at the end (Linux only). The benchmark
checks each run's counts against the generator's manifest, so the figures measure correct work.

Run from the repository root: `python -m benchmarks.pipeline_throughput [--events N] [--repeat R]
[--driver-memory 4g] [--json]`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from longjobs.pipeline.generate import FORMAT_VERSION, Manifest, generate, read_manifest
from longjobs.pipeline.job import run
from longjobs.pipeline.params import PipelineParams
from longjobs.pipeline.session import local_session

DATE = "2024-05-01"
SEED = 1
CACHE = Path("out/bench")
WARMUP_EVENTS = 20_000
GOAL_EVENTS_PER_S = 120_000
SHUFFLE_PARTITIONS = 12
"""Measured best of 8, 12, 16 and 24 for 5,000,000 events (interleaved runs): the de-duplication's
partitions and the 24 hours of the events write spread evenly over the two cores."""
STAGES = ("read_quarantine", "dedupe_events", "user_hourly", "type_daily")


@dataclass(frozen=True)
class RunResult:
    wall_s: float
    events_per_s: float
    stages: dict[str, float]


def cached_partition(events: int, seed: int = SEED, cache: Path = CACHE) -> tuple[Path, Manifest]:
    """The generated partition for (events, seed), made on first use."""
    folder = cache / f"events-{events}-seed{seed}-v{FORMAT_VERSION}" / f"date={DATE}"
    manifest = read_manifest(folder)
    if manifest is None or (manifest.events, manifest.seed) != (events, seed):
        shutil.rmtree(folder, ignore_errors=True)
        manifest = generate(DATE, events, folder, seed=seed)
    return folder, manifest


def timed_run(spark: SparkSession, source: Path, manifest: Manifest, out: Path) -> RunResult:
    shutil.rmtree(out, ignore_errors=True)
    params = PipelineParams(
        input=str(source), date=DATE, output=str(out / "curated"), quarantine=str(out / "quarantine")
    )
    started = time.perf_counter()
    summary = run(spark, params)
    wall = time.perf_counter() - started
    check(summary, manifest)
    return RunResult(
        round(wall, 3), round(manifest.events / wall), {stage: summary["seconds"][stage] for stage in STAGES}
    )


def check(summary: dict[str, Any], manifest: Manifest) -> None:
    """The run found what the generator put in: otherwise its speed means nothing."""
    found = (summary["rows_read"], summary["rows_written"]["events"], summary["duplicates_dropped"])
    expected = (manifest.events, manifest.unique_valid, manifest.duplicates)
    if found != expected:
        raise AssertionError(f"pipeline counts {found} differ from the generator's {expected}")


def peak_rss_mib() -> dict[str, float]:
    """High-water resident set of this process and of the Spark JVM it started, in MiB."""
    peaks = {"driver_python": _vm_hwm(os.getpid())}
    for pid in _descendants(os.getpid()):
        name = Path(f"/proc/{pid}/comm").read_text().strip()
        if name == "java":
            peaks["spark_jvm"] = _vm_hwm(pid)
    return peaks


def _vm_hwm(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                # the command name is in parentheses and may hold spaces: the parent pid follows it
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def build_parser() -> argparse.ArgumentParser:
    """The command line (apart from the run: docs/benchmarks.md's commands are parsed by a test)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.pipeline_throughput", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--events", type=int, default=5_000_000, help="events in the partition (default 5000000)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs (default 5)")
    parser.add_argument("--driver-memory", default="4g", help="spark.driver.memory of the local session (default 4g)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.events < 1 or args.repeat < 1:
        parser.error("--events and --repeat must be at least 1")

    generated = time.perf_counter()
    source, manifest = cached_partition(args.events)
    generate_s = time.perf_counter() - generated
    warm_source, warm_manifest = cached_partition(min(WARMUP_EVENTS, args.events))
    spark = local_session(
        "pipeline-throughput", shuffle_partitions=SHUFFLE_PARTITIONS, driver_memory=args.driver_memory
    )
    work = CACHE / "runs"
    try:
        timed_run(spark, warm_source, warm_manifest, work / "warmup")
        results = [timed_run(spark, source, manifest, work / f"run-{index}") for index in range(args.repeat)]
        memory = peak_rss_mib()
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    median = {
        "events": args.events,
        "events_per_s": statistics.median(r.events_per_s for r in results),
        "wall_s": statistics.median(r.wall_s for r in results),
        "stages_s": {stage: statistics.median(r.stages[stage] for r in results) for stage in STAGES},
        "peak_rss_mib": memory,
        "generate_or_cache_s": round(generate_s, 1),
        "runs": [{"wall_s": r.wall_s, "events_per_s": r.events_per_s, "stages_s": r.stages} for r in results],
        "goal_events_per_s": GOAL_EVENTS_PER_S,
    }
    if args.json:
        print(json.dumps(median, indent=2))
        return
    print(f"pipeline on local[2]: {args.events:,} events, {args.repeat} timed runs (medians)")
    print(f"{'measure':<28} {'median':>12}   runs")
    runs = "  ".join(f"{r.events_per_s:,.0f}" for r in results)
    print(f"{'events/s end to end':<28} {median['events_per_s']:>12,.0f}   {runs}")
    print(f"{'wall s':<28} {median['wall_s']:>12.2f}   " + "  ".join(f"{r.wall_s:.2f}" for r in results))
    for stage in STAGES:
        values = "  ".join(f"{r.stages[stage]:.2f}" for r in results)
        print(f"{'stage ' + stage + ' s':<28} {median['stages_s'][stage]:>12.2f}   {values}")
    for name, mib in memory.items():
        print(f"{'peak RSS ' + name + ' MiB':<28} {mib:>12,.0f}")
    verdict = "met" if median["events_per_s"] >= GOAL_EVENTS_PER_S else "NOT met"
    print(f"goal: at least {GOAL_EVENTS_PER_S:,} events/s: {verdict}")


if __name__ == "__main__":
    main()
