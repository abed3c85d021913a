"""Limits per caller (issue 40, item 5): one client, or an anonymous caller, cannot exhaust the service.

Through the Lambda handlers on moto: a client over its limit on any sync route family gets 429 ``RATE_LIMITED`` with
``Retry-After`` and the error body, writes nothing, while another client (or the same client on another gateway) is
served; once its window has passed (an injected clock, no sleeping) it is served again. Over real HTTP against the
embedded default: the same answers from ``lakesync local``, socket messages limited too (the session closes 1013),
and requests without a token or with a bad one refused by API Gateway's authorizer before any function is invoked.

The limits here are tiny on purpose; windows are long (or the clock is injected) so no test depends on timing.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from functions import actions, checkpoint, pull, push
from functions._runtime import get_deps, reset_runtime
from lakesync.auth import mint_token
from lakesync.aws.settings.api import Settings
from lakesync.aws.settings.env import SettingsError
from lakesync.client.http import SyncClient
from lakesync.core.messages import SyncPull
from lakesync.local.authorizer import LocalAuthorizer
from lakesync.local.front import LocalFront
from lakesync.local.runner import LocalStack
from lakesync.wire.codec import encode_sync_pull
from tests.functions import conftest as handler_fixtures
from tests.functions.conftest import OTHER_GATEWAY, Api, Reply

api = handler_fixtures.api
aws_env = handler_fixtures.aws_env

WINDOW_S = 60
T0 = 1_800_000_000.0 + 15  # 15 s into a 60 s window: Retry-After is 45
FAR = 1_000_000_000
"""A window of ~31 years: the embedded default's tests cannot straddle one."""


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _limited(api: Api, monkeypatch: pytest.MonkeyPatch, limits: str) -> Clock:
    monkeypatch.setenv("LAKESYNC_RATE_LIMITS", limits)
    reset_runtime()
    limiter = get_deps().limiter
    assert limiter is not None
    clock = Clock(T0)
    limiter.clock = clock
    return clock


def _request(api: Api, family: str, sub: str, gateway: str | None = None) -> Reply:
    token = api.token(sub, gw=gateway or "default")
    if family == "push":
        event = api.event("push_json", token=token, body={"clientId": sub, "deltas": []}, gateway=gateway)
        return api.call(push, event)
    if family == "pull":
        return api.call(pull, api.event("pull", token=token, query={"clientId": sub, "since": "0"}, gateway=gateway))
    if family == "checkpoint":
        return api.call(checkpoint, api.event("checkpoint", token=token, gateway=gateway))
    return api.call(actions, api.event("actions", token=token, gateway=gateway))


@pytest.mark.parametrize("family", ["push", "pull", "checkpoint", "actions"])
def test_a_client_over_its_limit_gets_429_with_retry_after_until_its_window_ends(
    api: Api, monkeypatch: pytest.MonkeyPatch, family: str
) -> None:
    # Given a limit of two requests a minute for the family
    clock = _limited(api, monkeypatch, f"{family}=2/{WINDOW_S}")
    served = _request(api, family, "client-a")
    assert served.status != 429
    assert _request(api, family, "client-a").status == served.status
    # When the client sends a third request in the same minute
    refused = _request(api, family, "client-a")
    # Then it is refused with 429, Retry-After (the rest of the window) and the error body
    assert refused.status == 429
    assert refused.headers["Retry-After"] == "45"
    body = refused.json()
    assert body["code"] == "RATE_LIMITED" and set(body) == {"error", "code"}
    assert "retry after 45 s" in body["error"]
    # while another client, and the same client on another gateway, are served
    assert _request(api, family, "client-b").status == served.status
    assert _request(api, family, "client-a", gateway=OTHER_GATEWAY).status != 429
    # And after the window, the client is served again
    clock.now += 45
    assert _request(api, family, "client-a").status == served.status


