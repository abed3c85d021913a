"""Write rules: a client writes only the rows it may read before and after the write, within the policies of the
rules document; a forbidden delta is rejected on its own, never written, and the rest of its batch commits.

The pure rule (``lakesync.core.rules.check_write``) and the push service on the in-memory stores; the same probes run
over HTTP and the Lambda handlers in tests/security/test_write_rules_http.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from lakesync.core.delta import DeltaOp, RowDelta
from lakesync.core.errors import SyncRuleError
from lakesync.core.hlc import HLC, encode
from lakesync.core.log import dedup_key
from lakesync.core.merge import state_from_json
from lakesync.core.messages import SyncPush
from lakesync.core.rules import (
    ADMIN_ONLY_TABLE,
    COLUMN_NOT_WRITABLE,
    OPERATION_NOT_ALLOWED,
    OUT_OF_SCOPE,
    RESERVED_TABLE,
    Claims,
    check_sync_rules_limits,
    check_write,
    parse_sync_rules,
    row_matches,
)
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.memory import InMemoryActionStore, InMemoryBufferStore, InMemoryConfigStore, InMemorySinceSessions
from lakesync.gateway.pull import pull
from lakesync.gateway.push import PushResult, push
from tests import factories
from tests.factories import T0, delete, insert, update

GW = "default"
RED: Claims = {"team": "red", "sub": "red"}
BLUE: Claims = {"team": "blue", "sub": "blue"}

TEAM_RULES: dict[str, Any] = {
    "version": 1,
    "buckets": [
        {"name": "team", "tables": ["todos", "notes"], "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}]}
    ],
}


class Gateway:
    """A gateway on in-memory stores with team sync rules and a controllable wall clock."""

    def __init__(self, rules: dict[str, Any] | None = TEAM_RULES) -> None:
        self.wall = T0
        self.buffer = InMemoryBufferStore()
        self.config = InMemoryConfigStore()
        if rules is not None:
            self.config.put_sync_rules(GW, parse_sync_rules(rules))
        self.sessions = InMemorySinceSessions()
        self.deps = GatewayDeps(
            buffer=self.buffer,
            config=self.config,
            actions=InMemoryActionStore(),
            settings=GatewaySettings(),
            clock=HLC(lambda: self.wall),
            wall_ms=lambda: self.wall,
            sleep=lambda _s: None,
            since_sessions=self.sessions,
        )
        self.counter = 0

    def delta(self, client: str, op: str, row: str, table: str = "todos", **values: Any) -> RowDelta:
        self.counter += 1
        self.wall += 1
        return factories.delta(op, row, hlc=encode(self.wall, 0), table=table, client=client, columns=values)

    def push(self, client: str, claims: Claims, *deltas: RowDelta, trusted: bool = False) -> PushResult:
        return push(self.deps, GW, SyncPush(client, deltas), client_id=client, claims=claims, trusted=trusted)

    def rows(self, claims: Claims) -> dict[str, dict[str, Any]]:
        """What a client with ``claims`` ends up holding after pulling everything."""
        held: dict[str, dict[str, Any]] = {}
        page = pull(self.deps, GW, limit=10_000, claims=claims, cursor=None)
        for delta in page.deltas:
            key = f"{delta.table}:{delta.row_id}"
            if delta.op is DeltaOp.DELETE:
                held.pop(key, None)
            else:
                held.setdefault(key, {}).update(delta.values())
        return held


def _receipt(result: PushResult, i: int = 0) -> dict[str, Any]:
    return result.receipts[i].to_json()


# --- the pure rule ----------------------------------------------------------------------------------------------


def test_write_rules_round_trip_and_validate() -> None:
    doc = {
        "version": 3,
        "buckets": [
            {
                "name": "team",
                "tables": ["todos"],
                "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}],
                "write": {"ops": ["update", "insert"], "immutableColumns": ["owner"]},
            }
        ],
        "tables": {"audit": {"write": {"ops": []}}, "billing": {"adminOnly": True}},
    }
    rules = parse_sync_rules(doc)
    assert parse_sync_rules(rules.to_json()) == rules
    assert rules.to_json()["buckets"][0]["write"] == {"ops": ["insert", "update"], "immutableColumns": ["owner"]}
    check_sync_rules_limits(rules)
    # A document without write rules keeps the original's JSON shape exactly
    assert parse_sync_rules(TEAM_RULES).to_json() == TEAM_RULES


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"buckets": [{"name": "b", "tables": [], "filters": [], "write": {"ops": ["upsert"]}}]}, "write ops"),
        ({"buckets": [{"name": "b", "tables": [], "filters": [], "write": []}]}, "write must be an object"),
        ({"buckets": [{"name": "b", "tables": [], "filters": [], "write": {"readOnly": ["x"]}}]}, "unknown fields"),
        ({"buckets": [{"name": "b", "tables": [], "filters": [], "write": {"readOnlyColumns": [""]}}]}, "column"),
        ({"tables": {"_lakesync_provenance": {"adminOnly": True}}}, "engine's own"),
        ({"tables": {"audit": {"adminOnly": "yes"}}}, "adminOnly must be"),
        ({"tables": []}, "tables must be an object"),
        ({"tables": None}, "tables must be an object"),
        ({"buckets": [{"name": "b", "tables": [], "filters": [], "write": None}]}, "write must be an object"),
        ({"buckets": [{"name": "b", "tables": [], "filters": [], "write": {"ops": None}}]}, "write ops"),
        ({"tables": {"t": {"write": {"immutableColumns": None}}}}, "immutableColumns"),
        (
            {"buckets": [{"name": "b", "tables": ["audit"], "filters": []}], "tables": {"audit": {"adminOnly": True}}},
            "admin-only",
        ),
    ],
)
def test_malformed_write_rules_are_refused_on_save(change: dict[str, Any], message: str) -> None:
    doc: dict[str, Any] = {"version": 1, "buckets": [], **change}
    with pytest.raises(SyncRuleError, match=message):
        parse_sync_rules(doc)


def test_check_write_needs_the_row_readable_before_and_after() -> None:
    rules = parse_sync_rules(TEAM_RULES)
    red_row, blue_row = {"team": "red", "t": 1}, {"team": "blue", "t": 1}
    assert check_write(rules, RED, insert("r", client="c", team="red"), None, red_row) is None
    assert check_write(rules, RED, update("r", client="c", t=2), red_row, {**red_row, "t": 2}) is None
    assert check_write(rules, RED, delete("r", client="c"), red_row, None) is None
    for before, after, op in [
        (None, blue_row, "INSERT"),  # an insert into another team
        (blue_row, {**blue_row, "t": 2}, "UPDATE"),  # another team's row
        (blue_row, None, "DELETE"),
        (red_row, blue_row, "UPDATE"),  # a move out of scope
        (blue_row, red_row, "UPDATE"),  # a move into scope
    ]:
        refusal = check_write(rules, RED, factories.delta(op, "r", client="c", columns={"team": "x"}), before, after)
        assert refusal is not None and refusal.code == OUT_OF_SCOPE, (before, after)
    # The engine's tables are never a client's, rules or none
    for any_rules in (rules, None):
        refusal = check_write(any_rules, RED, insert("r", client="c", table="_lakesync_provenance"), None, {"a": 1})
        assert refusal is not None and refusal.code == RESERVED_TABLE
        assert check_write(any_rules, RED, insert("r", client="c", table="_LakeSync_x"), None, {"a": 1}) is not None
    # No rules: every other write is open
    assert check_write(None, RED, update("r", client="c", team="blue"), blue_row, blue_row) is None


def test_check_write_applies_bucket_and_table_policies() -> None:
    rules = parse_sync_rules(
        {
            "version": 1,
            "buckets": [
                {
                    "name": "own",
                    "tables": [],
                    "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
                    "write": {"immutableColumns": ["owner"], "readOnlyColumns": ["approved"]},
                },
                {"name": "shared", "tables": ["feed"], "filters": [], "write": {"ops": []}},
            ],
            "tables": {"comments": {"write": {"ops": ["insert"]}}, "billing": {"adminOnly": True}},
        }
    )
    me = {"sub": "me"}
    mine = {"owner": "me", "title": "a", "approved": False}
    assert (
        check_write(rules, me, insert("r", client="c", owner="me", title="a"), None, {"owner": "me", "title": "a"})
        is None
    )
    refusal = check_write(
        rules, me, insert("r", client="c", owner="me", approved=True), None, {"owner": "me", "approved": True}
    )
    assert refusal is not None and refusal.code == COLUMN_NOT_WRITABLE and "approved" in refusal.reason
    # Sending a protected column's stored value again changes nothing and is allowed
    assert check_write(rules, me, update("r", client="c", owner="me", approved=False, title="b"), mine, mine) is None
    refusal = check_write(rules, me, update("r", client="c", approved=True), mine, {**mine, "approved": True})
    assert refusal is not None and refusal.code == COLUMN_NOT_WRITABLE
    # Insert-only table: inserts pass, updates and deletes do not
    assert check_write(rules, me, insert("r", client="c", table="comments", owner="me"), None, {"owner": "me"}) is None
    for op, after in (("UPDATE", {"owner": "me", "x": 1}), ("DELETE", None)):
        refusal = check_write(
            rules, me, factories.delta(op, "r", client="c", table="comments", columns={"x": 1}), {"owner": "me"}, after
        )
        assert refusal is not None and refusal.code == OPERATION_NOT_ALLOWED
    # A read-only bucket lets the client see the rows but not write them
    assert row_matches(rules, me, "feed", {"x": 1})
    refusal = check_write(rules, me, update("r", client="c", table="feed", x=2), {"x": 1}, {"x": 2})
    assert refusal is not None and refusal.code == OPERATION_NOT_ALLOWED
    # Admin-only: neither read nor written by clients, even through a bucket without table list
    assert not row_matches(rules, me, "billing", {"owner": "me"})
    refusal = check_write(rules, me, insert("r", client="c", table="billing", owner="me"), None, {"owner": "me"})
    assert refusal is not None and refusal.code == ADMIN_ONLY_TABLE


# --- the push service -------------------------------------------------------------------------------------------


def test_red_cannot_deface_delete_or_plant_blue_rows_and_blue_sees_nothing_of_it() -> None:
    gw = Gateway()
    gw.push("blue", BLUE, gw.delta("blue", "INSERT", "b1", team="blue", title="blue task"))
    blue_before = gw.rows(BLUE)
    log_before = len(gw.buffer.read_log(gw.buffer.list_shards(GW)[0], 0, 1_000))

    update = gw.delta("red", "UPDATE", "b1", title="defaced by red")
    delete = gw.delta("red", "DELETE", "b1")
    plant = gw.delta("red", "INSERT", "b2", team="blue", title="planted")
    result = gw.push("red", RED, update, delete, plant)

    assert result.accepted == 0 and result.entries == ()
    for i in range(3):
        receipt = _receipt(result, i)
        assert receipt["rejected"] is True and receipt["code"] == OUT_OF_SCOPE
        assert receipt["row"] is None  # red may not read b1, and b2 does not exist: nothing revealed
        assert receipt["columns"] == [] and receipt["duplicate"] is False
    assert gw.rows(BLUE) == blue_before
    assert len(gw.buffer.read_log(gw.buffer.list_shards(GW)[0], 0, 1_000)) == log_before
    # Never recorded as seen: a re-send is judged again, and rejected again
    keys = [dedup_key("red", d.delta_id) for d in (update, delete, plant)]
    assert gw.buffer.seen_delta_ids(GW, keys, T0 // 1000) == set()
    again = gw.push("red", RED, update, delete, plant)
    assert [r.rejected is not None and not r.duplicate for r in again.receipts] == [True] * 3


def test_a_mixed_batch_commits_its_allowed_deltas_and_rejects_the_others() -> None:
    gw = Gateway()
    gw.push("blue", BLUE, gw.delta("blue", "INSERT", "b1", team="blue", title="blue"))
    ok1 = gw.delta("red", "INSERT", "r1", team="red", title="mine")
    bad = gw.delta("red", "UPDATE", "b1", title="defaced")
    ok2 = gw.delta("red", "UPDATE", "r1", title="mine, edited")
    result = gw.push("red", RED, ok1, bad, ok2, bad)
    assert result.accepted == 2
    assert [r.rejected is not None for r in result.receipts] == [False, True, False, True]
    assert result.receipts[3].duplicate is False  # a repeat of a rejected delta is rejected, not a duplicate
    assert [e.delta.delta_id for e in result.entries] == [ok1.delta_id, ok2.delta_id]
    assert gw.rows(RED) == {"todos:r1": {"team": "red", "title": "mine, edited"}}
    assert gw.rows(BLUE) == {"todos:b1": {"team": "blue", "title": "blue"}}


def test_moving_a_row_out_of_scope_is_rejected_with_the_row_to_roll_back_to() -> None:
    gw = Gateway()
    gw.push("red", RED, gw.delta("red", "INSERT", "r1", team="red", title="mine"))
    result = gw.push("red", RED, gw.delta("red", "UPDATE", "r1", team="blue"))
    receipt = _receipt(result)
    assert receipt["rejected"] is True and receipt["code"] == OUT_OF_SCOPE and "after" in receipt["reason"]
    state = state_from_json("todos", "r1", receipt["row"])
    assert state.values() == {"team": "red", "title": "mine"}
    assert gw.rows(BLUE) == {}
    assert gw.rows(RED) == {"todos:r1": {"team": "red", "title": "mine"}}


def test_trusted_writers_and_open_gateways_are_not_confined() -> None:
    gw = Gateway()
    gw.push("blue", BLUE, gw.delta("blue", "INSERT", "b1", team="blue", title="blue"))
    admin = gw.push("ops", {}, gw.delta("ops", "UPDATE", "b1", title="fixed by ops"), trusted=True)
    assert admin.accepted == 1 and admin.receipts[0].rejected is None
    provenance = gw.delta("ingest:crm", "INSERT", "p1", table="_lakesync_provenance", source="crm")
    assert gw.push("ingest:crm", {}, provenance, trusted=True).receipts[0].rejected is None

    open_gw = Gateway(rules=None)
    result = open_gw.push("red", RED, open_gw.delta("red", "INSERT", "x", team="blue"))
    assert result.accepted == 1
    forged = open_gw.push("red", RED, open_gw.delta("red", "INSERT", "p2", table="_lakesync_provenance", by="x"))
    assert forged.accepted == 0 and _receipt(forged)["code"] == RESERVED_TABLE
    assert all(
        e.delta.table != "_lakesync_provenance"
        for e in open_gw.deps.buffer.read_log(open_gw.buffer.list_shards(GW)[0], 0, 100)
    )


def test_a_since_client_gets_the_rejected_rows_true_state_again() -> None:
    """The original client learns nothing from receipts: its since session re-sends the row (or its removal)."""
    gw = Gateway()
    gw.push("blue", BLUE, gw.delta("blue", "INSERT", "b1", team="blue", title="blue"))
    gw.push("red", RED, gw.delta("red", "INSERT", "r1", team="red", title="mine"))
    first = pull(gw.deps, GW, limit=100, claims=RED, since=0, client_id="red")
    assert {d.row_id for d in first.deltas} == {"r1"}
    gw.push("red", RED, gw.delta("red", "UPDATE", "r1", team="blue"), gw.delta("red", "INSERT", "b9", team="blue"))
    page = pull(gw.deps, GW, limit=100, claims=RED, since=first.server_hlc, client_id="red")
    by_row: dict[str, list[RowDelta]] = {}
    for delta in page.deltas:
        by_row.setdefault(delta.row_id, []).append(delta)
    # r1 comes back as it is stored (red's team), b9 as a removal: the client drops what it planted
    assert by_row["r1"][-1].values() == {"team": "red", "title": "mine"}
    assert [d.op for d in by_row["b9"]] == [DeltaOp.DELETE]
