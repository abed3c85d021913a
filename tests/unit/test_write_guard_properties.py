"""Property: the push's write guard is the scope's own judgement.

For random rules with buckets (membership filters among them), streams with random write policies, subscriptions
(live, run out, refused, to streams gone), memberships and writes, :class:`~lakesync.gateway.write_guard.WriteGuard`
refuses exactly what ``resolve_scope(...).check_write(...)`` refuses, with the same refusal, and shows a refused row
exactly when the scope covers it; a push of a refused delta leaves the store as it was.
"""

from __future__ import annotations

from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from lakesync.core import merge as lww
from lakesync.core.filters import InMemoryMemberships
from lakesync.core.hlc import HLC, encode
from lakesync.core.messages import SyncPush
from lakesync.core.rules import SyncRules, parse_sync_rules
from lakesync.core.scope import resolve_scope
from lakesync.core.streams import Subscription
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.memory import (
    InMemoryActionStore,
    InMemoryBufferStore,
    InMemoryConfigStore,
    InMemoryMembershipReader,
    InMemorySubscriptions,
)
from lakesync.gateway.push import push
from lakesync.gateway.write_guard import WriteGuard
from tests import factories
from tests.factories import T0
from tests.stream_docs import MEMBER_OF, project_stream

GW = "default"
TABLES = ("tasks", "todos", "notes", "secret")
USERS = ("u0", "u1")
NOW = T0 + 1_000

_write = st.fixed_dictionaries(
    {},
    optional={
        "ops": st.lists(st.sampled_from(("insert", "update", "delete")), unique=True),
        "readOnlyColumns": st.just(["title"]),
        "immutableColumns": st.just(["owner"]),
    },
)
_filter = st.one_of(
    st.just({"column": "owner", "op": "eq", "value": "jwt:sub"}),
    st.just({"column": "project_id", "op": "in", "value": "jwt:projects"}),
    st.integers(0, 3).map(lambda n: {"column": "project_id", "op": "gte", "value": str(n)}),
    st.just({"column": "project_id", "op": "in", "membership": MEMBER_OF}),
    st.just({"column": "project_id", "op": "neq", "membership": MEMBER_OF}),
)
_bucket = st.fixed_dictionaries(
    {
        "tables": st.lists(st.sampled_from(TABLES[:3]), max_size=2, unique=True),
        "filters": st.lists(_filter, max_size=2),
    },
    optional={"write": _write},
)
STREAMS: dict[str, dict[str, Any]] = {
    "by_project": project_stream(),
    "by_member": project_stream(params={"project": {"subscription": {"membership": MEMBER_OF}}}),
    "mine": {
        "table": "notes",
        "filters": [{"column": "owner", "op": "eq", "value": "param:me"}],
        "params": {"me": {"claim": "sub"}},
    },
    "member_todos": {"table": "todos", "filters": [{"column": "project_id", "op": "in", "membership": MEMBER_OF}]},
}
_PARAMS: dict[str, st.SearchStrategy[dict[str, str]]] = {
    "by_project": st.fixed_dictionaries({"project": st.sampled_from(("1", "2"))}),
    "by_member": st.fixed_dictionaries({"project": st.sampled_from(("1", "2"))}),
    "mine": st.sampled_from(({}, {"me": "u0"})),
    "member_todos": st.just({}),
    "gone": st.just({}),
}


def _rules_doc(
    buckets: list[dict[str, Any]], streams: dict[str, dict[str, Any] | None], admin: bool, tasks_policy: bool
) -> SyncRules:
    doc: dict[str, Any] = {
        "version": 1,
        "buckets": [{"name": f"b{i}", **b} for i, b in enumerate(buckets)],
        "streams": [
            {**STREAMS[name], "name": name, **({"write": write} if write is not None else {})}
            for name, write in sorted(streams.items())
        ],
        "tables": {},
    }
    if admin:
        doc["tables"]["secret"] = {"adminOnly": True}
    if tasks_policy:
        doc["tables"]["tasks"] = {"write": {"immutableColumns": ["project_id"]}}
    return parse_sync_rules(doc)


_rules = st.builds(
    _rules_doc,
    st.lists(_bucket, max_size=2),
    st.fixed_dictionaries({name: st.one_of(st.none(), _write) for name in STREAMS}).flatmap(
        lambda streams: st.sets(st.sampled_from(sorted(streams)), max_size=1).map(
            lambda dropped: {k: v for k, v in streams.items() if k not in dropped}
        )
    ),
    st.booleans(),
    st.booleans(),
)
_projects = st.lists(st.sampled_from(("1", "2")), min_size=1, max_size=3)
_claims = st.one_of(
    st.fixed_dictionaries({"sub": st.sampled_from(USERS), "projects": _projects}),
    st.fixed_dictionaries({"sub": st.sampled_from(USERS)}),
)
_memberships = st.lists(
    st.fixed_dictionaries({"user": st.sampled_from(USERS), "project": st.one_of(st.integers(1, 2), st.none())}),
    max_size=6,
)
_subscription = st.sampled_from([*sorted(_PARAMS), "by_project", "by_member"]).flatmap(
    lambda name: st.builds(
        lambda params, expires: Subscription.of(name, params, expires),
        _PARAMS[name],
        st.sampled_from((None, None, NOW + 1, NOW + 1, NOW)),
    )
)
_optional_values = {"owner": st.sampled_from(USERS), "title": st.sampled_from(("a", "b"))}
_values = st.one_of(
    st.fixed_dictionaries({"project_id": st.one_of(st.integers(1, 2), st.just("1"))}, optional=_optional_values),
    st.fixed_dictionaries({}, optional=_optional_values),
)
_write_op = st.tuples(
    st.sampled_from(("tasks", "tasks", "tasks", *TABLES[1:])), st.sampled_from(("INSERT", "UPDATE", "DELETE")), _values
)
_stored = st.one_of(st.none(), st.just("deleted"), _values)
"""A row as stored before the write: absent, deleted (a tombstone), or live with these values."""


