"""The local store's stream subscriptions against ``lakesync local`` over real HTTP: subscribed while offline, sent by
the sync, listed by the gateway as the caller's; a refusal surfaced with the gateway's code; unsubscribed, gone from
the gateway's list; the rows of a subscribed stream arriving through the pull, and leaving it on unsubscribe (and
entering again)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.client import LocalStore, connect
from lakesync.client.http import SyncClient
from lakesync.local.runner import LocalStack
from tests.factories import todo_schema
from tests.integration.test_local_subscriptions import RULES  # project_tasks: project from jwt:projects

pytestmark = pytest.mark.integration


OWN = {"name": "own", "tables": ["tasks"], "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}]}
"""A client's own tasks (the writer's); another client's reach it only through a stream."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(Path(tmp_path_factory.mktemp("client-subs")), port=0, persist=False) as running:
        admin = SyncClient(running.url, "default", mint_token("ops", "default", running.secret, role="admin"), "ops")
        admin.admin("POST", "sync-rules", {**RULES, "buckets": [OWN]})
        yield running


def open_store(stack: LocalStack, path: Path, url: str | None = None) -> LocalStore:
    token = mint_token("ann", "default", stack.secret, claims={"projects": ["1", "2"]})
    return connect(
        path, url=url or stack.url, gateway="default", token=token, schemas=[todo_schema("tasks")], realtime=False
    )


def held_by_gateway(store: LocalStore) -> list[dict[str, Any]]:
    doc = store.http.request("GET", "/v1/sync/default/subscriptions")
    return list(doc["subscriptions"])


def test_subscriptions_reach_the_gateway_and_leave_it(stack: LocalStack, tmp_path: Path) -> None:
    path = tmp_path / "ann.db"
    # Recorded while the store cannot reach the gateway (nothing listens on port 9 of this host)
    with open_store(stack, path, url="http://127.0.0.1:9") as offline:
        offline.subscribe_stream("project_tasks", {"project": "1"}, ttl=1200)
        offline.subscribe_stream("project_tasks", {"project": "9"})
        assert [s.state for s in offline.subscriptions()] == ["pending", "pending"]

    with open_store(stack, path) as store:
        report = store.sync()

        # The allowed one is active and the gateway lists it as the caller's, with the same id and expiry
        [refused] = report.refused_subscriptions
        assert (refused.params, refused.state, refused.refusal) == ({"project": "9"}, "refused", "NOT_ALLOWED")
        by_project = {s.params["project"]: s for s in store.subscriptions()}
        active = by_project["1"]
        assert active.state == "active" and by_project["9"].refusal == "NOT_ALLOWED"
        assert held_by_gateway(store) == [
            {"id": active.id, "stream": "project_tasks", "params": {"project": "1"}, "expiresAt": active.expires_at}
        ]

        # Unsubscribed: the gateway no longer holds it after the next sync
        assert store.unsubscribe("project_tasks", {"project": "1"}) is True
        assert store.unsubscribe(by_project["9"]) is True
        store.sync()
        assert store.subscriptions() == [] and held_by_gateway(store) == []


def test_subscribed_rows_arrive_through_the_pull_and_leave_on_unsubscribe(stack: LocalStack, tmp_path: Path) -> None:
    schema = todo_schema("tasks", project_id="string", owner="string")
    bob = mint_token("bob", "default", stack.secret)
    with connect(tmp_path / "bob.db", url=stack.url, gateway="default", token=bob, schemas=[schema]) as writer:
        writer.insert("tasks", "t1", {"title": "in 1", "project_id": "1", "owner": "bob"})
        writer.insert("tasks", "t2", {"title": "in 2", "project_id": "2", "owner": "bob"})
        assert writer.sync().pushed == 2
        written = writer.state("tasks", "t1")
    cat = mint_token("cat", "default", stack.secret, claims={"projects": ["1", "2"]})
    with connect(tmp_path / "cat.db", url=stack.url, gateway="default", token=cat, schemas=[schema]) as store:
        store.sync()
        assert store.rows("tasks") == {}  # none is cat's own
        store.subscribe_stream("project_tasks", {"project": "1"})
        store.sync()
        assert store.rows("tasks") == {
            "t1": {"title": "in 1", "done": None, "priority": None, "tags": None, "project_id": "1", "owner": "bob"}
        }
        store.unsubscribe("project_tasks", {"project": "1"})
        store.sync()
        assert held_by_gateway(store) == [] and store.subscriptions() == []
        assert store.rows("tasks") == {}
        # Subscribed again: the row comes back with its real versions
        store.subscribe_stream("project_tasks", {"project": "1"})
        store.sync()
        assert set(store.rows("tasks")) == {"t1"} and store.state("tasks", "t1") == written
