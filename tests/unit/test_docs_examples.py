"""Every example in README.md and docs/ is run or validated by the code it stands for, so a page cannot
drift from the code: scenarios run in the simulation on virtual time (`longjobs.sim.scenario`: no property
broken, every job ending as the scenario expects and as the page says), job types and triggers through the
job catalog, job messages through the receiver's parser, Python through the compiler. Command lines run:
the simulation's (`python -m offline sim`, its checker), the event generator and `--help` here, in a
stand-in for the checkout, with a campaign's or a generator's size scaled down (`SCALED_DOWN`); every
`longjobs --endpoint-url http://127.0.0.1:4566 ...` against `serve` in tests/e2e/test_serve.py. The
offline runtime's real-time commands (`run`, `demo`, `chaos`, `serve`) go through their argument parser,
a scenario file they name runs in the simulation, and `REAL_TIME` names the test that runs each command.
`npx cdk ... -c key=value` goes through the stack's config (`load_config`), `make` targets against the
Makefile (`MAKE_TARGETS` says what each does and what runs it), a benchmark's arguments through its own
parser, built apart from its run (`build_parser`). What needs an AWS account,
installs software or shows an output is listed below with the reason; a block or command that is neither
checked nor listed fails the test. The prose's inline commands (`longjobs ...`, `python -m offline ...`,
`python -m benchmarks...`, `make ...`) go through the same parsers. Every list is asserted both ways: an
entry that no longer matches what the pages show, or names a test file that is gone, fails the test.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import fnmatch
import importlib
import importlib.util
import io
import json
import os
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from longjobs.cli.__main__ import build_parser as longjobs_parser
from longjobs.cli.__main__ import main as longjobs_main
from longjobs.cli.errors import UsageError
from longjobs.construct import quiet_node_notices
from longjobs.engine.delivery.models import parse_message
from longjobs.engine.jobs import load_catalog, load_catalog_file
from longjobs.engine.jobs.types import JobType
from longjobs.engine.settings import Settings
from longjobs.history.checker import main as checker_main
from longjobs.offline.__main__ import build_parser as offline_parser
from longjobs.offline.__main__ import main as offline_main
from longjobs.offline.scenario import Scenario, load_scenario, parse_scenario
from longjobs.pipeline import generate, glue_job
from longjobs.sim.mutation.__main__ import command_parser as mutation_parser
from longjobs.sim.scenario import NotModelled, ScenarioRun, run_scenario
from tests import REPO_ROOT

quiet_node_notices()  # before a check loads the CDK (the config, the simulation's workflow)

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)

SHOWN_NOT_RUN = {
    # (page, the block's first line): why it is only shown
    ("README.md", "producer ──► jobs queue"): "a diagram",
    ("design.md", "producer ──► jobs queue"): "a diagram",
    ("engine.md", "Self ($$.Execution.Id)"): "a diagram of the workflow's states",
    ("jobs.md", "jobs.json: invalid job types"): "an error message, produced by tests/unit/test_job_types.py",
    ("jobs.md", '{"glue_job_run_id": "jr_...",'): "a job's summary as Step Functions returns it (an output)",
    ("offline.md", '{"ok": true,'): "a report's beginning (an output; tests/e2e checks the real report)",
    ("pipeline.md", '{"event_id": "e-20240501-000000001",'): "an input event (tests/pipeline reads such events)",
    ("pipeline.md", '{"date": "2024-05-01", "rows_read": 3000,'): "a run's summary (an output)",
    ("install.md", "from longjobs.construct import quiet_node_notices"): "a user's CDK app: "
    "tests/infra/test_install.py synthesizes it as the page writes it, installed from the wheel",
    ("install.md", "import aws_cdk as cdk"): "the user's stack: tests/infra/test_install.py synthesizes it",
    (
        "jobs.md",
        "job type 'rows': /project/jobs/rows.py:1 imports 'helpers', which Glue 6.0 does not provide and "
        "the job does not ship: add its package to `requirements`, or set `code`",
    ): "an error message, produced by tests/infra/test_processor.py",
    ("jobs.md", "jobs/"): "a job's layout (test_docs_layout_names_what_exists checks each path)",
    ("jobs.md", "import aws_cdk as cdk"): "a user's CDK app (the construct's props: tests/infra/test_processor.py)",
    ("deploy.md", "LongJobProcessor("): "a part of a user's stack: tests/infra/test_processor.py synthesizes "
    "the same producers and checks their policies",
    ("deploy.md", "processor = LongJobProcessor("): "a part of a user's stack: "
    "tests/infra/test_processor_existing.py synthesizes the same existing resources",
    ("design.md", "longjobs/"): "the package's layout (test_docs_layout_names_what_exists checks each path)",
    ("README.md", "app.py"): "the repository's layout (test_docs_layout_names_what_exists checks each path)",
}
"""Blocks shown as they look, not run. Python among them is still compiled."""

SCENARIOS_NOT_RUN: dict[tuple[str, str], str] = {
    # (page, the scenario block's first line): what the simulation does not model, as `NotModelled` names it
}
"""Scenario blocks only validated: the simulation refuses them, naming what it does not model. An entry
whose block the simulation runs fails the test (the list is stale)."""

SCENARIO_FILES_NOT_RUN = {
    # a scenario file a command names that is not in the repository: why
    "my-scenario.json": "the reader's copy of the scenario block above the command (jobs.md), run as a block",
}

COMMANDS_NOT_RUN = {
    # a command's first word(s): why the test only shows it
    "npx cdk": "deploys or synthesizes against an AWS account (tests/infra runs `cdk synth`); its `-c` context "
    "settings go through the stack's config",
    "aws": "calls AWS, or a running `serve` (tests/e2e/test_serve.py runs these calls)",
    "npm": "installs the CDK command line from the registry (tests/infra/test_install.py)",
    "mkdir": "a shell step of the install page",
    "cp ../sqs-long-jobs/cdk.json": "a shell step of the install page (tests/infra/test_install.py copies the file)",
    "python3.13 -m venv": "creates an environment (tests/infra/test_install.py)",
    ".venv/bin/pip install": "installs packages (tests/infra/test_install.py installs the wheel)",
    "out()": "a shell helper of the deploy page",
    "export AWS_": "sets the shell's region and credentials for the local service (tests/e2e/test_serve.py sets them)",
}
SHELL_ASSIGNMENT = re.compile(r"^[A-Z_]+=")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    info: str
    body: str
    after: str = field(default="", repr=False, compare=False)  # the page's text after the block

    @property
    def prose_after(self) -> str:
        """The page's text from the block to the next heading, blocks left out: what it says of the example."""
        return re.split(r"^#", FENCE.sub("", self.after), maxsplit=1, flags=re.M)[0]

    @property
    def first_line(self) -> str:
        return self.body.strip().splitlines()[0] if self.body.strip() else ""

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def blocks() -> Iterator[Block]:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text[: match.start()].count("\n") + 1
            yield Block(page.name, line, match.group(1).strip(), match.group(2), text[match.end() :])


