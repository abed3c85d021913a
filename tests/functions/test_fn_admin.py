"""Admin routes through functions.admin.lambda_handler: every route's happy path from its sample event, the admin
role, and invalid documents (400, nothing stored).
"""

from __future__ import annotations

import json

import pytest

import functions.admin as admin_fn
import functions.push as push_fn

ADMIN_EVENTS = [
    "admin_sync_rules_post",
    "admin_sync_rules_get",
    "admin_schema_post",
    "admin_schema_get",
    "admin_flush",
    "admin_metrics",
]


def test_admin_sync_rules_roundtrip(api):
    # Given the sample rules saved
    saved = api.call(admin_fn, api.event("admin_sync_rules_post", token=api.admin_token()))
    # When read back
    got = api.call(admin_fn, api.event("admin_sync_rules_get", token=api.admin_token()))
    # Then they are the saved document
    assert (saved.status, saved.json()) == (200, {"saved": True})
    assert got.status == 200
    assert got.json() == json.loads(api.event("admin_sync_rules_post")["body"])


def test_admin_sync_rules_default_to_an_empty_rule_set(api):
    got = api.call(admin_fn, api.event("admin_sync_rules_get", token=api.admin_token()))
    assert got.json() == {"version": 1, "buckets": []}


def test_admin_schema_roundtrip_and_version(api):
    # Given the sample schema saved twice (the second time unchanged)
    first = api.call(admin_fn, api.event("admin_schema_post", token=api.admin_token()))
    again = api.call(admin_fn, api.event("admin_schema_post", token=api.admin_token()))
    listed = api.call(admin_fn, api.event("admin_schema_get", token=api.admin_token()))
    # Then it is version 1 both times and listed with its columns
    assert first.json() == again.json() == {"saved": True, "table": "todos", "version": 1}
    schema = json.loads(api.event("admin_schema_post")["body"])
    assert listed.json() == {"schemas": [{"version": 1, "schema": schema}]}


def test_admin_schema_then_push_with_unknown_column_is_422(api):
    # Given the sample schema for todos
    api.call(admin_fn, api.event("admin_schema_post", token=api.admin_token()))
    body = json.loads(api.event("push_json")["body"])
    body["deltas"][0]["columns"].append({"column": "priority", "value": 1})
    before = api.items()
    # When a push carries a column outside it, Then 422 SCHEMA_ERROR and nothing written
    reply = api.call(push_fn, api.event("push_json", body=body))
    assert reply.status == 422 and reply.json()["code"] == "SCHEMA_ERROR"
    assert api.items() == before


def test_admin_flush_records_a_request_seen_in_metrics(api):
    # Given a committed push and a flush request
    api.call(push_fn, api.event("push_json"))
    flushed = api.call(admin_fn, api.event("admin_flush", token=api.admin_token()))
    # When the metrics are read
    metrics = api.call(admin_fn, api.event("admin_metrics", token=api.admin_token())).json()
    # Then the request and the buffered delta are counted
    assert flushed.status == 200 and flushed.json()["flushed"] is True and flushed.json()["requestId"]
    assert metrics["pendingFlushRequests"] == 1
    assert metrics["logSize"] == 1 and metrics["tables"][0]["table"] == "todos"


@pytest.mark.parametrize("name", ADMIN_EVENTS)
def test_admin_routes_refuse_client_tokens(api, name):
    before = api.items()
    reply = api.call(admin_fn, api.event(name, token=api.token()))
    assert (reply.status, reply.json()) == (403, {"error": "Admin role required", "code": "FORBIDDEN"})
    assert api.items() == before


@pytest.mark.parametrize("name", ADMIN_EVENTS)
def test_admin_routes_refuse_admins_of_other_gateways(api, name):
    reply = api.call(admin_fn, api.event(name, token=api.admin_token(gw="other")))
    assert reply.status == 403
    assert reply.json()["error"] == "Gateway ID mismatch: JWT authorises a different gateway"


@pytest.mark.parametrize(
    ("name", "raw", "status", "code"),
    [
        ("admin_sync_rules_post", "{", 400, "VALIDATION_ERROR"),
        ("admin_sync_rules_post", '{"version": 1, "buckets": [{"name": ""}]}', 400, "VALIDATION_ERROR"),
        ("admin_schema_post", '{"table": "1bad", "columns": []}', 400, "SCHEMA_ERROR"),
        ("admin_schema_post", '{"columns": []}', 400, "SCHEMA_ERROR"),
        ("admin_schema_post", "null", 400, "SCHEMA_ERROR"),
    ],
    ids=["rules-json", "rules-invalid", "schema-table", "schema-missing", "schema-null"],
)
def test_admin_invalid_documents_are_400_and_not_stored(api, name, raw, status, code):
    reply = api.call(admin_fn, api.event(name, token=api.admin_token(), body=raw))
    assert reply.status == status and reply.json()["code"] == code
    assert api.items()["config"] == 0


def test_admin_schema_unsafe_evolution_is_400(api):
    api.call(admin_fn, api.event("admin_schema_post", token=api.admin_token()))
    retyped = {"table": "todos", "columns": [{"name": "title", "type": "number"}]}
    reply = api.call(admin_fn, api.event("admin_schema_post", token=api.admin_token(), body=retyped))
    assert reply.status == 400 and reply.json()["code"] == "SCHEMA_ERROR"
