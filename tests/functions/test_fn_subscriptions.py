"""POST/GET /v1/sync/{gw}/subscriptions and DELETE /v1/sync/{gw}/subscriptions/{id} through the pull function's
handler: subscribing and refreshing, every refusal with its status and code, the bound, expiry, one client's
subscriptions invisible to another, the rate limit."""

from __future__ import annotations

from typing import Any

import pytest

import functions.admin as admin_fn
import functions.pull as pull_fn
from lakesync.core.streams import MAX_CLIENT_SUBSCRIPTIONS, MAX_PARAM_CHARS, Subscription
from lakesync.gateway.subscriptions import subscription_id
from tests.functions.conftest import FIXED_MS

MEMBER_OF = {"table": "memberships", "column": "project", "where": [{"column": "user", "op": "eq", "value": "jwt:sub"}]}
RULES = {
    "version": 1,
    "buckets": [{"name": "own", "tables": ["todos"], "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}]}],
    "streams": [
        {
            "name": "project_tasks",
            "table": "tasks",
            "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
            "params": {"project": {"subscription": {"allowed": "jwt:projects"}}},
            "ttlSeconds": {"default": 3600, "max": 7200},
        },
        {
            "name": "my_notes",
            "table": "notes",
            "filters": [{"column": "author", "op": "eq", "value": "param:me"}],
            "params": {"me": {"claim": "sub"}},
        },
        {
            "name": "team_notes",
            "table": "notes",
            "filters": [{"column": "team", "op": "eq", "value": "param:team"}],
            "params": {"team": {"claim": "team"}},
        },
        {
            "name": "member_tasks",
            "table": "tasks",
            "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
            "params": {"project": {"subscription": {"membership": MEMBER_OF}}},
        },
    ],
}
PROJECTS = [str(i) for i in range(MAX_CLIENT_SUBSCRIPTIONS + 2)]


@pytest.fixture
def subs(api: Any) -> Any:
    """The function on a gateway whose rules declare the streams, the clock fixed."""
    assert api.call(admin_fn, api.event("admin_sync_rules_post", token=api.admin_token(), body=RULES)).status == 200
    api.fix_clock()
    return api


def token(api: Any, sub: str = "client-a", **claims: Any) -> str:
    return api.token(sub, claims={"projects": PROJECTS, **claims})


def subscribe(api: Any, body: Any, tok: str | None = None) -> Any:
    return api.call(pull_fn, api.event("subscriptions_post", token=tok or token(api), body=body))


def listed(api: Any, tok: str | None = None) -> Any:
    reply = api.call(pull_fn, api.event("subscriptions_get", token=tok or token(api)))
    assert reply.status == 200
    return reply.json()["subscriptions"]


def delete(api: Any, sid: str, tok: str | None = None) -> Any:
    event = api.event("subscriptions_delete", token=tok or token(api))
    path = f"/v1/sync/default/subscriptions/{sid}"
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["pathParameters"] = {"gw": "default", "id": sid}
    return api.call(pull_fn, event)


def test_subscribe_answers_201_with_the_subscription_and_lists_it(subs: Any) -> None:
    reply = subscribe(subs, {"stream": "project_tasks", "params": {"project": "3"}})
    assert reply.status == 201 and reply.headers["Cache-Control"] == "no-store"
    got = reply.json()
    assert got == {
        "id": got["id"],
        "stream": "project_tasks",
        "params": {"project": "3"},
        "expiresAt": FIXED_MS + 3_600_000,  # the stream's default lifetime
    }
    assert len(got["id"]) == 32 and int(got["id"], 16) >= 0
    # A stream whose parameter comes from the token takes no params
    notes = subscribe(subs, {"stream": "my_notes"}).json()
    assert notes["params"] == {} and notes["expiresAt"] == FIXED_MS + 86_400_000  # the engine's default: a day
    assert listed(subs) == [notes, got]


def test_subscribing_again_is_the_same_subscription_with_its_expiry_refreshed_and_ttl_cut_to_the_max(
    subs: Any,
) -> None:
    first = subscribe(subs, {"stream": "project_tasks", "params": {"project": "3"}, "ttlSeconds": 60}).json()
    assert first["expiresAt"] == FIXED_MS + 60_000
    subs.fix_clock(FIXED_MS + 1_000)
    again = subscribe(subs, {"stream": "project_tasks", "params": {"project": "3"}, "ttlSeconds": 999_999})
    assert again.status == 201
    assert again.json() == {**first, "expiresAt": FIXED_MS + 1_000 + 7_200_000}  # the stream's max
    assert listed(subs) == [again.json()]


@pytest.mark.parametrize(
    ("body", "status", "refusal", "message"),
    [
        ({"stream": "nope"}, 404, "UNKNOWN_STREAM", 'The sync rules have no stream "nope"'),
        ({"stream": "project_tasks", "params": {"project": "1", "x": "1"}}, 400, "UNEXPECTED_PARAM", '"x"'),
        ({"stream": "my_notes", "params": {"me": "client-b"}}, 400, "UNEXPECTED_PARAM", "comes from the token"),
        ({"stream": "project_tasks", "params": {"project": 1}}, 400, "INVALID_PARAM", "non-empty string"),
        ({"stream": "project_tasks", "params": {"project": ""}}, 400, "INVALID_PARAM", "non-empty string"),
        ({"stream": "project_tasks", "params": {"project": "1" * (MAX_PARAM_CHARS + 1)}}, 400, "INVALID_PARAM", "256"),
        ({"stream": "project_tasks"}, 400, "MISSING_PARAM", 'parameter "project" is required'),
        ({"stream": "project_tasks", "params": {"project": "999"}}, 403, "NOT_ALLOWED", "not allowed for this client"),
        ({"stream": "team_notes"}, 403, "NOT_ALLOWED", 'needs the token\'s claim "team"'),
        ({"stream": "member_tasks", "params": {"project": "1"}}, 403, "NOT_ALLOWED", "not allowed for this client"),
    ],
)
def test_every_refusal_has_its_status_code_and_refusal_and_writes_nothing(
    subs: Any, body: Any, status: int, refusal: str, message: str
) -> None:
    before = subs.items()
    reply = subscribe(subs, body)
    assert reply.status == status
    doc = reply.json()
    assert doc["refusal"] == refusal and message in doc["error"]
    assert doc["code"] == {400: "VALIDATION_ERROR", 403: "FORBIDDEN", 404: "NOT_FOUND", 422: "VALIDATION_ERROR"}[status]
    assert subs.items() == before and listed(subs) == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("not json", "Invalid JSON body"),
        ([], "must be a JSON object"),
        ({"params": {}}, '"stream" must be a non-empty string'),
        ({"stream": ""}, '"stream" must be a non-empty string'),
        ({"stream": "project_tasks", "params": ["1"]}, '"params" must be an object'),
        ({"stream": "project_tasks", "params": {"project": "1"}, "ttlSeconds": 0}, '"ttlSeconds" must be'),
        ({"stream": "project_tasks", "params": {"project": "1"}, "ttlSeconds": True}, '"ttlSeconds" must be'),
        ({"stream": "project_tasks", "params": {"project": "1"}, "ttlSeconds": "60"}, '"ttlSeconds" must be'),
        ({"stream": "project_tasks", "params": {"project": "1"}, "ttlSeconds": 2**31}, '"ttlSeconds" must be'),
        ({"stream": "project_tasks", "params": {"project": "1"}, "ttl": 5}, 'Unknown field "ttl"'),
    ],
)
def test_a_malformed_body_is_400(subs: Any, body: Any, message: str) -> None:
    before = subs.items()
    reply = subscribe(subs, body)
    assert reply.status == 400 and reply.json()["code"] == "VALIDATION_ERROR" and message in reply.json()["error"]
    assert subs.items() == before


