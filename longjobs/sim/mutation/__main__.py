"""`python -m longjobs.sim.mutation`: each mutant of the protocol, judged by the tests and the campaign."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from longjobs.sim.mutation import clauses, guards, named, rows
from longjobs.sim.mutation.equivalent import argument, key
from longjobs.sim.mutation.probes import PROBES
from longjobs.sim.mutation.run import Mutant, Verdict, judge, reach

KINDS = ("clauses", "rows", "guards")
JUDGES = ("campaign", "tests")


def probed(mutant: Mutant, verdict: Verdict) -> Verdict:
    """The verdict with the mutant's probe run under it, if it has one: killed when the probe fails."""
    probe = PROBES.get(key(mutant))
    if probe is None:
        return verdict
    with mutant.active():
        try:
            probe()
        except AssertionError:
            return replace(verdict, killed=True, property=f"probe {probe.__name__}")
    return verdict


def _outcome(verdict: Verdict, argued: str | None) -> str:
    if verdict.killed and verdict.seed is None:
        return f"killed: {verdict.property}"
    if verdict.killed:
        return f"killed: {verdict.property} (seed {verdict.seed})"
    if argued is not None:
        return f"equivalent: {argued}"
    if verdict.reached or verdict.tests_reached:
        return "survived"
    return "unreached: no seed or test takes the change"


def _table(judged: list[tuple[Verdict, str | None]], print_: Callable[[Any], None]) -> None:
    from rich.table import Table

    table = Table(title="Mutants of the protocol")
    for column in ("mutant", "change", "seeds reached", "tests reached", "verdict", "seeds run", "wall s"):
        table.add_column(column)
    for verdict, argued in judged:
        table.add_row(
            verdict.mutant,
            verdict.change,
            str(verdict.reached),
            str(verdict.tests_reached),
            _outcome(verdict, argued),
            str(verdict.seeds_run),
            f"{verdict.wall_s:g}",
        )
    print_(table)


def _score(judged: list[tuple[Verdict, str | None]]) -> str:
    killed = sum(1 for verdict, _ in judged if verdict.killed)
    argued = sum(1 for verdict, reason in judged if not verdict.killed and reason is not None)
    standing = len(judged) - killed - argued
    return f"{len(judged)} mutants: {killed} killed, {argued} argued equivalent, {standing} standing"


def command_parser() -> argparse.ArgumentParser:
    """The command's arguments (the docs' examples are parsed by it)."""
    parser = argparse.ArgumentParser(prog="python -m longjobs.sim.mutation", description=__doc__)
    parser.add_argument("--seeds", type=int, default=1000, help="the campaign's seeds (default 1000)")
    parser.add_argument("--discover", type=int, default=40, help="seeds read for the conditions (default 40)")
    parser.add_argument(
        "--kind", action="append", choices=KINDS, help="clauses, rows or guards; repeat for several (default all)"
    )
    parser.add_argument(
        "--judge",
        action="append",
        choices=JUDGES,
        help="the campaign (and its probes), or the project's unit and moto tests; default both",
    )
    parser.add_argument(
        "--only",
        action="append",
        help="only the mutants whose name, change or condition contains this; repeat for several",
    )
    parser.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="processes at once (default: one per core)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    return parser


def _unjudged(chosen: list[Mutant]) -> dict[Mutant, Verdict]:
    return {mutant: Verdict(mutant.name, mutant.change, 0, False, None, None, 0, 0.0) for mutant in chosen}


def _tested(verdicts: dict[Mutant, Verdict], workers: int) -> dict[Mutant, Verdict]:
    """Each mutant judged by the project's tests that reach it (`named`): quick, so they go first."""
    root = Path.cwd()
    sites = sorted({mutant.site for mutant in verdicts if isinstance(mutant, clauses.ClauseMutant)})
    reached = named.reach(root, sites=sites)

    def tested(mutant: Mutant, verdict: Verdict) -> Verdict:
        tests = reached.get(mutant.name, [])
        began = time.monotonic()
        failed = named.judge(mutant, tests, root)
        verdict = replace(verdict, tests_reached=len(tests), wall_s=round(time.monotonic() - began, 1))
        if failed is not None:
            verdict = replace(verdict, killed=True, property=f"test {failed}")
        _progress(mutant, verdict)
        return verdict

    with ThreadPoolExecutor(workers) as pool:  # each judge is a pytest process of its own
        return dict(zip(verdicts, pool.map(tested, verdicts, verdicts.values()), strict=True))


def _campaign(verdicts: dict[Mutant, Verdict], seeds: int, workers: int) -> dict[Mutant, Verdict]:
    """Each mutant not yet killed judged by the campaign's seeds that reach it, then by its probe."""
    left = [mutant for mutant, verdict in verdicts.items() if not verdict.killed]
    if not left:
        return verdicts
    reached = reach([m for m in left if isinstance(m, clauses.ClauseMutant)], seeds, workers)
    for mutant in left:
        before = verdicts[mutant]
        verdict = judge(mutant, reached[mutant], workers)
        verdict = replace(verdict, tests_reached=before.tests_reached, wall_s=round(before.wall_s + verdict.wall_s, 1))
        verdicts[mutant] = verdict if verdict.killed else probed(mutant, verdict)
        _progress(mutant, verdicts[mutant])  # minutes each
    return verdicts


def _progress(mutant: Mutant, verdict: Verdict) -> None:
    argued = None if verdict.killed else argument(mutant)
    print(f"{verdict.mutant} ({verdict.change}): {_outcome(verdict, argued)}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = command_parser()
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.discover < 1 or args.workers < 1:
        parser.error("--seeds, --discover and --workers take a number of at least 1")
    began = time.monotonic()
    kinds = args.kind or list(KINDS)
    chosen: list[Mutant] = []
    if "clauses" in kinds:
        chosen += clauses.mutants(clauses.discover(args.discover))
    if "rows" in kinds:
        chosen += rows.mutants()
    if "guards" in kinds:
        chosen += guards.mutants()
    if args.only is not None:
        chosen = [
            m for m in chosen if any(text in f"{m.name} {m.change} {getattr(m, 'site', '')}" for text in args.only)
        ]
    if not chosen:
        parser.error(f"no mutant's name, change or condition contains any of {args.only!r}")
    judges = args.judge or list(JUDGES)
    if "tests" in judges and not Path("tests/unit").is_dir():
        parser.error("--judge tests runs the project's tests: run the command from the repository's root")
    verdicts = _unjudged(chosen)
    if "tests" in judges:
        verdicts = _tested(verdicts, args.workers)
    if "campaign" in judges:
        verdicts = _campaign(verdicts, args.seeds, args.workers)
    judged = [(verdict, None if verdict.killed else argument(mutant)) for mutant, verdict in verdicts.items()]
    wall_s = round(time.monotonic() - began, 1)
    if args.json:
        listed = [{**asdict(verdict), "argued": argued} for verdict, argued in judged]
        print(json.dumps({"score": _score(judged), "verdicts": listed, "wall_s": wall_s}, indent=1))
    else:
        from rich.console import Console

        console = Console()
        _table(judged, console.print)
        console.print(f"{_score(judged)}; {args.seeds} seeds, {wall_s:g} s")
    return 0 if all(verdict.killed or argued is not None for verdict, argued in judged) else 1


if __name__ == "__main__":
    sys.exit(main())
