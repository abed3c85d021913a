"""Actions are authorised (issue 40, item 2), against the Jira and Salesforce stand-ins: through the Lambda handlers
on the moto server (connectors registered through ``functions.admin``, their secrets in Secrets Manager) and over
real HTTP against ``lakesync local``.

* Without an ``actions`` policy no client may run a connector's actions: the refusal is an ``ACTION_FORBIDDEN``
  result, the vendor receives no request, nothing is cached or written to provenance, and discovery hides them.
* With one, a client with the required claim (or role) runs an allowed type on an allowed object and is refused
  another type or object (Salesforce ``update_record`` on ``User``), before any request leaves.
* Admins always run every action.
* Action records are per client: client B sending client A's actionId and idempotency key neither gets A's result
  (replay) nor stops A's action (block).
* A malformed policy is a 400 at registration and stores nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import functions.actions as actions_fn
import functions.admin as admin_fn
import functions.pull as pull_fn
from lakesync.core.actions import Action, make_action
from lakesync.local.runner import LocalStack
from tests.connectors.jira_server import JiraState
from tests.connectors.jira_server import running as jira_running
from tests.connectors.salesforce_server import SalesforceState
from tests.connectors.salesforce_server import running as salesforce_running
from tests.functions.conftest import Api, api, aws_env
from tests.integration.test_local_connectors import http

__all__ = ["api", "aws_env"]

pytestmark = pytest.mark.integration

EMAIL = "bot@example.com"
JIRA_TOKEN = "ATATT3xFfGF0-jira-token"
SF_CLIENT_ID = "3MVG9-consumer-key"
SF_CLIENT_SECRET = "8A4BE698BCA2-very-secret"

SUPPORT_ONLY = {
    "allow": [{"type": "update_record", "objects": ["Account", "Contact"]}],
    "requireClaim": {"name": "team", "values": ["support"]},
}
EVERY_CLIENT_MAY_COMMENT = {"allow": [{"type": "add_comment"}, {"type": "create_issue"}], "requireRole": "client"}


@pytest.fixture
def jira() -> Iterator[JiraState]:
    state = JiraState(email=EMAIL, api_token=JIRA_TOKEN, time_zone="UTC")
    with jira_running(state):
        yield state


@pytest.fixture
def salesforce() -> Iterator[SalesforceState]:
    state = SalesforceState(client_id=SF_CLIENT_ID, client_secret=SF_CLIENT_SECRET)
    with salesforce_running(state):
        yield state


def jira_config(state: JiraState, actions: dict[str, Any] | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "jira",
        "type": "jira",
        "jira": {"domain": state.base_url, "email": EMAIL, "apiToken": JIRA_TOKEN},
    }
    return doc if actions is None else {**doc, "actions": actions}


def salesforce_config(state: SalesforceState, actions: dict[str, Any] | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "sf",
        "type": "salesforce",
        "salesforce": {
            "instanceUrl": state.base_url,
            "clientId": SF_CLIENT_ID,
            "authFlow": "client_credentials",
            "clientSecret": SF_CLIENT_SECRET,
        },
    }
    return doc if actions is None else {**doc, "actions": actions}


def update_record(client: str, n: int, sobject: str, record_id: str, key: str | None = None) -> Action:
    return make_action(
        client, n, "sf", "update_record", {"sobject": sobject, "id": record_id, "fields": {"Name": "x"}}, key
    )


def writes(state: JiraState | SalesforceState) -> list[tuple[str, str]]:
    """The vendor requests that could change something (the token exchange aside)."""
    return [(r[0], r[1]) for r in state.requests if r[0] in ("POST", "PUT", "PATCH") and "oauth2" not in r[1]]


# -- through the Lambda handlers on moto -------------------------------------------------------------------------------


@pytest.fixture
def lam(api: Api, monkeypatch: pytest.MonkeyPatch) -> Api:
    """The functions with connectors: secrets in moto's Secrets Manager, loopback http allowed (the stand-ins)."""
    from functions._runtime import reset_runtime

    monkeypatch.setenv("LAKESYNC_CONNECTOR_SECRET_PREFIX", f"lakesync/sec-actions-{id(api)}")
    monkeypatch.setenv("LAKESYNC_ALLOWED_NETWORKS", "127.0.0.0/8")
    monkeypatch.setenv("LAKESYNC_ALLOW_PLAIN_HTTP", "true")
    reset_runtime()
    return api