def shown(block: Block) -> str | None:
    return next(
        (
            reason
            for (page, start), reason in SHOWN_NOT_RUN.items()
            if page == block.page and block.first_line.startswith(start)
        ),
        None,
    )


REPO_CATALOG = load_catalog_file(REPO_ROOT / "jobs.json")


def check_json(block: Block) -> str:
    text = block.body.strip()
    data: Any = json.loads("{" + text + "}" if text.startswith('"') else text)  # a fragment of jobs.json
    if "jobs" in data:
        check_scenario_block(block, parse_scenario(data))
        return "scenario"
    if "s3_triggers" in data or "job_types" in data:
        load_catalog(data, base=REPO_ROOT)
        return "catalog"
    if "runner" in data:
        JobType.model_validate(data)
        return "job type"
    if "job_id" in data:
        [job] = parse_message(json.dumps(data), Settings(), REPO_CATALOG).jobs
        return f"job message ({job.type})"
    if set(data) == {"app"}:
        assert data["app"].endswith("app.py"), data
        return "cdk.json"
    raise AssertionError(f"{block}: a JSON block of no known kind; check it or list it in SHOWN_NOT_RUN")


DLQ_CLAIM = re.compile(r"`(?P<job>[\w.-]+)` (?:is in|goes to|ends in) the DLQ(?: with `(?P<error>[^`]+)`)?")
"""What a page's prose says of a scenario's job: "`typo` is in the DLQ with `InvalidParameters: ...`"."""
REPORTED = ("final", "executions", "released", "redelivered_while_running", "dlq_error")
"""The fields of a page's report (of the scenario above it) that the simulation's run must show too: where
each job ended, how many executions it took, its releases and excused redeliveries. `deliveries` and
`renewals` are not compared: they count the offline runtime's receives and renewal calls (its mapping's
polling, the throttle's draws), which the simulation makes on its own schedule."""


