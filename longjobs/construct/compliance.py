"""The AWS Control Tower proactive controls (cfn-guard, through CDK's policy-validation plugin) and the
checkov checks that do not apply to a resource of the processor, each with its reason: the one list of
each (docs/deploy.md shows both).

cfn-guard reads a resource's `Metadata.guard.SuppressedRules`; `suppress_guard` writes it, and only
with a rule named here, so a suppression cannot be added without its reason. checkov reads
`Metadata.checkov.skip` (a list of `{id, comment}`); `suppress_checkov` writes it, the comment being
the check's reason in `CHECKOV_REASONS`. With the `kms_key` setting, no encryption rule of either is
suppressed: every resource then uses the customer-managed key.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import CfnResource
from aws_cdk import aws_iam as iam
from constructs import IConstruct

from longjobs.construct.nag import acknowledge, rendered

GUARD_REASONS: dict[str, str] = {
    "lambda_inside_vpc_check": "The functions call AWS APIs only (SQS, DynamoDB, Step Functions, CloudWatch, "
    "and the job runners: Glue, EMR Serverless); "
    "a VPC would add interface endpoints or a NAT gateway and reach nothing more.",
    "s3_bucket_object_lock_enabled_check": "Object Lock forbids deletes the design relies on: a partition "
    "overwrite replaces curated output, quarantined rows, Glue scratch and access logs expire, and old "
    "versions expire by lifecycle (every bucket is versioned).",
    "s3_event_notifications_enabled_check": "No consumer of this bucket's events; the raw bucket's notifications, "
    "when s3_notifications is on, are set by CDK's notifications resource, which the rule does not see.",
    "s3_bucket_logging_enabled_check": "The access-log bucket itself: logging it would loop.",
    "s3_bucket_default_encryption_kms_check": "Encrypted with SSE-S3, which needs no key policy in a fresh "
    "account; the kms_key setting encrypts every bucket with a customer-managed key instead.",
    "cloudwatch_log_group_encrypted_check": "Encrypted by CloudWatch Logs with its own key; the kms_key setting "
    "encrypts the log groups with a customer-managed key instead.",
    "step_functions_state_machine_tracing_enabled_check": "The deployer chose tracing=off (the default, "
    "service, traces every execution).",
    "cloudwatch_log_group_retention_period_check": "The deployer chose log_retention_days below 365 (the "
    "default is 365).",
    "dynamodb_table_encrypted_kms_check": "Encrypted with DynamoDB's AWS-owned key; the kms_key setting encrypts "
    "it with a customer-managed key instead.",
}

GUARD_ENCRYPTION_RULES = frozenset(
    {
        "s3_bucket_default_encryption_kms_check",
        "cloudwatch_log_group_encrypted_check",
        "dynamodb_table_encrypted_kms_check",
    }
)
"""The cfn-guard rules about encryption: never suppressed with the `kms_key` setting."""

CHECKOV_REASONS: dict[str, str] = {
    "CKV_AWS_27": "Encrypted with SSE-SQS (SqsManagedSseEnabled), which this check does not read; the kms_key "
    "setting encrypts the queues with a customer-managed key instead.",
    "CKV_AWS_119": "Encrypted with DynamoDB's AWS-owned key; the kms_key setting encrypts it with a "
    "customer-managed key instead.",
    "CKV_AWS_158": "Encrypted by CloudWatch Logs with its own key; the kms_key setting encrypts the log groups "
    "with a customer-managed key instead.",
    "CKV_AWS_173": "Lambda encrypts the environment at rest with its AWS-managed key, and it holds resource names "
    "and settings, no secret; the kms_key setting encrypts it with a customer-managed key instead.",
    "CKV_AWS_18": "The access-log bucket itself: logging it would loop.",
    "CKV_AWS_117": GUARD_REASONS["lambda_inside_vpc_check"],
    "CKV_AWS_116": "No asynchronous failure goes unrecorded: the receiver runs from its SQS event source mapping "
    "(a dead-letter queue applies to asynchronous invocations only; the jobs queue redrives to the DLQ), the "
    "extender from a one-minute schedule (a missed run is replaced by the next), the watcher has an on-failure "
    "destination (WatcherFailures, which this check does not read), and CDK's own custom-resource functions (bucket "
    "notifications, the copy of a job type's wheels) answer CloudFormation, which fails the deployment when they do "
    "not.",
    "CKV_AWS_115": "Bounded otherwise, or not reservable by default: the receiver by its event source mapping's "
    "maximum concurrency (receiver_max_concurrency), CDK's own custom-resource functions by running only during "
    "deployments; the extender and the watcher reserve 1 and 5 with reserve_concurrency, off by default because "
    "Lambda refuses a reservation that leaves an account under 100 unreserved, which a new account's quota does. "
    "Unreserved, overlapping extender runs race only on conditional writes, and a throttled status event is "
    "retried by Lambda for up to 6 hours while reconciliation returns a dead job's message within minutes.",
    "CKV_AWS_108": "s3:GetObject is limited to the Glue bucket's summaries/ prefix; the check reads the ARN, "
    "a CloudFormation join, as no constraint.",
}
"""checkov's checks that do not apply to a resource of the processor, with the reason written beside each
suppression (`Metadata.checkov.skip[].comment`)."""

CHECKOV_ENCRYPTION_CHECKS = frozenset({"CKV_AWS_27", "CKV_AWS_119", "CKV_AWS_158", "CKV_AWS_173"})
"""The checkov checks about encryption: never suppressed with the `kms_key` setting."""


LOGS_KEPT_A_YEAR_DAYS = 365
"""CT.CLOUDWATCH.PR.2: log groups kept at least this long."""


def log_group_rules(retention_days: int, *, customer_key: bool) -> tuple[str, ...]:
    """The cfn-guard rules a log group of the processor is exempt from, with logs kept `retention_days`
    and encrypted with the customer-managed key or not (`customer_key`)."""
    short = retention_days < LOGS_KEPT_A_YEAR_DAYS
    return (
        *(() if customer_key else ("cloudwatch_log_group_encrypted_check",)),
        *(("cloudwatch_log_group_retention_period_check",) if short else ()),
    )


def _resource_of(construct: IConstruct) -> CfnResource:
    resource = construct if isinstance(construct, CfnResource) else construct.node.default_child
    if not isinstance(resource, CfnResource):
        raise TypeError(f"{construct.node.path} has no CloudFormation resource to mark")
    return resource


def suppress_guard(construct: IConstruct, *rules: str) -> None:
    """Mark `construct`'s CloudFormation resource as exempt from `rules` (each must be in GUARD_REASONS)."""
    unknown = [rule for rule in rules if rule not in GUARD_REASONS]
    if unknown:
        raise ValueError(f"no reason recorded for cfn-guard rule(s) {unknown}: add it to GUARD_REASONS")
    resource = _resource_of(construct)
    existing = resource.get_metadata("guard") or {}
    suppressed = sorted({*existing.get("SuppressedRules", []), *rules})
    resource.add_metadata("guard", {"SuppressedRules": suppressed})


