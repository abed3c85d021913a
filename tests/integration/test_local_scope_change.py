"""The pull follows a client's subscriptions over real HTTP against ``lakesync local`` (issue 43, item 2): subscribe,
the backfill of the stream's rows, following later changes by the cursor, unsubscribe, the drops of its rows."""

from __future__ import annotations

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
    with LocalStack(Path(tmp_path_factory.mktemp("local-scope")), port=0, persist=False) as running:
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
