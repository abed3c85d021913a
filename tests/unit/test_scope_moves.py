"""Rows a write moves across a client's scope (gateway/scope_moves.py): a row entering by a sparse update reaches the
client whole, with its real versions; a row leaving by an update is dropped; the row index lagging behind the change
is a 503, never an older state."""

from __future__ import annotations

from typing import Any

import pytest

from lakesync.core.delta import DeltaOp
from lakesync.core.errors import StorageBusyError
from lakesync.core.hlc import HLC
from lakesync.core.log import StoredRow
from lakesync.core.merge import fold, merge_all
from lakesync.core.messages import SyncPush
from lakesync.core.rules import parse_sync_rules
from lakesync.core.scope import resolve_scope
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.memory import InMemoryActionStore, InMemoryBufferStore, InMemoryConfigStore, InMemorySubscriptions
from lakesync.gateway.pull import pull
from lakesync.gateway.push import push
from lakesync.gateway.scope_moves import shape_moves
from tests.factories import T0, at, insert, update

GW = "gw"
RED = {"sub": "ann", "team": "red"}
RULES = {
    "version": 1,
    "buckets": [
        {"name": "team", "tables": ["tasks"], "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}]}
    ],
}


def gateway() -> GatewayDeps:
    wall = T0
    deps = GatewayDeps(
        InMemoryBufferStore(),
        InMemoryConfigStore(),
        InMemoryActionStore(),
        clock=HLC(lambda: wall),
        wall_ms=lambda: wall,
        subscriptions=InMemorySubscriptions(),
    )
    deps.config.put_sync_rules(GW, parse_sync_rules(RULES))
    return deps


def write(deps: GatewayDeps, *deltas: Any) -> None:
    push(deps, GW, SyncPush("w", tuple(deltas)), client_id="w", trusted=True)


def test_a_row_entering_by_a_sparse_update_arrives_whole_with_its_versions() -> None:
    deps = gateway()
    write(deps, insert("t1", hlc=at(1), table="tasks", client="w", team="blue", title="plan", n=1))
    first = pull(deps, GW, limit=100, claims=RED, subscriber="ann")
    assert first.deltas == ()
    # When an update of the team alone moves the row into the client's scope
    write(deps, update("t1", hlc=at(2), table="tasks", client="w", team="red"))
    page = pull(deps, GW, limit=100, claims=RED, cursor=first.cursor, subscriber="ann")
    # Then the client receives the row whole, each column at its real version: the server's state
    state = merge_all(None, list(page.deltas))[0]
    assert state is not None and state.values() == {"team": "red", "title": "plan", "n": 1}
    stored = deps.buffer.get_rows(GW, [("tasks", "t1")])[("tasks", "t1")]
    assert state == stored.state
    # And a later write older than the title's version cannot win on the client where it lost on the server
    late = update("t1", hlc=at(0, 5), table="tasks", client="x", title="stale")
    assert merge_all(state, [late])[0] == merge_all(stored.state, [late])[0]


def test_a_row_leaving_by_an_update_is_dropped_not_sent() -> None:
    deps = gateway()
    write(deps, insert("t1", hlc=at(1), table="tasks", client="w", team="red", title="plan"))
    first = pull(deps, GW, limit=100, claims=RED, subscriber="ann")
    assert [d.row_id for d in first.deltas] == ["t1"]
    write(deps, update("t1", hlc=at(2), table="tasks", client="w", team="blue", title="secret"))
    page = pull(deps, GW, limit=100, claims=RED, cursor=first.cursor, subscriber="ann")
    (drop,) = page.deltas
    assert drop.op is DeltaOp.DELETE and drop.hlc == 0 and drop.client_id == "ann"
    assert "secret" not in str(page.to_json())  # the values it may no longer read are not sent


def test_changes_within_the_scope_and_deletes_are_sent_as_they_are() -> None:
    deps = gateway()
    write(deps, insert("t1", hlc=at(1), table="tasks", client="w", team="red", title="a"))
    write(deps, update("t1", hlc=at(2), table="tasks", client="w", title="b"))
    page = pull(deps, GW, limit=100, claims=RED, subscriber="ann")
    assert [d.op for d in page.deltas] == [DeltaOp.INSERT, DeltaOp.UPDATE]
    assert fold(list(page.deltas)) == deps.buffer.get_rows(GW, [("tasks", "t1")])[("tasks", "t1")].state


class LaggingRows:
    """A buffer whose row index holds a row at an older version than the log (its rows not written yet)."""

    def __init__(self, inner: InMemoryBufferStore, behind: int) -> None:
        self.inner = inner
        self.behind = behind

    def get_rows(self, gateway: str, rows: Any) -> dict[tuple[str, str], StoredRow]:
        got = self.inner.get_rows(gateway, rows)
        return {k: StoredRow(v.state, v.version - self.behind, v.recent) for k, v in got.items()}


def test_a_row_index_behind_the_change_is_a_503_never_an_older_state() -> None:
    deps = gateway()
    write(deps, insert("t1", hlc=at(1), table="tasks", client="w", team="blue", title="plan"))
    write(deps, update("t1", hlc=at(2), table="tasks", client="w", team="red"))
    shard = deps.buffer.list_shards(GW)[0]
    entries = deps.buffer.read_log(shard, 0, 10, images=True)
    scope = resolve_scope(deps.config.get_sync_rules(GW), RED)
    visible = [e for e in entries if scope.change_visible("tasks", e.before, e.after)]
    shaped = shape_moves(LaggingRows(deps.buffer, 0), GW, visible, scope, "ann")  # type: ignore[arg-type]
    assert fold([d for d in shaped if not hasattr(d, "shard")]) is not None
    with pytest.raises(StorageBusyError):
        shape_moves(LaggingRows(deps.buffer, 1), GW, visible, scope, "ann")  # type: ignore[arg-type]
