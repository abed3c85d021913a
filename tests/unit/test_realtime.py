"""The real-time service (lakesync.gateway.realtime) on the in-memory adapters: upgrade auth, session encodings,
frames served and refused with the original's close codes, and the broadcast: sender excluded, sync rules per
recipient on the row images, messages within the size limit, a pull-now notice for what cannot fit, gone and
expired sessions forgotten."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import pytest

from lakesync.auth import mint_token, verify_token
from lakesync.core.delta import make_delta
from lakesync.core.errors import AuthError, ForbiddenError, NotFoundError, ValidationError
from lakesync.core.hlc import HLC, encode
from lakesync.core.log import LogEntry, ShardId
from lakesync.core.messages import SyncPull, SyncPush
from lakesync.core.realtime import Connection, Encoding
from lakesync.core.rules import parse_sync_rules
from lakesync.gateway import realtime
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.memory import (
    InMemoryActionStore,
    InMemoryBufferStore,
    InMemoryConfigStore,
    InMemoryConnectionStore,
)
from lakesync.gateway.realtime import SessionClose
from lakesync.wire.codec import decode_sync_response, encode_sync_pull, encode_sync_push
from lakesync.wire.framing import decode_broadcast_frame

GW = "default"
SECRET = "s" * 32
T0 = 1_700_000_000_000
NOW_S = T0 / 1000


def _connection(
    client_id: str, *, claims: dict[str, str] | None = None, encoding: Encoding = Encoding.BINARY
) -> Connection:
    return Connection(
        connection_id=f"conn-{client_id}",
        gateway=GW,
        client_id=client_id,
        claims=claims or {"sub": client_id},
        encoding=encoding,
        expires_at=int(NOW_S) + 3600,
        connected_at=int(NOW_S),
    )


def _entry(
    seq: int, client_id: str, row: dict[str, object] | None, *, before: dict[str, object] | None = None, size: int = 0
) -> LogEntry:
    columns = dict(row or {})
    if size:
        columns["blob"] = "x" * size
    op = "DELETE" if row is None else ("UPDATE" if before else "INSERT")
    delta = make_delta(
        op,
        table="todos",
        row_id=f"r{seq}",
        client_id=client_id,
        hlc=encode(T0, seq),
        columns=columns if row is not None else {},
    )
    return LogEntry(
        ShardId(GW, "todos"), seq, encode(T0 + 1, seq), delta, before, columns if row is not None else None, 100
    )  # type: ignore[arg-type]


@dataclass
class RecordingSender:
    """Records what each session was sent; sessions in ``gone`` answer as API Gateway does for a closed one."""

    sent: dict[str, list[bytes]] = field(default_factory=dict)
    closed: list[str] = field(default_factory=list)
    gone: set[str] = field(default_factory=set)

    def send(self, connection_id: str, data: bytes) -> bool:
        if connection_id in self.gone:
            return False
        self.sent.setdefault(connection_id, []).append(data)
        return True

    def close(self, connection_id: str) -> None:
        self.closed.append(connection_id)


def _broadcast_deps(
    *connections: Connection, rules: object = None, limit: int = realtime.MESSAGE_LIMIT_BYTES
) -> tuple[realtime.BroadcastDeps, RecordingSender, InMemoryConnectionStore]:
    config = InMemoryConfigStore()
    if rules is not None:
        config.put_sync_rules(GW, parse_sync_rules(rules))
    store = InMemoryConnectionStore()
    for c in connections:
        store.put_connection(c)
    sender = RecordingSender()
    return realtime.BroadcastDeps(config, store, sender, now_s=lambda: NOW_S, message_limit=limit), sender, store


def _received(sender: RecordingSender, connection: Connection) -> list[str]:
    rows = []
    for data in sender.sent.get(connection.connection_id, []):
        frame = base64.b64decode(data) if connection.encoding is Encoding.BASE64 else data
        rows.extend(d.row_id for d in decode_broadcast_frame(frame).deltas)
    return rows


# --- the upgrade ---------------------------------------------------------------------------------------------------


def test_authenticate_takes_the_bearer_header_or_the_token_query() -> None:
    token = mint_token("alice", GW, SECRET)
    by_header = realtime.authenticate(GW, {"Authorization": f"Bearer {token}"}, {}, [SECRET], [GW])
    by_query = realtime.authenticate(GW, {}, {"token": token}, [SECRET], [GW])
    assert by_header.client_id == by_query.client_id == "alice"


@pytest.mark.parametrize(
    ("gateway", "headers", "query", "error", "message"),
    [
        (GW, {}, {}, AuthError, "Missing Bearer token"),
        (GW, {}, {"token": "a.b"}, AuthError, "Malformed JWT: expected three dot-separated segments"),
        (GW, {}, {"token": mint_token("a", GW, "t" * 32)}, AuthError, "Invalid JWT signature"),
        (GW, {}, {"token": mint_token("a", "other", SECRET)}, ForbiddenError, "Gateway ID mismatch"),
        ("unserved", {}, {"token": mint_token("a", "unserved", SECRET)}, NotFoundError, "Gateway not found"),
        (None, {}, {"token": mint_token("a", GW, SECRET)}, NotFoundError, "Gateway not found"),
    ],
)
def test_authenticate_refusals(
    gateway: str | None, headers: dict[str, str], query: dict[str, str], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        realtime.authenticate(gateway, headers, query, [SECRET], [GW])


def test_a_session_lives_no_longer_than_its_token_or_two_hours() -> None:
    short = verify_token(mint_token("a", GW, SECRET, ttl_s=60), SECRET)
    long = verify_token(mint_token("a", GW, SECRET, ttl_s=86_400), SECRET)
    now = short.expires_at - 60
    assert realtime.open_session(short, "c1", {}, now).expires_at == int(short.expires_at)
    assert realtime.open_session(long, "c2", {}, now).expires_at == int(now) + realtime.MAX_SESSION_S
    assert realtime.open_session(short, "c3", {"encoding": "base64"}, now).encoding is Encoding.BASE64
    with pytest.raises(ValidationError, match="encoding"):
        realtime.open_session(short, "c4", {"encoding": "utf-16"}, now)


# --- frames --------------------------------------------------------------------------------------------------------


@pytest.fixture
def deps() -> GatewayDeps:
    wall = [T0]
    return GatewayDeps(
        InMemoryBufferStore(),
        InMemoryConfigStore(),
        InMemoryActionStore(),
        clock=HLC(lambda: wall[0]),
        wall_ms=lambda: wall[0],
    )


def test_a_push_frame_commits_and_answers_an_untagged_ack(deps: GatewayDeps) -> None:
    alice = _connection("alice")
    delta = make_delta("INSERT", table="todos", row_id="r1", client_id="alice", hlc=encode(T0, 0), columns={"v": 1})
    reply = realtime.handle_frame(deps, alice, b"\x01" + encode_sync_push(SyncPush("alice", (delta,), 0)), now_s=NOW_S)
    ack = decode_sync_response(reply)
    assert ack.deltas == () and ack.server_hlc > 0 and not ack.has_more
    pulled = realtime.handle_frame(deps, alice, b"\x02" + encode_sync_pull(SyncPull("alice", 0, 10)), now_s=NOW_S)
    assert [d.row_id for d in decode_sync_response(pulled).deltas] == ["r1"]


@pytest.mark.parametrize(
    ("frame", "code", "reason"),
    [
        (b"\x01", 1002, "Message too short"),
        (b"\x07\x00", 1002, "Unknown message tag: 0x07"),
        (b"\x04\x0a\x00", 1002, "Unknown message tag: 0x04"),
        (b"\x01\xff\xff", 1008, ""),
        (b"\x01" + b"\x00" * (realtime.MAX_FRAME_BYTES + 1), 1009, "Payload too large (max 1 MiB)"),
    ],
)
def test_bad_frames_close_with_the_originals_codes(deps: GatewayDeps, frame: bytes, code: int, reason: str) -> None:
    with pytest.raises(SessionClose) as closed:
        realtime.handle_frame(deps, _connection("alice"), frame, now_s=NOW_S)
    assert closed.value.code == code
    assert closed.value.reason.startswith(reason) and len(closed.value.reason.encode()) <= 123
    assert deps.buffer.list_shards(GW) == []


def test_a_push_as_another_client_closes_1008_and_writes_nothing(deps: GatewayDeps) -> None:
    delta = make_delta("INSERT", table="todos", row_id="r1", client_id="bob", hlc=encode(T0, 0), columns={"v": 1})
    with pytest.raises(SessionClose) as closed:
        realtime.handle_frame(
            deps, _connection("alice"), b"\x01" + encode_sync_push(SyncPush("bob", (delta,), 0)), now_s=NOW_S
        )
    assert (closed.value.code, closed.value.reason) == (
        1008,
        "Client ID mismatch: push clientId does not match authenticated identity",
    )
    assert deps.buffer.list_shards(GW) == []


def test_an_expired_session_is_closed_1008(deps: GatewayDeps) -> None:
    alice = _connection("alice")
    with pytest.raises(SessionClose) as closed:
        realtime.handle_frame(deps, alice, b"\x02" + encode_sync_pull(SyncPull("alice", 0, 10)), now_s=alice.expires_at)
    assert (closed.value.code, closed.value.reason) == (1008, "JWT has expired")


def test_session_encodings() -> None:
    binary, text = _connection("a"), _connection("b", encoding=Encoding.BASE64)
    assert realtime.decode_client_message(binary, b"\x02x") == b"\x02x"
    assert realtime.decode_client_message(text, base64.b64encode(b"\x02x").decode()) == b"\x02x"
    assert realtime.encode_message(text, b"\x03y") == base64.b64encode(b"\x03y").decode()
    for connection, data, code in ((binary, "text", 1003), (text, b"\x02x", 1003), (text, "not base64!", 1007)):
        with pytest.raises(SessionClose) as closed:
            realtime.decode_client_message(connection, data)
        assert closed.value.code == code


# --- broadcast -----------------------------------------------------------------------------------------------------


def test_broadcast_excludes_the_sender_and_reaches_every_other_session() -> None:
    alice, bob, carol = _connection("alice"), _connection("bob"), _connection("carol", encoding=Encoding.BASE64)
    deps, sender, _ = _broadcast_deps(alice, bob, carol)
    report = realtime.broadcast(deps, GW, [_entry(1, "alice", {"v": 1}), _entry(2, "bob", {"v": 2})])
    assert _received(sender, alice) == ["r2"]
    assert _received(sender, bob) == ["r1"]
    assert _received(sender, carol) == ["r1", "r2"]
    assert (report.recipients, report.messages, report.gone) == (3, 3, 0)
    frame = base64.b64decode(sender.sent[carol.connection_id][0])
    assert frame[0] == 0x03 and decode_broadcast_frame(frame).server_hlc == encode(T0 + 1, 2)


def test_broadcast_applies_each_recipients_sync_rules_on_the_row_images() -> None:
    rules = {
        "version": 1,
        "buckets": [
            {
                "name": "mine",
                "tables": ["todos"],
                "queries": [],
                "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
            }
        ],
    }
    alice, bob = _connection("alice"), _connection("bob")
    deps, sender, _ = _broadcast_deps(alice, bob, rules=rules)
    entries = [
        _entry(1, "carol", {"owner": "alice"}),
        _entry(2, "carol", {"owner": "bob"}),
        # bob's row handed to alice: it leaves bob's scope and enters alice's by an update, so neither is sent the
        # change (bob may no longer read its values; alice would hold only the columns it carries): both pull.
        _entry(3, "carol", {"owner": "alice"}, before={"owner": "bob"}),
        # a delete of alice's row: visible to alice by its before image.
        _entry(4, "carol", None, before={"owner": "alice"}),
    ]
    report = realtime.broadcast(deps, GW, entries)
    assert _received(sender, alice) == ["r1", "r4"]
    assert _received(sender, bob) == ["r2"]
    for session in (alice, bob):
        last = decode_broadcast_frame(sender.sent[session.connection_id][-1])
        assert last.deltas == () and last.has_more  # pull now
    assert report.pull_notices == 2


def test_broadcast_splits_messages_within_the_limit_and_sends_a_pull_notice_for_what_cannot_fit() -> None:
    bob = _connection("bob", encoding=Encoding.BASE64)
    deps, sender, _ = _broadcast_deps(bob, limit=4096)
    entries = [_entry(i, "alice", {"v": i}, size=700) for i in range(1, 11)] + [
        _entry(11, "alice", {"v": 11}, size=5000)
    ]
    report = realtime.broadcast(deps, GW, entries)
    messages = sender.sent[bob.connection_id]
    assert all(len(m) <= 4096 for m in messages)
    assert _received(sender, bob) == [f"r{i}" for i in range(1, 11)]
    last = decode_broadcast_frame(base64.b64decode(messages[-1]))
    assert last.deltas == () and last.has_more
    assert report.pull_notices == 1 and report.messages == len(messages) > 2


def test_gone_sessions_are_forgotten_and_expired_ones_closed() -> None:
    alice, bob = _connection("alice"), _connection("bob")
    stale = Connection("conn-stale", GW, "dave", {"sub": "dave"}, Encoding.BINARY, int(NOW_S) - 1, int(NOW_S) - 100)
    deps, sender, store = _broadcast_deps(alice, bob, stale)
    sender.gone.add(bob.connection_id)
    report = realtime.broadcast(deps, GW, [_entry(1, "carol", {"v": 1})])
    assert {c.connection_id for c in store.list_connections(GW)} == {alice.connection_id}
    assert sender.closed == ["conn-stale"]
    assert report.gone == 2 and _received(sender, alice) == ["r1"]
