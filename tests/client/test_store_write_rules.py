"""The SDK under write rules, over real HTTP against the embedded default: a write the gateway rejects is reported
(``SyncReport.rejected``, ``on_rejected``, ``_lakesync_rejected``) and rolled back to the gateway's state, the rest
of the batch goes through, and every store converges to exactly what its team may see.

This module sets sync rules on its own stack (the ``stack`` fixture is per module).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.client import LocalStore
from lakesync.client.http import SyncClient
from lakesync.client.model import Rejected
from lakesync.core.merge import RowState, merge
from lakesync.local.runner import LocalStack
from tests.client.conftest import admin
from tests.factories import schema_doc

Open = Callable[..., LocalStore]
TABLE = "tasks"


SCHEMA = schema_doc(TABLE, title="string", team="string")


@pytest.fixture(scope="module", autouse=True)
def team_rules(stack: LocalStack) -> None:
    ops = admin(stack)
    ops.admin("POST", "schema", SCHEMA)
    ops.admin(
        "POST",
        "sync-rules",
        {
            "version": 1,
            "buckets": [
                {"name": "team", "tables": [TABLE], "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}]}
            ],
        },
    )


def _store(stack: LocalStack, open_store: Open, name: str, team: str, **options: Any) -> LocalStore:
    token = mint_token(name, "default", stack.secret, claims={"team": team})
    return open_store(name, token=token, schemas=[SCHEMA], **options)


def _team_rows(stack: LocalStack, team: str) -> dict[str, dict[str, Any]]:
    """What a fresh cursor pull with a ``team`` claim folds to: the gateway's rows that team may see."""
    probe = SyncClient(
        stack.url, "default", mint_token("probe", "default", stack.secret, claims={"team": team}), "probe"
    )
    deltas, _ = probe.pull_all()
    states: dict[str, RowState] = {}
    for delta in deltas:
        if delta.table == TABLE:
            states[delta.row_id] = merge(states.get(delta.row_id), delta).state
    rows = {row_id: values for row_id, state in states.items() if (values := state.values()) is not None}
    assert all(v.get("team") == team for v in rows.values())
    return rows


@pytest.mark.parametrize("case", ["forbidden update", "insert into another team", "move out of scope", "mixed batch"])
def test_rejected_writes_are_reported_rolled_back_and_every_store_converges(
    stack: LocalStack, open_store: Open, case: str
) -> None:
    seen: list[Rejected] = []
    red = _store(stack, open_store, f"red-{case}", "red", on_rejected=seen.append)
    blue = _store(stack, open_store, f"blue-{case}", "blue")
    mine, theirs = f"r-{case}", f"b-{case}"
    red.insert(TABLE, mine, {"title": "mine", "team": "red"})
    blue.insert(TABLE, theirs, {"title": "theirs", "team": "blue"})
    red.sync()
    blue.sync()
    blue_before = _team_rows(stack, "blue")

    if case == "forbidden update":
        red.insert(TABLE, theirs, {"title": "defaced by red", "team": "red"})  # it guessed blue's row id
        expected = [theirs]
    elif case == "insert into another team":
        red.insert(TABLE, f"planted-{case}", {"title": "planted", "team": "blue"})
        expected = [f"planted-{case}"]
    elif case == "move out of scope":
        red.update(TABLE, mine, {"team": "blue"})
        expected = [mine]
    else:
        red.insert(TABLE, f"fine-{case}", {"title": "fine", "team": "red"})
        red.update(TABLE, mine, {"team": "blue"})
        red.insert(TABLE, f"planted-{case}", {"title": "planted", "team": "blue"})
        red.update(TABLE, mine, {"title": "mine, edited"})  # accepted after the rejected move: kept
        expected = [mine, f"planted-{case}"]

    report = red.sync()
    blue.sync()

    assert sorted(r.row_id for r in report.rejected) == sorted(expected)
    assert all(r.status == 403 and r.code == "OUT_OF_SCOPE" for r in report.rejected)
    assert seen == report.rejected
    assert red.pending() == 0  # nothing wedges the outbox
    assert len(red.query("SELECT delta_id FROM _lakesync_rejected WHERE status = 403")) == len(expected)
    # Blue's rows are untouched, and each store holds exactly its team's rows as the gateway has them
    assert _team_rows(stack, "blue") == blue_before
    assert {k: v for k, v in red.rows(TABLE).items() if k.endswith(case)} == {
        k: v for k, v in _team_rows(stack, "red").items() if k.endswith(case)
    }
    assert {k: v for k, v in blue.rows(TABLE).items() if k.endswith(case)} == {
        k: v for k, v in blue_before.items() if k.endswith(case)
    }
    assert red.rows(TABLE)[mine]["team"] == "red"
    if case == "mixed batch":
        assert red.rows(TABLE)[mine]["title"] == "mine, edited"
        assert red.rows(TABLE)[f"fine-{case}"] == {"title": "fine", "team": "red"}


def test_a_rejected_row_keeps_the_local_writes_still_waiting_in_the_outbox(stack: LocalStack, open_store: Open) -> None:
    # Given a red row, and two pending pushes: a move out of scope, then (a later push) a title edit
    red = _store(stack, open_store, "red-pending", "red", push_batch=1)
    red.insert(TABLE, "rp", {"title": "a", "team": "red"})
    red.sync()
    red.update(TABLE, "rp", {"team": "blue"})
    red.update(TABLE, "rp", {"title": "b"})
    # When it syncs (one delta a push), Then the move is rolled back and the edit survives
    report = red.sync()
    assert [r.row_id for r in report.rejected] == ["rp"]
    assert red.rows(TABLE)["rp"] == {"title": "b", "team": "red"}
    assert _team_rows(stack, "red")["rp"] == {"title": "b", "team": "red"}
