"""The DynamoDB row index as a cache of the log: rows written after the commit, folded from the log while they are
not, repaired when their writer stopped, and never written backwards."""

from __future__ import annotations

from typing import Any

from lakesync.aws.action_store import DynamoDBActionStore
from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.config_store import DynamoDBConfigStore
from lakesync.aws.flush_store import FlushStore
from lakesync.core.delta import RowDelta
from lakesync.core.hlc import HLC
from lakesync.core.log import Commit, ShardId, StoredRow
from lakesync.core.merge import fold
from lakesync.core.messages import SyncPush
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.push import PushResult, push
from tests.factories import T0, at, update

NOW_MS = T0
GW = "gw"
SHARD = ShardId(GW, "todos", 0)


class StopsAfterTheLog(DynamoDBBufferStore):
    """A writer that stops right after its commit: the log has the chunk, the rows and the head never come."""

    def _apply_put(self, commit: Commit) -> None:
        return None


def _deps(buffer: DynamoDBBufferStore, client: Any, names: Any) -> GatewayDeps:
    return GatewayDeps(
        buffer, DynamoDBConfigStore(client, names), DynamoDBActionStore(client, names), GatewaySettings(),
        HLC(lambda: NOW_MS),
    )  # fmt: skip


def _delta(row: str, ms: int, **columns: Any) -> RowDelta:
    """An UPDATE by c1 at ``ms`` milliseconds into the second before the gateway's clock (test_commit_by_put's too)."""
    return update(row, hlc=at(ms - 1000), **columns)


def _push(deps: GatewayDeps, *deltas: RowDelta) -> PushResult:
    return push(deps, GW, SyncPush("c1", tuple(deltas)), client_id="c1")


def _head(client: Any, names: Any) -> dict[str, Any]:
    item: dict[str, Any] = client.get_item(TableName=names.heads, Key={"shard": {"S": SHARD.key}}, ConsistentRead=True)[
        "Item"
    ]
    return item


def test_rows_a_stopped_writer_left_are_folded_from_the_log_and_repaired(
    dynamodb_client: Any, dynamodb_tables: Any
) -> None:
    # Given two rows committed by a writer that stopped before writing them
    stopped_store = StopsAfterTheLog(dynamodb_client, dynamodb_tables)
    stopped = _deps(stopped_store, dynamodb_client, dynamodb_tables)
    first, other = _delta("r1", 1, title="a"), _delta("r2", 2, title="b")
    _push(stopped, first, other)
    head = _head(dynamodb_client, dynamodb_tables)
    # (a commit by a put moves the head after the rows: the head has not moved, but reads of it see the log's end)
    assert (head["seq"]["N"], head["ra"]["N"]) == ("0", "0")
    assert stopped.buffer.get_heads([SHARD])[SHARD].seq == 2
    assert stopped.buffer.get_rows(GW, [("todos", "r1"), ("todos", "r2")]) == {}

    # When another writer changes one of them
    store = DynamoDBBufferStore(dynamodb_client, dynamodb_tables)
    deps = _deps(store, dynamodb_client, dynamodb_tables)
    second = _delta("r1", 3, done=True)
    result = _push(deps, second)

    # Then it merged against the row as the log has it (its entry's image before holds the first write)
    (entry,) = result.entries
    assert entry.before == {"title": "a"} and entry.after == {"title": "a", "done": True}
    # And the rows the stopped writer left are written (repaired from the log), and the head says every row is
    head = _head(dynamodb_client, dynamodb_tables)
    assert head["ra"]["N"] == head["seq"]["N"] == "3"
    rows = store.get_rows(GW, [("todos", "r1"), ("todos", "r2")])
    assert rows[("todos", "r1")].state == fold([first, second])
    assert rows[("todos", "r2")].state == fold([other])
    assert (rows[("todos", "r1")].version, rows[("todos", "r2")].version) == (3, 2)
    # And a re-send of the stopped writer's deltas is known from the rows: duplicates, nothing logged
    again = _push(deps, first, other)
    assert [r.duplicate for r in again.receipts] == [True, True] and again.entries == ()


