"""The model test of issue 43: random rules versions, subscriptions, membership rows, writes and pulls for several
clients; every client that catches up holds exactly the fold of the rows its scope covers now, and none ever had to
resync (no 410, no checkpoint reload).

The gateway runs on the in-memory stores with the real membership reader
(:class:`~lakesync.gateway.membership_view.GatewayMemberships`): membership rows are ordinary rows written through the
push and read back from the log and the checkpoints, as a deployment reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakesync.core.canonical import JsonValue
from lakesync.core.delta import DeltaOp, RowDelta
from lakesync.core.errors import LakeSyncError
from lakesync.core.filters import InMemoryMemberships
from lakesync.core.hlc import HLC
from lakesync.core.merge import RowState, fold, merge_all
from lakesync.core.messages import SyncPush
from lakesync.core.rules import parse_sync_rules
from lakesync.core.scope import resolve_scope
from lakesync.gateway import subscriptions as subs
from lakesync.gateway.checkpoint import encode_row, write_checkpoint
from lakesync.gateway.cursor import decode_cursor
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.membership_view import GatewayMemberships
from lakesync.gateway.memory import (
    InMemoryActionStore,
    InMemoryBufferStore,
    InMemoryConfigStore,
    InMemoryObjectStore,
    InMemorySubscriptions,
)
from lakesync.gateway.pull import pull
from lakesync.gateway.push import push
from tests.factories import T0, at, delete, insert, update

GW = "gw"
CLIENTS = {"ann": {"sub": "ann", "team": "red"}, "bob": {"sub": "bob", "team": "blue"}, "cy": {"sub": "cy"}}
PROJECTS = ("p0", "p1", "p2", "p3")
MEMBER_OF = {"table": "members", "column": "project", "where": [{"column": "user", "op": "eq", "value": "jwt:sub"}]}
STREAM = {
    "name": "project",
    "table": "tasks",
    "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
    "params": {"project": {"subscription": {"membership": MEMBER_OF}}},
    "ttlSeconds": {"default": 60},
}
OPEN_STREAM = {**STREAM, "name": "any", "params": {"project": {"subscription": {"allowed": list(PROJECTS)}}}}
TEAM = {"name": "team", "tables": ["tasks"], "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}]}
MINE = {"name": "mine", "tables": ["tasks"], "filters": [{"column": "project_id", "op": "in", "membership": MEMBER_OF}]}
OWN_MEMBERSHIPS = {
    "name": "own",
    "tables": ["members"],
    "filters": [{"column": "user", "op": "eq", "value": "jwt:sub"}],
}
VERSIONS: tuple[dict[str, Any], ...] = (
    {"version": 1, "buckets": [TEAM], "streams": [STREAM, OPEN_STREAM]},
    {"version": 2, "buckets": [MINE, OWN_MEMBERSHIPS], "streams": [OPEN_STREAM]},
    {"version": 3, "buckets": [], "streams": [STREAM]},
    {"version": 4, "buckets": [TEAM, MINE]},
    {"version": 5, "buckets": []},
)


class Gateway:
    """A gateway on the in-memory stores with the real membership reader, its trusted writer, and its clients."""

    def __init__(self, page_bytes: int) -> None:
        self.wall = T0
        self.deps = GatewayDeps(
            InMemoryBufferStore(),
            InMemoryConfigStore(),
            InMemoryActionStore(),
            settings=GatewaySettings(max_page_bytes=page_bytes),
            clock=HLC(lambda: self.wall),
            wall_ms=lambda: self.wall,
            sleep=lambda _: None,
            objects=InMemoryObjectStore(),
            subscriptions=InMemorySubscriptions(),
        )
        self.deps.memberships = GatewayMemberships(self.deps)
        self.save_rules(0)
        self.server: dict[tuple[str, str], list[RowDelta]] = {}
        self.clients = {name: Client(self, name, claims) for name, claims in CLIENTS.items()}

    def save_rules(self, version: int) -> None:
        self.deps.config.put_sync_rules(GW, parse_sync_rules(VERSIONS[version]))

    def write(self, table: str, row: str, **values: JsonValue) -> None:
        """Insert the row, or update its values (``{}``: delete it)."""
        self.wall += 1
        key = (table, row)
        held = fold(self.server[key]) if key in self.server else None
        hlc = at(self.wall - T0)
        if not values:
            if held is None or held.values() is None:
                return
            d = delete(row, hlc=hlc, table=table, client="w")
        elif held is None or held.values() is None:
            d = insert(row, hlc=hlc, table=table, client="w", **values)
        else:
            d = update(row, hlc=hlc, table=table, client="w", **values)
        push(self.deps, GW, SyncPush("w", (d,)), client_id="w", trusted=True)
        self.server.setdefault(key, []).append(d)

    def live(self) -> dict[tuple[str, str], dict[str, JsonValue]]:
        out = {}
        for key, deltas in self.server.items():
            state = fold(deltas)
            if state is not None and (values := state.values()) is not None:
                out[key] = values
        return out

    def checkpoint_and_release(self) -> None:
        """A checkpoint at the heads, then the log released through it (as the flush job does), once every client
        is caught up (a client behind a release reloads: not what is tested here)."""
        if not all(c.caught_up() for c in self.clients.values()):
            return
        buffer = self.deps.buffer
        heads = buffer.get_heads(buffer.list_shards(GW))
        if not heads:
            return
        write_checkpoint(
            self.deps.objects,  # type: ignore[arg-type]
            gateway=GW,
            checkpoint_id=f"{self.wall:013d}-{len(self.server):08x}",
            created_at_ms=self.wall,
            positions={s.key: h.seq for s, h in heads.items()},
            server_hlc=at(self.wall - T0),
            tables=sorted({s.table for s in heads}),
            rows=(encode_row(s) for ds in self.server.values() if (s := fold(ds)) is not None),
            chunk_bytes=300,
        )
        for shard, head in heads.items():
            buffer.release_log(shard, head.seq)  # type: ignore[attr-defined]


class Client:
    """One client following its cursor, folding what it pulls (a ``DELETE`` at HLC 0 drops the row)."""

    def __init__(self, gateway: Gateway, name: str, claims: Mapping[str, str]) -> None:
        self.gw = gateway
        self.name = name
        self.claims = dict(claims)
        self.cursor: str | None = None
        self.replica: dict[tuple[str, str], RowState] = {}

    def subscribe(self, stream: str, project: str) -> None:
        try:
            subs.subscribe(self.gw.deps, GW, self.name, self.claims, {"stream": stream, "params": {"project": project}})
        except LakeSyncError as exc:
            assert exc.status in (403, 404), exc  # not a member, or no such stream in this version

    def unsubscribe(self, index: int) -> None:
        held = subs.list_subscriptions(self.gw.deps, GW, self.name)
        if held:
            subs.unsubscribe(self.gw.deps, GW, self.name, held[index % len(held)].id)

    def pull(self, limit: int) -> bool:
        page = pull(self.gw.deps, GW, limit=limit, claims=self.claims, cursor=self.cursor, subscriber=self.name)
        for d in page.deltas:
            key = (d.table, d.row_id)
            if d.op is DeltaOp.DELETE and d.hlc == 0:
                self.replica.pop(key, None)
            else:
                self.replica[key] = merge_all(self.replica.get(key), [d])[0]  # type: ignore[assignment]
        self.cursor = page.cursor
        return page.has_more

    def catch_up(self, limit: int) -> None:
        for _ in range(2000):
            if not self.pull(limit):
                return
        raise AssertionError(f"{self.name} never caught up")

    def caught_up(self) -> bool:
        buffer = self.gw.deps.buffer
        heads = {s.key: h.seq for s, h in buffer.get_heads(buffer.list_shards(GW)).items()}
        return self.cursor is not None and decode_cursor(self.cursor, GW) == heads

    def held(self) -> dict[tuple[str, str], dict[str, JsonValue]]:
        return {k: v for k, s in self.replica.items() if (v := s.values()) is not None}

    def expected(self) -> dict[tuple[str, str], dict[str, JsonValue]]:
        live = self.gw.live()
        members = InMemoryMemberships({"members": [v for (t, _), v in live.items() if t == "members"]})
        rules = self.gw.deps.config.get_sync_rules(GW)
        held = self.gw.deps.subscriptions.get(GW, self.name, self.gw.wall)  # type: ignore[union-attr]
        scope = resolve_scope(rules, self.claims, held, members, self.gw.wall)
        return {key: values for key, values in live.items() if scope.covers(key[0], values)}


WHO = st.sampled_from(sorted(CLIENTS))
OPS = st.one_of(
    st.tuples(st.just("task"), st.integers(0, 9), st.sampled_from(PROJECTS), st.sampled_from(("red", "blue"))),
    st.tuples(st.just("drop_task"), st.integers(0, 9)),
    st.tuples(st.just("member"), WHO, st.sampled_from(PROJECTS), st.booleans()),
    st.tuples(st.just("subscribe"), WHO, st.sampled_from(("project", "any")), st.sampled_from(PROJECTS)),
    st.tuples(st.just("unsubscribe"), WHO, st.integers(0, 3)),
    st.tuples(st.just("rules"), st.integers(0, len(VERSIONS) - 1)),
    st.tuples(st.just("time"), st.integers(1_000, 40_000)),
    st.tuples(st.just("pull"), WHO, st.integers(1, 3)),
    st.tuples(st.just("catch_up"), WHO, st.integers(1, 4)),
    st.tuples(st.just("release")),
)


def run(gw: Gateway, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "task":
        gw.write("tasks", f"t{op[1]}", project_id=op[2], team=op[3], n=len(gw.server))
    elif kind == "drop_task":
        gw.write("tasks", f"t{op[1]}")
    elif kind == "member":
        # one row per (user, project): inserted, or deleted
        row = f"{op[1]}-{op[2]}"
        if op[3]:
            gw.write("members", row, user=op[1], project=op[2])
        else:
            gw.write("members", row)
    elif kind == "subscribe":
        gw.clients[op[1]].subscribe(op[2], op[3])
    elif kind == "unsubscribe":
        gw.clients[op[1]].unsubscribe(op[2])
    elif kind == "rules":
        gw.save_rules(op[1])
    elif kind == "time":
        gw.wall += op[1]
    elif kind == "pull":
        gw.clients[op[1]].pull(op[2])
    elif kind == "catch_up":
        gw.clients[op[1]].catch_up(op[2])
    elif kind == "release":
        gw.checkpoint_and_release()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=15, max_size=60), st.integers(150, 1500))
def test_every_client_holds_exactly_its_scope_without_a_resync(ops: list[tuple[Any, ...]], page_bytes: int) -> None:
    # Given three clients with different claims, following their cursors while the rules change version, membership
    # rows come and go, subscriptions are made, dropped and run out, rows are written and the log is released
    gw = Gateway(page_bytes)
    for op in ops:
        run(gw, op)  # a 410 (CursorExpiredError) or any other error fails the test: no resync is ever needed
        if op[0] == "catch_up":
            client = gw.clients[op[1]]
            # Then every time a client catches up it holds exactly the rows its scope covers now
            assert client.held() == client.expected()
    for client in gw.clients.values():
        client.catch_up(3)
        assert client.held() == client.expected()
