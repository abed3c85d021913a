"""The rules backtest route through functions.admin.lambda_handler (on moto): an admin's candidate judged on the
buffer's rows, client tokens and other gateways' admins refused, bad input 400 with ``{"error", "code"}``, nothing
stored."""

from __future__ import annotations

import json

import pytest

import functions.admin as admin_fn
import functions.push as push_fn

EVENT = "admin_sync_rules_test"


def test_an_admin_backtests_the_sample_candidate_on_the_buffers_rows(api):
    # Given the sample push committed (a todo of client-a) and no rules stored
    assert api.call(push_fn, api.event("push_json")).status == 200
    before = api.items()
    # When the sample candidate (each client its own todos) is backtested for client-a
    reply = api.call(admin_fn, api.event(EVENT, token=api.admin_token()))
    # Then the report compares with no stored rules, read the log, and nothing was written
    assert reply.status == 200, reply.json()
    report = reply.json()
    assert report["against"]["version"] is None and report["against"]["source"] == "log"
    assert report["candidate"]["version"] == 2 and report["readOnly"] is True
    assert report["rowsRead"] == {"todos": 1}
    assert [c["client"] for c in report["claimSets"]] == ["client-a"]
    assert api.items() == before


@pytest.mark.parametrize("who", ["client", "other-gateway-admin"])
def test_only_the_gateways_admins_may_backtest(api, who):
    token = api.token() if who == "client" else api.admin_token(gw="other")
    reply = api.call(admin_fn, api.event(EVENT, token=token))
    assert reply.status == 403 and reply.json()["code"] == "FORBIDDEN"


@pytest.mark.parametrize(
    "raw",
    [
        "{",
        "[]",
        json.dumps({"rules": {"version": 1, "buckets": [{"name": ""}]}, "claimSets": []}),
        json.dumps({"rules": {"version": 1, "buckets": []}}),  # no claim sets and no sessions to take them from
        json.dumps({"rules": {"version": 1, "buckets": []}, "claimSets": [{"claims": {"sub": 1}}]}),
    ],
    ids=["json", "array", "invalid-rules", "no-claim-sets", "bad-claims"],
)
def test_bad_input_is_400_and_nothing_stored(api, raw):
    reply = api.call(admin_fn, api.event(EVENT, token=api.admin_token(), body=raw))
    assert reply.status == 400 and set(reply.json()) == {"error", "code"}
    assert reply.json()["code"] == "VALIDATION_ERROR"
    assert api.items()["config"] == 0
