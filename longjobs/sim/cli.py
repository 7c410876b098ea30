"""`python -m offline sim`: a campaign of seeds (a table, or `--json`), or one seed (`--seed S`, with its
trace written by `--trace FILE`, or shrunk to a scenario file by `--shrink`), exiting 1 when a property
broke."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from longjobs.sim.planted import PLANTS, planted
from longjobs.sim.workload import PROFILES

CAMPAIGN_SEEDS = 100
"""A campaign's seeds when `--seeds` is not given."""
PROFILE = "mixed"
"""The workload of a campaign or a seed when `--profile` is not given."""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sim = commands.add_parser("sim", help="the deterministic simulation: a campaign of seeds, or one seed")
    sim.add_argument("--seeds", type=int, help=f"seeds to run (a campaign; default {CAMPAIGN_SEEDS})")
    sim.add_argument("--first", type=int, help="the campaign's first seed (default 0)")
    sim.add_argument("--seed", type=int, help="run this one seed and print its outcome")
    sim.add_argument("--scenario", type=Path, help="run an offline scenario file in the simulation instead")
    sim.add_argument(
        "--profile",
        choices=PROFILES,
        metavar="NAME",
        help=f"the workload of a campaign or a seed: {', '.join(PROFILES)} (default {PROFILE}; a scenario is its own)",
    )
    sim.add_argument(
        "--trace", type=Path, help="with --seed (without --shrink) or --scenario: write its trace here (JSON lines)"
    )
    sim.add_argument(
        "--no-s3",
        action="store_true",
        help="with --seed: draw the seed without its S3 notifications (as a corpus seed found before them)",
    )
    sim.add_argument(
        "--s3-several",
        action="store_true",
        help="with --seed: draw each S3 notification with several markers (as a corpus seed found before "
        "notifications of one marker)",
    )
    sim.add_argument(
        "--fifo-no-operator",
        action="store_true",
        help="with --seed: draw a FIFO seed without the operator's cancels and redrives (as a corpus seed found "
        "before them)",
    )
    sim.add_argument("--workers", type=int, help="processes for a campaign (default: every core)")
    sim.add_argument("--json", action="store_true", help="print one JSON object instead of a table (not with --shrink)")
    sim.add_argument(
        "--shrink", action="store_true", help="with --seed: shrink its failure to the fewest jobs and faults"
    )
    sim.add_argument(
        "--out", type=Path, help="with --shrink: the scenario file to write (default seed-S-P.json: seed S, profile P)"
    )
    sim.add_argument(
        "--plant",
        choices=sorted(PLANTS),
        metavar="NAME",
        help="run with this planted bug, to watch the simulation find, replay and shrink it: "
        f"{', '.join(sorted(PLANTS))} (longjobs.sim.planted)",
    )


def main(args: argparse.Namespace) -> int:
    refused = _refused(args)
    if refused is not None:
        print(refused, file=sys.stderr)
        return 2
    args.profile = args.profile or PROFILE
    if args.scenario is not None or args.seed is not None:
        with planted(args.plant):  # one run, in this process
            return _scenario(args) if args.scenario is not None else _shrink(args) if args.shrink else _one(args)
    seeds = CAMPAIGN_SEEDS if args.seeds is None else args.seeds
    if seeds < 1:
        print("--seeds must be at least 1", file=sys.stderr)
        return 2
    from longjobs.sim.campaign import campaign

    report = campaign(seeds, first=args.first or 0, profile=args.profile, workers=args.workers, plant=args.plant)
    if args.json:
        print(json.dumps(report.as_json(), indent=1))
    else:
        _table(report)
    return 1 if report.failed else 0


def _refused(args: argparse.Namespace) -> str | None:
    """Why the options cannot run together, checked before the run: an option its mode would ignore, or a
    file that could not be written once the run is over."""
    if args.shrink and args.seed is None:
        return "--shrink needs --seed"
    if args.seed is not None and args.scenario is not None:
        return "--seed and --scenario: give one (a seed draws its own scenario)"
    if (args.seed is not None or args.scenario is not None) and (args.seeds is not None or args.first is not None):
        return "--seeds and --first choose a campaign's seeds: not with --seed or --scenario"
    if args.trace is not None and (args.shrink or (args.seed is None and args.scenario is None)):
        return "--trace needs --seed or --scenario, without --shrink (a campaign or a shrink writes no trace)"
    if args.out is not None and not args.shrink:
        return "--out needs --shrink"
    if args.no_s3 and args.seed is None:
        return "--no-s3 needs --seed"
    if args.s3_several and (args.seed is None or args.no_s3):
        return "--s3-several needs --seed, without --no-s3"
    if args.fifo_no_operator and args.seed is None:
        return "--fifo-no-operator needs --seed"
    if args.profile is not None and args.scenario is not None:
        return "--profile draws a seed's workload: not with --scenario (the file is its workload)"
    if args.workers is not None and (args.seed is not None or args.scenario is not None):
        return "--workers runs a campaign's seeds in parallel: not with --seed or --scenario (one run)"
    if args.json and args.shrink:
        return "--json: not with --shrink (it writes a scenario file and prints what it took out)"
    if args.workers is not None and args.workers < 1:
        return "--workers must be at least 1"
    for option, path in (("--trace", args.trace), ("--out", args.out)):
        if path is not None and (path.is_dir() or not path.parent.is_dir()):
            return f"{option} {path}: not a file in a directory that exists"
    return None


