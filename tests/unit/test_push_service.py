"""The push service (lakesync.gateway.push) on the in-memory adapters: receipts, true per-column LWW end to end,
idempotency, whole-batch validation with nothing written, backpressure and flush requests, chunked and sub-sharded
commits, and optimistic-commit retries (forced and real conflicts)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from lakesync.core.canonical import JsonValue
from lakesync.core.delta import DeltaOp, RowDelta, make_delta
from lakesync.core.errors import (
    BackpressureError,
    ClockDriftError,
    CommitConflictError,
    ForbiddenError,
    PayloadTooLargeError,
    SchemaError,
    StorageError,
    ValidationError,
)
from lakesync.core.hlc import HLC, MAX_DRIFT_MS, encode
from lakesync.core.log import (
    LOG_CHUNK_MAX_ENTRIES,
    ROW_RECENT_KEYS,
    Commit,
    CommitConflict,
    LogEntry,
    ShardId,
    dedup_key,
)
from lakesync.core.merge import fold
from lakesync.core.messages import SyncPush
from lakesync.core.schema import parse_table_schema
from lakesync.core.since import SinceSession
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.memory import InMemoryActionStore, InMemoryBufferStore, InMemoryConfigStore, InMemorySinceSessions
from lakesync.gateway.pull import pull
from lakesync.gateway.push import PushResult, push

GW = "default"
T0 = 1_700_000_000_000


def _recorded(env: Env, deltas: Any, now_s: int) -> set[str]:
    """The deltaIds of ``deltas`` whose dedup records (by clientId and deltaId) are live."""
    keys = {dedup_key(x.client_id, x.delta_id): x.delta_id for x in deltas}
    return {keys[k] for k in env.buffer.seen_delta_ids(GW, list(keys), now_s)}


class Env:
    """A gateway on in-memory stores with a controllable wall clock."""

    def __init__(self, buffer: Any = None, **settings: Any) -> None:
        self.wall = T0
        self.buffer = buffer if buffer is not None else InMemoryBufferStore()
        self.config = InMemoryConfigStore()
        self.sleeps: list[float] = []
        self.deps = GatewayDeps(
            buffer=self.buffer,
            config=self.config,
            actions=InMemoryActionStore(),
            settings=GatewaySettings(**settings),
            clock=HLC(lambda: self.wall),
            wall_ms=lambda: self.wall,
            sleep=self.sleeps.append,
        )

    def push(self, *deltas: RowDelta, client: str | None = None, trusted: bool = False) -> PushResult:
        client_id = client if client is not None else (deltas[0].client_id if deltas else "c1")
        return push(self.deps, GW, SyncPush(client_id, tuple(deltas)), client_id=client_id, trusted=trusted)

    def log(self) -> list[LogEntry]:
        return [e for s in self.buffer.list_shards(GW) for e in self.buffer.read_log(s, 0, 1_000_000)]

    def row(self, table: str, row_id: str) -> dict[str, JsonValue] | None:
        stored = self.buffer.get_rows(GW, [(table, row_id)]).get((table, row_id))
        return None if stored is None else stored.state.values()

    def snapshot(self) -> tuple[Any, ...]:
        shards = self.buffer.list_shards(GW)
        return (shards, self.buffer.get_heads(shards), self.log(), self.config.list_flush_requests(GW))


def t(ms: int, counter: int = 0) -> int:
    return encode(T0 + ms, counter)


def d(
    op: str = "UPDATE",
    row: str = "r1",
    client: str = "c1",
    hlc: int | None = None,
    table: str = "todos",
    **columns: JsonValue,
) -> RowDelta:
    return make_delta(
        op, table=table, row_id=row, client_id=client, hlc=hlc if hlc is not None else t(0), columns=columns
    )


class ConflictingBuffer:
    """Wraps a buffer; before each of the first ``times`` commits, runs ``interfere`` (or fails the commit)."""

    def __init__(self, inner: InMemoryBufferStore, times: int, interfere: Callable[[Commit], None] | None) -> None:
        self.inner = inner
        self.times = times
        self.interfere = interfere
        self.commits: list[Commit] = []
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def commit(self, commit: Commit) -> None:
        self.commits.append(commit)
        if self.failed < self.times:
            self.failed += 1
            if self.interfere is None:
                raise CommitConflict()
            self.interfere(commit)
        self.inner.commit(commit)


# -- receipts and merge ------------------------------------------------------------------------------------------


def test_push_receipts_name_applied_columns_and_the_winner_of_lost_ones() -> None:
    # Given a row whose title was written at t(10) by c1
    env = Env()
    env.push(d("INSERT", client="c1", hlc=t(10), title="new", done=False))

    # When c2 pushes an older title and a fresh priority
    result = env.push(d(client="c2", hlc=t(5), title="old", priority=3))

    # Then the title lost to (t(10), c1) and the priority was applied at c2's own version
    (receipt,) = result.receipts
    by_col = {c.column: c for c in receipt.columns}
    assert not by_col["title"].applied
    assert (by_col["title"].winner_hlc, by_col["title"].winner_client_id) == (t(10), "c1")
    assert by_col["priority"].applied
    assert (by_col["priority"].winner_hlc, by_col["priority"].winner_client_id) == (t(5), "c2")
    assert not receipt.duplicate
    # And the effective delta carries only the winning column, in the result and in the log
    assert [c.column for c in result.deltas[0].columns] == ["priority"]
    assert [c.column for c in env.log()[-1].delta.columns] == ["priority"]
    assert env.row("todos", "r1") == {"title": "new", "done": False, "priority": 3}


def test_push_receipt_json_shape_carries_hlcs_as_decimal_strings() -> None:
    env = Env()
    result = env.push(d("INSERT", hlc=t(1, 7), title="x"))
    body = result.to_json()
    assert body["accepted"] == 1
    assert body["serverHlc"] == str(result.server_hlc)
    assert body["receipts"] == [
        {
            "deltaId": result.receipts[0].delta_id,
            "duplicate": False,
            "columns": [{"column": "title", "applied": True, "winnerHlc": str(t(1, 7)), "winnerClientId": "c1"}],
        }
    ]


def test_push_equal_hlc_tie_goes_to_the_greater_client_id_in_either_order() -> None:
    for first, second in (("alice", "bob"), ("bob", "alice")):
        env = Env()
        env.push(d(client=first, hlc=t(3), title=first))
        result = env.push(d(client=second, hlc=t(3), title=second))
        assert env.row("todos", "r1") == {"title": "bob"}
        assert result.receipts[0].columns[0].applied is (second == "bob")
        assert result.receipts[0].columns[0].winner_client_id == "bob"


def test_push_fixes_the_pairwise_lww_defect_end_to_end() -> None:
    # Given {title, done} at t1, then a newer title alone at t3 (the original would stamp the row with t3)
    env = Env()
    env.push(d("INSERT", client="a", hlc=t(1), title="draft", done=False))
    env.push(d(client="b", hlc=t(3), title="final"))

    # When a done=true written at t2 (newer than the stored done@t1, older than title@t3) arrives last
    late = d(client="c", hlc=t(2), done=True)
    result = env.push(late)

    # Then it wins its column: per-column LWW, not delta-vs-delta
    assert result.receipts[0].columns[0].applied
    assert env.row("todos", "r1") == {"title": "final", "done": True}
    assert env.log()[-1].delta == late
    assert env.log()[-1].before == {"title": "final", "done": False}
    assert env.log()[-1].after == {"title": "final", "done": True}


def test_push_delete_is_reported_and_removes_older_columns_only() -> None:
    env = Env()
    env.push(d("INSERT", client="a", hlc=t(1), title="x", done=False))
    env.push(d(client="b", hlc=t(5), done=True))

    result = env.push(d("DELETE", client="c", hlc=t(3)))

    assert result.receipts[0].deleted
    assert result.receipts[0].columns == ()
    # A DELETE at t3 drops title@t1 but not done@t5, and the row lives on with what is newer than the delete
    assert env.row("todos", "r1") == {"done": True}
    entry = env.log()[-1]
    assert entry.delta.op is DeltaOp.DELETE and entry.delta.columns == ()
    assert entry.before == {"title": "x", "done": True}
    assert entry.after == {"done": True}


def test_push_stale_delete_is_not_reported_as_deleted_and_not_logged() -> None:
    env = Env()
    env.push(d("DELETE", client="a", hlc=t(5)))
    log_before = env.log()
    result = env.push(d("DELETE", client="b", hlc=t(4)))
    assert not result.receipts[0].deleted
    assert env.log() == log_before


def test_push_server_hlc_orders_after_every_pushed_hlc() -> None:
    env = Env()
    ahead = t(MAX_DRIFT_MS, 9)
    result = env.push(d(hlc=ahead, title="x"))
    assert result.server_hlc > ahead


def test_push_final_rows_equal_the_sequential_lww_fold_in_any_arrival_order() -> None:
    # Given a shuffled history of writes and deletes to a few rows by several clients
    import random

    rnd = random.Random(7)
    history = []
    for i in range(120):
        row = f"r{rnd.randrange(4)}"
        client = f"c{rnd.randrange(3)}"
        hlc = t(rnd.randrange(50), rnd.randrange(3))
        if rnd.random() < 0.15:
            history.append(d("DELETE", row=row, client=client, hlc=hlc))
        else:
            cols = {f"k{j}": f"{i}-{j}" for j in rnd.sample(range(4), rnd.randrange(1, 4))}
            history.append(d("UPDATE", row=row, client=client, hlc=hlc, **cols))

    # When they are pushed in batches of varying sizes, by their own clients (trusted to mix clients per batch)
    env = Env(chunk_deltas=4)
    i = 0
    while i < len(history):
        n = rnd.randrange(1, 9)
        env.push(*history[i : i + n], client="admin", trusted=True)
        i += n

    # Then every row equals the fold of its deltas
    for row in {h.row_id for h in history}:
        expected = fold(h for h in history if h.row_id == row)
        assert expected is not None
        stored = env.buffer.get_rows(GW, [("todos", row)])[("todos", row)]
        assert stored.state == expected


# -- idempotency -------------------------------------------------------------------------------------------------


def test_push_duplicate_within_a_batch_is_acknowledged_and_logged_once() -> None:
    env = Env()
    delta = d("INSERT", title="x")

    result = env.push(delta, delta)

    assert result.accepted == 2
    assert [r.duplicate for r in result.receipts] == [False, True]
    assert [r.delta_id for r in result.receipts] == [delta.delta_id, delta.delta_id]
    assert len(env.log()) == 1


def test_push_repeated_push_is_acknowledged_and_writes_nothing() -> None:
    env = Env()
    batch = (d("INSERT", row="r1", title="x"), d("INSERT", row="r2", title="y"))
    env.push(*batch)
    before = env.snapshot()

    result = env.push(*batch)

    assert result.accepted == 2
    assert all(r.duplicate and r.columns == () for r in result.receipts)
    assert result.deltas == ()
    assert env.snapshot() == before


def test_push_partly_repeated_push_applies_only_the_new_deltas() -> None:
    env = Env()
    old = d("INSERT", row="r1", title="x")
    env.push(old)
    new = d("INSERT", row="r2", title="y")

    result = env.push(old, new)

    assert [r.duplicate for r in result.receipts] == [True, False]
    assert [e.delta.delta_id for e in env.log()] == [old.delta_id, new.delta_id]


def test_push_racing_itself_logs_each_delta_once() -> None:
    # Given a push whose first commit attempt loses to a copy of the same push that commits first (a client retry
    # arriving while the original is still in flight)
    deltas = [d("INSERT", row=f"r{i}", title=str(i)) for i in range(3)]
    env = Env()
    racer = Env(buffer=env.buffer)
    buffer = ConflictingBuffer(env.buffer, times=1, interfere=lambda _commit: racer.push(*deltas))
    env.deps = replace(env.deps, buffer=buffer)

    # When the original push retries after the conflict
    result = env.push(*deltas)

    # Then every delta is logged exactly once, and the retry acknowledged them as duplicates
    assert sorted(e.delta.delta_id for e in env.log()) == sorted(x.delta_id for x in deltas)
    assert [r.duplicate for r in result.receipts] == [True, True, True]
    assert result.deltas == ()


def test_push_resent_after_its_row_forgot_it_changes_and_logs_nothing() -> None:
    # Given a delta committed, then ROW_RECENT_KEYS later deltas to other columns of its row, so the row no longer
    # keeps the first delta's key (and the delta's own column still holds its value)
    env = Env()
    delta = d("INSERT", title="x")
    first = env.push(delta)
    for i in range(ROW_RECENT_KEYS):
        env.push(d(hlc=t(i + 1), **{f"c{i}": i}))
    env.buffer.expire_dedup(10**12)
    before = env.snapshot()

    # When the client re-sends it
    result = env.push(delta)

    # Then nothing is written (the row already holds it) and the receipt is the first push's: its column won
    assert env.snapshot() == before
    assert result.deltas == ()
    assert result.receipts == first.receipts
    assert all(c.applied and c.winner_hlc == delta.hlc for c in result.receipts[0].columns)
    # And the deltaId is recorded now (a dedup record: its row was not written), so a third copy is a duplicate
    assert env.push(delta).receipts[0].duplicate


class SlowRecordingBuffer:
    """Wraps a buffer; recording deltaIds takes a while, and the recording of chunk ``fail_chunk`` (0-based) fails."""

    def __init__(self, inner: InMemoryBufferStore, fail_chunk: int | None = None) -> None:
        self.inner = inner
        self.fail_chunk = fail_chunk
        self.recorded: list[list[str]] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def record_delta_ids(self, gateway: str, delta_ids: Any, expires_at: int) -> None:
        with self._lock:
            chunk = len(self.recorded)
            self.recorded.append(list(delta_ids))
        time.sleep(0.05)
        if chunk == self.fail_chunk:
            raise StorageError("DynamoDB BatchWriteItem failed: InternalServerError")
        self.inner.record_delta_ids(gateway, delta_ids, expires_at)


def test_push_returns_only_once_every_chunk_deltaid_is_recorded() -> None:
    # Given ten rows, deltas that lose to them (their rows are not written, so they get dedup records), and
    # records that land a while after each chunk's commit
    env = Env(chunk_deltas=4)
    env.push(*[d("INSERT", row=f"r{i}", hlc=t(100 + i), v=-1) for i in range(10)])
    env.deps = replace(env.deps, buffer=SlowRecordingBuffer(env.buffer))
    deltas = [d("INSERT", row=f"r{i}", hlc=t(i), v=i) for i in range(10)]

    # When a push of three chunks returns
    env.push(*deltas)

    # Then every deltaId is already recorded: a re-send right after is all duplicates
    assert _recorded(env, deltas, T0 // 1000) == {x.delta_id for x in deltas}
    assert [r.duplicate for r in env.push(*deltas).receipts] == [True] * 10


def test_push_whose_deltaid_record_fails_raises_and_a_resend_is_safe() -> None:
    # Given deltas that lose to the rows (so they get dedup records), and the record of the second of three chunks
    # fails
    env = Env(chunk_deltas=4)
    env.push(*[d("INSERT", row=f"r{i}", v=i, hlc=t(100 + i)) for i in range(10)])
    slow = SlowRecordingBuffer(env.buffer, fail_chunk=1)
    env.deps = replace(env.deps, buffer=slow)
    deltas = [d("UPDATE", row=f"r{i}", hlc=t(i), v=-i) for i in range(10)]

    # When the push runs, it fails with the storage error (after the other records finished)
    with pytest.raises(StorageError):
        env.push(*deltas)
    assert len(slow.recorded) == 3
    committed = env.log()
    assert len(committed) == 10

    # And re-sending the same push logs nothing more and leaves every row as it is
    slow.fail_chunk = None
    result = env.push(*deltas)
    assert env.log() == committed
    assert result.deltas == ()
    assert all(env.row("todos", f"r{i}") == {"v": i} for i in range(10))


def test_push_a_delta_its_row_keeps_is_a_duplicate_after_any_time() -> None:
    # Given a delta pushed, then the dedup window passes and every dedup record expires
    env = Env(dedup_ttl_s=60)
    delta = d("INSERT", title="x")
    env.push(delta)
    env.wall += 61_000
    env.buffer.expire_dedup(env.wall // 1000)
    log_before = env.log()

    # When it is pushed again
    result = env.push(delta)

    # Then its row still keeps its key: a duplicate, and nothing is logged
    assert result.receipts[0].duplicate
    assert env.log() == log_before
    assert env.row("todos", "r1") == {"title": "x"}


def test_push_records_a_dedup_key_only_for_deltas_whose_row_is_not_written() -> None:
    # Given a row written by c1, and a push of a delta that changes it and one that loses every column
    env = Env()
    env.push(d("INSERT", title="x", hlc=t(5)))
    env.push(d("INSERT", row="r2", title="b", hlc=t(9)))
    winner, loser = d(hlc=t(6), title="y"), d(row="r2", hlc=t(1), title="old")

    # When both are pushed in one batch
    env.push(winner, loser)

    # Then only the loser (its row unchanged, not written) has a dedup record; the winner is kept by its row
    assert _recorded(env, [winner, loser], env.wall // 1000) == {loser.delta_id}
    assert [r.duplicate for r in env.push(winner, loser).receipts] == [True, True]


# -- validation: the whole batch is rejected and nothing is written ----------------------------------------------


def _todos_schema(env: Env) -> None:
    schema = parse_table_schema({"table": "todos", "columns": [{"name": "title", "type": "string"}]})
    env.config.put_schema(GW, schema, 1, 0)


INVALID_BATCHES: list[tuple[str, Callable[[Env], RowDelta], type[Exception], dict[str, Any]]] = [
    ("invalid_table", lambda env: d(table="bad-name", title="x"), SchemaError, {}),
    ("schema_violation", lambda env: d(title="x", colour="red"), SchemaError, {}),
    ("clock_drift", lambda env: d(hlc=encode(env.wall + MAX_DRIFT_MS + 1, 0), title="x"), ClockDriftError, {}),
    ("client_mismatch", lambda env: d(client="mallory", title="x"), ForbiddenError, {}),
    ("oversized_delta", lambda env: d(title="x" * 200), PayloadTooLargeError, {"max_row_bytes": 150}),
]


@pytest.mark.parametrize(
    ("make_bad", "error", "settings"),
    [case[1:] for case in INVALID_BATCHES],
    ids=[case[0] for case in INVALID_BATCHES],
)
def test_push_invalid_delta_rejects_the_whole_batch_with_nothing_written(
    make_bad: Callable[[Env], RowDelta], error: type[Exception], settings: dict[str, Any]
) -> None:
    # Given a gateway with a schema for todos and one earlier push
    env = Env(**settings)
    _todos_schema(env)
    env.push(d("INSERT", row="r0", title="seed"))
    before = env.snapshot()
    clock_before = env.deps.clock.state

    # When a batch of valid deltas (one far ahead in time) and one invalid delta is pushed
    good = [d("INSERT", row="r1", hlc=t(MAX_DRIFT_MS), title="ok"), d(row="r0", hlc=t(2), title="upd")]
    with pytest.raises(error):
        env.push(*good, make_bad(env), client="c1")

    # Then nothing was written, no deltaId was recorded and the server clock did not move
    assert env.snapshot() == before
    assert _recorded(env, good, env.wall // 1000) == set()
    assert env.deps.clock.state == clock_before


def test_push_too_many_deltas_is_a_validation_error_with_nothing_written() -> None:
    env = Env(max_deltas_per_push=3)
    with pytest.raises(ValidationError, match="max 3"):
        env.push(*(d(row=f"r{i}", title="x") for i in range(4)))
    assert env.snapshot() == ([], {}, [], [])
    env.push(*(d(row=f"r{i}", title="x") for i in range(3)))
    assert len(env.log()) == 3


def test_push_drift_of_exactly_the_maximum_is_accepted() -> None:
    env = Env()
    env.push(d(hlc=encode(T0 + MAX_DRIFT_MS, 0xFFFF), title="x"))
    assert env.row("todos", "r1") == {"title": "x"}


def test_push_trusted_caller_may_push_for_other_clients() -> None:
    env = Env()
    result = env.push(d(client="connector-7", title="x"), client="admin", trusted=True)
    assert not result.receipts[0].duplicate
    assert env.log()[0].delta.client_id == "connector-7"


def test_push_schema_only_constrains_its_own_table() -> None:
    env = Env()
    _todos_schema(env)
    env.push(d(table="notes", body="free"))
    with pytest.raises(SchemaError, match='Unknown column "body"'):
        env.push(d(table="todos", body="free"))
    assert env.row("notes", "r1") == {"body": "free"}


def test_push_schema_allows_delete_and_sparse_updates() -> None:
    env = Env()
    _todos_schema(env)
    env.push(d("INSERT", title="x"), d("DELETE", hlc=t(1)))
    assert env.row("todos", "r1") is None


def test_push_row_growing_past_the_limit_is_refused_with_nothing_written_to_its_shard() -> None:
    # Given a row close to the row size limit
    env = Env(max_row_bytes=100)
    env.push(d(title="a" * 40))
    before = env.snapshot()

    # When a push would make it bigger than the limit
    with pytest.raises(SchemaError, match="limit is 100"):
        env.push(d(hlc=t(1), body="b" * 40))

    # Then nothing changed
    assert env.snapshot() == before


class CountingBuffer:
    """Wraps a buffer and counts its commits and row reads."""

    def __init__(self, inner: InMemoryBufferStore) -> None:
        self.inner = inner
        self.commits: list[Commit] = []
        self.row_reads: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get_rows(self, gateway: str, rows: Any) -> Any:
        self.row_reads.append(len(rows))
        return self.inner.get_rows(gateway, rows)

    def commit(self, commit: Commit) -> None:
        self.commits.append(commit)
        self.inner.commit(commit)


@pytest.mark.parametrize("layout", ["chunks", "sub-shards", "tables"])
def test_push_whose_last_chunk_outgrows_a_row_commits_no_chunk_at_all(layout: str) -> None:
    # Given a push of several chunks (or shards) whose last delta grows an existing row past the limit
    env = Env(max_row_bytes=100, chunk_deltas=4, sub_shards={"todos": 4} if layout == "sub-shards" else {})
    env.push(d(row="big", title="a" * 40))
    before = env.snapshot()
    counting = CountingBuffer(env.buffer)
    env.deps = replace(env.deps, buffer=counting)
    table = (lambda i: "notes" if i % 2 else "todos") if layout == "tables" else (lambda i: "todos")
    harmless = [d(row=f"r{i}", hlc=t(1), table=table(i), v=i) for i in range(10)]

    # When it is pushed
    with pytest.raises(SchemaError, match="Row todos:big would grow to"):
        env.push(*harmless, d(row="big", hlc=t(2), body="b" * 40))

    # Then the growth was found before the first commit (before: the earlier chunks were committed)
    assert counting.commits == []
    assert env.snapshot() == before


def test_push_of_several_chunks_rewriting_a_full_row_is_accepted() -> None:
    # Given a row near the limit, and a push of several chunks rewriting its column again and again (the sum of the
    # pushed columns exceeds the limit, so the growth check merges the row delta by delta to see it never grows)
    env = Env(max_row_bytes=100, chunk_deltas=4)
    env.push(d(row="big", title="a" * 40))
    rewrites = [d(row="big", hlc=t(i), title=str(i) * 40) for i in range(1, 10)]
    # When pushed, Then every chunk commits
    result = env.push(*rewrites, d(row="new", hlc=t(20), body="b" * 60))
    assert [r.duplicate for r in result.receipts] == [False] * 10
    assert env.row("todos", "big") == {"title": "9" * 40} and env.row("todos", "new") == {"body": "b" * 60}


def test_push_of_one_chunk_reads_its_rows_only_with_its_basis() -> None:
    # Given a push that fits one chunk, When pushed, Then no separate row read precedes the chunk's basis read
    env = Env()
    counting = CountingBuffer(env.buffer)
    env.deps = replace(env.deps, buffer=counting)
    env.push(*[d(row=f"r{i}", v=i) for i in range(5)])
    assert counting.row_reads == [] and len(counting.commits) == 1


def test_push_of_several_chunks_reads_the_rows_in_slices_of_100() -> None:
    env = Env(chunk_deltas=48)
    counting = CountingBuffer(env.buffer)
    env.deps = replace(env.deps, buffer=counting)
    env.push(*[d(row=f"r{i}", v=i) for i in range(250)])
    assert sorted(counting.row_reads) == [50, 100, 100]
    assert len(env.log()) == 250


def test_a_push_commits_as_few_chunks_as_log_items_hold() -> None:
    # Given the default settings
    env = Env()
    counting = CountingBuffer(env.buffer)
    env.deps = replace(env.deps, buffer=counting)

    # When 600 small rows are pushed, and then 2,500
    env.push(*[d(op="INSERT", row=f"a{i}", v=i) for i in range(600)])
    small = len(counting.commits)
    env.push(*[d(op="INSERT", row=f"b{i}", v=i) for i in range(2500)])

    # Then the 600 are one commit, and the 2,500 three, each of at most a chunk's most entries
    assert small == 1
    assert [len(c.entries) for c in counting.commits[1:]] == [LOG_CHUNK_MAX_ENTRIES, LOG_CHUNK_MAX_ENTRIES, 500]
    assert len(env.log()) == 3100


def test_a_push_of_large_rows_is_cut_into_chunks_that_fit_a_log_item_before_any_is_planned() -> None:
    # Given a push of 300 new rows of about 2 KB each (about 1.2 MB of log: the wire JSON and the row after it)
    env = Env()
    counting = CountingBuffer(env.buffer)
    bases: list[int] = []
    read_basis = counting.inner.read_commit_basis
    counting.read_commit_basis = lambda shard, rows: bases.append(len(rows)) or read_basis(shard, rows)  # type: ignore[attr-defined]
    env.deps = replace(env.deps, buffer=counting)
    env.push(*[d(op="INSERT", row=f"r{i}", body=f"{i:04d}" + "x" * 2000) for i in range(300)])

    # Then each chunk's basis is read once (none is planned whole and then split), every chunk's entries fit an item
    sizes = [sum(e.size + len(str(e.after)) for e in c.entries) for c in counting.commits]
    assert len(bases) == len(counting.commits) >= 3
    assert all(size < 400_000 for size in sizes), sizes
    assert sum(len(c.entries) for c in counting.commits) == 300


def test_push_row_whose_state_outgrows_an_item_is_refused_before_anything_is_written() -> None:
    # Given 3 deltas x 3,000 small columns: values within the row limit, the state with its versions beyond 400 KB
    env = Env(chunk_deltas=1)
    client = "connector-" + "x" * 90
    deltas = [d(row="wide", client=client, hlc=t(i), **{f"c{i}_{j}": 0 for j in range(3000)}) for i in range(3)]
    # When pushed, Then 422 before the first chunk commits
    with pytest.raises(
        SchemaError, match=r"Row todos:wide would be stored as [\d,]+ bytes \([\d,]+ columns with their"
    ):
        env.push(*deltas, client=client)
    assert env.log() == []


def test_push_same_delta_id_from_two_clients_are_two_deltas() -> None:
    # Given an admin pushing, in one batch, deltas of two clients that carry the same deltaId
    env = Env()
    a = d(row="ra", client="a", title="A")
    b = replace(d(row="rb", client="b", title="B"), delta_id=a.delta_id)
    # When pushed, Then both are applied (dedup is per client), and each is a duplicate only of itself later
    result = env.push(a, b, client="ops", trusted=True)
    assert [r.duplicate for r in result.receipts] == [False, False]
    assert (env.row("todos", "ra"), env.row("todos", "rb")) == ({"title": "A"}, {"title": "B"})
    again = env.push(b, a, client="ops", trusted=True)
    assert [r.duplicate for r in again.receipts] == [True, True]


def test_push_another_clients_recorded_delta_id_does_not_drop_a_delta() -> None:
    # Given client b's delta recorded under the deltaId client a is about to use
    env = Env()
    victim = d(row="ra", client="a", title="A")
    env.push(replace(d(row="rb", client="b", title="B"), delta_id=victim.delta_id))
    # When a pushes, Then its delta is applied
    result = env.push(victim)
    assert result.receipts[0].duplicate is False and env.row("todos", "ra") == {"title": "A"}


def test_push_storage_error_of_a_commit_is_not_retried() -> None:
    # Given a store that refuses the commit for what it holds (not a lost race)
    class RefusingBuffer(CountingBuffer):
        def commit(self, commit: Commit) -> None:
            self.commits.append(commit)
            raise StorageError("DynamoDB cancelled the commit to table 'todos': item 2: ValidationError: too big")

    env = Env()
    refusing = RefusingBuffer(env.buffer)
    env.deps = replace(env.deps, buffer=refusing)
    # When pushed, Then the error surfaces at once: one attempt, no backoff
    with pytest.raises(StorageError, match="ValidationError"):
        env.push(d())
    assert len(refusing.commits) == 1 and env.sleeps == []


# -- backpressure and flush requests -----------------------------------------------------------------------------


def test_push_crossing_the_flush_threshold_records_one_flush_request() -> None:
    env = Env(flush_threshold_bytes=300, backpressure_bytes=10_000)
    shard = ShardId(GW, "todos", 0)
    requests = []
    for i in range(8):
        env.push(d(row=f"r{i}", title="x" * 20))
        requests.append(len(env.config.list_flush_requests(GW)))
    head = env.buffer.get_heads([shard])[shard]
    assert head.unflushed_bytes >= 300
    # Exactly one request, made by the push that crossed the threshold
    assert requests[-1] == 1
    crossing = requests.index(1)
    (request,) = env.config.list_flush_requests(GW)
    assert request["reason"] == "threshold"
    assert request["shard"] == shard.key
    assert request["unflushedBytes"] >= 300
    assert request["atMs"] == env.wall and request["id"]
    sizes = [e.size for e in env.log()]
    assert sum(sizes[:crossing]) < 300 <= sum(sizes[: crossing + 1])


def test_push_over_the_backpressure_limit_gets_503_with_nothing_written() -> None:
    # Given a shard whose unflushed buffer reached the backpressure limit
    env = Env(flush_threshold_bytes=100, backpressure_bytes=200)
    i = 0
    while True:
        try:
            env.push(d(row=f"r{i}", title="x" * 20))
        except BackpressureError:
            break
        i += 1
    shard = ShardId(GW, "todos", 0)
    assert env.buffer.get_heads([shard])[shard].unflushed_bytes >= 200
    before = env.snapshot()

    # When another push targets it (in the same batch as a push to a quiet table)
    quiet = d(table="notes", title="y")
    with pytest.raises(BackpressureError) as err:
        env.push(quiet, d(row="late", title="z"))

    # Then it is a 503 and nothing was written anywhere
    assert err.value.status == 503
    assert env.snapshot() == before
    assert _recorded(env, [quiet], env.wall // 1000) == set()
    # And a push of one chunk to it (checked against its commit basis, not a read of its own) is refused alike
    with pytest.raises(BackpressureError):
        env.push(d(row="late", title="z"))
    assert env.snapshot() == before
    # And other tables still accept pushes
    env.push(quiet)
    assert env.row("notes", "r1") == {"title": "y"}


class SlowSinceSessions(InMemorySinceSessions):
    """Sessions whose reads answer late, noting when each has ended."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self._delay_s = delay_s
        self.reads_ended = 0

    def get(self, gateway: str, client_id: str) -> SinceSession | None:
        time.sleep(self._delay_s)
        found = super().get(gateway, client_id)
        self.reads_ended += 1
        return found


