"""Stream subscriptions over real HTTP against ``lakesync local`` (moto server + the real handlers behind the local
front, routed as API Gateway routes them): subscribe, list, refresh, unsubscribe, every refusal, another client's
subscriptions out of reach."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.local.runner import LocalStack

pytestmark = pytest.mark.integration

RULES = {
    "version": 1,
    "buckets": [],
    "streams": [
        {
            "name": "project_tasks",
            "table": "tasks",
            "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
            "params": {"project": {"subscription": {"allowed": "jwt:projects"}}},
            "ttlSeconds": {"default": 600, "max": 3600},
        },
        {
            "name": "member_tasks",
            "table": "tasks",
            "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
            "params": {
                "project": {
                    "subscription": {
                        "membership": {
                            "table": "memberships",
                            "column": "project",
                            "where": [{"column": "user", "op": "eq", "value": "jwt:sub"}],
                        }
                    }
                }
            },
        },
    ],
}
PATH = "/v1/sync/default/subscriptions"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with LocalStack(Path(tmp_path_factory.mktemp("local-subs")), port=0, persist=False) as running:
        admin = mint_token("ops", "default", running.secret, role="admin")
        assert call(running, admin, "POST", "/v1/admin/sync-rules/default", RULES)[0] == 200
        yield running


def call(stack: LocalStack, token: str, method: str, path: str, body: Any = None) -> tuple[int, dict[str, str], Any]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    req = urllib.request.Request(stack.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            status, got, text = resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        status, got, text = exc.code, dict(exc.headers), exc.read()
    return status, {k.lower(): v for k, v in got.items()}, json.loads(text) if text else None


def token(stack: LocalStack, sub: str) -> str:
    return mint_token(sub, "default", stack.secret, claims={"projects": ["1", "2", "3"]})


def test_subscribe_list_refresh_and_unsubscribe_over_http(stack: LocalStack) -> None:
    ann = token(stack, "ann")
    status, headers, first = call(stack, ann, "POST", PATH, {"stream": "project_tasks", "params": {"project": "1"}})
    assert status == 201 and headers["cache-control"] == "no-store"
    assert first["stream"] == "project_tasks" and first["params"] == {"project": "1"} and len(first["id"]) == 32
    status, _, second = call(stack, ann, "POST", PATH, {"stream": "project_tasks", "params": {"project": "2"}})
    assert status == 201
    status, _, doc = call(stack, ann, "GET", PATH)
    assert status == 200 and doc == {"subscriptions": [first, second]}
    # The same stream and parameters again: the same subscription, its lifetime the one asked
    body = {"stream": "project_tasks", "params": {"project": "1"}, "ttlSeconds": 3000}
    status, _, again = call(stack, ann, "POST", PATH, body)
    assert status == 201 and again["id"] == first["id"] and again["expiresAt"] > first["expiresAt"]
    assert [s["id"] for s in call(stack, ann, "GET", PATH)[2]["subscriptions"]] == [first["id"], second["id"]]
    # Unsubscribed: 204 without a body, then gone; again: 404
    status, _, nothing = call(stack, ann, "DELETE", f"{PATH}/{first['id']}")
    assert (status, nothing) == (204, None)
    assert call(stack, ann, "GET", PATH)[2] == {"subscriptions": [second]}
    status, _, missing = call(stack, ann, "DELETE", f"{PATH}/{first['id']}")
    assert status == 404 and missing["refusal"] == "UNKNOWN_SUBSCRIPTION"


@pytest.mark.parametrize(
    ("body", "status", "refusal"),
    [
        ({"stream": "nope"}, 404, "UNKNOWN_STREAM"),
        ({"stream": "project_tasks", "params": {"project": "1", "x": "y"}}, 400, "UNEXPECTED_PARAM"),
        ({"stream": "project_tasks", "params": {"project": 7}}, 400, "INVALID_PARAM"),
        ({"stream": "project_tasks"}, 400, "MISSING_PARAM"),
        ({"stream": "project_tasks", "params": {"project": "9"}}, 403, "NOT_ALLOWED"),
        ({"stream": "member_tasks", "params": {"project": "1"}}, 403, "NOT_ALLOWED"),  # no membership row
        ({"stream": "project_tasks", "ttlSeconds": -1}, 400, None),
    ],
)
def test_refusals_over_http(stack: LocalStack, body: Any, status: int, refusal: str | None) -> None:
    got_status, headers, doc = call(stack, token(stack, "refused"), "POST", PATH, body)
    assert got_status == status and headers["content-type"] == "application/json"
    assert set(doc) == {"error", "code"} | ({"refusal"} if refusal else set())
    assert doc.get("refusal") == refusal
    assert call(stack, token(stack, "refused"), "GET", PATH)[2] == {"subscriptions": []}


def test_another_client_cannot_see_or_delete_mine_over_http(stack: LocalStack) -> None:
    bea, cal = token(stack, "bea"), token(stack, "cal")
    mine = call(stack, bea, "POST", PATH, {"stream": "project_tasks", "params": {"project": "3"}})[2]
    assert call(stack, cal, "GET", PATH)[2] == {"subscriptions": []}
    status, _, doc = call(stack, cal, "DELETE", f"{PATH}/{mine['id']}")
    assert status == 404 and doc["code"] == "NOT_FOUND"
    assert call(stack, bea, "GET", PATH)[2] == {"subscriptions": [mine]}
    # and a token of another gateway is refused before anything is read
    other = mint_token("bea", "elsewhere", stack.secret)
    assert call(stack, other, "GET", PATH)[0] == 403