def test_without_streams_in_the_rules_every_stream_is_unknown(api: Any) -> None:
    api.fix_clock()
    reply = subscribe(api, {"stream": "project_tasks", "params": {"project": "1"}})
    assert (reply.status, reply.json()["refusal"]) == (404, "UNKNOWN_STREAM")


def test_the_bound_refuses_one_more_with_409_but_admits_a_refresh_and_one_after_an_unsubscribe(subs: Any) -> None:
    held = [subscribe(subs, {"stream": "project_tasks", "params": {"project": p}}) for p in PROJECTS[:-2]]
    assert {r.status for r in held} == {201} and len(listed(subs)) == MAX_CLIENT_SUBSCRIPTIONS
    over = subscribe(subs, {"stream": "project_tasks", "params": {"project": PROJECTS[-1]}})
    assert over.status == 409
    assert over.json()["refusal"] == "TOO_MANY_SUBSCRIPTIONS" and over.json()["code"] == "VALIDATION_ERROR"
    assert f"at most {MAX_CLIENT_SUBSCRIPTIONS}" in over.json()["error"]
    assert subscribe(subs, {"stream": "project_tasks", "params": {"project": "0"}}).status == 201  # a refresh
    assert delete(subs, held[5].json()["id"]).status == 204
    assert subscribe(subs, {"stream": "project_tasks", "params": {"project": PROJECTS[-1]}}).status == 201
    # another client has its own bound
    assert subscribe(subs, {"stream": "my_notes"}, token(subs, "client-b")).status == 201


