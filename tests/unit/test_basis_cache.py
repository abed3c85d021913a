"""The pull basis kept between pulls (`gateway/basis_cache.py`): what it serves, when it reads again, and that a
stale read delays a change without losing or repeating anything."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from lakesync.core.delta import RowDelta
from lakesync.core.hlc import HLC
from lakesync.core.log import PullBasis, ShardId
from lakesync.core.messages import SyncPush
from lakesync.gateway.admin import save_sync_rules
from lakesync.gateway.basis_cache import CachedPullBasis, fresh_reader, kept_basis
from lakesync.gateway.cursor import decode_cursor
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.memory import InMemoryActionStore, InMemoryBufferStore, InMemoryConfigStore, InMemorySinceSessions
from lakesync.gateway.pull import PullResult, StoresPullBasis, pull
from lakesync.gateway.push import push
from tests.factories import T0, at, insert

GW = "default"
OWN_TEAM = {"version": 1, "buckets": [{"name": "team", "tables": [], "filters": [{"column": "team", "op": "eq",
                                                                               "value": "jwt:team"}]}]}  # fmt: skip


class CountingReader:
    """A basis reader over fixed answers that counts its reads."""

    def __init__(self) -> None:
        self.reads = 0
        self.shards: tuple[ShardId, ...] = ()

    def read_pull_basis(self, gateway: str) -> PullBasis:
        self.reads += 1
        return PullBasis(None, self.shards)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_reads_once_within_the_ttl_and_again_after_it() -> None:
    # Given a cache of 1 s over a counting reader
    reader, clock = CountingReader(), Clock()
    cache = CachedPullBasis(reader, 1.0, clock=clock)
    # When pulls come within the second, then after it
    first = cache.read_pull_basis(GW)
    clock.now += 0.999
    reader.shards = (ShardId(GW, "todos", 0),)
    within = cache.read_pull_basis(GW)
    clock.now += 0.001
    after = cache.read_pull_basis(GW)
    # Then the second pull is served the first read, and the third reads again and sees the new shard
    assert (reader.reads, within, after.shards) == (2, first, (ShardId(GW, "todos", 0),))


def test_each_gateway_is_kept_on_its_own() -> None:
    reader, clock = CountingReader(), Clock()
    cache = CachedPullBasis(reader, 5.0, clock=clock)
    cache.read_pull_basis("a")
    cache.read_pull_basis("b")
    cache.read_pull_basis("a")
    assert reader.reads == 2


def test_invalidate_makes_the_next_pull_read() -> None:
    reader, clock = CountingReader(), Clock()
    cache = CachedPullBasis(reader, 60.0, clock=clock)
    cache.read_pull_basis(GW)
    cache.invalidate(GW)
    reader.shards = (ShardId(GW, "notes", 0),)
    assert cache.read_pull_basis(GW).shards == (ShardId(GW, "notes", 0),)
    assert reader.reads == 2


def test_a_read_overtaken_by_an_invalidation_is_not_kept() -> None:
    # Given a read that is under way when this process changes the rules (and invalidates)
    clock = Clock()
    started, release = threading.Event(), threading.Event()

    class SlowReader(CountingReader):
        def read_pull_basis(self, gateway: str) -> PullBasis:
            basis = super().read_pull_basis(gateway)
            if self.reads == 1:
                started.set()
                release.wait(5)
            return basis

    reader = SlowReader()
    cache = CachedPullBasis(reader, 60.0, clock=clock)
    slow = threading.Thread(target=cache.read_pull_basis, args=(GW,))
    slow.start()
    assert started.wait(5)
    cache.invalidate(GW)
    release.set()
    slow.join(5)
    # When the next pull comes
    cache.read_pull_basis(GW)
    # Then it reads again: the overtaken read (which may predate the change) served its own pull only
    assert reader.reads == 2


def test_fresh_reader_is_the_reader_underneath() -> None:
    reader = CountingReader()
    assert fresh_reader(CachedPullBasis(reader, 1.0)) is reader
    assert fresh_reader(reader) is reader


def test_kept_answers_within_the_ttl_without_reading_and_nothing_after_it() -> None:
    # Given a cache of 1 s that has read a gateway
    reader, clock = CountingReader(), Clock()
    cache = CachedPullBasis(reader, 1.0, clock=clock)
    assert kept_basis(cache, GW) is None  # nothing read yet: nothing kept, and nothing read to find out
    first = cache.read_pull_basis(GW)
    # Then within the second it is kept, after it (or invalidated) it is not; and asking never reads
    clock.now += 0.999
    assert kept_basis(cache, GW) is first
    assert kept_basis(cache, "other") is None
    clock.now += 0.001
    assert kept_basis(cache, GW) is None
    cache.read_pull_basis(GW)
    cache.invalidate(GW)
    assert kept_basis(cache, GW) is None
    assert reader.reads == 2
    # And a reader that keeps nothing has nothing kept
    assert kept_basis(reader, GW) is None


@pytest.mark.parametrize("ttl", [0.0, -1.0])
def test_a_ttl_must_be_positive(ttl: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        CachedPullBasis(CountingReader(), ttl)


# -- through the services ----------------------------------------------------------------------------------------


class Gateway:
    """Two processes ("Lambdas") on shared in-memory stores: ``deps`` keeps the basis for a minute, ``other`` writes
    without it (another process, whose writes this one cannot see invalidate anything)."""

    def __init__(self) -> None:
        self.wall = T0
        self.buffer, self.config = InMemoryBufferStore(), InMemoryConfigStore()
        self.clock = Clock()
        self.reader = CountingBasis(StoresPullBasis(self.config, self.buffer))
        self.deps = self._deps(CachedPullBasis(self.reader, 60.0, clock=self.clock))
        self.other = self._deps(None)

    def _deps(self, basis: CachedPullBasis | None) -> GatewayDeps:
        return GatewayDeps(
            buffer=self.buffer,
            config=self.config,
            actions=InMemoryActionStore(),
            clock=HLC(lambda: self.wall),
            wall_ms=lambda: self.wall,
            sleep=lambda _: None,
            pull_basis=basis,
            since_sessions=InMemorySinceSessions(),
        )

    def push(self, deps: GatewayDeps, *deltas: RowDelta) -> None:
        self.wall += 1
        push(deps, GW, SyncPush("admin", deltas), client_id="admin", trusted=True)

    def pull(self, cursor: str | None = None, **kwargs: Any) -> PullResult:
        return pull(self.deps, GW, limit=100, claims={"team": "blue"}, cursor=cursor, **kwargs)


class CountingBasis:
    def __init__(self, inner: StoresPullBasis) -> None:
        self.inner = inner
        self.reads = 0

    def read_pull_basis(self, gateway: str) -> PullBasis:
        self.reads += 1
        return self.inner.read_pull_basis(gateway)


def test_rules_saved_by_this_process_apply_to_its_next_pull() -> None:
    # Given a pull that kept the basis (no rules: everything visible)
    gw = Gateway()
    gw.push(gw.deps, insert("r1", hlc=at(1), client="admin", team="red", n=1))
    assert [x.row_id for x in gw.pull().deltas] == ["r1"]
    # When this process saves rules that hide red rows from blue clients
    save_sync_rules(gw.deps, GW, OWN_TEAM)
    # Then its next pull applies them at once
    assert gw.pull().deltas == ()


def test_a_new_table_committed_by_this_process_is_served_by_its_next_pull() -> None:
    gw = Gateway()
    gw.push(gw.deps, insert("r1", hlc=at(1), client="admin", team="blue", n=1))
    page = gw.pull()
    gw.push(gw.deps, insert("n1", hlc=at(2), table="notes", client="admin", team="blue", n=2))
    assert [x.row_id for x in gw.pull(page.cursor).deltas] == ["n1"]
    assert gw.reader.reads == 2


def test_a_table_another_process_creates_waits_for_the_ttl_and_is_then_served_whole_once() -> None:
    # Given a cursor client that pulled the one table there was
    gw = Gateway()
    gw.push(gw.deps, insert("r1", hlc=at(1), client="admin", team="blue", n=1))
    page = gw.pull()
    # When another process commits to a new table, and to the old one
    gw.push(
        gw.other,
        insert("n1", hlc=at(2), table="notes", client="admin", team="blue", n=2),
        insert("n2", hlc=at(3), table="notes", client="admin", team="blue", n=3),
    )
    gw.push(gw.other, insert("r2", hlc=at(4), client="admin", team="blue", n=4))
    # Then within the TTL the pull serves the known table only, and its cursor keeps every position it had
    early = gw.pull(page.cursor)
    assert [x.row_id for x in early.deltas] == ["r2"]
    assert early.cursor is not None and not early.has_more
    # And after the TTL the new table comes from its first entry: nothing lost, nothing repeated
    gw.clock.now += 60.0
    late = gw.pull(early.cursor)
    assert [x.row_id for x in late.deltas] == ["n1", "n2"]
    assert late.cursor is not None
    assert decode_cursor(late.cursor, GW) == {"default#todos#0": 2, "default#notes#0": 2}
    assert gw.pull(late.cursor).deltas == ()


def test_rules_another_process_saves_reach_cursor_pulls_after_the_ttl_and_since_pulls_at_once() -> None:
    gw = Gateway()
    gw.push(gw.deps, insert("r1", hlc=at(1), client="admin", team="red", n=1))
    assert len(gw.pull().deltas) == 1
    save_sync_rules(gw.other, GW, OWN_TEAM)
    # A cursor pull within the TTL is served as if the rules had changed that much later
    assert len(gw.pull().deltas) == 1
    # A since pull reads the rules as they are
    assert gw.pull(since=0).deltas == ()
    gw.clock.now += 60.0
    assert gw.pull().deltas == ()


def test_a_cached_basis_is_what_a_fresh_one_would_be_for_a_quiet_gateway() -> None:
    # Many pulls of a quiet gateway read its basis once and answer as fresh reads do
    gw = Gateway()
    gw.push(
        gw.deps,
        insert("r1", hlc=at(1), client="admin", team="blue", n=1),
        insert("n1", hlc=at(2), table="notes", client="admin", team="blue", n=2),
    )
    fresh = replace(gw.deps, pull_basis=None)
    cursor = None
    for _ in range(5):
        page = gw.pull(cursor)
        expected = pull(fresh, GW, limit=100, claims={"team": "blue"}, cursor=cursor)
        assert (page.deltas, page.cursor, page.has_more) == (expected.deltas, expected.cursor, expected.has_more)
        cursor = page.cursor
    assert gw.reader.reads == 1


def test_a_pull_with_the_basis_kept_reads_a_lone_shard_in_its_own_thread_without_images_and_loses_nothing() -> None:
    # Given a process that kept the basis (no rules), its buffer recording the thread and the images of each read
    gw = Gateway()
    reads: list[tuple[str, bool]] = []
    buffer = gw.buffer

    class Recording:
        def __getattr__(self, name: str) -> Any:
            return getattr(buffer, name)

        def read_log(self, shard: ShardId, after_seq: int, limit: int, *, images: bool = True) -> Any:
            reads.append((threading.current_thread().name, images))
            return buffer.read_log(shard, after_seq, limit, images=images)

        def read_log_at(self, shard: ShardId, seq: int, limit: int, *, images: bool = True) -> Any:
            reads.append((threading.current_thread().name, images))
            return buffer.read_log_at(shard, seq, limit, images=images)

    gw.deps = replace(gw.deps, buffer=Recording())  # type: ignore[arg-type]
    gw.push(gw.other, *(insert(f"r{i}", hlc=at(i), client="admin", team="blue", n=i) for i in range(5)))
    first = pull(gw.deps, GW, limit=3, claims={})
    reads.clear()
    # When the next page is pulled with the basis at hand
    second = pull(gw.deps, GW, limit=3, claims={}, cursor=first.cursor)
    # Then the log was read in the pulling thread, without row images (no rules need them), and every delta came once
    assert reads and all(thread == threading.current_thread().name and not images for thread, images in reads)
    assert [d.row_id for d in first.deltas + second.deltas] == [f"r{i}" for i in range(5)]
    assert not second.has_more
