"""The pull service (lakesync.gateway.pull) on the in-memory adapters: the cursor delivers every commit exactly once
across pages and shards, ``hasMore`` is honest (also when filtering stops a pull early), ``since`` pulls are
at-least-once within the re-read window, sync rules are evaluated on the row before and after each change, bad
cursors are refused, and source-adapter pulls report missing and failing adapters."""

from __future__ import annotations

import base64
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from lakesync.core.canonical import JsonValue
from lakesync.core.delta import DeltaOp, RowDelta, make_delta
from lakesync.core.errors import (
    AdapterError,
    AdapterNotFoundError,
    CursorExpiredError,
    StorageBusyError,
    StorageError,
    ValidationError,
)
from lakesync.core.hlc import HLC, encode
from lakesync.core.log import LogEntry, PullBasis, ShardHead, ShardId
from lakesync.core.messages import SyncPush
from lakesync.core.rules import user_scoped_rules
from lakesync.gateway.cursor import decode_cursor, encode_cursor
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.memory import InMemoryActionStore, InMemoryBufferStore, InMemoryConfigStore, InMemorySinceSessions
from lakesync.gateway.pull import PullResult, pull
from lakesync.gateway.push import push

GW = "default"
T0 = 1_700_000_000_000


class Env:
    """A gateway ("Lambda") on shared in-memory stores with its own controllable wall clock."""

    def __init__(self, shared: Env | None = None, *, skew_ms: int = 0, **settings: Any) -> None:
        self.wall = T0 + skew_ms
        self.buffer = shared.buffer if shared else InMemoryBufferStore()
        self.config = shared.config if shared else InMemoryConfigStore()
        self.deps = GatewayDeps(
            buffer=self.buffer,
            config=self.config,
            actions=InMemoryActionStore(),
            settings=GatewaySettings(**settings),
            clock=HLC(lambda: self.wall),
            wall_ms=lambda: self.wall,
            sleep=lambda _: None,
        )

    def push(self, *deltas: RowDelta) -> None:
        push(self.deps, GW, SyncPush("admin", tuple(deltas)), client_id="admin", trusted=True)

    def pull(self, limit: int = 100, claims: dict[str, Any] | None = None, **kwargs: Any) -> PullResult:
        return pull(self.deps, GW, limit=limit, claims=claims or {}, **kwargs)

    def log(self) -> list[LogEntry]:
        return [e for s in self.buffer.list_shards(GW) for e in self.buffer.read_log(s, 0, 1_000_000)]

    def drain(self, cursor: str | None, limit: int, claims: dict[str, Any] | None = None) -> tuple[list[RowDelta], str]:
        """Follow the cursor until ``hasMore`` is false; checks that every page but the last says ``hasMore``."""
        got: list[RowDelta] = []
        for _ in range(10_000):
            page = self.pull(limit, claims, cursor=cursor) if cursor else self.pull(limit, claims)
            assert len(page.deltas) <= limit
            got.extend(page.deltas)
            assert page.cursor is not None
            cursor = page.cursor
            if not page.has_more:
                return got, cursor
        raise AssertionError("pull never reported hasMore=false")


def t(ms: int, counter: int = 0) -> int:
    return encode(T0 + ms, counter)


def d(
    op: str = "UPDATE", row: str = "r1", client: str = "c1", hlc: int = 0, table: str = "todos", **cols: Any
) -> RowDelta:
    return make_delta(op, table=table, row_id=row, client_id=client, hlc=hlc or t(0), columns=cols)


def _ids(deltas: list[RowDelta] | tuple[RowDelta, ...]) -> list[str]:
    return [x.delta_id for x in deltas]


def _rows(deltas: list[RowDelta] | tuple[RowDelta, ...]) -> set[str]:
    return {x.row_id for x in deltas}


def _seed(env: Env, n: int, rnd: random.Random) -> None:
    for i in range(n):
        table = rnd.choice(["todos", "notes", "tags"])
        env.push(d(table=table, row=f"r{rnd.randrange(5)}", client=f"c{rnd.randrange(3)}", hlc=t(i), v=i))


# -- the cursor --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 7, 13, 14, 100])
def test_pull_cursor_delivers_every_commit_exactly_once_across_pages(limit: int) -> None:
    # Given 13 commits spread over three tables (three shards)
    env = Env()
    _seed(env, 13, random.Random(limit))
    log = env.log()
    assert len(log) == 13

    # When a client follows the cursor with a small page size
    got, cursor = env.drain(None, limit)

    # Then it received every committed entry exactly once, in commit-HLC order
    assert sorted(_ids(got)) == sorted(e.delta.delta_id for e in log)
    commit_hlc = {e.delta.delta_id: e.commit_hlc for e in log}
    assert [commit_hlc[x] for x in _ids(got)] == sorted(commit_hlc[x] for x in _ids(got))
    # And the cursor holds the head of every shard
    heads = env.buffer.get_heads(env.buffer.list_shards(GW))
    assert decode_cursor(cursor, GW) == {s.key: h.seq for s, h in heads.items()}


def test_pull_cursor_interleaved_with_pushes_loses_and_repeats_nothing() -> None:
    # Given pushes and pulls interleaved at random, with new shards appearing along the way
    rnd = random.Random(3)
    env = Env(chunk_deltas=2)
    cursor: str | None = None
    got: list[RowDelta] = []
    for step in range(60):
        if rnd.random() < 0.6:
            batch = [
                d(table=f"t{rnd.randrange(6)}", row=f"r{rnd.randrange(4)}", hlc=t(step, j), v=step)
                for j in range(rnd.randrange(1, 5))
            ]
            env.push(*batch)
        else:
            page = env.pull(rnd.randrange(1, 6), cursor=cursor) if cursor else env.pull(rnd.randrange(1, 6))
            got.extend(page.deltas)
            cursor = page.cursor
    # When the client drains at the end
    rest, _ = env.drain(cursor, 4)

    # Then it saw every log entry exactly once
    counts = Counter(_ids(got + rest))
    assert set(counts.values()) == {1}
    assert set(counts) == {e.delta.delta_id for e in env.log()}


