"""The commit of a first-keyed chunk by one conditional put (no transaction), on the moto server: a writer that stops
after its put or after its rows leaves a chunk past the head, which the next commit rolls the head over and which
head reads and pulls see meanwhile; writers of last keys and of puts on one shard keep one chain; and what a push of
ten writes."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from lakesync.aws.action_store import DynamoDBActionStore
from lakesync.aws.buffer.log_chunks import FIRST_KEYED
from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.config_store import DynamoDBConfigStore
from lakesync.aws.flush_store import STOPPED_WRITER_MS, FlushStore
from lakesync.core.hlc import HLC
from lakesync.core.log import Commit
from lakesync.core.merge import fold
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.pull import pull
from tests.integration.test_commit_marks import CountingClient
from tests.integration.test_row_cache import GW, NOW_MS, SHARD, _delta, _deps, _push


class StopsAfterThePut(DynamoDBBufferStore):
    """A writer that stops right after its put: the log has the chunk, its rows and the head never move."""

    def _apply_put(self, commit: Commit) -> None:
        return None


class StopsBeforeTheHead(DynamoDBBufferStore):
    """A writer that stops after writing its rows, before the head."""

    def _advance_head(self, commit: Commit, *_: Any) -> None:
        return None


def _stored_head(client: Any, names: Any) -> tuple[int, int]:
    item = client.get_item(TableName=names.heads, Key={"shard": {"S": SHARD.key}}, ConsistentRead=True)["Item"]
    return int(item["seq"]["N"]), int(item["ra"]["N"])


def _keys(client: Any, names: Any) -> list[int]:
    items = client.query(
        TableName=names.deltas,
        KeyConditionExpression="#sh = :s",
        ExpressionAttributeNames={"#sh": "shard"},
        ExpressionAttributeValues={":s": {"S": SHARD.key}},
        ConsistentRead=True,
    )["Items"]
    return [int(i["seq"]["N"]) for i in items]


def test_a_chunk_its_writer_left_past_the_head_is_seen_pulled_and_rolled_over(
    dynamodb_client: Any, dynamodb_tables: Any
) -> None:
    # Given a push of two rows, then one whose writer stopped after its put, and one that stopped before the head
    client, names = dynamodb_client, dynamodb_tables
    store = DynamoDBBufferStore(client, names)
    deps = _deps(store, client, names)
    first = [_delta("r1", 1, title="a"), _delta("r2", 2, title="b")]
    _push(deps, *first)
    after_put = _delta("r1", 3, done=True)
    _push(_deps(StopsAfterThePut(client, names), client, names), after_put)
    assert _stored_head(client, names) == (2, 2)

    # Then the log holds it, and every head read sees it: the head as the log has it
    assert _keys(client, names) == [FIRST_KEYED + 1, FIRST_KEYED + 3]
    assert store.get_heads([SHARD])[SHARD].seq == 3
    # And a cursor pull delivers it, and the next pull is caught up, not "regressed" (its position is past the
    # stored head)
    page = pull(deps, GW, limit=100, claims={})
    assert [d.delta_id for d in page.deltas] == [d.delta_id for d in [*first, after_put]]
    again = pull(deps, GW, limit=100, claims={}, cursor=page.cursor)
    assert again.deltas == () and not again.has_more
    # And a head read for positions only looks past the stored head when it is short of them: a caught-up pull's
    # check of a position at the stored head takes no Query of the log
    counting = CountingClient(client)
    reader = DynamoDBBufferStore(counting, names)
    assert reader.get_heads([SHARD], reaching={SHARD: 2})[SHARD].seq == 2 and counting.queries == []
    assert reader.get_heads([SHARD], reaching={SHARD: 3})[SHARD].seq == 3 and len(counting.queries) == 1

    # When the next writers commit (one stops after its rows, before the head)
    before_head = _delta("r2", 4, done=False)
    _push(_deps(StopsBeforeTheHead(client, names), client, names), before_head)
    last = _delta("r3", 5, title="c")
    result = _push(deps, last)

    # Then the head went over every chunk, rows and all, and the last push landed after them
    assert [e.seq for e in result.entries] == [5]
    assert _stored_head(client, names) == (5, 5)
    rows = store.get_rows(GW, [("todos", "r1"), ("todos", "r2"), ("todos", "r3")])
    assert rows[("todos", "r1")].state == fold([first[0], after_put]) and rows[("todos", "r1")].version == 3
    assert rows[("todos", "r2")].state == fold([first[1], before_head]) and rows[("todos", "r2")].version == 4
    assert [e.seq for e in store.read_log(SHARD, 0, 100)] == [1, 2, 3, 4, 5]
    head = store.get_heads([SHARD])[SHARD]
    assert (head.seq, head.deltas_total) == (5, 5)
    assert head.bytes_total == sum(e.size for e in store.read_log(SHARD, 0, 100))
    # And a re-send of the stopped writers' deltas is known: duplicates, nothing logged
    repeat = _push(deps, after_put, before_head)
    assert [r.duplicate for r in repeat.receipts] == [True, True] and repeat.entries == ()


def test_the_flush_settles_a_head_a_stopped_writer_left_behind_on_a_quiet_shard(
    dynamodb_client: Any, dynamodb_tables: Any
) -> None:
    # Given a push, then one whose writer stopped after its put, and no commit after it (a quiet shard)
    client, names = dynamodb_client, dynamodb_tables
    deps = _deps(DynamoDBBufferStore(client, names), client, names)
    first = [_delta("r1", 1, title="a"), _delta("r2", 2, title="b")]
    _push(deps, *first)
    stopped = [_delta("r1", 3, done=True), _delta("r3", 4, title="c")]
    _push(_deps(StopsAfterThePut(client, names), client, names), *stopped)
    assert _stored_head(client, names) == (2, 2)

    # Then the lake's reader sees past the stored head too
    lake_reader = FlushStore(client, names)
    _, heads = lake_reader.shards([GW])
    assert (heads[SHARD].seq, heads[SHARD].deltas_total) == (4, 4)
    assert _stored_head(client, names) == (2, 2)  # a plain read writes nothing

    # When the flush reads the heads it works from within a minute of the commit (its writer may be alive), nothing
    # moves; once the chunk is older than that, the flush's read settles the head over it
    assert lake_reader.shards([GW], settle_before_ms=NOW_MS - STOPPED_WRITER_MS)[1] == heads
    assert _stored_head(client, names) == (2, 2)
    _, settled = lake_reader.shards([GW], settle_before_ms=NOW_MS + 1)

    # Then the stored head is over the chunk, with its totals, and its rows are still pending (`ra` where it was)
    log = DynamoDBBufferStore(client, names).read_log(SHARD, 0, 100)
    assert [e.seq for e in log] == [1, 2, 3, 4]
    assert _stored_head(client, names) == (4, 2)
    stored = DynamoDBBufferStore(client, names).get_heads([SHARD])[SHARD]
    assert stored == settled[SHARD]
    assert (stored.deltas_total, stored.bytes_total, stored.last_commit_hlc) == (
        4,
        sum(e.size for e in log),
        log[-1].commit_hlc,
    )
    # And settling again changes nothing
    assert lake_reader.shards([GW], settle_before_ms=NOW_MS + 1)[1] == settled
    assert _stored_head(client, names) == (4, 2)

    # And the next commit lands after the chunk, writes the pending rows and brings `ra` up with the head
    last = _delta("r2", 5, done=False)
    result = _push(deps, last)
    assert [e.seq for e in result.entries] == [5]
    assert _stored_head(client, names) == (5, 5)
    rows = deps.buffer.get_rows(GW, [("todos", "r1"), ("todos", "r2"), ("todos", "r3")])
    assert rows[("todos", "r1")].state == fold([first[0], stopped[0]])
    assert rows[("todos", "r2")].state == fold([first[1], last])
    assert rows[("todos", "r3")].state == fold([stopped[1]])


def test_writers_pushing_to_one_shard_at_once_keep_one_chain(dynamodb_client: Any, dynamodb_tables: Any) -> None:
    # Given a shard with a log, then four writers pushing to it at once
    client, names = dynamodb_client, dynamodb_tables
    settings = GatewaySettings(commit_attempts=200, chunk_deltas=3)
    first = GatewayDeps(
        DynamoDBBufferStore(client, names), DynamoDBConfigStore(client, names),
        DynamoDBActionStore(client, names), settings, HLC(lambda: NOW_MS),
    )  # fmt: skip
    _push(first, *[_delta(f"r{i}", i, v=i) for i in range(5)])
    errors: list[BaseException] = []
    pushed: Counter[str] = Counter()
    lock = threading.Lock()

    def writer(tag: str) -> None:
        buffer = DynamoDBBufferStore(client, names)
        deps = GatewayDeps(
            buffer, DynamoDBConfigStore(client, names), DynamoDBActionStore(client, names), settings,
            HLC(lambda: NOW_MS),
        )  # fmt: skip
        try:
            for i in range(12):
                deltas = [_delta(f"r{(i + j) % 7}", 100 + i, **{tag: i * 10 + j}) for j in range(1 + i % 4)]
                result = _push(deps, *deltas)
                with lock:
                    pushed[tag] += len(result.entries)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors

    # Then the log is one chain, 1..n, every entry once, and the head is at its end
    store = DynamoDBBufferStore(client, names)
    log = store.read_log(SHARD, 0, 10_000)
    total = 5 + sum(pushed.values())
    assert [e.seq for e in log] == list(range(1, total + 1))
    assert len({e.wire_json for e in log}) == total
    commit_hlcs = [e.commit_hlc for e in log]
    assert commit_hlcs == sorted(set(commit_hlcs))
    head = store.get_heads([SHARD])[SHARD]
    assert (head.seq, head.deltas_total) == (total, total)
    # And every log item is keyed by its chunk's first sequence: the first push's chunks of 3 at 1 and 4
    starts = sorted(k - FIRST_KEYED for k in _keys(client, names))
    assert starts[:2] == [1, 4] and len(set(starts)) == len(starts) and starts[-1] <= total


def test_a_push_of_ten_writes_the_log_item_the_rows_and_the_head_without_a_transaction(
    dynamodb_client: Any, dynamodb_tables: Any
) -> None:
    # Given a shard with a head
    client, names = dynamodb_client, dynamodb_tables
    calls: list[str] = []

    class Recording:
        def __getattr__(self, name: str) -> Any:
            method = getattr(client, name)
            if name in {"put_item", "update_item", "transact_write_items", "batch_write_item"}:

                def record(**kwargs: Any) -> Any:
                    calls.append(f"{name}:{kwargs.get('TableName', '')}")
                    return method(**kwargs)

                return record
            return method

    store = DynamoDBBufferStore(Recording(), names)  # type: ignore[arg-type]
    deps = _deps(store, client, names)
    _push(deps, _delta("r0", 1, v=0))
    calls.clear()

    # When ten rows are pushed
    _push(deps, *[_delta(f"r{i}", 2 + i, v=i) for i in range(10)])

    # Then the writes are one put of the log item, a put per row and one head update: no transaction
    assert sorted(calls) == sorted(
        [f"put_item:{names.deltas}", *[f"put_item:{names.rows}"] * 10, f"update_item:{names.heads}"]
    )
