"""The broadcaster follows each client's whole scope (issue 43, items 2, 3 and 6 on the socket): its buckets, its
live stream subscriptions and the gateway's membership tables.

(a) under random rules, sessions, subscriptions, membership rows and changes, the index's recipients and pull
    notices are exactly what resolving every session's scope and judging every change by it
    (``Scope.change_visible``, ``Scope.depends_on``) gives;
(b) a broadcast sends a stream's rows to its subscribers only, and tells the sessions whose scope a membership
    change may move (the author's included) to pull, with the change's commit HLC;
(c) subscriptions are read only when the rules declare streams and the changes touch a stream's tables, once per
    connected client.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.core.filters import InMemoryMemberships
from lakesync.core.log import LogEntry
from lakesync.core.realtime import Connection, Encoding
from lakesync.core.rules import SyncRules, parse_sync_rules
from lakesync.core.scope import resolve_scope
from lakesync.core.streams import Subscription
from lakesync.gateway import realtime
from lakesync.gateway.memory import (
    InMemoryConfigStore,
    InMemoryConnectionStore,
    InMemoryMembershipReader,
    InMemorySubscriptions,
)
from lakesync.gateway.recipients import Delivery, RecipientIndex
from lakesync.wire.framing import decode_broadcast_frame
from tests.unit.test_realtime_recipients import CLIENTS, T0, _connection, _entry
from tests.unit.test_scope_properties import (
    MEMBER_OF,
    NOW,
    STREAMS,
    _claims,
    _membership_row,
    _membership_rows,
    _row,
    _rules,
    _subscriptions,
)

GW = "default"
# A session's client is its token's sub, as on the socket.
_session = st.tuples(st.sampled_from(CLIENTS), _claims).map(lambda s: (s[0], {**s[1], "sub": s[0]}))
_row_change = st.tuples(st.sampled_from(("tasks", "notes", "todos", "secret")), st.sampled_from(CLIENTS), _row, _row)
_membership_image = st.one_of(st.none(), _membership_row)
_membership_change = st.tuples(st.just("memberships"), st.sampled_from(CLIENTS), _membership_image, _membership_image)
_change = st.one_of(_row_change, _row_change, _membership_change)


def _brute_force(
    rules: SyncRules,
    sessions: list[Connection],
    held: dict[str, list[Subscription]],
    memberships: InMemoryMemberships,
    entries: list[LogEntry],
) -> dict[str, tuple[list[LogEntry], int | None]]:
    """Every session's scope resolved, and every entry judged by it."""
    out: dict[str, tuple[list[LogEntry], int | None]] = {}
    for c in sessions:
        scope = resolve_scope(rules, c.claims, held.get(c.client_id, ()), memberships, now_ms=NOW)
        reached = [
            e
            for e in entries
            if e.delta.client_id != c.client_id and scope.change_visible(e.shard.table, e.before, e.after)
        ]
        # A row moved across the scope is not sent as it is: the session is told to pull (its drop or whole row)
        seen = [e for e in reached if not scope.crosses(e.shard.table, e.before, e.after)]
        moved = [e.commit_hlc for e in entries if scope.depends_on(e.shard.table, e.before, e.after)]
        moved += [e.commit_hlc for e in reached if scope.crosses(e.shard.table, e.before, e.after)]
        if seen or moved:
            out[c.connection_id] = (seen, max(moved) if moved else None)
    return out


@settings(max_examples=300, deadline=None)
@given(
    rules=_rules,
    sessions=st.lists(_session, max_size=8),
    subs=st.fixed_dictionaries({}, optional=dict.fromkeys(CLIENTS, _subscriptions)),
    rows=_membership_rows,
    changes=st.lists(_change, min_size=1, max_size=6),
    gone=st.sets(st.integers(0, 7), max_size=3),
)
def test_the_index_finds_exactly_the_recipients_and_pull_notices_of_every_scope(
    rules, sessions, subs, rows, changes, gone
):
    memberships = InMemoryMemberships({"memberships": rows})
    connections = [_connection(i, client, claims) for i, (client, claims) in enumerate(sessions)]
    entries = [_entry(seq, *change) for seq, change in enumerate(changes, 1)]
    index = RecipientIndex(rules, connections, subs, memberships, NOW)
    for i in gone:
        index.remove(f"conn-{i}")
    live = [c for c in connections if int(c.connection_id.removeprefix("conn-")) not in gone]
    found = {cid: (d.entries, d.pull_at) for cid, (_, d) in index.plan(entries).items()}
    assert found == _brute_force(rules, live, subs, memberships, entries)
    assert len(index) == len(live)


# --- broadcasts ----------------------------------------------------------------------------------------------------

