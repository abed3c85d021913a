"""The lake: S3 buckets (Iceberg warehouse, checkpoints, server access logs) and the Glue database.

* ``lake`` holds the Iceberg warehouse under ``warehouse/`` (tables of the environment's Glue database).
* ``checkpoints`` holds the checkpoint chunks, manifests and ``latest.json`` per gateway.
* ``access_logs`` receives the S3 server access logs of every other bucket.

Lifecycle: only *noncurrent* versions expire (after ``lakeNoncurrentDays``). Current objects never expire by age:
Iceberg removes its own files through maintenance, and a gateway's latest checkpoint may legitimately be old (an
unchanged gateway is skipped), so an age rule could delete data still referenced.

The Glue database is the stack's own: ``lakesync_<env>_<stack>`` -- :func:`lakesync_infra.config.glue_database` of the
environment, then the first 8 hex digits of the stack id's UUID (the jobs get it as ``--namespace``; output
``GlueDatabase``). Database names are unique per account and region, so a fixed name made a second environment in the
same account and region fail with AlreadyExists, and so did a redeploy after deleting a stack whose database was
retained. The stack id is new whenever a stack is created, like the generated names of the retained tables and
buckets: a re-created stack starts a new lake beside the retained one instead of colliding with it (and instead of
reusing catalog entries that point into the old stack's warehouse bucket).
"""

from __future__ import annotations

import json
from typing import Final

import aws_cdk as cdk
from aws_cdk import aws_glue as glue
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from lakesync_infra.common import acknowledge, removal_policy, secure_bucket
from lakesync_infra.config import LakeSyncConfig

WAREHOUSE_PREFIX: Final = "warehouse"


class Lake(Construct):
    """Buckets and the Glue database.

    Attributes:
        access_logs: The S3 server access log bucket (other constructs log their buckets here too).
        bucket: The Iceberg warehouse bucket.
        checkpoints: The checkpoint bucket.
        database_name: The Glue database (Iceberg namespace; a token: it ends with the stack id's first group).
        database_nag: The database name as cdk-nag spells it in a finding (the token as CloudFormation JSON).
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
        stack = cdk.Stack.of(self)
        # arn:...:stack/<name>/<uuid>: the UUID's first group, 8 lower-case hex digits, differs per stack creation
        created = cdk.Fn.select(0, cdk.Fn.split("-", cdk.Fn.select(2, cdk.Fn.split("/", stack.stack_id))))
        self.database_name = f"{config.database_name}_{created}"
        self.database_nag = f"{config.database_name}_{json.dumps(stack.resolve(created), separators=(',', ':'))}"
        self.database = glue.CfnDatabase(
            self,
            "Database",
            catalog_id=stack.account,
            database_input=glue.CfnDatabase.DatabaseInputProperty(
                name=self.database_name,
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
