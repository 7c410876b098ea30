"""Import time of each Lambda handler: the part of a cold start our code decides.

    python -m benchmarks.cold_start [--runs 9] [--json]

Each handler module is imported in a fresh interpreter (`python -X importtime -c "import <module>"`),
`--runs` times per case, once untimed first so the bytecode cache is warm (the Powertools layer ships
compiled modules; the functions' own asset is small). The figure is the handler module's cumulative
import time from `-X importtime`, median (and min/max) over the runs, with X-Ray tracing off and on
(`POWERTOOLS_TRACE_DISABLED`, inside a Lambda-like environment so Powertools would trace). The
largest imports of the last run are listed too, so a regression names its cause.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
HANDLERS = {
    "receiver": "longjobs.engine.receiver.handler",
    "extender": "longjobs.engine.extender.handler",
    "watcher": "longjobs.engine.watcher.handler",
}
BASE_ENV = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_LAMBDA_FUNCTION_NAME": "cold-start-benchmark",  # Powertools traces only inside Lambda
    "AWS_EXECUTION_ENV": "AWS_Lambda_python3.11",
    "POWERTOOLS_SERVICE_NAME": "long-jobs",
    "POWERTOOLS_METRICS_NAMESPACE": "LongJobs",
    "PYDANTIC_DISABLE_PLUGINS": "__all__",  # as the stack sets it (infra/functions.py)
}
_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)$")
TOP = 8


@dataclass(frozen=True)
class Case:
    handler: str
    tracing: bool
    median_ms: float
    min_ms: float
    max_ms: float
    runs: int
    largest: list[tuple[str, float]]


def import_times(module: str, *, tracing: bool) -> tuple[float, list[tuple[str, float]]]:
    """The module's cumulative import time (ms) in a fresh interpreter, and its largest direct imports."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "POWERTOOLS_"))}
    env.update(BASE_ENV)
    env["POWERTOOLS_TRACE_DISABLED"] = "false" if tracing else "true"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"import {module} failed:\n{result.stderr[-2000:]}")
    total: float | None = None
    children: dict[str, float] = {}
    for line in result.stderr.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        cumulative_ms = int(match.group(2)) / 1000
        depth = len(match.group(3)) // 2
        if match.group(4) == module and depth == 0:
            total = cumulative_ms
        elif depth <= 1:
            children[match.group(4)] = max(children.get(match.group(4), 0.0), cumulative_ms)
    if total is None:
        raise RuntimeError(f"no import time reported for {module}")
    largest = sorted(children.items(), key=lambda item: item[1], reverse=True)[:TOP]
    return total, largest


def measure(runs: int) -> list[Case]:
    cases = []
    for name, module in HANDLERS.items():
        for tracing in (False, True):
            import_times(module, tracing=tracing)  # warms the bytecode cache
            samples = []
            largest: list[tuple[str, float]] = []
            for _ in range(runs):
                total, largest = import_times(module, tracing=tracing)
                samples.append(total)
            cases.append(
                Case(
                    handler=name,
                    tracing=tracing,
                    median_ms=round(statistics.median(samples), 1),
                    min_ms=round(min(samples), 1),
                    max_ms=round(max(samples), 1),
                    runs=runs,
                    largest=[(mod, round(ms, 1)) for mod, ms in largest],
                )
            )
    return cases


def table(cases: Sequence[Case]) -> str:
    lines = [
        f"{'handler':<10} {'tracing':<8} {'median ms':>10} {'min':>7} {'max':>7}  largest imports (ms, last run)",
        "-" * 100,
    ]
    for case in cases:
        largest = ", ".join(f"{module} {ms:g}" for module, ms in case.largest[:4])
        lines.append(
            f"{case.handler:<10} {'on' if case.tracing else 'off':<8} {case.median_ms:>10.1f} "
            f"{case.min_ms:>7.1f} {case.max_ms:>7.1f}  {largest}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cold_start", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9, help="fresh interpreters per handler and tracing mode")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    cases = measure(args.runs)
    if args.json:
        print(json.dumps([asdict(case) for case in cases], indent=2))
    else:
        print(f"{sys.version.split()[0]}, {args.runs} runs per case, medians of -X importtime")
        print(table(cases))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