RULES = {
    "version": 1,
    "buckets": [
        {"name": "own", "tables": ["todos"], "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}]},
        {
            "name": "member_todos",
            "tables": ["todos"],
            "filters": [{"column": "project_id", "op": "in", "membership": MEMBER_OF}],
        },
    ],
    # by_project: tasks of a project the token allows; by_member: of a project the client is a member of (prio >= 1)
    "streams": [{"name": name, **STREAMS[name]} for name in ("by_project", "by_member")],
}


@dataclass
class _Sender:
    sent: dict[str, list[bytes]] = field(default_factory=dict)

    def send(self, connection_id: str, data: bytes) -> bool:
        self.sent.setdefault(connection_id, []).append(data)
        return True

    def close(self, connection_id: str) -> None:
        raise AssertionError("no session is expired here")


class _CountingSubscriptions(InMemorySubscriptions):
    """Records each read of a client's subscriptions."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def get(self, gateway: str, client_id: str, now_ms: int) -> list[Subscription]:
        self.reads.append(client_id)
        return super().get(gateway, client_id, now_ms)


class _World:
    def __init__(self, rules: dict[str, Any] | None = RULES, members: list[dict[str, Any]] | None = None) -> None:
        self.config = InMemoryConfigStore()
        if rules is not None:
            self.config.put_sync_rules(GW, parse_sync_rules(rules))
        self.connections = InMemoryConnectionStore()
        self.subscriptions = _CountingSubscriptions()
        self.members = InMemoryMemberships({"memberships": members or []})
        self.sender = _Sender()
        self.deps = realtime.BroadcastDeps(
            self.config,
            self.connections,
            self.sender,
            now_s=lambda: T0 / 1000,
            subscriptions=self.subscriptions,
            memberships=InMemoryMembershipReader(self.members),
        )
        self._n = 0

    def session(self, client: str, encoding: Encoding = Encoding.BINARY, **claims: Any) -> Connection:
        self._n += 1
        connection = _connection(self._n, client, {"sub": client, **claims}, encoding)
        self.connections.put_connection(connection)
        return connection

    def subscribe(self, client: str, stream: str, **params: str) -> None:
        assert self.subscriptions.put(GW, client, Subscription.of(stream, params, T0 + 60_000), T0, 64)

    def frames(self, connection: Connection) -> list[tuple[list[str], bool, int]]:
        """(row ids, hasMore, serverHlc) of each frame the session was sent."""
        out = []
        for data in self.sender.sent.get(connection.connection_id, []):
            frame = base64.b64decode(data) if connection.encoding is Encoding.BASE64 else data
            response = decode_broadcast_frame(frame)
            out.append(([d.row_id for d in response.deltas], response.has_more, response.server_hlc))
        return out


def test_a_streams_rows_reach_its_subscribers_live_and_not_the_bucket_only_clients() -> None:
    world = _World()
    subscriber = world.session("u1", projects=("7",))
    other_project = world.session("u2", Encoding.BASE64, projects=("8",))
    bucket_only = world.session("u3", projects=("7",))  # allowed project 7, but not subscribed to it
    world.subscribe("u1", "by_project", project="7")
    world.subscribe("u2", "by_project", project="8")
    entries = [
        _entry(1, "tasks", "writer", None, {"project_id": 7, "title": "a"}),
        _entry(2, "tasks", "writer", None, {"project_id": 8}),
        _entry(3, "todos", "writer", None, {"owner": "u3"}),
        _entry(4, "tasks", "writer", {"project_id": 8}, {"project_id": 8, "title": "b"}),
        # a task moved from project 7 to 8: it leaves the subscriber's scope and enters the other's, so neither is
        # sent the change (values the first may no longer read, a partial row for the second): both are told to pull
        _entry(5, "tasks", "writer", {"project_id": 7}, {"project_id": 8}),
    ]
    report = realtime.broadcast(world.deps, GW, entries)
    hlc = entries[-1].commit_hlc
    assert world.frames(subscriber) == [(["r1"], False, hlc), ([], True, hlc)]
    assert world.frames(other_project) == [(["r2", "r4"], False, hlc), ([], True, hlc)]
    assert world.frames(bucket_only) == [(["r3"], False, entries[2].commit_hlc)]  # its own entries' latest
    assert report.recipients == 3 and report.pull_notices == 2


def test_an_expired_subscription_no_longer_brings_its_rows() -> None:
    world = _World()
    subscriber = world.session("u1", projects=("7",))
    assert world.subscriptions.put(GW, "u1", Subscription.of("by_project", {"project": "7"}, T0), T0 - 1, 64)
    realtime.broadcast(world.deps, GW, [_entry(1, "tasks", "writer", None, {"project_id": 7})])
    assert world.frames(subscriber) == []


def test_a_membership_change_tells_the_sessions_whose_scope_it_may_move_to_pull() -> None:
    # Given u1 is a member of project 7 (through the table) and subscribed to its tasks; u2 is a member of 9
    world = _World(members=[{"user": "u1", "project": 7}, {"user": "u2", "project": 9}, {"user": "u1", "project": 5}])
    u1, u1_again, u2 = world.session("u1"), world.session("u1", Encoding.BASE64), world.session("u2")
    world.subscribe("u1", "by_member", project="7")
    # When u1's membership of 7 is deleted (by u1 itself), and a row of project 5 changes in the same batch
    world.members.put("memberships", [{"user": "u2", "project": 9}, {"user": "u1", "project": 5}])
    change = _entry(1, "memberships", "u1", {"user": "u1", "project": 7}, None)
    todo = _entry(2, "todos", "writer", None, {"project_id": 5})
    report = realtime.broadcast(world.deps, GW, [change, todo])
    # Then both of u1's sessions (its own change: its scope moved all the same) get the row and a pull-now notice
    expected = [(["r2"], False, todo.commit_hlc), ([], True, todo.commit_hlc)]
    assert world.frames(u1) == world.frames(u1_again) == expected
    # and u2, whose scope reads only its own memberships, nothing
    assert world.frames(u2) == []
    assert report.pull_notices == 2


def test_a_membership_change_alone_sends_a_notice_with_its_commit_hlc() -> None:
    world = _World(members=[{"user": "u2", "project": 3}])
    u2, u3 = world.session("u2"), world.session("u3")
    change = _entry(1, "memberships", "writer", None, {"user": "u2", "project": 3})
    realtime.broadcast(world.deps, GW, [change])
    assert world.frames(u2) == [([], True, change.commit_hlc)]
    assert world.frames(u3) == []
    # a membership row nobody's scope reads (another user's) tells no one
    world.sender.sent.clear()
    realtime.broadcast(world.deps, GW, [_entry(2, "memberships", "writer", None, {"user": "zed", "project": 3})])
    assert world.sender.sent == {}


def test_without_a_membership_reader_memberships_give_no_values_and_no_notices() -> None:
    world = _World(members=[{"user": "u1", "project": 5}])
    world.deps = realtime.BroadcastDeps(
        world.config, world.connections, world.sender, now_s=lambda: T0 / 1000, subscriptions=world.subscriptions
    )
    u1 = world.session("u1")
    realtime.broadcast(
        world.deps,
        GW,
        [_entry(1, "todos", "writer", None, {"project_id": 5}), _entry(2, "memberships", "x", None, {"user": "u1"})],
    )
    assert world.frames(u1) == []


def test_subscriptions_are_read_only_for_changes_a_stream_concerns_once_per_connected_client() -> None:
    world = _World()
    for client in ("u1", "u1", "u2", "u3"):
        world.session(client)
    # a change of a table no stream reads: no read
    realtime.broadcast(world.deps, GW, [_entry(1, "todos", "writer", None, {"owner": "u1"})])
    assert world.subscriptions.reads == []
    # a stream's table: one read per client
    realtime.broadcast(world.deps, GW, [_entry(2, "tasks", "writer", None, {"project_id": 1})] * 2)
    assert sorted(world.subscriptions.reads) == ["u1", "u2", "u3"]
    # a table a stream's memberships read: read as well
    world.subscriptions.reads.clear()
    realtime.broadcast(world.deps, GW, [_entry(3, "memberships", "writer", None, {"user": "u9"})])
    assert sorted(world.subscriptions.reads) == ["u1", "u2", "u3"]


def test_rules_without_streams_read_no_subscriptions() -> None:
    plain = {"version": 1, "buckets": RULES["buckets"][:1]}
    world = _World(plain)
    u1 = world.session("u1")
    world.subscribe("u1", "by_project", project="7")  # held from rules of the past
    own = _entry(1, "todos", "writer", None, {"owner": "u1"})
    realtime.broadcast(world.deps, GW, [own])
    realtime.broadcast(world.deps, GW, [_entry(2, "tasks", "writer", None, {"project_id": 7})])
    assert world.subscriptions.reads == []
    assert world.frames(u1) == [(["r1"], False, own.commit_hlc)]


def test_sessions_of_equal_claims_and_subscriptions_share_one_scope() -> None:
    rules = parse_sync_rules(RULES)
    claims = {"sub": "u1", "projects": ["7"]}
    a, b = _connection(1, "u1", claims), _connection(2, "u1", claims)
    held = {"u1": [Subscription.of("by_project", {"project": "7"}, NOW + 10)]}
    index = RecipientIndex(rules, [a, b], held, None, NOW)
    assert index.scope_of(a.connection_id) is index.scope_of(b.connection_id)
    entry = _entry(1, "tasks", "writer", None, {"project_id": 7})
    assert index.plan([entry]) == {
        a.connection_id: (a, Delivery([entry])),
        b.connection_id: (b, Delivery([entry])),
    }
