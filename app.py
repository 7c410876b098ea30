#!/usr/bin/env python3
"""The CDK app: `npx cdk synth|deploy [-c key=value ...]` runs this file (see cdk.json).

Settings come from CDK context and are validated before anything is built (`longjobs.construct.config`); the job
types and S3 triggers come from `jobs.json` at the repository root (`-c jobs_file=PATH` names another).
A bad value, a key that names no setting or a bad declaration stops the command with a message naming it.
cdk-nag's AwsSolutions pack runs on every synth as a policy-validation plugin: an unacknowledged finding fails it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from longjobs.construct import quiet_node_notices

quiet_node_notices()  # before aws_cdk starts jsii's Node process

import aws_cdk as cdk  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402

from infra.stack import LongJobsStack, stack_name  # noqa: E402
from longjobs.construct.compliance import ControlTowerChecks  # noqa: E402
from longjobs.construct.config import ConfigError, load_config  # noqa: E402
from longjobs.engine.jobs import JobTypeError, load_catalog_file  # noqa: E402

JOBS_FILE = Path(__file__).resolve().parent / "jobs.json"
JOBS_FILE_CONTEXT = "jobs_file"
SETTING_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
"""The shape of a setting's context key, and of its misspellings in another case (`Stage`, `receiverTimeoutS`).
CDK's own keys (feature flags, `aws:cdk:...`, lookups) all hold `@`, `:` or `-`, so a key of this shape that
names no setting is a misspelt one."""


def setting_context(context: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of the app's context whose keys are shaped like a setting's, `jobs_file` left out: what
    `load_config` validates, refusing a key that names no setting rather than ignoring it."""
    return {key: value for key, value in context.items() if SETTING_KEY.fullmatch(key) and key != JOBS_FILE_CONTEXT}


def build_app(app: cdk.App) -> LongJobsStack:
    """The stack from `app`'s context and job types, with cdk-nag attached. Raises `ConfigError` on bad
    context and `JobTypeError` on a bad declaration."""
    jobs_file = Path(app.node.try_get_context(JOBS_FILE_CONTEXT) or JOBS_FILE)
    catalog = load_catalog_file(jobs_file, strict=True)
    context = setting_context(app.node.get_all_context())
    config = load_config(context, app_keys=(JOBS_FILE_CONTEXT,), catalog=catalog)
    stack = LongJobsStack(
        app,
        stack_name(config),
        config=config,
        catalog=catalog,
        env=cdk.Environment(account=os.environ.get("CDK_DEFAULT_ACCOUNT"), region=os.environ.get("CDK_DEFAULT_REGION")),
        description="Long jobs on SQS: leases renewed while Step Functions and Glue run them",
    )
    # Beside cdk-nag, AWS Control Tower's proactive controls (cfn-guard): a finding fails the synth, one that
    # does not apply is suppressed on its resource with its reason (`longjobs.construct.compliance`).
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True), ControlTowerChecks())
    return stack


def main(app: cdk.App | None = None) -> None:
    """Synthesize `app` (by default the one the CDK command line's context and outdir configure)."""
    app = app or cdk.App()
    try:
        build_app(app)
    except (ConfigError, JobTypeError) as exc:
        sys.exit(str(exc))
    app.synth()


if __name__ == "__main__":
    main()
