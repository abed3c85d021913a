"""The ConfigStore contract (lakesync.ports.ConfigStore), one suite for the in-memory and the DynamoDB adapter (on
the moto server): sync rules per gateway, schema versions guarded by the expected version, and flush requests listed
oldest first without losing any."""

from __future__ import annotations

import pytest

from lakesync.core.rules import parse_sync_rules, pass_all_rules, user_scoped_rules
from lakesync.core.schema import parse_table_schema
from lakesync.gateway.memory import InMemoryConfigStore
from lakesync.gateway.model import CommitConflict
from lakesync.ports import ConfigStore


@pytest.fixture(params=["memory", "dynamodb"])
def store(request: pytest.FixtureRequest) -> ConfigStore:
    if request.param == "memory":
        return InMemoryConfigStore()
    from lakesync.aws.dynamodb import DynamoDBConfigStore

    return DynamoDBConfigStore(*request.getfixturevalue("contract_dynamodb"))


def _schema(table: str, *columns: str) -> object:
    return parse_table_schema(
        {
            "table": table,
            "columns": [{"name": c, "type": "string"} for c in columns],
            "primaryKey": ["row_id"],
            "softDelete": False,
        }
    )


def test_config_sync_rules_round_trip_and_are_replaced(store: ConfigStore, gw: str) -> None:
    assert store.get_sync_rules(gw) is None
    rules = parse_sync_rules(
        {
            "version": 3,
            "buckets": [
                {"name": "ü-😀", "tables": ["todos"], "filters": [{"column": "n", "op": "gte", "value": "1e3"}]},
                {"name": "team", "tables": [], "filters": [{"column": "team", "op": "in", "value": "jwt:teams"}]},
            ],
        }
    )
    store.put_sync_rules(gw, rules)
    assert store.get_sync_rules(gw) == rules
    store.put_sync_rules(gw, pass_all_rules())
    assert store.get_sync_rules(gw) == pass_all_rules()
    assert store.get_sync_rules(gw + "-other") is None


def test_config_schema_versions_are_guarded_by_the_expected_version(store: ConfigStore, gw: str) -> None:
    v1 = _schema("todos", "title")
    v2 = _schema("todos", "title", "done")

    store.put_schema(gw, v1, 1, 0)
    assert store.get_schemas(gw) == {"todos": (v1, 1)}

    # A writer that read no schema (expected 0) or a wrong version loses, and nothing changes
    for expected in (0, 2, 7):
        with pytest.raises(CommitConflict):
            store.put_schema(gw, v2, 2, expected)
    assert store.get_schemas(gw) == {"todos": (v1, 1)}

    store.put_schema(gw, v2, 2, 1)
    with pytest.raises(CommitConflict):
        store.put_schema(gw, v2, 2, 1)
    assert store.get_schemas(gw) == {"todos": (v2, 2)}


def test_config_schema_of_an_absent_table_needs_expected_version_zero(store: ConfigStore, gw: str) -> None:
    with pytest.raises(CommitConflict):
        store.put_schema(gw, _schema("notes", "body"), 2, 1)
    assert store.get_schemas(gw) == {}


def test_config_schemas_are_per_table_and_per_gateway(store: ConfigStore, gw: str) -> None:
    todos, notes = _schema("todos", "title"), _schema("notes", "body")
    store.put_schema(gw, todos, 1, 0)
    store.put_schema(gw, notes, 1, 0)
    store.put_schema(gw + "-b", notes, 1, 0)
    assert store.get_schemas(gw) == {"todos": (todos, 1), "notes": (notes, 1)}
    assert store.get_schemas(gw + "-b") == {"notes": (notes, 1)}
    assert store.get_schemas(gw + "-c") == {}
    # Rules and schemas do not leak into each other
    store.put_sync_rules(gw, user_scoped_rules(["todos"]))
    assert set(store.get_schemas(gw)) == {"todos", "notes"}


def test_config_flush_requests_are_listed_oldest_first(store: ConfigStore, gw: str) -> None:
    requests = [
        {"id": f"req-{i}", "reason": "admin", "requestedBy": "ü", "atMs": 1_700_000_000_000 + i} for i in range(3)
    ]
    for request in requests:
        store.request_flush(gw, request)
    assert store.list_flush_requests(gw) == requests
    assert store.list_flush_requests(gw + "-other") == []


def test_config_flush_requests_without_id_or_time_are_all_kept(store: ConfigStore, gw: str) -> None:
    # The push service records threshold requests: {reason, shard, unflushedBytes}
    first = {"reason": "threshold", "shard": f"{gw}#todos#0", "unflushedBytes": 10}
    second = {"reason": "threshold", "shard": f"{gw}#notes#0", "unflushedBytes": 20}
    store.request_flush(gw, first)
    store.request_flush(gw, second)
    listed = store.list_flush_requests(gw)
    assert sorted(listed, key=lambda r: r["shard"]) == sorted([first, second], key=lambda r: r["shard"])