def test_push_refused_after_its_session_read_started_returns_once_that_read_has_ended() -> None:
    # Given a shard at its backpressure limit, and `since` sessions whose reads answer late
    env = Env(flush_threshold_bytes=100, backpressure_bytes=200)
    sessions = SlowSinceSessions(delay_s=0.3)
    env.deps = replace(env.deps, since_sessions=sessions)
    for i in range(20):
        try:
            env.push(d(row=f"r{i}", title="x" * 20))
        except BackpressureError:
            break
    ended = sessions.reads_ended
    # When a push is refused after its session read was sent (the read runs beside the commit)
    with pytest.raises(BackpressureError):
        env.push(d(row="late", title="z"))
    # Then that read has ended by the time the push raises: no request outlives a push (a Lambda's threads freeze
    # between invocations)
    assert sessions.reads_ended == ended + 1


# -- chunks, shards and commit retries ---------------------------------------------------------------------------


def test_push_larger_than_a_chunk_commits_in_several_atomic_chunks_all_visible() -> None:
    buffer = ConflictingBuffer(InMemoryBufferStore(), times=0, interfere=None)
    env = Env(buffer=buffer, chunk_deltas=3)
    deltas = [d("INSERT", row=f"r{i}", title=str(i)) for i in range(10)]

    result = env.push(*deltas)

    assert [len(c.entries) for c in buffer.commits] == [3, 3, 3, 1]
    assert [c.expected_seq for c in buffer.commits] == [-1, 3, 6, 9]
    assert [e.seq for e in env.log()] == list(range(1, 11))
    assert len({c.entries[0].commit_hlc for c in buffer.commits}) == 4
    assert [r.delta_id for r in result.receipts] == [x.delta_id for x in deltas]
    pulled = pull(env.deps, GW, limit=100, claims={})
    assert [x.delta_id for x in pulled.deltas] == [x.delta_id for x in deltas]


