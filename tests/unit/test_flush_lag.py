"""The flush lag (issue 44, item 4: data at risk): the pure figure over shard heads (what waits, its bytes, the oldest
unflushed commit, its age; a shard whose log did not give its oldest back), its line for people and when ``lakesync
local`` says it; read from a buffer the figure is the commit HLC of each shard's entry after its flushed position,
and the admin metrics carry exactly what the status line's reader reads."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lakesync.core.delta import make_delta
from lakesync.core.flush_lag import FlushLag, LagNotices, ShardLag, measure, oldest_unflushed
from lakesync.core.hlc import HLC, decode, encode
from lakesync.core.log import Commit, ShardHead, ShardId
from lakesync.core.messages import SyncPush
from lakesync.gateway import admin
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.flush_lag import FlushLagWatch, flush_lag
from lakesync.gateway.memory import InMemoryActionStore, InMemoryBufferStore, InMemoryConfigStore
from lakesync.gateway.push import push
from tests.factories import T0

GW = "default"


def _head(table: str, seq: int, flushed: int, *, sub: int = 0) -> ShardHead:
    return ShardHead(
        ShardId(GW, table, sub), seq=seq, bytes_total=100 * seq, deltas_total=seq, flushed_seq=flushed,
        flushed_bytes=100 * flushed, flushed_deltas=flushed,
    )  # fmt: skip


# -- the figure, pure ------------------------------------------------------------------------------------------------


def test_flush_lag_sums_the_lagging_shards_and_takes_the_oldest_commit_known() -> None:
    # Given three lagging shards (one whose log did not give its oldest entry back) and a flushed one
    heads = [_head("todos", 9, 4, sub=1), _head("notes", 3, 3), _head("todos", 5, 0), _head("tags", 2, 1)]
    # Then the positions to read are each lagging shard's entry after its flushed one, the flushed shard's none
    assert oldest_unflushed(heads) == {
        ShardId(GW, "todos", 1): 5,
        ShardId(GW, "todos", 0): 1,
        ShardId(GW, "tags", 0): 2,
    }
    oldest = {ShardId(GW, "todos", 1): encode(T0 + 2_000, 3), ShardId(GW, "todos", 0): encode(T0 + 7_500, 0)}
    # When measured 61.9 s after the oldest
    lag = measure(heads, oldest, T0 + 63_900)
    # Then the shards are the lagging ones, sorted; the totals are theirs; the oldest is the oldest known
    assert [s.shard.key for s in lag.shards] == ["default#tags#0", "default#todos#0", "default#todos#1"]
    assert (lag.deltas, lag.bytes) == (1 + 5 + 5, 100 * 11)
    assert lag.oldest_commit_hlc == encode(T0 + 2_000, 3)
    assert lag.age_s == 61
    # And the admin figure says it in total and per shard, HLCs as decimal strings, times in UTC
    doc = lag.to_json()
    assert {k: v for k, v in doc.items() if k != "shards"} == {
        "unflushedDeltas": 11,
        "unflushedBytes": 1100,
        "oldestCommitHlc": str(encode(T0 + 2_000, 3)),
        "oldestCommitAt": "2023-11-14T22:13:22.000Z",
        "oldestCommitAgeSeconds": 61,
    }
    assert doc["shards"][0] == {
        "shard": "default#tags#0",
        "table": "tags",
        "sub": 0,
        "unflushedDeltas": 1,
        "unflushedBytes": 100,
        "oldestCommitHlc": None,
        "oldestCommitAt": None,
        "oldestCommitAgeSeconds": None,
    }
    assert [s["oldestCommitAgeSeconds"] for s in doc["shards"]] == [None, 56, 61]


def test_flush_lag_of_flushed_shards_is_nothing() -> None:
    lag = measure([_head("todos", 4, 4)], {}, T0)
    assert (lag.shards, lag.deltas, lag.bytes, lag.oldest_commit_hlc, lag.age_s) == ((), 0, 0, None, None)
    assert lag.to_json() == {
        "unflushedDeltas": 0,
        "unflushedBytes": 0,
        "oldestCommitHlc": None,
        "oldestCommitAt": None,
        "oldestCommitAgeSeconds": None,
        "shards": [],
    }


def test_flush_lag_status_says_how_much_waits_and_for_how_long() -> None:
    shard = ShardId(GW, "todos")
    one = FlushLag((ShardLag(shard, 1, 250, encode(T0, 0)),), T0 + 12_400)
    many = FlushLag((ShardLag(shard, 1_234, 5_678_901, encode(T0, 0)),), T0 + 3 * 3600_000 + 125_000)
    assert one.status() == "data at risk: 1 delta (250 bytes) not in the lake yet, the oldest committed 12 s ago"
    assert many.status() == (
        "data at risk: 1,234 deltas (5,678,901 bytes) not in the lake yet, the oldest committed 3 h 2 min ago"
    )
    assert FlushLag((ShardLag(shard, 2, 9, encode(T0, 0)),), T0 + 600_000).status().endswith("committed 10 min ago")
    assert FlushLag((ShardLag(shard, 2, 9, None),), T0).status().endswith("yet, the oldest's time unknown")
    assert FlushLag((), T0).status() == "data at risk: none (every commit is in the lake)"


def test_lag_notices_say_the_first_figure_each_change_of_state_and_a_reminder_while_data_waits() -> None:
    notices = LagNotices(quiet_ms=10_000, repeat_ms=60_000)
    shard = ShardId(GW, "todos")

    def lag(deltas: int, at_ms: int) -> FlushLag:
        return FlushLag((ShardLag(shard, deltas, deltas, encode(T0, 0)),) if deltas else (), at_ms)

    said = {
        ms: notices.line(GW, lag(deltas, T0 + ms))
        for ms, deltas in [
            (0, 0),  # the first measure: said
            (5_000, 0),  # nothing changed
            (6_000, 2),  # data becomes at risk: said at once
            (8_000, 3),  # changed, but within the quiet time
            (16_500, 3),  # the quiet time passed since the last line: the change is said
            (70_000, 3),  # unchanged, within a minute of the last line
            (76_500, 3),  # a minute since the last line while data waits: said again
            (77_000, 0),  # all flushed: said at once
            (500_000, 0),  # nothing waits: never repeated
        ]
    }
    assert {ms for ms, line in said.items() if line is not None} == {0, 6_000, 16_500, 76_500, 77_000}
    assert said[0] == "gateway 'default': data at risk: none (every commit is in the lake)"
    assert said[16_500] == (
        "gateway 'default': data at risk: 3 deltas (3 bytes) not in the lake yet, the oldest committed 16 s ago"
    )
    # And each gateway has its own notices
    assert notices.line("other", lag(0, T0 + 500_001)) is not None


# -- read from a buffer -----------------------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> int:
        return self.ms


def _deps(clock: _Clock, buffer: Any) -> GatewayDeps:
    return GatewayDeps(
        buffer=buffer,
        config=InMemoryConfigStore(),
        actions=InMemoryActionStore(),
        settings=GatewaySettings(),
        clock=HLC(clock),
        wall_ms=clock,
    )


def _push(deps: GatewayDeps, clock: _Clock, table: str, *rows: str) -> None:
    deltas = tuple(
        make_delta("INSERT", table=table, row_id=r, client_id="c", hlc=encode(clock.ms, 0), columns={"v": r})
        for r in rows
    )
    assert push(deps, GW, SyncPush("c", deltas), client_id="c").accepted == len(rows)


def _flush_to(buffer: InMemoryBufferStore, shard: ShardId, seq: int) -> None:
    head = buffer.get_heads([shard])[shard]
    done = buffer.read_log(shard, 0, seq)
    flushed = replace(head, flushed_seq=seq, flushed_bytes=sum(e.size for e in done), flushed_deltas=seq)
    buffer.commit(Commit(shard, head.seq, flushed, (), ()))


def test_gateway_flush_lag_is_each_shards_oldest_unflushed_commit_and_the_admin_figure() -> None:
    # Given commits a minute apart: notes at T0 (flushed) and at T0+60 s, todos at T0+60 s (flushed), tags at T0+120 s
    clock, buffer = _Clock(), InMemoryBufferStore()
    deps = _deps(clock, buffer)
    _push(deps, clock, "notes", "n1", "n2", "n3")
    clock.ms = T0 + 60_000
    _push(deps, clock, "notes", "n4", "n5")
    _push(deps, clock, "todos", "t1")
    clock.ms = T0 + 120_000
    _push(deps, clock, "tags", "g1")
    notes, todos, tags = ShardId(GW, "notes"), ShardId(GW, "todos"), ShardId(GW, "tags")
    _flush_to(buffer, notes, 3)
    _flush_to(buffer, todos, 1)
    # When the flush lag is read three minutes after the first commit
    clock.ms = T0 + 180_000
    lag = flush_lag(buffer, GW, clock.ms)
    # Then it holds the shards with unflushed entries, with their counts and bytes from the heads
    heads = buffer.get_heads([notes, tags])
    assert [(s.shard, s.deltas, s.bytes) for s in lag.shards] == [
        (h.shard, h.unflushed_deltas, h.unflushed_bytes) for h in (heads[notes], heads[tags])
    ]
    assert lag.deltas == 3 and lag.bytes == heads[notes].unflushed_bytes + heads[tags].unflushed_bytes > 0
    # And each shard's oldest is the commit after its flushed position: notes' second push, tags' push
    assert [decode(s.oldest_commit_hlc or 0)[0] for s in lag.shards] == [T0 + 60_000, T0 + 120_000]
    assert (decode(lag.oldest_commit_hlc or 0)[0], lag.age_s) == (T0 + 60_000, 120)
    # And the admin metrics carry the same figure, beside their own
    metrics = admin.metrics(deps, GW)
    assert metrics["flushLag"] == lag.to_json()
    assert metrics["logSize"] == lag.deltas


class _Counting(InMemoryBufferStore):
    def __init__(self) -> None:
        super().__init__()
        self.log_reads = 0

    def read_log(self, shard: ShardId, after_seq: int, limit: int, *, images: bool = True) -> Any:
        self.log_reads += 1
        return super().read_log(shard, after_seq, limit, images=images)


def test_flush_lag_watch_reads_at_its_interval_and_says_what_changed() -> None:
    # Given the watch of a gateway's buffer, reading every 5 s
    clock, buffer = _Clock(), _Counting()
    deps = _deps(clock, buffer)
    watch = FlushLagWatch(buffer, [GW], clock, every_ms=5_000)
    # Then its first look says nothing waits; a look before 5 s passed reads nothing
    assert watch.lines() == ["gateway 'default': data at risk: none (every commit is in the lake)"]
    _push(deps, clock, "todos", "t1", "t2")
    buffer.log_reads = 0
    clock.ms = T0 + 4_999
    assert watch.lines() == [] and buffer.log_reads == 0
    # And the next says the commit waits, from one log read of its shard
    clock.ms = T0 + 7_000
    assert watch.lines() == [
        "gateway 'default': data at risk: 2 deltas"
        f" ({flush_lag(buffer, GW, clock.ms).bytes:,} bytes) not in the lake yet, the oldest committed 7 s ago"
    ]
    assert buffer.log_reads == 2  # the watch's and this test's
