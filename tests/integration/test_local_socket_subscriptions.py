"""Stream subscriptions on a real WebSocket against ``lakesync local`` (issue 43, items 2 and 6): a client subscribes
over its socket (the ``0x10`` frame, answered as the HTTP route answers), another client writes a row of the stream
over HTTP, and the subscriber hears it live through the broadcaster; a client of the same token claims that did not
subscribe does not; a refusal is an answer, and the socket stays open; unsubscribing over the socket stops the rows."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

from lakesync.auth import mint_token
from lakesync.client.http import SyncClient
from lakesync.core.hlc import HLC
from lakesync.local.runner import LocalStack
from lakesync.wire.framing import (
    TAG_BROADCAST,
    TAG_SUBSCRIPTIONS,
    decode_broadcast_frame,
    decode_subscription_frame,
    encode_subscription_frame,
)
from tests import factories
from tests.integration.test_local_realtime import RULES as REALTIME_RULES
from tests.integration.test_local_subscriptions import RULES as SUBSCRIPTION_RULES

pytestmark = pytest.mark.integration

GW = "default"
# the team bucket of the realtime tests, and a stream of a project's tasks the token's projects allow
RULES = {**REALTIME_RULES, "streams": [SUBSCRIPTION_RULES["streams"][0]]}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(Path(tmp_path_factory.mktemp("socket-subs")), port=0, persist=False) as running:
        admin = SyncClient(running.url, GW, mint_token("admin", GW, running.secret, role="admin"), "admin")
        admin.admin("POST", "sync-rules", RULES)
        yield running


def _token(stack: LocalStack, who: str) -> str:
    return mint_token(who, GW, stack.secret, claims={"team": "red", "projects": ["p1", "p2"]})


def _socket(stack: LocalStack, who: str) -> ClientConnection:
    url = stack.url.replace("http://", "ws://") + f"/v1/sync/{GW}/ws?encoding=base64"
    return connect(url, additional_headers={"Authorization": f"Bearer {_token(stack, who)}"})


class _Socket:
    """A base64 session's frames, sorted as they come: subscription answers and broadcast rows."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.rows: list[str] = []

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        self.ws.send(base64.b64encode(encode_subscription_frame(request)).decode())
        while True:
            frame = self._next(5.0)
            assert frame is not None, "no answer"
            if frame[0] == TAG_SUBSCRIPTIONS:
                return decode_subscription_frame(frame)
            self._take(frame)

    def heard(self, *, wait_s: float = 5.0, quiet_s: float = 0.4) -> list[str]:
        """Broadcast rows until nothing more comes for ``quiet_s`` (the first within ``wait_s``)."""
        timeout = wait_s
        while (frame := self._next(timeout)) is not None:
            self._take(frame)
            timeout = quiet_s
        rows, self.rows = self.rows, []
        return rows

    def _next(self, timeout: float) -> bytes | None:
        try:
            message = self.ws.recv(timeout=timeout)
        except TimeoutError:
            return None
        return base64.b64decode(message) if isinstance(message, str) else message

    def _take(self, frame: bytes) -> None:
        assert frame[0] == TAG_BROADCAST
        self.rows.extend(d.row_id for d in decode_broadcast_frame(frame).deltas)


def _write_task(stack: LocalStack, row_id: str, project: str) -> None:
    """wendy (an admin: her writes are not confined to a scope) writes a task of ``project`` over HTTP."""
    writer = SyncClient(stack.url, GW, mint_token("wendy", GW, stack.secret, role="admin"), "wendy")
    delta = factories.delta(
        "INSERT", row_id, hlc=HLC().now(), table="tasks", client="wendy", columns={"project_id": project}
    )
    (receipt,) = writer.push([delta])["receipts"]
    assert not receipt.get("rejected"), receipt


def test_a_socket_subscriber_hears_its_streams_rows_live_and_a_bucket_only_client_does_not(stack: LocalStack) -> None:
    with _socket(stack, "sam") as sam_ws, _socket(stack, "bea") as bea_ws:
        sam, bea = _Socket(sam_ws), _Socket(bea_ws)
        # Given sam subscribes to project p1's tasks over the socket
        answer = sam.ask(
            {"op": "subscribe", "ref": "1", "body": {"stream": "project_tasks", "params": {"project": "p1"}}}
        )
        assert answer["status"] == 201 and answer["ref"] == "1"
        assert answer["body"]["stream"] == "project_tasks" and answer["body"]["params"] == {"project": "p1"}
        # When wendy writes a task of p1 and one of p2 over HTTP
        _write_task(stack, "task-p1", "p1")
        _write_task(stack, "task-p2", "p2")
        # Then sam hears the p1 task live, and bea (allowed the same projects, subscribed to none) hears nothing
        assert sam.heard() == ["task-p1"]
        assert bea.heard(wait_s=1.0) == []
        # When sam unsubscribes over the socket, later rows of p1 no longer reach it
        listed = sam.ask({"op": "list"})
        (held,) = listed["body"]["subscriptions"]
        assert sam.ask({"op": "unsubscribe", "id": held["id"]}) == {"op": "unsubscribe", "status": 204}
        _write_task(stack, "task-p1-later", "p1")
        assert sam.heard(wait_s=1.5) == []


def test_a_refused_subscription_is_answered_and_the_socket_stays_open(stack: LocalStack) -> None:
    with _socket(stack, "rob") as rob_ws:
        rob = _Socket(rob_ws)
        refused = rob.ask({"op": "subscribe", "body": {"stream": "project_tasks", "params": {"project": "p9"}}})
        assert refused["status"] == 403
        assert (refused["body"]["code"], refused["body"]["refusal"]) == ("FORBIDDEN", "NOT_ALLOWED")
        unknown = rob.ask({"op": "subscribe", "body": {"stream": "nope"}})
        assert (unknown["status"], unknown["body"]["refusal"]) == (404, "UNKNOWN_STREAM")
        assert rob.ask({"op": "list"}) == {"op": "list", "status": 200, "body": {"subscriptions": []}}
