"""One behaviour suite for the WebSocket session stores: in memory and on DynamoDB (moto server), plus what only the
DynamoDB table promises (TTL on ``exp``, paged listing by gateway)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from lakesync.aws.connections import DynamoDBConnectionStore
from lakesync.aws.tables import CONNECTIONS_INDEX, TTL_ATTRIBUTE, connections_table_name
from lakesync.core.realtime import Connection, Encoding
from lakesync.gateway.memory import InMemoryConnectionStore
from lakesync.ports import ConnectionStore


@pytest.fixture(scope="module")
def connections_table(module_dynamodb: Any) -> tuple[Any, str]:
    """A connections table on the moto server, shared by the module (tests use unique gateway and connection ids)."""
    from lakesync.aws.table_setup import create_tables

    client, names = module_dynamodb
    table = connections_table_name(names.deltas.removesuffix("-deltas"))
    create_tables(client, names, connections=table)
    return client, table


@pytest.fixture(params=["memory", "dynamodb"])
def store(request: pytest.FixtureRequest) -> ConnectionStore:
    if request.param == "memory":
        return InMemoryConnectionStore()
    client, table = request.getfixturevalue("connections_table")
    return DynamoDBConnectionStore(client, table, page_size=2)


def session(gw: str, n: int = 0, **overrides: Any) -> Connection:
    fields: dict[str, Any] = {
        "connection_id": f"c{n}-{uuid.uuid4().hex[:8]}=",
        "gateway": gw,
        "client_id": f"client-{n}",
        "claims": {"team": "red", "roles": ("a", "b"), "none": (), "sub": f"client-{n}", "é": "😀"},
        "encoding": Encoding.BASE64,
        "expires_at": 1_700_003_600,
        "connected_at": 1_700_000_000,
    }
    fields.update(overrides)
    return Connection(**fields)


def test_a_put_session_is_got_back_equal(store: ConnectionStore, gw: str) -> None:
    # Given a session with list and text claims
    opened = session(gw)
    # When it is put
    store.put_connection(opened)
    # Then it is got back equal (claims keep their types), and an unknown id is None
    assert store.get_connection(opened.connection_id) == opened
    assert store.get_connection("unknown-" + uuid.uuid4().hex) is None


def test_a_claim_holding_a_lone_surrogate_is_got_back_equal(store: ConnectionStore, gw: str) -> None:
    # A token's JSON may escape one ("\\udc00"); UTF-8 cannot carry it, the stored claims must still
    opened = session(gw, claims={"team": "\udc00", "roles": ("a\ud800b",), "sub": "client-0"})
    store.put_connection(opened)
    assert store.get_connection(opened.connection_id) == opened


def test_a_put_again_replaces_the_session(store: ConnectionStore, gw: str) -> None:
    opened = session(gw)
    store.put_connection(opened)
    again = session(gw, connection_id=opened.connection_id, encoding=Encoding.BINARY, claims={})
    store.put_connection(again)
    assert store.get_connection(opened.connection_id) == again
    assert store.list_connections(gw) == [again]


def test_removed_sessions_are_forgotten_and_removing_twice_is_fine(store: ConnectionStore, gw: str) -> None:
    opened = session(gw)
    store.put_connection(opened)
    store.remove_connection(opened.connection_id)
    store.remove_connection(opened.connection_id)
    store.remove_connection("never-" + uuid.uuid4().hex)
    assert store.get_connection(opened.connection_id) is None
    assert store.list_connections(gw) == []


def test_sessions_are_listed_by_gateway_expired_ones_included(store: ConnectionStore, gw: str) -> None:
    # Given five sessions of one gateway (more than a page of the DynamoDB store), one expired, and one of another
    mine = [session(gw, n) for n in range(4)] + [session(gw, 9, expires_at=1)]
    other = session(gw + "-other")
    for s in [*mine, other]:
        store.put_connection(s)
    # When the gateway's sessions are listed
    listed = store.list_connections(gw)
    # Then exactly its sessions come back, the expired one too (the services judge expiry)
    key = lambda c: c.connection_id  # noqa: E731
    assert sorted(listed, key=key) == sorted(mine, key=key)
    assert store.list_connections(other.gateway) == [other]
    assert store.list_connections("nobody-" + uuid.uuid4().hex) == []


def test_dynamodb_sessions_expire_by_ttl_on_exp_and_are_indexed_by_gateway(connections_table: Any, gw: str) -> None:
    # Given the table and a stored session
    client, table = connections_table
    store = DynamoDBConnectionStore(client, table)
    opened = session(gw)
    store.put_connection(opened)
    # Then DynamoDB's TTL deletes it on its expiry, and the gateway index carries whole sessions
    ttl = client.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    assert ttl["TimeToLiveStatus"] == "ENABLED" and ttl["AttributeName"] == TTL_ATTRIBUTE
    item = client.get_item(TableName=table, Key={"id": {"S": opened.connection_id}})["Item"]
    assert item[TTL_ATTRIBUTE] == {"N": str(opened.expires_at)}
    (index,) = client.describe_table(TableName=table)["Table"]["GlobalSecondaryIndexes"]
    assert index["IndexName"] == CONNECTIONS_INDEX and index["Projection"] == {"ProjectionType": "ALL"}
