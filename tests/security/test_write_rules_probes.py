"""Writes confined by the sync rules (issue 40, item 1): the issue's probes, over real HTTP and the WebSocket against
``lakesync local``, and through the Lambda handlers on the moto server.

Rules scope ``todos`` to a ``team`` claim; red and blue are clients of two teams. Each probe was committed before
write rules existed (blue saw "defaced by red"); now each forbidden delta is rejected in its receipt, nothing of it is
written, logged, broadcast or pulled, and the rest of its push commits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect

import functions.admin as admin_fn
import functions.pull as pull_fn
import functions.push as push_fn
from lakesync.auth import mint_token
from lakesync.client.http import SyncClient
from lakesync.core.delta import RowDelta
from lakesync.core.hlc import HLC
from lakesync.core.messages import SyncPush
from lakesync.local.runner import LocalStack
from lakesync.wire.codec import decode_sync_response, encode_sync_push
from lakesync.wire.framing import decode_broadcast_frame
from tests.factories import delete, insert, update
from tests.functions.conftest import Api, api, aws_env
from tests.integration.test_local_connectors import http

__all__ = ["api", "aws_env"]

pytestmark = pytest.mark.integration

GW = "default"
RULES: dict[str, Any] = {
    "version": 1,
    "buckets": [
        {"name": "team", "tables": ["todos"], "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}]}
    ],
}
_clock = HLC()  # the deltas' HLCs: now, as a client's


def _probes() -> list[tuple[str, RowDelta]]:
    """The issue's probes of red against blue's row ``b1`` and its own row ``r1``."""
    return [
        ("update a blue row", update("b1", hlc=_clock.now(), client="red", title="defaced by red")),
        ("delete a blue row", delete("b1", hlc=_clock.now(), client="red")),
        ("insert a blue row", insert("b2", hlc=_clock.now(), client="red", title="planted", team="blue")),
        ("move its own row to blue", update("r1", hlc=_clock.now(), client="red", team="blue")),
        ("forge an audit row", insert("p1", hlc=_clock.now(), client="red", table="_lakesync_provenance", actor="ops")),
    ]


def _rows(deltas: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Rows folded from pulled wire deltas (applied in order, as a client does)."""
    rows: dict[str, dict[str, Any]] = {}
    for d in deltas:
        key = f"{d['table']}:{d['rowId']}"
        if d["op"] == "DELETE":
            rows.pop(key, None)
        else:
            rows.setdefault(key, {}).update({c["column"]: c["value"] for c in d["columns"]})
    return rows


def _assert_rejected(receipts: list[dict[str, Any]], names: list[str]) -> None:
    for name, receipt in zip(names, receipts, strict=True):
        assert receipt.get("rejected") is True, name
        assert receipt["code"] in {"OUT_OF_SCOPE", "RESERVED_TABLE"} and receipt["reason"], name
        assert receipt["duplicate"] is False and receipt["columns"] == [], name


# --- over HTTP and the WebSocket against lakesync local -----------------------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(Path(tmp_path_factory.mktemp("write-rules")), port=0, persist=False) as running:
        yield running


def _save_rules(stack: LocalStack, rules: Any) -> tuple[int, Any]:
    """An admin's POST of ``rules`` to the gateway, over HTTP."""
    return http(stack, "POST", f"/v1/admin/sync-rules/{GW}", rules, sub="ops", role="admin")  # type: ignore[no-any-return]


def _client(stack: LocalStack, who: str, team: str) -> SyncClient:
    return SyncClient(stack.url, GW, mint_token(who, GW, stack.secret, claims={"team": team}), who)


def test_local_every_probe_is_rejected_and_blue_sees_nothing_of_it(stack: LocalStack) -> None:
    assert _save_rules(stack, RULES)[0] == 200
    admin_token = mint_token("ops", GW, stack.secret, role="admin")
    red, blue = _client(stack, "red", "red"), _client(stack, "blue", "blue")
    red.push([insert("r1", hlc=_clock.now(), client="red", title="mine", team="red")])
    blue.push([insert("b1", hlc=_clock.now(), client="blue", title="theirs", team="blue")])
    blue_before = _rows([d.to_json() for d in blue.pull_all()[0]])
    red_before = _rows([d.to_json() for d in red.pull_all()[0]])

    names, deltas = zip(*_probes(), strict=True)
    fine = insert("r9", hlc=_clock.now(), client="red", title="fine", team="red")
    answer = red.push([*deltas, fine])

    _assert_rejected(answer["receipts"][:-1], list(names))
    assert answer["accepted"] == 1 and answer["receipts"][-1].get("rejected") is None
    assert [d["rowId"] for d in answer["deltas"]] == ["r9"]
    # The receipt of the move carries the row to roll back to (red may read it); the others reveal nothing
    moved = answer["receipts"][3]
    assert moved["row"]["c"]["team"][0] == "red"
    assert all(r["row"] is None for i, r in enumerate(answer["receipts"][:-1]) if i != 3)
    assert _rows([d.to_json() for d in blue.pull_all()[0]]) == blue_before
    assert _rows([d.to_json() for d in red.pull_all()[0]]) == {
        **red_before,
        "todos:r9": {"title": "fine", "team": "red"},
    }
    # Nobody, not even an unfiltered reader, ever sees a forged audit row
    ops = SyncClient(stack.url, GW, admin_token, "ops")
    assert all(d.table != "_lakesync_provenance" for d in ops.pull_all()[0])
    # A re-sent forbidden delta is rejected again, never answered as a duplicate
    again = red.push(list(deltas))
    _assert_rejected(again["receipts"], list(names))


