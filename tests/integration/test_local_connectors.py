"""Connectors end to end over real HTTP against ``lakesync local`` (moto server, the real handlers, the local poll
loop): a test connector type with actions registered through the admin route (its token moved into the local secret
files, 0600), discovery listing it, dispatch, dedup by actionId and by idempotencyKey, retryable against permanent
errors and ActionNotSupportedError reported as the original does, every executed action's provenance row pulled from
``_lakesync_provenance``; a PostgreSQL connector polled by the local loop with no manual trigger."""

from __future__ import annotations

import json
import os
import stat
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.connectors import registry
from lakesync.connectors.base import Connector
from lakesync.core.actions import Action, ActionContext, ActionDescriptor, ActionResult, make_action
from lakesync.core.connectors import ConnectorConfig
from lakesync.core.errors import ActionExecutionError, ActionNotSupportedError
from lakesync.local.runner import LocalStack
from tests.connector_types import descriptor
from tests.sql.servers import Server, postgres_server

__all__ = ["postgres_server"]

pytestmark = pytest.mark.integration

CALLS: dict[str, int] = {}


class Tickets:
    """A fake ticket system's action handler: counts executions per action type."""

    name = "tickets"
    supported_actions = (
        ActionDescriptor("create", "Create a ticket", {"type": "object"}),
        ActionDescriptor("flaky", "Fails once (retryable), then succeeds"),
        ActionDescriptor("permanent", "Always refused (not retryable)"),
        ActionDescriptor("unsupported", "Raises ActionNotSupportedError"),
    )

    def __init__(self, token: str) -> None:
        self.token = token

    def execute(self, action: Action, context: ActionContext) -> ActionResult:
        n = CALLS[action.action_type] = CALLS.get(action.action_type, 0) + 1
        if action.action_type == "flaky" and n == 1:
            raise ActionExecutionError("ticket system busy", retryable=True)
        if action.action_type == "permanent":
            raise ActionExecutionError("project is archived")
        if action.action_type == "unsupported":
            raise ActionNotSupportedError("tickets cannot be moved between projects")
        return ActionResult(
            action.action_id, {"id": n, "title": action.params.get("title"), "auth": len(self.token)}, 7
        )


DESCRIPTOR = descriptor("tickets", "Tickets (test)", "A test connector with actions", "apiToken")


def open_tickets(config: ConnectorConfig, secrets: Mapping[str, str]) -> Connector:
    return Connector(config.name, actions=Tickets(secrets["apiToken"]))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    registry.register(DESCRIPTOR, open_tickets)
    with LocalStack(Path(tmp_path_factory.mktemp("connectors")), port=0, persist=False, materialise=False) as running:
        running.connector_poller.tick_s = 0.2  # type: ignore[union-attr]
        yield running
    registry.unregister("tickets")