def ending(run: ScenarioRun, scenario: Scenario, where: str) -> dict[str, str]:
    """Each job's end; fails unless the run broke no property and every job ended as the scenario expects
    (its `expect`, by default `dlq` for a failing job or a raw body and `deleted` otherwise)."""
    assert run.result.violation is None, f"{where}: the simulation found a broken property: {run.result.violation}"
    ends = {job.id: run.jobs[job.id].final if job.id in run.jobs else "lost" for job in scenario.jobs}
    assert ends == {job.id: job.expected for job in scenario.jobs}, f"{where}: jobs ended otherwise than expected"
    assert set(ends.values()) <= {"deleted", "dlq"}, f"{where}: a job did not end: {ends}"
    return ends


def page_claims(block: Block) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """What the page says of the scenario block's outcome, per job and in total: the prose after it, and
    the report the page shows for it (a JSON block with "ok" before the next scenario block)."""
    claims: dict[str, dict[str, Any]] = {}
    for match in DLQ_CLAIM.finditer(block.prose_after):
        claims.setdefault(match["job"], {})["final"] = "dlq"
        if match["error"] is not None:
            claims[match["job"]]["dlq_error"] = match["error"]
    totals: dict[str, Any] = {}
    for later in FENCE.finditer(block.after):
        try:
            data = json.loads(later.group(2))
        except ValueError:
            continue
        if isinstance(data, dict) and "ok" in data:  # the report of this scenario
            assert data["ok"] is True, f"{block}: the page's report is not ok"
            for job, fields in data["jobs"].items():
                claims.setdefault(job, {}).update({key: fields[key] for key in REPORTED if key in fields})
            totals = {key: data["totals"][key] for key in ("jobs", "deleted", "dlq") if key in data["totals"]}
            break
        if isinstance(data, dict) and "jobs" in data:  # the next scenario: its own report follows it
            break
    return claims, totals


def check_scenario_block(block: Block, scenario: Scenario) -> None:
    """Run the block in the simulation: no property broken, every job ended as the scenario expects, and
    as the page says (its prose, its report). A block in SCENARIOS_NOT_RUN must be refused as listed."""
    listed = next(
        (
            why
            for (page, start), why in SCENARIOS_NOT_RUN.items()
            if page == block.page and block.first_line.startswith(start)
        ),
        None,
    )
    if listed is not None:
        with pytest.raises(NotModelled, match=re.escape(listed)):
            run_scenario(scenario)
        return
    run = run_scenario(scenario)
    ends = ending(run, scenario, str(block))
    claims, totals = page_claims(block)
    for job, claimed in claims.items():
        assert job in run.jobs, f"{block}: the page speaks of job {job!r}, which the scenario does not have"
        report = run.jobs[job]
        shown = {
            "final": report.final,
            "executions": len(report.executions),
            "released": report.released,
            "redelivered_while_running": report.redelivered_while_running,
            "dlq_error": report.dlq_error,
        }
        assert {key: shown[key] for key in claimed} == claimed, f"{block}: job {job!r} is not as the page says"
    finals = list(ends.values())
    shown_totals = {"jobs": len(finals), "deleted": finals.count("deleted"), "dlq": finals.count("dlq")}
    assert {key: shown_totals[key] for key in totals} == totals, f"{block}: the totals are not as the page's report"


@cache
def check_scenario_file(path: Path) -> None:
    """A scenario file a command names (`offline run|sim --scenario FILE`), run in the simulation."""
    scenario = load_scenario(path)
    ending(run_scenario(scenario), scenario, str(path.relative_to(REPO_ROOT)))


