"""The explanation of one row for one client (lakesync.core.explain): the scripted cases of issue 44 -- a row filtered
by a claim, a column lost to a later write, a delete, a row not yet flushed, a rule change -- and, on random
histories, that its columns are core.merge's fold and name every losing write."""

from __future__ import annotations

import random

from lakesync.core import hlc
from lakesync.core.delta import make_delta
from lakesync.core.explain import explain
from lakesync.core.explain_text import render
from lakesync.core.explanation import ClientView, Position, RowEvidence
from lakesync.core.merge import fold
from lakesync.core.row_history import FlushSnapshot, HistoryDelta, combine, flushed_at
from lakesync.core.rules import parse_sync_rules
from lakesync.core.scope import resolve_scope

GW = "default"
SHARD = "default#todos#0"
T0 = 1_765_000_000_000


def _rules(version: int, team_filter: bool = True) -> object:
    filters = [{"column": "team", "op": "eq", "value": "jwt:team"}] if team_filter else []
    if version > 1:
        filters.append({"column": "done", "op": "eq", "value": "false"})
    return {"version": version, "buckets": [{"name": "team", "tables": ["todos"], "filters": filters}]}


RULES_V1 = parse_sync_rules(_rules(1))
RULES_V2 = parse_sync_rules(_rules(2))


def _entry(seq: int, op: str, client: str, columns: dict[str, object] | None = None, *, flushed: bool = True):
    at = hlc.encode(T0 + seq * 1000, 0)
    delta = make_delta(op, table="todos", row_id="t1", client_id=client, hlc=at, columns=columns or {})
    return HistoryDelta(delta, SHARD, seq, at + 1, T0 + seq * 1000 + 500 if flushed else None)


def _evidence(*entries: HistoryDelta, **kwargs: object) -> RowEvidence:
    history = combine([], entries)
    index = fold(e.delta for e in history)
    return RowEvidence("todos", "t1", history, index=index, **kwargs)  # type: ignore[arg-type]


def _view(team: str = "red", rules=RULES_V1, **kwargs: object) -> ClientView:
    return ClientView("alice", {"sub": "alice", "team": team}, rules, **kwargs)  # type: ignore[arg-type]


def _now(evidence: RowEvidence) -> int:
    return evidence.history[-1].committed_ms + 60_000


def test_a_row_filtered_by_a_claim_names_the_claim_and_the_row_value() -> None:
    # Given a row of team blue, and rules that give a client the rows of its token's team
    evidence = _evidence(_entry(1, "INSERT", "bob", {"title": "plan", "team": "blue", "done": False}))
    # When a client of team red asks, then a client of team blue
    red = explain(GW, _view("red"), evidence, now_ms=_now(evidence))
    blue = explain(GW, _view("blue"), evidence, now_ms=_now(evidence))
    # Then red is not covered: the bucket's filter compared the row's "blue" with its claim's ["red"]
    assert not red.covered and blue.covered
    (grant,) = red.scopes[0].grants
    (clause,) = grant.clauses
    assert (grant.origin, grant.covers_table, grant.matches) == ('Bucket "team"', True, False)
    assert (clause.source, clause.values, clause.row_value, clause.holds) == ("jwt:team", ("red",), "blue", False)
    assert red.scopes[0].rules_version == 1
    # And blue is covered through that bucket, which the reason and the text name
    assert blue.scopes[0].grants[0].clauses[0].holds
    assert blue.scopes[0].reason == 'in scope through Bucket "team"'
    assert "NOT COVERED" in render(red) and 'Bucket "team": does not match' in render(red)
    # And the verdict is the scope's own
    scope = resolve_scope(RULES_V1, {"sub": "alice", "team": "red"})
    assert red.covered == scope.covers("todos", red.values)


