"""Customer-managed KMS keys whose policy lets grants be made for AWS resources only.

CDK's default key policy gives the account `kms:*`, which includes `kms:CreateGrant` for anything; the
AWS Control Tower proactive control on KMS key policies (and checkov) want `kms:CreateGrant` limited
with `kms:GrantIsForAWSResource`, so that only an AWS service acting for the account (CloudWatch Logs,
SNS, Glue) can be given a grant. The account keeps every other action, delegated to IAM as usual.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct


def service_key(scope: Construct, construct_id: str, *, description: str) -> kms.Key:
    """A rotated key whose policy allows the account every action but `kms:CreateGrant`, and that one
    only for grants to AWS resources."""
    account = iam.AccountRootPrincipal()
    policy = iam.PolicyDocument(
        statements=[
            iam.PolicyStatement(principals=[account], not_actions=["kms:CreateGrant"], resources=["*"]),
            iam.PolicyStatement(
                principals=[account],
                actions=["kms:CreateGrant"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}},
            ),
        ]
    )
    return kms.Key(
        scope,
        construct_id,
        enable_key_rotation=True,
        description=description,
        policy=policy,
        removal_policy=cdk.RemovalPolicy.RETAIN,
    )
