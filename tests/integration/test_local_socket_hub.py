"""The local front's socket hub over real sockets, with a backend that answers at once so that the hub's own limits are
what is tested: the original's 50 messages a second and 1,000 sessions, and API Gateway's limits in AWS-parity mode
(128 KB messages, the idle and session timeouts, binary frames refused). The gateway behind the hub is tested in
test_local_realtime.py against the embedded default."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator, Mapping

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from lakesync.core.errors import AuthError, StorageError
from lakesync.core.realtime import Connection, Encoding
from lakesync.local.front import LocalFront
from lakesync.local.websocket import SocketHub

pytestmark = pytest.mark.integration


class EchoBackend:
    """Opens every session with a ``token``; answers each message with itself."""

    def __init__(self) -> None:
        self.opened: list[str] = []

    def open(self, gateway: str | None, headers: Mapping[str, str], query: Mapping[str, str], sid: str) -> Connection:
        self.opened.append(sid)
        if "token" not in query:
            raise AuthError("Missing Bearer token")
        if query["token"] == "storage-fails":
            raise StorageError("DynamoDB PutItem failed: ValidationException")
        encoding = Encoding(query.get("encoding", "binary"))
        return Connection(sid, gateway or "", query["token"], {}, encoding, 2**31, 0)

    def message(self, connection: Connection, data: bytes | str) -> bytes | str:
        return data


def _front(hub: SocketHub) -> Iterator[str]:
    with LocalFront(lambda event, context: {"statusCode": 404}, sockets=hub) as front:
        yield front.url.replace("http://", "ws://") + "/v1/sync/gw/ws"


@pytest.fixture
def original() -> Iterator[tuple[str, SocketHub, EchoBackend]]:
    backend = EchoBackend()
    hub = SocketHub(backend, max_connections=3)
    for url in _front(hub):
        yield url, hub, backend


@pytest.fixture
def parity() -> Iterator[str]:
    hub = SocketHub(EchoBackend(), aws_parity=True, idle_timeout_s=0.5, max_session_s=1.5)
    yield from _front(hub)


def test_more_than_fifty_messages_in_a_second_close_1008(original: tuple[str, SocketHub, EchoBackend]) -> None:
    url, _, _ = original
    with connect(url + "?token=a") as ws:
        for i in range(50):
            ws.send(b"\x02%d" % i)
            assert ws.recv(timeout=5) == b"\x02%d" % i
        ws.send(b"\x02x")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=5)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1008, "Rate limit exceeded")


def test_sessions_beyond_the_limit_are_refused_503_and_ended_ones_free_their_place(
    original: tuple[str, SocketHub, EchoBackend],
) -> None:
    url, hub, _ = original
    with contextlib.ExitStack() as sockets:
        for i in range(3):
            sockets.enter_context(connect(url + f"?token=c{i}"))
        with pytest.raises(InvalidStatus) as refused:
            connect(url + "?token=c3").close()
        assert refused.value.response.status_code == 503
        assert hub.open_sessions == 3
    with pytest.raises(InvalidStatus) as unauthenticated:
        connect(url).close()
    assert unauthenticated.value.response.status_code == 401
    deadline = time.monotonic() + 5
    while hub.open_sessions and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hub.open_sessions == 0
    # The ended sessions no longer count: as many open again.
    with contextlib.ExitStack() as sockets:
        for i in range(3):
            sockets.enter_context(connect(url + f"?token=d{i}"))
        assert hub.open_sessions == 3


def test_an_upgrade_that_cannot_be_recorded_is_500_internal_error_without_detail(
    original: tuple[str, SocketHub, EchoBackend],
) -> None:
    url, _, _ = original
    with pytest.raises(InvalidStatus) as refused:
        connect(url + "?token=storage-fails").close()
    assert refused.value.response.status_code == 500
    assert refused.value.response.body == b'{"error":"Internal error","code":"INTERNAL_ERROR"}'


def test_a_header_line_the_handshake_parser_refuses_is_431_before_any_session_is_opened(
    original: tuple[str, SocketHub, EchoBackend],
) -> None:
    # http.server reads lines up to 64 KiB; the WebSocket handshake parser stops at 8 KiB
    url, _, backend = original
    with pytest.raises(InvalidStatus) as refused:
        connect(url + "?token=a", additional_headers={"X-Big": "b" * 9000}).close()
    assert refused.value.response.status_code == 431
    assert refused.value.response.body == b'{"error":"Request header too large","code":"VALIDATION_ERROR"}'
    assert backend.opened == []


def test_an_upgrade_without_a_websocket_key_is_a_json_400_before_any_session_is_opened(
    original: tuple[str, SocketHub, EchoBackend],
) -> None:
    url, _, backend = original
    host, port = url.removeprefix("ws://").split("/")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(
            b"GET /v1/sync/gw/ws?token=a HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n"
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"Content-Type: application/json" in head
    assert json.loads(body)["code"] == "VALIDATION_ERROR"
    assert backend.opened == []


def test_aws_parity_binary_frames_close_1003(parity: str) -> None:
    with connect(parity + "?token=a") as ws:
        ws.send(b"\x02\x00")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003


def test_aws_parity_messages_over_128_kb_close_1009(parity: str) -> None:
    with connect(parity + "?token=a&encoding=base64", max_size=None) as ws:
        ws.send("A" * (128 * 1024))
        assert ws.recv(timeout=5) == "A" * (128 * 1024)
        ws.send("A" * (128 * 1024 + 4))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


def test_aws_parity_idle_and_whole_session_timeouts_close_1001(parity: str) -> None:
    with connect(parity + "?token=idle&encoding=base64") as ws:
        with pytest.raises(ConnectionClosed) as idle:
            ws.recv(timeout=5)
    assert idle.value.rcvd is not None and idle.value.rcvd.code == 1001
    with connect(parity + "?token=busy&encoding=base64") as ws:
        with pytest.raises(ConnectionClosed) as expired:
            for _ in range(100):  # active every 0.2 s, so only the session limit ends it
                ws.send("AA==")
                ws.recv(timeout=5)
                threading.Event().wait(0.2)
    assert expired.value.rcvd is not None and expired.value.rcvd.code == 1001
