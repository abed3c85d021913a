"""A client's scope (issue 43): buckets and subscriptions resolved against claims, parameters and membership tables
into plain conditions; what it covers, its fingerprint, the difference between two scopes, the broadcaster's index
keys, and writes judged through it with the buckets' own code."""

from __future__ import annotations

from typing import Any

from lakesync.core.filters import Clause, Condition, FilterOp, InMemoryMemberships
from lakesync.core.rules import (
    OPERATION_NOT_ALLOWED,
    OUT_OF_SCOPE,
    bucket_matches_row,
    change_visible,
    check_write,
    parse_sync_rules,
    row_matches,
    rules_apply,
)
from lakesync.core.scope import (
    EVERYTHING,
    IndexKey,
    ScopeIndex,
    condition_keys,
    difference,
    resolve_scope,
    row_keys,
)
from lakesync.core.streams import EXPIRED, NOT_ALLOWED, UNKNOWN_STREAM, Subscription
from tests.factories import delete, insert, update

MEMBER_OF = {
    "table": "memberships",
    "column": "project",
    "where": [{"column": "user", "op": "eq", "value": "jwt:sub"}],
}
DOC: dict[str, Any] = {
    "version": 3,
    "buckets": [
        {"name": "own", "tables": ["todos"], "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}]},
        {
            "name": "my_projects",
            "tables": ["tasks"],
            "filters": [{"column": "project_id", "op": "in", "membership": MEMBER_OF}],
        },
    ],
    "streams": [
        {
            "name": "project_tasks",
            "table": "tasks",
            "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
            "params": {"project": {"subscription": {"allowed": "jwt:projects"}}},
            "write": {"ops": ["update"]},
        },
        {
            "name": "high",
            "table": "notes",
            "filters": [{"column": "prio", "op": "gte", "value": "param:min"}],
            "params": {"min": {"subscription": {"allowed": ["1", "2", "3"]}}},
        },
    ],
    "tables": {"billing": {"adminOnly": True}},
}
RULES = parse_sync_rules(DOC)
U1 = {"sub": "u1", "projects": ["7", "8"]}


def _members(*pairs: tuple[str, Any]) -> InMemoryMemberships:
    return InMemoryMemberships({"memberships": [{"user": u, "project": p} for u, p in pairs]})


def _sub(stream: str = "project_tasks", expires_at: int | None = None, **params: str) -> Subscription:
    return Subscription.of(stream, params or {"project": "7"}, expires_at)


# --- what a scope covers ----------------------------------------------------------------------------------------


def test_a_bucket_with_a_membership_filter_covers_the_rows_of_the_users_projects():
    # Given u1 is a member of project 42 (and a null membership that must give nothing), u2 of project 7
    members = _members(("u1", 42), ("u2", 7), ("u1", None))
    scope = resolve_scope(RULES, U1, memberships=members)
    # Then u1's tasks are those of project 42, the same answer as the bucket evaluated on each row
    assert scope.covers("tasks", {"project_id": 42})
    assert scope.covers("tasks", {"project_id": "42"})
    assert not scope.covers("tasks", {"project_id": 7})
    assert not scope.covers("tasks", {"project_id": None})
    for row in ({"project_id": 42}, {"project_id": 7}, {"project_id": None}, {}):
        assert scope.covers("tasks", row) == row_matches(RULES, U1, "tasks", row, members)


def test_without_memberships_a_membership_filter_never_holds():
    assert not row_matches(RULES, U1, "tasks", {"project_id": 42})
    assert not bucket_matches_row(RULES.buckets[1], "tasks", {"project_id": 42}, U1)
    assert not resolve_scope(RULES, U1).covers("tasks", {"project_id": 42})


def test_a_subscription_adds_its_rows_to_the_buckets():
    scope = resolve_scope(RULES, U1, [_sub()], _members(("u1", 42)))
    assert scope.covers("tasks", {"project_id": 7})
    assert scope.covers("tasks", {"project_id": 42})
    assert not scope.covers("tasks", {"project_id": 8})
    assert scope.covers("todos", {"owner": "u1"})
    assert scope.subscriptions == (_sub(),)
    assert scope.change_visible("tasks", {"project_id": 8}, {"project_id": 7})
    assert not scope.change_visible("tasks", {"project_id": 8}, None)


def test_a_comparison_parameter_resolves_to_the_subscribed_value():
    scope = resolve_scope(RULES, U1, [_sub("high", min="2")])
    assert scope.covers("notes", {"prio": 3}) and scope.covers("notes", {"prio": "2"})
    assert not scope.covers("notes", {"prio": 1})


def test_admin_only_tables_are_never_covered():
    rules = parse_sync_rules({**DOC, "buckets": [{"name": "all", "tables": [], "filters": []}]})
    scope = resolve_scope(rules, U1)
    assert scope.covers("todos", None)
    assert not scope.covers("billing", {"x": 1})
    assert scope.hidden == frozenset({"billing"})


def test_without_rules_or_confinement_everything_is_in_scope():
    for rules in (None, parse_sync_rules({"version": 1, "buckets": []})):
        scope = resolve_scope(rules, {})
        assert scope.conditions == frozenset({EVERYTHING})
        assert scope.covers("anything", None)
    only_policies = parse_sync_rules({"version": 1, "buckets": [], "tables": {"billing": {"adminOnly": True}}})
    scope = resolve_scope(only_policies, {})
    assert scope.covers("todos", {"a": 1}) and not scope.covers("billing", {"a": 1})


def test_streams_without_buckets_confine_clients_to_their_subscriptions():
    # Given rules with a stream and no bucket (which, alone, would mean no filtering)
    rules = parse_sync_rules({**DOC, "buckets": []})
    assert rules_apply(rules)
    # Then a client sees nothing through the buckets and only its subscriptions through its scope
    assert not row_matches(rules, U1, "tasks", {"project_id": 7})
    assert not change_visible(rules, U1, "tasks", None, {"project_id": 7})
    assert not resolve_scope(rules, U1).covers("tasks", {"project_id": 7})
    assert resolve_scope(rules, U1, [_sub()]).covers("tasks", {"project_id": 7})


# --- subscriptions judged again ---------------------------------------------------------------------------------


def test_subscriptions_no_longer_allowed_run_out_or_unknown_are_dropped_and_listed():
    # Given u1 subscribed to project 7 (allowed), project 9 (not in its claims), an expired one and a gone stream
    subs = [_sub(), _sub(project="9"), _sub("project_tasks", expires_at=100, project="8"), _sub("gone", x="1")]
    scope = resolve_scope(RULES, U1, subs, now_ms=100)
    # Then only project 7 counts, and the others are listed with why
    assert scope.subscriptions == (_sub(),)
    assert {(s.param_map.get("project", s.stream), r.code) for s, r in scope.refused} == {
        ("9", NOT_ALLOWED),
        ("8", EXPIRED),
        ("gone", UNKNOWN_STREAM),
    }
    assert not scope.covers("tasks", {"project_id": 8})
    assert resolve_scope(RULES, U1, subs, now_ms=99).covers("tasks", {"project_id": 8})


def test_of_equal_subscriptions_the_longest_lasting_counts():
    subs = [_sub(expires_at=10), _sub(expires_at=50), _sub(expires_at=20)]
    scope = resolve_scope(RULES, U1, subs, now_ms=30)
    assert [s.expires_at for s in scope.subscriptions] == [50]
    assert resolve_scope(RULES, U1, [_sub(expires_at=10), _sub()], now_ms=30).subscriptions[0].expires_at is None


def test_a_lost_membership_takes_a_membership_parameter_subscription_out_of_scope():
    rules = parse_sync_rules(
        {
            "version": 1,
            "buckets": [],
            "streams": [
                {
                    "name": "p",
                    "table": "tasks",
                    "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
                    "params": {"project": {"subscription": {"membership": MEMBER_OF}}},
                }
            ],
        }
    )
    sub = Subscription.of("p", {"project": "42"})
    before = resolve_scope(rules, U1, [sub], _members(("u1", 42)))
    after = resolve_scope(rules, U1, [sub], _members())
    assert before.covers("tasks", {"project_id": 42}) and not after.covers("tasks", {"project_id": 42})
    assert after.refused[0][1].code == NOT_ALLOWED
    diff = difference(before, after)
    assert diff.leaving("tasks", [{"project_id": 42}, {"project_id": 1}]) == [{"project_id": 42}]


# --- fingerprints and differences -------------------------------------------------------------------------------


def test_the_fingerprint_follows_coverage_not_spelling():
    base = resolve_scope(RULES, U1, [_sub()])
    # The same coverage spelled otherwise: another version, write policy, bucket order, claim order, eq as in
    respelled = parse_sync_rules(
        {
            **DOC,
            "version": 9,
            "buckets": [
                DOC["buckets"][1],
                {**DOC["buckets"][0], "filters": [{"column": "owner", "op": "in", "value": "jwt:sub"}]},
            ],
            "streams": [{**DOC["streams"][0], "write": {"ops": []}}, DOC["streams"][1]],
        }
    )
    claims = {"sub": "u1", "projects": ["8", "7"]}
    assert resolve_scope(respelled, claims, [_sub(), _sub()]).fingerprint == base.fingerprint
    assert len(base.fingerprint) == 32
    # A different coverage has a different fingerprint
    assert resolve_scope(RULES, U1).fingerprint != base.fingerprint
    assert resolve_scope(RULES, U1, [_sub(project="8")]).fingerprint != base.fingerprint
    assert resolve_scope(RULES, {**U1, "sub": "u2"}, [_sub()]).fingerprint != base.fingerprint


def test_subscribing_enters_and_unsubscribing_leaves_the_streams_rows():
    members = _members(("u1", 42))
    old = resolve_scope(RULES, U1, memberships=members)
    new = resolve_scope(RULES, U1, [_sub()], members)
    rows = [{"project_id": 7}, {"project_id": 42}, {"project_id": 8}]
    entering = difference(old, new)
    assert entering.entered == (Condition(("tasks",), (Clause("project_id", FilterOp.IN, ("7",)),)),)
    assert entering.left == ()
    assert entering.entering("tasks", rows) == [{"project_id": 7}]
    assert entering.entering("todos", [{"owner": "u1"}]) == []
    leaving = difference(new, old)
    assert leaving.leaving("tasks", rows) == [{"project_id": 7}]
    assert leaving.enters("tasks", {"project_id": 7}) is False
    assert leaving.leaves("tasks", {"project_id": 7}) is True
    assert difference(new, resolve_scope(RULES, U1, [_sub()], members)).unchanged


def test_a_membership_row_inserted_moves_its_projects_rows_in_without_touching_the_rest():
    old = resolve_scope(RULES, U1, memberships=_members(("u1", 42)))
    new = resolve_scope(RULES, U1, memberships=_members(("u1", 42), ("u1", 43)))
    diff = difference(old, new)
    rows = [{"project_id": 42}, {"project_id": 43}, {"project_id": 44}]
    assert diff.entering("tasks", rows) == [{"project_id": 43}]
    assert diff.leaving("tasks", rows) == []


def test_a_table_becoming_admin_only_leaves_and_back_enters():
    open_rules = parse_sync_rules({"version": 1, "buckets": [{"name": "all", "tables": [], "filters": []}]})
    closed = parse_sync_rules({**open_rules.to_json(), "tables": {"billing": {"adminOnly": True}}})
    old, new = resolve_scope(open_rules, {}), resolve_scope(closed, {})
    assert old.conditions == new.conditions
    diff = difference(old, new)
    assert diff.left == (Condition(("billing",)),) and diff.entered == ()
    assert diff.leaving("billing", [{"a": 1}]) == [{"a": 1}]
    assert diff.leaving("todos", [{"a": 1}]) == []
    assert difference(new, old).entering("billing", [{"a": 1}]) == [{"a": 1}]


# --- index keys -------------------------------------------------------------------------------------------------


def test_a_condition_is_indexed_by_its_most_selective_equality_clause():
    condition = Condition(
        ("tasks", "notes"),
        (
            Clause("team", FilterOp.IN, ("red", "blue")),
            Clause("owner", FilterOp.EQ, ("u1",)),
            Clause("prio", FilterOp.GT, ("1",)),
        ),
    )
    assert condition_keys(condition) == {IndexKey("tasks", "owner", "u1"), IndexKey("notes", "owner", "u1")}


def test_conditions_without_equality_clauses_fall_back_to_a_catch_all():
    assert condition_keys(Condition(("tasks",), (Clause("prio", FilterOp.NEQ, ("1",)),))) == {IndexKey("tasks")}
    assert condition_keys(Condition((), (Clause("owner", FilterOp.EQ, ("u1",)),))) == {IndexKey(None, "owner", "u1")}
    assert condition_keys(EVERYTHING) == {IndexKey(None)}


def test_row_keys_name_every_column_value_in_its_table_and_any_table():
    assert row_keys("tasks", {"project_id": 7}) == {
        IndexKey("tasks"),
        IndexKey(None),
        IndexKey("tasks", "project_id", "7"),
        IndexKey(None, "project_id", "7"),
    }
    assert row_keys("tasks", None) == {IndexKey("tasks"), IndexKey(None)}


def test_the_index_finds_the_sessions_a_change_concerns_and_forgets_removed_ones():
    members = _members(("u2", 42))
    index = ScopeIndex()
    index.put("s1", resolve_scope(RULES, U1, [_sub()]))
    index.put("s2", resolve_scope(RULES, {"sub": "u2"}, memberships=members))
    assert index.candidates("tasks", None, {"project_id": 7}) == {"s1"}
    assert index.candidates("tasks", {"project_id": 42}, {"project_id": 7}) == {"s1", "s2"}
    assert index.candidates("todos", None, {"owner": "u2"}) == {"s2"}
    assert index.candidates("todos", None, {"owner": "u3"}) == set()
    index.put("s1", resolve_scope(RULES, U1))
    assert index.candidates("tasks", None, {"project_id": 7}) == set()
    index.remove("s2")
    index.remove("s2")
    assert index.candidates("tasks", {"project_id": 42}, None) == set()
    assert len(index) == 1


# --- writes through the scope -----------------------------------------------------------------------------------


def test_check_write_reads_memberships_for_buckets_with_membership_filters():
    members = _members(("u1", 42))
    row = {"project_id": 42, "title": "a"}
    delta = update("t1", table="tasks", title="b")
    assert check_write(RULES, U1, delta, row, {**row, "title": "b"}, memberships=members) is None
    refusal = check_write(RULES, U1, delta, row, {**row, "title": "b"})
    assert refusal is not None and refusal.code == OUT_OF_SCOPE


def test_a_subscription_lets_the_client_write_its_rows_within_the_streams_policy():
    scope = resolve_scope(RULES, U1, [_sub()])
    row = {"project_id": 7, "title": "a"}
    assert scope.check_write(update("t1", table="tasks", title="b"), row, {**row, "title": "b"}) is None
    refusal = scope.check_write(delete("t1", table="tasks"), row, None)
    assert refusal is not None
    assert (refusal.code, refusal.reason) == (
        OPERATION_NOT_ALLOWED,
        'Stream "project_tasks" (project=7) does not allow a client to delete rows',
    )
    moved = scope.check_write(update("t1", table="tasks", project_id=8), row, {**row, "project_id": 8})
    assert moved is not None and moved.code == OUT_OF_SCOPE


def test_the_scope_judges_bucket_writes_like_check_write():
    members = _members(("u1", 42))
    scope = resolve_scope(RULES, U1, memberships=members)
    cases = [
        (insert("t1", table="todos", owner="u1"), None, {"owner": "u1"}),
        (insert("t1", table="todos", owner="u2"), None, {"owner": "u2"}),
        (update("t1", table="tasks", title="x"), {"project_id": 42}, {"project_id": 42, "title": "x"}),
        (delete("t1", table="tasks"), None, None),
        (insert("t1", table="billing", a=1), None, {"a": 1}),
        (insert("t1", table="_lakesync_provenance", a=1), None, {"a": 1}),
    ]
    for delta, before, after in cases:
        assert scope.check_write(delta, before, after) == check_write(RULES, U1, delta, before, after, members)
    assert resolve_scope(None, {}).check_write(insert("t1", table="x", a=1), None, {"a": 1}) is None


def test_a_scope_knows_which_membership_rows_it_depends_on_and_the_index_finds_them():
    members = _members(("u1", 42))
    scope = resolve_scope(RULES, U1, memberships=members)
    assert scope.depends_on("memberships", None, {"user": "u1", "project": 43})
    assert scope.depends_on("memberships", {"user": "u1", "project": 42}, None)
    assert not scope.depends_on("memberships", None, {"user": "u2", "project": 43})
    assert not scope.depends_on("memberships", None, {"user": "u1", "project": None})
    assert not scope.depends_on("tasks", None, {"user": "u1", "project": 43})
    assert not resolve_scope(RULES, U1).depends_on("memberships", None, {"user": "u1", "project": 43})
    index = ScopeIndex()
    index.put("s1", scope)
    index.put("s2", resolve_scope(RULES, {"sub": "u2"}, memberships=members))
    assert index.dependents("memberships", None, {"user": "u1", "project": 43}) == {"s1"}
    assert index.dependents("memberships", {"user": "u2", "project": 1}, {"user": "u1", "project": 1}) == {"s1", "s2"}


def test_a_parameter_may_feed_a_membership_of_the_streams_filter():
    # Given a stream of the tasks of the projects a team (the parameter) belongs to
    rules = parse_sync_rules(
        {
            "version": 1,
            "buckets": [],
            "streams": [
                {
                    "name": "team_projects",
                    "table": "tasks",
                    "filters": [
                        {
                            "column": "project_id",
                            "op": "in",
                            "membership": {
                                "table": "teams",
                                "column": "project",
                                "where": [{"column": "team", "op": "eq", "value": "param:team"}],
                            },
                        }
                    ],
                    "params": {"team": {"subscription": {"allowed": "jwt:teams"}}},
                }
            ],
        }
    )
    teams = InMemoryMemberships({"teams": [{"team": "red", "project": 1}, {"team": "blue", "project": 2}]})
    # When a red member subscribes to red
    scope = resolve_scope(rules, {"teams": ["red"]}, [Subscription.of("team_projects", {"team": "red"})], teams)
    # Then it covers red's projects only, and depends on red's rows of the teams table
    assert scope.covers("tasks", {"project_id": 1}) and not scope.covers("tasks", {"project_id": 2})
    assert scope.depends_on("teams", None, {"team": "red", "project": 3})
    assert not scope.depends_on("teams", None, {"team": "blue", "project": 3})
