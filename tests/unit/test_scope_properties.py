"""Properties of the scope (issue 43), under random rules, claims, memberships, subscriptions and rows:

(a) a scope of buckets alone is the pull's rule (``row_matches``, ``change_visible``): one evaluation;
(b) a scope covers a row exactly when its buckets or one of its allowed, live subscriptions, each judged alone, does;
(c) the difference between two scopes finds exactly the rows whose coverage changed, through its conditions;
(d) the broadcaster's index never misses a session whose scope covers a changed row before or after the change;
(e) a change of a membership row that changes a scope is one the scope depends on, and the index finds its session.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.core.filters import InMemoryMemberships
from lakesync.core.rules import SyncRules, bucket_matches_row, change_visible, parse_sync_rules, row_matches
from lakesync.core.scope import ScopeIndex, check_subscription, difference, resolve_scope
from lakesync.core.streams import Subscription

TABLES = ("tasks", "notes", "todos", "secret")
TEAMS = ("red", "blue", "green")
USERS = ("u0", "u1", "u2")
MEMBER_OF = {"table": "memberships", "column": "project", "where": [{"column": "user", "op": "eq", "value": "jwt:sub"}]}
LEADS = {"table": "memberships", "column": "project", "where": [{"column": "role", "op": "eq", "value": "lead"}]}

_filter = st.one_of(
    st.just({"column": "team", "op": "eq", "value": "jwt:team"}),
    st.sampled_from(TEAMS).map(lambda t: {"column": "team", "op": "neq", "value": t}),
    st.integers(0, 3).map(lambda n: {"column": "prio", "op": "gte", "value": str(n)}),
    st.just({"column": "owner", "op": "eq", "value": "jwt:sub"}),
    st.just({"column": "project_id", "op": "in", "value": "jwt:projects"}),
    st.sampled_from((MEMBER_OF, LEADS)).map(lambda m: {"column": "project_id", "op": "in", "membership": m}),
    st.sampled_from((MEMBER_OF, LEADS)).map(lambda m: {"column": "project_id", "op": "neq", "membership": m}),
)
_bucket = st.fixed_dictionaries(
    {
        "tables": st.lists(st.sampled_from(TABLES[:3]), max_size=2, unique=True),
        "filters": st.lists(_filter, max_size=2),
    }
)
STREAMS: dict[str, dict[str, Any]] = {
    "by_project": {
        "table": "tasks",
        "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
        "params": {"project": {"subscription": {"allowed": "jwt:projects"}}},
    },
    "by_member": {
        "table": "tasks",
        "filters": [
            {"column": "project_id", "op": "eq", "value": "param:project"},
            {"column": "prio", "op": "gte", "value": "1"},
        ],
        "params": {"project": {"subscription": {"membership": MEMBER_OF}}},
    },
    "mine": {
        "table": "notes",
        "filters": [{"column": "owner", "op": "eq", "value": "param:me"}],
        "params": {"me": {"claim": "sub"}},
    },
    "team_min": {
        "table": "notes",
        "filters": [
            {"column": "team", "op": "eq", "value": "param:team"},
            {"column": "prio", "op": "gte", "value": "param:min"},
        ],
        "params": {
            "team": {"subscription": {"allowed": ["red", "blue"]}},
            "min": {"subscription": {"allowed": ["0", "2"]}},
        },
    },
    "member_todos": {
        "table": "todos",
        "filters": [{"column": "project_id", "op": "in", "membership": MEMBER_OF}],
    },
}


def _rules_doc(buckets: list[dict[str, Any]], streams: list[str], admin: bool) -> SyncRules:
    doc: dict[str, Any] = {
        "version": 1,
        "buckets": [{"name": f"b{i}", **b} for i, b in enumerate(buckets)],
        "streams": [{"name": name, **STREAMS[name]} for name in streams],
    }
    if admin:
        doc["tables"] = {"secret": {"adminOnly": True}}
    return parse_sync_rules(doc)


_rules = st.builds(
    _rules_doc,
    st.lists(_bucket, max_size=3),
    st.lists(st.sampled_from((True, True, False)), min_size=len(STREAMS), max_size=len(STREAMS)).map(
        lambda chosen: [name for name, keep in zip(sorted(STREAMS), chosen, strict=True) if keep]
    ),
    st.booleans(),
)
_claims = st.fixed_dictionaries(
    {"sub": st.sampled_from(USERS)},
    optional={
        "team": st.sampled_from(TEAMS),
        "projects": st.lists(st.sampled_from(("0", "1", "2", "3")), min_size=1, max_size=3),
    },
)
_membership_row = st.fixed_dictionaries(
    {"user": st.sampled_from(USERS), "project": st.one_of(st.integers(0, 3), st.none())},
    optional={"role": st.sampled_from(("lead", "member"))},
)
_membership_rows = st.lists(_membership_row, max_size=6)
_memberships = _membership_rows.map(lambda rows: InMemoryMemberships({"memberships": rows}))
_project = st.sampled_from(("0", "1", "2", "3"))
_params_of = {
    "by_project": st.fixed_dictionaries({"project": _project}),
    "by_member": st.fixed_dictionaries({"project": _project}),
    "mine": st.just({}),
    "team_min": st.fixed_dictionaries({"team": st.sampled_from(TEAMS), "min": st.sampled_from(("0", "1", "2"))}),
    "member_todos": st.just({}),
    "gone": st.fixed_dictionaries({"x": _project}),
}


def _subscription_for(name: str) -> st.SearchStrategy[Subscription]:
    """Subscriptions to ``name``: mostly its own parameters (often allowed), sometimes one too many or one missing."""
    return st.builds(
        lambda params, extra, drop, expires_at: Subscription.of(
            name, {k: v for k, v in {**params, **extra}.items() if k != drop}, expires_at
        ),
        _params_of[name],
        st.sampled_from(({}, {}, {}, {"me": "u0"})),
        st.sampled_from((None, None, None, "project", "team")),
        st.one_of(st.none(), st.none(), st.integers(0, 10)),
    )


_subscription = st.sampled_from(sorted(_params_of)).flatmap(_subscription_for)
_subscriptions = st.lists(_subscription, max_size=4)
_row = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "team": st.sampled_from(TEAMS),
            "prio": st.one_of(st.integers(0, 4), st.sampled_from(("2", "x"))),
            "owner": st.sampled_from(USERS),
            "project_id": st.one_of(st.integers(0, 3), st.sampled_from(("1", None))),
        },
    ),
)
_table_row = st.tuples(st.sampled_from(TABLES), _row)
NOW = 5


@settings(max_examples=300, deadline=None)
@given(rules=_rules, claims=_claims, memberships=_memberships, rows=st.lists(st.tuples(_table_row, _row), max_size=8))
def test_a_scope_of_buckets_alone_is_the_pulls_rule(rules, claims, memberships, rows):
    plain = dataclasses.replace(rules, streams=())
    for with_memberships in (memberships, None):
        scope = resolve_scope(plain, claims, memberships=with_memberships)
        for (table, before), after in rows:
            assert scope.covers(table, before) == row_matches(plain, claims, table, before, with_memberships)
            assert scope.change_visible(table, before, after) == change_visible(
                plain, claims, table, before, after, with_memberships
            )


@settings(max_examples=300, deadline=None)
@given(
    rules=_rules, claims=_claims, memberships=_memberships, subs=_subscriptions, rows=st.lists(_table_row, max_size=8)
)
def test_a_scope_covers_the_union_of_its_parts_each_judged_alone(rules, claims, memberships, subs, rows):
    scope = resolve_scope(rules, claims, subs, memberships, now_ms=NOW)
    streams_only = dataclasses.replace(rules, buckets=())
    live = [s for s in subs if not s.expired(NOW) and check_subscription(rules, claims, s, memberships) is None]
    assert set(scope.subscriptions) == set(live)
    for table, row in rows:
        if not rules.buckets and not rules.streams:
            expected = not rules.admin_only(table)
        else:
            by_bucket = any(bucket_matches_row(b, table, row, claims, memberships) for b in rules.buckets)
            by_subscription = any(
                resolve_scope(streams_only, claims, [s], memberships).covers(table, row) for s in live
            )
            expected = not rules.admin_only(table) and (by_bucket or by_subscription)
        assert scope.covers(table, row) == expected


@settings(max_examples=300, deadline=None)
@given(
    old=st.tuples(_rules, _subscriptions, _memberships),
    new=st.tuples(_rules, _subscriptions, _memberships),
    claims=_claims,
    rows=st.lists(_table_row, max_size=12),
)
def test_the_difference_finds_exactly_the_rows_whose_coverage_changed(old, new, claims, rows):
    before = resolve_scope(old[0], claims, old[1], old[2], now_ms=NOW)
    after = resolve_scope(new[0], claims, new[1], new[2], now_ms=NOW)
    diff = difference(before, after)
    for table in TABLES:
        table_rows = [r for t, r in rows if t == table and r is not None]
        assert diff.entering(table, table_rows) == [
            r for r in table_rows if after.covers(table, r) and not before.covers(table, r)
        ]
        assert diff.leaving(table, table_rows) == [
            r for r in table_rows if before.covers(table, r) and not after.covers(table, r)
        ]
    if before.fingerprint == after.fingerprint:
        assert diff.unchanged
        assert all(before.covers(t, r) == after.covers(t, r) for t, r in rows)


@settings(max_examples=300, deadline=None)
@given(
    sessions=st.lists(st.tuples(_claims, _subscriptions, _memberships), min_size=1, max_size=5),
    rules=_rules,
    changes=st.lists(st.tuples(_table_row, _row), min_size=1, max_size=6),
)
def test_the_index_never_misses_a_session_a_change_concerns(sessions, rules, changes):
    index = ScopeIndex()
    scopes = {}
    for i, (claims, subs, memberships) in enumerate(sessions):
        scopes[f"s{i}"] = resolve_scope(rules, claims, subs, memberships, now_ms=NOW)
        index.put(f"s{i}", scopes[f"s{i}"])
    for (table, before), after in changes:
        concerned = {s for s, scope in scopes.items() if scope.change_visible(table, before, after)}
        assert concerned <= index.candidates(table, before, after)


_all_streams = st.builds(_rules_doc, st.lists(_bucket, max_size=3), st.just(sorted(STREAMS)), st.booleans())


@settings(max_examples=300, deadline=None)
@given(
    rules=_all_streams,
    sessions=st.lists(st.tuples(_claims, _subscriptions), min_size=1, max_size=4),
    rows=_membership_rows,
    change=st.tuples(st.integers(0, 6), st.one_of(st.none(), _membership_row), st.booleans()),
)
def test_a_membership_change_that_changes_a_scope_is_found_through_the_index(rules, sessions, rows, change):
    # Given membership rows, and one of them inserted, changed or deleted (or a new one inserted), often one of a
    # session's user
    at, image, own = change
    if image is not None and own:
        image = {**image, "user": sessions[0][0]["sub"]}
    before = rows[at] if at < len(rows) else None
    changed = [r for i, r in enumerate(rows) if i != at] + ([image] if image is not None else [])
    old_members = InMemoryMemberships({"memberships": rows})
    new_members = InMemoryMemberships({"memberships": changed})
    index = ScopeIndex()
    for i, (claims, drawn) in enumerate(sessions):
        subs = [*drawn, Subscription.of("member_todos")]
        old = resolve_scope(rules, claims, subs, old_members, now_ms=NOW)
        index.put(f"s{i}", old)
        new = resolve_scope(rules, claims, subs, new_members, now_ms=NOW)
        # Then a scope that changed depends on the row, and the index names its session
        if (old.fingerprint, old.subscriptions) != (new.fingerprint, new.subscriptions):
            assert old.depends_on("memberships", before, image)
        if old.depends_on("memberships", before, image):
            assert f"s{i}" in index.dependents("memberships", before, image)