JOBS_FILE_CONTEXT = re.search(r'^JOBS_FILE_CONTEXT = "(\w+)"', (REPO_ROOT / "app.py").read_text(), re.M)
"""The app's one context key besides the config's (`-c jobs_file=PATH`)."""
PLACEHOLDERS = {
    # a page's placeholder: a value of the shape AWS gives, for the command to go through its parser
    "<id>": "1234abcd-12ab-34cd-56ef-1234567890ab",  # a KMS key id
    "<message-id>": "9d1e7b52-3c4a-4f0e-8b6d-7a2c1e9f4b38",  # an SQS message id
}
CONTEXT = re.compile(r"(?:^|\s)(?:-c|--context)[ =](\S+)")


def check_cdk_context(command: str) -> str:
    """The `-c key=value` settings of an `npx cdk` command, through the stack's config as the app reads
    them (strings, as the CDK command line passes them), and against the repository's job types; with
    them, the settings a trailing comment offers (`# optional: -c fifo_release_delay_s=60`)."""
    words, _, comment = command.partition(" #")
    given = CONTEXT.findall(words)
    if not given:
        return "listed"  # every setting at its default: tests/infra synthesizes that stack
    from longjobs.construct.config import check_job_types, context_keys, load_config

    assert JOBS_FILE_CONTEXT is not None, "app.py no longer names its JOBS_FILE_CONTEXT"
    contexts = [given, given + CONTEXT.findall(comment)] if CONTEXT.search(comment) else [given]
    for settings in contexts:
        context: dict[str, str] = {}
        for setting in settings:
            key, equals, value = setting.partition("=")
            assert equals and value, f"{command!r}: -c {setting} is not key=value"
            assert key in (*context_keys(), JOBS_FILE_CONTEXT[1]), f"{command!r}: the app reads no context {key!r}"
            for placeholder in re.findall(r"<[^>]*>", value):
                assert placeholder in PLACEHOLDERS, f"{command!r}: an unknown placeholder {placeholder}"
                value = value.replace(placeholder, PLACEHOLDERS[placeholder])
            context[key] = value
        catalog = load_catalog_file(REPO_ROOT / context.pop(JOBS_FILE_CONTEXT[1], "jobs.json"), strict=True)
        check_job_types(load_config(context), catalog)
    return "cdk context"


def command_lines(block: Block) -> Iterator[str]:
    """The block's commands: continuation lines joined, comments and prompts' output dropped."""
    lines = block.body.splitlines()
    if block.info == "console":
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    pending = ""
    for raw in "\n".join(lines).replace("\\\n", " ").splitlines():
        pending = f"{pending} {raw}" if pending else raw
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # a quoted string goes on over the next line
            continue
        command = pending.strip()
        pending = ""
        if command and not command.startswith("#"):
            yield command
    assert not pending, f"{block}: unbalanced quotes"


SCALED_DOWN = {"--seeds": "1", "--events": "1000"}
"""Sizes a command runs with here: a page's campaign of 200 seeds runs one, a generator's 100,000 events
1,000 (the same code paths, in a unit test's time)."""
REAL_TIME = {
    # `python -m offline <command>`: the test that runs it (these run minutes of real time, or until stopped)
    "run": "tests/e2e/test_command.py and tests/e2e/test_parking.py run scenarios through `run` (this test "
    "runs the page's scenario file in the simulation)",
    "demo": "make demo; tests/sim/test_demo_figures.py checks README's figures",
    "chaos": "tests/e2e/test_chaos.py runs a campaign through `chaos`",
    "serve": "tests/e2e/test_serve.py serves, and runs every documented `longjobs --endpoint-url` command",
}

