"""The lease table (DESIGN section 3): one item per in-flight message."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from constructs import Construct

from longjobs.construct.compliance import suppress_checkov, suppress_guard
from longjobs.engine.lease.schema import INDEXES, KEY_TYPES, PARTITION_KEY, TTL_ATTR


class LeaseTable(Construct):
    """On demand, with point-in-time recovery, TTL on closed leases and the sparse indexes the store queries:
    `due`, `reconcile` and `waiting` (`longjobs.engine.lease.schema.INDEXES`, which the offline runtime's
    table is created from too). With deletion
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
            partition_key=key_attribute(PARTITION_KEY),
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
        # Sparse: an item carries an index's keys only while it belongs there (see `INDEXES`).
        for index in INDEXES:
            self.table.add_global_secondary_index(
                index_name=index.name,
                partition_key=key_attribute(index.partition),
                sort_key=key_attribute(index.sort),
                projection_type=dynamodb.ProjectionType.ALL,
            )


def key_attribute(name: str) -> dynamodb.Attribute:
    """A key attribute of the lease table, with its type from `KEY_TYPES`."""
    kind = {"S": dynamodb.AttributeType.STRING, "N": dynamodb.AttributeType.NUMBER}[KEY_TYPES[name]]
    return dynamodb.Attribute(name=name, type=kind)