def test_a_refused_push_writes_nothing(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    _limited(api, monkeypatch, "push=1/60")
    assert api.call(push, api.event("push_json")).status == 200
    before = api.items()
    # the sample push again, with a new delta id: it would be written were it served
    event = api.event("push_json")
    event["body"] = event["body"].replace("row-1", "row-2")
    refused = api.call(push, event)
    assert refused.status == 429
    assert api.items() == before


def test_limits_count_per_family(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    _limited(api, monkeypatch, "push=1/60,pull=1/60")
    assert _request(api, "push", "client-a").status == 200
    assert _request(api, "push", "client-a").status == 429
    assert _request(api, "pull", "client-a").status == 200  # pulls have their own count
    assert _request(api, "pull", "client-a").status == 429


def test_admin_routes_are_not_counted(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    from functions import admin

    _limited(api, monkeypatch, "push=1/60,pull=1/60,checkpoint=1/60,actions=1/60")
    for _ in range(3):
        reply = api.call(admin, api.event("admin_sync_rules_get", token=api.admin_token()))
        assert reply.status == 200


def test_every_limit_can_be_lifted_and_bad_settings_are_refused(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKESYNC_RATE_LIMITS", "off")
    reset_runtime()
    assert get_deps().limiter is None
    base = {"LAKESYNC_TABLE_PREFIX": "t", "LAKESYNC_JWT_SECRET": api.secret}
    settings = Settings.from_env({**base, "LAKESYNC_RATE_LIMITS": "pull=10/1, socket=off"})
    assert str(settings.rate_limits["pull"]) == "10/1" and "socket" not in settings.rate_limits
    assert str(settings.rate_limits["push"]) == "1200/60"  # the others keep their defaults
    for bad in ("pull=ten/1", "pull=0/60", "admin=1/60", "pull=5"):
        with pytest.raises(SettingsError, match="LAKESYNC_RATE_LIMITS"):
            Settings.from_env({**base, "LAKESYNC_RATE_LIMITS": bad})


# Over real HTTP: the embedded default, and the authorizer in front of the handlers.


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    limits = f"push=2/{FAR},socket=2/{FAR}"
    with LocalStack(
        Path(tmp_path_factory.mktemp("limits")), port=0, persist=False, extra_env={"LAKESYNC_RATE_LIMITS": limits}
    ) as running:
        yield running


def _raw(url: str, method: str, path: str, body: bytes | None = None, token: str | None = None) -> Any:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def _push(stack: LocalStack, sub: str) -> Any:
    body = json.dumps({"clientId": sub, "deltas": []}).encode()
    return _raw(stack.url, "POST", "/v1/sync/default/push", body, mint_token(sub, "default", stack.secret))


@pytest.mark.integration
def test_lakesync_local_limits_each_client_over_http(stack: LocalStack) -> None:
    assert _push(stack, "hasty")[0] == 200
    assert _push(stack, "hasty")[0] == 200
    status, headers, body = _push(stack, "hasty")
    assert status == 429
    assert 0 < int(headers["retry-after"]) <= FAR
    assert json.loads(body)["code"] == "RATE_LIMITED"
    assert _push(stack, "patient")[0] == 200


@pytest.mark.integration
def test_lakesync_local_closes_a_socket_over_its_message_limit_with_1013(stack: LocalStack) -> None:
    token = mint_token("chatty", "default", stack.secret)
    url = stack.url.replace("http://", "ws://") + "/v1/sync/default/ws?encoding=binary"
    frame = b"\x02" + encode_sync_pull(SyncPull("chatty", 0, 10))
    with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        for _ in range(2):
            ws.send(frame)
            assert isinstance(ws.recv(timeout=10), bytes)
        ws.send(frame)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
    assert closed.value.rcvd.reason.startswith("Rate limit exceeded")
    # another client's socket is served
    other = mint_token("calm", "default", stack.secret)
    with connect(url, additional_headers={"Authorization": f"Bearer {other}"}) as ws:
        ws.send(b"\x02" + encode_sync_pull(SyncPull("calm", 0, 10)))
        assert isinstance(ws.recv(timeout=10), bytes)


@pytest.mark.integration
def test_lakesync_local_refuses_anonymous_and_bad_tokens_before_any_function(stack: LocalStack) -> None:
    admin = SyncClient(stack.url, "default", mint_token("ops", "default", stack.secret, role="admin"), "ops")
    before = admin.admin("GET", "metrics")["committed"]
    body = json.dumps({"clientId": "mallory", "deltas": []}).encode()
    status, _, answer = _raw(stack.url, "POST", "/v1/sync/default/push", body)
    assert (status, json.loads(answer)) == (401, {"message": "Unauthorized"})
    forged = mint_token("mallory", "default", "not-this-deployments-secret-0123456789")
    status, _, answer = _raw(stack.url, "POST", "/v1/sync/default/push", body, forged)
    assert (status, json.loads(answer)) == (403, {"message": "Forbidden"})
    assert admin.admin("GET", "metrics")["committed"] == before


@pytest.fixture
def spied_front(api: Api) -> Iterator[tuple[LocalFront, list[str], LocalAuthorizer]]:
    # A front whose handler only records what reached it, behind the real authorizer function
    reached: list[str] = []

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        reached.append(event["rawPath"])
        return {"statusCode": 200, "headers": {"content-type": "application/json"}, "body": "{}"}

    authorizer = LocalAuthorizer()
    with LocalFront(handler, authorizer=authorizer) as front:
        yield front, reached, authorizer


def test_the_authorizer_keeps_anonymous_and_bad_tokens_from_the_functions(
    api: Api, spied_front: tuple[LocalFront, list[str], LocalAuthorizer]
) -> None:
    front, reached, authorizer = spied_front
    push_path = "/v1/sync/default/push"
    # No token: API Gateway refuses it itself; the authorizer is not even invoked
    assert _raw(front.url, "POST", push_path, b"{}")[0] == 401
    assert authorizer.invocations == 0
    # Bad tokens: the authorizer refuses them, 403; its answer is cached for the token
    valid = api.token()
    tampered = valid[:-10] + ("A" if valid[-10] != "A" else "B") + valid[-9:]  # a signature byte changed
    for token in ("garbage", api.token(secret="another-secret-of-enough-length-0123"), tampered):
        assert _raw(front.url, "POST", push_path, b"{}", token)[0] == 403
        assert _raw(front.url, "GET", "/v1/sync/default/pull", None, token)[0] == 403
    assert authorizer.invocations == 3
    assert reached == []
    # A valid token, and an expired one (its function answers the 401 on which clients refresh), reach the function
    assert _raw(front.url, "POST", push_path, b"{}", api.token())[0] == 200
    expired = mint_token("client-a", "default", api.secret, now_ms=1_000_000_000_000)
    assert _raw(front.url, "POST", push_path, b"{}", expired)[0] == 200
    # and so do the public routes, without a token
    assert _raw(front.url, "GET", "/health")[0] == 200
    assert reached == [push_path, push_path, "/health"]
