"""Every example in README.md and docs/ is run or validated by the code it stands for, so a page cannot
drift from the code: scenarios through the scenario loader, job types and triggers through the job
catalog, job messages through the receiver's parser, command lines through the real argument parsers
(`python -m offline`, `longjobs`, the pipeline's commands), `make` targets against the Makefile, Python
through the compiler. What needs an AWS account, installs software or shows an output is listed below
with the reason; a block or command that is neither checked nor listed fails the test.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from longjobs.cli.__main__ import build_parser as longjobs_parser
from longjobs.engine.jobs import load_catalog, load_catalog_file
from longjobs.engine.jobs.types import JobType
from longjobs.engine.receiver.models import parse_message
from longjobs.engine.settings import Settings
from longjobs.offline.__main__ import build_parser as offline_parser
from longjobs.offline.scenario import parse_scenario
from longjobs.pipeline import generate, glue_job
from tests import REPO_ROOT

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

COMMANDS_NOT_RUN = {
    # a command's first word(s): why the test only shows it
    "npx cdk": "deploys or synthesizes against an AWS account (tests/infra runs `cdk synth`)",
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
            yield Block(page.name, line, match.group(1).strip(), match.group(2))


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
        parse_scenario(data)
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


def check_command(command: str, makefile: str) -> str:
    not_run = next((reason for prefix, reason in COMMANDS_NOT_RUN.items() if command.startswith(prefix)), None)
    if not_run is not None or SHELL_ASSIGNMENT.match(command):
        return "listed"
    words = shlex.split(command.replace("[", "").replace("]", ""), comments=True)  # optional parts: as given
    if words[0] == "make":
        assert all(re.search(rf"^{target}:", makefile, re.M) for target in words[1:]), command
        return "make target"
    if words[0] in ("longjobs", ".venv/bin/longjobs"):
        parser = longjobs_parser()
        if words[1:] != ["--help"]:
            parser.parse_args(words[1:])
        return "longjobs"
    if words[:2] == [".venv/bin/python", "-m"]:
        module, args = words[2], words[3:]
        if module == "offline":
            offline_parser().parse_args(args)
        elif module == "longjobs":
            assert args == ["--help"], command
        elif module == "longjobs.pipeline.generate":
            generate.build_parser().parse_args(args)
        elif module == "longjobs.pipeline.glue_job":
            glue_job.parse_args([module, *args])
        elif module == "longjobs.sim.checker":
            assert importlib.util.find_spec(module) and len(args) == 1, command  # one trace file
        else:
            assert module.startswith("benchmarks.") and importlib.util.find_spec(module), command
        return module
    raise AssertionError(f"a command of no known kind: {command!r}; check it or list it in COMMANDS_NOT_RUN")


@pytest.mark.parametrize("block", list(blocks()), ids=str)
def test_docs_example_runs_or_is_listed(block: Block) -> None:
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
        assert [check_command(command, makefile) for command in command_lines(block)], f"{block}: no command"
        return
    raise AssertionError(f"{block}: a ```{block.info} block is neither checked nor listed in SHOWN_NOT_RUN")


def test_docs_example_lists_name_only_blocks_that_exist() -> None:
    """The lists stay true: every entry still matches a block on its page."""
    present = {(block.page, block.first_line) for block in blocks()}
    for page, start in SHOWN_NOT_RUN:
        assert any(p == page and line.startswith(start) for p, line in present), (page, start)
