"""Customer-managed KMS keys whose policy lets grants be made for AWS services only, and the processor's one key.

AWS Control Tower's proactive control CT.KMS.PR.3 wants every key policy to deny `kms:CreateGrant` to
every principal unless the grant is for an AWS resource or the caller is an AWS service
(`BoolIfExists` on `kms:GrantIsForAWSResource` and `aws:PrincipalIsAWSService`): a grant then can only
serve an AWS service acting for the account (CloudWatch Logs, SNS, Glue, DynamoDB, Lambda), never a
person or a role handing the key on. The rest of the policy is CDK's default (the account, through IAM)
and one statement per AWS service that uses the key itself rather than through a caller's role.

The `kms_key` setting (`longjobs.construct.config.InfraSettings.kms_key`) gives the whole processor one key:
created here (`create`) or imported by ARN. An imported key's policy stays its owner's: CDK cannot change
it, so docs/deploy.md lists the statements it must hold (the ones `processor_key` and its callers add).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from longjobs.construct.config import CREATE_KEY

GRANTS_FOR_AWS_SERVICES_ONLY = iam.PolicyStatement(
    effect=iam.Effect.DENY,
    principals=[iam.AnyPrincipal()],
    actions=["kms:CreateGrant"],
    resources=["*"],  # in a key policy, "*" is this key
    conditions={"BoolIfExists": {"kms:GrantIsForAWSResource": "false", "aws:PrincipalIsAWSService": "false"}},
)

LOGS_KEY_ACTIONS = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
"""What CloudWatch Logs needs of a key that encrypts a log group (its documented key policy)."""

KEY_USER_ACTIONS = ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:DescribeKey"]
"""What a role of the processor needs to read and write encrypted data through SQS, DynamoDB, S3 and Step
Functions (each service calls KMS on the caller's behalf: data keys for new messages, items, objects and
executions, decrypts for reads)."""


def service_key(scope: Construct, construct_id: str, *, description: str) -> kms.Key:
    """A rotated key whose grants can only be made for AWS services."""
    key = kms.Key(
        scope, construct_id, enable_key_rotation=True, description=description, removal_policy=cdk.RemovalPolicy.RETAIN
    )
    key.add_to_resource_policy(GRANTS_FOR_AWS_SERVICES_ONLY)
    return key


def processor_key(scope: Construct, construct_id: str, setting: str | None) -> kms.IKey | None:
    """The `kms_key` setting's key: none when unset (each service encrypts with its own key, as a fresh
    account needs no setup), a new `service_key` for `create`, else the existing key of that ARN."""
    if setting is None:
        return None
    if setting == CREATE_KEY:
        return service_key(
            scope,
            construct_id,
            description="Long-jobs processor: queues, lease table, logs, buckets, workflow, Glue jobs and alarms",
        )
    return kms.Key.from_key_arn(scope, construct_id, setting)


def allow_log_groups(key: kms.IKey, *log_group_arns: str) -> None:
    """Let CloudWatch Logs (the region's service principal) use `key` for these log groups only: the log
    group's ARN is the encryption context of each of its calls (`ArnLike`, so patterns work)."""
    key.add_to_resource_policy(
        iam.PolicyStatement(
            principals=[iam.ServicePrincipal(f"logs.{cdk.Aws.REGION}.amazonaws.com")],
            actions=LOGS_KEY_ACTIONS,
            resources=["*"],  # in a key policy, "*" is this key
            conditions={
                "ArnLike": {
                    "kms:EncryptionContext:aws:logs:arn": log_group_arns[0]
                    if len(log_group_arns) == 1
                    else list(log_group_arns)
                }
            },
        )
    )


def allow_alarms(key: kms.IKey) -> None:
    """Let CloudWatch alarms publish to a topic encrypted with `key`."""
    key.add_to_resource_policy(
        iam.PolicyStatement(
            principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            actions=["kms:Decrypt", "kms:GenerateDataKey*"],
            resources=["*"],  # in a key policy, "*" is this key
        )
    )


def key_user_statement(key: kms.IKey) -> iam.PolicyStatement:
    """A role's use of the processor's key (`KEY_USER_ACTIONS`), on that key only."""
    return iam.PolicyStatement(actions=KEY_USER_ACTIONS, resources=[key.key_arn])


def log_group_arn(scope: Construct, name_pattern: str) -> str:
    """The ARN of this account's and region's log groups named `name_pattern` (`*` allowed)."""
    return cdk.Stack.of(scope).format_arn(
        service="logs", resource="log-group", resource_name=name_pattern, arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME
    )