def _state(table: str, stored: object) -> lww.RowState | None:
    """The stored row: written by another client before the write."""
    if stored is None:
        return None
    state = lww.merge(
        None, factories.delta("INSERT", "r", hlc=encode(T0, 0), table=table, client="x", columns={"v": 1})
    )
    if stored == "deleted":
        return lww.merge(state.state, factories.delta("DELETE", "r", hlc=encode(T0, 1), table=table, client="x")).state
    assert isinstance(stored, dict)
    removed = {"v": None} if stored else {}
    delta = factories.delta("UPDATE", "r", hlc=encode(T0, 1), table=table, client="x", columns={**stored, **removed})
    return lww.merge(state.state, delta).state


def _values_of(state: lww.RowState | None) -> dict[str, Any] | None:
    return state.values() if state is not None else None


@settings(max_examples=400, deadline=None)
@given(
    rules=_rules,
    claims=_claims,
    members=_memberships,
    subs=st.lists(_subscription, min_size=1, max_size=4),
    writes=st.lists(st.tuples(_write_op, _stored), min_size=1, max_size=6),
    with_source=st.booleans(),
)
def test_the_guard_refuses_exactly_what_the_scope_refuses(rules, claims, members, subs, writes, with_source):
    source = InMemoryMemberships({"memberships": members}) if with_source else None
    scope = resolve_scope(rules, claims, subs, source, NOW)
    buckets = resolve_scope(rules, claims, (), source, NOW)
    reads: list[int] = []

    def read_subscriptions() -> list[Subscription]:
        reads.append(1)
        return subs

    # One guard for several writes, as a push judges its deltas
    guard = WriteGuard(rules, claims, subscriptions=read_subscriptions, memberships=source, now_ms=NOW)
    for (table, op, values), stored in writes:
        before = _state(table, stored)
        delta = factories.delta(op, "r", hlc=encode(NOW, 0), table=table, client=claims["sub"], columns=values)
        after = lww.merge(before, delta).state
        expected = scope.check_write(delta, _values_of(before), _values_of(after))
        if expected != buckets.check_write(delta, _values_of(before), _values_of(after)):
            event("a subscription decides the verdict")
        assert guard.refusal(delta, before, after) == expected
        visible = _values_of(before) is not None and scope.covers(table, _values_of(before))
        assert guard.readable(table, before) == (before if visible else None)
    assert len(reads) <= 1


def _gateway(rules: SyncRules, members: list[dict[str, Any]], subs: list[Subscription], sub: str) -> GatewayDeps:
    config = InMemoryConfigStore()
    config.put_sync_rules(GW, rules)
    store = InMemorySubscriptions()
    for held in subs:
        store.put(GW, sub, held, T0, 64)
    return GatewayDeps(
        buffer=InMemoryBufferStore(),
        config=config,
        actions=InMemoryActionStore(),
        clock=HLC(lambda: NOW),
        wall_ms=lambda: NOW,
        sleep=lambda _s: None,
        subscriptions=store,
        memberships=InMemoryMembershipReader(InMemoryMemberships({"memberships": members})),
    )


@settings(max_examples=150, deadline=None)
@given(
    rules=_rules,
    claims=_claims,
    members=_memberships,
    subs=st.lists(_subscription, max_size=4),
    write=_write_op,
    stored=st.one_of(st.none(), _values),
)
def test_a_push_of_a_refused_delta_leaves_the_store_unchanged(rules, claims, members, subs, write, stored):
    table, op, values = write
    sub = claims["sub"]
    deps = _gateway(rules, members, subs, sub)
    if stored is not None:
        seed = factories.delta("INSERT", "r", hlc=encode(T0, 0), table=table, client="x", columns=stored)
        assert push(deps, GW, SyncPush("x", (seed,)), client_id="x", trusted=True).accepted == 1
    rows_before = deps.buffer.get_rows(GW, [(table, "r")])
    heads_before = deps.buffer.get_heads(deps.buffer.list_shards(GW))
    before = rows_before[(table, "r")].state if rows_before else None
    delta = factories.delta(op, "r", hlc=encode(NOW, 0), table=table, client=sub, columns=values)
    scope = resolve_scope(
        rules,
        claims,
        deps.subscriptions.get(GW, sub, NOW) if deps.subscriptions else (),
        InMemoryMemberships({"memberships": members}),
        NOW,
    )
    expected = scope.check_write(delta, _values_of(before), _values_of(lww.merge(before, delta).state))
    # When the client pushes the delta
    result = push(deps, GW, SyncPush(sub, (delta,)), client_id=sub, claims=claims)
    # Then the receipt is the scope's verdict, and a refused delta changed nothing in the store
    assert result.receipts[0].rejected == expected
    if expected is not None:
        assert result.accepted == 0 and result.entries == ()
        assert deps.buffer.get_rows(GW, [(table, "r")]) == rows_before
        assert deps.buffer.get_heads(deps.buffer.list_shards(GW)) == heads_before