def test_a_column_lost_to_a_later_write_names_the_winner_and_the_loser() -> None:
    # Given bob's insert, then carol's later update of the title
    first = _entry(1, "INSERT", "bob", {"title": "plan", "team": "red"})
    second = _entry(2, "UPDATE", "carol", {"title": "plan v2"})
    evidence = _evidence(first, second)
    # When explained
    answer = explain(GW, _view(), evidence, now_ms=_now(evidence))
    columns = {c.column: c for c in answer.columns}
    # Then the title holds carol's value, written by her delta, and bob's write lost to her version
    title = columns["title"]
    assert title.value == "plan v2" and title.winner is not None
    assert (title.winner.client_id, title.winner.delta_id, title.winner.seq) == ("carol", second.delta.delta_id, 2)
    (lost,) = title.lost
    assert (lost.write.client_id, lost.value, lost.to_client_id, lost.to_hlc) == (
        "bob",
        "plan",
        "carol",
        second.delta.hlc,
    )
    assert not lost.by_delete
    # And the team column is bob's, which lost nothing
    assert columns["team"].winner is not None and columns["team"].winner.client_id == "bob"
    assert columns["team"].lost == ()
    assert answer.to_json()["columns"][1]["lost"][0]["lostTo"] == {
        "hlc": str(second.delta.hlc),
        "clientId": "carol",
        "delete": False,
    }


def test_a_delete_is_the_tombstone_and_what_it_dropped_lost_to_it() -> None:
    # Given an insert, then a delete by another client
    insert = _entry(1, "INSERT", "bob", {"title": "plan", "team": "red"})
    delete = _entry(2, "DELETE", "carol")
    evidence = _evidence(insert, delete)
    # When explained to a client whose scope held the row
    answer = explain(GW, _view(position=Position("cursor", {SHARD: 1})), evidence, now_ms=_now(evidence))
    # Then the row does not exist, the delete is the tombstone and every column lost to it
    assert not answer.exists and answer.values is None
    assert answer.tombstone is not None and answer.tombstone.client_id == "carol"
    assert answer.deletes == (answer.tombstone,)
    assert all(c.winner is None and c.lost[0].by_delete for c in answer.columns)
    # And the scope is judged on the values the row had before the delete, which were in scope
    assert answer.scopes[0].covered and answer.scopes[0].judged_on == "its values before its delete"
    # And the delete is the latest change the client's scope lets through, not yet delivered to its cursor at 1
    assert answer.delivery.last_visible == answer.tombstone
    assert answer.delivery.delivered is False and answer.delivery.position == 1
    assert "(deleted)" in render(answer)


def test_a_row_not_yet_flushed_is_named_with_its_age_and_its_delivery() -> None:
    # Given a flushed insert and an update committed after the last flush
    insert = _entry(1, "INSERT", "bob", {"title": "plan", "team": "red"})
    update = _entry(2, "UPDATE", "bob", {"title": "plan v2"}, flushed=False)
    evidence = _evidence(insert, update, flushed_seq=1, lake_read=True, lake_state=fold([insert.delta]))
    # When explained to a client whose cursor stands past the update
    answer = explain(GW, _view(position=Position("cursor", {SHARD: 2})), evidence, now_ms=_now(evidence))
    # Then one delta is not in the lake, committed at the update's commit time
    assert answer.storage.unflushed == 1 and answer.storage.unflushed_since_ms == update.committed_ms
    assert answer.history[-1].flushed_ms is None and answer.history[0].flushed_ms is not None
    # And the lake's state is current to what was flushed but not to the fold; the row index agrees
    assert answer.storage.lake_state_current_to_flush is True and answer.storage.lake_state_agrees is False
    assert answer.storage.index_agrees is True
    # And the update was delivered (the cursor is at its entry), and not yet published for materialisation
    assert answer.delivery.delivered is True and answer.storage.published is False
    assert "1 delta(s) not yet flushed" in render(answer)


def test_a_rule_change_is_judged_under_both_versions_and_the_served_scope() -> None:
    # Given a done task of team red; the client was served under rules v1 (team only), v2 adds done = false
    evidence = _evidence(_entry(1, "INSERT", "bob", {"title": "plan", "team": "red", "done": True}))
    claims = {"sub": "alice", "team": "red"}
    served = resolve_scope(RULES_V1, claims)
    view = _view(rules=RULES_V2, other_rules=RULES_V1, served={served.fingerprint: served})
    # When explained
    answer = explain(GW, view, evidence, now_ms=_now(evidence))
    now, before, held = answer.scopes
    # Then v2 does not cover it (its done filter fails), v1 and the scope served under v1 do
    assert (now.label, now.rules_version, now.covered) == ("now", 2, False)
    assert [c.holds for c in now.grants[0].clauses] == [True, False]
    assert (before.label, before.rules_version, before.covered) == ("rules v1", 1, True)
    assert held.covered and held.fingerprint == served.fingerprint != now.fingerprint


