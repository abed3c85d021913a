"""The client side of the real-time channel: a WebSocket that tells the store when to pull.

Protocol (the gateway's ``/v1/sync/{gw}/ws``):

* URL: ``ws_url`` if given, else the HTTP URL with ``ws``/``wss`` + ``/v1/sync/{gw}/ws``; the query always carries
  ``gateway={gw}&encoding=base64&token={jwt}`` and the token also goes as ``Authorization: Bearer``.
* With ``encoding=base64`` every message is a TEXT frame holding the standard base64 of the binary frame (API Gateway
  WebSocket APIs refuse binary frames from clients). Binary frames from the server are accepted as the raw bytes.
* The server sends broadcasts: ``0x03`` + SyncResponse (:func:`lakesync.wire.framing.decode_broadcast_frame`), the
  deltas of another client's push that this client may see. ``hasMore`` means more changed than fit: pull now.

Broadcasts are a latency optimisation only. The listener merges their deltas at once (idempotent: the later cursor
pull delivers them again and changes nothing), notifies subscribers, and asks the sync thread for a pull, which
moves the cursor. It also asks for a pull whenever it may have missed a broadcast: on connecting, and whenever a
socket ends without a successor already in place, since broadcasts sent while it was away are lost. Exactly-once
stays the cursor's job; the channel only decides when to pull.

API Gateway ends every connection after 2 hours. Before that (``rotate_after``, 1 h 59 min) the listener hands the
session over without a gap: it opens a new socket, and only once that one is open (the gateway records a session
before it answers the upgrade, so every broadcast that reads the sessions from then on finds it) keeps reading the
old one for ``handover`` seconds more (a broadcast that read the sessions just before still reaches it there), then
closes it. Every change committed meanwhile reaches at least one of the two sockets (both, at worst: merging twice
changes nothing), so the handover asks for no pull. If the new socket cannot be opened, the old one is kept and the
handover tried again later; if the old one ends before its ``handover`` seconds are up, a broadcast may have
fallen between them, and the listener pulls.

Connections drop otherwise too (10 min idle on AWS; pings every 60 s keep them busy): it reconnects with jittered
backoff, reset only by a session that delivered a broadcast or lasted ``healthy_after`` seconds (a server that
accepts and drops at once is retried less and less often, not every second). A gateway without the route (the
upgrade answered 404, 426, ...) leaves the store polling; the listener tries again after ``unavailable_retry``
seconds.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from lakesync.client.backoff import Backoff
from lakesync.core.errors import CodecError
from lakesync.core.messages import SyncResponse
from lakesync.wire.framing import decode_broadcast_frame

if TYPE_CHECKING:
    from lakesync.client.http import SyncClient
    from lakesync.core.delta import RowDelta

logger = logging.getLogger(__name__)

PING_INTERVAL = 60.0
MAX_CONNECTION_S = 7200.0
"""API Gateway's maximum connection duration: it closes every WebSocket after 2 hours."""
ROTATE_AFTER_S = MAX_CONNECTION_S - 60.0
"""Seconds after a socket opened at which the listener hands its session over to a new one: a minute before the
limit leaves time for the new socket's upgrade and the handover, however the two clocks differ."""
HANDOVER_S = 10.0
"""Seconds the old socket is still read once the new one is open: longer than a broadcast takes from reading the
sessions to its last send."""
ROTATE_RETRY_S = 30.0
"""Seconds before another handover attempt when the new socket could not be opened."""
UNAVAILABLE_STATUS = frozenset({400, 403, 404, 405, 426, 501})
"""Upgrade answers meaning "no real-time channel here": fall back to polling."""


def websocket_url(http_url: str, gateway: str, token: str, ws_url: str | None = None) -> str:
    """The real-time URL with its query (``gateway``, ``encoding=base64``, ``token``)."""
    if ws_url is None:
        parts = urllib.parse.urlsplit(http_url.rstrip("/"))
        scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
        base = urllib.parse.urlunsplit((scheme, parts.netloc, f"{parts.path}/v1/sync/{gateway}/ws", "", ""))
    else:
        base = ws_url
    query = urllib.parse.urlencode({"gateway": gateway, "encoding": "base64", "token": token})
    return base + ("&" if "?" in base else "?") + query


