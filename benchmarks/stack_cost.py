"""What the default stack costs idle each month, and what a job adds, at us-east-1 list prices.

The idle month counts what the synthesized template holds (`npx cdk synth`'s own app, every setting at its
default): each customer-managed KMS key, CloudWatch alarm and dashboard, and the extender's schedule (one
invocation a minute). Free tiers are left out. A job adds its Glue run (DPU-hours, Glue's one-minute
minimum) and the processor's own requests per job, which `benchmarks.burst` measures.

Prices are `longjobs.engine.cost.PRICES`, each with the page that publishes it.

Run from the repository root: `python -m benchmarks.stack_cost [--minutes M] [--workers W] [--json]`.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from longjobs.engine.cost import PRICES

__all__ = ["build_parser", "glue_run_usd", "idle_month", "main", "report"]

REPO_ROOT = Path(__file__).resolve().parent.parent
MONTH_MINUTES = 30 * 24 * 60
EXTENDER_RUN_S = 1.0
"""A bound on an idle extender run's billed duration: a few index queries and nothing to renew."""
GLUE_MINIMUM_MINUTES = 1
"""Glue 2.0 and later bill per second with a one-minute minimum (https://aws.amazon.com/glue/pricing/)."""
BURST_PROCESSOR_COST_PER_JOB = 0.000334
"""The processor's own requests and transitions per job, from `python -m benchmarks.burst` (the default
concurrency's `cost_usd`; Step Functions' 13 transitions are most of it)."""

MONTHLY = {
    "AWS::KMS::Key": ("kms_key_month", "customer-managed KMS key"),
    "AWS::CloudWatch::Alarm": ("cloudwatch_alarm_month", "CloudWatch alarm (standard resolution)"),
    "AWS::CloudWatch::Dashboard": ("cloudwatch_dashboard_month", "CloudWatch dashboard (3 a month are free)"),
}
"""The resources billed by the month, by CloudFormation type: (their price's key, what it is)."""


@dataclass(frozen=True)
class Line:
    item: str
    count: float
    unit_usd: float
    usd: float


def idle_month(resources: Mapping[str, int], lambda_memory_mb: int = 256) -> list[Line]:
    """The idle month's lines for a template holding `resources` (count by type)."""
    lines = [
        Line(what, resources[kind], PRICES[key][0], resources[kind] * PRICES[key][0])
        for kind, (key, what) in MONTHLY.items()
        if resources.get(kind)
    ]
    runs = MONTH_MINUTES  # the extender's schedule: one run a minute
    gb_s = runs * EXTENDER_RUN_S * lambda_memory_mb / 1024
    lines += [
        Line("extender invocations (requests)", runs, PRICES["lambda_request"][0], runs * PRICES["lambda_request"][0]),
        Line(
            f"extender duration, at most {EXTENDER_RUN_S:g} s a run (GB-s)",
            gb_s,
            PRICES["lambda_gb_s"][0],
            gb_s * PRICES["lambda_gb_s"][0],
        ),
        Line(
            "EventBridge Scheduler invocations",
            runs,
            PRICES["scheduler_invocation"][0],
            runs * PRICES["scheduler_invocation"][0],
        ),
    ]
    return lines


def glue_run_usd(minutes: float, workers: int, dpu_per_worker: float = 1.0) -> float:
    """A Glue run's list price: DPU-hours at the Glue job rate, with the one-minute minimum."""
    billed = max(minutes, GLUE_MINIMUM_MINUTES)
    return workers * dpu_per_worker * billed / 60 * PRICES["glue_dpu_hour"][0]


def default_template_resources() -> Counter[str]:
    """Resource counts by type in the default stack, synthesized as `npx cdk synth` does (its app)."""
    import aws_cdk as cdk

    from app import build_app

    context = json.loads((REPO_ROOT / "cdk.json").read_text(encoding="utf-8"))["context"]
    with tempfile.TemporaryDirectory() as outdir:
        app = cdk.App(context=context, outdir=outdir)
        stack = build_app(app)
        template = app.synth().get_stack_by_name(stack.stack_name).template
    return Counter(resource["Type"] for resource in template["Resources"].values())


@dataclass(frozen=True)
class Report:
    idle: list[Line]
    idle_usd: float
    job_minutes: float
    job_workers: int
    glue_usd: float
    processor_usd: float
    job_usd: float


def report(resources: Mapping[str, int], *, minutes: float, workers: int) -> Report:
    idle = idle_month(resources)
    glue = glue_run_usd(minutes, workers)
    return Report(
        idle=idle,
        idle_usd=sum(line.usd for line in idle),
        job_minutes=minutes,
        job_workers=workers,
        glue_usd=glue,
        processor_usd=BURST_PROCESSOR_COST_PER_JOB,
        job_usd=glue + BURST_PROCESSOR_COST_PER_JOB,
    )


def render(result: Report) -> Table:
    table = Table(title="The default stack, idle for a month, and one job (us-east-1 list prices)")
    for column in ("item", "count", "unit USD", "USD"):
        table.add_column(column, justify="left" if column == "item" else "right")
    for line in result.idle:
        table.add_row(line.item, f"{line.count:,.0f}", f"{line.unit_usd:.8g}", f"{line.usd:.2f}")
    table.add_row("[b]idle month[/b]", "", "", f"[b]{result.idle_usd:.2f}[/b]")
    table.add_row(
        f"a {result.job_minutes:g}-minute Glue run, {result.job_workers} G.1X workers",
        "1",
        "",
        f"{result.glue_usd:.4f}",
    )
    table.add_row("the processor's requests for that job", "1", "", f"{result.processor_usd:.6f}")
    table.add_row("[b]one job[/b]", "", "", f"[b]{result.job_usd:.4f}[/b]")
    return table


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.stack_cost", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="the job's Glue run (default 10)")
    parser.add_argument("--workers", type=int, default=2, help="its G.1X workers (default 2, the stack's)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not (math.isfinite(args.minutes) and args.minutes > 0):
        parser.error(f"--minutes must be a number above 0, not {args.minutes}")
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, not {args.workers}")
    result = report(default_template_resources(), minutes=args.minutes, workers=args.workers)
    if args.json:
        print(json.dumps(asdict(result), indent=1))
    else:
        Console().print(render(result))
    return 0 if math.isfinite(result.idle_usd) else 1


if __name__ == "__main__":
    raise SystemExit(main())