def _scenario(args: argparse.Namespace) -> int:
    from longjobs.offline.scenario import ScenarioError, load_scenario
    from longjobs.sim.scenario import NotModelled, run_scenario

    try:
        run = run_scenario(load_scenario(args.scenario))
    except (ScenarioError, NotModelled) as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.trace is not None and run.result.trace is not None:
        with args.trace.open("w", encoding="utf-8") as out:
            run.result.trace.write(out)
    violation = run.result.violation
    report = {
        "ok": violation is None,
        "property": violation.property if violation else None,
        "detail": violation.detail if violation else None,
        "virtual_h": run.result.virtual_h,
        "jobs": {name: vars(job) for name, job in run.jobs.items()},
    }
    print(json.dumps(report, indent=1))
    return 0 if violation is None else 1


def _shrink(args: argparse.Namespace) -> int:
    """Shrink the seed's failure to a scenario file: exits 1 with the file written (its property broke),
    0 when the seed passes, 2 when the failure cannot be written as a scenario."""
    from longjobs.sim.campaign import offline_command
    from longjobs.sim.shrink import Inexpressible, shrink_seed

    try:
        shrunk = shrink_seed(args.seed, args.profile, **_drawn(args))
    except Inexpressible as exc:
        print(exc, file=sys.stderr)
        return 2
    if shrunk is None:
        print(f"seed {args.seed} ({args.profile}): every property held; nothing to shrink")
        return 0
    out = args.out or Path(f"seed-{args.seed}-{args.profile}.json")
    out.write_text(json.dumps(shrunk.scenario, indent=1) + "\n", encoding="utf-8")
    print(
        f"seed {args.seed} ({args.profile}): {shrunk.broken} broke; shrunk from {_count(shrunk.jobs_before, 'job')} "
        f"and {_count(shrunk.faults_before, 'fault')} to {_count(shrunk.jobs_after, 'job')} and "
        f"{_count(shrunk.faults_after, 'fault')} ({shrunk.runs} scenario runs, {shrunk.wall_s} s)"
    )
    plant = f" --plant {args.plant}" if args.plant else ""
    print(f"  wrote {out}; replay: {offline_command()} sim --scenario {out}{plant}")
    return 1


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _drawn(args: argparse.Namespace) -> dict[str, bool]:
    """How the seed's world is drawn: as a corpus seed found before a part of the workload was (`--no-s3`,
    `--s3-several`, `--fifo-no-operator`; `longjobs.sim.workload.draw`)."""
    return {
        "notifications": not args.no_s3,
        "one_marker": not args.s3_several,
        "fifo_operator": not args.fifo_no_operator,
    }


def _one(args: argparse.Namespace) -> int:
    from longjobs.sim.campaign import replay_command, run_seed

    result = run_seed(args.seed, args.profile, **_drawn(args))
    if args.trace is not None and result.trace is not None:
        with args.trace.open("w", encoding="utf-8") as out:
            result.trace.write(out)
    violation = result.violation
    outcome = {
        "seed": args.seed,
        "profile": args.profile,
        "ok": violation is None,
        "property": violation.property if violation else None,
        "detail": violation.detail if violation else None,
        "t": violation.t if violation else None,
        "step": violation.step if violation else None,
        "virtual_h": result.virtual_h,
        "steps": result.steps,
        "requests": result.requests,
        "replay": replay_command(args.seed, args.profile, **_drawn(args), plant=args.plant),
    }
    if args.json:
        print(json.dumps(outcome, indent=1))
    elif violation is None:
        print(f"seed {args.seed} ({args.profile}): every property held; {result.virtual_h} virtual hours")
    else:
        print(
            f"seed {args.seed} ({args.profile}): {violation.property} broke at t={violation.t}s, step {violation.step}"
        )
        print(f"  {violation.detail}")
        print(f"  replay: {outcome['replay']} --trace trace.jsonl")
    return 0 if violation is None else 1


def _table(report: object) -> None:
    from rich.console import Console
    from rich.table import Table

    data = report.as_json()  # type: ignore[attr-defined]
    console = Console(width=160)
    table = Table(title=f"{data['seeds']} seeds from {data['first']} ({data['profile']})", title_justify="left")
    for column in ("seeds", "failed", "reached", "never reached", "virtual h", "wall s"):
        table.add_column(column, justify="right")
    reached = sum(1 for count in data["coverage"].values() if count)
    table.add_row(
        str(data["seeds"]),
        str(len(data["failed"])),
        str(reached),
        str(len(data["never_reached"])),
        str(data["virtual_h"]),
        str(data["wall_s"]),
    )
    console.print(table)
    for failure in data["failed"]:
        console.print(
            f"[red]seed {failure['seed']}: {failure['property']}[/] {failure['detail']}\n  {failure['replay']}"
        )
    if data["never_reached"]:
        console.print("never reached: " + ", ".join(data["never_reached"]))
