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
moves the cursor. It also asks for a pull on every (re)connect, since broadcasts sent while it was away are lost.
Connections drop (AWS closes them after 2 h, or 10 min idle; pings every 60 s keep them busy): it reconnects with
jittered backoff, reset only by a session that delivered a broadcast or lasted ``healthy_after`` seconds (a server
that accepts and drops at once is retried less and less often, not every second). A gateway without the route (the
upgrade answered 404, 426, ...) leaves the store polling; the listener tries again after ``unavailable_retry``
seconds.
"""

from __future__ import annotations

import base64
import binascii
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
    ) -> None:
        self.store = store
        self.backoff = backoff or Backoff(initial=1.0, cap=60.0)
        self.unavailable_retry = unavailable_retry
        self.open_timeout = open_timeout
        self.healthy_after = healthy_after
        """Seconds a session must last (unless it delivers a broadcast) for its end to reset the backoff."""
        self.connected = False
        self.unavailable = False
        """The gateway answered the upgrade with a "no such channel" status (the store polls)."""
        self.broadcasts = 0
        self._stop = threading.Event()
        self._socket: Any = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"lakesync-ws-{store.client_id}", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Close the socket and wait for the thread."""
        self._stop.set()
        with self._lock:
            sock = self._socket
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
        """One connection, until it closes; whether it was healthy (delivered a broadcast or lasted
        ``healthy_after`` seconds)."""
        from websockets.exceptions import ConnectionClosed
        from websockets.sync.client import connect

        http = self.store.http
        url = websocket_url(self.store.url, self.store.gateway, http.token, self.store.ws_url)
        with connect(
            url,
            additional_headers={"Authorization": f"Bearer {http.token}"},
            open_timeout=self.open_timeout,
            ping_interval=PING_INTERVAL,
            ping_timeout=PING_INTERVAL / 2,
            close_timeout=2,
            max_size=16 * 1024 * 1024,
        ) as sock:
            with self._lock:
                self._socket = sock
            opened, broadcasts = time.monotonic(), self.broadcasts
            try:
                if self._stop.is_set():
                    return False
                self.connected = True
                self.unavailable = False
                self.store.request_sync()  # broadcasts sent while away are lost: pull on every (re)connect
                while not self._stop.is_set():
                    try:
                        message = sock.recv()
                    except ConnectionClosed as exc:
                        logger.info("real-time channel closed: %s", exc)
                        break
                    self._handle(message)
                return self.broadcasts > broadcasts or time.monotonic() - opened >= self.healthy_after
            finally:
                self.connected = False
                with self._lock:
                    self._socket = None
                if not self._stop.is_set():
                    self.store.request_sync()  # back to polling: pull now rather than after a whole interval

    def _handle(self, message: str | bytes) -> None:
        try:
            response = decode_message(message)
        except CodecError as exc:
            logger.warning("ignoring a real-time message that is not a broadcast: %s", exc)
            return
        self.broadcasts += 1
        if response.deltas:
            try:
                self.store.apply_broadcast(response.deltas)
            except Exception:
                logger.exception("applying a broadcast failed; the next pull delivers it")
        self.store.request_sync()
