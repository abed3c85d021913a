"""The broadcaster's recipients (issue 43, item 6): the scope index names exactly the sessions that evaluating every
session by the pull's rule would, under random rules, claims and changes; sessions come and go; a broadcast
encodes each distinct message once; the embedded default's in-process management API answers as API Gateway's."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.aws.ws_sender import ManagementApiSender
from lakesync.core.delta import make_delta
from lakesync.core.hlc import encode
from lakesync.core.log import LogEntry, ShardId
from lakesync.core.realtime import Connection, Encoding
from lakesync.core.rules import SyncRules
from lakesync.core.scope import resolve_scope
from lakesync.gateway import realtime
from lakesync.gateway.memory import InMemoryConfigStore, InMemoryConnectionStore
from lakesync.gateway.realtime import visible_to
from lakesync.gateway.recipients import RecipientIndex
from lakesync.local.websocket import HubManagementClient
from tests.unit.test_scope_properties import USERS, _claims, _row, _rules

GW = "default"
T0 = 1_700_000_000_000
CLIENTS = (*USERS, "writer")
TABLES = ("tasks", "notes", "todos", "secret")


def _connection(i: int, client_id: str, claims: dict[str, Any], encoding: Encoding = Encoding.BINARY) -> Connection:
    frozen = {k: tuple(v) if isinstance(v, list) else v for k, v in claims.items()}
    return Connection(f"conn-{i}", GW, client_id, frozen, encoding, T0 // 1000 + 3600, T0 // 1000)


def _entry(seq: int, table: str, author: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> LogEntry:
    op = "DELETE" if after is None else ("UPDATE" if before is not None else "INSERT")
    delta = make_delta(op, table=table, row_id=f"r{seq}", client_id=author, hlc=encode(T0, seq), columns=after or {})
    return LogEntry(ShardId(GW, table), seq, encode(T0 + 1, seq), delta, before, after, 100)


_session = st.tuples(st.sampled_from(CLIENTS), _claims)
_change = st.tuples(st.sampled_from(TABLES), st.sampled_from(CLIENTS), _row, _row)


def _brute_force(rules: SyncRules, sessions: list[Connection], entries: list[LogEntry]) -> dict[str, list[LogEntry]]:
    """Every session evaluated against every entry by the pull's rule, as the broadcaster did before the index; an
    entry moving a row across the session's scope is not sent as it is (the session is told to pull instead)."""
    out = {}
    for c in sessions:
        scope = resolve_scope(rules, c.claims)
        seen = [e for e in visible_to(c, rules, entries) if not scope.crosses(e.shard.table, e.before, e.after)]
        if seen:
            out[c.connection_id] = seen
    return out


@settings(max_examples=300, deadline=None)
@given(
    rules=st.one_of(st.none(), _rules),
    sessions=st.lists(_session, max_size=8),
    changes=st.lists(_change, min_size=1, max_size=6),
    gone=st.sets(st.integers(0, 7), max_size=3),
)
def test_the_index_names_exactly_the_sessions_evaluating_every_session_would(rules, sessions, changes, gone):
    connections = [_connection(i, client, claims) for i, (client, claims) in enumerate(sessions)]
    entries = [_entry(seq, *change) for seq, change in enumerate(changes, 1)]
    index = RecipientIndex(rules, connections)
    for i in gone:  # sessions that went away are forgotten; the others' scopes stay indexed
        index.remove(f"conn-{i}")
    live = [c for c in connections if int(c.connection_id.removeprefix("conn-")) not in gone]
    found = {cid: seen for cid, (_, seen) in index.deliveries(entries).items()}
    assert found == _brute_force(rules, live, entries)
    assert len(index) == len(live)


@dataclass
class _Sender:
    sent: dict[str, list[bytes]] = field(default_factory=dict)
    threads: set[str] = field(default_factory=set)

    def send(self, connection_id: str, data: bytes) -> bool:
        self.sent.setdefault(connection_id, []).append(data)
        self.threads.add(threading.current_thread().name)
        return True

    def close(self, connection_id: str) -> None:
        raise AssertionError("no session is expired here")


def test_a_broadcast_encodes_each_distinct_message_once_and_sends_it_to_every_recipient() -> None:
    store = InMemoryConnectionStore()
    connections = [_connection(i, f"c{i}", {"sub": f"c{i}"}, Encoding.BASE64) for i in range(5)]
    for connection in connections:
        store.put_connection(connection)
    sender = _Sender()
    deps = realtime.BroadcastDeps(InMemoryConfigStore(), store, sender, now_s=lambda: T0 / 1000)
    report = realtime.broadcast(deps, GW, [_entry(1, "todos", "writer", None, {"v": 1})])
    messages = [sent[0] for sent in sender.sent.values()]
    assert report.recipients == len(messages) == 5
    assert all(m is messages[0] for m in messages)  # one encoding, shared


def test_a_broadcast_sends_from_the_io_pool_not_the_broadcasting_thread() -> None:
    # As on AWS, and in the embedded default alike: a recipient slow to read holds one pool thread, not the broadcast
    store = InMemoryConnectionStore()
    for i in range(3):
        store.put_connection(_connection(i, f"c{i}", {"sub": f"c{i}"}))
    sender = _Sender()
    deps = realtime.BroadcastDeps(InMemoryConfigStore(), store, sender, now_s=lambda: T0 / 1000)
    assert realtime.broadcast(deps, GW, [_entry(1, "todos", "writer", None, {"v": 1})]).recipients == 3
    assert sender.threads and threading.current_thread().name not in sender.threads


@dataclass
class _Hub:
    open: set[str]
    sent: list[tuple[str, bytes]] = field(default_factory=list)

    def send(self, connection_id: str, data: bytes) -> bool:
        self.sent.append((connection_id, data))
        return connection_id in self.open

    def close(self, connection_id: str) -> bool:
        return connection_id in self.open


def test_the_in_process_management_api_answers_as_api_gateways() -> None:
    hub = _Hub({"open="})
    sender = ManagementApiSender("http://unused")
    sender.use(HubManagementClient(hub))  # type: ignore[arg-type]
    assert sender.send("open=", b"hi") is True
    assert sender.send("gone=", b"hi") is False  # 410 GoneException: the broadcaster forgets the session
    sender.close("gone=")  # a gone session is no error
    assert hub.sent == [("open=", b"hi"), ("gone=", b"hi")]
    with pytest.raises(Exception, match="PayloadTooLarge"):
        sender.send("open=", b"x" * (128 * 1024 + 1))
