"""boto3 client construction (lazy, injectable): the one place clients are made."""

from __future__ import annotations

from typing import TYPE_CHECKING

import boto3
from botocore.config import Config

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# Standard retry mode backs off on throttling; timeouts bound a stuck call well inside a Lambda's time.
CLIENT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5},
    connect_timeout=2,
    read_timeout=5,
    max_pool_connections=50,
)


def dynamodb_client(**kwargs: str) -> DynamoDBClient:
    """A DynamoDB client; ``kwargs`` (endpoint_url, region_name, credentials) override the environment."""
    return boto3.client("dynamodb", config=CLIENT_CONFIG, **kwargs)  # type: ignore[call-overload,no-any-return]