def test_unsubscribe_answers_204_and_404_for_an_unknown_id(subs: Any) -> None:
    kept = subscribe(subs, {"stream": "project_tasks", "params": {"project": "1"}}).json()
    gone = subscribe(subs, {"stream": "project_tasks", "params": {"project": "2"}}).json()
    reply = delete(subs, gone["id"])
    assert reply.status == 204 and reply.body == b""
    assert listed(subs) == [kept]
    again = delete(subs, gone["id"])
    assert again.status == 404 and again.json()["refusal"] == "UNKNOWN_SUBSCRIPTION"
    # the sample event names an id nobody holds
    sample = subs.call(pull_fn, subs.event("subscriptions_delete", token=token(subs)))
    assert sample.status == 404 and sample.json()["code"] == "NOT_FOUND"


def test_another_client_can_neither_see_nor_delete_my_subscriptions(subs: Any) -> None:
    mine = subscribe(subs, {"stream": "project_tasks", "params": {"project": "1"}}).json()
    other = token(subs, "client-b")
    assert listed(subs, other) == []
    reply = delete(subs, mine["id"], other)
    assert reply.status == 404 and reply.json()["refusal"] == "UNKNOWN_SUBSCRIPTION"
    assert listed(subs) == [mine]
    # the same subscription of another client is its own (same id, separate expiry)
    subs.fix_clock(FIXED_MS + 5)
    theirs = subscribe(subs, {"stream": "project_tasks", "params": {"project": "1"}}, other).json()
    assert theirs["id"] == mine["id"] and theirs["expiresAt"] == mine["expiresAt"] + 5
    assert delete(subs, mine["id"], other).status == 204
    assert listed(subs) == [mine] and listed(subs, other) == []


def test_a_subscription_that_has_run_out_is_not_listed_and_cannot_be_deleted(subs: Any) -> None:
    short = subscribe(subs, {"stream": "project_tasks", "params": {"project": "1"}, "ttlSeconds": 1}).json()
    long = subscribe(subs, {"stream": "project_tasks", "params": {"project": "2"}}).json()
    subs.fix_clock(FIXED_MS + 999)
    assert listed(subs) == [short, long]
    subs.fix_clock(FIXED_MS + 1_000)
    assert listed(subs) == [long]
    assert delete(subs, short["id"]).status == 404


def test_the_id_is_derived_from_stream_and_params_only(subs: Any) -> None:
    got = subscribe(subs, {"stream": "project_tasks", "params": {"project": "1"}}).json()
    assert got["id"] == subscription_id(Subscription.of("project_tasks", {"project": "1"}, 1))
    assert got["id"] != subscription_id(Subscription.of("project_tasks", {"project": "2"}))


def test_the_routes_need_a_token_of_the_gateway(subs: Any) -> None:
    assert subs.call(pull_fn, subs.event("subscriptions_get", token=None)).status == 401
    wrong = subs.token("client-a", gw="other")
    assert subs.call(pull_fn, subs.event("subscriptions_get", token=wrong)).status == 403


def test_the_subscription_routes_share_one_rate_limit_family(subs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from functions._runtime import get_deps, reset_runtime

    monkeypatch.setenv("LAKESYNC_RATE_LIMITS", "subscriptions=3/60")
    reset_runtime()
    subs.fix_clock()
    assert get_deps().limiter is not None
    assert subscribe(subs, {"stream": "my_notes"}).status == 201
    assert len(listed(subs)) == 1
    assert delete(subs, subscription_id(Subscription("my_notes"))).status == 204
    refused = subs.call(pull_fn, subs.event("subscriptions_get", token=token(subs)))
    assert refused.status == 429 and refused.json()["code"] == "RATE_LIMITED" and "Retry-After" in refused.headers
    # another client is counted apart
    assert len(listed(subs, token(subs, "client-b"))) == 0
