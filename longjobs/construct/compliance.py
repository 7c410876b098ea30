"""The AWS Control Tower proactive controls (cfn-guard, through CDK's policy-validation plugin) that do
not apply to a resource of the processor, each with its reason: the one list (docs/deploy.md shows it).

cfn-guard reads a resource's `Metadata.guard.SuppressedRules`; `suppress_guard` writes it, and only
with a rule named here, so a suppression cannot be added without its reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import CfnResource
from constructs import IConstruct

GUARD_REASONS: dict[str, str] = {
    "lambda_inside_vpc_check": "The functions call AWS APIs only (SQS, DynamoDB, Step Functions, CloudWatch); "
    "a VPC would add interface endpoints or a NAT gateway and reach nothing more.",
    "s3_bucket_object_lock_enabled_check": "Object Lock forbids deletes the design relies on: a partition "
    "overwrite replaces curated output, quarantined rows, Glue scratch and access logs expire, and old "
    "versions expire by lifecycle (every bucket is versioned).",
    "s3_event_notifications_enabled_check": "No consumer of this bucket's events; the raw bucket's notifications, "
    "when s3_notifications is on, are set by CDK's notifications resource, which the rule does not see.",
    "s3_bucket_logging_enabled_check": "The access-log bucket itself: logging it would loop.",
    "s3_bucket_default_encryption_kms_check": "Encrypted with SSE-S3 (S3 server access logging delivers only to "
    "SSE-S3 buckets; for the data buckets, a customer-managed key setting is not built yet).",
    "cloudwatch_log_group_encrypted_check": "Encrypted by CloudWatch Logs with its own key; a customer-managed "
    "key for the log groups comes with the customer-managed-key setting (not built yet).",
    "step_functions_state_machine_tracing_enabled_check": "The deployer chose tracing=off (the default, "
    "service, traces every execution).",
    "cloudwatch_log_group_retention_period_check": "The deployer chose log_retention_days below 365 (the "
    "default is 365).",
    "dynamodb_table_encrypted_kms_check": "Encrypted with DynamoDB's AWS-owned key; a customer-managed key comes "
    "with the customer-managed-key setting (not built yet).",
}


LOGS_KEPT_A_YEAR_DAYS = 365
"""CT.CLOUDWATCH.PR.2: log groups kept at least this long."""


def log_group_rules(retention_days: int) -> tuple[str, ...]:
    """The rules a log group of the processor is exempt from, with logs kept `retention_days`."""
    short = retention_days < LOGS_KEPT_A_YEAR_DAYS
    return (
        "cloudwatch_log_group_encrypted_check",
        *(("cloudwatch_log_group_retention_period_check",) if short else ()),
    )


def suppress_guard(construct: IConstruct, *rules: str) -> None:
    """Mark `construct`'s CloudFormation resource as exempt from `rules` (each must be in GUARD_REASONS)."""
    unknown = [rule for rule in rules if rule not in GUARD_REASONS]
    if unknown:
        raise ValueError(f"no reason recorded for cfn-guard rule(s) {unknown}: add it to GUARD_REASONS")
    resource = construct if isinstance(construct, CfnResource) else construct.node.default_child
    if not isinstance(resource, CfnResource):
        raise TypeError(f"{construct.node.path} has no CloudFormation resource to mark")
    existing = resource.get_metadata("guard") or {}
    suppressed = sorted({*existing.get("SuppressedRules", []), *rules})
    resource.add_metadata("guard", {"SuppressedRules": suppressed})


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
        templates = {path: json.loads(Path(path).read_text(encoding="utf-8")) for path in context.template_paths}
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
                not in suppressed_rules(templates.get(resource.template_path), resource.resource_logical_id)
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
