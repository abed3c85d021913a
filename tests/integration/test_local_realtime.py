"""Real time against the embedded default, over real sockets: a push over HTTP reaches the other clients' sockets
through the deltas table's stream, the broadcaster function and the management API (sender excluded, sync rules per
recipient); the socket serves the original's binary frames and base64 text frames; refusals are HTTP statuses before
the upgrade and close codes after it; gone sessions are forgotten; API Gateway's limits in AWS-parity mode."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from lakesync.auth import mint_token
from lakesync.client.http import SyncClient
from lakesync.core.delta import RowDelta
from lakesync.core.hlc import HLC
from lakesync.core.messages import SyncPull, SyncPush
from lakesync.local.access import LocalCredentials, sign
from lakesync.local.runner import LocalStack
from lakesync.wire.codec import decode_sync_response, encode_sync_pull, encode_sync_push
from lakesync.wire.framing import decode_broadcast_frame
from tests import factories

pytestmark = pytest.mark.integration

GW = "default"
RULES = {
    "version": 1,
    "buckets": [
        {"name": "team", "tables": ["todos"], "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}]}
    ],
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(Path(tmp_path_factory.mktemp("realtime")), port=0, persist=False) as running:
        admin = SyncClient(running.url, GW, mint_token("admin", GW, running.secret, role="admin"), "admin")
        admin.admin("POST", "sync-rules", RULES)
        yield running


def _token(stack: LocalStack, who: str, team: str = "red", gateway: str = GW) -> str:
    return mint_token(who, gateway, stack.secret, claims={"team": team})


def _socket(stack: LocalStack, who: str, team: str = "red", *, encoding: str = "base64", **kw: Any) -> ClientConnection:
    url = stack.url.replace("http://", "ws://") + f"/v1/sync/{GW}/ws?encoding={encoding}"
    return connect(url, additional_headers={"Authorization": f"Bearer {_token(stack, who, team)}"}, **kw)


class Writer:
    def __init__(self, stack: LocalStack, who: str, team: str = "red") -> None:
        self.who, self.team = who, team
        self.api = SyncClient(stack.url, GW, _token(stack, who, team), who)
        self.clock = HLC()

    def delta(self, row_id: str, **columns: Any) -> RowDelta:
        return factories.delta(
            "INSERT", row_id, hlc=self.clock.now(), client=self.who, columns={"team": self.team, **columns}
        )

    def push(self, row_id: str, **columns: Any) -> None:
        self.api.push([self.delta(row_id, **columns)])


def _broadcast_rows(ws: ClientConnection, *, wait_s: float = 5.0, quiet_s: float = 0.4) -> list[str]:
    """Row ids of the broadcasts received until nothing more comes for ``quiet_s`` (the first within ``wait_s``)."""
    rows: list[str] = []
    timeout = wait_s
    while True:
        try:
            message = ws.recv(timeout=timeout)
        except TimeoutError:
            return rows
        frame = base64.b64decode(message) if isinstance(message, str) else message
        rows.extend(d.row_id for d in decode_broadcast_frame(frame).deltas)
        timeout = quiet_s


def test_a_push_over_http_reaches_the_other_sockets_filtered_by_their_rules(stack: LocalStack) -> None:
    with _socket(stack, "bob") as bob, _socket(stack, "dave", "blue") as dave, _socket(stack, "alice") as alice_socket:
        alice, erin = Writer(stack, "alice"), Writer(stack, "erin", "blue")
        alice.push("e2e-red")
        erin.push("e2e-blue")
        assert _broadcast_rows(bob) == ["e2e-red"]
        assert _broadcast_rows(dave) == ["e2e-blue"]
        # alice's own change is not sent back to her; erin's is not in her team's bucket
        assert _broadcast_rows(alice_socket, wait_s=0.5) == []


def test_the_original_binary_frames_push_pull_and_receive(stack: LocalStack) -> None:
    writer = Writer(stack, "olga")
    with _socket(stack, "olga", encoding="binary") as olga, _socket(stack, "pete", encoding="binary") as pete:
        delta = writer.delta("binary-1", title="over the socket")
        olga.send(b"\x01" + encode_sync_push(SyncPush("olga", (delta,), 0)))
        ack = decode_sync_response(olga.recv(timeout=5))  # untagged: the first byte is a field key, never 0x03
        assert ack.deltas == () and ack.server_hlc > 0
        received = pete.recv(timeout=5)
        assert isinstance(received, bytes) and received[0] == 0x03
        assert [d.row_id for d in decode_broadcast_frame(received).deltas] == ["binary-1"]
        pete.send(b"\x02" + encode_sync_pull(SyncPull("pete", 0, 1000)))
        page = decode_sync_response(pete.recv(timeout=5))
        assert "binary-1" in {d.row_id for d in page.deltas}


@pytest.mark.parametrize(
    ("token", "gateway", "status"),
    [
        (None, GW, 401),
        ("not.a.jwt", GW, 401),
        ("other-secret", GW, 401),
        ("other-gateway", GW, 403),
        ("unknown-gateway", "unknown", 404),
    ],
)
def test_refused_upgrades_are_http_statuses(stack: LocalStack, token: str | None, gateway: str, status: int) -> None:
    tokens = {
        "not.a.jwt": "not.a.jwt",
        "other-secret": mint_token("a", GW, "x" * 32),
        "other-gateway": mint_token("a", "elsewhere", stack.secret),
        "unknown-gateway": mint_token("a", "unknown", stack.secret),
    }
    query = f"?token={tokens[token]}" if token else ""
    url = stack.url.replace("http://", "ws://") + f"/v1/sync/{gateway}/ws{query}"
    with pytest.raises(InvalidStatus) as refused:
        connect(url).close()
    assert refused.value.response.status_code == status
    assert b'"code"' in refused.value.response.body


def test_a_token_with_a_lone_surrogate_is_refused_401_or_served_never_a_500(stack: LocalStack) -> None:
    from functions._runtime import get_realtime

    url = stack.url.replace("http://", "ws://") + f"/v1/sync/{GW}/ws?encoding=binary"
    sessions = get_realtime().connections
    before = {c.connection_id for c in sessions.list_connections(GW)}
    # A sub that is not valid Unicode cannot be recorded as the session's client: refused like a bad sub claim
    bad_sub = mint_token("\ud800", GW, stack.secret)
    with pytest.raises(InvalidStatus) as refused:
        connect(url, additional_headers={"Authorization": f"Bearer {bad_sub}"}).close()
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body) == {
        "error": 'Missing or invalid "sub" claim (clientId)',
        "code": "AUTH_ERROR",
    }
    assert {c.connection_id for c in sessions.list_connections(GW)} == before
    # A custom claim with one is kept as it is (the rules compare it as HTTP pulls do): the session opens and pulls
    odd_claim = mint_token("xena", GW, stack.secret, claims={"team": "\udc00"})
    with connect(url, additional_headers={"Authorization": f"Bearer {odd_claim}"}) as xena:
        assert {c.claims["team"] for c in sessions.list_connections(GW) if c.client_id == "xena"} == {"\udc00"}
        xena.send(b"\x02" + encode_sync_pull(SyncPull("xena", 0, 10)))
        assert decode_sync_response(xena.recv(timeout=5)).server_hlc > 0


def test_the_aws_form_of_the_socket_url_and_the_token_query(stack: LocalStack) -> None:
    url = stack.url.replace("http://", "ws://") + f"/ws?gateway={GW}&encoding=base64&token={_token(stack, 'quinn')}"
    with connect(url) as quinn:
        Writer(stack, "rita").push("aws-form")
        assert _broadcast_rows(quinn) == ["aws-form"]


@pytest.mark.parametrize(
    ("encoding", "message", "code", "reason"),
    [
        ("binary", b"\x01", 1002, "Message too short"),
        ("binary", b"\x09\x00", 1002, "Unknown message tag: 0x09"),
        ("binary", "text", 1003, "Binary frames only"),
        ("binary", b"\x01\xff\xff\xff", 1008, ""),
        ("base64", "%%%", 1007, "Invalid base64 frame"),
    ],
)
def test_bad_frames_close_the_session_with_the_originals_codes(
    stack: LocalStack, encoding: str, message: bytes | str, code: int, reason: str
) -> None:
    with _socket(stack, "sam", encoding=encoding) as ws:
        ws.send(message)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=5)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == code and closed.value.rcvd.reason.startswith(reason)


def test_a_push_as_another_client_closes_1008_and_writes_nothing(stack: LocalStack) -> None:
    impostor = Writer(stack, "victim").delta("spoofed")
    with _socket(stack, "mallory", encoding="binary") as ws:
        ws.send(b"\x01" + encode_sync_push(SyncPush("victim", (impostor,), 0)))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    pulled = Writer(stack, "auditor").api.pull_all()[0]
    assert "spoofed" not in {d.row_id for d in pulled}


def test_closed_and_expired_sessions_are_forgotten_by_the_next_broadcast(stack: LocalStack) -> None:
    from functions._runtime import get_realtime
    from lakesync.core.realtime import Connection, Encoding

    sessions = get_realtime().connections

    def recorded() -> set[str]:
        return {c.client_id for c in sessions.list_connections(GW)}

    with _socket(stack, "uma"):
        assert "uma" in recorded()
    # As on AWS, where the WebSocket API has no $disconnect route, a closed session stays recorded...
    assert "uma" in recorded()
    # ...as does an expired one that never reached a broadcast (DynamoDB's TTL is lazy; moto's never runs).
    now = int(time.time())
    sessions.put_connection(
        Connection("expired000000=", GW, "olga", {"team": "blue", "sub": "olga"}, Encoding.BASE64, now - 1, now - 60)
    )
    with _socket(stack, "vera") as vera:
        Writer(stack, "walt").push("after-close")
        assert _broadcast_rows(vera) == ["after-close"]
        # The broadcast found uma's socket gone (the management API's 410) and olga's session expired, though the
        # change was not in olga's scope: both forgotten, the open one kept.
        assert recorded() & {"uma", "olga", "vera"} == {"vera"}


def test_the_management_api_answers_like_api_gateways(stack: LocalStack) -> None:
    aws = stack.aws_kwargs()
    credentials = LocalCredentials(aws["aws_access_key_id"], aws["aws_secret_access_key"])

    def call(method: str, connection_id: str, body: bytes | None = None) -> tuple[int, str]:
        url = f"{stack.url}/@connections/{connection_id}"
        # Signed as the broadcaster's management-API client signs (the stack's credential; unsigned calls get 403).
        headers = sign(credentials, method, url, body or b"", service="execute-api")
        req = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, ""
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("x-amzn-ErrorType", "")

    assert call("POST", "nobody00000000=", b"x") == (410, "GoneException")
    assert call("DELETE", "nobody00000000=") == (410, "GoneException")
    assert call("GET", "nobody00000000=") == (410, "GoneException")


def test_aws_parity_refuses_binary_frames_as_api_gateway_does(tmp_path: Path) -> None:
    with LocalStack(tmp_path, port=0, persist=False, aws_parity=True, materialise=False) as parity:
        with _socket(parity, "xena", encoding="binary") as ws:
            ws.send(b"\x02" + encode_sync_pull(SyncPull("xena", 0, 10)))
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=5)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003
        with _socket(parity, "yuri") as ws:
            ws.send(base64.b64encode(b"\x02" + encode_sync_pull(SyncPull("yuri", 0, 10))).decode())
            reply = ws.recv(timeout=5)
            assert isinstance(reply, str) and not decode_sync_response(base64.b64decode(reply)).has_more