def test_pull_cursor_resumes_with_only_later_commits() -> None:
    env = Env()
    env.push(d(row="a", v=1))
    _, cursor = env.drain(None, 10)
    env.push(d(row="b", hlc=t(1), v=2), d(table="notes", row="c", hlc=t(2), v=3))

    page = env.pull(10, cursor=cursor)

    assert [x.row_id for x in page.deltas] == ["b", "c"]
    assert not page.has_more
    empty = env.pull(10, cursor=page.cursor)
    assert empty.deltas == () and not empty.has_more and empty.cursor == page.cursor


def test_pull_empty_buffer_has_nothing_more_and_an_empty_cursor() -> None:
    page = Env().pull(10)
    assert page.deltas == () and not page.has_more
    assert page.cursor is not None and decode_cursor(page.cursor, GW) == {}
    assert page.to_json()["hasMore"] is False and page.to_json()["cursor"] == page.cursor


@pytest.mark.parametrize(("entries", "limit", "has_more"), [(5, 4, True), (5, 5, False), (5, 6, False), (1, 1, False)])
def test_pull_has_more_is_true_exactly_when_entries_remain(entries: int, limit: int, has_more: bool) -> None:
    env = Env()
    env.push(*(d(row=f"r{i}", v=i) for i in range(entries)))
    page = env.pull(limit)
    assert len(page.deltas) == min(entries, limit)
    assert page.has_more is has_more


def test_pull_scan_limit_returns_early_with_has_more_and_progress() -> None:
    # Given 30 rows of another user, then 1 row of ours, under user-scoped rules, and a scan limit of 10
    env = Env(max_scan_per_pull=10)
    env.config.put_sync_rules(GW, user_scoped_rules(["todos"]))
    env.push(*(d("INSERT", row=f"x{i}", user_id="u2") for i in range(30)))
    env.push(d("INSERT", row="mine", hlc=t(1), user_id="u1"))

    # When u1 follows the cursor
    pages = []
    cursor: str | None = None
    while True:
        page = env.pull(100, {"sub": "u1"}, cursor=cursor) if cursor else env.pull(100, {"sub": "u1"})
        pages.append(page)
        cursor = page.cursor
        if not page.has_more:
            break

    # Then the filtered pages come back empty but say hasMore, each advancing the cursor, until u1's row arrives
    assert [len(p.deltas) for p in pages] == [0, 0, 0, 1]
    assert [p.has_more for p in pages] == [True, True, True, False]
    assert [sum(decode_cursor(p.cursor or "", GW).values()) for p in pages] == [10, 20, 30, 31]
    assert pages[-1].deltas[0].row_id == "mine"


@pytest.mark.parametrize("tables", [("todos",), ("todos", "notes")])
def test_pull_page_ends_with_the_entry_that_reaches_the_byte_cap(tables: tuple[str, ...]) -> None:
    # Given entries of varied sizes in one shard or two, and a cap on a page's stored bytes
    env = Env(max_page_bytes=1_000)
    env.push(
        *(d(table=tables[i % len(tables)], row=f"r{i}", hlc=t(i), title="x" * (20 + 37 * (i % 7))) for i in range(40))
    )
    log = sorted(env.log(), key=lambda e: e.commit_hlc)
    # When a client follows the cursor
    pages = []
    cursor: str | None = None
    while True:
        page = env.pull(100, cursor=cursor) if cursor else env.pull(100)
        pages.append(page)
        cursor = page.cursor
        if not page.has_more:
            break
    # Then each page ends at the first entry whose size brings it to the cap (or at the log's end), and every entry
    # arrives once, in commit order
    expected: list[int] = []
    size = count = 0
    for entry in log:
        size, count = size + entry.size, count + 1
        if size >= 1_000:
            expected.append(count)
            size = count = 0
    if count:
        expected.append(count)
    assert [len(p.deltas) for p in pages] == expected
    assert [x.delta_id for p in pages for x in p.deltas] == [e.delta.delta_id for e in log]


def test_pull_scan_limit_reached_exactly_at_the_end_reports_no_more() -> None:
    env = Env(max_scan_per_pull=5)
    env.push(*(d(row=f"r{i}", v=i) for i in range(5)))
    page = env.pull(100)
    assert len(page.deltas) == 5 and not page.has_more


# -- since (the original client's serverHlc) ---------------------------------------------------------------------


def test_pull_since_delivers_a_late_commit_with_an_older_commit_hlc_within_the_window() -> None:
    # Given two gateway Lambdas; B's clock is 1 s behind A's
    a = Env()
    b = Env(a, skew_ms=-1000)
    a.push(d(table="todos", row="first", v=1))
    first = a.pull(100, since=0)
    assert _ids(first.deltas) == [e.delta.delta_id for e in a.log()]
    since = first.server_hlc

    # When B commits to another table after the client's pull, stamped with an older commit HLC
    b.push(d(table="notes", row="late", hlc=t(-1000), v=2))
    (late,) = [e for e in a.log() if e.delta.row_id == "late"]
    assert late.commit_hlc < since

    # Then the next since-pull still delivers it (and may repeat entries inside the window)
    second = a.pull(100, since=since)
    assert "late" in [x.row_id for x in second.deltas]
    assert not second.has_more


def test_pull_since_misses_commits_later_than_the_window_but_the_cursor_does_not() -> None:
    # Given a 100 ms re-read window and a Lambda whose clock is 1 s behind
    a = Env(since_window_ms=100)
    b = Env(a, skew_ms=-1000)
    a.push(d(row="first", v=1))
    first = a.pull(100, since=0)
    assert first.cursor is not None

    b.push(d(table="notes", row="late", hlc=t(-1000), v=2))

    # Then the since-pull (at-least-once only within the window) misses it, the cursor-pull does not
    assert "late" not in [x.row_id for x in a.pull(100, since=first.server_hlc).deltas]
    assert [x.row_id for x in a.pull(100, cursor=first.cursor).deltas] == ["late"]


def test_pull_since_pages_follow_server_hlc_and_deliver_everything_at_least_once() -> None:
    # Given commits 3 s apart (so that the 5 s re-read window holds fewer of them than a page)
    env = Env()
    for i in range(20):
        env.wall = T0 + i * 3000
        env.push(d(table=["todos", "notes"][i % 2], row=f"r{i}", hlc=t(i * 3000), v=i))

    # When the original client pages with since=serverHlc while hasMore
    got: list[RowDelta] = []
    since = 0
    for _ in range(100):
        page = env.pull(3, since=since)
        got.extend(page.deltas)
        since = page.server_hlc
        if not page.has_more:
            break
    else:
        raise AssertionError("since-paging did not finish")

    # Then every row arrived at least once (window entries come as rows, in the original applier's idempotent form)
    assert _rows(got) == {e.delta.row_id for e in env.log()}