MAKE_TARGETS = {
    # a `make` target the pages name: what it does, and what runs it (the test checks the Makefile has it)
    "install": "creates .venv and installs the pins and the CDK command line; `make test` runs it",
    "test": "lint, type checks and the whole suite, this test among it: the entry point for developers and CI",
    "demo": "the offline demo, over a minute of real time with Spark (`python -m offline demo`, REAL_TIME); "
    "tests/sim/test_demo_figures.py checks the figures the pages show for it",
    "lock": "re-pins requirements-lock.txt to what .venv holds: by hand, after pyproject.toml's ranges change",
    "checkov-env": "installs checkov in an environment of its own; `make test` runs it",
    "checkov": "synthesizes the default stack (`npx cdk synth`, Node) and runs checkov on it; "
    "tests/infra/test_checkov.py runs checkov on the templates the infra tests synthesize, and "
    "tests/infra/test_stack_compliance.py runs its command on `npx cdk synth`'s own output",
    "dist": "builds the sdist and wheel and checks them with twine; tests/infra/test_install.py runs it",
}
"""Every `make` target a page names, in a block or inline; an entry no page names fails the test."""

BENCHMARK_PARSERS = ("build_parser", "parse_args")
"""A benchmark module's top-level function that parses its arguments apart from its run: `build_parser()`
gives the parser, `parse_args(argv)` parses (benchmarks.renewal_cost's). Every benchmark has one."""


def runnable(words: list[str]) -> list[str]:
    """A command's arguments as run here: the repository's files by their full path, sizes scaled down."""
    args = [str(REPO_ROOT / word) if "/" in word and (REPO_ROOT / word).exists() else word for word in words]
    for flag, value in SCALED_DOWN.items():
        if flag in args[:-1]:
            args[args.index(flag) + 1] = value
    return args


CHECKOUT_READS = ("jobs", "jobs.json", "docs")
"""What the pages' commands read from the checkout they are run in (a scenario's job entries, its input)."""


def run_command(main: Any, args: list[str], workdir: Path, command: str, *, failing: bool = False) -> None:
    """Run a command's `main` in `workdir`, a stand-in for the checkout (what the commands read is linked
    there; what they write stays there, with the files the page's earlier commands left); it must end with 0,
    or with 1 when it is `failing` (a simulation with a planted bug reports the property it broke)."""
    for name in CHECKOUT_READS:
        if not (workdir / name).exists():
            (workdir / name).symlink_to(REPO_ROOT / name)
    previous = Path.cwd()
    os.chdir(workdir)
    try:
        code = main(runnable(args))
    except SystemExit as exit_:  # argparse's --help
        code = exit_.code
    finally:
        os.chdir(previous)
    assert code in ((0, None, 1) if failing else (0, None)), f"{command!r} ended with {code}"


def check_make(targets: list[str], makefile: str, command: str) -> str:
    """A `make` command: each target in the Makefile, and in MAKE_TARGETS (what it does, what runs it)."""
    assert targets, f"{command!r}: name the target"
    for target in targets:
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"{command!r}: the Makefile has no {target!r}"
        assert target in MAKE_TARGETS, f"{command!r}: say in MAKE_TARGETS what `make {target}` does and what runs it"
    return "make target"


def parses(parse: Callable[[], object]) -> None:
    """Parse arguments (`parse`), an error of the parser's as the test's failure: its message, one line."""
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            parse()
    except UsageError as error:  # the longjobs parser's errors
        raise AssertionError(str(error)) from None
    except SystemExit as exit_:  # argparse's (0: --help)
        assert exit_.code in (0, None), errors.getvalue().strip().splitlines()[-1]


def benchmark_parser(module: str) -> Callable[[list[str]], object]:
    """The benchmark's own way to parse its arguments without running it (`BENCHMARK_PARSERS`)."""
    source = REPO_ROOT / Path(*module.split(".")).with_suffix(".py")
    assert source.is_file(), f"no benchmark {module}"
    defined = {
        node.name for node in ast.parse(source.read_text(encoding="utf-8")).body if isinstance(node, ast.FunctionDef)
    }
    name = next((name for name in BENCHMARK_PARSERS if name in defined), None)
    assert name is not None, f"{module} has no parser apart from its run: give it a build_parser()"
    function = getattr(importlib.import_module(module), name)
    if name == "build_parser":
        return lambda args: function().parse_args(args)
    return lambda args: function(args)


def check_benchmark(module: str, args: list[str], command: str) -> str:
    """A benchmark's command: its arguments through its own parser."""
    parse = benchmark_parser(module)
    parses(lambda: parse(args))
    return "benchmark parsed"


