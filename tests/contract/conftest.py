"""Fixtures of the port contract suites: one set of DynamoDB tables per test module on the shared moto server, and
a unique gateway id per test, so tests never see each other's data (every port keys its data by gateway)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest


@pytest.fixture(scope="module")
def contract_dynamodb(moto_endpoint: str) -> Any:
    """``(client, TableNames)`` of fresh LakeSync tables shared by one test module."""
    import boto3

    from lakesync.aws.dynamodb import create_tables
    from lakesync.aws.tables import TableNames

    client = boto3.client(
        "dynamodb",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    names = TableNames.with_prefix(f"c{uuid.uuid4().hex[:10]}")
    create_tables(client, names)
    return client, names


@pytest.fixture
def gw() -> str:
    """A gateway id no other test uses."""
    return f"gw-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["memory", "dynamodb"])
def positions(request: pytest.FixtureRequest) -> Any:
    """A connector position store: in memory, and on DynamoDB (the moto server)."""
    if request.param == "memory":
        from lakesync.gateway.memory import InMemoryPositionStore

        return InMemoryPositionStore()
    from lakesync.aws.connector_positions import DynamoDBPositionStore

    client, names = request.getfixturevalue("contract_dynamodb")
    return DynamoDBPositionStore(client, names)