def test_push_sub_shards_spread_rows_and_pull_still_sees_all() -> None:
    env = Env(sub_shards={"todos": 4})
    deltas = [d("INSERT", row=f"row-{i}", title=str(i)) for i in range(40)]
    env.push(*deltas, d("INSERT", table="notes", row="n1", title="n"))

    shards = env.buffer.list_shards(GW)
    todo_shards = {s for s in shards if s.table == "todos"}
    assert len(todo_shards) > 1
    assert ShardId(GW, "notes", 0) in shards
    for s in todo_shards:
        for entry in env.buffer.read_log(s, 0, 100):
            assert ShardId.for_row(GW, "todos", entry.delta.row_id, 4) == s
    pulled = pull(env.deps, GW, limit=1000, claims={})
    assert sorted(x.row_id for x in pulled.deltas if x.table == "todos") == sorted(x.row_id for x in deltas)
    assert len(pulled.deltas) == 41


def test_push_forced_commit_conflicts_are_retried_with_backoff() -> None:
    buffer = ConflictingBuffer(InMemoryBufferStore(), times=3, interfere=None)
    env = Env(buffer=buffer, commit_attempts=4)

    env.push(d("INSERT", title="x"))

    assert len(buffer.commits) == 4
    assert len(env.sleeps) == 3 and all(0 < s <= 0.2 for s in env.sleeps)
    assert env.row("todos", "r1") == {"title": "x"}
    assert [e.seq for e in env.log()] == [1]


