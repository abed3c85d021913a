"""Subscribing over the WebSocket (issue 43, item 2): the ``0x10`` subscription frame is served by the HTTP routes'
own service functions and answered on the socket with the route's status and body (success, list, unsubscribe and
every refusal); a frame that is not a request closes the session as an undecodable frame does (1008); the frames
count against the socket's rate limit; a base64 session exchanges them as base64 text."""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from typing import Any

import pytest

from lakesync.core.filters import InMemoryMemberships
from lakesync.core.realtime import Connection, Encoding
from lakesync.core.rules import parse_sync_rules
from lakesync.core.streams import MAX_CLIENT_SUBSCRIPTIONS
from lakesync.gateway import realtime
from lakesync.gateway import subscriptions as service
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.limits import RateLimit, RateLimiter
from lakesync.gateway.memory import (
    InMemoryActionStore,
    InMemoryBufferStore,
    InMemoryConfigStore,
    InMemoryMembershipReader,
    InMemoryRateLimitCounter,
    InMemorySubscriptions,
)
from lakesync.gateway.realtime import SessionClose
from lakesync.gateway.socket_subscriptions import MAX_REF_CHARS
from lakesync.wire.framing import TAG_SUBSCRIPTIONS, decode_subscription_frame, encode_subscription_frame
from tests.unit.test_scope_properties import STREAMS

GW = "default"
T0 = 1_700_000_000_000
NOW_S = T0 / 1000
RULES = {
    "version": 1,
    "buckets": [],
    # by_project: allowed by the token's projects; mine: the token's sub; by_member: allowed by a membership table
    "streams": [{"name": name, **STREAMS[name]} for name in ("by_project", "mine", "by_member")],
}


def _deps(*, memberships: InMemoryMemberships | None = None, limiter: RateLimiter | None = None) -> GatewayDeps:
    deps = GatewayDeps(
        InMemoryBufferStore(),
        InMemoryConfigStore(),
        InMemoryActionStore(),
        wall_ms=lambda: T0,
        subscriptions=InMemorySubscriptions(),
        memberships=InMemoryMembershipReader(memberships) if memberships is not None else None,
        limiter=limiter,
    )
    deps.config.put_sync_rules(GW, parse_sync_rules(RULES))
    return deps


@pytest.fixture
def deps() -> GatewayDeps:
    return _deps()


def _connection(client: str = "ann", encoding: Encoding = Encoding.BINARY, **claims: Any) -> Connection:
    claims = {"sub": client, "projects": ("1", "2"), **claims}
    return Connection(f"conn-{client}", GW, client, claims, encoding, int(NOW_S) + 3600, int(NOW_S))


def _ask(deps: GatewayDeps, request: dict[str, Any], connection: Connection | None = None) -> dict[str, Any]:
    """The answer to ``request`` (a ``0x10`` frame), checked to be a ``0x10`` frame."""
    reply = realtime.handle_frame(deps, connection or _connection(), encode_subscription_frame(request), now_s=NOW_S)
    assert reply[0] == TAG_SUBSCRIPTIONS
    return decode_subscription_frame(reply)


def _subscribe(body: Any, ref: str | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"op": "subscribe", "body": body}
    if ref is not None:
        request["ref"] = ref
    return request


def test_subscribe_list_and_unsubscribe_answer_as_the_http_routes(deps: GatewayDeps) -> None:
    # Given ann subscribes over the socket
    answer = _ask(deps, _subscribe({"stream": "by_project", "params": {"project": "1"}, "ttlSeconds": 60}, "s-1"))
    # Then the answer is the POST route's: 201 and the held subscription
    held = service.list_subscriptions(deps, GW, "ann")
    assert [h.subscription.stream for h in held] == ["by_project"]
    assert answer == {"op": "subscribe", "ref": "s-1", "status": 201, "body": held[0].to_json()}
    assert answer["body"]["expiresAt"] == T0 + 60_000
    # and listing answers the GET route's body
    listed = _ask(deps, {"op": "list"})
    assert listed == {"op": "list", "status": 200, "body": {"subscriptions": [held[0].to_json()]}}
    # and unsubscribing the DELETE route's 204, with no body
    assert _ask(deps, {"op": "unsubscribe", "id": held[0].id, "ref": "u"}) == {
        "op": "unsubscribe",
        "ref": "u",
        "status": 204,
    }
    assert service.list_subscriptions(deps, GW, "ann") == []


