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
Makefile. What needs an AWS account, installs software or shows an output is listed below with the
reason; a block or command that is neither checked nor listed fails the test.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from longjobs.cli.__main__ import build_parser as longjobs_parser
from longjobs.cli.__main__ import main as longjobs_main
from longjobs.construct import quiet_node_notices
from longjobs.engine.jobs import load_catalog, load_catalog_file
from longjobs.engine.jobs.types import JobType
from longjobs.engine.receiver.models import parse_message
from longjobs.engine.settings import Settings
from longjobs.offline.__main__ import build_parser as offline_parser
from longjobs.offline.__main__ import main as offline_main
from longjobs.offline.scenario import Scenario, load_scenario, parse_scenario
from longjobs.pipeline import generate, glue_job
from longjobs.sim.checker import main as checker_main
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
    ("install.md", "import aws_cdk as cdk"): "a user's CDK app: tests/infra/test_install.py synthesizes one",
    ("jobs.md", "import aws_cdk as cdk"): "a user's CDK app (the construct's props: tests/infra/test_processor.py)",
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
    "python3 -m venv": "creates an environment (tests/infra/test_install.py)",
    ".venv/bin/pip install": "installs packages (tests/infra/test_install.py installs the wheel)",
    "out()": "a shell helper of the deploy page",
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
PLACEHOLDERS = {"<id>": "1234abcd-12ab-34cd-56ef-1234567890ab"}  # a KMS key id of the shape AWS gives
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
    "run": "tests/e2e/test_command.py and test_parking.py run scenarios through `run` (this test runs the "
    "page's scenario file in the simulation)",
    "demo": "make demo; tests/sim/test_demo_figures.py checks README's figures",
    "chaos": "tests/e2e/test_chaos.py runs a campaign through `chaos`",
    "serve": "tests/e2e/test_serve.py serves, and runs every documented `longjobs --endpoint-url` command",
}


def runnable(words: list[str]) -> list[str]:
    """A command's arguments as run here: the repository's files by their full path, sizes scaled down."""
    args = [str(REPO_ROOT / word) if "/" in word and (REPO_ROOT / word).exists() else word for word in words]
    for flag, value in SCALED_DOWN.items():
        if flag in args[:-1]:
            args[args.index(flag) + 1] = value
    return args


CHECKOUT_READS = ("jobs", "jobs.json", "docs")
"""What the pages' commands read from the checkout they are run in (a scenario's job entries, its input)."""


def run_command(main: Any, args: list[str], workdir: Path, command: str) -> None:
    """Run a command's `main` in `workdir`, a stand-in for the checkout (what the commands read is linked
    there; what they write stays there, with the files the page's earlier commands left); it must end with 0."""
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
    assert code in (0, None), f"{command!r} ended with {code}"


def check_command(command: str, makefile: str, workdir: Path) -> str:
    if command.startswith("npx cdk"):
        return check_cdk_context(command)
    not_run = next((reason for prefix, reason in COMMANDS_NOT_RUN.items() if command.startswith(prefix)), None)
    if not_run is not None or SHELL_ASSIGNMENT.match(command):
        return "listed"
    words = shlex.split(command.replace("[", "").replace("]", ""), comments=True)  # optional parts: as given
    if words[0] == "make":
        assert all(re.search(rf"^{target}:", makefile, re.M) for target in words[1:]), command
        return "make target"
    if words[0] in ("longjobs", ".venv/bin/longjobs"):
        if words[1:] == ["--help"]:
            run_command(longjobs_main, words[1:], workdir, command)
            return "run"
        longjobs_parser().parse_args(words[1:])
        if command.startswith("longjobs --endpoint-url http://127.0.0.1:4566 "):
            return "run against serve"  # tests/e2e/test_serve.py, answer_every_documented_longjobs_command
        return "parsed"  # an account's stack (`--stack`): it needs AWS
    if words[:2] == [".venv/bin/python", "-m"]:
        module, args = words[2], words[3:]
        if module == "offline" and args[0] == "sim":
            run_command(offline_main, args, workdir, command)
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
        elif module == "longjobs.sim.checker":
            run_command(checker_main, args, workdir, command)  # the trace a `sim --trace` above wrote
            return "run"
        else:
            assert module.startswith("benchmarks.") and importlib.util.find_spec(module), command
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
