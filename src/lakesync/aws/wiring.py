"""The services' dependencies on AWS: every port bound to its DynamoDB, S3 or Secrets Manager adapter."""

from __future__ import annotations

from lakesync.aws.clients import dynamodb_client
from lakesync.aws.dynamodb import (
    DynamoDBActionStore,
    DynamoDBBufferStore,
    DynamoDBConfigStore,
    DynamoDBPullBasisReader,
)
from lakesync.aws.function_settings import MaterialiseSettings, Settings
from lakesync.aws.objects import S3ObjectStore
from lakesync.aws.since_sessions import DynamoDBSinceSessions
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.materialise import MaterialiseDeps


def gateway_deps(settings: Settings) -> GatewayDeps:
    """Stores over one DynamoDB client (boto3 honours ``AWS_ENDPOINT_URL``), the checkpoint bucket when configured
    (its S3 client made on first use), and the gateway settings."""
    client = dynamodb_client()
    return GatewayDeps(
        buffer=DynamoDBBufferStore(client, settings.tables),
        config=DynamoDBConfigStore(client, settings.tables),
        actions=DynamoDBActionStore(client, settings.tables),
        settings=settings.gateway_settings(),
        objects=S3ObjectStore(settings.checkpoint_bucket) if settings.checkpoint_bucket else None,
        pull_basis=DynamoDBPullBasisReader(client, settings.tables),
        since_sessions=DynamoDBSinceSessions(client, settings.tables),
    )


def materialise_deps(settings: MaterialiseSettings) -> MaterialiseDeps:
    """The consumer's dependencies: the claim-check bucket, the config store and the configured destinations (their
    secrets read from Secrets Manager)."""
    from lakesync.aws.destinations import ConfiguredDestinations
    from lakesync.aws.secrets import secretsmanager_client

    config = DynamoDBConfigStore(dynamodb_client(), settings.tables)
    return MaterialiseDeps(
        payloads=S3ObjectStore(settings.claim_check_bucket),
        bucket=settings.claim_check_bucket,
        config=config,
        destinations=ConfiguredDestinations(config, secretsmanager_client),
    )
