"""POST /v1/sync/{gw}/action and GET /v1/sync/{gw}/actions through functions.actions.lambda_handler: the action
vectors, protobuf bodies, identity binding (body and per action), validation before anything runs, discovery.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import functions.actions as actions_fn
from lakesync.core.actions import make_action
from lakesync.core.hlc import encode
from lakesync.wire import decode
from lakesync.wire import encode as encode_pb

ACTION_CASES = json.loads(
    (Path(__file__).parent.parent / "vectors" / "http_handlers.json").read_text(encoding="utf-8")
)["action"]


@pytest.mark.parametrize("case", ACTION_CASES, ids=[c["name"] for c in ACTION_CASES])
def test_action_vector(api, case):
    # Given the vectors' gateway (clock fixed, no action handlers) and the body's client as the caller
    api.fix_clock()
    raw = json.loads(case["raw_body"])
    token = api.token(case["header_client_id"] or raw["clientId"])
    before = api.items()
    # When the raw body is posted
    reply = api.call(actions_fn, api.event("action", token=token, body=case["raw_body"]))
    # Then status and body are exactly the vector's (serverHlc included)
    assert (reply.status, reply.json()) == (case["expected"]["status"], case["expected"]["body"])
    if reply.status != 200:
        assert api.items() == before


def test_action_sample_event_reports_unsupported_connector_and_caches_it(api):
    # Given the sample action (connector "github", no handler registered)
    event = api.event("action")
    # When handled twice
    first = api.call(actions_fn, event)
    second = api.call(actions_fn, event)
    # Then both answer the same ACTION_NOT_SUPPORTED result, cached under the actionId and the idempotency key
    result = first.json()["results"][0]
    assert first.status == 200 and result["code"] == "ACTION_NOT_SUPPORTED" and result["retryable"] is False
    assert second.json()["results"] == first.json()["results"]
    assert api.items()["actions"] == 2


def test_action_protobuf_body_answers_protobuf(api):
    # Given an ActionPush in protobuf
    action = make_action("client-a", encode(1_763_000_000_000, 0), "jira", "comment", {"text": "hi"})
    data = encode_pb("ActionPush", {"clientId": "client-a", "actions": [action.to_json()]})
    event = api.event("action", body=data, headers={"content-type": "application/x-protobuf"})
    # When handled
    reply = api.call(actions_fn, event)
    # Then the answer is a protobuf ActionResponse for that action
    assert reply.status == 200
    assert reply.headers["Content-Type"] == "application/x-protobuf"
    response = decode("ActionResponse", reply.body)
    assert [r["actionId"] for r in response["results"]] == [action.action_id]


def test_action_malformed_protobuf_is_400(api):
    event = api.event("action", body=b"\xff\xff", headers={"content-type": "application/x-protobuf"})
    reply = api.call(actions_fn, event)
    assert (reply.status, reply.json()) == (400, {"error": "Failed to decode ActionPush", "code": "VALIDATION_ERROR"})


def test_action_spoofed_body_client_id_is_403(api):
    reply = api.call(actions_fn, api.event("action", token=api.token("mallory")))
    assert (reply.status, reply.json()) == (
        403,
        {"error": "Client ID mismatch: action clientId does not match authenticated identity", "code": "FORBIDDEN"},
    )
    assert api.items()["actions"] == 0


def test_action_spoofed_action_client_id_is_403_and_runs_nothing(api):
    # Given a batch whose second action claims another client
    ours = make_action("client-a", encode(1_763_000_000_000, 0), "github", "x", {})
    theirs = make_action("victim", encode(1_763_000_000_000, 1), "github", "x", {})
    body = {"clientId": "client-a", "actions": [ours.to_json(), theirs.to_json()]}
    # When posted, Then 403 and not even the first action was recorded
    reply = api.call(actions_fn, api.event("action", body=body))
    assert reply.status == 403 and reply.json()["code"] == "FORBIDDEN"
    assert api.items()["actions"] == 0


def test_action_batch_near_the_timeout_defers_what_it_cannot_start_and_a_retry_runs_it(api):
    # Given a batch of three actions, posted to an invocation with less time left than the reserve
    # (GatewaySettings.action_reserve_ms: 5 s)
    batch = [make_action("client-a", encode(1_763_000_000_000, i), "github", f"x{i}", {}).to_json() for i in range(3)]
    body = {"clientId": "client-a", "actions": batch}
    reply = api.call(actions_fn, api.event("action", body=body), time_left_s=4)
    # Then the first ran (and was recorded), the others were answered retryable ACTION_DEFERRED, not run nor recorded
    results = reply.json()["results"]
    assert reply.status == 200 and [r["actionId"] for r in results] == [a["actionId"] for a in batch]
    assert results[0]["code"] == "ACTION_NOT_SUPPORTED"
    assert [(r["code"], r["retryable"]) for r in results[1:]] == [("ACTION_DEFERRED", True)] * 2
    assert api.items()["actions"] == 1
    # When the client sends the batch again with time to spare, Then every action has its own result
    again = api.call(actions_fn, api.event("action", body=body)).json()["results"]
    assert [r["code"] for r in again] == ["ACTION_NOT_SUPPORTED"] * 3
    assert again[0] == results[0]
    assert api.items()["actions"] == 3


def test_action_invalid_later_action_rejects_the_batch_before_any_runs(api):
    ok = make_action("client-a", encode(1_763_000_000_000, 0), "github", "x", {}).to_json()
    bad = {**ok, "actionId": "b", "params": []}
    reply = api.call(actions_fn, api.event("action", body={"clientId": "client-a", "actions": [ok, bad]}))
    assert (reply.status, reply.json()) == (
        400,
        {"error": "params must be a non-null object", "code": "VALIDATION_ERROR"},
    )
    assert api.items()["actions"] == 0


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "actionId",
            "a" * 2048,
            "actionId is too long: its record key (gateway, client id and actionId) would be 2,065 bytes; "
            "the limit is 2,048",
        ),
        ("actionId", "a\ud800", "actionId is not valid UTF-8 text (it holds a lone surrogate)"),
        (
            "idempotencyKey",
            "k" * 2048,
            "idempotencyKey is too long: its record key (gateway, client id and idempotencyKey) would be 2,070 "
            "bytes; the limit is 2,048",
        ),
        ("idempotencyKey", "\udc00", "idempotencyKey is not valid UTF-8 text (it holds a lone surrogate)"),
    ],
)
def test_action_unstorable_record_key_rejects_the_batch_before_any_runs(api, field, value, message):
    # Given a valid action, then one whose actionId or idempotency key cannot be a DynamoDB key
    # (the record keys are "{gw}#{clientId}#{actionId}" and "{gw}#{clientId}#idem:{key}": at most 2,048 bytes)
    ok = make_action("client-a", encode(1_763_000_000_000, 0), "github", "x", {}).to_json()
    bad = {**ok, "actionId": "b", field: value}
    # When posted, Then 400 naming the field (not a 500 from storage) and not even the first action was recorded
    reply = api.call(actions_fn, api.event("action", body={"clientId": "client-a", "actions": [ok, bad]}))
    assert (reply.status, reply.json()) == (400, {"error": message, "code": "VALIDATION_ERROR"})
    assert api.items()["actions"] == 0


def test_action_record_key_at_the_limit_is_accepted(api):
    # "default#client-a#" + 2,031 bytes is exactly DynamoDB's 2,048-byte partition-key limit
    action = {
        **make_action("client-a", encode(1_763_000_000_000, 0), "github", "x", {}).to_json(),
        "actionId": "a" * 2031,
    }
    reply = api.call(actions_fn, api.event("action", body={"clientId": "client-a", "actions": [action]}))
    assert reply.status == 200 and reply.json()["results"][0]["code"] == "ACTION_NOT_SUPPORTED"
    assert api.items()["actions"] == 1


@pytest.mark.parametrize("raw", ["{", "[]", '{"clientId": "client-a"}', '{"clientId": "client-a", "actions": {}}'])
def test_action_malformed_body_is_400(api, raw):
    reply = api.call(actions_fn, api.event("action", body=raw))
    assert reply.status == 400 and reply.json()["code"] == "VALIDATION_ERROR"


def test_actions_discovery_sample_event_lists_no_connectors_by_default(api):
    reply = api.call(actions_fn, api.event("actions"))
    assert (reply.status, reply.json()) == (200, {"connectors": {}})


def test_actions_discovery_requires_a_token(api):
    reply = api.call(actions_fn, api.event("actions", token=None))
    assert (reply.status, reply.json()) == (401, {"error": "Missing Bearer token", "code": "AUTH_ERROR"})