def check_command(command: str, makefile: str, workdir: Path) -> str:
    if command.startswith("npx cdk"):
        return check_cdk_context(command)
    not_run = next((reason for prefix, reason in COMMANDS_NOT_RUN.items() if command.startswith(prefix)), None)
    if not_run is not None or SHELL_ASSIGNMENT.match(command):
        return "listed"
    words = offline_as_module(shlex.split(command.replace("[", "").replace("]", ""), comments=True))
    if words[0] == "make":
        return check_make(words[1:], makefile, command)
    if words[0] in ("longjobs", ".venv/bin/longjobs"):
        if words[1:] in (["--help"], ["--version"]):
            run_command(longjobs_main, words[1:], workdir, command)
            return "run"
        longjobs_parser().parse_args(words[1:])
        if command.startswith("longjobs --endpoint-url http://127.0.0.1:4566 "):
            return "run against serve"  # tests/e2e/test_serve.py, answer_every_documented_longjobs_command
        return "parsed"  # an account's stack (`--stack`): it needs AWS
    if words[:2] == [".venv/bin/python", "-m"]:
        module, args = words[2], words[3:]
        if module == "offline" and args[0] == "sim":
            run_command(offline_main, args, workdir, command, failing="--plant" in args)
            return "run"
        if module == "offline":
            assert args[0] in REAL_TIME, f"{command!r}: an offline command of no known kind"
            scenario = getattr(offline_parser().parse_args(args), "scenario", None)
            if scenario is not None and scenario.name not in SCENARIO_FILES_NOT_RUN:
                check_scenario_file(REPO_ROOT / scenario)
        elif module == "longjobs":
            assert args == ["--help"], command
            run_command(longjobs_main, args, workdir, command)
        elif module == "longjobs.pipeline.generate":
            run_command(generate.main, args, workdir, command)
            return "run"
        elif module == "longjobs.pipeline.glue_job":
            glue_job.parse_args([module, *args])  # Spark: tests/pipeline runs the job on generated events
        elif module == "longjobs.history.checker":
            run_command(checker_main, args, workdir, command)  # the trace a `sim --trace` above wrote
            return "run"
        elif module == "longjobs.sim.mutation":
            mutation_parser().parse_args(args)  # a run takes an hour: tests/sim/test_mutation.py holds its parts
        else:
            assert module.startswith("benchmarks."), f"{command!r}: a module of no known kind"
            return check_benchmark(module, args, command)
        return module
    raise AssertionError(f"a command of no known kind: {command!r}; check it or list it in COMMANDS_NOT_RUN")


@pytest.mark.parametrize("block", list(blocks()), ids=str)
def test_docs_example_runs_or_is_listed(block: Block, tmp_path: Path) -> None:
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    reason = shown(block)
    if block.info == "python":
        ast.parse(block.body)
        if block.first_line.startswith("from pyspark"):  # a job's entry: a top-level run(spark, params)
            [run] = [node for node in ast.parse(block.body).body if isinstance(node, ast.FunctionDef)]
            assert (run.name, [arg.arg for arg in run.args.args]) == ("run", ["spark", "params"])
            return
        if reason is None:
            exec(compile(block.body, str(block), "exec"), {"boto3": pytest.importorskip("boto3")})  # no call is made
        return
    if reason is not None:
        return
    if block.info == "json":
        check_json(block)
        return
    if block.info in ("sh", "console"):
        checked = [check_command(command, makefile, tmp_path) for command in command_lines(block)]
        assert checked, f"{block}: no command"
        return
    raise AssertionError(f"{block}: a ```{block.info} block is neither checked nor listed in SHOWN_NOT_RUN")


def test_docs_example_lists_name_only_blocks_that_exist() -> None:
    """The lists stay true: every entry still matches a block on its page."""
    present = {(block.page, block.first_line) for block in blocks()}
    for page, start in [*SHOWN_NOT_RUN, *SCENARIOS_NOT_RUN]:
        assert any(p == page and line.startswith(start) for p, line in present), (page, start)
    commands = [command for block in blocks() if block.info in ("sh", "console") for command in command_lines(block)]
    for name in SCENARIO_FILES_NOT_RUN:
        assert any(f"--scenario {name}" in command for command in commands), name
        assert not (REPO_ROOT / name).exists(), f"{name} is in the repository: run it"