def test_pull_since_paging_makes_progress_with_many_commits_inside_the_window() -> None:
    # Given 10 commits within one second (inside the default 5 s window)
    env = Env()
    env.push(*(d(row=f"r{i}", hlc=t(i), v=i) for i in range(10)))
    for i in range(10, 20):
        env.push(d(row=f"r{i}", hlc=t(i), v=i))

    # When the original client pages with since=serverHlc and a page size of 3
    seen: set[str] = set()
    since = 0
    for _ in range(50):
        page = env.pull(3, since=since)
        seen |= _rows(page.deltas)
        since = page.server_hlc
        if not page.has_more:
            break

    # Then it gets to the end
    assert not page.has_more
    assert seen == {e.delta.row_id for e in env.log()}


def test_pull_since_paging_through_old_commits_never_splits_a_commit_and_loses_its_rest() -> None:
    # Given one commit of 10 entries (one chunk, one commit HLC) and later ones, all long past the re-read window
    env = Env()
    env.push(*(d(row=f"r{i}", hlc=t(i), v=i) for i in range(10)))
    env.wall += 1000
    env.push(d(table="notes", row="n", hlc=t(1000), v=1))
    env.wall += 600_000

    # When the original client pages with since=serverHlc and a page size smaller than the commit
    seen: set[str] = set()
    since = 0
    for _ in range(50):
        page = env.pull(3, since=since)
        seen |= _rows(page.deltas)
        since = page.server_hlc
        if not page.has_more:
            break

    # Then every entry arrives
    assert not page.has_more
    assert seen == {e.delta.row_id for e in env.log()}


@pytest.mark.parametrize("limit", [1, 2, 3, 7])
@pytest.mark.parametrize("age_ms", [0, 600_000], ids=["recent", "old"])
def test_pull_since_paging_over_interleaved_shards_terminates_and_delivers_everything(limit: int, age_ms: int) -> None:
    # Given pushes whose chunks land in three shards at the same moments (commit HLCs of the shards interleave)
    env = Env(chunk_deltas=4)
    for k in range(3):
        env.push(
            *(d(table=tb, row=f"{tb}{k}.{i}", hlc=t(k), v=i) for tb in ("todos", "notes", "tags") for i in range(6))
        )
    env.wall += age_ms

    # When the original client pages with since=serverHlc
    seen: list[str] = []
    since = 0
    pages = 0
    while True:
        page = env.pull(limit, since=since)
        pages += 1
        seen.extend(x.row_id for x in page.deltas)
        since = page.server_hlc
        if not page.has_more or pages > 100:
            break

    # Then it ends, with every entry delivered
    assert not page.has_more
    assert set(seen) == {e.delta.row_id for e in env.log()}


def test_pull_since_final_page_hands_over_a_cursor_that_continues_exactly() -> None:
    env = Env()
    env.push(d(row="a", v=1), d(table="notes", row="b", v=2))
    page = env.pull(100, since=0)
    assert not page.has_more and page.cursor is not None
    env.push(d(row="c", hlc=t(1), v=3))
    assert [x.row_id for x in env.pull(100, cursor=page.cursor).deltas] == ["c"]


# -- sync rules --------------------------------------------------------------------------------------------------


def test_pull_rules_deliver_a_delete_to_the_client_whose_bucket_held_the_row() -> None:
    # Given user-scoped rules and a row of u1 and a row of u2
    env = Env()
    env.config.put_sync_rules(GW, user_scoped_rules(["todos"]))
    env.push(d("INSERT", row="r1", user_id="u1", title="a"), d("INSERT", row="r2", user_id="u2", title="b"))
    _, c1 = env.drain(None, 10, {"sub": "u1"})
    _, c2 = env.drain(None, 10, {"sub": "u2"})

    # When r1 is deleted (the DELETE carries no columns)
    env.push(d("DELETE", row="r1", hlc=t(5)))

    # Then u1 receives the DELETE and u2 does not
    got1, _ = env.drain(c1, 10, {"sub": "u1"})
    got2, _ = env.drain(c2, 10, {"sub": "u2"})
    assert [(x.op, x.row_id) for x in got1] == [(DeltaOp.DELETE, "r1")]
    assert got2 == []


def test_pull_rules_deliver_a_row_moving_out_of_a_bucket_once() -> None:
    env = Env()
    env.config.put_sync_rules(GW, user_scoped_rules(["todos"]))
    env.push(d("INSERT", row="r1", user_id="u1", title="a"))
    got_u1, c1 = env.drain(None, 10, {"sub": "u1"})
    got_u2, c2 = env.drain(None, 10, {"sub": "u2"})
    assert [x.row_id for x in got_u1] == ["r1"] and got_u2 == []

    # When the row moves from u1 to u2 (a sparse update of user_id only), then changes again
    env.push(d(row="r1", hlc=t(5), user_id="u2"))
    env.push(d(row="r1", hlc=t(6), title="b"))

    # Then u1 sees it leave exactly once and nothing after; u2 sees it arrive and change
    got_u1, _ = env.drain(c1, 10, {"sub": "u1"})
    got_u2, _ = env.drain(c2, 10, {"sub": "u2"})
    assert [x.values() for x in got_u1] == [{"user_id": "u2"}]
    assert [x.values() for x in got_u2] == [{"user_id": "u2"}, {"title": "b"}]


def test_pull_rules_hide_other_users_rows_and_other_tables_when_filtered() -> None:
    env = Env()
    env.config.put_sync_rules(GW, user_scoped_rules(["todos"]))
    env.push(
        d("INSERT", row="r1", user_id="u1"),
        d("INSERT", row="r2", user_id="u2"),
        d("INSERT", table="notes", row="n1", user_id="u1"),
    )
    got, _ = env.drain(None, 10, {"sub": "u1"})
    assert [(x.table, x.row_id) for x in got] == [("todos", "r1")]
    nobody, _ = env.drain(None, 10, {})
    assert nobody == []


