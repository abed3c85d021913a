"""DynamoDB limits the push must respect: the 4 MB transaction (chunks split by bytes) and reads that race a
transaction being applied (a cursor read stops at a gap in the sequence instead of skipping an entry)."""

from __future__ import annotations

from typing import Any

from lakesync.aws.action_store import DynamoDBActionStore
from lakesync.aws.buffer.log_chunks import chunk_key
from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.config_store import DynamoDBConfigStore
from lakesync.core.delta import make_delta
from lakesync.core.hlc import HLC, encode
from lakesync.core.log import Commit
from lakesync.core.messages import SyncPush
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.memory import InMemoryActionStore, InMemoryBufferStore, InMemoryConfigStore
from lakesync.gateway.push import _commit_bytes, push

NOW_MS = 1_700_000_000_000


class RecordingStore(InMemoryBufferStore):
    def __init__(self) -> None:
        super().__init__()
        self.commits: list[Commit] = []

    def commit(self, commit: Commit) -> None:
        super().commit(commit)
        self.commits.append(commit)


def _big_deltas(count: int, size: int) -> list[Any]:
    return [
        make_delta(
            "INSERT",
            table="docs",
            row_id=f"r{i}",
            client_id="c",
            hlc=encode(NOW_MS, i),
            columns={"body": "漢" * (size // 3)},
        )
        for i in range(count)
    ]


def test_push_splits_a_chunk_whose_items_exceed_the_transaction_budget() -> None:
    # Given 32 rows of ~90 KB each: one chunk by count, ~8 MB of items (rows + log entries)
    store = RecordingStore()
    settings = GatewaySettings()
    deps = GatewayDeps(store, InMemoryConfigStore(), InMemoryActionStore(), settings, HLC(lambda: NOW_MS))
    deltas = _big_deltas(settings.chunk_deltas, 90_000)

    # When they are pushed
    result = push(deps, "gw", SyncPush("c", tuple(deltas)), client_id="c")

    # Then every delta is committed, in several commits, each within the budget, with contiguous sequences
    assert result.accepted == len(deltas) and len(result.deltas) == len(deltas)
    assert len(store.commits) > 1
    assert all(_commit_bytes(c) <= settings.max_commit_bytes for c in store.commits)
    seqs = [e.seq for c in store.commits for e in c.entries]
    assert seqs == list(range(1, len(deltas) + 1))


def test_dynamodb_read_log_stops_at_a_gap_until_the_missing_entry_is_visible(
    dynamodb_client: Any, dynamodb_tables: Any
) -> None:
    # Given three commits of one entry each (one log item each), and the middle one made invisible (as a restore, or
    # a read racing the item's write, can show)
    buffer = DynamoDBBufferStore(dynamodb_client, dynamodb_tables)
    deps = GatewayDeps(
        buffer,
        DynamoDBConfigStore(dynamodb_client, dynamodb_tables),
        DynamoDBActionStore(dynamodb_client, dynamodb_tables),
        GatewaySettings(),
        HLC(lambda: NOW_MS),
    )
    for delta in _big_deltas(3, 30):
        push(deps, "gw", SyncPush("c", (delta,)), client_id="c")
    (shard,) = buffer.list_shards("gw")
    middle = {"shard": {"S": shard.key}, "seq": {"N": str(chunk_key(2))}}
    hidden = dynamodb_client.get_item(TableName=dynamodb_tables.deltas, Key=middle)
    dynamodb_client.delete_item(TableName=dynamodb_tables.deltas, Key=middle)

    # When a reader reads from the start, and from just before the gap
    from_start = buffer.read_log(shard, 0, 10)
    after_gap = buffer.read_log(shard, 1, 10)

    # Then it stops before the gap and does not jump over it
    assert [e.seq for e in from_start] == [1]
    assert after_gap == []

    # And once the entry is visible, reading resumes with it
    dynamodb_client.put_item(TableName=dynamodb_tables.deltas, Item=hidden["Item"])
    assert [e.seq for e in buffer.read_log(shard, 1, 10)] == [2, 3]
