"""The proof of DESIGN §3.3 on the moto server with the DynamoDB stores: concurrent pushes to overlapping rows commit
atomically under optimistic concurrency, and cursor pulls running meanwhile lose and repeat nothing.

Eight writer threads push overlapping rows of a small key space (frequent conflicts, equal HLCs, DELETEs, duplicate
deltas within and across pushes, re-pushed batches) while four puller threads follow cursors, then drain. Each thread
has its own GatewayDeps (as each Lambda would) over one shared, thread-safe boto3 client.

moto's own threaded server does not isolate concurrent requests (a failed TransactWriteItems restores a snapshot of
whole tables, wiping other requests' writes); lakesync.local.moto.MotoServer, which the session fixture uses, runs one
request at a time, giving the per-request isolation DynamoDB guarantees and the design relies on.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from lakesync.aws.buffer.row_doubts import DOUBT_RUN_ENTRIES
from lakesync.core.delta import RowDelta, make_delta
from lakesync.core.hlc import HLC, encode, system_clock
from lakesync.core.log import LOG_CHUNK_MAX_ENTRIES, Commit, CommitConflict, LogEntry, dedup_key, recent_key
from lakesync.core.merge import RowState, fold, merge
from lakesync.core.messages import SyncPush
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.pull import pull
from lakesync.gateway.push import PushResult, push

pytestmark = pytest.mark.integration

GW = "default"
WRITERS = 8
PULLERS = 4
PUSHES_PER_WRITER = 20
ROWS = {"todos": [f"t{i}" for i in range(5)], "notes": [f"n{i}" for i in range(3)]}
COLUMNS = ["a", "b", "c", "d"]
CLIENTS = ["alice", "bob", "carol", "dave", "ève"]


@dataclass(frozen=True)
class Shape:
    """What the writers push and the pullers ask for."""

    rows: dict[str, list[str]]
    batch: tuple[int, int]
    pushes_per_writer: int
    chunk_deltas: int
    pull_limit: tuple[int, int]


SMALL = Shape(ROWS, (1, 4), PUSHES_PER_WRITER, 4, (1, 40))
"""Pushes of a few deltas to a key space of 8 rows, in chunks of 4: conflicts on almost every commit."""
LARGE = Shape(
    {"todos": [f"t{i}" for i in range(300)], "notes": [f"n{i}" for i in range(150)]},
    (200, 500),
    5,
    LOG_CHUNK_MAX_ENTRIES,
    (1, 600),
)
"""Pushes of up to 500 deltas in chunks as large as an item holds: runs of a taken-over chunk split at 100 entries."""


@pytest.fixture
def shared_client(moto_endpoint: str, dynamodb_tables: Any) -> Any:
    """One boto3 client for every thread, with a connection pool large enough for all of them."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "dynamodb",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(max_pool_connections=WRITERS + PULLERS + 4, retries={"max_attempts": 3, "mode": "standard"}),
    )


CONFLICTS = Counter[str]()


class LateBatches:
    """Writers that stop as they send a chunk's rows (the push is committed; its rows and head never come from
    them), their batches landing late, at random, from another thread: while other writers take their turns over."""

    def __init__(self, client: Any, rows_table: str, every: float) -> None:
        self.client, self.rows_table, self.every = client, rows_table, every
        self.rnd = random.Random(7)
        self.held: list[tuple[float, list[dict[str, Any]]]] = []
        self.holds = 0
        self.landed = 0
        self.lock = threading.Lock()
        self.done = threading.Event()

    def hold(self, items: list[dict[str, Any]]) -> bool:
        """Whether this batch is held back (its writer stops)."""
        with self.lock:
            if self.rnd.random() >= self.every:
                return False
            self.held.append((time.monotonic() + self.rnd.uniform(0.05, 1.5), items))
            self.holds += 1
            return True

    def land(self) -> None:
        """Send each held batch once its time comes, until every writer is done and nothing is held."""
        while True:
            with self.lock:
                # One reading of the clock for both sides: read twice, a batch falling due in between would be in
                # neither and never land
                now = time.monotonic()
                due = [h for h in self.held if h[0] <= now]
                self.held = [h for h in self.held if h[0] > now]
                idle = not self.held
            for _, items in due:
                requests = [{"PutRequest": {"Item": item}} for item in items]
                self.client.batch_write_item(RequestItems={self.rows_table: requests})
                self.landed += 1
            if idle and self.done.is_set():
                return
            time.sleep(0.01)


