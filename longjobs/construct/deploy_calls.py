"""AWS calls the stack makes while it deploys, where CloudFormation has no resource for the result.

Two need one: an S3 object under a chosen key (a job type's zip of wheels, `job_workflow`) and a lease
table item (the published job catalog, `processor`). Each is an `AwsCustomResource`: CDK's function,
one per stack, makes the call on create and on every change of its parameters, with a policy of exactly
that call. `DeployCalls` holds what they share: the function's log group (the processor's retention, and
its key with `kms_key`), the exemptions CDK's own function needs, and the grants on the processor's key.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

from longjobs.construct.compliance import cdk_handler, log_group_rules, suppress_checkov, suppress_guard

PROVIDER_ID = "AWS" + cr.AwsCustomResource.PROVIDER_FUNCTION_UUID.replace("-", "")
"""The stack-wide function of CDK's `AwsCustomResource` (a singleton named after this UUID)."""


class DeployCalls(Construct):
    """Makes `AwsCustomResource`s that share one log group; the log group is made with the first call."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        log_retention: logs.RetentionDays,
        log_retention_days: int,
        key: kms.IKey | None = None,
        log_group_prefix: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._retention = log_retention
        self._retention_days = log_retention_days
        self._key = key
        self._prefix = log_group_prefix
        self.log_group: logs.LogGroup | None = None

    def call(
        self,
        scope: Construct,
        construct_id: str,
        sdk_call: cr.AwsSdkCall,
        statements: Sequence[iam.PolicyStatement],
        *,
        key_actions: Sequence[str] = (),
    ) -> cr.AwsCustomResource:
        """`sdk_call` on create and on update, allowed `statements` (and `key_actions` on the processor's
        key, when it has one)."""
        first = self.log_group is None
        made = cr.AwsCustomResource(
            scope,
            construct_id,
            on_create=sdk_call,
            on_update=sdk_call,
            install_latest_aws_sdk=False,
            log_group=self._log_group(),
            policy=cr.AwsCustomResourcePolicy.from_statements(list(statements)),
        )
        if self._key is not None and key_actions:
            self._key.grant(made.grant_principal, *key_actions)
        if first:
            handler = cdk.Stack.of(self).node.try_find_child(PROVIDER_ID)
            if handler is None:
                raise RuntimeError(f"CDK's AwsCustomResource function is no longer {PROVIDER_ID!r}")
            cdk_handler(handler, "makes the processor's deploy-time calls (a job catalog, a zip of wheels)")
        return made

    def _log_group(self) -> logs.LogGroup:
        if self.log_group is None:
            self.log_group = logs.LogGroup(
                self,
                "Logs",
                retention=self._retention,
                removal_policy=cdk.RemovalPolicy.DESTROY,
                encryption_key=self._key,
                log_group_name=f"{self._prefix}/deploy-calls" if self._prefix else None,
            )
            suppress_guard(self.log_group, *log_group_rules(self._retention_days, customer_key=self._key is not None))
            if self._key is None:
                suppress_checkov(self.log_group, "CKV_AWS_158")
        return self.log_group