def test_a_socket_subscription_is_the_clients_own(deps: GatewayDeps) -> None:
    _ask(deps, _subscribe({"stream": "mine"}), _connection("bob"))
    assert _ask(deps, {"op": "list"}, _connection("ann"))["body"] == {"subscriptions": []}
    bobs = _ask(deps, {"op": "list"}, _connection("bob"))["body"]["subscriptions"]
    assert [s["stream"] for s in bobs] == ["mine"]


def _refusal(answer: dict[str, Any]) -> tuple[int, str, str | None]:
    return answer["status"], answer["body"]["code"], answer["body"].get("refusal")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"stream": "nope"}, (404, "NOT_FOUND", "UNKNOWN_STREAM")),
        (
            {"stream": "by_project", "params": {"project": "1", "x": "y"}},
            (400, "VALIDATION_ERROR", "UNEXPECTED_PARAM"),
        ),
        ({"stream": "mine", "params": {"me": "ann"}}, (400, "VALIDATION_ERROR", "UNEXPECTED_PARAM")),
        ({"stream": "by_project", "params": {"project": ""}}, (400, "VALIDATION_ERROR", "INVALID_PARAM")),
        ({"stream": "by_project"}, (400, "VALIDATION_ERROR", "MISSING_PARAM")),
        ({"stream": "by_project", "params": {"project": "9"}}, (403, "FORBIDDEN", "NOT_ALLOWED")),
        ({"stream": "by_member", "params": {"project": "1"}}, (422, "VALIDATION_ERROR", "MEMBERSHIP_UNSUPPORTED")),
        # a malformed body: 400 with no refusal, as over HTTP
        ([], (400, "VALIDATION_ERROR", None)),
        (None, (400, "VALIDATION_ERROR", None)),
        ({"stream": "mine", "spare": 1}, (400, "VALIDATION_ERROR", None)),
        ({"stream": "mine", "ttlSeconds": 0}, (400, "VALIDATION_ERROR", None)),
    ],
)
def test_each_refusal_is_answered_with_the_http_status_and_body(
    deps: GatewayDeps, body: Any, expected: tuple[int, str, str | None]
) -> None:
    answer = _ask(deps, _subscribe(body, "r"))
    assert (answer["op"], answer["ref"]) == ("subscribe", "r")
    assert _refusal(answer) == expected
    assert isinstance(answer["body"]["error"], str) and answer["body"]["error"]
    assert service.list_subscriptions(deps, GW, "ann") == []


def test_the_refusal_bodies_equal_the_services_errors(deps: GatewayDeps) -> None:
    with pytest.raises(service.SubscriptionRefusedError) as refused:
        service.subscribe(deps, GW, "ann", _connection().claims, {"stream": "by_project", "params": {"project": "9"}})
    answer = _ask(deps, _subscribe({"stream": "by_project", "params": {"project": "9"}}))
    assert answer == {"op": "subscribe", "status": refused.value.status, "body": refused.value.to_body()}


def test_too_many_subscriptions_409_and_an_unknown_id_404(deps: GatewayDeps) -> None:
    many = _connection(projects=tuple(str(i) for i in range(MAX_CLIENT_SUBSCRIPTIONS + 1)))
    for i in range(MAX_CLIENT_SUBSCRIPTIONS):
        assert _ask(deps, _subscribe({"stream": "by_project", "params": {"project": str(i)}}), many)["status"] == 201
    over = _subscribe({"stream": "by_project", "params": {"project": str(MAX_CLIENT_SUBSCRIPTIONS)}})
    assert _refusal(_ask(deps, over, many)) == (409, "VALIDATION_ERROR", "TOO_MANY_SUBSCRIPTIONS")
    gone = _ask(deps, {"op": "unsubscribe", "id": "0" * 32}, many)
    assert gone["status"] == 404 and gone["body"]["refusal"] == "UNKNOWN_SUBSCRIPTION"


