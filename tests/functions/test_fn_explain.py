"""GET /v1/admin/explain/{gw} through functions.admin.lambda_handler on moto: a pushed row explained from the live
buffer (its write, its scope, not yet flushed, delivery against a cursor), and bad parameters refused with 400."""

from __future__ import annotations

import json

import functions.admin as admin_fn
import functions.pull as pull_fn
import functions.push as push_fn


def test_explain_answers_from_the_buffer_for_a_pushed_row(api):
    # Given the sample push committed
    assert api.call(push_fn, api.event("push_json")).status == 200
    # When an admin asks why client-a has row-1; then again with the cursor a first pull hands client-a
    plain = api.call(admin_fn, api.event("admin_explain", token=api.admin_token()))
    first_pull = {"clientId": "client-a", "limit": "50"}
    cursor = api.call(pull_fn, api.event("pull_cursor", query=first_pull)).json()["cursor"]
    query = {"client": "client-a", "table": "todos", "row": "row-1", "cursor": cursor}
    with_cursor = api.call(admin_fn, api.event("admin_explain", token=api.admin_token(), query=query))
    # Then the row exists with the pushed values, held by client-a's write, committed and not yet flushed
    assert plain.status == 200, plain.body
    doc = plain.json()
    pushed = json.loads(api.event("push_json")["body"])["deltas"][0]
    assert doc["exists"] and doc["values"] == {c["column"]: c["value"] for c in pushed["columns"]}
    assert [h["deltaId"] for h in doc["history"]] == [pushed["deltaId"]]
    assert {c["winner"]["clientId"] for c in doc["columns"]} == {"client-a"}
    assert doc["storage"]["unflushedDeltas"] == 1 and doc["storage"]["rowIndexAgrees"] is True
    # And without rules every row is in scope; without a cursor delivery is unknown, with it delivered
    assert doc["scopes"][0]["covered"] is True
    assert doc["delivery"]["delivered"] is None
    assert with_cursor.json()["delivery"]["delivered"] is True


def test_explain_refuses_missing_and_malformed_parameters(api):
    missing = api.call(admin_fn, api.event("admin_explain", token=api.admin_token(), query={"client": "c"}))
    bad = {"client": "c", "table": "todos", "row": "r", "claims": "[1]"}
    malformed = api.call(admin_fn, api.event("admin_explain", token=api.admin_token(), query=bad))
    assert (missing.status, malformed.status) == (400, 400)
