"""Writes judged by the client's whole scope over real HTTP against ``lakesync local`` (issue 43, items 1 and 3): a
client writes the rows of the stream it subscribes to, within the stream's write policy, and a member the rows of its
projects through a membership-filtered bucket; each forbidden delta is refused in its receipt while the rest of the
push commits; after unsubscribing the rows are refused again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.client.http import SyncClient
from lakesync.core import merge as lww
from lakesync.core.hlc import HLC
from lakesync.local.runner import LocalStack
from tests.factories import delete, insert, update
from tests.stream_docs import member_bucket, project_stream

pytestmark = pytest.mark.integration

RULES = {
    "version": 1,
    "buckets": [member_bucket("member_notes", "notes")],
    "streams": [project_stream(write={"ops": ["insert", "update"]})],
}
PATH = "/v1/sync/default/subscriptions"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with LocalStack(Path(tmp_path_factory.mktemp("local-stream-writes")), port=0, persist=False) as running:
        admin = SyncClient(running.url, "default", mint_token("ops", "default", running.secret, role="admin"), "ops")
        admin.request("POST", "/v1/admin/sync-rules/default", body=RULES)
        yield running


def _rows(stack: LocalStack) -> dict[str, Any]:
    """Every live row of projects 1 and 2 as the store holds it: pulled from the start by a reader subscribed to both
    (an admin's pull is confined by the rules too), and the notes of the projects the reader is a member of."""
    token = mint_token("reader", "default", stack.secret, claims={"projects": ["1", "2"]})
    reader = SyncClient(stack.url, "default", token, "reader")
    for project in ("1", "2"):
        reader.request("POST", PATH, body={"stream": "project_tasks", "params": {"project": project}})
    states: dict[str, lww.RowState] = {}
    for d in reader.pull_all(limit=1000)[0]:
        states[d.row_id] = lww.merge(states.get(d.row_id), d).state
    return {k: v for k, s in states.items() if (v := s.values()) is not None}


def _writer(stack: LocalStack) -> SyncClient:
    return SyncClient(stack.url, "default", mint_token("w", "default", stack.secret, role="admin"), "w")


def _codes(answer: dict[str, Any]) -> list[str | None]:
    return [r.get("code") for r in answer["receipts"]]


def test_a_subscriber_writes_its_rows_and_is_refused_the_rest_over_http(stack: LocalStack) -> None:
    clock = HLC()
    writer = _writer(stack)
    writer.push(
        [
            insert("t1", hlc=clock.now(), table="tasks", client="w", project_id="1", title="one"),
            insert("t2", hlc=clock.now(), table="tasks", client="w", project_id="2", title="two"),
        ]
    )
    ann = SyncClient(
        stack.url, "default", mint_token("ann", "default", stack.secret, claims={"projects": ["1", "2"]}), "ann"
    )
    # Before subscribing, ann may write nothing: the rules have no bucket
    before = ann.push([update("t1", hlc=clock.now(), table="tasks", client="ann", title="too soon")])
    assert before["accepted"] == 0 and _codes(before) == ["OUT_OF_SCOPE"] and before["receipts"][0]["row"] is None

    # Subscribed to project 1: an update and an insert of its rows pass; a delete (the stream does not allow it), a
    # row of project 2 and a move out of project 1 are refused, each in its receipt, in the same push
    held = ann.request("POST", PATH, body={"stream": "project_tasks", "params": {"project": "1"}})
    answer = ann.push(
        [
            update("t1", hlc=clock.now(), table="tasks", client="ann", title="ann's"),
            insert("t3", hlc=clock.now(), table="tasks", client="ann", project_id="1", title="three"),
            delete("t1", hlc=clock.now(), table="tasks", client="ann"),
            update("t2", hlc=clock.now(), table="tasks", client="ann", title="defaced"),
            update("t1", hlc=clock.now(), table="tasks", client="ann", project_id="2"),
        ]
    )
    assert answer["accepted"] == 2
    assert _codes(answer) == [None, None, "OPERATION_NOT_ALLOWED", "OUT_OF_SCOPE", "OUT_OF_SCOPE"]
    receipts = answer["receipts"]
    assert receipts[2]["row"]["c"]["title"][0] == "ann's"  # its row, to roll back to
    assert receipts[3]["row"] is None  # a row it may not read is not revealed
    rows = _rows(stack)
    assert {k: rows[k] for k in ("t1", "t2", "t3")} == {
        "t1": {"project_id": "1", "title": "ann's"},
        "t2": {"project_id": "2", "title": "two"},
        "t3": {"project_id": "1", "title": "three"},
    }

    # Unsubscribed: its rows are refused again
    ann.request("DELETE", f"{PATH}/{held['id']}")
    after = ann.push([update("t3", hlc=clock.now(), table="tasks", client="ann", title="gone")])
    assert after["accepted"] == 0 and _codes(after) == ["OUT_OF_SCOPE"] and after["receipts"][0]["row"] is None
    assert _rows(stack)["t3"] == {"project_id": "1", "title": "three"}


def test_a_member_writes_its_projects_notes_through_a_membership_bucket_over_http(stack: LocalStack) -> None:
    clock = HLC()
    _writer(stack).push(
        [
            insert("m1", hlc=clock.now(), table="memberships", client="w", user="mia", project="7"),
            insert("m2", hlc=clock.now(), table="memberships", client="w", user="reader", project="7"),
            insert("m3", hlc=clock.now(), table="memberships", client="w", user="reader", project="8"),
            insert("n1", hlc=clock.now(), table="notes", client="w", project_id="7", text="seven"),
            insert("n2", hlc=clock.now(), table="notes", client="w", project_id="8", text="eight"),
        ]
    )
    mia = SyncClient(stack.url, "default", mint_token("mia", "default", stack.secret), "mia")
    # When mia (a member of project 7) writes notes of projects 7 and 8, and moves one of hers to project 8
    answer = mia.push(
        [
            update("n1", hlc=clock.now(), table="notes", client="mia", text="mia's"),
            insert("n3", hlc=clock.now(), table="notes", client="mia", project_id="7", text="new"),
            update("n2", hlc=clock.now(), table="notes", client="mia", text="not mia's"),
            update("n1", hlc=clock.now(), table="notes", client="mia", project_id="8"),
        ]
    )
    # Then only her project's notes are written
    assert answer["accepted"] == 2 and _codes(answer) == [None, None, "OUT_OF_SCOPE", "OUT_OF_SCOPE"]
    assert answer["receipts"][2]["row"] is None and answer["receipts"][3]["row"] is not None
    rows = _rows(stack)
    assert {k: rows[k] for k in ("n1", "n2", "n3")} == {
        "n1": {"project_id": "7", "text": "mia's"},
        "n2": {"project_id": "8", "text": "eight"},
        "n3": {"project_id": "7", "text": "new"},
    }
    # and a client that is a member of nothing writes nothing
    ned = SyncClient(stack.url, "default", mint_token("ned", "default", stack.secret), "ned")
    refused = ned.push([update("n1", hlc=clock.now(), table="notes", client="ned", text="ned's")])
    assert refused["accepted"] == 0 and _codes(refused) == ["OUT_OF_SCOPE"]
