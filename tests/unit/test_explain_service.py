"""The explain service (lakesync.gateway.explain) over the in-memory stores: the history is the lake's records and the
buffer's log after the flush mark (or, without a lake, what the buffer still holds, said to be incomplete once it
released entries); the client's position comes from its cursor or its since session; the route's parameters."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lakesync.core import hlc
from lakesync.core.errors import ValidationError
from lakesync.core.log import ShardId
from lakesync.core.messages import SyncPush
from lakesync.core.row_history import HistoryDelta, LakeRow
from lakesync.core.rules import parse_sync_rules
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.explain import ExplainQuery, explain_row, parse_query, parse_time
from lakesync.gateway.memory import (
    InMemoryActionStore,
    InMemoryBufferStore,
    InMemoryConfigStore,
    InMemorySinceSessions,
    InMemorySubscriptions,
)
from lakesync.gateway.pull import pull
from lakesync.gateway.push import push
from tests.factories import insert, update

GW = "default"
SHARD = ShardId(GW, "todos")
NOW = 1_765_000_000_000


class FakeLake:
    """A lake holding the buffer's first ``flushed`` entries of the row, flushed at a fixed time."""

    def __init__(self, entries: list[HistoryDelta]) -> None:
        self.entries = entries

    def read_row(self, gateway: str, table: str, row_id: str) -> LakeRow:
        return LakeRow(tuple(replace(e, flushed_ms=NOW + 1) for e in self.entries))


@pytest.fixture
def deps() -> GatewayDeps:
    deps = GatewayDeps(
        InMemoryBufferStore(),
        InMemoryConfigStore(),
        InMemoryActionStore(),
        wall_ms=lambda: NOW + 10_000,
        since_sessions=InMemorySinceSessions(),
        subscriptions=InMemorySubscriptions(),
    )
    deps.clock = hlc.HLC(lambda: NOW)
    deps.config.put_sync_rules(
        GW, parse_sync_rules({"version": 3, "buckets": [{"name": "all", "tables": [], "filters": []}]})
    )
    for client, delta in (
        ("bob", insert("t1", hlc=hlc.encode(NOW, 1), client="bob", title="plan", team="red")),
        ("carol", update("t1", hlc=hlc.encode(NOW, 2), client="carol", title="plan v2")),
        ("bob", insert("t2", hlc=hlc.encode(NOW, 3), client="bob", title="other")),
        ("bob", update("t1", hlc=hlc.encode(NOW, 4), client="bob", team="blue")),
    ):
        push(deps, GW, SyncPush(client, (delta,)), client_id=client)
    return deps


def _flush(deps: GatewayDeps, through: int) -> list[HistoryDelta]:
    """Mark the shard flushed through ``through`` (as the flush job's head update does) and give the row's entries."""
    buffer = deps.buffer
    assert isinstance(buffer, InMemoryBufferStore)
    buffer._heads[SHARD] = replace(buffer._heads[SHARD], flushed_seq=through)  # the flush job's conditional update
    entries = buffer.read_log(SHARD, 0, through, images=False)
    return [HistoryDelta(e.delta, SHARD.key, e.seq, e.commit_hlc) for e in entries if e.delta.row_id == "t1"]


def test_the_history_is_the_lakes_records_and_the_unflushed_tail(deps):
    # Given the first three entries flushed to the lake (two of the row's), then released from the buffer
    lake = FakeLake(_flush(deps, 3))
    deps.buffer.release_log(SHARD, 3)
    # When explained with the lake, and without it
    whole = explain_row(deps, GW, ExplainQuery("alice", "todos", "t1"), lake)
    part = explain_row(deps, GW, ExplainQuery("alice", "todos", "t1"))
    # Then with the lake the history is whole: two flushed entries and the unflushed fourth; the index agrees
    assert [(w.seq, w.flushed_ms is not None) for w in whole.history] == [(1, True), (2, True), (4, False)]
    assert whole.history_complete and whole.storage.unflushed == 1 and whole.storage.index_agrees is True
    assert whole.values == {"title": "plan v2", "team": "blue"} and whole.scopes[0].rules_version == 3
    # And without it only the fourth entry is left, and the answer says the history is incomplete
    assert [w.seq for w in part.history] == [4] and not part.history_complete
    assert part.storage.index_agrees is None and any("lake was not read" in n for n in part.notes)


def test_the_position_is_the_cursor_given_else_the_since_session(deps):
    # Given alice's since pull, handed everything
    page = pull(deps, GW, limit=100, claims={"sub": "alice"}, since=0, client_id="alice")
    assert page.deltas
    # When explained without a cursor, then with a cursor standing at entry 1
    by_session = explain_row(deps, GW, ExplainQuery("alice", "todos", "t1"))
    cursor = pull(deps, GW, limit=1, claims={"sub": "zed"}, client_id="zed").cursor
    by_cursor = explain_row(deps, GW, ExplainQuery("alice", "todos", "t1", cursor=cursor))
    # Then the session's handout delivered the row's last change (entry 4); the one-entry cursor did not
    assert by_session.delivery.position_source == "since-handed-out"
    assert by_session.delivery.delivered is True and by_session.delivery.last_visible.seq == 4
    assert by_cursor.delivery.position_source == "cursor" and by_cursor.delivery.delivered is False


def test_the_query_parameters_are_checked():
    query = parse_query({"client": "c", "table": "todos", "row": "r", "claims": '{"team": ["a"]}', "at": "1000"})
    assert (query.claims, query.at_ms) == ({"team": ["a"]}, 1000)
    assert parse_time("1970-01-01T00:00:01Z") == 1000 == parse_time("1970-01-01T00:00:01")
    for bad in ({"client": "c", "table": "t"}, {"client": "c", "table": "t", "row": "r", "claims": "{"}):
        with pytest.raises(ValidationError):
            parse_query(bad)
    for bad_time in ("yesterday", "9" * 30, "١٢"):
        with pytest.raises(ValidationError):
            parse_time(bad_time)