LAYOUT_NAME = re.compile(r"(?<![\w./-])([\w-]+(?:/|\.py|\.json))(?=[\s,:]|$)")
"""A folder (`name/`) or a file (`name.py`, `name.json`) named in a layout tree."""
LAYOUT_LINE = re.compile(r"[\w-]+(?:/|\.py|\.json)(?:\s{2,}|$)")
"""A layout tree's first line: a folder or a file, alone or before its description."""


def layout_paths(block: Block) -> list[Path]:
    """The paths a layout tree names. A tree whose first line is a folder is that folder's; each line
    starts with a folder or a file, and the names after it on the line are inside that folder."""
    first, *rest = block.body.strip().splitlines()
    nested = first.strip().endswith("/")
    base = REPO_ROOT / first.strip() if nested else REPO_ROOT
    paths = [base] if nested else []
    for line in rest if nested else [first, *rest]:
        names = LAYOUT_NAME.findall(line)
        if names:
            head, *inside = names
            paths.append(base / head)
            paths.extend((base / head if head.endswith("/") else base) / name for name in inside)
    return paths


def test_docs_layout_names_what_exists() -> None:
    """Every folder and file a layout tree of the docs names is where the tree puts it."""
    trees = [block for block in blocks() if not block.info and LAYOUT_LINE.match(block.first_line)]
    assert {block.page for block in trees} == {"README.md", "design.md", "jobs.md"}, trees
    for block in trees:
        missing = [str(path.relative_to(REPO_ROOT)) for path in layout_paths(block) if not path.exists()]
        assert not missing, f"{block}: the layout names what is not there: {missing}"


OFFLINE_SCRIPTS = ("longjobs-offline", ".venv/bin/longjobs-offline")
"""The offline runtime's console script, as a user's own application has it: `python -m offline` here."""


def offline_as_module(words: list[str]) -> list[str]:
    """Optional parts are taken as given; the console script is checked as the module it runs."""
    return [".venv/bin/python", "-m", "offline", *words[1:]] if words[0] in OFFLINE_SCRIPTS else words


INLINE_SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")
INLINE_COMMANDS = (
    "longjobs ",
    ".venv/bin/longjobs ",
    "python -m offline ",
    ".venv/bin/python -m offline ",
    "longjobs-offline ",
    ".venv/bin/longjobs-offline ",
    "python -m benchmarks.",
    ".venv/bin/python -m benchmarks.",
    "make ",
)
"""The inline code spans of the prose that are commands, by how they start."""


def inline_commands(page: Path) -> Iterator[tuple[int, str]]:
    """The page's inline commands outside its blocks, with their line: each span's text on one line."""
    text = FENCE.sub(lambda block: "\n" * block.group(0).count("\n"), page.read_text(encoding="utf-8"))
    for match in INLINE_SPAN.finditer(text):
        span = " ".join(match.group(1).split())  # a span may go on over the next line
        if span.startswith(INLINE_COMMANDS):
            yield text[: match.start()].count("\n") + 1, span


