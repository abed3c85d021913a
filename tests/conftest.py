"""Shared fixtures for the whole suite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

VECTORS = Path(__file__).parent / "vectors"


def load_vectors(name: str) -> dict[str, Any]:
    """One vector file of tests/vectors as a dict."""
    with (VECTORS / name).open(encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


@pytest.fixture
def vectors() -> Any:
    return load_vectors


# -- AWS on a real moto server -----------------------------------------------------------------------------------
# One moto server per test session (server mode: the same HTTP path boto3 takes on AWS). Each test gets its own
# uniquely prefixed DynamoDB tables, so tests never see each other's data and need no reset.

FAKE_AWS = {
    "region_name": "us-east-1",
    "aws_access_key_id": "testing",
    "aws_secret_access_key": "testing",
}


@pytest.fixture(scope="session")
def moto_endpoint() -> Any:
    from lakesync.local.moto import MotoServer

    with MotoServer() as server:
        yield server.endpoint_url


@pytest.fixture
def dynamodb_client(moto_endpoint: str) -> Any:
    import boto3

    return boto3.client("dynamodb", endpoint_url=moto_endpoint, **FAKE_AWS)


@pytest.fixture
def dynamodb_tables(dynamodb_client: Any) -> Any:
    """Fresh LakeSync tables with a unique prefix; yields their TableNames."""
    import uuid

    from lakesync.aws.dynamodb import create_tables
    from lakesync.aws.tables import TableNames

    names = TableNames.with_prefix(f"t{uuid.uuid4().hex[:10]}")
    create_tables(dynamodb_client, names)
    return names
