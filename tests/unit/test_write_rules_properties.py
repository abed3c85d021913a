"""Property: under random sync rules, claims and histories, a client's accepted writes are exactly those whose row it
may read (the pull's rule, ``row_matches``) before the write and after it, and forbidden writes change nothing any
client pulls: the gateway ends where a gateway sent only the allowed writes ends, to the delta."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.core import merge as lww
from lakesync.core.delta import DeltaOp, RowDelta
from lakesync.core.hlc import HLC
from lakesync.core.messages import SyncPush
from lakesync.core.rules import Claims, SyncRules, parse_sync_rules, row_matches
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.memory import InMemoryActionStore, InMemoryBufferStore, InMemoryConfigStore
from lakesync.gateway.pull import pull
from lakesync.gateway.push import push
from tests import factories
from tests.factories import T0, at

GW = "default"
TABLES = ("todos", "notes")
TEAMS = ("red", "blue", "green")

_filter = st.one_of(
    st.just({"column": "team", "op": "eq", "value": "jwt:team"}),
    st.sampled_from(TEAMS).map(lambda t: {"column": "team", "op": "neq", "value": t}),
    st.integers(0, 3).map(lambda n: {"column": "prio", "op": "gte", "value": str(n)}),
    st.just({"column": "owner", "op": "eq", "value": "jwt:sub"}),
)
_bucket = st.fixed_dictionaries(
    {
        "tables": st.lists(st.sampled_from(TABLES), max_size=2, unique=True),
        "filters": st.lists(_filter, max_size=2),
    }
)
_rules = st.lists(_bucket, min_size=1, max_size=3).map(
    lambda buckets: parse_sync_rules({"version": 1, "buckets": [{"name": f"b{i}", **b} for i, b in enumerate(buckets)]})
)
_values = st.fixed_dictionaries(
    {},
    optional={
        "team": st.sampled_from(TEAMS),
        "prio": st.integers(0, 4),
        "owner": st.sampled_from(("c0", "c1", "c2")),
        "title": st.sampled_from(("a", "b")),
    },
)


@dataclass(frozen=True)
class Write:
    client: int
    op: DeltaOp
    table: str
    row: str
    values: dict[str, Any]

    def delta(self, i: int) -> RowDelta:
        """This write as the ``i``-th delta of the history (its HLC: counter ``i`` at T0)."""
        return factories.delta(
            self.op, self.row, hlc=at(0, i), table=self.table, client=f"c{self.client}", columns=self.values
        )


_write = st.builds(
    Write,
    client=st.integers(0, 2),
    op=st.sampled_from((DeltaOp.INSERT, DeltaOp.UPDATE, DeltaOp.DELETE)),
    table=st.sampled_from(TABLES),
    row=st.sampled_from(("r0", "r1", "r2")),
    values=_values,
)


def _gateway(rules: SyncRules) -> GatewayDeps:
    config = InMemoryConfigStore()
    config.put_sync_rules(GW, rules)
    wall = [T0]
    return GatewayDeps(
        buffer=InMemoryBufferStore(),
        config=config,
        actions=InMemoryActionStore(),
        settings=GatewaySettings(),
        clock=HLC(lambda: wall[0]),
        wall_ms=lambda: wall[0],
        sleep=lambda _s: None,
    )


def _expected(rules: SyncRules, claims: Claims, state: lww.RowState | None, delta: RowDelta) -> bool:
    """The property's own statement of the rule: readable before and after (an absent row needs a bucket of the
    table, as a write that leaves nothing on either side)."""
    before = state.values() if state is not None else None
    after = lww.merge(state, delta).state.values()
    if before is None and after is None:
        return any(b.covers_table(delta.table) for b in rules.buckets)
    return all(row is None or row_matches(rules, claims, delta.table, row) for row in (before, after))


def _pulled(deps: GatewayDeps, claims: Claims) -> dict[str, list[tuple[str, str]]]:
    """What a client pulls, per table in commit order (tables are shards: their order against each other is not
    the property's)."""
    page = pull(deps, GW, limit=10_000, claims=claims, cursor=None)
    out: dict[str, list[tuple[str, str]]] = {}
    for d in page.deltas:
        out.setdefault(d.table, []).append((d.row_id, d.delta_id))
    return out


@settings(max_examples=150, deadline=None)
@given(
    rules=_rules,
    teams=st.lists(st.sampled_from(TEAMS), min_size=3, max_size=3),
    writes=st.lists(_write, min_size=1, max_size=24),
    batch=st.integers(1, 6),
)
def test_accepted_writes_are_exactly_the_readable_ones_and_forbidden_ones_change_nothing(
    rules: SyncRules, teams: list[str], writes: list[Write], batch: int
) -> None:
    claims = [{"team": teams[i], "sub": f"c{i}"} for i in range(3)]
    deps = _gateway(rules)
    deltas = [w.delta(i) for i, w in enumerate(writes)]
    states: dict[tuple[str, str], lww.RowState | None] = {}
    allowed: list[RowDelta] = []
    # Each client pushes its own consecutive writes together, `batch` at most at a time
    i = 0
    while i < len(deltas):
        client = writes[i].client
        group = [deltas[i]]
        while i + len(group) < len(deltas) and len(group) < batch and writes[i + len(group)].client == client:
            group.append(deltas[i + len(group)])
        result = push(deps, GW, SyncPush(f"c{client}", tuple(group)), client_id=f"c{client}", claims=claims[client])
        for delta, receipt in zip(group, result.receipts, strict=True):
            key = (delta.table, delta.row_id)
            expected = _expected(rules, claims[client], states.get(key), delta)
            assert (receipt.rejected is None) == expected, (delta, receipt)
            if expected:
                states[key] = lww.merge(states.get(key), delta).state
                allowed.append(delta)
        i += len(group)

    clean = _gateway(rules)
    for delta in allowed:
        push(clean, GW, SyncPush(delta.client_id, (delta,)), client_id=delta.client_id, trusted=True)
    for client_claims in claims:
        assert _pulled(deps, client_claims) == _pulled(clean, client_claims)