def test_push_losing_every_commit_attempt_is_a_commit_conflict_error_with_nothing_written() -> None:
    buffer = ConflictingBuffer(InMemoryBufferStore(), times=4, interfere=None)
    env = Env(buffer=buffer, commit_attempts=4)

    with pytest.raises(CommitConflictError) as err:
        env.push(d("INSERT", title="x"))

    assert err.value.status == 503
    assert len(buffer.commits) == 4
    assert env.snapshot() == ([], {}, [], [])


def test_push_real_conflict_rereads_and_merges_against_the_concurrent_write() -> None:
    # Given a concurrent writer that commits a newer title to the same row just before our first commit
    inner = InMemoryBufferStore()
    rival = Env(buffer=inner)
    rival_titles = iter(["rival", "rival-2"])

    def concurrent_push(_: Commit) -> None:
        title = next(rival_titles)
        rival.push(d(client="rival", hlc=t(9 + len(title)), title=title))

    buffer = ConflictingBuffer(inner, times=1, interfere=concurrent_push)
    env = Env(buffer=buffer)
    env.push(d("INSERT", title="base"))  # the first commit triggers the rival (after which ours conflicts)

    # The rival's write landed first; our INSERT at t(0) was retried and lost its column
    assert env.row("todos", "r1") == {"title": "rival"}
    log = env.log()
    assert [(e.seq, e.delta.client_id) for e in log] == [(1, "rival")]

    # When a second push races the same way, but is newer
    buffer.times, buffer.failed = 1, 0
    result = env.push(d(hlc=t(20), title="mine", done=True))

    # Then the retry commits on top of the rival's second write with correct receipts and before/after images
    assert result.receipts[0].columns[0].applied
    assert env.row("todos", "r1") == {"title": "mine", "done": True}
    seqs = [e.seq for e in env.log()]
    assert seqs == list(range(1, len(seqs) + 1))
    assert env.log()[-1].before == {"title": "rival-2"}
    assert [e.delta.client_id for e in env.log()] == ["rival", "rival", "c1"]


