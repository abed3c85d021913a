"""The lake: S3 buckets (Iceberg warehouse, checkpoints, server access logs) and the Glue database.

* ``lake`` holds the Iceberg warehouse under ``warehouse/`` (tables of the Glue database ``lakesync``).
* ``checkpoints`` holds the checkpoint chunks, manifests and ``latest.json`` per gateway.
* ``access_logs`` receives the S3 server access logs of every other bucket.

Lifecycle: only *noncurrent* versions expire (after ``lakeNoncurrentDays``). Current objects never expire by age:
Iceberg removes its own files through maintenance, and a gateway's latest checkpoint may legitimately be old (an
unchanged gateway is skipped), so an age rule could delete data still referenced.

The Glue database name is the namespace the jobs use (:data:`lakesync.lake.tables.NAMESPACE`). Database names are
per account and region, so one account+region hosts one LakeSync environment (use one account per environment).
"""

from __future__ import annotations

from typing import Final

import aws_cdk as cdk
from aws_cdk import aws_glue as glue
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from lakesync.lake.tables import NAMESPACE
from lakesync_infra.common import acknowledge, removal_policy, secure_bucket
from lakesync_infra.config import LakeSyncConfig

WAREHOUSE_PREFIX: Final = "warehouse"


class Lake(Construct):
    """Buckets and the Glue database.

    Attributes:
        access_logs: The S3 server access log bucket (other constructs log their buckets here too).
        bucket: The Iceberg warehouse bucket.
        checkpoints: The checkpoint bucket.
        database_name: The Glue database (Iceberg namespace).
        warehouse: ``s3://<bucket>/warehouse`` for the jobs' ``--warehouse``.
    """

    def __init__(self, scope: Construct, construct_id: str, *, config: LakeSyncConfig, key: kms.IKey) -> None:
        super().__init__(scope, construct_id)
        destroy = config.removal_policy == "destroy"
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,  # the log delivery service writes SSE-S3 only
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-access-logs",
                    expiration=cdk.Duration.days(config.access_log_days),
                    noncurrent_version_expiration=cdk.Duration.days(1),
                )
            ],
            removal_policy=removal_policy(config),
            auto_delete_objects=destroy,
        )
        acknowledge(
            self.access_logs,
            "AwsSolutions-S1",
            "This is the server access log bucket itself; logging its own accesses into itself would loop.",
        )
        noncurrent = s3.LifecycleRule(
            id="expire-noncurrent-versions",
            noncurrent_version_expiration=cdk.Duration.days(config.lake_noncurrent_days),
        )
        self.bucket = secure_bucket(
            self, "Warehouse", config, access_logs=self.access_logs, key=key, lifecycle_rules=[noncurrent]
        )
        self.checkpoints = secure_bucket(
            self, "Checkpoints", config, access_logs=self.access_logs, key=key, lifecycle_rules=[noncurrent]
        )
        self.database_name = NAMESPACE
        self.database = glue.CfnDatabase(
            self,
            "Database",
            catalog_id=cdk.Stack.of(self).account,
            database_input=glue.CfnDatabase.DatabaseInputProperty(
                name=NAMESPACE,
                description=f"LakeSync {config.name}: the Iceberg delta log and current-state tables",
            ),
        )
        # Deleting a Glue database deletes its tables' metadata: keep it unless the environment is throwaway.
        self.database.apply_removal_policy(removal_policy(config))
        self.warehouse = f"s3://{self.bucket.bucket_name}/{WAREHOUSE_PREFIX}"

    def catalog_arns(self) -> dict[str, str]:
        """ARNs of the Glue catalog, the database and its tables (for IAM)."""
        stack = cdk.Stack.of(self)
        return {
            "catalog": stack.format_arn(service="glue", resource="catalog"),
            "database": stack.format_arn(service="glue", resource="database", resource_name=self.database_name),
            "tables": stack.format_arn(service="glue", resource="table", resource_name=f"{self.database_name}/*"),
        }
