"""The pull follows a client's subscriptions over real HTTP against ``lakesync local`` (issue 43, item 2): subscribe,
the backfill of the stream's rows, following later changes by the cursor, unsubscribe, the drops of its rows."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.client.http import SyncClient
from lakesync.core import merge as lww
from lakesync.core.delta import DeltaOp, RowDelta
from lakesync.core.hlc import HLC
from lakesync.local.runner import LocalStack
from tests.factories import insert, update

pytestmark = pytest.mark.integration

RULES = {
    "version": 1,
    "buckets": [
        {"name": "lobby", "tables": ["tasks"], "filters": [{"column": "project_id", "op": "eq", "value": "lobby"}]}
    ],
    "streams": [
        {
            "name": "project_tasks",
            "table": "tasks",
            "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
            "params": {"project": {"subscription": {"allowed": "jwt:projects"}}},
        }
    ],
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = Path(tmp_path_factory.mktemp("local-scope"))
    with LocalStack(root, port=0, persist=False, gateway_ids=("default", "rules-change")) as running:
        admin = SyncClient(running.url, "default", mint_token("ops", "default", running.secret, role="admin"), "ops")
        admin.request("POST", "/v1/admin/sync-rules/default", body=RULES)
        yield running


class Replica:
    """A cursor client folding what it pulls; a DELETE at HLC 0 drops the row."""

    def __init__(self, http: SyncClient) -> None:
        self.http = http
        self.cursor: str | None = None
        self.rows: dict[str, lww.RowState] = {}
        self.received: list[RowDelta] = []

    def sync(self) -> list[RowDelta]:
        got, self.cursor = self.http.pull_all(self.cursor, limit=2)
        for d in got:
            if d.op is DeltaOp.DELETE and d.hlc == 0:
                self.rows.pop(d.row_id, None)
            else:
                self.rows[d.row_id] = lww.merge(self.rows.get(d.row_id), d).state
        self.received += got
        return got

    def held(self) -> dict[str, Any]:
        return {k: v for k, s in self.rows.items() if (v := s.values()) is not None}


def test_subscribe_backfill_follow_unsubscribe_drops_over_http(stack: LocalStack) -> None:
    writer = SyncClient(stack.url, "default", mint_token("w", "default", stack.secret, role="admin"), "w")
    clock = HLC()
    writer.push([insert(f"a{i}", hlc=clock.now(), table="tasks", client="w", project_id="1", n=i) for i in range(5)])
    writer.push([insert("l1", hlc=clock.now(), table="tasks", client="w", project_id="lobby", n=0)])
    writer.push([insert("b1", hlc=clock.now(), table="tasks", client="w", project_id="2", n=0)])
    token = mint_token("ann", "default", stack.secret, claims={"projects": ["1", "2"]})
    ann = Replica(SyncClient(stack.url, "default", token, "ann"))
    ann.sync()
    assert set(ann.held()) == {"l1"}
    # Subscribe: the backfill brings project 1's rows, once
    held = ann.http.request(
        "POST", "/v1/sync/default/subscriptions", body={"stream": "project_tasks", "params": {"project": "1"}}
    )
    backfill = ann.sync()
    assert sorted(d.row_id for d in backfill) == ["a0", "a1", "a2", "a3", "a4"]
    assert set(ann.held()) == {"l1", "a0", "a1", "a2", "a3", "a4"}
    # Follow: a later change of project 1 arrives by the log, once; project 2 does not
    writer.push([update("a2", hlc=clock.now(), table="tasks", client="w", n=20)])
    writer.push([update("b1", hlc=clock.now(), table="tasks", client="w", n=1)])
    assert [(d.row_id, d.op) for d in ann.sync()] == [("a2", DeltaOp.UPDATE)]
    assert ann.held()["a2"]["n"] == 20
    # Unsubscribe: project 1's rows are dropped, the lobby stays
    ann.http.request("DELETE", f"/v1/sync/default/subscriptions/{held['id']}")
    drops = ann.sync()
    assert sorted(d.row_id for d in drops) == ["a0", "a1", "a2", "a3", "a4"]
    assert all(d.op is DeltaOp.DELETE and d.hlc == 0 and d.client_id == "ann" for d in drops)
    assert set(ann.held()) == {"l1"}
    # And nothing more is pending
    assert ann.sync() == []


def test_a_rules_version_moves_rows_in_and_out_without_a_reload_over_http(stack: LocalStack) -> None:
    # Given a gateway of its own whose rules have buckets alone, and a client caught up under them
    gw = "rules-change"
    admin = SyncClient(stack.url, gw, mint_token("ops", gw, stack.secret, role="admin"), "ops")
    lobby = {"name": "lobby", "tables": ["tasks"], "filters": [{"column": "project_id", "op": "eq", "value": "a"}]}
    admin.request("POST", f"/v1/admin/sync-rules/{gw}", body={"version": 1, "buckets": [lobby]})
    writer = SyncClient(stack.url, gw, mint_token("w", gw, stack.secret, role="admin"), "w")
    clock = HLC()
    writer.push(
        [
            insert(f"{p}{i}", hlc=clock.now(), table="tasks", client="w", project_id=p, n=i)
            for p in "abc"
            for i in range(4)
        ]
    )
    ann = Replica(SyncClient(stack.url, gw, mint_token("ann", gw, stack.secret), "ann"))
    ann.sync()
    assert set(ann.held()) == {"a0", "a1", "a2", "a3"}
    # When an admin saves a version whose lobby is project b
    moved = {**lobby, "filters": [{"column": "project_id", "op": "eq", "value": "b"}]}
    admin.request("POST", f"/v1/admin/sync-rules/{gw}", body={"version": 2, "buckets": [moved]})
    before = len(ann.received)
    for _ in range(100):  # the pull function reads the rules again within its basis cache's lifetime
        ann.sync()
        if set(ann.held()) != {"a0", "a1", "a2", "a3"}:
            break
        time.sleep(0.05)
    # Then its next pulls send b's rows with their state and drop a's: eight deltas, not its whole scope again
    assert set(ann.held()) == {"b0", "b1", "b2", "b3"}
    got = ann.received[before:]
    assert sorted((d.row_id, d.op, d.hlc == 0) for d in got) == sorted(
        [(f"a{i}", DeltaOp.DELETE, True) for i in range(4)] + [(f"b{i}", DeltaOp.INSERT, False) for i in range(4)]
    )
    # And the cursor goes on under the new version, exactly once
    writer.push([update("b1", hlc=clock.now(), table="tasks", client="w", n=10)])
    writer.push([update("a1", hlc=clock.now(), table="tasks", client="w", n=10)])
    assert [(d.row_id, d.op) for d in ann.sync()] == [("b1", DeltaOp.UPDATE)]
    assert ann.sync() == []