def test_a_basis_read_while_rows_are_pending_folds_the_log(dynamodb_client: Any, dynamodb_tables: Any) -> None:
    # Given a chunk whose rows are not written yet, the head moved over it (as the flush settles a stopped writer's)
    stopped = StopsAfterTheLog(dynamodb_client, dynamodb_tables)
    _push(_deps(stopped, dynamodb_client, dynamodb_tables), _delta("r1", 1, title="a", n=1))
    FlushStore(dynamodb_client, dynamodb_tables).shards([GW], settle_before_ms=NOW_MS + 1)
    head = _head(dynamodb_client, dynamodb_tables)
    assert (head["seq"]["N"], head["ra"]["N"]) == ("1", "0")

    # When a chunk's basis is read, Then the row is the log's, with the delta's key among its recent ones
    store = DynamoDBBufferStore(dynamodb_client, dynamodb_tables)
    basis = store.read_commit_basis(SHARD, [("todos", "r1"), ("todos", "r9")])
    assert set(basis.rows) == {("todos", "r1")}
    assert basis.rows[("todos", "r1")].state.values() == {"title": "a", "n": 1}
    assert basis.rows[("todos", "r1")].version == 1 and len(basis.rows[("todos", "r1")].recent) == 1
    assert basis.head is not None and basis.head.seq == 1


def test_row_writes_never_go_backwards(dynamodb_client: Any, dynamodb_tables: Any) -> None:
    # Given a row written at position 5
    store = DynamoDBBufferStore(dynamodb_client, dynamodb_tables)
    newer, older = fold([_delta("r1", 5, title="new")]), fold([_delta("r1", 3, title="old")])
    assert newer is not None and older is not None
    store._rows.put_row(GW, StoredRow(newer, 5))

    # When a late writer writes the row as it was at position 3 (or 5 again)
    store._rows.put_row(GW, StoredRow(older, 3))
    store._rows.put_row(GW, StoredRow(older, 5))

    # Then the row stays at position 5
    row = store.get_rows(GW, [("todos", "r1")])[("todos", "r1")]
    assert (row.version, row.state.values()) == (5, {"title": "new"})


def test_dedup_records_are_read_only_for_deltas_that_changed_nothing(
    dynamodb_client: Any, dynamodb_tables: Any
) -> None:
    reads: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        reads.append({table: spec.get("ConsistentRead") for table, spec in params["RequestItems"].items()})

    dynamodb_client.meta.events.register("provide-client-params.dynamodb.BatchGetItem", record)
    store = DynamoDBBufferStore(dynamodb_client, dynamodb_tables)
    deps = _deps(store, dynamodb_client, dynamodb_tables)
    # Given a row whose title a later write holds: pushing deltas that change their rows reads no dedup record
    _push(deps, _delta("r1", 5, title="new"))
    _push(deps, _delta("r2", 1, title="other"))
    assert reads and not any(dynamodb_tables.dedup in r for r in reads)
    assert all(r[dynamodb_tables.rows] is True for r in reads if dynamodb_tables.rows in r)
    # When an older write arrives, which changes nothing (so it gets a record)
    stale = _delta("r1", 1, title="old")
    first = _push(deps, stale)
    # Then its record was looked up (and not found), and it is not a duplicate
    assert first.entries == () and not first.receipts[0].duplicate
    assert any(dynamodb_tables.dedup in r for r in reads)
    # And a re-send the read finds is a duplicate
    assert _push(deps, stale).receipts[0].duplicate
    # When a read misses the record (deleted here: as a read of a replica that has not seen it yet would)
    for item in dynamodb_client.scan(TableName=dynamodb_tables.dedup, ConsistentRead=True)["Items"]:
        dynamodb_client.delete_item(TableName=dynamodb_tables.dedup, Key={"pk": item["pk"]})
    seq_before = _head(dynamodb_client, dynamodb_tables)["seq"]["N"]
    again = _push(deps, stale)
    # Then the delta is merged again and changes nothing: no log entry, its original receipt, the row unchanged
    assert again.entries == () and not again.receipts[0].duplicate
    assert again.receipts[0].to_json() == first.receipts[0].to_json()
    assert _head(dynamodb_client, dynamodb_tables)["seq"]["N"] == seq_before
    assert store.get_rows(GW, [("todos", "r1")])[("todos", "r1")].state == fold([_delta("r1", 5, title="new")])
