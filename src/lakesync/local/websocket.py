"""The local front's WebSocket side: ``/v1/sync/{gw}/ws`` sessions, and API Gateway's management API for them.

The embedded default serves the real-time protocol of :mod:`lakesync.gateway.realtime` on its HTTP port:

* ``GET /v1/sync/{gw}/ws`` with ``Upgrade: websocket`` opens a session. The token (Bearer header or ``?token=``) is
  checked before the upgrade: a refusal is an HTTP answer (401, 403, 404, 400 with ``{"error", "code"}``; 431 for a
  header line the handshake parser refuses; 500 ``Internal error`` when the session cannot be recorded), and 503
  when :attr:`SocketHub.max_connections` sessions are open, as the original. On AWS the same socket is the
  WebSocket API's URL with ``?gateway=``; that form is accepted here too (``GET /ws?gateway=...``).
* Frames are served by :func:`lakesync.gateway.realtime.handle_frame`; a :class:`SessionClose` closes the session
  with its code. More than :attr:`SocketHub.rate_limit` messages in one second close it with 1008
  ``Rate limit exceeded``.
* ``POST /@connections/{id}`` sends the body to a session, ``DELETE`` closes it and ``GET`` describes it, with API
  Gateway's answers (410 ``GoneException`` for a session that is not open), so the broadcaster Lambda's
  management-API sender works unchanged against the local front. As on AWS (where it is IAM-signed) it is not for
  clients: only a peer on this machine (a loopback address, or the address it connected to) is answered, and, when
  the hub has ``management_credentials``, only a request SigV4-signed with them (the embedded default's moto
  credential, which its broadcaster signs with); others get 403 ``ForbiddenException`` (:meth:`SocketHub.refusal`).

With ``aws_parity`` the hub applies API Gateway's limits instead of the original's, so what passes locally in that
mode works on AWS: binary frames from the client close the session with 1003, messages over 128 KB with 1009, and
a session closes after 10 minutes idle or 2 hours in all (1001).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Protocol
from urllib.parse import parse_qsl, unquote

from websockets.exceptions import ConnectionClosed, SecurityError
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.sync.connection import Connection as Socket

from lakesync.core.errors import LakeSyncError
from lakesync.core.realtime import Connection, Encoding
from lakesync.gateway import realtime
from lakesync.gateway.realtime import (
    API_GATEWAY_MESSAGE_BYTES,
    CLOSE_POLICY_VIOLATION,
    CLOSE_UNSUPPORTED_DATA,
    MAX_FRAME_BYTES,
    SOCKET_PATH,
    SessionClose,
)
from lakesync.local.access import LocalCredentials, SignatureRefused, is_loopback_host, verify

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler

    from lakesync.gateway.deps import GatewayDeps
    from lakesync.ports import ConnectionStore

__all__ = [
    "GatewaySessions",
    "HubManagementClient",
    "ManagementRequest",
    "SessionBackend",
    "SocketHub",
    "is_local_peer",
    "is_socket_path",
]

logger = logging.getLogger(__name__)

AWS_SOCKET_PATH: Final = "/ws"
MANAGEMENT_PATH: Final = re.compile(r"^/@connections/([^/]+)$")
AWS_IDLE_S: Final = 600.0
AWS_MAX_SESSION_S: Final = 7200.0
CLOSE_GOING_AWAY: Final = 1001


class SessionBackend(Protocol):
    """What the hub asks of the gateway: open a session, serve a message. Nothing is asked when a session ends: as
    on AWS, where the WebSocket API has no ``$disconnect`` route, its record is forgotten when it expires or when a
    broadcast finds it gone."""

    def open(self, gateway: str | None, headers: Mapping[str, str], query: Mapping[str, str], sid: str) -> Connection:
        """Authenticate an upgrade and record its session.

        Raises:
            LakeSyncError: the upgrade is refused with the error's status.
        """
        ...

    def message(self, connection: Connection, data: bytes | str) -> bytes | str:
        """The reply to one client message, in the session's encoding.

        Raises:
            SessionClose: the session must close.
        """
        ...


class GatewaySessions:
    """The :class:`SessionBackend` over the gateway services: sessions recorded in ``connections``, frames served
    with ``deps`` (each a callable, so the handlers' lazily built dependencies are used)."""

    def __init__(
        self,
        deps: Callable[[], GatewayDeps],
        connections: Callable[[], ConnectionStore],
        secrets: Callable[[], Sequence[str]],
        served: Callable[[], Collection[str]],
    ) -> None:
        self._deps = deps
        self._connections = connections
        self._secrets = secrets
        self._served = served

    def open(self, gateway: str | None, headers: Mapping[str, str], query: Mapping[str, str], sid: str) -> Connection:
        return realtime.connect(self._connections(), sid, gateway, headers, query, self._secrets(), self._served())

    def message(self, connection: Connection, data: bytes | str) -> bytes | str:
        return realtime.serve_message(self._deps(), connection, data)


def is_socket_path(path: str) -> bool:
    """Whether an upgrade to ``path`` (no query) is for the real-time socket."""
    return path == AWS_SOCKET_PATH or SOCKET_PATH.match(path) is not None


@dataclass(eq=False)
class _Session:
    connection: Connection
    socket: Socket
    handshake: bytes
    source_ip: str
    user_agent: str
    opened: float = field(default_factory=time.monotonic)
    last_active: float = field(default_factory=time.time)
    recent: deque[float] = field(default_factory=deque)


class SocketHub:
    """The open sessions of one local front.

    Args:
        backend: Opens sessions and serves their messages.
        aws_parity: Apply API Gateway's limits (binary frames refused, 128 KB messages, idle and session timeouts).
        max_connections: Open sessions at most (the original's 1,000); more are refused with 503.
        rate_limit: Messages per session per second at most (the original's 50).
        ping_interval: Seconds between server pings (``None``: none).
        idle_timeout_s: With ``aws_parity``, a session with no client message for this long is closed (1001).
        max_session_s: With ``aws_parity``, a session is closed this long after it opened (1001).
        management_credentials: The key pair management-API calls must be signed with (``None``: no signature
            check, the peer check alone).
    """

    def __init__(
        self,
        backend: SessionBackend,
        *,
        aws_parity: bool = False,
        max_connections: int = 1000,
        rate_limit: int = 50,
        ping_interval: float | None = 20.0,
        idle_timeout_s: float = AWS_IDLE_S,
        max_session_s: float = AWS_MAX_SESSION_S,
        management_credentials: LocalCredentials | None = None,
    ) -> None:
        self.backend = backend
        self.management_credentials = management_credentials
        self.aws_parity = aws_parity
        self.max_connections = max_connections
        self.rate_limit = rate_limit
        self.ping_interval = ping_interval
        self.idle_timeout_s = idle_timeout_s
        self.max_session_s = max_session_s
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self._opening = 0
        self._closing = False

    @property
    def open_sessions(self) -> int:
        """How many sessions are open or opening."""
        with self._lock:
            return len(self._sessions) + self._opening

    # --- the upgrade and the session loop -------------------------------------------------------------------------

    def serve_upgrade(self, request: BaseHTTPRequestHandler, path: str, query: str) -> None:
        """Answer an upgrade request on ``request``'s connection and serve the session until it ends.

        ``request`` is the front's handler; its connection is closed when this returns.
        """
        params = dict(parse_qsl(query, keep_blank_values=True))
        headers = {k.lower(): v for k, v in request.headers.items()}
        match = SOCKET_PATH.match(path)
        gateway = match.group(1) if match else params.get("gateway")
        protocol = ServerProtocol(max_size=API_GATEWAY_MESSAGE_BYTES if self.aws_parity else MAX_FRAME_BYTES)
        sid = _connection_id()
        with self._lock:
            full = self._closing or len(self._sessions) + self._opening >= self.max_connections
            self._opening += not full
        if full:
            _reply(request, 503, None)
            return
        session: _Session | None = None
        try:
            session = self._open(request, protocol, gateway, headers, params, sid)
        finally:
            with self._lock:
                self._opening -= 1
                if session is not None:
                    self._sessions[sid] = session
        if session is None:
            return
        # The 101 goes out once the session can be found: a client may be sent a broadcast as soon as it sees it.
        request.connection.sendall(session.handshake)
        session.socket.start_keepalive()
        try:
            self._serve(session)
        finally:
            with self._lock:
                self._sessions.pop(sid, None)
            with contextlib.suppress(Exception):
                session.socket.close()
            request.close_connection = True

    def _open(
        self,
        request: BaseHTTPRequestHandler,
        protocol: ServerProtocol,
        gateway: str | None,
        headers: Mapping[str, str],
        params: Mapping[str, str],
        sid: str,
    ) -> _Session | None:
        """Authenticate and accept the handshake (its answer in ``handshake``, still to send); ``None`` when the upgrade
        was answered otherwise."""
        # The front has read the request already: hand its bytes to the protocol, which parses and checks the
        # handshake before the session is recorded (a header line over its 8 KiB limit, a missing Sec-WebSocket-Key
        # are refused here, as JSON errors, with nothing written).
        protocol.receive_data(_request_bytes(request))
        ws_request = next((e for e in protocol.events_received() if isinstance(e, Request)), None)
        if ws_request is None:
            too_large = isinstance(protocol.handshake_exc, SecurityError)  # a header line or count over its limits
            status, text = (431, "Request header too large") if too_large else (400, "Invalid upgrade request")
            _reply(request, status, {"error": text, "code": "VALIDATION_ERROR"})
            return None
        response = protocol.accept(ws_request)
        if response.status_code != 101:  # not a WebSocket handshake (key, version, upgrade headers): nothing opened
            text = response.body.decode(errors="replace").strip() or "Invalid upgrade request"
            _reply(request, response.status_code, {"error": text, "code": "VALIDATION_ERROR"})
            return None
        try:
            connection = self.backend.open(gateway, headers, params, sid)
        except Exception as exc:
            if isinstance(exc, LakeSyncError) and exc.status < 500:
                _reply(request, exc.status, exc.to_body())
            else:  # as ws_connect fails the invocation, which API Gateway answers 500: no detail leaves
                logger.exception("upgrade of session %s failed", sid)
                _reply(request, 500, {"error": "Internal error", "code": "INTERNAL_ERROR"})
            return None
        protocol.send_response(response)
        if protocol.state is not State.OPEN:
            request.connection.sendall(b"".join(protocol.data_to_send()))
            return None
        handshake = b"".join(protocol.data_to_send())
        sock = request.connection
        sock.settimeout(None)
        ws = Socket(sock, protocol, ping_interval=self.ping_interval, ping_timeout=self.ping_interval)
        return _Session(connection, ws, handshake, str(request.client_address[0]), headers.get("user-agent", ""))

    def _serve(self, session: _Session) -> None:
        ws = session.socket
        while True:
            try:
                message = ws.recv(timeout=self._wait(session))
            except TimeoutError:
                ws.close(CLOSE_GOING_AWAY, "Going away")
                return
            except ConnectionClosed:
                return
            session.last_active = time.time()
            try:
                self._check_rate(session)
                if self.aws_parity and isinstance(message, bytes):
                    raise SessionClose(CLOSE_UNSUPPORTED_DATA, "Binary frames are not supported")
                reply = self.backend.message(session.connection, message)
            except SessionClose as close:
                ws.close(close.code, close.reason)
                return
            except Exception:
                logger.exception("session %s failed", session.connection.connection_id)
                ws.close(1011, "Internal error")
                return
            try:
                ws.send(reply)
            except ConnectionClosed:
                return

    def _wait(self, session: _Session) -> float | None:
        if not self.aws_parity:
            return None
        left = self.max_session_s - (time.monotonic() - session.opened)
        return max(0.0, min(self.idle_timeout_s, left))

    def _check_rate(self, session: _Session) -> None:
        now = time.monotonic()
        recent = session.recent
        while recent and now - recent[0] >= 1.0:
            recent.popleft()
        recent.append(now)
        if len(recent) > self.rate_limit:
            raise SessionClose(CLOSE_POLICY_VIOLATION, "Rate limit exceeded")

    # --- the management API ---------------------------------------------------------------------------------------

    def send(self, connection_id: str, data: bytes) -> bool:
        """Send ``data`` to a session (as text for a base64 session); ``False`` when it is not open."""
        session = self._session(connection_id)
        if session is None:
            return False
        payload: bytes | str = data.decode("ascii") if session.connection.encoding is Encoding.BASE64 else data
        try:
            session.socket.send(payload)
        except (ConnectionClosed, OSError, UnicodeDecodeError):
            return False
        return True

    def close(self, connection_id: str, code: int = CLOSE_GOING_AWAY, reason: str = "") -> bool:
        """Close a session; ``False`` when it is not open."""
        session = self._session(connection_id)
        if session is None:
            return False
        with contextlib.suppress(Exception):
            session.socket.close(code, reason)
        return True

    def close_all(self) -> None:
        """Close every session (the front is stopping) and refuse new ones."""
        with self._lock:
            self._closing = True
            sessions = list(self._sessions.values())
        for session in sessions:
            with contextlib.suppress(Exception):
                session.socket.close(CLOSE_GOING_AWAY, "Server shutting down")

    def refusal(self, request: ManagementRequest, body: bytes) -> tuple[int, list[tuple[str, str]], bytes] | None:
        """The 403 refusing a management-API call from another machine or not signed with the hub's credential;
        ``None`` when it may be served."""
        if not is_local_peer(request.peer, request.local_address):
            logger.warning("management API call from %s refused: not on this machine", request.peer)
            return _management_error(403, "ForbiddenException", "Forbidden")
        if self.management_credentials is not None:
            try:
                verify(self.management_credentials, request.method, request.target, request.headers, body)
            except SignatureRefused as refused:
                logger.warning("management API call refused: %s", refused)
                return _management_error(403, "ForbiddenException", "Forbidden")
        return None

    def manage(self, method: str, path: str, body: bytes) -> tuple[int, list[tuple[str, str]], bytes] | None:
        """Serve API Gateway's management API for the sessions; ``None`` when ``path`` is not one of its routes."""
        match = MANAGEMENT_PATH.match(path)
        if match is None:
            return None
        connection_id = unquote(match.group(1))
        if method == "POST":
            if len(body) > API_GATEWAY_MESSAGE_BYTES:
                return _management_error(413, "PayloadTooLargeException", "Message too long")
            return (200, [], b"") if self.send(connection_id, body) else _gone()
        if method == "DELETE":
            return (204, [], b"") if self.close(connection_id) else _gone()
        if method == "GET":
            session = self._session(connection_id)
            if session is None:
                return _gone()
            info = {
                "ConnectedAt": _iso(session.connection.connected_at),
                "LastActiveAt": _iso(session.last_active),
                "Identity": {"SourceIp": session.source_ip, "UserAgent": session.user_agent},
            }
            return 200, [("content-type", "application/json")], json.dumps(info).encode()
        return _management_error(405, "MethodNotAllowedException", "Method not allowed")

    def _session(self, connection_id: str) -> _Session | None:
        with self._lock:
            return self._sessions.get(connection_id)


class HubManagementClient:
    """API Gateway's management API client (the ``apigatewaymanagementapi`` calls the broadcaster's
    :class:`~lakesync.aws.ws_sender.ManagementApiSender` makes) over a hub in this process.

    The embedded default's broadcaster runs in the front's process: it sends through this client, with the API's
    answers (410 ``GoneException`` for a session that is not open, 413 over 128 KB) and without an HTTP request,
    a signature and its check per message, which cost about 3 ms of CPU per recipient. The HTTP management API
    (:meth:`SocketHub.manage`) still serves every other caller.
    """

    def __init__(self, hub: SocketHub) -> None:
        self.hub = hub

    def post_to_connection(self, *, ConnectionId: str, Data: bytes) -> dict[str, Any]:
        """``PostToConnection``.

        Raises:
            botocore.exceptions.ClientError: 410 ``GoneException``, 413 ``PayloadTooLargeException``.
        """
        if len(Data) > API_GATEWAY_MESSAGE_BYTES:
            raise _client_error("PostToConnection", 413, "PayloadTooLargeException")
        if not self.hub.send(ConnectionId, Data):
            raise _client_error("PostToConnection", 410, "GoneException")
        return {}

    def delete_connection(self, *, ConnectionId: str) -> dict[str, Any]:
        """``DeleteConnection``.

        Raises:
            botocore.exceptions.ClientError: 410 ``GoneException``.
        """
        if not self.hub.close(ConnectionId):
            raise _client_error("DeleteConnection", 410, "GoneException")
        return {}


def _client_error(operation: str, status: int, code: str) -> Exception:
    from botocore.exceptions import ClientError

    response: Any = {"Error": {"Code": code, "Message": ""}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, operation)


@dataclass(frozen=True, slots=True)
class ManagementRequest:
    """A management-API call as the front received it.

    Attributes:
        method: The HTTP method.
        target: The request target as sent (path and query, percent-encoded).
        headers: The request headers, names in lower case.
        peer: The client's address.
        local_address: The address the client connected to.
    """

    method: str
    target: str
    headers: Mapping[str, str]
    peer: str
    local_address: str


def is_local_peer(peer: str, local_address: str) -> bool:
    """Whether a connection from ``peer`` to ``local_address`` comes from this machine: a loopback peer, or one
    whose address is the very address it connected to (a TCP peer elsewhere cannot complete a handshake from it)."""
    if is_loopback_host(peer):
        return True
    return bool(peer) and peer == local_address and not peer.startswith(("0.", "::"))


def _connection_id() -> str:
    # API Gateway's connection ids are 16 characters of URL-safe base64 ending in "=" (e.g. "L0SM9cOFvHcCIhw=").
    return secrets.token_urlsafe(10)[:15] + "="


def _request_bytes(request: BaseHTTPRequestHandler) -> bytes:
    head = [request.requestline] + [f"{name}: {value}" for name, value in request.headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _gone() -> tuple[int, list[tuple[str, str]], bytes]:
    return _management_error(410, "GoneException", "")


def _management_error(status: int, kind: str, message: str) -> tuple[int, list[tuple[str, str]], bytes]:
    headers = [("content-type", "application/json"), ("x-amzn-ErrorType", kind)]
    return status, headers, json.dumps({"message": message or None}).encode()


def _reply(request: BaseHTTPRequestHandler, status: int, body: Mapping[str, Any] | None) -> None:
    """An HTTP answer instead of the upgrade; the connection closes after it."""
    payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
    request.send_response(status)
    if body is not None:
        request.send_header("Content-Type", "application/json")
    request.send_header("Content-Length", str(len(payload)))
    request.send_header("Connection", "close")
    request.end_headers()
    request.wfile.write(payload)
    request.close_connection = True