def register(api: Api, config: dict[str, Any]) -> Any:
    return api.call(admin_fn, api.event("admin_connectors_post", token=api.admin_token(), body=config))


def run(api: Api, token: str, client: str, *actions: Action) -> list[dict[str, Any]]:
    body = {"clientId": client, "actions": [a.to_json() for a in actions]}
    reply = api.call(actions_fn, api.event("action", token=token, body=body))
    assert reply.status == 200, reply.json()
    return list(reply.json()["results"])


def discover(api: Api, token: str) -> dict[str, Any]:
    reply = api.call(actions_fn, api.event("actions", token=token))
    assert reply.status == 200
    return dict(reply.json()["connectors"])


def provenance(api: Api) -> set[str]:
    query = {"clientId": "ops", "since": "0", "limit": "1000"}
    page = api.call(pull_fn, api.event("pull", token=api.admin_token(), query=query)).json()
    return {d["rowId"] for d in page["deltas"] if d["table"] == "_lakesync_provenance"}


def test_lambda_actions_are_off_for_clients_without_a_policy_and_admins_always_run_them(
    lam: Api, jira: JiraState
) -> None:
    issue = jira.add_issue("ENG", "Printer on fire")
    assert register(lam, jira_config(jira, None)).status == 200
    before = len(jira.requests)
    # When a client asks for update_issue (Jira's, as the integration user)
    refused = make_action("client-a", 1, "jira", "update_issue", {"issueKey": issue.key, "summary": "defaced"})
    (result,) = run(lam, lam.token("client-a"), "client-a", refused)
    # Then it is refused, Jira received nothing, and nothing was cached or recorded
    assert result == {
        "actionId": refused.action_id,
        "code": "ACTION_FORBIDDEN",
        "message": 'Actions of connector "jira" are not enabled for clients',
        "retryable": False,
    }
    assert len(jira.requests) == before and jira.issues[issue.id].current["summary"] == "Printer on fire"
    assert lam.items()["actions"] == 0 and provenance(lam) == set()
    # And discovery shows the client nothing, an admin everything
    assert discover(lam, lam.token("client-a")) == {}
    assert [d["actionType"] for d in discover(lam, lam.admin_token())["jira"]] == [
        "create_issue",
        "update_issue",
        "add_comment",
    ]
    # When an admin runs the same kind of action, Then it runs (and is recorded)
    mine = make_action("ops", 2, "jira", "update_issue", {"issueKey": issue.key, "summary": "Printer fixed"})
    (done,) = run(lam, lam.admin_token(), "ops", mine)
    assert done["data"] == {"key": issue.key, "updated": ["summary"]}
    assert writes(jira) == [("PUT", f"/rest/api/3/issue/{issue.key}")]
    assert provenance(lam) == {f"action:{mine.action_id}"}