def test_local_the_websocket_push_applies_the_same_rules(stack: LocalStack) -> None:
    assert _save_rules(stack, RULES)[0] == 200
    blue = _client(stack, "blue2", "blue")
    blue.push([insert("ws-b", hlc=_clock.now(), client="blue2", title="theirs", team="blue")])
    url = stack.url.replace("http://", "ws://") + f"/v1/sync/{GW}/ws?encoding=binary"

    def socket(who: str, team: str) -> Any:
        token = mint_token(who, GW, stack.secret, claims={"team": team})
        return connect(url, additional_headers={"Authorization": f"Bearer {token}"})

    with socket("red2", "red") as red_ws, socket("blue3", "blue") as blue_ws:
        forbidden = update("ws-b", hlc=_clock.now(), client="red2", title="defaced over the socket")
        red_ws.send(b"\x01" + encode_sync_push(SyncPush("red2", (forbidden,), 0)))
        assert decode_sync_response(red_ws.recv(timeout=5)).server_hlc > 0  # answered, the session stays open
        # Nothing was committed, so nothing of it is broadcast (blue2's own insert may still arrive: it is blue's)
        heard = []
        with contextlib.suppress(TimeoutError):
            while True:
                heard.extend(decode_broadcast_frame(blue_ws.recv(timeout=1.0)).deltas)
        assert all(d.delta_id != forbidden.delta_id and d.client_id != "red2" for d in heard)
    assert _rows([d.to_json() for d in blue.pull_all()[0]])["todos:ws-b"] == {"title": "theirs", "team": "blue"}


@pytest.mark.parametrize(
    "rules",
    [
        {"version": 1, "buckets": [{"name": "b", "tables": [], "filters": [], "write": {"ops": ["upsert"]}}]},
        {"version": 1, "buckets": [], "tables": {"_lakesync_provenance": {"adminOnly": True}}},
        {"version": 1, "buckets": [], "tables": {"audit": {"write": {"readOnlyColumns": "owner"}}}},
    ],
)
def test_local_malformed_write_rules_are_a_400_and_the_stored_rules_stay(stack: LocalStack, rules: Any) -> None:
    assert _save_rules(stack, RULES)[0] == 200
    status, body = _save_rules(stack, rules)
    assert status == 400 and body["code"] == "VALIDATION_ERROR" and body["error"]
    assert http(stack, "GET", f"/v1/admin/sync-rules/{GW}", sub="ops", role="admin") == (200, RULES)


# --- through the Lambda handlers on moto --------------------------------------------------------------------------


def _push(api: Api, who: str, team: str | None, deltas: list[RowDelta]) -> dict[str, Any]:
    token = api.admin_token(who) if team is None else api.token(who, claims={"team": team})
    body = {"clientId": who, "deltas": [d.to_json() for d in deltas]}
    reply = api.call(push_fn, api.event("push_json", body=body, token=token))
    assert reply.status == 200, reply.body
    result: dict[str, Any] = reply.json()
    return result


def _pull(api: Api, who: str, team: str) -> dict[str, dict[str, Any]]:
    token = api.token(who, claims={"team": team})
    reply = api.call(pull_fn, api.event("pull", token=token, query={"clientId": who, "cursor": "", "limit": "1000"}))
    assert reply.status == 200, reply.body
    return _rows(reply.json()["deltas"])


def test_lambda_every_probe_is_rejected_and_admins_stay_trusted(api: Api) -> None:
    rules_event = api.event("admin_sync_rules_post", body=RULES, token=api.admin_token())
    assert api.call(admin_fn, rules_event).status == 200
    _push(api, "red", "red", [insert("r1", hlc=_clock.now(), client="red", title="mine", team="red")])
    _push(api, "blue", "blue", [insert("b1", hlc=_clock.now(), client="blue", title="theirs", team="blue")])
    blue_before = _pull(api, "blue", "blue")

    names, deltas = zip(*_probes(), strict=True)
    answer = _push(api, "red", "red", list(deltas))

    _assert_rejected(answer["receipts"], list(names))
    assert answer["accepted"] == 0 and answer["deltas"] == []
    assert _pull(api, "blue", "blue") == blue_before
    assert _pull(api, "red", "red") == {"todos:r1": {"title": "mine", "team": "red"}}
    # An admin is a trusted writer: the same update commits
    fixed = _push(api, "ops", None, [update("b1", hlc=_clock.now(), client="ops", title="fixed by ops")])
    assert fixed["accepted"] == 1 and fixed["receipts"][0].get("rejected") is None
    assert _pull(api, "blue", "blue")["todos:b1"]["title"] == "fixed by ops"


def test_local_names_the_gateways_that_have_no_sync_rules(tmp_path: Path) -> None:
    with LocalStack(tmp_path / "open", port=0, persist=False) as fresh:
        assert fresh.open_gateways() == ["default"]
        assert _save_rules(fresh, RULES)[0] == 200
        assert fresh.open_gateways() == []