def decode_message(message: str | bytes) -> SyncResponse:
    """A server message as its broadcast: a TEXT frame is base64 of the frame, a binary frame the frame itself.

    Raises:
        CodecError: not base64, or not a broadcast frame.
    """
    if isinstance(message, str):
        try:
            data = base64.b64decode(message.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError) as exc:
            raise CodecError("Real-time text frame is not base64") from exc
    else:
        data = bytes(message)
    return decode_broadcast_frame(data)


class RealtimeStore(Protocol):
    """What the listener needs of the store (:class:`~lakesync.client.store.LocalStore` is one): where to connect,
    the client whose token the connection carries (refreshed on a 401), and where broadcasts go."""

    client_id: str
    url: str
    gateway: str
    ws_url: str | None
    http: SyncClient

    def request_sync(self) -> None:
        """Ask for a sync cycle soon."""

    def apply_broadcast(self, deltas: Sequence[RowDelta]) -> Mapping[str, set[str]]:
        """Merge a broadcast's deltas."""
        ...


class RealtimeListener:
    """The store's WebSocket thread (see the module docstring)."""

    def __init__(
        self,
        store: RealtimeStore,
        *,
        backoff: Backoff | None = None,
        unavailable_retry: float = 300.0,
        open_timeout: float = 10.0,
        healthy_after: float = 30.0,
        rotate_after: float | None = ROTATE_AFTER_S,
        handover: float = HANDOVER_S,
        rotate_retry: float = ROTATE_RETRY_S,
    ) -> None:
        self.store = store
        self.backoff = backoff or Backoff(initial=1.0, cap=60.0)
        self.unavailable_retry = unavailable_retry
        self.open_timeout = open_timeout
        self.healthy_after = healthy_after
        """Seconds a session must last (unless it delivers a broadcast) for its end to reset the backoff."""
        self.rotate_after = rotate_after
        """Seconds after a socket opened at which it is handed over to a new one (``None``: never)."""
        self.handover = handover
        """Seconds the old socket is still read once its successor is open."""
        self.rotate_retry = rotate_retry
        """Seconds before another handover attempt when the new socket could not be opened."""
        self.connected = False
        self.unavailable = False
        """The gateway answered the upgrade with a "no such channel" status (the store polls)."""
        self.broadcasts = 0
        self.handovers = 0
        """Sessions handed over to a new socket without a gap (no pull asked)."""
        self._stop = threading.Event()
        self._socket: Any = None
        self._retiring: set[Any] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"lakesync-ws-{store.client_id}", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Close the socket and wait for the thread."""
        self._stop.set()
        with self._lock:
            sockets = [self._socket, *self._retiring]
        for sock in sockets:
            if sock is not None:
                sock.close()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                delay = self._connect_once()
            except Exception as exc:  # the thread must outlive anything a connection, or a token refresh, raises
                delay = self.backoff.next_delay()
                logger.info("real-time channel lost (%s); reconnecting in %.1fs", exc, delay)
            self._stop.wait(delay)

    def _connect_once(self) -> float:
        """One connection and its session; the seconds to wait before the next."""
        from websockets.exceptions import InvalidStatus

        try:
            if self._session():
                self.backoff.reset()
            return self.backoff.next_delay()
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status == 401 and self.store.http.refresh_token(self.store.http.token):
                return self.backoff.next_delay()
            if status in UNAVAILABLE_STATUS:
                self.unavailable = True
                logger.info("no real-time channel at the gateway (%s); polling", status)
                return self.unavailable_retry
            return self.backoff.next_delay()

    def _session(self) -> bool:
        """One session, until its last socket closes; whether it was healthy (delivered a broadcast or lasted
        ``healthy_after`` seconds)."""
        sock = self._open()
        with self._lock:
            self._socket = sock
        opened, broadcasts = time.monotonic(), self.broadcasts
        try:
            if self._stop.is_set():
                return False
            self.connected = True
            self.unavailable = False
            self.store.request_sync()  # broadcasts sent while away are lost: pull on every (re)connect
            self._follow(sock)
            return self.broadcasts > broadcasts or time.monotonic() - opened >= self.healthy_after
        finally:
            self.connected = False
            with self._lock:
                sock, self._socket = self._socket, None
            sock.close()
            if not self._stop.is_set():
                self.store.request_sync()  # back to polling: pull now rather than after a whole interval

    def _open(self) -> Any:
        """A new socket to the gateway, with the current token.

        Raises:
            websockets.exceptions.InvalidStatus: the upgrade was answered otherwise (401, 404, ...).
        """
        from websockets.sync.client import connect

        http = self.store.http
        connection = connect(
            websocket_url(self.store.url, self.store.gateway, http.token, self.store.ws_url),
            additional_headers={"Authorization": f"Bearer {http.token}"},
            open_timeout=self.open_timeout,
            ping_interval=PING_INTERVAL,
            ping_timeout=PING_INTERVAL / 2,
            close_timeout=2,
            max_size=16 * 1024 * 1024,
        )
        # Entered, not used in a ``with``: a socket may outlive the block that opened it (handed over); close()
        # ends it.
        return connection.__enter__()

    def _follow(self, sock: Any) -> None:
        """Serve ``sock``'s messages, handing it over to a new socket every ``rotate_after`` seconds, until the
        socket in use closes or the listener stops."""
        from websockets.exceptions import ConnectionClosed

        rotate_at = None if self.rotate_after is None else time.monotonic() + self.rotate_after
        while not self._stop.is_set():
            try:
                message = sock.recv(timeout=None if rotate_at is None else max(0.0, rotate_at - time.monotonic()))
            except TimeoutError:
                successor = self._successor()
                if successor is None:
                    rotate_at = time.monotonic() + self.rotate_retry
                    continue
                self._retire(sock)
                sock = successor
                rotate_at = time.monotonic() + (self.rotate_after or 0.0)
                continue
            except ConnectionClosed as exc:
                logger.info("real-time channel closed: %s", exc)
                return
            self._handle(message)

    def _successor(self) -> Any:
        """The socket taking the session over, open and in place (``None``: it could not be opened; the old one
        stays)."""
        from websockets.exceptions import InvalidStatus

        token = self.store.http.token
        try:
            successor = self._open()
        except Exception as exc:
            logger.info("real-time handover postponed: %s", exc)
            if isinstance(exc, InvalidStatus) and exc.response.status_code == 401:
                with contextlib.suppress(Exception):  # the next attempt, or the reconnect, tries again
                    self.store.http.refresh_token(token)
            return None
        with self._lock:
            if self._stop.is_set():
                successor.close()
                return None
            self._socket = successor
        self.handovers += 1
        return successor

    def _retire(self, sock: Any) -> None:
        """Keep reading ``sock`` for ``handover`` seconds on a thread of its own, then close it; a pull is asked if
        it ends sooner (a broadcast may have fallen between it and its successor)."""
        with self._lock:
            self._retiring.add(sock)
        threading.Thread(target=self._drain, args=(sock,), name=f"{self._thread.name}-handover", daemon=True).start()

    def _drain(self, sock: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        deadline = time.monotonic() + self.handover
        try:
            while not self._stop.is_set():
                try:
                    message = sock.recv(timeout=max(0.0, deadline - time.monotonic()))
                except TimeoutError:
                    return
                except ConnectionClosed:
                    if not self._stop.is_set():
                        logger.info("real-time socket ended during its handover; pulling")
                        self.store.request_sync()
                    return
                self._handle(message)
        finally:
            sock.close()
            with self._lock:
                self._retiring.discard(sock)

    def _handle(self, message: str | bytes) -> None:
        try:
            response = decode_message(message)
        except CodecError as exc:
            logger.warning("ignoring a real-time message that is not a broadcast: %s", exc)
            return
        with self._lock:
            self.broadcasts += 1
        if response.deltas:
            try:
                self.store.apply_broadcast(response.deltas)
            except Exception:
                logger.exception("applying a broadcast failed; the next pull delivers it")
        self.store.request_sync()