def _deps(client: Any, names: Any, late: LateBatches | None = None, shape: Shape = SMALL) -> GatewayDeps:
    from lakesync.aws.action_store import DynamoDBActionStore
    from lakesync.aws.buffer.store import DynamoDBBufferStore
    from lakesync.aws.config_store import DynamoDBConfigStore
    from lakesync.core.errors import StorageError

    class CountingBufferStore(DynamoDBBufferStore):
        def commit(self, commit: Commit) -> None:
            try:
                super().commit(commit)
            except CommitConflict as exc:
                CONFLICTS[type(exc).__name__] += 1
                raise

        def _batch_of_rows(self, items: list[dict[str, Any]], until: int) -> None:
            if late is not None and late.hold(items):
                raise StorageError("the writer stopped as it sent its rows")
            super()._batch_of_rows(items, until)

    return GatewayDeps(
        buffer=CountingBufferStore(client, names, turn_wait_s=0.1 if late else 2.0),
        config=DynamoDBConfigStore(client, names),
        actions=DynamoDBActionStore(client, names),
        settings=GatewaySettings(chunk_deltas=shape.chunk_deltas, sub_shards={"todos": 2}, commit_attempts=400),
        clock=HLC(),
    )


def _random_delta(rnd: random.Random, base_ms: int, tag: str, rows: dict[str, list[str]] = ROWS) -> RowDelta:
    table = rnd.choice(list(rows))
    row = rnd.choice(rows[table])
    client = rnd.choice(CLIENTS)
    # A narrow HLC range: equal versions (ties by clientId, then by value) happen often
    stamp = encode(base_ms + rnd.randrange(40), rnd.randrange(2))
    if rnd.random() < 0.12:
        return make_delta("DELETE", table=table, row_id=row, client_id=client, hlc=stamp)
    columns = {
        c: f"{tag}:{c}" if rnd.random() < 0.8 else rnd.randrange(3) for c in rnd.sample(COLUMNS, rnd.randint(1, 3))
    }
    return make_delta(
        rnd.choice(["INSERT", "UPDATE"]), table=table, row_id=row, client_id=client, hlc=stamp, columns=columns
    )