def test_at_a_time_the_row_is_judged_on_its_values_then() -> None:
    # Given a row that moved from team red to team blue
    first = _entry(1, "INSERT", "bob", {"title": "plan", "team": "red"})
    moved = _entry(5, "UPDATE", "bob", {"team": "blue"})
    evidence = _evidence(first, moved)
    # When a client of team red asks about a time between the two commits
    answer = explain(GW, _view(), evidence, now_ms=_now(evidence), at_ms=first.committed_ms + 1000)
    now, at = answer.scopes
    # Then it is not covered now but was then, on the values it had then
    assert not now.covered and at.covered
    assert answer.values_at == {"title": "plan", "team": "red"}
    assert answer.to_json()["at"].startswith("20")


def test_the_row_index_is_checked_against_the_fold_only_when_the_history_is_whole() -> None:
    entry = _entry(1, "INSERT", "bob", {"title": "plan", "team": "red"})
    other = fold([_entry(2, "UPDATE", "bob", {"title": "other"}).delta])
    whole = RowEvidence("todos", "t1", (entry,), index=other)
    part = RowEvidence("todos", "t1", (entry,), complete=False, index=other)
    assert explain(GW, _view(), whole, now_ms=T0).storage.index_agrees is False
    answer = explain(GW, _view(), part, now_ms=T0)
    assert answer.storage.index_agrees is None and any("incomplete" in n for n in answer.notes)


def test_without_a_position_delivery_is_unknown_and_an_expired_one_is_named() -> None:
    entry = _entry(3, "INSERT", "bob", {"title": "plan", "team": "red"})
    assert explain(GW, _view(), _evidence(entry), now_ms=T0).delivery.delivered is None
    expired = explain(GW, _view(position=Position("cursor", {SHARD: 1})), _evidence(entry, released_seq=2), now_ms=T0)
    assert expired.delivery.expired and expired.delivery.delivered is False


def test_flush_time_is_the_first_snapshot_whose_watermark_covers_the_entry() -> None:
    snapshots = [FlushSnapshot(30, {SHARD: 9}), FlushSnapshot(10, {SHARD: 2}), FlushSnapshot(20, {"x#t#0": 9})]
    assert flushed_at(SHARD, 2, snapshots) == 10
    assert flushed_at(SHARD, 3, snapshots) == 30
    assert flushed_at(SHARD, 10, snapshots) is None


def test_on_random_histories_the_columns_are_the_fold_and_every_other_write_lost() -> None:
    rng = random.Random(44)
    for _ in range(300):
        entries = []
        for seq in range(1, rng.randint(1, 8) + 1):
            op = rng.choice(["INSERT", "UPDATE", "UPDATE", "DELETE"])
            columns = {c: rng.randint(0, 3) for c in rng.sample(["a", "b", "c"], rng.randint(0, 3))}
            at = hlc.encode(T0 + rng.randint(0, 5), 0)
            delta = make_delta(
                op, table="todos", row_id="t1", client_id=rng.choice(["x", "y"]), hlc=at, columns=columns
            )
            entries.append(HistoryDelta(delta, SHARD, seq, hlc.encode(T0 + seq, 0)))
        answer = explain(GW, _view(rules=None), RowEvidence("todos", "t1", tuple(entries)), now_ms=T0)
        state = fold(e.delta for e in entries)
        assert state is not None
        assert {c.column: c.value for c in answer.columns if c.winner is not None} == (state.values() or {})
        for column in answer.columns:
            writes = [(e.delta.hlc, e.delta.client_id) for e in entries if column.column in e.delta.values()]
            named = [(w.write.hlc, w.write.client_id) for w in column.lost]
            if column.winner is not None:
                named.append((column.winner.hlc, column.winner.client_id))
            assert sorted(set(writes)) == sorted(set(named))
