"""Building blocks every construct shares: the Lambda runtime, log groups, secure buckets, IAM and cdk-nag helpers.

Invariants: every bucket blocks public access, refuses plain HTTP, is versioned, encrypted and logs its accesses
(except the access-log bucket itself); every log group has a retention; every cdk-nag acknowledgment carries a reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct, IConstruct

from lakesync_infra.config import LOG_RETENTION_DAYS, LakeSyncConfig

LAMBDA_RUNTIME: Final = lambda_.Runtime.PYTHON_3_11
"""Must match :data:`lakesync_infra.packaging.LAMBDA_PYTHON` (the asset's wheels are built for it), which is the
Python the test suite runs the handlers on."""
LAMBDA_ARCHITECTURE: Final = lambda_.Architecture.ARM_64
MATERIALISE_ARCHITECTURE: Final = lambda_.Architecture.X86_64
"""The ``materialise`` function's: its psycopg-binary has no ARM64 wheel for ``python3.11``'s Amazon Linux 2
(:data:`lakesync_infra.packaging.MATERIALISE_PLATFORM`)."""
FLUSH_ARCHITECTURE: Final = lambda_.Architecture.X86_64
"""The ``flush`` function's: pyiceberg-core has no ``manylinux2014`` ARM64 wheel
(:data:`lakesync_infra.packaging.FLUSH_PLATFORM`)."""
RUNTIME_REASON: Final = (
    "The functions deploy python3.11 on purpose: it is the Python the test suite runs every handler on (and Glue "
    "5.1's), so what is deployed is what was tested; Lambda supports it until its deprecation on 2027-06-30."
)
"""Why AwsSolutions-L1 (not the newest runtime) is acknowledged on our functions."""

ACKNOWLEDGED_RULES_METADATA: Final = "aws:cdk:acknowledged-rules"
"""The cloud-assembly metadata type CDK records acknowledgments under (read back by the tests)."""


def removal_policy(config: LakeSyncConfig) -> cdk.RemovalPolicy:
    """``RETAIN`` unless the environment is throwaway (``removalPolicy: destroy``)."""
    return cdk.RemovalPolicy.DESTROY if config.removal_policy == "destroy" else cdk.RemovalPolicy.RETAIN


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge one cdk-nag finding on ``scope`` (and its children) with the reason it is acceptable."""
    if len(reason) < 40:
        raise ValueError(f"acknowledgment of {rule} needs a real reason, got {reason!r}")
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=rule, reason=reason))


def arn_token(construct: IConstruct) -> str:
    """How cdk-nag spells the ``Arn`` attribute of ``construct``'s resource in a finding: ``<LogicalId.Arn>``."""
    resource = construct.node.default_child
    assert isinstance(resource, cdk.CfnElement)
    return f"<{cdk.Stack.of(construct).get_logical_id(resource)}.Arn>"


def acknowledge_wildcards(scope: IConstruct, findings: Mapping[str, str]) -> None:
    """Acknowledge AwsSolutions-IAM5 findings on ``scope``: ``{"Resource::..." or "Action::...": reason}``."""
    for finding, reason in findings.items():
        acknowledge(scope, f"AwsSolutions-IAM5[{finding}]", reason)


XRAY_REASON: Final = (
    "X-Ray's PutTraceSegments/PutTelemetryRecords support no resource-level permissions (resource must be '*'); "
    "CDK adds them for active tracing."
)


def log_group(
    scope: Construct,
    construct_id: str,
    config: LakeSyncConfig,
    *,
    name: str | None = None,
    key: kms.IKey | None = None,
) -> logs.LogGroup:
    """A log group with the environment's retention (removed with the stack: logs are not the data), encrypted with
    ``key`` when given (the key's policy must let CloudWatch Logs use it for the group)."""
    return logs.LogGroup(
        scope,
        construct_id,
        log_group_name=name,
        encryption_key=key,
        retention=logs.RetentionDays[_retention_name(config.log_retention_days)],
        removal_policy=cdk.RemovalPolicy.DESTROY,
    )


def _retention_name(days: int) -> str:
    """CDK's enum member for ``days`` (the members are in ascending order, ``INFINITE`` last)."""
    members = [m for m in logs.RetentionDays if m.name != "INFINITE"]
    by_days = dict(zip(sorted(LOG_RETENTION_DAYS), members, strict=True))
    return by_days[days].name


def secure_bucket(
    scope: Construct,
    construct_id: str,
    config: LakeSyncConfig,
    *,
    access_logs: s3.IBucket,
    key: kms.IKey | None,
    lifecycle_rules: Sequence[s3.LifecycleRule] = (),
) -> s3.Bucket:
    """A private, TLS-only, versioned bucket encrypted with ``key`` (SSE-S3 when ``None``), logging to
    ``access_logs`` under ``<construct id>/``."""
    destroy = config.removal_policy == "destroy"
    return s3.Bucket(
        scope,
        construct_id,
        encryption=s3.BucketEncryption.KMS if key is not None else s3.BucketEncryption.S3_MANAGED,
        encryption_key=key,
        bucket_key_enabled=key is not None,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        enforce_ssl=True,
        minimum_tls_version=1.2,
        versioned=True,
        server_access_logs_bucket=access_logs,
        server_access_logs_prefix=f"{construct_id}/",
        lifecycle_rules=[
            s3.LifecycleRule(
                id="abort-incomplete-uploads", abort_incomplete_multipart_upload_after=cdk.Duration.days(2)
            ),
            *lifecycle_rules,
        ],
        removal_policy=removal_policy(config),
        auto_delete_objects=destroy,
    )


def allow(role: iam.IRole, actions: Sequence[str], resources: Sequence[str], sid: str | None = None) -> None:
    """Add one ``Allow`` statement to ``role``'s policy."""
    role.add_to_principal_policy(iam.PolicyStatement(sid=sid, actions=list(actions), resources=list(resources)))


def via(service: str) -> str:
    """The ``kms:ViaService`` value of ``service`` in the stack's region and partition
    (``dynamodb.<region>.amazonaws.com``; ``.amazonaws.com.cn`` in China)."""
    return f"{service}.{cdk.Aws.REGION}.{cdk.Aws.URL_SUFFIX}"


def allow_key(
    role: iam.IRole, key: kms.IKey, actions: Sequence[str], services: Sequence[str], sid: str | None = None
) -> None:
    """Allow ``actions`` on ``key`` only through ``services`` (``kms:ViaService``): the role can use the data key
    to read and write what those services store with it, never call KMS with it directly."""
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid=sid,
            actions=list(actions),
            resources=[key.key_arn],
            conditions={"StringEquals": {"kms:ViaService": sorted({via(s) for s in services})}},
        )
    )


def stream_source(scope: Construct, construct_id: str, table: dynamodb.ITable) -> dynamodb.ITable:
    """``table`` as a stream event source sees it, without its key: CDK's stream grant would add ``kms:Decrypt`` on
    the key with no condition, so the caller grants it through DynamoDB instead (:func:`allow_key`)."""
    return dynamodb.Table.from_table_attributes(
        scope, construct_id, table_arn=table.table_arn, table_stream_arn=table.table_stream_arn
    )


def lambda_role(scope: Construct, construct_id: str, group: logs.ILogGroup) -> iam.Role:
    """A function's role: assumable by Lambda, allowed to write to its own log group and nothing else yet."""
    role = iam.Role(scope, construct_id, assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    allow(role, ["logs:CreateLogStream", "logs:PutLogEvents"], [group.log_group_arn], sid="OwnLogGroup")
    return role
