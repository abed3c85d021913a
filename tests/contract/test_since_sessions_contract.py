"""One behaviour suite for the ``since`` session stores: in memory and on DynamoDB (moto server)."""

from __future__ import annotations

from typing import Any

import pytest

from lakesync.aws.since_sessions import DynamoDBSinceSessions, session_key
from lakesync.core.log import CommitConflict
from lakesync.core.since import Handout, ResyncMark, SinceSession
from lakesync.gateway.memory import InMemorySinceSessions
from lakesync.ports import SinceSessionStore


@pytest.fixture(params=["memory", "dynamodb"])
def store(request: pytest.FixtureRequest) -> SinceSessionStore:
    if request.param == "memory":
        return InMemorySinceSessions()
    client, names = request.getfixturevalue("dynamodb_client"), request.getfixturevalue("dynamodb_tables")
    return DynamoDBSinceSessions(client, names)


def session(n: int) -> SinceSession:
    return SinceSession(
        handouts=(Handout(10 * n, {"gw#todos#0": n}, {"gw#todos#0": n + 2}),),
        confirmed={"gw#todos#0": n - 1},
        redeliver=(("todos", f"r{n}"),),
        pushed=(("todos", "é😀"),),
    )


def test_a_missing_session_is_none_and_a_stored_one_round_trips(store: SinceSessionStore) -> None:
    assert store.get("gw", "c1") is None
    store.put("gw", "c1", session(1), expires_at=2_000_000_000)
    got = store.get("gw", "c1")
    assert got is not None and got.version == 1
    assert got.to_json() == session(1).to_json()
    assert got.handout(10) == Handout(10, {"gw#todos#0": 1}, {"gw#todos#0": 3}) and got.handout(11) is None
    # And sessions are per gateway and client
    assert store.get("gw", "c2") is None and store.get("other", "c1") is None


def test_a_session_in_a_resync_round_trips(store: SinceSessionStore) -> None:
    # A client being resynced from a checkpoint: its handouts and confirmed place carry resync marks
    mark = ResyncMark("1700000000000-00c0ffee", 3, 17)
    resyncing = SinceSession(
        handouts=(Handout(10, {"gw#todos#0": 5}), Handout(20, {"gw#todos#0": 9}, {"gw#todos#0": 12}, mark)),
        confirmed={"gw#todos#0": 9},
        resync=ResyncMark("1700000000000-00c0ffee", 2, 0),
        resynced=True,
    )
    store.put("gw", "c1", resyncing, expires_at=2_000_000_000)
    got = store.get("gw", "c1")
    assert got is not None and got.to_json() == resyncing.to_json()
    assert got.handout(20) == Handout(20, {"gw#todos#0": 9}, {"gw#todos#0": 12}, mark)
    assert got.handout(10) == Handout(10, {"gw#todos#0": 5}) and got.resync == resyncing.resync and got.resynced
    # and one handed out again under the same serverHlc replaces the old one
    assert got.handed(Handout(10, {"gw#todos#0": 9}, None, mark)).handout(10) == Handout(
        10, {"gw#todos#0": 9}, None, mark
    )


def test_a_put_from_a_stale_read_conflicts_and_a_fresh_one_succeeds(store: SinceSessionStore) -> None:
    store.put("gw", "c1", session(1), expires_at=2_000_000_000)
    first = store.get("gw", "c1")
    assert first is not None
    store.put("gw", "c1", session(2).__class__(**{**_fields(session(2)), "version": first.version}), 2_000_000_000)
    with pytest.raises(CommitConflict):
        store.put("gw", "c1", session(3).__class__(**{**_fields(session(3)), "version": first.version}), 2_000_000_000)
    with pytest.raises(CommitConflict):
        store.put("gw", "c1", session(3), 2_000_000_000)  # version 0: "none stored" no longer holds
    latest = store.get("gw", "c1")
    assert latest is not None and latest.version == 2 and latest.confirmed == {"gw#todos#0": 1}


def test_dynamodb_sessions_live_under_a_key_no_delta_id_record_can_take(
    dynamodb_client: Any, dynamodb_tables: Any
) -> None:
    store = DynamoDBSinceSessions(dynamodb_client, dynamodb_tables)
    store.put("gw", "c1", session(1), expires_at=2_000_000_000)
    item = dynamodb_client.get_item(TableName=dynamodb_tables.dedup, Key={"pk": {"S": session_key("gw", "c1")}})["Item"]
    assert item["pk"]["S"].startswith("~") and item["exp"]["N"] == "2000000000"


def _fields(s: SinceSession) -> dict[str, Any]:
    return {name: getattr(s, name) for name in SinceSession.__dataclass_fields__}
