"""boto3 client construction (lazy, injectable): the one place clients are made."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_lambda import LambdaClient

# Standard retry mode backs off on throttling. The timeouts bound one commit attempt (3 tries of at most 1 s connect
# + 2 s read) well inside the pull re-read window (GatewaySettings.since_window_ms, 10 s). Client-side parameter
# validation is off: the request path builds every request by hand (typed, covered by the contract tests on a real
# DynamoDB API), DynamoDB validates them again anyway, and botocore's walk over each request is a measurable share
# of a push's CPU time.
CLIENT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 3},
    connect_timeout=1,
    read_timeout=2,
    max_pool_connections=50,
    parameter_validation=False,
)


def dynamodb_client(**kwargs: str) -> DynamoDBClient:
    """A DynamoDB client; ``kwargs`` (endpoint_url, region_name, credentials) override the environment."""
    return boto3.client("dynamodb", config=CLIENT_CONFIG, **kwargs)  # type: ignore[call-overload,no-any-return]


def job_client(
    service: str,
    config: Config,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
) -> Any:
    """A client for a batch job (the flush and its publisher): the given settings, the environment for the rest."""
    kwargs = {
        "endpoint_url": endpoint_url,
        "region_name": region,
        "aws_access_key_id": access_key_id,
        "aws_secret_access_key": secret_access_key,
    }
    given = {k: v for k, v in kwargs.items() if v is not None}
    return boto3.client(service, config=config, **given)  # type: ignore[call-overload]


def lambda_client(**kwargs: str) -> LambdaClient:
    """A Lambda client (to queue a run of the flush function); ``kwargs`` override the environment."""
    config = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=2, read_timeout=10)
    return boto3.client("lambda", config=config, **kwargs)  # type: ignore[call-overload,no-any-return]