def http(
    stack: LocalStack,
    method: str,
    path: str,
    body: Any = None,
    *,
    sub: str = "agent",
    role: str = "client",
    claims: dict[str, Any] | None = None,
) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    token = mint_token(sub, "default", stack.secret, role=role, claims=claims)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    req = urllib.request.Request(stack.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def act(stack: LocalStack, *actions: Action) -> list[dict[str, Any]]:
    status, body = http(
        stack, "POST", "/v1/sync/default/action", {"clientId": "agent", "actions": [a.to_json() for a in actions]}
    )
    assert status == 200
    return list(body["results"])


def test_actions_dispatch_dedup_errors_discovery_and_provenance(stack: LocalStack) -> None:
    # Given the test connector registered with a plaintext token
    status, body = http(
        stack,
        "POST",
        "/v1/admin/connectors/default",
        {
            "name": "tickets",
            "type": "tickets",
            "tickets": {"apiToken": "tk-123456"},
            # the agent (a client) may run the connector's actions: they are off for clients without a policy
            "actions": {
                "allow": [{"type": t} for t in ("create", "flaky", "permanent", "unsupported")],
                "requireRole": "client",
            },
        },
        role="admin",
    )
    assert (status, body) == (200, {"registered": True, "name": "tickets"})
    secret_files = list((stack.data_dir / "connector-secrets").iterdir())
    assert [p.read_text() for p in secret_files] == ["tk-123456"]
    assert stat.S_IMODE(os.stat(secret_files[0]).st_mode) == 0o600
    # Then discovery lists it with its actions
    status, found = http(stack, "GET", "/v1/sync/default/actions")
    assert status == 200 and [a["actionType"] for a in found["connectors"]["tickets"]] == [
        "create",
        "flaky",
        "permanent",
        "unsupported",
    ]
    # When an action runs, is re-sent, and another action with the same idempotency key is sent
    create = make_action("agent", 1, "tickets", "create", {"title": "Printer on fire"}, "key-1")
    first = act(stack, create)
    again = act(stack, create)
    other = make_action("agent", 2, "tickets", "create", {"title": "Printer on fire"}, "key-1")
    same_key = act(stack, other)
    # Then it ran once; the re-send and the same-key action got the first result verbatim (its actionId)
    assert first[0] == {
        "actionId": create.action_id,
        "data": {"id": 1, "title": "Printer on fire", "auth": 9},
        "serverHlc": "7",
    }
    assert again == first and same_key == first and CALLS["create"] == 1
    # When a retryable failure is retried, it runs again and succeeds; a permanent one is cached
    flaky = make_action("agent", 3, "tickets", "flaky", {})
    assert act(stack, flaky)[0] == {
        "actionId": flaky.action_id,
        "code": "ACTION_EXECUTION_ERROR",
        "message": "ticket system busy",
        "retryable": True,
    }
    assert "data" in act(stack, flaky)[0] and CALLS["flaky"] == 2
    permanent = make_action("agent", 4, "tickets", "permanent", {})
    refused = act(stack, permanent)
    assert act(stack, permanent) == refused and CALLS["permanent"] == 1
    assert refused[0]["code"] == "ACTION_EXECUTION_ERROR" and refused[0]["retryable"] is False
    # And a handler's ActionNotSupportedError is that error's result, not retryable, cached
    unsupported = make_action("agent", 5, "tickets", "unsupported", {})
    result = act(stack, unsupported)
    assert result[0] == {
        "actionId": unsupported.action_id,
        "code": "ACTION_NOT_SUPPORTED",
        "message": "tickets cannot be moved between projects",
        "retryable": False,
    }
    assert act(stack, unsupported) == result and CALLS["unsupported"] == 1
    # And an unknown connector is ACTION_NOT_SUPPORTED without a handler
    nowhere = make_action("agent", 6, "nowhere", "create", {})
    assert act(stack, nowhere)[0]["message"] == 'No action handler registered for connector "nowhere"'
    # And every executed action with a final result has a provenance row an auditor can pull
    status, page = http(stack, "GET", "/v1/sync/default/pull?clientId=ops&since=0&limit=1000", sub="ops", role="admin")
    records = {
        d["rowId"]: {c["column"]: c["value"] for c in d["columns"]}
        for d in page["deltas"]
        if d["table"] == "_lakesync_provenance"
    }
    assert set(records) == {f"action:{a.action_id}" for a in (create, flaky, permanent, unsupported)}
    record = records[f"action:{create.action_id}"]
    assert (
        record["kind"] == "action"
        and record["requestedBy"] == "agent"
        and record["params"] == {"title": "Printer on fire"}
    )
    assert record["code"] == "OK" and record["result"]["data"]["id"] == 1 and record["idempotencyKey"] == "key-1"
    assert records[f"action:{unsupported.action_id}"]["code"] == "ACTION_NOT_SUPPORTED"
    # When it is unregistered, its secret file is gone and discovery no longer lists it
    assert http(stack, "DELETE", "/v1/admin/connectors/default/tickets", role="admin")[0] == 200
    assert list((stack.data_dir / "connector-secrets").iterdir()) == []
    assert "tickets" not in http(stack, "GET", "/v1/sync/default/actions")[1]["connectors"]


def test_the_local_loop_polls_a_registered_database(stack: LocalStack, postgres_server: Server) -> None:
    import psycopg

    url = postgres_server.url()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE plans (id INT PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO plans VALUES (1, 'free'), (2, 'pro')")
    config = {
        "name": "billing",
        "type": "postgres",
        "postgres": {"connectionString": url},
        "ingest": {
            "intervalMs": 200,
            "tables": [{"table": "plans", "query": "SELECT * FROM plans", "strategy": {"type": "diff"}}],
        },
    }
    assert http(stack, "POST", "/v1/admin/connectors/default", config, role="admin")[0] == 200
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM plans WHERE id = 1")
        conn.execute("INSERT INTO plans VALUES (3, 'team')")

    def plans() -> dict[str, Any]:
        _, page = http(stack, "GET", "/v1/sync/default/pull?clientId=ops&since=0&limit=1000", sub="ops", role="admin")
        rows: dict[str, Any] = {}
        for d in page["deltas"]:
            if d["table"] == "plans":
                if d["op"] == "DELETE":
                    rows.pop(d["rowId"], None)
                else:
                    rows[d["rowId"]] = {c["column"]: c["value"] for c in d["columns"]}
        return rows

    deadline = time.monotonic() + 20
    while plans() != {"2": {"name": "pro"}, "3": {"name": "team"}} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert plans() == {"2": {"name": "pro"}, "3": {"name": "team"}}
    assert http(stack, "DELETE", "/v1/admin/connectors/default/billing", role="admin")[0] == 200
