"""The PullBasisReader contract (lakesync.ports.PullBasisReader): a pull's sync rules and shard registry, read
together, are exactly what the config store and the buffer store hold for that gateway, and nothing of its schemas,
its flush requests or another gateway leaks in. One suite for the two-store reader over the in-memory and the
DynamoDB stores and for the one-Query DynamoDB reader (on the moto server)."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from lakesync.core.hlc import HLC
from lakesync.core.log import PullBasis, ShardId
from lakesync.core.messages import SyncPush
from lakesync.core.rules import parse_sync_rules, user_scoped_rules
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.memory import InMemoryActionStore, InMemoryBufferStore, InMemoryConfigStore
from lakesync.gateway.pull import StoresPullBasis
from lakesync.gateway.push import push
from lakesync.ports import BufferStore, ConfigStore, PullBasisReader
from tests.factories import T0, at, insert, schema_of

NOW_MS = T0


class Subject(NamedTuple):
    reader: PullBasisReader
    config: ConfigStore
    buffer: BufferStore


@pytest.fixture(params=["stores-memory", "stores-dynamodb", "dynamodb"])
def subject(request: pytest.FixtureRequest) -> Subject:
    if request.param == "stores-memory":
        memory_config, memory_buffer = InMemoryConfigStore(), InMemoryBufferStore()
        return Subject(StoresPullBasis(memory_config, memory_buffer), memory_config, memory_buffer)
    from lakesync.aws.buffer.store import DynamoDBBufferStore
    from lakesync.aws.config_store import DynamoDBConfigStore, DynamoDBPullBasisReader

    client, names = request.getfixturevalue("module_dynamodb")
    config, buffer = DynamoDBConfigStore(client, names), DynamoDBBufferStore(client, names)
    if request.param == "stores-dynamodb":
        return Subject(StoresPullBasis(config, buffer), config, buffer)
    return Subject(DynamoDBPullBasisReader(client, names), config, buffer)


def _push_rows(subject: Subject, gateway: str, tables: dict[str, int], sub_shards: dict[str, int]) -> None:
    deps = GatewayDeps(
        buffer=subject.buffer,
        config=subject.config,
        actions=InMemoryActionStore(),
        settings=GatewaySettings(gateway_ids=frozenset({gateway}), sub_shards=sub_shards),
        clock=HLC(lambda: NOW_MS),
        wall_ms=lambda: NOW_MS,
    )
    deltas = tuple(
        insert(f"r{i}", hlc=at(0, i), table=table, title=f"t{i}") for table, rows in tables.items() for i in range(rows)
    )
    push(deps, gateway, SyncPush("c1", deltas), client_id="c1", trusted=True)  # the rows are any table's


def test_pull_basis_of_an_unknown_gateway_is_empty(subject: Subject, gw: str) -> None:
    assert subject.reader.read_pull_basis(gw) == PullBasis(None, ())


def test_pull_basis_is_the_rules_and_the_registry_of_that_gateway_only(subject: Subject, gw: str) -> None:
    other = gw + "-other"
    rules = parse_sync_rules(
        {
            "version": 2,
            "buckets": [
                {"name": "mine", "tables": ["todos"], "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}]}
            ],
        }
    )
    subject.config.put_sync_rules(gw, rules)
    subject.config.put_sync_rules(other, user_scoped_rules("owner"))
    # Items that share the gateway's config partition but are not part of the basis.
    schema = schema_of("todos", {"title": "string"}, primaryKey=["row_id"])
    subject.config.put_schema(gw, schema, 1, 0)
    subject.config.request_flush(gw, {"id": "f1", "reason": "manual", "atMs": NOW_MS})
    _push_rows(subject, gw, {"todos": 40, "notes": 2, "zeta": 1}, {"todos": 3})
    _push_rows(subject, other, {"elsewhere": 1}, {})

    basis = subject.reader.read_pull_basis(gw)

    assert basis.rules == rules == subject.config.get_sync_rules(gw)
    assert basis.shards == tuple(sorted(subject.buffer.list_shards(gw)))
    assert {s.table for s in basis.shards} == {"todos", "notes", "zeta"}
    assert sorted(s.sub for s in basis.shards if s.table == "todos") == [0, 1, 2]
    assert all(s.gateway == gw for s in basis.shards)
    assert subject.reader.read_pull_basis(other).shards == (ShardId(other, "elsewhere", 0),)


def test_pull_basis_without_rules_still_lists_the_shards(subject: Subject, gw: str) -> None:
    _push_rows(subject, gw, {"todos": 1}, {})

    assert subject.reader.read_pull_basis(gw) == PullBasis(None, (ShardId(gw, "todos", 0),))
