"""The lease table (DESIGN section 3): one item per in-flight message."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from constructs import Construct

from longjobs.construct.compliance import suppress_checkov, suppress_guard
from longjobs.engine.lease.schema import (
    CHECKED_AT_ATTR,
    DUE_INDEX,
    PARTITION_KEY,
    RECONCILE_INDEX,
    RENEW_AT_ATTR,
    SHARD_ATTR,
    TTL_ATTR,
)


class LeaseTable(Construct):
    """On demand, with point-in-time recovery, TTL on closed leases and two sparse indexes of ACTIVE leases:
    `due` (by renew-at, for renewal) and `reconcile` (by checked-at, least recently reconciled first).

    Keys and index come from `longjobs.engine.lease.schema`, the names the store queries by. With deletion
    protection on, the table is also retained when the stack is deleted: the protection exists to keep
    the data. Encrypted with DynamoDB's AWS-owned key, or with `key` (the `kms_key` setting) when given.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, deletion_protection: bool, key: kms.IKey | None = None
    ) -> None:
        super().__init__(scope, construct_id)
        self.table = dynamodb.Table(
            self,
            "Table",
            partition_key=dynamodb.Attribute(name=PARTITION_KEY, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=TTL_ATTR,
            deletion_protection=deletion_protection,
            removal_policy=cdk.RemovalPolicy.RETAIN if deletion_protection else cdk.RemovalPolicy.DESTROY,
            encryption=None if key is None else dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=key,
        )
        if key is None:
            suppress_guard(self.table, "dynamodb_table_encrypted_kms_check")
            suppress_checkov(self.table, "CKV_AWS_119")
        # Sparse: only ACTIVE leases carry `shard` and `renew_at`, so the extender's queries see only them.
        self.table.add_global_secondary_index(
            index_name=DUE_INDEX,
            partition_key=dynamodb.Attribute(name=SHARD_ATTR, type=dynamodb.AttributeType.NUMBER),
            sort_key=dynamodb.Attribute(name=RENEW_AT_ATTR, type=dynamodb.AttributeType.NUMBER),
            projection_type=dynamodb.ProjectionType.ALL,
        )
        self.table.add_global_secondary_index(
            index_name=RECONCILE_INDEX,
            partition_key=dynamodb.Attribute(name=SHARD_ATTR, type=dynamodb.AttributeType.NUMBER),
            sort_key=dynamodb.Attribute(name=CHECKED_AT_ATTR, type=dynamodb.AttributeType.NUMBER),
            projection_type=dynamodb.ProjectionType.ALL,
        )
