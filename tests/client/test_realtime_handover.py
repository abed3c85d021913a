"""The real-time listener's handover before API Gateway's 2-hour limit, against a real WebSocket server (websockets'
sync server): a session handed over to a new socket opened before the old one closes asks for no pull, and every
way a broadcast may have been missed (a socket ending without a successor, an old socket ending during its handover)
still asks for one."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection, serve

from lakesync.auth import mint_token
from lakesync.client.backoff import Backoff
from lakesync.client.http import SyncClient
from lakesync.client.realtime import RealtimeListener
from lakesync.core.delta import RowDelta
from tests.client.test_realtime_hostile import _broadcast, _wait_for

pytestmark = pytest.mark.integration


class FakeStore:
    """A :class:`~lakesync.client.realtime.RealtimeStore` that counts the pulls asked and records the broadcasts."""

    client_id = "c"
    url = "http://127.0.0.1:9"
    gateway = "default"

    def __init__(self, ws_url: str) -> None:
        self.ws_url = ws_url
        self.http = SyncClient(self.url, "default", mint_token("c", "default", "s" * 32), "c")
        self.pulls = 0
        self.applied: list[str] = []
        self._lock = threading.Lock()

    def request_sync(self) -> None:
        with self._lock:
            self.pulls += 1

    def apply_broadcast(self, deltas: Sequence[RowDelta]) -> dict[str, set[str]]:
        with self._lock:
            self.applied.extend(d.row_id for d in deltas)
        return {}


@dataclass
class Session:
    """One connection the server accepted: when it opened and closed (monotonic), and the socket."""

    sock: ServerConnection
    opened: float = field(default_factory=time.monotonic)
    closed: float | None = None


Handler = Callable[[list[Session], Session], None]


def _hold(_sessions: list[Session], session: Session) -> None:
    """Keep the connection until the client closes it."""
    try:
        for _ in session.sock:
            pass
    except ConnectionClosed:
        pass


@pytest.fixture
def server() -> Iterator[Callable[..., tuple[list[Session], FakeStore, RealtimeListener]]]:
    """``server(handler, process_request=None, **listener_options)`` → the sessions accepted, a fake store and its
    started listener, on a WebSocket server running ``handler(sessions, session)`` per connection."""
    stops: list[Callable[[], None]] = []

    def make(
        handler: Handler = _hold, process_request: Any = None, **options: Any
    ) -> tuple[list[Session], FakeStore, RealtimeListener]:
        sessions: list[Session] = []

        def serve_one(sock: ServerConnection) -> None:
            session = Session(sock)
            sessions.append(session)
            try:
                handler(sessions, session)
            finally:
                session.closed = time.monotonic()

        ws = serve(serve_one, "127.0.0.1", 0, process_request=process_request)
        threading.Thread(target=ws.serve_forever, daemon=True).start()
        store = FakeStore(f"ws://127.0.0.1:{ws.socket.getsockname()[1]}/ws")
        backoff = Backoff(initial=0.01, factor=2.0, cap=0.2, random=lambda: 0.0)
        listener = RealtimeListener(store, backoff=backoff, **options)
        listener.start()

        def stop() -> None:
            listener.stop()
            ws.shutdown()

        stops.append(stop)
        return sessions, store, listener

    yield make
    for stop in stops:
        stop()


def test_a_handover_before_the_limit_asks_for_no_pull(server: Any) -> None:
    # Given a server that keeps every connection, and a listener handing its session over every 0.3 s
    sessions, store, listener = server(rotate_after=0.3, handover=0.2)

    # When it has handed the session over three times, and the old sockets are closed
    _wait_for(lambda: len(sessions) >= 4 and all(s.closed for s in sessions[:3]))

    # Then each new socket opened before the old one closed, the old one stayed open a handover longer, and the
    # only pull asked was the first connection's
    for old, new in itertools.pairwise(sessions[:4]):
        assert old.closed is not None and new.opened < old.closed
        assert old.closed - new.opened >= 0.15
    assert listener.handovers >= 3
    assert store.pulls == 1
    assert listener.connected


def test_a_broadcast_to_the_old_socket_during_the_handover_is_applied(server: Any) -> None:
    def second_sends_on_first(sessions: list[Session], session: Session) -> None:
        if len(sessions) == 2:  # the old socket is still being read: a broadcast that read the sessions before
            sessions[0].sock.send(_broadcast("late"))
        _hold(sessions, session)

    # Given a server that, when the second socket opens, sends a broadcast on the first
    sessions, store, listener = server(second_sends_on_first, rotate_after=0.3, handover=5.0)

    # When the session has been handed over
    _wait_for(lambda: len(sessions) >= 2)

    # Then the broadcast is applied (and, as every broadcast does, asks for a pull), and no other pull was asked
    _wait_for(lambda: store.applied == ["late"])
    assert store.pulls == 2
    assert listener.handovers >= 1


def test_a_socket_that_ends_without_a_successor_asks_for_a_pull(server: Any) -> None:
    def close_soon(_sessions: list[Session], session: Session) -> None:
        time.sleep(0.1)

    # Given a server that ends every connection after 0.1 s, well before the listener's handover
    sessions, store, listener = server(close_soon, rotate_after=60.0)

    # When the listener has reconnected three times
    _wait_for(lambda: len(sessions) >= 4)

    # Then each reconnect asked for a pull (a broadcast sent while it was away is lost), and none was a handover
    assert store.pulls >= 2 * 3
    assert listener.handovers == 0


def test_an_old_socket_that_ends_during_its_handover_asks_for_a_pull(server: Any) -> None:
    def new_ends_old(sessions: list[Session], session: Session) -> None:
        if len(sessions) >= 2:  # as a gateway whose 2-hour limit came before the handover ended
            sessions[-2].sock.close(1001, "Going away")
        _hold(sessions, session)

    # Given a server that closes the old socket as soon as a new one opens
    sessions, store, listener = server(new_ends_old, rotate_after=0.3, handover=5.0)

    # When the session has been handed over
    _wait_for(lambda: len(sessions) >= 2 and sessions[0].closed is not None)

    # Then a pull was asked beyond the first connection's (a broadcast may have fallen between the two sockets)
    _wait_for(lambda: store.pulls >= 2)
    assert listener.handovers >= 1
    assert listener.connected


def test_a_successor_that_cannot_be_opened_leaves_the_old_socket_in_use(server: Any) -> None:
    upgrades: list[int] = []

    def refuse_the_second(sock: ServerConnection, _request: Any) -> Any:
        upgrades.append(1)
        return sock.respond(503, "Busy\n") if len(upgrades) == 2 else None

    # Given a server that refuses the second upgrade only, and a listener retrying a handover after 0.2 s
    sessions, store, _listener = server(
        process_request=refuse_the_second, rotate_after=0.3, rotate_retry=0.2, handover=0.2
    )

    # When the handover has been tried again and has succeeded
    _wait_for(lambda: len(sessions) >= 2 and sessions[0].closed is not None)

    # Then the first socket was kept until its successor was open, and no pull was asked beyond the first
    assert len(upgrades) >= 3
    assert sessions[1].opened < (sessions[0].closed or 0.0)
    assert store.pulls == 1


def test_a_successor_refused_401_refreshes_the_token_for_the_next_attempt(server: Any) -> None:
    tokens = iter(mint_token("c", "default", "s" * 32, claims={"n": str(n)}) for n in range(1, 100))
    seen: list[str] = []

    def expire_the_first_token(sock: ServerConnection, request: Any) -> Any:
        seen.append(request.headers["Authorization"])
        return sock.respond(401, "Token expired\n") if len(seen) == 2 else None

    # Given a server that refuses the first handover's upgrade 401, and a store that can get a new token
    sessions, store, listener = server(
        process_request=expire_the_first_token, rotate_after=0.3, rotate_retry=0.2, handover=0.2
    )
    store.http.get_token = lambda: next(tokens)

    # When the handover has been tried again and has succeeded
    _wait_for(lambda: len(sessions) >= 2 and sessions[0].closed is not None)

    # Then the retry carried a new token, and no pull was asked beyond the first
    assert seen[2] != seen[1] == seen[0]
    assert store.pulls == 1 and listener.handovers >= 1
