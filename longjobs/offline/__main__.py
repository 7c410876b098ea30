"""Command line: `python -m offline run --scenario FILE --report FILE [--timeline PNG] [--trace FILE]`,
`python -m offline demo [--out DIR]`, `python -m offline chaos --runs N --seed S --report FILE` and
`python -m offline serve [--port 4566] [--jobs-file jobs.json]` and
`python -m offline sim --seeds N [--first K] [--profile P] [--json] | --seed S [--trace FILE] [--shrink [--out FILE]]`
(each with `[--plant NAME]`, a planted bug to watch it be found).
Exits 1 when an invariant broke (the report's `ok` is false; for chaos, any violation in any run), 2
when the scenario file is invalid."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import shutil
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

from longjobs.offline.chaos import INTERRUPTED
from longjobs.offline.programs import java_missing, node_missing, quiet_stopped_node
from longjobs.offline.scenario import ScenarioError, load_scenario

DESCRIPTION = "The whole processor on this machine (run, demo, chaos, serve) and its simulation (sim)."
OFFLINE_EXTRA = ("moto", "matplotlib", "greenlet", "aws_cdk")
"""The modules of the distribution's `offline` extra (with `infra`'s CDK, which renders the workflow)."""

DEMO_SCENARIO = Path(__file__).parent / "scenarios" / "demo.json"
DEMO_JOB = Path("jobs") / "wordcount.py"
"""The demo's own job type's entry, as its scenario names it; its input is the folder `docs`."""
DEMO_DATA = Path("share") / "sqs-long-jobs" / "demo"
"""Where an installed distribution keeps the demo's job and input (pyproject's data files), under the
environment's data directory."""
DEFAULT_PORT = 4566
DEFAULT_DRAIN_S = 30.0
DEMO_FILES = ("report.json", "timeline.png", "figures.md", "trace.jsonl")
"""What the demo writes under its `--out`."""


def output_problem(option: str, path: Path) -> str | None:
    """Why `path` could not be written once the run is over, or None. Checked before the run: an existing
    directory, or a parent that is a file. A missing folder is not a problem: it is created at the end."""
    if path.is_dir():
        return f"{option} {path}: a directory; give the path of a file to write"
    parent = next(parent for parent in path.parents if parent.exists())  # "." or "/" at the latest
    if not parent.is_dir():
        return f"{option} {path}: {parent} is a file, not a directory"
    return None


def refused_outputs(outputs: Sequence[tuple[str, Path | None]]) -> str | None:
    """The first output path (option, path; None: not asked for) that could not be written, as one line."""
    problems = (output_problem(option, path) for option, path in outputs if path is not None)
    return next((problem for problem in problems if problem is not None), None)