class Run:
    """Shared bookkeeping of the threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pool: list[RowDelta] = []
        self.pushed: list[tuple[tuple[RowDelta, ...], PushResult]] = []
        self.errors: list[BaseException] = []
        self.writers_done = threading.Event()

    def guard(self, fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # reported by the main thread
                with self.lock:
                    self.errors.append(exc)

        return run


def _writer(run: Run, deps: GatewayDeps, seed: int, base_ms: int, shape: Shape = SMALL) -> None:
    rnd = random.Random(seed)
    mine: list[tuple[RowDelta, ...]] = []
    for i in range(shape.pushes_per_writer):
        if mine and rnd.random() < 0.15:
            batch = rnd.choice(mine)  # a client retrying a push whose answer it lost
        else:
            batch_list = [
                _random_delta(rnd, base_ms, f"w{seed}.{i}.{j}", shape.rows) for j in range(rnd.randint(*shape.batch))
            ]
            with run.lock:
                if run.pool and rnd.random() < 0.3:
                    batch_list.append(rnd.choice(run.pool))  # another writer's delta, possibly in flight
            if rnd.random() < 0.1:
                batch_list.append(batch_list[0])  # a duplicate within the batch
            batch = tuple(batch_list)
            mine.append(batch)
        result = push(deps, GW, SyncPush(f"writer-{seed}", batch), client_id=f"writer-{seed}", trusted=True)
        with run.lock:
            run.pushed.append((batch, result))
            run.pool.extend(batch)


def _puller(
    run: Run, deps_of_pull: Callable[[], GatewayDeps], seed: int, received: list[RowDelta], shape: Shape = SMALL
) -> None:
    rnd = random.Random(1000 + seed)
    cursor: str | None = None
    while True:
        finished = run.writers_done.is_set()
        page = pull(deps_of_pull(), GW, limit=rnd.randint(*shape.pull_limit), claims={}, cursor=cursor)
        received.extend(page.deltas)
        cursor = page.cursor
        if finished and not page.has_more:
            return
        if not page.has_more:
            time.sleep(0.05)


def _log(deps: GatewayDeps) -> dict[Any, list[LogEntry]]:
    return {s: deps.buffer.read_log(s, 0, 100_000) for s in deps.buffer.list_shards(GW)}


def _run_threads(
    shared_client: Any, dynamodb_tables: Any, new_readers: bool, late: LateBatches | None, shape: Shape
) -> tuple[Run, list[list[RowDelta]]]:
    """Runs the writers and pullers (and the lander of late batches) to the end: the pullers drain after the writers
    finish and every late batch has landed; returns the run and what each puller received."""

    def deps_of_pull() -> Callable[[], GatewayDeps]:
        if new_readers:
            return lambda: _deps(shared_client, dynamodb_tables)
        deps = _deps(shared_client, dynamodb_tables)
        return lambda: deps

    run = Run()
    base_ms = system_clock() - 3000
    received: list[list[RowDelta]] = [[] for _ in range(PULLERS)]
    lander = threading.Thread(target=run.guard(late.land)) if late is not None else None
    writers = [
        threading.Thread(
            target=run.guard(
                lambda i=i: _writer(run, _deps(shared_client, dynamodb_tables, late, shape), i, base_ms, shape)
            )
        )
        for i in range(WRITERS)
    ]
    pullers = [
        threading.Thread(target=run.guard(lambda i=i: _puller(run, deps_of_pull(), i, received[i], shape)))
        for i in range(PULLERS)
    ]
    for thread in pullers + writers + ([lander] if lander is not None else []):
        thread.start()
    for thread in writers:
        thread.join(120)
    run.writers_done.set()
    if late is not None and lander is not None:
        late.done.set()
        lander.join(60)
        assert not lander.is_alive() and late.landed == late.holds, "a held batch has not landed"
    for thread in pullers:
        thread.join(120)
    assert not run.errors, run.errors
    assert not any(t.is_alive() for t in writers + pullers)
    return run, received


def _assert_every_push_acknowledged_its_delta_ids_in_order(run: Run, shape: Shape) -> None:
    assert len(run.pushed) == WRITERS * shape.pushes_per_writer
    for batch, result in run.pushed:
        assert result.accepted == len(batch)
        assert [r.delta_id for r in result.receipts] == [d.delta_id for d in batch]


def _assert_every_delta_id_remembered(
    deps: GatewayDeps, pushed: dict[str, RowDelta], rows: dict[tuple[str, str], Any], entries: list[LogEntry]
) -> None:
    """By a dedup record or by its row (which keeps its last deltas' keys), or a re-send of it would change nothing."""
    keys = {dedup_key(d.client_id, d.delta_id): d for d in pushed.values()}
    recorded = deps.buffer.seen_delta_ids(GW, list(keys), system_clock() // 1000)
    for key, delta in keys.items():
        row = rows.get((delta.table, delta.row_id))
        kept = row is not None and recent_key(key) in row.recent
        harmless = row is not None and not merge(row.state, delta).changed
        if not (key in recorded or kept or harmless):
            logged = [(e.shard.key, e.seq) for e in entries if e.delta.delta_id == delta.delta_id]
            row_log = [e.seq for e in entries if (e.delta.table, e.delta.row_id) == (delta.table, delta.row_id)]
            stored = row.version if row is not None else None
            raise AssertionError(
                f"{delta.delta_id} of {delta.table}:{delta.row_id} is not remembered: logged at {logged}, the row"
                f" stored at {stored}, its log entries at {sorted(row_log)}"
            )


def _assert_row_index_is_the_fold_of_the_log(entries: list[LogEntry], rows: dict[tuple[str, str], Any]) -> None:
    by_row: dict[tuple[str, str], list[RowDelta]] = {}
    for e in sorted(entries, key=lambda e: (e.shard.key, e.seq)):
        by_row.setdefault((e.delta.table, e.delta.row_id), []).append(e.delta)
    for key, deltas in by_row.items():
        assert rows[key].state == fold(deltas), key


def _assert_logs_gapless_in_hlc_order_matching_heads(deps: GatewayDeps, log: dict[Any, list[LogEntry]]) -> None:
    heads = deps.buffer.get_heads(list(log))
    for shard, shard_log in log.items():
        assert [e.seq for e in shard_log] == list(range(1, len(shard_log) + 1))
        assert [e.commit_hlc for e in shard_log] == sorted(e.commit_hlc for e in shard_log)
        assert heads[shard].seq == len(shard_log)


def _assert_every_delta_id_applied_at_most_once(entries: list[LogEntry], pushed: dict[str, RowDelta]) -> None:
    assert len({e.delta.delta_id for e in entries}) == len(entries)
    assert {e.delta.delta_id for e in entries} <= set(pushed)


def _assert_every_puller_received_every_entry_once(received: list[list[RowDelta]], entries: list[LogEntry]) -> None:
    position = {e.delta.delta_id: (e.shard, e.seq) for e in entries}
    for got in received:
        assert {d.delta_id for d in got} <= set(position), "a delivered delta is not in the log"
        by_position = Counter(position[d.delta_id] for d in got)
        assert set(by_position.values()) == {1}, "a (shard, seq) was delivered twice"
        assert set(by_position) == set(position.values()), "a committed entry was never delivered"
        assert sorted(got, key=lambda d: position[d.delta_id]) == sorted(
            (e.delta for e in entries), key=lambda d: position[d.delta_id]
        )


def _assert_rows_are_the_fold_of_accepted_deltas(
    deps: GatewayDeps, pushed: dict[str, RowDelta], shape: Shape
) -> dict[tuple[str, str], RowState]:
    """Returns the expected rows (the sequential LWW fold, row by row)."""
    keys = [(t, r) for t, rows in shape.rows.items() for r in rows]
    stored = deps.buffer.get_rows(GW, keys)
    expected: dict[tuple[str, str], RowState] = {}
    for key in keys:
        state = fold(d for d in pushed.values() if (d.table, d.row_id) == key)
        if state is not None:
            expected[key] = state
    assert {k: v.state for k, v in stored.items()} == expected
    return expected


def _assert_every_replica_holds_the_servers_rows(
    received: list[list[RowDelta]], expected: dict[tuple[str, str], RowState]
) -> None:
    for got in received:
        replica: dict[tuple[str, str], RowState | None] = {}
        for delta in got:
            key = (delta.table, delta.row_id)
            replica[key] = merge(replica.get(key), delta).state
        assert {k: v.values() for k, v in replica.items() if v is not None} == {
            k: v.values() for k, v in expected.items()
        }


def _assert_run_exercised_what_it_proves(
    shared_client: Any,
    dynamodb_tables: Any,
    run: Run,
    log: dict[Any, list[LogEntry]],
    late: LateBatches | None,
    shape: Shape,
) -> None:
    """Optimistic-commit conflicts, sub-shards and duplicate acknowledgements (and, with stopping writers, batches
    that landed after their chunks were taken over)."""
    assert CONFLICTS["CommitConflict"] > 0
    if late is not None:
        assert late.landed > 0
        declared = shared_client.query(
            TableName=dynamodb_tables.config,
            KeyConditionExpression="gw = :gw AND begins_with(sk, :p)",
            ExpressionAttributeValues={":gw": {"S": GW}, ":p": {"S": "#doubt#"}},
            ConsistentRead=True,
        )["Items"]
        assert declared, "no writer took a stopped writer's turn over"
    if shape is LARGE:
        chunks = shared_client.scan(TableName=dynamodb_tables.deltas, ProjectionExpression="n")["Items"]
        assert max(int(item["n"]["N"]) for item in chunks) > DOUBT_RUN_ENTRIES, "no chunk longer than an in-doubt run"
    assert sorted({(s.table, s.sub) for s in log}) == [("notes", 0), ("todos", 0), ("todos", 1)]
    assert sum(r.duplicate for _, result in run.pushed for r in result.receipts) > 0


@pytest.mark.parametrize(
    ("new_readers", "stopping", "shape"),
    [
        (False, False, SMALL),
        (True, False, SMALL),
        (False, True, SMALL),
        (False, True, LARGE),
    ],
    ids=["commit-by-put", "new-readers", "writers-stop-batches-land-late", "large-chunks-writers-stop"],
)
def test_concurrency_pushes_commit_atomically_and_cursor_pulls_lose_and_repeat_nothing(
    shared_client: Any, dynamodb_tables: Any, new_readers: bool, stopping: bool, shape: Shape
) -> None:
    # Given writer and puller threads, each with its own gateway deps over one boto3 client (the commit by a put, and
    # cursors checked by the chunk after them; with new readers, every pull is served by a process new to the shards,
    # as a pull function scaling out)
    CONFLICTS.clear()
    # (with stopping writers: a tenth of the row batches, a quarter with large chunks, held back, landing late while
    # the others go on)
    late = LateBatches(shared_client, dynamodb_tables.rows, 0.25 if shape is LARGE else 0.1) if stopping else None

    # When they all run, and the pullers drain after the writers finish (and every late batch has landed)
    run, received = _run_threads(shared_client, dynamodb_tables, new_readers, late, shape)
    deps = _deps(shared_client, dynamodb_tables)
    log = _log(deps)
    entries = [e for shard_log in log.values() for e in shard_log]

    # Then every push acknowledged every deltaId it carried, in order
    _assert_every_push_acknowledged_its_delta_ids_in_order(run, shape)
    pushed = {d.delta_id: d for batch, _ in run.pushed for d in batch}
    # And every deltaId is remembered
    rows = deps.buffer.get_rows(GW, list({(d.table, d.row_id) for d in pushed.values()}))
    _assert_every_delta_id_remembered(deps, pushed, rows, entries)
    # And the row index (written after each commit's log item) is the fold of the log, row by row
    _assert_row_index_is_the_fold_of_the_log(entries, rows)
    # And each shard's log is numbered 1..n without gaps, with commit HLCs in sequence order, matching its head
    _assert_logs_gapless_in_hlc_order_matching_heads(deps, log)
    # And every deltaId was applied at most once (never re-logged)
    _assert_every_delta_id_applied_at_most_once(entries, pushed)
    # And every puller received every committed entry exactly once
    _assert_every_puller_received_every_entry_once(received, entries)
    # And the row index equals the sequential LWW fold of all accepted deltas, row by row
    expected = _assert_rows_are_the_fold_of_accepted_deltas(deps, pushed, shape)
    # And every puller, applying what it received, holds exactly the server's rows
    _assert_every_replica_holds_the_servers_rows(received, expected)
    # And the run did exercise what it proves
    _assert_run_exercised_what_it_proves(shared_client, dynamodb_tables, run, log, late, shape)


def test_a_pull_of_more_shards_than_the_pool_has_threads_from_inside_their_chunks_completes(
    shared_client: Any, dynamodb_tables: Any
) -> None:
    # Given 12 shards (more than the I/O pool's 8 threads), each holding one chunk of 10 entries
    from lakesync.gateway.cursor import encode_cursor

    deps = _deps(shared_client, dynamodb_tables)
    deps = GatewayDeps(deps.buffer, deps.config, deps.actions, GatewaySettings(chunk_deltas=10), HLC())
    tables = [f"t{i:02d}" for i in range(12)]
    base_ms = system_clock() - 1000
    for t, table in enumerate(tables):
        batch = [
            make_delta(
                "INSERT", table=table, row_id=f"r{n}", client_id="c1", hlc=encode(base_ms + t, n), columns={"n": n}
            )
            for n in range(10)
        ]
        push(deps, GW, SyncPush("c1", tuple(batch)), client_id="c1")
    log = _log(deps)
    assert sorted(len(entries) for entries in log.values()) == [10] * 12
    # When a process new to the shards pulls with a cursor standing at entry 5 of every shard: inside its chunk, so
    # each shard's read, on the pool, looks back for the chunk holding it
    cursor = encode_cursor({s.key: 5 for s in log}, {s.key: entries[4].commit_hlc for s, entries in log.items()})
    reader = _deps(shared_client, dynamodb_tables)
    done: list[Any] = []
    puller = threading.Thread(
        target=lambda: done.append(pull(reader, GW, limit=1000, claims={}, cursor=cursor)), daemon=True
    )
    puller.start()
    puller.join(60)
    # Then the pull completes with the 5 entries after the position of every shard
    assert done, "the pull did not complete"
    (page,) = done
    assert sorted((d.table, d.row_id) for d in page.deltas) == sorted(
        (t, f"r{n}") for t in tables for n in range(5, 10)
    )
