"""The gateway services' dependencies on AWS: every port bound to its DynamoDB or S3 adapter."""

from __future__ import annotations

from lakesync.aws.clients import dynamodb_client
from lakesync.aws.dynamodb import (
    DynamoDBActionStore,
    DynamoDBBufferStore,
    DynamoDBConfigStore,
    DynamoDBPullBasisReader,
)
from lakesync.aws.function_settings import Settings
from lakesync.aws.objects import S3ObjectStore
from lakesync.gateway.deps import GatewayDeps


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
    )