def test_pull_without_rules_or_with_zero_buckets_sees_everything() -> None:
    env = Env()
    env.push(d(row="r1", user_id="u1"), d(table="notes", row="n1", x=1))
    assert len(env.pull(10).deltas) == 2
    from lakesync.core.rules import SyncRules

    env.config.put_sync_rules(GW, SyncRules(1, ()))
    assert len(env.pull(10, {"sub": "nobody"}).deltas) == 2


# -- bad cursors -------------------------------------------------------------------------------------------------


def _b64(obj: Any) -> str:
    raw = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


BAD_CURSORS = {
    "not_base64": "!!!%%%",
    "not_json": _b64(b"\xff\xfe not json"),
    "json_list": _b64([1, 2]),
    "wrong_version": _b64({"v": 2, "p": {}}),
    "no_positions": _b64({"v": 1}),
    "negative_position": _b64({"v": 1, "p": {"default#todos#0": -1}}),
    "bool_position": _b64({"v": 1, "p": {"default#todos#0": True}}),
    "float_position": _b64({"v": 1, "p": {"default#todos#0": 1.5}}),
    "bad_shard_key": _b64({"v": 1, "p": {"todos": 1}}),
    "bad_sub_shard": _b64({"v": 1, "p": {"default#todos#x": 1}}),
    "empty": "",
}


@pytest.mark.parametrize("cursor", list(BAD_CURSORS.values()), ids=list(BAD_CURSORS))
def test_pull_garbage_cursor_is_a_validation_error(cursor: str) -> None:
    env = Env()
    env.push(d(v=1))
    if cursor == "":
        # An empty cursor means "from the start", like no cursor at all
        assert len(env.pull(10, cursor=cursor).deltas) == 1
        return
    with pytest.raises(ValidationError) as err:
        env.pull(10, cursor=cursor)
    assert err.value.status == 400


def test_pull_cursor_of_another_gateway_is_refused() -> None:
    env = Env()
    env.push(d(v=1))
    foreign = encode_cursor({"other-gw#todos#0": 1})
    with pytest.raises(ValidationError, match="another gateway"):
        env.pull(10, cursor=foreign)


def test_pull_cursor_round_trips_positions() -> None:
    positions = {"default#todos#0": 3, "default#a#2": 0, "default#x#1": 2**40}
    assert decode_cursor(encode_cursor(positions), GW) == positions


# -- source adapters ---------------------------------------------------------------------------------------------


class ListSource:
    def __init__(self, name: str, deltas: list[RowDelta], fail: Exception | None = None) -> None:
        self.name = name
        self.deltas = deltas
        self.fail = fail
        self.calls: list[tuple[int, int]] = []

    def query_deltas_since(self, since_hlc: int, limit: int) -> list[RowDelta]:
        self.calls.append((since_hlc, limit))
        if self.fail is not None:
            raise self.fail
        return [x for x in self.deltas if x.hlc > since_hlc][:limit]


def _source_env(source: ListSource) -> Env:
    env = Env()
    env.deps.sources = {source.name: source}
    return env


def test_pull_from_source_pages_with_has_more() -> None:
    deltas = [d("INSERT", table="crm", row=f"a{i}", hlc=t(i), name=f"n{i}") for i in range(5)]
    source = ListSource("crm", deltas)
    env = _source_env(source)

    first = env.pull(3, source="crm")
    second = env.pull(3, source="crm", since=first.deltas[-1].hlc)

    assert _ids(first.deltas) == _ids(deltas[:3]) and first.has_more
    assert _ids(second.deltas) == _ids(deltas[3:]) and not second.has_more
    assert first.cursor is None
    assert source.calls == [(0, 4), (deltas[2].hlc, 4)]
    # The buffer is not involved
    assert env.buffer.list_shards(GW) == []


def test_pull_from_source_applies_sync_rules_to_its_rows() -> None:
    deltas = [d("INSERT", table="crm", row="a", user_id="u1"), d("INSERT", table="crm", row="b", user_id="u2")]
    env = _source_env(ListSource("crm", deltas))
    env.config.put_sync_rules(GW, user_scoped_rules(["crm"]))
    assert [x.row_id for x in env.pull(10, {"sub": "u2"}, source="crm").deltas] == ["b"]


def test_pull_from_unknown_source_is_adapter_not_found() -> None:
    env = _source_env(ListSource("crm", []))
    with pytest.raises(AdapterNotFoundError, match='"nope"') as err:
        env.pull(10, source="nope")
    assert err.value.status == 404


def test_pull_from_failing_source_is_an_adapter_error_not_a_500() -> None:
    env = _source_env(ListSource("crm", [], fail=ConnectionError("db down at 10.0.0.7")))
    with pytest.raises(AdapterError) as err:
        env.pull(10, source="crm")
    assert err.value.status == 502
    assert "ConnectionError" in err.value.message and "10.0.0.7" not in err.value.message


def test_pull_from_source_raising_a_lakesync_error_keeps_it() -> None:
    env = _source_env(ListSource("crm", [], fail=ValidationError("bad since")))
    with pytest.raises(ValidationError, match="bad since"):
        env.pull(10, source="crm")


def _values(deltas: list[RowDelta]) -> list[dict[str, JsonValue]]:
    return [x.values() for x in deltas]


# -- a failed read ends the pull only once its other reads have ended ---------------------------------------------


class OneShardFailsBuffer:
    """Wraps a buffer; log reads of table ``failing`` fail at once, reads of the others answer late and are counted
    when they have answered."""

    def __init__(self, inner: InMemoryBufferStore, failing: str, delay_s: float) -> None:
        self.inner = inner
        self.failing = failing
        self.delay_s = delay_s
        self.answered = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _read(self, shard: ShardId) -> None:
        if shard.table == self.failing:
            raise StorageError("the log read failed")
        time.sleep(self.delay_s)

    def read_log(self, shard: ShardId, after_seq: int, limit: int, *, images: bool = True) -> list[LogEntry]:
        self._read(shard)
        found = self.inner.read_log(shard, after_seq, limit, images=images)
        self.answered += 1
        return found

    def read_log_at(
        self, shard: ShardId, seq: int, limit: int, *, images: bool = True
    ) -> tuple[int | None, list[LogEntry]]:
        self._read(shard)
        found = self.inner.read_log_at(shard, seq, limit, images=images)
        self.answered += 1
        return found


