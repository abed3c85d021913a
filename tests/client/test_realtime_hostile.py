"""The real-time listener against a hostile WebSocket server (a real one, websockets' sync server): frames that are
not broadcasts are skipped without losing the channel, and a server that drops every connection at once is retried
with a growing delay, not in a storm."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.server import ServerConnection, serve

from lakesync.auth import mint_token
from lakesync.client import Change, LocalStore, SyncStateError, connect
from lakesync.client.backoff import Backoff
from lakesync.client.realtime import RealtimeListener
from lakesync.core.delta import make_delta
from lakesync.core.messages import SyncResponse
from lakesync.wire.framing import encode_broadcast
from tests.client.hostile import ScriptedGateway, empty_pull, good_push, json_answer
from tests.factories import todo_schema

pytestmark = pytest.mark.integration

TABLE = "todos"


def _broadcast(row_id: str) -> str:
    """A base64 broadcast of another client's insert of ``row_id``."""
    delta = make_delta("INSERT", table=TABLE, row_id=row_id, client_id="other", hlc=1 << 16, columns={"title": row_id})
    return base64.b64encode(encode_broadcast(SyncResponse((delta,), 1 << 16))).decode()


def _wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


Listen = Callable[..., tuple[LocalStore, Any]]


@pytest.fixture
def listen(tmp_path: Path) -> Iterator[Listen]:
    """``listen(handler, process_request=None, **store_options)`` → a store and its started listener, on a WebSocket
    server serving ``handler`` (the connections it accepted are counted in ``listener.accepted``); all stopped at the
    end."""
    stops: list[Callable[[], None]] = []

    def make(
        handler: Callable[[ServerConnection], None], process_request: Any = None, **options: Any
    ) -> tuple[LocalStore, Any]:
        accepted: list[float] = []

        def counted(sock: ServerConnection) -> None:
            accepted.append(time.monotonic())
            handler(sock)

        server = serve(counted, "127.0.0.1", 0, process_request=process_request)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        gateway = ScriptedGateway().__enter__()
        gateway.routes["pull"] = empty_pull
        gateway.routes["push"] = good_push
        store = connect(
            tmp_path / f"{len(stops)}.db",
            url=gateway.url,
            gateway="default",
            schemas=[todo_schema(TABLE)],
            realtime=False,
            ws_url=f"ws://127.0.0.1:{server.socket.getsockname()[1]}/ws",
            **({"token": mint_token("c", "default", "s" * 32)} | options),
        )
        listener = RealtimeListener(store, backoff=Backoff(initial=0.01, factor=2.0, cap=0.2, random=lambda: 0.0))
        listener.accepted = accepted  # type: ignore[attr-defined]
        listener.start()

        def stop() -> None:
            listener.stop()
            store.close()
            server.shutdown()
            gateway.__exit__()

        stops.append(stop)
        return store, listener

    yield make
    for stop in stops:
        stop()


def test_a_server_that_drops_every_connection_at_once_is_retried_ever_more_slowly(
    listen: Listen,
) -> None:
    # Given a server that accepts the socket and closes it straight away
    _store, listener = listen(lambda _sock: None)

    # When the listener has reconnected four times
    _wait_for(lambda: len(listener.accepted) >= 5)

    # Then each of those short sessions counted as a failure (the delay doubled each time, capped)
    assert listener.backoff.failures >= 4
    assert listener._thread.is_alive()


def test_a_session_that_delivers_a_broadcast_resets_the_backoff(
    listen: Listen,
) -> None:
    # Given a server that sends one broadcast per connection and then closes it
    store, listener = listen(lambda sock: sock.send(_broadcast(f"r{time.monotonic_ns()}")))

    # When the listener has reconnected four times
    _wait_for(lambda: len(listener.accepted) >= 5)

    # Then each session was healthy: the delay started over every time, and the broadcasts were applied
    assert listener.backoff.failures <= 1
    assert len(store.rows(TABLE)) >= 4


def test_frames_that_are_not_broadcasts_are_skipped_and_the_channel_stays(
    listen: Listen,
) -> None:
    release = threading.Event()

    def hostile(sock: ServerConnection) -> None:
        for frame in ("not base64!", "", base64.b64encode(b"\x03").decode(), b"\x03\xff\xff", b"\x01\x00", b""):
            sock.send(frame)
        sock.send(_broadcast("after-the-noise"))
        release.wait(30)

    # Given a server that sends bad text, bad base64, short, truncated and wrongly tagged frames, then a broadcast
    store, listener = listen(hostile)

    # Then the broadcast is applied on the same connection
    _wait_for(lambda: store.get(TABLE, "after-the-noise") is not None)
    assert len(listener.accepted) == 1 and listener.connected
    release.set()


def test_a_token_refresh_that_fails_does_not_end_the_listener(listen: Listen) -> None:
    refused: list[int] = []

    def unauthorized(sock: ServerConnection, _request: Any) -> Any:
        refused.append(1)
        return sock.respond(401, "Token expired\n")

    tokens = iter([mint_token("c", "default", "s" * 32)])

    def get_token() -> str:
        token = next(tokens, None)
        if token is None:
            raise ConnectionError("the identity provider is unreachable")
        return token

    # Given a server that answers every upgrade 401, and a get_token that fails after the first token
    _store, listener = listen(lambda _sock: None, process_request=unauthorized, token=None, get_token=get_token)

    # When the listener has been refused three times (each time trying to refresh the token, and failing)
    _wait_for(lambda: len(refused) >= 3)

    # Then it is still alive, retrying with backoff (it used to die with the refresh's exception)
    assert listener._thread.is_alive()
    assert listener.backoff.failures >= 2


@pytest.mark.parametrize("via", ["pull", "broadcast"])
def test_a_subscriber_may_close_the_store_from_a_background_thread(tmp_path: Path, via: str) -> None:
    hold = threading.Event()

    def broadcast_once(sock: ServerConnection) -> None:
        if via == "broadcast":
            sock.send(_broadcast("remote"))
        hold.wait(30)

    with serve(broadcast_once, "127.0.0.1", 0) as server, ScriptedGateway() as gateway:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        page = {"deltas": [], "serverHlc": "1", "hasMore": False, "cursor": "c1"}
        if via == "pull":
            delta = make_delta("INSERT", table=TABLE, row_id="remote", client_id="other", hlc=1 << 16)
            page["deltas"] = [delta.to_json()]
        gateway.routes["pull"] = lambda _seen: json_answer(page)
        store = connect(
            tmp_path / "closing.db",
            url=gateway.url,
            gateway="default",
            token=mint_token("c", "default", "s" * 32),
            schemas=[todo_schema(TABLE)],
            ws_url=f"ws://127.0.0.1:{server.socket.getsockname()[1]}/ws",
            poll_interval=0.05,
            debounce=0.01,
        )
        closed = threading.Event()
        failures: list[BaseException] = []

        def close_on_change(_change: Change) -> None:
            try:
                store.close()  # on the sync thread (a pull) or the listener's (a broadcast)
            except BaseException as exc:
                failures.append(exc)
            closed.set()

        # Given a subscriber that closes the store when a remote change arrives
        store.subscribe(TABLE, close_on_change)
        store.start()

        # When the change arrives (by a pull, or by a broadcast)
        assert closed.wait(30)
        hold.set()

        # Then the store is closed (before, joining its own thread raised and left the file open)
        assert failures == []
        with pytest.raises(SyncStateError, match="closed"):
            store.rows(TABLE)
        server.shutdown()