def test_a_membership_stream_is_checked_against_the_membership_source() -> None:
    deps = _deps(memberships=InMemoryMemberships({"memberships": [{"user": "ann", "project": "7"}]}))
    assert _ask(deps, _subscribe({"stream": "by_member", "params": {"project": "7"}}))["status"] == 201
    refused = _ask(deps, _subscribe({"stream": "by_member", "params": {"project": "8"}}))
    assert _refusal(refused) == (403, "FORBIDDEN", "NOT_ALLOWED")


def test_a_deployment_without_subscriptions_answers_404(deps: GatewayDeps) -> None:
    deps.subscriptions = None
    answer = _ask(deps, {"op": "list"})
    assert answer == {"op": "list", "status": 404, "body": {"error": answer["body"]["error"], "code": "NOT_FOUND"}}


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"\xff\xfe",
        b"[1, 2]",
        b'"list"',
        json.dumps({"op": "watch"}).encode(),
        json.dumps({"ref": "x"}).encode(),
        json.dumps({"op": "list", "body": {}}).encode(),
        json.dumps({"op": "subscribe", "id": "x"}).encode(),
        json.dumps({"op": "unsubscribe"}).encode(),
        json.dumps({"op": "unsubscribe", "id": 7}).encode(),
        json.dumps({"op": "list", "ref": 1}).encode(),
        json.dumps({"op": "list", "ref": "x" * (MAX_REF_CHARS + 1)}).encode(),
    ],
)
def test_a_frame_that_is_not_a_request_closes_the_session_as_an_undecodable_one(
    deps: GatewayDeps, payload: bytes
) -> None:
    with pytest.raises(SessionClose) as closed:
        realtime.handle_frame(deps, _connection(), bytes((TAG_SUBSCRIPTIONS,)) + payload, now_s=NOW_S)
    assert closed.value.code == 1008 and closed.value.reason and len(closed.value.reason.encode()) <= 123


def test_a_bare_tag_is_too_short_as_in_the_original_framing(deps: GatewayDeps) -> None:
    with pytest.raises(SessionClose) as closed:
        realtime.handle_frame(deps, _connection(), bytes((TAG_SUBSCRIPTIONS,)), now_s=NOW_S)
    assert (closed.value.code, closed.value.reason) == (1002, "Message too short")


def test_an_expired_session_is_closed_before_the_request_is_served(deps: GatewayDeps) -> None:
    with pytest.raises(SessionClose) as closed:
        realtime.handle_frame(deps, _connection(), encode_subscription_frame({"op": "list"}), now_s=NOW_S + 7200)
    assert (closed.value.code, closed.value.reason) == (1008, "JWT has expired")


def test_a_base64_session_exchanges_subscription_frames_as_text_counted_by_the_socket_limit() -> None:
    limiter = RateLimiter(InMemoryRateLimitCounter(), {"socket": RateLimit(2, 60)}, clock=lambda: NOW_S)
    deps = _deps(limiter=limiter)
    ann = dataclasses.replace(_connection(encoding=Encoding.BASE64), expires_at=int(time.time()) + 3600)
    message = base64.b64encode(encode_subscription_frame({"op": "list", "ref": "1"})).decode()
    for _ in range(2):
        reply = realtime.serve_message(deps, ann, message)
        assert isinstance(reply, str)
        answer = decode_subscription_frame(base64.b64decode(reply))
        assert answer == {"op": "list", "ref": "1", "status": 200, "body": {"subscriptions": []}}
    with pytest.raises(SessionClose) as closed:
        realtime.serve_message(deps, ann, message)
    assert closed.value.code == 1013
