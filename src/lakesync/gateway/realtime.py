"""Real-time delivery: WebSocket sessions and the broadcast of committed changes (reference §11.2).

A session is opened with a verified token (``Authorization: Bearer`` or ``?token=``, as the original) and kept as a
:class:`Connection` in a :class:`~lakesync.ports.ConnectionStore`. A client frame is one tag byte and a protobuf:
``0x01`` SyncPush and ``0x02`` SyncPull are answered with an untagged SyncResponse; anything wrong closes the session
with the original's close code and reason (:class:`SessionClose`). LakeSync's own ``0x10`` subscription frame
(:mod:`lakesync.gateway.socket_subscriptions`) subscribes, unsubscribes and lists, answered with a ``0x10`` frame.

Committed changes reach every *other* session of the gateway as broadcast frames ``0x03`` + SyncResponse, filtered
per recipient by its scope exactly as its pulls are (its buckets and its client's stream subscriptions, on the row
images before and after the change), and split into messages of at most :data:`MESSAGE_LIMIT_BYTES`. A change too
large for one message is replaced by a *pull now* notice (no deltas, ``hasMore`` true), and so is a change of a
membership row a session's scope depends on (rows may enter or leave it: the pull serves that difference).
Broadcasts are an optimisation: a client that misses one (it was connecting, its socket dropped) gets the change
from its next pull, so delivery needs no retry here.

Encodings: a session opened with ``?encoding=base64`` exchanges text frames, each the standard base64 of the
binary frame (API Gateway WebSocket APIs reject binary frames from clients with 1003). Without it, binary frames as
the original. Replies and broadcasts use the session's encoding.
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from lakesync.auth import AuthClaims, parse_bearer, verify_token
from lakesync.core.errors import (
    AuthError,
    CallerRateLimitedError,
    CodecError,
    ForbiddenError,
    LakeSyncError,
    NotFoundError,
    ValidationError,
)
from lakesync.core.log import LogEntry
from lakesync.core.messages import SyncResponse
from lakesync.core.realtime import Connection, Encoding
from lakesync.core.rules import SyncRules
from lakesync.core.streams import Subscription
from lakesync.gateway import limits
from lakesync.gateway import pull as pull_service
from lakesync.gateway import push as push_service
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.recipients import Delivery, RecipientIndex
from lakesync.gateway.socket_subscriptions import serve_subscription_frame
from lakesync.io_pool import results_of, submit
from lakesync.ports import ConfigStore, ConnectionSender, ConnectionStore, MembershipReader, SubscriptionStore
from lakesync.wire.codec import decode_sync_pull, decode_sync_push, encode_row_delta, encode_sync_response
from lakesync.wire.framing import TAG_BROADCAST, TAG_SUBSCRIPTIONS, TAG_SYNC_PULL, TAG_SYNC_PUSH, decode_frame

__all__ = [
    "MESSAGE_LIMIT_BYTES",
    "BroadcastDeps",
    "BroadcastReport",
    "Connection",
    "Encoding",
    "SessionClose",
    "authenticate",
    "broadcast",
    "broadcast_messages",
    "connect",
    "decode_client_message",
    "encode_message",
    "handle_frame",
    "open_session",
    "serve_message",
]

CLOSE_NORMAL: Final = 1000
CLOSE_PROTOCOL_ERROR: Final = 1002
CLOSE_UNSUPPORTED_DATA: Final = 1003
CLOSE_INVALID_PAYLOAD: Final = 1007
CLOSE_POLICY_VIOLATION: Final = 1008
CLOSE_MESSAGE_TOO_BIG: Final = 1009
CLOSE_INTERNAL_ERROR: Final = 1011
CLOSE_TRY_AGAIN_LATER: Final = 1013

MAX_FRAME_BYTES: Final = 1024 * 1024
"""The largest client frame served (the original's 1 MiB push payload limit)."""
SOCKET_PATH: Final = re.compile(r"^/v1/sync/([^/]+)/ws$")
"""The socket's path, as the original serves it (the gateway in the path)."""
API_GATEWAY_MESSAGE_BYTES: Final = 128 * 1024
"""The largest message API Gateway carries to or from a client (a route response too)."""
MESSAGE_LIMIT_BYTES: Final = 32 * 1024
"""The largest message sent to a client, as it goes on the wire (after base64): API Gateway's WebSocket frame size."""
SOCKET_PAGE_BYTES: Final = 64 * 1024
"""Stored bytes of a pull page served over a socket: its protobuf, base64-encoded, fits one API Gateway message
(128 KB)."""
MAX_SESSION_S: Final = 2 * 3600
"""API Gateway closes a WebSocket connection after two hours; a session record lives no longer."""
MAX_PULL_DELTAS: Final = 10_000
DEFAULT_PULL_DELTAS: Final = 100

_TOO_LARGE: Final = "Payload too large (max 1 MiB)"
_CLIENT_MISMATCH: Final = "Client ID mismatch: push clientId does not match authenticated identity"


class SessionClose(Exception):
    """The session must close with ``code`` and ``reason`` (the original's close codes)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code} {reason}")
        self.code = code
        self.reason = reason


def authenticate(
    gateway: str | None,
    headers: Mapping[str, str],
    query: Mapping[str, str],
    secrets: Sequence[str],
    served: Iterable[str],
) -> AuthClaims:
    """The claims of an upgrade request to ``gateway``'s socket: the Bearer header, else ``?token=``.

    Raises:
        AuthError: 401 (``Missing Bearer token``, the verifier's message, or a ``sub`` that is not valid Unicode).
            ForbiddenError: 403 when the token is for another gateway. NotFoundError: 404 for a missing or unserved
            gateway.
    """
    if not gateway or gateway not in set(served):
        raise NotFoundError("Gateway not found")
    header = next((v for k, v in headers.items() if k.lower() == "authorization"), None)
    token = parse_bearer(header) if header else query.get("token") or ""
    if not token:
        raise AuthError("Missing Bearer token")
    claims = verify_token(token, secrets)
    if claims.gateway_id != gateway:
        raise ForbiddenError("Gateway ID mismatch: JWT authorises a different gateway")
    try:
        claims.client_id.encode()
    except UnicodeEncodeError:  # a lone surrogate: the session could not be recorded, nor push as this client
        raise AuthError('Missing or invalid "sub" claim (clientId)') from None
    return claims


def open_session(claims: AuthClaims, connection_id: str, query: Mapping[str, str], now_s: float) -> Connection:
    """The session an authenticated upgrade opens.

    Raises:
        ValidationError: an ``encoding`` other than ``binary`` or ``base64``.
    """
    raw = query.get("encoding") or Encoding.BINARY.value
    try:
        encoding = Encoding(raw)
    except ValueError:
        raise ValidationError("Invalid 'encoding' parameter — must be binary or base64") from None
    now = int(now_s)
    return Connection(
        connection_id=connection_id,
        gateway=claims.gateway_id,
        client_id=claims.client_id,
        claims=dict(claims.custom_claims),
        encoding=encoding,
        expires_at=min(int(claims.expires_at), now + MAX_SESSION_S),
        connected_at=now,
    )


def connect(
    connections: ConnectionStore,
    connection_id: str,
    gateway: str | None,
    headers: Mapping[str, str],
    query: Mapping[str, str],
    secrets: Sequence[str],
    served: Iterable[str],
    *,
    now_s: float | None = None,
) -> Connection:
    """Authenticate an upgrade (:func:`authenticate`), open its session and record it.

    Raises:
        LakeSyncError: the upgrade is refused with the error's status (401, 403, 404, or 400 for a bad encoding).
    """
    claims = authenticate(gateway, headers, query, secrets, served)
    connection = open_session(claims, connection_id, query, time.time() if now_s is None else now_s)
    connections.put_connection(connection)
    return connection


def serve_message(deps: GatewayDeps, connection: Connection, data: bytes | str) -> bytes | str:
    """The reply to one client message, both in the session's encoding (:func:`decode_client_message`,
    :func:`handle_frame` with pull pages of at most :data:`SOCKET_PAGE_BYTES` stored bytes, :func:`encode_message`).

    Each message counts against the client's ``socket`` rate limit first (:mod:`lakesync.gateway.limits`); over it,
    the session closes with 1013 (try again later) and the reason says when.

    Raises:
        SessionClose: the session must close.
    """
    try:
        limits.check(deps.limiter, connection.gateway, connection.client_id, "socket")
    except CallerRateLimitedError as exc:
        raise SessionClose(CLOSE_TRY_AGAIN_LATER, _reason(exc.message)) from None
    frame = decode_client_message(connection, data)
    return encode_message(
        connection, handle_frame(pull_service.with_page_bytes(deps, SOCKET_PAGE_BYTES), connection, frame)
    )


def decode_client_message(connection: Connection, data: bytes | str) -> bytes:
    """The binary frame a client message carries in the session's encoding.

    Raises:
        SessionClose: 1003 for a frame of the wrong kind, 1007 for invalid base64, 1009 over 1 MiB.
    """
    if connection.encoding is Encoding.BINARY:
        if isinstance(data, str):
            raise SessionClose(CLOSE_UNSUPPORTED_DATA, "Binary frames only")
        if len(data) > MAX_FRAME_BYTES:
            raise SessionClose(CLOSE_MESSAGE_TOO_BIG, _TOO_LARGE)
        return bytes(data)
    if not isinstance(data, str):
        raise SessionClose(CLOSE_UNSUPPORTED_DATA, "Text frames only (base64)")
    if len(data) > (MAX_FRAME_BYTES + 2) // 3 * 4:
        raise SessionClose(CLOSE_MESSAGE_TOO_BIG, _TOO_LARGE)
    try:
        return base64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise SessionClose(CLOSE_INVALID_PAYLOAD, "Invalid base64 frame") from None


def encode_message(connection: Connection, frame: bytes) -> bytes | str:
    """``frame`` as the session sends it: the bytes, or their base64 text."""
    return frame if connection.encoding is Encoding.BINARY else base64.b64encode(frame).decode("ascii")


def handle_frame(deps: GatewayDeps, connection: Connection, frame: bytes, *, now_s: float | None = None) -> bytes:
    """Serve one client frame: the untagged SyncResponse to send back.

    A push answers ``{deltas: [], serverHlc}``; a pull (``since``, as the original client pulls over the socket)
    answers the page; a subscription frame (``0x10``) answers a ``0x10`` frame with the HTTP route's status and body,
    refusals included (:func:`~lakesync.gateway.socket_subscriptions.serve_subscription_frame`).

    Raises:
        SessionClose: 1002 for a short frame or an unknown or unserved tag, 1008 for an expired token, a message that
            does not decode, a push as another client or one the gateway refuses, 1009 over 1 MiB.
    """
    if connection.expired(time.time() if now_s is None else now_s):
        raise SessionClose(CLOSE_POLICY_VIOLATION, "JWT has expired")
    if len(frame) > MAX_FRAME_BYTES:
        raise SessionClose(CLOSE_MESSAGE_TOO_BIG, _TOO_LARGE)
    subscriptions = len(frame) >= 2 and frame[0] == TAG_SUBSCRIPTIONS  # LakeSync's own tag, not the original's
    try:
        tag, payload = (TAG_SUBSCRIPTIONS, frame) if subscriptions else decode_frame(frame)
    except CodecError as exc:
        raise SessionClose(CLOSE_PROTOCOL_ERROR, str(exc)) from None
    try:
        if tag == TAG_SUBSCRIPTIONS:
            return serve_subscription_frame(deps, connection, payload)
        if tag == TAG_SYNC_PUSH:
            return _push(deps, connection, payload)
        if tag == TAG_SYNC_PULL:
            return _pull(deps, connection, payload)
    except LakeSyncError as exc:
        raise SessionClose(CLOSE_POLICY_VIOLATION, _reason(str(exc))) from None
    raise SessionClose(CLOSE_PROTOCOL_ERROR, f"Unknown message tag: 0x{tag:02x}")


def _push(deps: GatewayDeps, connection: Connection, payload: bytes) -> bytes:
    message = decode_sync_push(payload)
    if message.client_id != connection.client_id:
        raise ForbiddenError(_CLIENT_MISMATCH)
    limit = deps.settings.max_deltas_per_push
    if len(message.deltas) > limit:
        raise ValidationError(f"Too many deltas in a single push (max {limit:,})")
    result = push_service.push(
        deps, connection.gateway, message, client_id=connection.client_id, claims=connection.claims
    )
    return encode_sync_response(SyncResponse((), result.server_hlc, False))


def _pull(deps: GatewayDeps, connection: Connection, payload: bytes) -> bytes:
    message = decode_sync_pull(payload)
    limit = min(message.max_deltas or DEFAULT_PULL_DELTAS, MAX_PULL_DELTAS)
    result = pull_service.pull(
        deps,
        connection.gateway,
        limit=limit,
        claims=connection.claims,
        since=message.since_hlc,
        client_id=connection.client_id if message.client_id == connection.client_id else None,
    )
    return encode_sync_response(SyncResponse(result.deltas, result.server_hlc, result.has_more))


def _reason(text: str) -> str:
    """A close reason fits in 123 bytes of UTF-8 (RFC 6455 §5.5)."""
    data = text.encode()
    return text if len(data) <= 123 else data[:120].decode(errors="ignore") + "..."


# --- broadcast -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BroadcastDeps:
    """What a broadcast needs: the gateway's sync rules, its sessions and a way to send to them; the clients' stream
    subscriptions (``None``: none are served) and the membership tables (``None``: a membership gives no values)."""

    config: ConfigStore
    connections: ConnectionStore
    sender: ConnectionSender
    now_s: Callable[[], float] = time.time
    message_limit: int = MESSAGE_LIMIT_BYTES
    subscriptions: SubscriptionStore | None = None
    memberships: MembershipReader | None = None


@dataclass(slots=True)
class BroadcastReport:
    """What one broadcast did: messages sent, recipients reached, sessions found gone (and forgotten)."""

    messages: int = 0
    recipients: int = 0
    gone: int = 0
    pull_notices: int = 0

    def add(self, other: BroadcastReport) -> None:
        """Sum ``other`` into this report."""
        self.messages += other.messages
        self.recipients += other.recipients
        self.gone += other.gone
        self.pull_notices += other.pull_notices


def visible_to(connection: Connection, rules: SyncRules | None, entries: Iterable[LogEntry]) -> list[LogEntry]:
    """The entries ``connection`` receives: not its own, and visible under its claims before or after the change."""
    return [
        e
        for e in entries
        if e.delta.client_id != connection.client_id and pull_service.entry_visible(e, rules, connection.claims)
    ]


def broadcast_messages(
    entries: Sequence[LogEntry], *, limit: int, base64_text: bool, pull_at: int | None = None
) -> Iterator[tuple[bytes, int]]:
    """The broadcast frames (``0x03`` + SyncResponse) carrying ``entries`` in order, each at most ``limit`` bytes as
    sent (base64 text when ``base64_text``), with the number of deltas in each.

    ``serverHlc`` is the latest commit HLC of the entries (and ``pull_at``). Entries that cannot fit in a message on
    their own are left out, and a last frame with no deltas and ``hasMore`` tells the client to pull; with
    ``pull_at`` (the commit HLC of a change that moved the client's scope) that frame is sent in any case.
    """
    if not entries and pull_at is None:
        return
    server_hlc = max([e.commit_hlc for e in entries] + ([pull_at] if pull_at is not None else []))
    raw_limit = limit // 4 * 3 if base64_text else limit
    # Frame = tag (1) + field 3 serverHlc (≤ 11) + field 4 hasMore (2) + per delta: key (1) + length (≤ 5) + bytes.
    budget = raw_limit - 14
    batch: list[LogEntry] = []
    used = 0
    oversized = False
    for entry in entries:
        size = len(encode_row_delta(entry.delta))
        cost = size + 1 + _varint_len(size)
        if cost > budget:
            oversized = True
            continue
        if batch and used + cost > budget:
            yield _frame(batch, server_hlc, False), len(batch)
            batch, used = [], 0
        batch.append(entry)
        used += cost
    if batch:
        yield _frame(batch, server_hlc, False), len(batch)
    if oversized or pull_at is not None:
        yield _frame([], server_hlc, True), 0


def _frame(entries: Sequence[LogEntry], server_hlc: int, has_more: bool) -> bytes:
    response = SyncResponse(tuple(e.delta for e in entries), server_hlc, has_more)
    return bytes((TAG_BROADCAST,)) + encode_sync_response(response)


def _varint_len(n: int) -> int:
    length = 1
    while n >= 0x80:
        n >>= 7
        length += 1
    return length


def broadcast(deps: BroadcastDeps, gateway: str, entries: Sequence[LogEntry]) -> BroadcastReport:
    """Send ``gateway``'s committed ``entries`` to each of its open sessions that receives them.

    The sessions are read once and indexed by scope (:class:`~lakesync.gateway.recipients.RecipientIndex`): each
    entry goes to the sessions the index names and the pull's rule confirms, not its author's, and a session whose
    scope a change of a membership row may move is told to pull. The index is built per call, from the sessions
    read: on AWS each invocation reads the connections table anyway (a session may have come or gone since the
    last), and scopes are resolved once per distinct claims and subscriptions (:func:`_recipients`). The frames are
    encoded once per distinct list of entries and encoding, then sent to the recipients concurrently (the shared I/O
    pool); each recipient's messages go in order. A session the transport reports gone is forgotten; an expired one
    is closed and forgotten.
    """
    report = BroadcastReport()
    if not entries:
        return report
    rules = deps.config.get_sync_rules(gateway)
    now = deps.now_s()
    live = []
    for connection in deps.connections.list_connections(gateway):
        if connection.expired(now):
            deps.sender.close(connection.connection_id)
            deps.connections.remove_connection(connection.connection_id)
            report.gone += 1
        else:
            live.append(connection)
    recipients = _recipients(deps, gateway, rules, live, entries, now)
    frames = _Frames(deps.message_limit)
    # One request per recipient (PostToConnection): sent at once, so the last recipient waits for one request, not
    # for every one before it, and a recipient slow to read holds one pool thread, not the broadcast.
    sends = [
        submit(_send_to, deps, connection, frames.of(visible, connection.encoding))
        for connection, visible in recipients.plan(entries).values()
    ]
    for sent in results_of(sends):
        report.add(sent)
    return report


def _recipients(
    deps: BroadcastDeps,
    gateway: str,
    rules: SyncRules | None,
    live: Sequence[Connection],
    entries: Sequence[LogEntry],
    now_s: float,
) -> RecipientIndex:
    """The index of the ``live`` sessions by scope: their claims, their clients' subscriptions (read only when a
    stream's table or one of the tables its memberships read is among the ``entries``' tables, concurrently, one
    consistent read per connected client) and the gateway's memberships (a source made only when the rules read
    any)."""
    now_ms = int(now_s * 1000)
    memberships = None
    if deps.memberships is not None and rules is not None and rules.membership_tables():
        memberships = deps.memberships.source(gateway)
    held: dict[str, list[Subscription]] = {}
    if deps.subscriptions is not None and rules is not None and rules.streams:
        concerned = {s.table for s in rules.streams}.union(*(s.membership_tables() for s in rules.streams))
        if any(e.shard.table in concerned for e in entries):
            clients = sorted({c.client_id for c in live})
            reads = [submit(deps.subscriptions.get, gateway, client, now_ms) for client in clients]
            held = dict(zip(clients, results_of(reads), strict=True))
    return RecipientIndex(rules, live, held, memberships, now_ms)


class _Frames:
    """The messages carrying a delivery, as sent in an encoding: encoded once per distinct list of entries and
    notice."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._made: dict[tuple[Encoding, tuple[int, ...], int | None], list[tuple[bytes, int]]] = {}

    def of(self, delivery: Delivery, encoding: Encoding) -> list[tuple[bytes, int]]:
        entries, pull_at = delivery.entries, delivery.pull_at
        key = (encoding, tuple(id(e) for e in entries), pull_at)
        made = self._made.get(key)
        if made is None:
            text = encoding is Encoding.BASE64
            made = self._made[key] = [
                (base64.b64encode(frame) if text else frame, count)
                for frame, count in broadcast_messages(entries, limit=self._limit, base64_text=text, pull_at=pull_at)
            ]
        return made


def _send_to(deps: BroadcastDeps, connection: Connection, messages: Sequence[tuple[bytes, int]]) -> BroadcastReport:
    report = BroadcastReport(recipients=1)
    for data, count in messages:
        if not deps.sender.send(connection.connection_id, data):
            deps.connections.remove_connection(connection.connection_id)
            report.gone += 1
            return report
        report.messages += 1
        report.pull_notices += count == 0
    return report