def test_lambda_salesforce_policy_allows_a_type_on_its_objects_for_the_claim_only(
    lam: Api, salesforce: SalesforceState
) -> None:
    account = salesforce.insert("Account", Name="Acme")
    contact = salesforce.insert("Contact", LastName="Lovelace")
    assert register(lam, salesforce_config(salesforce, SUPPORT_ONLY)).status == 200
    support = lam.token("agent", claims={"team": "support"})
    sales = lam.token("seller", claims={"team": "sales"})
    # When the support client updates an Account, a User and creates a record
    allowed = update_record("agent", 1, "Account", account)
    user = update_record("agent", 2, "User", "005000000000001AAA")
    create = make_action("agent", 3, "sf", "create_record", {"sobject": "Account", "fields": {"Name": "New"}})
    results = run(lam, support, "agent", allowed, user, create)
    # Then only the Account update reached Salesforce
    assert results[0]["data"] == {"id": account, "sobject": "Account", "updated": ["Name"]}
    assert [(r["code"], r["retryable"]) for r in results[1:]] == [("ACTION_FORBIDDEN", False)] * 2
    assert results[1]["message"] == 'Action type "update_record" of connector "sf" is not allowed on "User"'
    assert writes(salesforce) == [("PATCH", f"/services/data/v62.0/sobjects/Account/{account}")]
    # And a client without the claim is refused even the allowed type and object
    (other,) = run(lam, sales, "seller", update_record("seller", 4, "Contact", contact))
    assert other["code"] == "ACTION_FORBIDDEN" and len(writes(salesforce)) == 1
    # And discovery shows the support client update_record limited to its objects, the other client nothing
    (shown,) = discover(lam, support)["sf"]
    assert shown["actionType"] == "update_record"
    assert shown["paramsSchema"]["properties"]["sobject"]["enum"] == ["Account", "Contact"]
    assert discover(lam, sales) == {}
    # And an admin is not held to the policy's objects (Salesforce answers for itself: no such Lead)
    (admin,) = run(lam, lam.admin_token(), "ops", update_record("ops", 5, "Lead", "00Q000000000001AAA"))
    assert admin["code"] == "ACTION_EXECUTION_ERROR" and "NOT_FOUND" in admin["message"]
    assert writes(salesforce)[-1] == ("PATCH", "/services/data/v62.0/sobjects/Lead/00Q000000000001AAA")


def test_lambda_client_b_can_neither_replay_nor_block_client_a_actions(lam: Api, jira: JiraState) -> None:
    issue = jira.add_issue("ENG", "Shared")
    assert register(lam, jira_config(jira, EVERY_CLIENT_MAY_COMMENT)).status == 200
    alice, bob = lam.token("alice"), lam.token("bob")
    # Given bob got in first with the idempotency key alice will use
    bobs = make_action("bob", 1, "jira", "add_comment", {"issueKey": issue.key, "body": "bob's"}, "order-1")
    (first_bob,) = run(lam, bob, "bob", bobs)
    # When alice sends her action with that key, Then it runs for her (not answered with bob's result)
    alices = make_action("alice", 2, "jira", "add_comment", {"issueKey": issue.key, "body": "alice's"}, "order-1")
    (first_alice,) = run(lam, alice, "alice", alices)
    assert first_alice["actionId"] == alices.action_id and first_alice["data"] != first_bob["data"]
    # When bob sends alice's actionId as his own, Then his action runs for him: he does not get alice's result
    replay = Action(alices.action_id, "bob", 3, "jira", "add_comment", {"issueKey": issue.key, "body": "bob 2"})
    (replayed,) = run(lam, bob, "bob", replay)
    assert replayed["data"]["commentId"] not in (first_alice["data"]["commentId"], first_bob["data"]["commentId"])
    # And alice's re-send is still answered from her own record, not run again
    assert run(lam, alice, "alice", alices) == [first_alice]
    texts = [c["body"]["content"][0]["content"][0]["text"] for c in jira.issues[issue.id].comments]
    assert texts == ["bob's", "alice's", "bob 2"]


