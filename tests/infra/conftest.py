"""Synthesized stacks, built once per test session and shared by the assertion tests.

The app is built with `app.build_app`, exactly as `cdk synth` builds it (cdk-nag attached), with the
context of `cdk.json` plus the test's own keys. Synthesis writes the cloud assembly to a temporary
folder, and fails there when cdk-nag reports an unacknowledged finding.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from constructs import IConstruct

from app import build_app
from infra.stack import LongJobsStack
from tests import REPO_ROOT

PROD_CONTEXT = {
    "stage": "prod",
    "s3_notifications": "true",
    "alarm_email": "ops@example.com",
    "receiver_max_concurrency": "25",
    "glue_workers": "5",
    "glue_worker_type": "G.2X",
    "max_attempts": "7",
    "log_retention_days": "90",
    "quarantine_expiration_days": "10",
    "tracing": "false",
    "kms_key": "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab",
    "reserve_concurrency": "true",
}
"""A second deployment: everything the default leaves off turned on, as `-c key=value` strings (its
customer-managed key imported by ARN), its Glue jobs on Glue 5.1 and one job type on EMR Serverless
(`with_emr_type`)."""
EMR_TYPE = {
    "name": "wordcount-emr",
    "runner": "pyspark",
    "platform": "emr_serverless",
    "entry": "jobs/wordcount.py:run",
    "params_schema": {"type": "object", "required": ["input"], "properties": {"input": {"type": "string"}}},
    "emr_serverless": {"timeout_minutes": 120, "max_vcpu": 32},
    "description": "The word count on EMR Serverless",
}
"""The job type the prod variant runs on EMR Serverless: the jobs page's word count."""
CMK_CONTEXT = {"kms_key": "create", "s3_notifications": "true", "reserve_concurrency": "true", "snapstart": "true"}
"""A third: the customer-managed key the processor creates, with the S3 notifications that its policy admits
(and the reserved concurrency of an account that has it to spare), and the functions on SnapStart."""


@dataclass
class Synth:
    stack: LongJobsStack
    template: dict[str, Any]
    outdir: Path

    @property
    def resources(self) -> dict[str, Any]:
        return dict(self.template["Resources"])

    @property
    def assertions(self) -> Template:
        return Template.from_json(self.template)

    def part(self, name: str) -> Any:
        """A part of the stack's processor (`Queues`, `Leases`, `Workflow`, `Functions`, `Monitoring`)."""
        return self.stack.processor.node.find_child(name)

    def logical_id(self, construct: IConstruct) -> str:
        resource = construct.node.default_child
        assert isinstance(resource, cdk.CfnElement)
        return str(self.stack.resolve(self.stack.get_logical_id(resource)))

    def resource(self, construct: IConstruct) -> dict[str, Any]:
        return dict(self.resources[self.logical_id(construct)])

    def of_type(self, type_name: str) -> dict[str, dict[str, Any]]:
        return {key: value for key, value in self.resources.items() if value["Type"] == type_name}

    @property
    def template_path(self) -> Path:
        return self.outdir / self.stack.template_file


def cdk_json_context() -> dict[str, Any]:
    return dict(json.loads((REPO_ROOT / "cdk.json").read_text())["context"])


def synthesize(outdir: Path, extra: dict[str, str]) -> Synth:
    app = cdk.App(context={**cdk_json_context(), **extra}, outdir=str(outdir))
    stack = build_app(app)
    assembly = app.synth()
    return Synth(stack=stack, template=assembly.get_stack_by_name(stack.stack_name).template, outdir=outdir)


@pytest.fixture(scope="session")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    """The stack with every context key at its default."""
    yield synthesize(tmp_path_factory.mktemp("dev"), {})


def with_emr_type(folder: Path) -> Path:
    """A jobs file in `folder`: the repository's `jobs.json` and `EMR_TYPE`, their paths made absolute."""
    catalog = json.loads((REPO_ROOT / "jobs.json").read_text())
    catalog["job_types"].append(dict(EMR_TYPE))
    for declared in catalog["job_types"]:
        for field in ("entry", "code"):
            if field in declared and not Path(declared[field]).is_absolute():
                declared[field] = str(REPO_ROOT / declared[field])
    path = folder / "jobs.json"
    path.write_text(json.dumps(catalog))
    return path


@pytest.fixture(scope="session")
def prod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    """`PROD_CONTEXT`, with Glue 5.1 and the EMR Serverless type."""
    jobs = with_emr_type(tmp_path_factory.mktemp("prod-jobs"))
    yield synthesize(tmp_path_factory.mktemp("prod"), {**PROD_CONTEXT, "glue_version": "5.1", "jobs_file": str(jobs)})


@pytest.fixture(scope="session")
def cmk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    """The stack with the customer-managed key it creates (`kms_key=create`)."""
    yield synthesize(tmp_path_factory.mktemp("cmk"), CMK_CONTEXT)


def cli_env(home: Path) -> dict[str, str]:
    """No credentials, no metadata service, no telemetry: nothing leaves the machine. No jsii switch either:
    the app quiets jsii's Node notices itself."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "CDK_", "JSII_"))}
    missing = str(home / "missing")
    env.update(
        HOME=str(home),
        AWS_REGION="us-east-1",
        AWS_CONFIG_FILE=missing,
        AWS_SHARED_CREDENTIALS_FILE=missing,
        AWS_EC2_METADATA_DISABLED="true",
        CDK_DISABLE_CLI_TELEMETRY="true",
    )
    return env


def working_copy(dest: Path) -> Path:
    """The repository as a fresh clone holds it (the files git tracks, and the new ones it does not
    ignore), with this checkout's `.venv` and `node_modules` linked in: where a user stands after
    `make install`. Each test has its own, so parallel runs never share a `cdk.out`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():  # a file deleted in the working tree is still listed until the change is staged
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    for installed in (".venv", "node_modules"):
        (dest / installed).symlink_to(REPO_ROOT / installed, target_is_directory=True)
    return dest