@pytest.mark.parametrize("by", ["cursor", "since"])
def test_pull_whose_read_of_one_shard_fails_raises_once_the_reads_of_the_others_have_ended(by: str) -> None:
    # Given three tables with entries, and a buffer whose reads of the first in shard order fail at once and of the
    # others answer late
    env = Env()
    env.push(*(d(table=table, row="r1", title=table, hlc=t(i)) for i, table in enumerate(("notes", "todos", "tags"))))
    first = env.pull()
    slow = OneShardFailsBuffer(env.buffer, failing="notes", delay_s=0.3)
    env.deps = replace(env.deps, buffer=slow)
    # When a pull reads the shards side by side (from the start, or from a position)
    with pytest.raises(StorageError):
        if by == "cursor":
            env.pull()
        else:
            env.pull(since=int(first.server_hlc) - 1)
    # Then it failed only once the reads of the other two had answered: no request outlives the pull
    assert slow.answered == 2


# -- released buffer: 410 instead of a silent skip ----------------------------------------------------------------


class ReleasingBuffer:
    """Wraps a buffer; the first log read of a shard releases its first ``through_seq`` entries just before it."""

    def __init__(self, inner: InMemoryBufferStore, through_seq: int) -> None:
        self.inner = inner
        self.through_seq = through_seq
        self.released = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _release_once(self, shard: ShardId) -> None:
        if not self.released:
            self.released = True
            self.inner.release_log(shard, self.through_seq)

    def read_log(self, shard: ShardId, after_seq: int, limit: int, *, images: bool = True) -> list[LogEntry]:
        self._release_once(shard)
        return self.inner.read_log(shard, after_seq, limit, images=images)

    def read_log_at(
        self, shard: ShardId, seq: int, limit: int, *, images: bool = True
    ) -> tuple[int | None, list[LogEntry]]:
        self._release_once(shard)
        return self.inner.read_log_at(shard, seq, limit, images=images)

    def read_log_by_commit_hlc(
        self, shard: ShardId, after_commit_hlc: int, limit: int, *, images: bool = True
    ) -> list[LogEntry]:
        self._release_once(shard)
        return self.inner.read_log_by_commit_hlc(shard, after_commit_hlc, limit, images=images)


def _released_env(count: int, through_seq: int) -> tuple[Env, list[LogEntry]]:
    env = Env()
    env.push(*(d("INSERT", row=f"r{i}", hlc=t(i), v=i) for i in range(count)))
    entries = env.log()
    env.buffer.release_log(entries[0].shard, through_seq)
    return env, entries


@pytest.mark.parametrize("position", [0, 1, 3])
def test_pull_cursor_behind_a_release_is_410(position: int) -> None:
    env, entries = _released_env(6, through_seq=4)
    cursor = encode_cursor({entries[0].shard.key: position}) if position else None
    with pytest.raises(CursorExpiredError) as err:
        env.pull(cursor=cursor) if cursor else env.pull()
    assert err.value.status == 410 and "checkpoint" in err.value.message


def test_pull_cursor_at_or_after_a_release_continues_exactly() -> None:
    env, entries = _released_env(6, through_seq=4)
    page = env.pull(cursor=encode_cursor({entries[0].shard.key: 4}))
    assert [x.delta_id for x in page.deltas] == [e.delta.delta_id for e in entries[4:]]


def test_pull_since_behind_a_release_is_410_and_after_it_continues() -> None:
    env, entries = _released_env(6, through_seq=4)
    with pytest.raises(CursorExpiredError):
        env.pull(since=entries[2].commit_hlc)
    page = env.pull(since=entries[3].commit_hlc)
    # (a since the server never handed out: the rows come in the original applier's idempotent DELETE+INSERT form)
    assert [(x.op.value, x.row_id) for x in page.deltas] == [
        (op, e.delta.row_id) for e in entries[4:] for op in ("DELETE", "INSERT")
    ]


def test_pull_since_racing_a_release_is_410_not_a_silent_skip() -> None:
    # Given six entries, and a release of the first four that lands between the pull's check and its log read
    env = Env()
    env.push(*(d("INSERT", row=f"r{i}", hlc=t(i), v=i) for i in range(6)))
    entries = env.log()
    buffer = ReleasingBuffer(env.buffer, through_seq=4)
    env.deps = replace(env.deps, buffer=buffer)

    # When a client pulls since the second entry
    # Then it is told to reload the checkpoint instead of silently missing entries 3 and 4
    with pytest.raises(CursorExpiredError):
        env.pull(since=entries[1].commit_hlc)
    assert buffer.released


def test_pull_cursor_racing_a_release_is_410_not_a_silent_skip() -> None:
    # Given six entries, a cursor at the second, and a release of the first four right before the log read
    env = Env()
    env.push(*(d("INSERT", row=f"r{i}", hlc=t(i), v=i) for i in range(6)))
    entries = env.log()
    cursor = encode_cursor({entries[0].shard.key: 2})
    buffer = ReleasingBuffer(env.buffer, through_seq=4)
    env.deps = replace(env.deps, buffer=buffer)

    # When the client pulls from its cursor
    # Then the log read stops at the gap where entry 3 was, the marks are read because of it, and the client is
    # told to reload the checkpoint rather than getting entries 5 and 6 with 3 and 4 skipped
    with pytest.raises(CursorExpiredError):
        env.pull(cursor=cursor)
    assert buffer.released