def test_push_deltas_committed_concurrently_become_duplicates() -> None:
    # Given a concurrent push of the same delta that commits just before ours
    inner = InMemoryBufferStore()
    rival = Env(buffer=inner)
    delta = d("INSERT", title="x")
    other = d("INSERT", row="r2", title="y")
    buffer = ConflictingBuffer(inner, times=1, interfere=lambda _: rival.push(delta))
    env = Env(buffer=buffer)

    result = env.push(delta, other)

    # Then ours is acknowledged as a duplicate and logged once; the other delta is applied
    assert [r.duplicate for r in result.receipts] == [True, False]
    assert sorted(e.delta.delta_id for e in env.log()) == sorted([delta.delta_id, other.delta_id])


def test_push_new_shard_race_is_a_conflict_that_retries() -> None:
    inner = InMemoryBufferStore()
    rival = Env(buffer=inner)
    buffer = ConflictingBuffer(inner, times=1, interfere=lambda _: rival.push(d(row="r9", title="first")))
    env = Env(buffer=buffer)

    env.push(d(row="r1", title="second"))

    assert buffer.commits[0].new_shard
    assert not buffer.commits[1].new_shard and buffer.commits[1].expected_seq == 1
    assert [e.delta.row_id for e in env.log()] == ["r9", "r1"]


def test_push_backpressure_limit_defaults_to_twice_the_flush_threshold() -> None:
    settings = GatewaySettings(flush_threshold_bytes=1000)
    assert settings.backpressure_limit == 2000
    assert replace(settings, backpressure_bytes=1500).backpressure_limit == 1500


def test_push_schema_with_a_source_table_constrains_the_deltas_of_that_table() -> None:
    # Given a schema materialised as "todo_items" for the deltas of table "todos"
    env = Env()
    schema = parse_table_schema(
        {"table": "todo_items", "sourceTable": "todos", "columns": [{"name": "title", "type": "string"}]}
    )
    env.config.put_schema(GW, schema, 1, 0)

    # Then a todos delta with an undeclared column is refused, and one for the destination name is not constrained
    with pytest.raises(SchemaError, match='Unknown column "colour"'):
        env.push(d(title="x", colour="red"))
    env.push(d(table="todo_items", colour="red"))
    assert env.row("todos", "r1") is None
