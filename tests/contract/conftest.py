"""Fixtures of the port contract suites, which run one behaviour suite against each implementation of a port (the
DynamoDB tables per module, ``module_dynamodb``, and the unique gateway id, ``gw``, come from ``tests/conftest.py``)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(params=["memory", "dynamodb"])
def positions(request: pytest.FixtureRequest) -> Any:
    """A connector position store: in memory, and on DynamoDB (the moto server)."""
    if request.param == "memory":
        from lakesync.gateway.memory import InMemoryPositionStore

        return InMemoryPositionStore()
    from lakesync.aws.connector_positions import DynamoDBPositionStore

    client, names = request.getfixturevalue("module_dynamodb")
    return DynamoDBPositionStore(client, names)
