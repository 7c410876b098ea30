#!/usr/bin/env python3
"""The CDK app: `npx cdk synth|deploy [-c key=value ...]` runs this file (see cdk.json).

Settings come from CDK context and are validated before anything is built (`infra.config`); a bad
value stops the command with a message naming it. cdk-nag's AwsSolutions pack runs on every synth as a
policy-validation plugin: an unacknowledged finding fails it.
"""

from __future__ import annotations

import os
import sys

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from infra.config import ConfigError, context_keys, load_config
from infra.stack import LongJobsStack, stack_name


def build_app(app: cdk.App) -> LongJobsStack:
    """The stack from `app`'s context, with cdk-nag attached. Raises `ConfigError` on bad context."""
    config = load_config({key: app.node.try_get_context(key) for key in context_keys()})
    stack = LongJobsStack(
        app,
        stack_name(config),
        config=config,
        env=cdk.Environment(account=os.environ.get("CDK_DEFAULT_ACCOUNT"), region=os.environ.get("CDK_DEFAULT_REGION")),
        description="Long jobs on SQS: leases renewed while Step Functions and Glue run them",
    )
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    return stack


def main(app: cdk.App | None = None) -> None:
    """Synthesize `app` (by default the one the CDK command line's context and outdir configure)."""
    app = app or cdk.App()
    try:
        build_app(app)
    except ConfigError as exc:
        sys.exit(str(exc))
    app.synth()


if __name__ == "__main__":
    main()