def without_required(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser, and its commands' parsers, with no argument required: prose names a command, or an
    option of it, without the arguments a run needs (`longjobs lease`, `python -m offline chaos --fifo`)."""
    for action in parser._actions:
        action.required = False
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                without_required(subparser)
    return parser


def check_inline(span: str, makefile: str) -> str:
    """An inline command through the parser its block would go through; placeholders replaced, `[...]`
    optional parts as given, a `...` (and so on) left out, the arguments a run needs may be missing."""
    for placeholder in re.findall(r"<[^<>\s]+>", span):
        assert placeholder in PLACEHOLDERS, f"an unknown placeholder {placeholder}: add it to PLACEHOLDERS"
        span = span.replace(placeholder, PLACEHOLDERS[placeholder])
    words = offline_as_module([word for word in shlex.split(span.replace("[", "").replace("]", "")) if word != "..."])
    if words[0] == "make":
        return check_make(words[1:], makefile, span)
    if words[0] in ("longjobs", ".venv/bin/longjobs"):
        parses(lambda: without_required(longjobs_parser()).parse_args(words[1:]))
        return "longjobs"
    module, args = words[2], words[3:]
    if module == "offline":
        parses(lambda: without_required(offline_parser()).parse_args(args))
        return "offline"
    return check_benchmark(module, args, span)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_docs_inline_commands_parse(page: Path) -> None:
    """The prose's inline commands (`longjobs ...`, `python -m offline ...`, `make ...`) parse as the
    blocks' commands do; every span that does not is named with its page and line."""
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    failures = []
    for line, span in inline_commands(page):
        try:
            check_inline(span, makefile)
        except AssertionError as error:
            failures.append(f"{page.name}:{line}: `{span}`: {error}")
    assert not failures, "inline commands that do not parse:\n" + "\n".join(failures)


REASON_PATH = re.compile(r"(?<![\w/.])tests/[\w/.-]*\w")
BARE_TEST_FILE = re.compile(r"(?<![\w/.])test_\w+\.py")


def test_docs_example_not_run_lists_are_not_stale() -> None:
    """The lists of what is not run stay true: every command prefix, real-time command, make target and
    benchmark still matches a documented command, and every test a reason names is in the repository."""
    commands = [command for block in blocks() if block.info in ("sh", "console") for command in command_lines(block)]
    inline = [span for page in PAGES for _, span in inline_commands(page)]
    assert any(span.startswith("longjobs ") for span in inline), "no inline `longjobs` command found"
    assert any(" -m offline " in span for span in inline), "no inline `python -m offline` command found"
    for prefix in COMMANDS_NOT_RUN:
        assert any(command.startswith(prefix) for command in commands), f"no page runs {prefix!r}: unlist it"
    assert any(SHELL_ASSIGNMENT.match(command) for command in commands), "no page assigns a shell variable"
    offline_commands = {
        words[3]
        for words in (shlex.split(command, comments=True) for command in commands)
        if words[:3] == [".venv/bin/python", "-m", "offline"]
    }
    for name in REAL_TIME:
        assert name in offline_commands, f"no page runs `python -m offline {name}`: take it out of REAL_TIME"
    made = {
        target
        for command in [*commands, *inline]
        if command.startswith("make ")
        for target in shlex.split(command, comments=True)[1:]
    }
    assert set(MAKE_TARGETS) <= made, f"no page names `make {sorted(set(MAKE_TARGETS) - made)}`: unlist it"
    assert made <= set(MAKE_TARGETS), f"say in MAKE_TARGETS what `make {sorted(made - set(MAKE_TARGETS))}` does"
    lists: list[dict[Any, str]] = [
        SHOWN_NOT_RUN,
        SCENARIOS_NOT_RUN,
        SCENARIO_FILES_NOT_RUN,
        COMMANDS_NOT_RUN,
        REAL_TIME,
        MAKE_TARGETS,
    ]
    for reason in [why for listed in lists for why in listed.values()]:
        assert not BARE_TEST_FILE.search(reason), f"give the test's path from the repository's root: {reason!r}"
        for path in REASON_PATH.findall(reason):
            assert (REPO_ROOT / path).exists(), f"a reason names {path}, which is not in the repository: {reason!r}"
    for name, reason in REAL_TIME.items():
        assert re.search(r"tests/[\w/]+\.py", reason), f"REAL_TIME[{name!r}] names no test that runs it"


PYTEST_DEFAULT_NORECURSEDIRS = ("*.egg", ".*", "_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}")
"""Folders pytest does not enter unless `norecursedirs` says otherwise
(https://docs.pytest.org/en/stable/reference/reference.html#confval-norecursedirs)."""


def test_docs_layout_every_test_folder_is_collected() -> None:
    """A folder of tests named as pytest skips by default (`build`, `dist`, ...) would pass CI unrun."""
    folders = [path for path in (REPO_ROOT / "tests").iterdir() if path.is_dir() and any(path.glob("test_*.py"))]
    skipped = [
        path.name
        for path in folders
        if any(fnmatch.fnmatch(path.name, pattern) for pattern in PYTEST_DEFAULT_NORECURSEDIRS)
    ]
    assert folders and skipped == []
