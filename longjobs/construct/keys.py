"""Customer-managed KMS keys whose policy lets grants be made for AWS services only.

AWS Control Tower's proactive control CT.KMS.PR.3 wants every key policy to deny `kms:CreateGrant` to
every principal unless the grant is for an AWS resource or the caller is an AWS service
(`BoolIfExists` on `kms:GrantIsForAWSResource` and `aws:PrincipalIsAWSService`): a grant then can only
serve an AWS service acting for the account (CloudWatch Logs, SNS, Glue), never a person or a role
handing the key on. The rest of the policy is CDK's default (the account, through IAM).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

GRANTS_FOR_AWS_SERVICES_ONLY = iam.PolicyStatement(
    effect=iam.Effect.DENY,
    principals=[iam.AnyPrincipal()],
    actions=["kms:CreateGrant"],
    resources=["*"],  # in a key policy, "*" is this key
    conditions={"BoolIfExists": {"kms:GrantIsForAWSResource": "false", "aws:PrincipalIsAWSService": "false"}},
)


def service_key(scope: Construct, construct_id: str, *, description: str) -> kms.Key:
    """A rotated key whose grants can only be made for AWS services."""
    key = kms.Key(
        scope, construct_id, enable_key_rotation=True, description=description, removal_policy=cdk.RemovalPolicy.RETAIN
    )
    key.add_to_resource_policy(GRANTS_FOR_AWS_SERVICES_ONLY)
    return key