class MarkedBuffer:
    """Wraps a buffer whose heads already carry release marks up to ``through_seq`` while the entries are still in
    the log (the flush job marks first, then deletes)."""

    def __init__(self, inner: InMemoryBufferStore, through_seq: int, through_hlc: int) -> None:
        self.inner = inner
        self.mark = (through_seq, through_hlc)
        self.head_reads: list[list[ShardId]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get_heads(
        self, shards: Sequence[ShardId], *, reaching: Mapping[ShardId, int] | None = None
    ) -> dict[ShardId, ShardHead]:
        self.head_reads.append(list(shards))
        heads = self.inner.get_heads(shards, reaching=reaching)
        return {s: replace(h, released_seq=self.mark[0], released_hlc=self.mark[1]) for s, h in heads.items()}


def test_pull_cursor_behind_marks_whose_entries_are_still_there_gets_them_all_then_410() -> None:
    # Given six entries marked released through the fourth, not yet deleted, and a client at the second
    env = Env()
    env.push(*(d("INSERT", row=f"r{i}", hlc=t(i), v=i) for i in range(6)))
    entries = env.log()
    shard = entries[0].shard
    buffer = MarkedBuffer(env.buffer, through_seq=4, through_hlc=entries[3].commit_hlc)
    env.deps = replace(env.deps, buffer=buffer)

    # When it pulls from its cursor, the entries still in the log continue its sequence: it gets 3..6, none skipped
    page = env.pull(cursor=encode_cursor({shard.key: 2}))
    assert [x.delta_id for x in page.deltas] == [e.delta.delta_id for e in entries[2:]]
    assert decode_cursor(page.cursor, GW) == {shard.key: 6}

    # And once the entries are deleted, a client still at the second is told to reload the checkpoint
    env.buffer.release_log(shard, 4)
    with pytest.raises(CursorExpiredError):
        env.pull(cursor=encode_cursor({shard.key: 2}))


def test_pull_cursor_reads_release_marks_only_for_shards_that_read_empty() -> None:
    # Given two tables, one with entries after the client's position and one it has consumed entirely
    env = Env()
    env.push(d("INSERT", row="a", hlc=t(1), v=1, table="todos"), d("INSERT", row="b", hlc=t(2), v=2, table="notes"))
    by_table = {e.shard.table: e.shard for e in env.log()}
    buffer = MarkedBuffer(env.buffer, through_seq=0, through_hlc=0)
    env.deps = replace(env.deps, buffer=buffer)

    # When it pulls, only the consumed shard's head is read (to tell "caught up" from "released")
    page = env.pull(cursor=encode_cursor({by_table["notes"].key: 1}))
    assert [x.table for x in page.deltas] == ["todos"]
    assert buffer.head_reads == [[by_table["notes"]]]


class UnseenCommitBuffer:
    """Wraps a buffer whose first ``hidden_reads`` log reads do not show the entries after ``visible_seq`` while its
    heads record them: a Query racing a transaction that has updated the head but whose log item is not visible yet.
    Records the sleeps between reads."""

    def __init__(self, inner: InMemoryBufferStore, visible_seq: int, hidden_reads: int) -> None:
        self.inner = inner
        self.visible_seq = visible_seq
        self.hidden_reads = hidden_reads
        self.by_hlc_reads = 0
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _shown(self, entries: list[LogEntry]) -> list[LogEntry]:
        self.reads += 1
        return [e for e in entries if e.seq <= self.visible_seq] if self.reads <= self.hidden_reads else entries

    def read_log(self, shard: ShardId, after_seq: int, limit: int, *, images: bool = True) -> list[LogEntry]:
        return self._shown(self.inner.read_log(shard, after_seq, limit, images=images))

    def read_log_at(
        self, shard: ShardId, seq: int, limit: int, *, images: bool = True
    ) -> tuple[int | None, list[LogEntry]]:
        hlc, entries = self.inner.read_log_at(shard, seq, limit, images=images)
        return hlc, self._shown(entries)

    def read_log_by_commit_hlc(
        self, shard: ShardId, after_commit_hlc: int, limit: int, *, images: bool = True
    ) -> list[LogEntry]:
        self.by_hlc_reads += 1
        return self._shown(self.inner.read_log_by_commit_hlc(shard, after_commit_hlc, limit, images=images))


def _unseen_commit_env(hidden_reads: int) -> tuple[Env, UnseenCommitBuffer, int, list[float]]:
    """One entry pulled with ``since``, then a later commit the log reads do not show at first; the client comes back
    long after the re-read window. Returns the env, its buffer, the client's ``since`` and the sleeps taken."""
    env = Env(since_window_ms=100)
    env.push(d("INSERT", row="old", hlc=t(0), v=0))
    since = env.pull(100, since=0).server_hlc
    env.wall = T0 + 10_000
    env.push(d("INSERT", row="new", hlc=t(10_000), v=1))
    env.wall = T0 + 20_000
    buffer = UnseenCommitBuffer(env.buffer, visible_seq=1, hidden_reads=hidden_reads)
    sleeps: list[float] = []
    env.deps = replace(env.deps, buffer=buffer, sleep=sleeps.append)
    return env, buffer, since, sleeps


def test_pull_since_waits_for_a_commit_its_head_records_and_the_log_does_not_show_yet() -> None:
    # Given a commit after the client's `since` whose log item the first two reads do not show
    env, _buffer, since, sleeps = _unseen_commit_env(hidden_reads=2)

    # When the client pulls since its serverHlc
    page = env.pull(100, since=since)

    # Then it gets the commit (starting at the head would have skipped it), after waiting for it briefly
    assert [x.row_id for x in page.deltas if x.op.value != "DELETE"] == ["new"]
    assert sleeps == [0.005, 0.01]


def test_pull_since_whose_log_never_shows_a_recorded_commit_is_503_not_a_skip() -> None:
    # Given a commit after the client's `since` that the log reads never show
    env, buffer, since, sleeps = _unseen_commit_env(hidden_reads=1_000_000)

    # When the client pulls since its serverHlc, it is told to retry (503) rather than handed a position past it
    with pytest.raises(StorageBusyError) as err:
        env.pull(100, since=since)
    assert err.value.status == 503 and err.value.code == "STORAGE_BUSY"
    assert buffer.by_hlc_reads == 8 and len(sleeps) == 7 and sleeps == sorted(sleeps)


def test_pull_since_with_nothing_after_it_reads_the_log_once() -> None:
    # Given a client whose `since` is past every commit (the head's last commit HLC is at or below it)
    env, buffer, since, sleeps = _unseen_commit_env(hidden_reads=0)
    since = env.pull(100, since=since).server_hlc
    buffer.by_hlc_reads = 0

    # When it pulls again, one read by commit HLC settles its position: no waiting, nothing delivered
    env.wall = T0 + 40_000
    page = env.pull(100, since=since)
    assert page.deltas == () and not page.has_more
    assert buffer.by_hlc_reads == 1 and sleeps == []


class HidingRegistry:
    """A buffer whose registry does not list ``hidden`` (its log is there); records the shards whose log is read."""

    def __init__(self, inner: InMemoryBufferStore, hidden: ShardId) -> None:
        self.inner = inner
        self.hidden = hidden
        self.log_reads: list[ShardId] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def list_shards(self, gateway: str) -> list[ShardId]:
        return [s for s in self.inner.list_shards(gateway) if s != self.hidden]

    def read_log(self, shard: ShardId, after_seq: int, limit: int, *, images: bool = True) -> list[LogEntry]:
        self.log_reads.append(shard)
        return self.inner.read_log(shard, after_seq, limit, images=images)

    def read_log_at(
        self, shard: ShardId, seq: int, limit: int, *, images: bool = True
    ) -> tuple[int | None, list[LogEntry]]:
        self.log_reads.append(shard)
        return self.inner.read_log_at(shard, seq, limit, images=images)


def test_pull_cursor_serves_only_the_shards_the_registry_holds() -> None:
    # Given two tables with entries, and a registry that does not list one of them
    env = Env()
    env.push(d("INSERT", row="a", hlc=t(1), v=1, table="todos"), d("INSERT", row="b", hlc=t(2), v=2, table="notes"))
    env.push(d("INSERT", row="c", hlc=t(3), v=3, table="notes"))
    by_table = {e.shard.table: e.shard for e in env.log()}
    buffer = HidingRegistry(env.buffer, hidden=by_table["notes"])
    env.deps = replace(env.deps, buffer=buffer)
    # When a client whose cursor names the unlisted shard pulls (its log is read ahead of the registry)
    page = env.pull(cursor=encode_cursor({by_table["notes"].key: 1}))
    # Then only the listed shard's entries are served, and the cursor keeps the other's position as it was
    assert [x.table for x in page.deltas] == ["todos"]
    assert decode_cursor(page.cursor or "", GW)[by_table["notes"].key] == 1
    assert by_table["notes"] in buffer.log_reads


def test_pull_cursor_reads_its_shards_while_the_rules_and_registry_are_read() -> None:
    # Given a client with a cursor, and a basis reader that answers only once the cursor's shard is being read
    env = Env()
    env.push(*(d("INSERT", row=f"r{i}", hlc=t(i), v=i) for i in range(3)))
    shard = env.log()[0].shard
    log_read = threading.Event()
    inner_buffer = env.buffer

    class SignallingBuffer(HidingRegistry):
        def read_log(self, shard: ShardId, after_seq: int, limit: int, *, images: bool = True) -> list[LogEntry]:
            log_read.set()
            return super().read_log(shard, after_seq, limit, images=images)

        def read_log_at(
            self, shard: ShardId, seq: int, limit: int, *, images: bool = True
        ) -> tuple[int | None, list[LogEntry]]:
            log_read.set()
            return super().read_log_at(shard, seq, limit, images=images)

    class WaitingBasis:
        def read_pull_basis(self, gateway: str) -> PullBasis:
            overlapped.append(log_read.wait(timeout=10))
            return PullBasis(env.config.get_sync_rules(gateway), tuple(inner_buffer.list_shards(gateway)))

    overlapped: list[bool] = []
    buffer = SignallingBuffer(inner_buffer, hidden=ShardId(GW, "none", 0))
    env.deps = replace(env.deps, buffer=buffer, pull_basis=WaitingBasis())
    # When it pulls
    page = env.pull(cursor=encode_cursor({shard.key: 1}))
    # Then its shard's log read was under way before the basis answered, and the page is the entries after it
    assert overlapped == [True]
    assert [x.row_id for x in page.deltas] == ["r1", "r2"]


# -- a log that regressed behind a cursor (a crash of a non-durable buffer, a restore) -------------------------------


@pytest.mark.parametrize("new_entries", [2, 5, 8], ids=["behind", "level", "past"])
def test_pull_cursor_into_a_regressed_log_is_410_not_a_silent_skip(new_entries: int) -> None:
    # Given a client whose cursor stands after five entries
    env = Env()
    env.push(*(d("INSERT", row=f"r{i}", hlc=t(i), v=i) for i in range(5)))
    page = env.pull(100, cursor="")
    assert len(page.deltas) == 5 and page.cursor is not None
    # When the buffer comes back from an older state and takes new commits at the same sequence numbers
    env.buffer = InMemoryBufferStore()
    env.deps = replace(env.deps, buffer=env.buffer)
    env.wall += 5000
    env.push(*(d("INSERT", row=f"new{i}", hlc=t(5000 + i), v=i) for i in range(new_entries)))
    # Then the cursor is refused (reload the checkpoint) instead of skipping the new entries it stands past
    with pytest.raises(CursorExpiredError) as err:
        env.pull(100, cursor=page.cursor)
    assert "no longer matches" in err.value.message


def test_pull_cursor_marks_follow_the_pages_and_an_unchanged_log_passes() -> None:
    env = Env()
    env.push(*(d("INSERT", row=f"r{i}", hlc=t(i), v=i) for i in range(6)))
    first = env.pull(3, cursor="")
    assert first.has_more and first.cursor is not None
    second = env.pull(3, cursor=first.cursor)
    assert [x.row_id for x in second.deltas] == ["r3", "r4", "r5"]
    env.push(d(row="r9", hlc=t(99), v=9))
    assert second.cursor is not None
    assert [x.row_id for x in env.pull(3, cursor=second.cursor).deltas] == ["r9"]


class LooksOnlyAfter:
    """A buffer whose cursor reads do not look at the entry a cursor stands on when they find nothing after it (as
    DynamoDB with first keys: the chunk after a position records the commit HLC of the entry before it); the first
    ``hide`` reads, and every ``hide_every``-th, find nothing after it either (a Query that missed chunks being
    written). Records the shards whose heads are read."""

    def __init__(self, inner: InMemoryBufferStore, hide: int = 0, *, hide_every: int = 0) -> None:
        self.inner = inner
        self.hide = hide
        self.hide_every = hide_every
        self.reads_at = 0
        self.head_reads: list[list[ShardId]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get_heads(
        self, shards: Sequence[ShardId], *, reaching: Mapping[ShardId, int] | None = None
    ) -> dict[ShardId, ShardHead]:
        self.head_reads.append(list(shards))
        return self.inner.get_heads(shards, reaching=reaching)

    def read_log_at(
        self, shard: ShardId, seq: int, limit: int, *, images: bool = True
    ) -> tuple[int | None, list[LogEntry]]:
        hlc, entries = self.inner.read_log_at(shard, seq, limit, images=images)
        self.reads_at += 1
        if self.hide > 0 or (self.hide_every and self.reads_at % self.hide_every == 0):
            self.hide = max(0, self.hide - 1)
            return None, []
        return (hlc, entries) if entries else (None, [])


def _caught_up(env: Env, count: int) -> tuple[str, LooksOnlyAfter]:
    env.push(*(d("INSERT", row=f"r{i}", hlc=t(i), v=i) for i in range(count)))
    cursor = env.pull(100, cursor="").cursor
    assert cursor is not None
    buffer = LooksOnlyAfter(env.buffer)
    env.deps = replace(env.deps, buffer=buffer)
    return cursor, buffer


def test_pull_cursor_at_the_log_end_is_checked_by_the_head_when_the_read_did_not_look() -> None:
    # Given a caught-up client, and a buffer that does not look at the entry a cursor stands on when nothing follows
    env = Env()
    cursor, buffer = _caught_up(env, 3)

    # When it pulls again, nothing is delivered and its position is checked by the head (read once)
    page = env.pull(100, cursor=cursor)
    assert page.deltas == () and not page.has_more
    assert len(buffer.head_reads) == 1

    # And when the buffer comes back from an older state with as many entries, the head's last commit HLC is not
    # the one the cursor recorded: refused, not taken as caught up
    env.buffer = InMemoryBufferStore()
    env.wall += 5000
    env.deps = replace(env.deps, buffer=env.buffer)
    env.push(*(d("INSERT", row=f"new{i}", hlc=t(5000 + i), v=i) for i in range(3)))
    env.deps = replace(env.deps, buffer=LooksOnlyAfter(env.buffer))
    with pytest.raises(CursorExpiredError) as err:
        env.pull(100, cursor=cursor)
    assert "no longer matches" in err.value.message


def test_pull_cursor_behind_a_head_whose_entries_the_first_read_missed_reads_them_from_its_entry() -> None:
    # Given a caught-up client, then two more entries, and a first read that shows nothing after its position
    env = Env()
    cursor, buffer = _caught_up(env, 3)
    env.push(d("INSERT", row="r7", hlc=t(7), v=7), d("INSERT", row="r8", hlc=t(8), v=8))
    buffer.hide = 1

    # When it pulls, the head shows entries past its position: they are read from its entry (checked) and served
    page = env.pull(100, cursor=cursor)
    assert [x.row_id for x in page.deltas] == ["r7", "r8"] and not page.has_more

    # And a log that regressed behind such a position is refused the same way
    env.buffer = InMemoryBufferStore()
    env.wall += 5000
    env.deps = replace(env.deps, buffer=env.buffer)
    env.push(*(d("INSERT", row=f"new{i}", hlc=t(5000 + i), v=i) for i in range(5)))
    env.deps = replace(env.deps, buffer=LooksOnlyAfter(env.buffer, hide=1))
    with pytest.raises(CursorExpiredError):
        env.pull(100, cursor=page.cursor)


def _caught_up_since(env: Env, count: int) -> tuple[int, LooksOnlyAfter]:
    """An original client with a session that pulled everything, and the ``since`` it pulls with next."""
    env.deps = replace(env.deps, since_sessions=InMemorySinceSessions())
    env.push(*(d("INSERT", row=f"r{i}", hlc=t(i), v=i) for i in range(count)))
    env.wall += 60_000  # past the re-read window, so the first page is certain
    first = env.pull(100, since=0, client_id="orig")
    assert _rows(first.deltas) == {f"r{i}" for i in range(count)} and not first.has_more
    buffer = LooksOnlyAfter(env.buffer)
    env.deps = replace(env.deps, buffer=buffer)
    return first.server_hlc, buffer


def test_pull_since_at_the_log_end_reads_after_its_position_and_checks_only_the_head() -> None:
    # Given an original client whose session position is at the end of the log, and a buffer that does not look at
    # the entry a position stands on when nothing follows it (first keys)
    env = Env()
    since, buffer = _caught_up_since(env, 3)

    # When it pulls again with the same since, nothing is delivered, it keeps its since, and the heads are read once:
    # for the shard that read nothing, not before the read as well
    page = env.pull(100, since=since, client_id="orig")
    assert page.deltas == () and page.server_hlc == since and not page.has_more
    assert buffer.head_reads == [[ShardId(GW, "todos")]]


def test_pull_since_behind_a_head_whose_entries_the_first_read_missed_reads_them_from_its_entry() -> None:
    # Given a caught-up original client, then two more entries, and a first read that shows nothing after its position
    env = Env()
    since, buffer = _caught_up_since(env, 3)
    env.push(d("INSERT", row="r7", hlc=t(60_000), v=7), d("INSERT", row="r8", hlc=t(60_001), v=8))
    buffer.hide = 1

    # When it pulls, the head shows entries past its position: they are read from its entry and delivered
    page = env.pull(100, since=since, client_id="orig")
    assert [x.row_id for x in page.deltas] == ["r7", "r8"] and not page.has_more

    # And the session moved past them: the next pull is empty
    again = env.pull(100, since=page.server_hlc, client_id="orig")
    assert again.deltas == () and again.server_hlc == page.server_hlc


@pytest.mark.parametrize("kinds", ["", "s", "sss", "sd", "ds", "sw", "d"])
def test_a_page_renders_as_each_of_its_deltas_rendered_in_order(kinds: str) -> None:
    # Given a page of stored entries ("s", their wire JSON as stored), entries without it ("w") and deltas ("d")
    from lakesync.core.canonical import js_stringify

    items: list[LogEntry | RowDelta] = []
    for i, kind in enumerate(kinds):
        delta = make_delta("INSERT", table="todos", row_id=f"r{i}", client_id="c", hlc=encode(T0 + i, 0),
                           columns={"title": f"t\u00e9{i}", "n": i})  # fmt: skip
        wire = js_stringify(delta.to_json())
        shard = ShardId(GW, "todos", 0)
        if kind == "d":
            items.append(delta)
        else:
            items.append(LogEntry(shard, i + 1, i + 1, delta, None, None, len(wire), wire if kind == "s" else None))
    page = PullResult(tuple(items), 7, False, None)
    # When it is rendered as a response is
    text = js_stringify(page.to_json())  # type: ignore[arg-type]
    # Then its deltas are each delta's wire JSON, in order (an empty page: an empty list)
    body = json.loads(text)
    assert body["deltas"] == [json.loads(js_stringify(d.to_json())) for d in page.deltas]
    assert text.startswith('{"deltas":[' + ",".join(js_stringify(d.to_json()) for d in page.deltas) + "]")
