"""Destinations resolved per gateway (lakesync.aws.destinations) over the config store and Secrets Manager on the moto
server, connecting to a throwaway PostgreSQL: secrets in both formats, caching, failure isolation, no leaked
credentials."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from lakesync.aws.config_store import DynamoDBConfigStore
from lakesync.aws.destinations import ConfiguredDestinations
from lakesync.core.destinations import parse_destination
from lakesync.core.errors import DestinationError
from lakesync.sql import connect
from tests.conftest import FAKE_AWS
from tests.factories import insert, table_schema
from tests.sql.servers import Server, postgres_server  # noqa: F401 (fixture)

GW = "default"
SCHEMA = table_schema(title="string")
PASSWORD = "hunter2-never-in-logs"


@pytest.fixture(autouse=True)
def loopback_allowed() -> Any:
    """The test PostgreSQL listens on loopback: this deployment allows it, as `lakesync local` does."""
    from lakesync import egress
    from lakesync.core.network import LOCAL_DEVELOPMENT

    previous = egress.configure(LOCAL_DEVELOPMENT)
    yield
    egress.configure(previous)


@pytest.fixture
def secrets(moto_endpoint: str) -> Any:
    return boto3.client("secretsmanager", endpoint_url=moto_endpoint, **FAKE_AWS)


@pytest.fixture
def config(dynamodb_client: Any, dynamodb_tables: Any) -> DynamoDBConfigStore:
    return DynamoDBConfigStore(dynamodb_client, dynamodb_tables)


def secret(secrets: Any, value: dict[str, Any]) -> str:
    return str(
        secrets.create_secret(Name=f"lakesync/test/destinations/{uuid.uuid4().hex}", SecretString=json.dumps(value))[
            "ARN"
        ]
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_secrets_in_rds_and_url_form_connect_and_connections_are_reused(
    config: DynamoDBConfigStore,
    secrets: Any,
    postgres_server: Server,  # noqa: F811
) -> None:
    # Given two PostgreSQL destinations, one with an RDS-style secret and one with a {"url"} secret
    db1, db2 = postgres_server.url(), postgres_server.url()
    name1, name2 = db1.rsplit("/", 1)[1], db2.rsplit("/", 1)[1]
    rds = {
        "engine": "postgres",
        "host": postgres_server.host,
        "port": postgres_server.port,
        "username": postgres_server.user,
        "password": PASSWORD,
        "dbname": name1,
    }
    url_secret = {
        "url": f"postgresql://{postgres_server.user}:{PASSWORD}@{postgres_server.host}:{postgres_server.port}/{name2}"
    }
    config.add_destination(GW, parse_destination({"name": "a", "type": "postgres", "secretArn": secret(secrets, rds)}))
    config.add_destination(
        GW, parse_destination({"name": "b", "type": "postgres", "secretArn": secret(secrets, url_secret)})
    )
    provider = ConfiguredDestinations(config, lambda: secrets)

    # When resolved twice and a delta applied through each
    first = provider.destinations(GW, "todos")
    second = provider.destinations(GW, "todos")

    # Then both opened, with the same connections the second time, and each wrote to its own database
    assert [d.name for d in first.opened] == ["a", "b"] and first.failures == {}
    assert [id(d) for d in first.opened] == [id(d) for d in second.opened]
    for destination in first.opened:
        destination.apply(SCHEMA, [insert("r1", client="c", title=f"via {destination.name}")])
    for db, name in ((db1, "a"), (db2, "b")):
        check = connect(db, name="check")
        assert check.rows(SCHEMA) == {"r1": {"title": f"via {name}"}}
        check.close()
    provider.close()


def test_a_destination_that_cannot_open_is_reported_while_the_others_open(
    config: DynamoDBConfigStore, secrets: Any, tmp_path: Path
) -> None:
    # Given a working SQLite destination, one whose secret does not exist, and one whose server is unreachable
    config.add_destination(
        GW, parse_destination({"name": "lite", "type": "sqlite", "url": f"sqlite:///{tmp_path}/a.db"})
    )
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:lakesync/test/destinations/gone-AbCdEf"
    config.add_destination(GW, parse_destination({"name": "gone", "type": "postgres", "secretArn": arn}))
    down = {"engine": "postgres", "host": "127.0.0.1", "port": 9, "username": "u", "password": PASSWORD, "dbname": "d"}
    config.add_destination(
        GW, parse_destination({"name": "down", "type": "postgres", "secretArn": secret(secrets, down)})
    )
    provider = ConfiguredDestinations(config, lambda: secrets)

    # When resolved
    resolved = provider.destinations(GW, "todos")

    # Then the one whose secret cannot be read is a failure naming it; the others opened (connections are lazy)
    assert [d.name for d in resolved.opened] == ["down", "lite"]
    assert set(resolved.failures) == {"gone"}
    # And writing to the unreachable one fails with a retryable error that never shows the password
    down_destination = resolved.opened[0]
    with pytest.raises(DestinationError) as failed:
        down_destination.apply(SCHEMA, [insert("r1", client="c", title="x")])
    assert failed.value.retryable
    for message in [failed.value.message, *(e.message for e in resolved.failures.values())]:
        assert PASSWORD not in message
    provider.close()


def test_the_destination_list_is_cached_then_refreshed_and_removed_ones_are_closed(
    config: DynamoDBConfigStore, tmp_path: Path
) -> None:
    clock = Clock()
    provider = ConfiguredDestinations(config, None, config_ttl_s=60, clock=clock)
    config.add_destination(GW, parse_destination({"name": "a", "type": "sqlite", "url": f"sqlite:///{tmp_path}/a.db"}))
    # Given the list was read once
    assert [d.name for d in provider.destinations(GW, "todos").opened] == ["a"]
    # When a destination is added and one removed within the TTL, nothing changes yet
    config.add_destination(GW, parse_destination({"name": "b", "type": "sqlite", "url": f"sqlite:///{tmp_path}/b.db"}))
    config.remove_destination(GW, "a")
    assert [d.name for d in provider.destinations(GW, "todos").opened] == ["a"]
    # Then after the TTL the new list applies
    clock.now = 61
    assert [d.name for d in provider.destinations(GW, "todos").opened] == ["b"]
    # And a destination limited to other tables is not used for this one
    config.add_destination(
        GW, parse_destination({"name": "c", "type": "sqlite", "url": f"sqlite:///{tmp_path}/c.db", "tables": ["notes"]})
    )
    clock.now = 200
    assert [d.name for d in provider.destinations(GW, "todos").opened] == ["b"]
    assert [d.name for d in provider.destinations(GW, "notes").opened] == ["b", "c"]
    provider.close()


def test_a_discarded_destination_is_reopened_on_next_use(config: DynamoDBConfigStore, tmp_path: Path) -> None:
    config.add_destination(GW, parse_destination({"name": "a", "type": "sqlite", "url": f"sqlite:///{tmp_path}/a.db"}))
    provider = ConfiguredDestinations(config, None)
    first = provider.destinations(GW, "todos").opened[0]
    provider.discard(first)
    again = provider.destinations(GW, "todos").opened[0]
    assert again is not first
    again.apply(SCHEMA, [insert("r", client="c", title="x")])
    assert again.rows(SCHEMA) == {"r": {"title": "x"}}
    provider.close()
