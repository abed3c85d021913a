"""The ConfigStore contract (lakesync.ports.ConfigStore), one suite for the in-memory and the DynamoDB adapter (on
the moto server): sync rules per gateway, schema versions guarded by the expected version, flush requests listed
oldest first without losing any, and materialisation destinations (unique names, race-safe adds, sorted lists)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from lakesync.core.destinations import DestinationConfig, parse_destination
from lakesync.core.errors import AlreadyExistsError
from lakesync.core.log import CommitConflict
from lakesync.core.rules import parse_sync_rules, pass_all_rules, user_scoped_rules
from lakesync.gateway.memory import InMemoryConfigStore
from lakesync.ports import ConfigStore
from tests.factories import schema_with, table_schema


@pytest.fixture(params=["memory", "dynamodb"])
def store(request: pytest.FixtureRequest) -> ConfigStore:
    if request.param == "memory":
        return InMemoryConfigStore()
    from lakesync.aws.config_store import DynamoDBConfigStore

    return DynamoDBConfigStore(*request.getfixturevalue("module_dynamodb"))


# The options spelled out, as a stored document has them
OPTIONS: dict[str, Any] = {"primaryKey": ["row_id"], "softDelete": False}
TODOS = schema_with(table_schema("todos", title="string"), **OPTIONS)
TODOS_V2 = schema_with(table_schema("todos", title="string", done="string"), **OPTIONS)
NOTES = schema_with(table_schema("notes", body="string"), **OPTIONS)


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
    v1, v2 = TODOS, TODOS_V2

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
        store.put_schema(gw, NOTES, 2, 1)
    assert store.get_schemas(gw) == {}


def test_config_schemas_are_per_table_and_per_gateway(store: ConfigStore, gw: str) -> None:
    todos, notes = TODOS, NOTES
    store.put_schema(gw, todos, 1, 0)
    store.put_schema(gw, notes, 1, 0)
    store.put_schema(gw + "-b", notes, 1, 0)
    assert store.get_schemas(gw) == {"todos": (todos, 1), "notes": (notes, 1)}
    assert store.get_schemas(gw + "-b") == {"notes": (notes, 1)}
    assert store.get_schemas(gw + "-c") == {}
    # Rules and schemas do not leak into each other
    store.put_sync_rules(gw, user_scoped_rules(["todos"]))
    assert set(store.get_schemas(gw)) == {"todos", "notes"}


def test_config_push_config_holds_the_rules_and_every_schema_and_nothing_else(store: ConfigStore, gw: str) -> None:
    assert store.get_push_config(gw) == (None, {})
    todos, notes = TODOS, NOTES
    store.put_schema(gw, todos, 1, 0)
    assert store.get_push_config(gw) == (None, {"todos": (todos, 1)})
    rules = parse_sync_rules(
        {
            "version": 2,
            "buckets": [{"name": "b", "tables": ["todos"], "filters": [], "write": {"ops": ["insert"]}}],
            "tables": {"notes": {"write": {"readOnlyColumns": ["owner"]}}, "audit": {"adminOnly": True}},
        }
    )
    store.put_sync_rules(gw, rules)
    store.put_schema(gw, notes, 1, 0)
    store.put_schema(gw + "-b", todos, 1, 0)
    # Items of other kinds, and of other gateways, stay out
    store.request_flush(gw, {"id": "r1", "reason": "admin", "atMs": 1})
    assert store.get_push_config(gw) == (rules, {"todos": (todos, 1), "notes": (notes, 1)})
    assert store.get_push_config(gw)[0] == store.get_sync_rules(gw)
    assert store.get_push_config(gw + "-b") == (None, {"todos": (todos, 1)})


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


# -- materialisation destinations ----------------------------------------------------------------------------------

ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:lakesync/pg-AbCdEf"


def _destination(name: str, **fields: object) -> DestinationConfig:
    return parse_destination({"name": name, "type": "postgres", "secretArn": ARN, **fields})


def test_config_destinations_round_trip_sorted_by_name(store: ConfigStore, gw: str) -> None:
    assert store.list_destinations(gw) == []
    # Given destinations added out of order, with every optional field in use
    added = [
        _destination("warehouse", url="postgresql://db.internal:5432/wh", tables=["todos", "notes"]),
        parse_destination({"name": "Analytics-1", "type": "bigquery", "url": "bigquery://my-project/ds"}),
        parse_destination({"name": "local_db", "type": "sqlite", "url": "sqlite:///var/lakesync/a%C3%BC.db"}),
        _destination("0first"),
    ]
    for config in added:
        store.add_destination(gw, config)
    # Then they are listed by name, equal to what was added
    assert store.list_destinations(gw) == sorted(added, key=lambda c: c.name)
    assert [c.name for c in store.list_destinations(gw)] == ["0first", "Analytics-1", "local_db", "warehouse"]


def test_config_destination_names_are_unique_per_gateway(store: ConfigStore, gw: str) -> None:
    first = _destination("pg", tables=["todos"])
    store.add_destination(gw, first)
    # When a second destination of the same name is added, Then AlreadyExistsError and the first is kept
    with pytest.raises(AlreadyExistsError) as caught:
        store.add_destination(gw, _destination("pg", url="postgresql://other/db"))
    assert caught.value.message == 'Destination "pg" already exists'
    assert (caught.value.status, caught.value.to_body()["code"]) == (409, "VALIDATION_ERROR")
    assert store.list_destinations(gw) == [first]
    # Names are case-sensitive, and another gateway has its own names
    store.add_destination(gw, _destination("PG"))
    store.add_destination(gw + "-b", _destination("pg"))
    assert [c.name for c in store.list_destinations(gw)] == ["PG", "pg"]
    assert store.list_destinations(gw + "-b") == [_destination("pg")]
    assert store.list_destinations(gw + "-c") == []


def test_config_destinations_are_removed_by_name(store: ConfigStore, gw: str) -> None:
    store.add_destination(gw, _destination("a"))
    store.add_destination(gw, _destination("b"))
    store.add_destination(gw + "-b", _destination("a"))
    # When one is removed, Then only it is gone; removing it again (or an unknown name) reports False
    assert store.remove_destination(gw, "a") is True
    assert store.remove_destination(gw, "a") is False
    assert store.remove_destination(gw, "nope") is False
    assert store.remove_destination(gw + "-c", "b") is False
    assert store.list_destinations(gw) == [_destination("b")]
    assert store.list_destinations(gw + "-b") == [_destination("a")]
    # And the name can be registered again
    store.add_destination(gw, _destination("a", tables=["notes"]))
    assert store.list_destinations(gw) == [_destination("a", tables=["notes"]), _destination("b")]


def test_config_concurrent_adds_of_one_name_have_one_winner(store: ConfigStore, gw: str) -> None:
    # Given 8 writers adding the same name at once, each with its own config
    candidates = [_destination("race", tables=[f"t{i}"]) for i in range(8)]
    barrier = threading.Barrier(len(candidates))

    def add(config: DestinationConfig) -> bool:
        barrier.wait()
        try:
            store.add_destination(gw, config)
        except AlreadyExistsError:
            return False
        return True

    with ThreadPoolExecutor(len(candidates)) as pool:
        won = list(pool.map(add, candidates))
    # Then exactly one succeeds and its config is the stored one
    assert won.count(True) == 1
    assert store.list_destinations(gw) == [candidates[won.index(True)]]


def test_config_destinations_leave_rules_schemas_and_flush_requests_alone(store: ConfigStore, gw: str) -> None:
    store.add_destination(gw, _destination("pg"))
    assert store.get_sync_rules(gw) is None
    assert store.get_schemas(gw) == {}
    assert store.list_flush_requests(gw) == []
    store.put_schema(gw, TODOS, 1, 0)
    store.request_flush(gw, {"id": "r", "reason": "admin", "atMs": 1})
    assert store.list_destinations(gw) == [_destination("pg")]


def test_config_destinations_stay_outside_the_pull_basis_range(module_dynamodb: Any, gw: str) -> None:
    # The pull reads sk rules..shard$ in one Query; dest# keys sort before it, so a destination is not read there
    from lakesync.aws.config_store import DynamoDBConfigStore, DynamoDBPullBasisReader
    from lakesync.aws.items import destination_key

    assert destination_key("zzzz") < "rules"
    store = DynamoDBConfigStore(*module_dynamodb)
    store.put_sync_rules(gw, pass_all_rules())
    store.add_destination(gw, _destination("zzzz"))
    basis = DynamoDBPullBasisReader(*module_dynamodb).read_pull_basis(gw)
    assert basis.rules == pass_all_rules() and basis.shards == ()
