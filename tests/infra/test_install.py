"""The distribution as a user installs it: the wheel, by file, into a fresh environment outside this
repository, beside a CDK app that has its own `infra/` and `functions/` packages.

The app must keep its own `infra` (the wheel installs one top-level package, `longjobs`), and it must
synthesize, through `npx cdk synth` with both policy gates as docs/install.md writes it, with the handlers
of the installed package in its Lambda asset, not this repository's. The environment is made by uv from
its cache, with this repository's lock as constraints; only `make dist`'s build tools (setuptools, twine)
come from the package registry, once, into uv's cache.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from app import setting_context
from longjobs.cli import resources
from longjobs.construct import NODE_NOTICES
from longjobs.construct.config import ConfigError, load_config, make_config
from tests import REPO_ROOT
from tests.infra.conftest import cdk_json_context, cli_env, working_copy
from tests.infra.test_stack_compliance import nag_violations

UV = Path(sys.executable).parent / "uv"

USER_INFRA = '''"""The user's own infra package: the common layout of a CDK app."""

OWNER = "the user's app"
'''
USER_PAGE = REPO_ROOT / "docs" / "install.md"
PROBE = """import json, sys
import functions, infra, longjobs
print(json.dumps({"infra": infra.__file__, "owner": infra.OWNER, "functions": functions.__file__,
                  "longjobs": longjobs.__file__, "path": sys.path}))
"""
"""Run in the app's folder after its synth: which `infra`, `functions` and `longjobs` the app imports."""


def page_block(caption: str) -> str:
    """The code block that follows `caption` on the install page: the app is the page's, as written."""
    text = USER_PAGE.read_text(encoding="utf-8")
    match = re.search(re.escape(caption) + r"[^\n]*\n+```[a-z]*\n(.*?)^```", text, re.S | re.M)
    assert match, f"docs/install.md has no block after {caption!r}"
    return match.group(1)


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(arg) for arg in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_install_page_stack_has_the_outputs_longjobs_reads(tmp_path: Path) -> None:
    """`longjobs --stack Data` finds the processor by the stack's outputs: the page's stack declares each
    one it reads, so the stack it deploys can be operated."""
    namespace: dict[str, Any] = {}
    exec(page_block("`infra/__init__.py` (empty) and `infra/stack.py`"), namespace)
    app = cdk.App(context=cdk_json_context(), outdir=str(tmp_path))
    stack = namespace["DataStack"](app, "Data")
    declared = app.synth().get_stack_by_name(stack.stack_name).template.get("Outputs", {})

    class Deployed:
        def describe_stacks(self, StackName: str) -> dict[str, Any]:  # boto3's keyword
            outputs = [{"OutputKey": key, "OutputValue": f"{key}-value"} for key in declared]
            return {"Stacks": [{"StackName": StackName, "StackStatus": "CREATE_COMPLETE", "Outputs": outputs}]}

    found = resources.from_stack(Deployed(), "Data")  # type: ignore[arg-type]

    assert (found.queue_url, found.table_name) == ("QueueUrl-value", "LeaseTableName-value")
    assert found.curated_uri == "s3://CuratedBucketName-value/", "the spark type's default output"
    assert found.metrics_service == "MetricsService-value", "the metrics `status` and `top` read"


def test_install_page_own_app_takes_settings_as_arguments_not_context(tmp_path: Path) -> None:
    """The page says what `-c` does in an app of one's own, and each claim holds. The page's stack is the
    same with its `-c` as without, and no message names the key: the construct reads no CDK context. The
    page's way to take a setting from `-c` changes the stack, and an unset key keeps the default. The
    page's `infra=` and `engine=` examples are settings, and a key there that names none is refused, as
    the bundled app refuses it from `-c`."""
    page = " ".join(USER_PAGE.read_text(encoding="utf-8").split())
    ignored = re.search(r"`npx cdk deploy -c (\w+)=([^`\s]+)` leaves your stack as it is", page)
    assert ignored, "install.md says what `-c` does in the user's own app"
    key, value = ignored.groups()
    examples = re.search(r"`infra=(\{[^`]*\})`, `engine=(\{[^`]*\})`", page)
    assert examples, "install.md shows a setting passed as infra= and engine="
    read = re.search(r"`infra=(\{[^`]*try_get_context[^`]*\})`", page)
    assert read, "install.md shows how to take a setting from `-c`"
    namespace: dict[str, Any] = {}
    exec(page_block("`infra/__init__.py` (empty) and `infra/stack.py`"), namespace)
    outdirs = itertools.count()

    def synth(context: dict[str, str], stack_class: Any) -> dict[str, Any]:
        app = cdk.App(context={**cdk_json_context(), **context}, outdir=str(tmp_path / str(next(outdirs))))
        stack = stack_class(app, "Data")
        assembled = app.synth().get_stack_by_name(stack.stack_name)
        assert not any(key in json.dumps(message.entry.data) for message in assembled.messages), assembled.messages
        return dict(assembled.template)

    class ReadsContext(cdk.Stack):
        """The page's stack's processor, its `infra=` as the page writes it."""

        def __init__(self, scope: cdk.App, construct_id: str) -> None:
            super().__init__(scope, construct_id)
            infra = eval(read[1], {"self": self})  # the page's expression, with the stack as `self`
            namespace["LongJobProcessor"](self, "Jobs", job_types=[namespace["NAP"]], infra=infra)

    assert synth({key: value}, namespace["DataStack"]) == synth({}, namespace["DataStack"])
    assert synth({key: value}, ReadsContext) != synth({}, ReadsContext), "the page's try_get_context reads -c"
    assert make_config(infra={key: None}) == make_config(), "an unset key keeps the default"

    infra, engine = ast.literal_eval(examples[1]), ast.literal_eval(examples[2])
    config = make_config(infra=infra, engine=engine)
    assert [getattr(config.infra, name) for name in infra] == list(infra.values())
    assert [getattr(config.engine, name) for name in engine] == list(engine.values())
    with pytest.raises(ConfigError, match="no such setting"):
        make_config(infra={f"{key}s": value})
    assert getattr(load_config(setting_context({key: value})).infra, key) == value, "the bundled app reads -c"
    with pytest.raises(ConfigError, match="no such setting"):
        load_config(setting_context({f"{key}s": value}))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `make dist` builds (from the sdist, each checked by twine), in a working copy of the
    repository, so the build leaves nothing (dist/, build/, *.egg-info) here."""
    source = working_copy(tmp_path_factory.mktemp("dist") / "sqs-long-jobs")
    run("make", "--no-print-directory", "dist", cwd=source)
    (built,) = (source / "dist").glob("*.whl")
    assert len(list((source / "dist").glob("*.tar.gz"))) == 1, "make dist builds the sdist too"
    return built


def test_install_wheel_ships_one_top_level_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith((".dist-info", ".data"))}
    assert top_level == {"longjobs"}
    data = {name.split("/", 1)[1] for name in names if name.split("/", 1)[0].endswith(".data")}
    assert all(path.startswith("data/share/sqs-long-jobs/demo/") for path in data), "only the demo's job and input"
    assert "data/share/sqs-long-jobs/demo/jobs/wordcount.py" in data
    assert "longjobs/offline/scenarios/demo.json" in names and "longjobs/pipeline/log4j2.properties" in names
    assert "longjobs/pipeline/log4j2-file.properties" in names, "the offline runtime's Spark log configuration"
    assert "longjobs/functions/receiver.py" in names and "longjobs/pipeline/glue_entry.py" in names
    metadata = next(name for name in names if name.endswith(".dist-info/METADATA"))
    lines = zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
    assert "License-Expression: Apache-2.0" in lines and "License-File: LICENSE" in lines
    licence = next(name for name in names if name.endswith(".dist-info/licenses/LICENSE"))
    assert zipfile.ZipFile(wheel).read(licence) == (REPO_ROOT / "LICENSE").read_bytes()
    assert (
        "Apache License" in (REPO_ROOT / "LICENSE").read_text() and "Version 2.0" in (REPO_ROOT / "LICENSE").read_text()
    )
    assert json.loads((REPO_ROOT / "package.json").read_text())["license"] == "Apache-2.0"
    requires = [line.removeprefix("Requires-Dist: ") for line in lines if line.startswith("Requires-Dist: ")]
    # The test tools are a dependency group (PEP 735), which a wheel's metadata does not carry: no exact
    # pin, and no extra a user could install them with.
    assert requires and not any('extra == "dev"' in line for line in requires), requires
    for_users = [line.split(";")[0] for line in requires]
    assert not any("==" in requirement for requirement in for_users), for_users
    assert not any(tool in requirement for requirement in for_users for tool in ("cfn-lint", "pytest", "mypy"))
    with_moto = [line for line in requires if "moto" in line]
    assert all('extra == "offline"' in line for line in with_moto), "moto only as the offline runtime's local AWS"


def test_install_beside_an_app_with_its_own_infra_and_functions(wheel: Path, tmp_path: Path) -> None:
    """The app keeps its own packages and synthesizes with the installed engine; the wheel's console
    scripts, `longjobs` and `longjobs-offline`, run from the same environment: the offline extra brings
    what the offline runtime imports (moto's server, the construct that renders the workflow), and a
    shipped scenario runs in the simulation."""
    app = tmp_path / "my-app"
    env_dir = app / ".venv"
    run(UV, "venv", "--quiet", "--python", sys.executable, env_dir, cwd=tmp_path)
    python = env_dir / "bin" / "python"
    lock = REPO_ROOT / "requirements-lock.txt"
    run(UV, "pip", "install", "--quiet", "--python", python, "-c", lock, f"{wheel}[infra,offline,cli]", cwd=tmp_path)

    (app / "infra").mkdir(parents=True)
    (app / "functions").mkdir()
    (app / "infra" / "__init__.py").write_text(USER_INFRA)
    (app / "infra" / "stack.py").write_text(page_block("`infra/__init__.py` (empty) and `infra/stack.py`"))
    (app / "functions" / "__init__.py").write_text('"""The user\'s own Lambda code."""\n')
    (app / "app.py").write_text(page_block("`app.py`, with your stack"))
    assert "cp ../sqs-long-jobs/cdk.json ." in USER_PAGE.read_text(encoding="utf-8")
    shutil.copy(REPO_ROOT / "cdk.json", app / "cdk.json")  # the page's `cp` from the checkout
    # The page's `npm install --save-dev aws-cdk@VERSION` is the CLI this repository pins, installed here.
    pinned = json.loads((REPO_ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]
    assert f"npm install --save-dev aws-cdk@{pinned} " in USER_PAGE.read_text(encoding="utf-8")
    (app / "node_modules").symlink_to(REPO_ROOT / "node_modules", target_is_directory=True)

    # Not this test run's: the page's own `quiet_node_notices()` must silence jsii's switches.
    environ = {
        key: value
        for key, value in cli_env(tmp_path).items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", *NODE_NOTICES)
    }
    synth = subprocess.run(
        ["npx", "cdk", "synth"], cwd=app, env=environ, capture_output=True, text=True, timeout=600, check=False
    )
    assert synth.returncode == 0, synth.stdout[-3000:] + synth.stderr[-3000:]
    assert "end-of-life" not in synth.stderr and "b'!!" not in synth.stderr, "the page's quiet_node_notices() works"
    assert "feature flags are not configured" not in synth.stderr, "the page's cdk.json sets them"
    assert nag_violations(app / "cdk.out") == []
    report = json.loads(run(python, "-c", PROBE, cwd=app, env=environ).strip().splitlines()[-1])

    assert report["owner"] == "the user's app" and Path(report["infra"]).parent == app / "infra"
    assert Path(report["functions"]).parent == app / "functions"
    installed = Path(report["longjobs"]).resolve()
    assert env_dir.resolve() in installed.parents, installed
    assert str(REPO_ROOT) not in report["path"]

    template = json.loads((app / "cdk.out" / "Data.template.json").read_text())
    handlers = {
        resource["Properties"]["Handler"]
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::Lambda::Function"
        and "Handler" in resource["Properties"]
        and resource["Properties"]["Handler"].startswith("longjobs.")
    }
    assert handlers == {f"longjobs.functions.{name}.handler" for name in ("receiver", "extender", "watcher")}
    shipped = [path for path in (app / "cdk.out").glob("asset.*/longjobs/functions/receiver.py")]
    assert shipped, "the receiver's asset holds the installed functions"
    assert shipped[0].read_bytes() == (installed.parent / "functions" / "receiver.py").read_bytes()
    catalog = json.loads((shipped[0].parents[1] / "engine" / "job_types.json").read_text())
    assert "nap" in {job_type["name"] for job_type in catalog["job_types"]}

    bin_dir = env_dir / "bin"
    assert "cancel" in run(bin_dir / "longjobs", "--help", cwd=tmp_path, env=environ)
    assert "sim" in run(bin_dir / "longjobs-offline", "--help", cwd=tmp_path, env=environ)
    shipped_scenario = installed.parent / "offline" / "scenarios" / "parking.json"
    outcome = json.loads(
        run(bin_dir / "longjobs-offline", "sim", "--scenario", shipped_scenario, cwd=tmp_path, env=environ)
    )
    assert outcome["ok"] is True, outcome

    # The demo outside a checkout: its job and input come from the wheel's data files. This environment has
    # no `pipeline` extra, so it stops there, past the scenario's load (which reads the job's entry file).
    outside = tmp_path / "no-checkout"
    outside.mkdir()
    demo = subprocess.run(
        [bin_dir / "longjobs-offline", "demo", "--out", "demo", "--quiet"],
        cwd=outside, env=environ, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert demo.returncode == 2 and "PySpark is not installed" in demo.stderr, demo.stderr
    assert (outside / "demo" / "workspace" / "jobs" / "wordcount.py").is_file()
    assert (outside / "demo" / "workspace" / "docs" / "jobs.md").is_file(), "the wordcount job's input"

    # Without the offline extra (an app installed with `[infra,cli]`), the command says what to install.
    run(UV, "pip", "uninstall", "--quiet", "--python", python, "moto", "greenlet", cwd=tmp_path)
    bare = subprocess.run(
        [bin_dir / "longjobs-offline", "--help"], cwd=tmp_path, env=environ, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert bare.returncode == 2 and "Traceback" not in bare.stderr, bare.stderr
    assert bare.stderr.strip().splitlines() == [
        "longjobs-offline needs the distribution's `offline` extra (moto, greenlet not installed): "
        "pip install 'sqs-long-jobs[offline]'"
    ]

    # Without the cli extra (an app installed with `[infra]`), the console script says what to install.
    run(UV, "pip", "uninstall", "--quiet", "--python", python, "rich", cwd=tmp_path)
    plain = subprocess.run(
        [bin_dir / "longjobs", "--help"], cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert plain.returncode == 2 and plain.stderr.strip().splitlines() == [
        "longjobs needs the distribution's `cli` extra (rich not installed): pip install 'sqs-long-jobs[cli]'"
    ], plain.stderr