def suppress_checkov(construct: IConstruct, *checks: str) -> None:
    """Mark `construct`'s CloudFormation resource as exempt from checkov's `checks` (each must be in
    CHECKOV_REASONS, whose reason becomes the skip's comment)."""
    unknown = [check for check in checks if check not in CHECKOV_REASONS]
    if unknown:
        raise ValueError(f"no reason recorded for checkov check(s) {unknown}: add it to CHECKOV_REASONS")
    resource = _resource_of(construct)
    existing = {entry["id"] for entry in (resource.get_metadata("checkov") or {}).get("skip", [])}
    skip = [{"id": check, "comment": CHECKOV_REASONS[check]} for check in sorted({*existing, *checks})]
    resource.add_metadata("checkov", {"skip": skip})


@jsii.implements(cdk.IPolicyValidationPlugin)
class ControlTowerChecks:
    """AWS Control Tower's proactive controls (`CfnGuardValidator`, cfn-guard's own rules) as a
    policy-validation plugin of the synth, honouring cfn-guard's `Metadata.guard.SuppressedRules` on each
    resource: the bundled plugin can only turn a rule off for the whole app, so it is wrapped here and
    a finding is dropped only on a resource that names its rule (with a reason in GUARD_REASONS)."""

    def __init__(self) -> None:
        from cdklabs.cdk_validator_cfnguard import CfnGuardValidator  # experimental; only where synth runs

        self._guard = CfnGuardValidator()

    @property
    def name(self) -> str:
        return "control-tower-cfn-guard"

    @property
    def version(self) -> str | None:
        return self._guard.version

    @property
    def rule_ids(self) -> list[str] | None:
        return self._guard.rule_ids

    def validate(self, context: cdk.IPolicyValidationContext) -> cdk.PolicyValidationPluginReport:
        report = self._guard.validate(context)

        # Each violation names the template it read, and that file is read here: the context's
        # `template_paths` are relative when the CDK command line passes its default `--output cdk.out`,
        # so matching violations against them would depend on where the output folder is.
        @functools.cache
        def template(path: str) -> Any:
            return json.loads(Path(path).read_text(encoding="utf-8"))

        kept: list[cdk.PolicyViolation] = []
        for violation in report.violations:
            resources = [
                cdk.PolicyViolatingResource(
                    resource_logical_id=resource.resource_logical_id,
                    template_path=resource.template_path,
                    locations=resource.locations,
                )
                for resource in violation.violating_resources
                if violation.rule_name
                not in suppressed_rules(template(resource.template_path), resource.resource_logical_id)
            ]
            if resources:
                kept.append(
                    cdk.PolicyViolation(
                        rule_name=violation.rule_name,
                        description=violation.description,
                        violating_resources=resources,
                        fix=violation.fix,
                        severity=violation.severity,
                        rule_metadata=violation.rule_metadata,
                    )
                )
        return cdk.PolicyValidationPluginReport(success=not kept, violations=kept)


def suppressed_rules(template: Any, logical_id: str) -> list[str]:
    """The rules a resource's template entry suppresses (`Metadata.guard.SuppressedRules`)."""
    entry = (template or {}).get("Resources", {}).get(logical_id) or {}
    return list(entry.get("Metadata", {}).get("guard", {}).get("SuppressedRules", []))


def cdk_handler(handler: IConstruct, what: str) -> None:
    """Exempt one of CDK's own custom-resource functions (`what` it does) from the rules that concern the
    processor's functions: it runs during deployments only, outside a VPC, with CDK's basic execution role."""
    suppress_guard(handler, "lambda_inside_vpc_check")
    suppress_checkov(handler, "CKV_AWS_115", "CKV_AWS_116", "CKV_AWS_117")
    basic = iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSLambdaBasicExecutionRole")
    acknowledge(
        handler,
        "AwsSolutions-IAM4",
        f"CDK's own custom resource that {what}: its role uses the Lambda basic execution policy.",
        findings=("Policy::" + rendered(handler, basic.managed_policy_arn),),
    )