def run(
    scenario_path: Path,
    report_path: Path,
    timeline_path: Path | None,
    *,
    quiet: bool,
    figures_path: Path | None = None,
    trace_path: Path | None = None,
) -> int:
    """Run the scenario file; write its report, and its timeline, figures table and history where asked
    (the demo writes `figures.md`: the table README.md shows, from this run; and `trace.jsonl`, the history
    the independent checker judged, in the simulation's trace format)."""
    from longjobs.offline.job_code import JobCodeError
    from longjobs.offline.progress import Progress
    from longjobs.offline.report import JOB_FAILED, TIMED_OUT, figures_table, summary_table
    from longjobs.offline.runtime import RUNTIME_LOG, run_scenario
    from longjobs.offline.spark import log_spark_to

    outputs = [("--report", report_path), ("--timeline", timeline_path), ("--trace", trace_path)]
    refused = refused_outputs([*outputs, ("figures", figures_path)])
    if refused is not None:
        print(refused, file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(scenario_path)
    except ScenarioError as exc:
        print(exc, file=sys.stderr)
        return 2
    runs_spark = any(scenario.runs_spark(job) for job in scenario.jobs)
    if runs_spark and importlib.util.find_spec("pyspark") is None:
        print(
            f"{scenario_path} runs PySpark jobs, and PySpark is not installed: install the distribution's "
            "`pipeline` extra (pip install 'sqs-long-jobs[offline,pipeline]'), and Java 17",
            file=sys.stderr,
        )
        return 2
    if runs_spark and (java := java_missing()) is not None:
        print(java, file=sys.stderr)
        return 2
    work_dir = report_path.parent / "work"
    spark_log = log_spark_to(work_dir) if runs_spark else None
    print(
        f"running {scenario_path} ({len(scenario.jobs)} jobs); logs in {work_dir / RUNTIME_LOG}"
        + (f", Spark's in {spark_log}" if spark_log is not None else ""),
        file=sys.stderr,
    )
    progress = None if quiet else Progress()
    # A Spark job's failure (its class, message and traceback) is the job owner's to read at once.
    show = progress.say if progress is not None else lambda text: print(text, file=sys.stderr, flush=True)
    try:
        result = run_scenario(scenario, work_dir=work_dir, progress=progress, show_failures=show)
    except KeyboardInterrupt:  # the runtime has stopped its services by then: nothing to report on
        print("interrupted: the run stopped before its end, and wrote no report", file=sys.stderr)
        return INTERRUPTED
    except JobCodeError as exc:  # a type's requirements or code, prepared before any job is sent
        print(f"cannot run {scenario_path}: {exc}", file=sys.stderr)
        return 2
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps(result.report, indent=2) + "\n", encoding="utf-8")
    print(summary_table(result.report, {job.id: job.expected for job in scenario.jobs}))
    if timeline_path is not None:
        from longjobs.offline.timeline import draw_timeline

        draw_timeline(result, scenario, timeline_path)
        print(f"timeline: {timeline_path}")
    if figures_path is not None:
        figures_path.parent.mkdir(parents=True, exist_ok=True)
        figures_path.write_text(figures_table(result.report["jobs"]) + "\n", encoding="utf-8")
        print(f"figures (README.md's demo table, from this run): {figures_path}")
    if trace_path is not None:
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        trace_path.write_text("".join(line + "\n" for line in result.history), encoding="utf-8")
        from longjobs.offline.history import checker_command

        print(f"history ({checker_command(scenario.job_catalog(), trace_path)}): {trace_path}")
    print(f"report: {report_path}")
    for violation in result.violations:  # a job's own failure or a short timeout says so; the rest is the processor's
        own = violation.startswith((JOB_FAILED, TIMED_OUT))
        print(violation if own else f"INVARIANT BROKEN: {violation}", file=sys.stderr)
    return 0 if result.report["ok"] else 1


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser (the docs' examples are checked against it)."""
    parser = argparse.ArgumentParser(prog="longjobs-offline", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)
    run_cmd = commands.add_parser("run", help="run a scenario file and write its report")
    run_cmd.add_argument("--scenario", type=Path, required=True)
    run_cmd.add_argument("--report", type=Path, required=True)
    run_cmd.add_argument("--timeline", type=Path, help="also draw the timeline (PNG)")
    run_cmd.add_argument("--trace", type=Path, help="also write the run's history in the simulation's trace format")
    run_cmd.add_argument("--quiet", action="store_true", help="no live progress line")
    demo = commands.add_parser(
        "demo", help="the shipped demo: report.json, timeline.png and figures.md (README's table) under --out"
    )
    demo.add_argument("--out", type=Path, default=Path("out/demo"))
    demo.add_argument("--quiet", action="store_true")
    chaos = commands.add_parser("chaos", help="a campaign of random scenarios under random faults")
    chaos.add_argument("--runs", type=int, default=10, help="scenarios to draw and run (default 10)")
    chaos.add_argument("--seed", type=int, default=1, help="the campaign's seed: run i of seed S is always the same")
    chaos.add_argument("--report", type=Path, required=True, help="the campaign's JSON report")
    chaos.add_argument("--quiet", action="store_true", help="no line per finished run on stderr")
    chaos.add_argument("--fifo", action="store_true", help="every run on FIFO queues, its jobs in message groups")
    serve = commands.add_parser("serve", help="the processor as a local service your AWS tools can talk to")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port on 127.0.0.1 (default {DEFAULT_PORT})")
    serve.add_argument("--jobs-file", type=Path, help="job type declarations (default: ./jobs.json if present)")
    serve.add_argument("--settings", type=Path, help="a JSON object of engine settings over the service's own")
    serve.add_argument("--work-dir", type=Path, default=Path("out/serve"), help="logs and the job catalog")
    serve.add_argument(
        "--drain-s", type=float, default=DEFAULT_DRAIN_S, help="on stop, how long running jobs may finish"
    )
    from longjobs.sim.cli import add_parser as add_sim

    add_sim(commands)
    return parser


def demo_workspace(out: Path) -> Path:
    """Where the demo runs: the current folder when it holds the demo's job (a checkout of the repository,
    whose `jobs/` and `docs/` it reads), else a copy under `out` of what an installed distribution ships."""
    if DEMO_JOB.is_file():
        return Path.cwd()
    shipped = Path(sysconfig.get_path("data")) / DEMO_DATA
    if not (shipped / DEMO_JOB).is_file():
        raise ScenarioError(
            f"the demo needs its job {DEMO_JOB}: run it from a checkout of the repository, or install the "
            f"distribution (it ships the job under {shipped})"
        )
    workspace = out.resolve() / "workspace"
    shutil.copytree(shipped, workspace, dirs_exist_ok=True)
    return workspace


def demo(out: Path, *, quiet: bool) -> int:
    """The shipped demo, run where its job and input are (`demo_workspace`), its files written under `out`."""
    out = out.resolve()
    refused = refused_outputs([("--out", out / name) for name in DEMO_FILES])
    if refused is not None:
        print(refused, file=sys.stderr)
        return 2
    try:
        workspace = demo_workspace(out)
    except ScenarioError as exc:
        print(exc, file=sys.stderr)
        return 2
    previous = Path.cwd()
    os.chdir(workspace)  # the scenario names its job and input relative to where it runs
    try:
        return run(
            DEMO_SCENARIO,
            out / "report.json",
            out / "timeline.png",
            quiet=quiet,
            figures_path=out / "figures.md",
            trace_path=out / "trace.jsonl",
        )
    finally:
        os.chdir(previous)


def missing_extra() -> list[str]:
    """The modules of the `offline` extra this environment lacks."""
    return [name for name in OFFLINE_EXTRA if importlib.util.find_spec(name) is None]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; its exit code. A reader that closed the pipe (`| head`) ends it quietly with exit 1,
    where the print that met the closed pipe, or the interpreter's flush at exit, would show a traceback."""
    quiet_stopped_node()
    try:
        code = _command(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        return 1
    return code


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush at exit meets no closed pipe."""
    with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):  # stdout is no file (a test's capture)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _command(argv: Sequence[str] | None) -> int:
    missing = missing_extra()
    if missing:  # a traceback at the first import would say less
        print(
            f"longjobs-offline needs the distribution's `offline` extra ({', '.join(missing)} not installed): "
            "pip install 'sqs-long-jobs[offline]'",
            file=sys.stderr,
        )
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    node = node_missing()  # every command renders the workflow with the CDK
    if node is not None:
        print(node, file=sys.stderr)
        return 2
    if args.command == "serve":
        if not 0 < args.port < 65_536 or args.drain_s < 0:
            parser.error("--port must be 1..65535 and --drain-s at least 0")
        from longjobs.offline.serve import serve as serve_main

        return serve_main(
            port=args.port,
            jobs_file=args.jobs_file,
            settings_file=args.settings,
            work_dir=args.work_dir,
            drain_s=args.drain_s,
        )
    if args.command == "sim":
        from longjobs.sim.cli import main as sim_main

        try:
            return sim_main(args)
        except KeyboardInterrupt:
            print("interrupted: the simulation stopped before its end, and printed or wrote no result", file=sys.stderr)
            return INTERRUPTED
    if args.command == "run":
        return run(args.scenario, args.report, args.timeline, quiet=args.quiet, trace_path=args.trace)
    if args.command == "chaos":
        if args.runs < 1:
            parser.error("--runs must be at least 1")
        refused = output_problem("--report", args.report)
        if refused is not None:
            print(refused, file=sys.stderr)
            return 2
        from longjobs.offline.chaos import main as chaos_main

        return chaos_main(args.runs, args.seed, args.report, quiet=args.quiet, fifo=args.fifo)
    return demo(args.out, quiet=args.quiet)


if __name__ == "__main__":
    sys.exit(main())
