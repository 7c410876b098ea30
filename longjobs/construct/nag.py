"""cdk-nag (v3) acknowledgments: each suppression names its rule, the findings it covers, and why."""

from __future__ import annotations

import re
from typing import Any

import aws_cdk as cdk
import jsii
from constructs import IConstruct, IValidation


def acknowledge(scope: IConstruct, rule: str, reason: str, *, findings: tuple[str, ...] = ()) -> None:
    """Acknowledge `rule` on `scope` and everything under it: only the given `findings` (e.g.
    `Resource::*`) when any are named, so a new finding of the same rule still fails the synth."""
    ids = [f"{rule}[{finding}]" for finding in findings] or [rule]
    cdk.Validations.of(scope).acknowledge(*(cdk.Acknowledgment(id=rule_id, reason=reason) for rule_id in ids))


def rendered(scope: IConstruct, value: str) -> str:
    """`value` (an ARN, perhaps with tokens) as cdk-nag writes it in a finding: references become
    `<LogicalId>` or `<LogicalId.Attribute>`, pseudo parameters `<AWS::Region>`, joins are flattened.
    Rendered from the same expression the policy uses, so the finding matches whether the stack's
    account and region are known at synth time or not."""
    return render_cfn(cdk.Stack.of(scope).resolve(value))


def render_cfn(value: Any) -> str:
    """A resolved CloudFormation value as cdk-nag prints it (a plain string stays as it is)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return f"<{value['Ref']}>"
    if isinstance(value, dict) and set(value) == {"Fn::GetAtt"}:
        return "<{}.{}>".format(*value["Fn::GetAtt"])
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return str(separator).join(render_cfn(part) for part in parts)
    if isinstance(value, dict) and set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
        return re.sub(r"\$\{([^}]+)\}", r"<\1>", value["Fn::Sub"])
    raise ValueError(f"cannot render {value!r} as a cdk-nag finding")


@jsii.implements(IValidation)
class NagValidation:
    """cdk-nag's AwsSolutions pack on one construct's tree, as a validation of that construct.

    cdk-nag 3 runs as a policy-validation plugin, and a plugin can only be added to an App or a Stage:
    a construct that did so would change its user's whole app. A construct's own validation runs at
    synthesis too and fails it with the violations, so the processor checks itself, and only itself.
    """

    def __init__(self, scope: IConstruct) -> None:
        self._scope = scope

    def validate(self) -> list[str]:
        from cdk_nag import AwsSolutionsChecks

        report = AwsSolutionsChecks().validate_scope(self._scope)
        return [f"{violation.rule_name}: {violation.description}" for violation in report.violations]