def test_lambda_a_malformed_policy_is_a_400_and_nothing_is_stored(lam: Api, jira: JiraState) -> None:
    bad = jira_config(jira, {"allow": [{"type": "update_isue"}], "requireRole": "client"})
    reply = register(lam, bad)
    assert (reply.status, reply.json()) == (
        400,
        {
            "error": 'actions.allow[0].type "update_isue" is not an action of connector type "jira" '
            "(its actions: create_issue, update_issue, add_comment)",
            "code": "VALIDATION_ERROR",
        },
    )
    open_to_all = jira_config(jira, {"allow": [{"type": "update_issue"}]})
    reply = register(lam, open_to_all)
    assert reply.status == 400 and "needs requireRole or requireClaim" in reply.json()["error"]
    items = lam.client.scan(TableName=lam.tables.config)["Items"]
    assert not any(i["sk"]["S"].startswith("conn#") for i in items)


# -- over real HTTP against lakesync local -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(Path(tmp_path_factory.mktemp("actions")), port=0, persist=False, materialise=False) as running:
        yield running


def act(stack: LocalStack, sub: str, *actions: Action, **claims: Any) -> list[dict[str, Any]]:
    body = {"clientId": sub, "actions": [a.to_json() for a in actions]}
    role = claims.pop("role", "client")
    status, reply = http(stack, "POST", "/v1/sync/default/action", body, sub=sub, role=role, claims=claims)
    assert status == 200, reply
    return list(reply["results"])


def test_local_front_enforces_the_policy_and_keeps_records_per_client(stack: LocalStack, jira: JiraState) -> None:
    issue = jira.add_issue("ENG", "Printer on fire")
    policy = {"allow": [{"type": "add_comment"}], "requireClaim": {"name": "team", "values": ["support"]}}
    status, body = http(
        stack, "POST", "/v1/admin/connectors/default", jira_config(jira, policy), sub="ops", role="admin"
    )
    assert (status, body) == (200, {"registered": True, "name": "jira"})
    before = len(jira.requests)
    try:
        # A client without the claim is refused; one with it is refused a type the policy does not list
        comment = make_action("guest", 1, "jira", "add_comment", {"issueKey": issue.key, "body": "hi"})
        assert act(stack, "guest", comment)[0]["code"] == "ACTION_FORBIDDEN"
        edit = make_action("agent", 2, "jira", "update_issue", {"issueKey": issue.key, "summary": "defaced"})
        assert act(stack, "agent", edit, team="support")[0]["code"] == "ACTION_FORBIDDEN"
        assert len(jira.requests) == before
        # The client with the claim runs the allowed type; an admin runs any type
        mine = make_action("agent", 3, "jira", "add_comment", {"issueKey": issue.key, "body": "on it"}, "k-1")
        ran = act(stack, "agent", mine, team="support")[0]
        assert ran["data"]["issueKey"] == issue.key
        fix = make_action("ops", 4, "jira", "update_issue", {"issueKey": issue.key, "summary": "Printer fixed"})
        assert act(stack, "ops", fix, role="admin")[0]["data"] == {"key": issue.key, "updated": ["summary"]}
        assert writes(jira) == [
            ("POST", f"/rest/api/3/issue/{issue.key}/comment"),
            ("PUT", f"/rest/api/3/issue/{issue.key}"),
        ]
        # Another support client replaying the agent's actionId and key gets a run of its own, not the agent's result
        replay = Action(
            mine.action_id, "agent-2", 5, "jira", "add_comment", {"issueKey": issue.key, "body": "2"}, "k-1"
        )
        theirs = act(stack, "agent-2", replay, team="support")[0]
        assert theirs["data"]["commentId"] != ran["data"]["commentId"]
        assert act(stack, "agent", mine, team="support") == [ran]
        # Discovery: the support client sees add_comment only, the guest nothing
        status, shown = http(stack, "GET", "/v1/sync/default/actions", sub="agent", claims={"team": "support"})
        assert [d["actionType"] for d in shown["connectors"]["jira"]] == ["add_comment"]
        assert http(stack, "GET", "/v1/sync/default/actions", sub="guest")[1] == {"connectors": {}}
    finally:
        http(stack, "DELETE", "/v1/admin/connectors/default/jira", sub="ops", role="admin")
