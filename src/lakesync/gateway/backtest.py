"""Backtest a rules change (docs/streams.md, "Backtest a rules change"): what a candidate rules version would change
for each client, judged on the gateway's current rows, before it is saved. Read-only.

The candidate is validated as saving it would be (the same errors, 400). Each claim set's scope is resolved under the
rules in force and under the candidate by :func:`~lakesync.core.scope.resolve_scope`, with the client's kept
subscriptions and the membership tables as they are now; every current row is then judged by both
(:class:`~lakesync.core.backtest.Backtest`). The rows are read whole, once, at the shards' heads
(:func:`~lakesync.gateway.state_rows.read_state`), and gone through twice: for the membership tables of both versions
(a candidate may name a table the rules in force do not, which the gateway's membership reader would not read), then
for every row. A row entering is counted with the bytes of the deltas
a difference sends for it, a row leaving with the bytes of its drop (:func:`~lakesync.gateway.scope_moves.drop_delta`),
as :mod:`lakesync.gateway.scope_change` serves a caught-up client once the candidate is saved.

Claim sets are given, or taken from the tokens the gateway has seen: its WebSocket sessions (the only place the
gateway keeps a token's claims), one per client and distinct claims.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lakesync.core.backtest import (
    DEFAULT_SAMPLE,
    MAX_CLAIM_SETS,
    MAX_SAMPLE,
    Backtest,
    BacktestInputError,
    ClaimSet,
    Comparison,
    parse_claim_sets,
)
from lakesync.core.filters import InMemoryMemberships, Row
from lakesync.core.rules import SyncRules, check_sync_rules_limits, parse_sync_rules
from lakesync.core.scope import resolve_scope
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.membership_view import MAX_MEMBERSHIP_ROWS, MembershipTableTooLargeError
from lakesync.gateway.scope_moves import drop_delta
from lakesync.gateway.state_rows import TableState, item_bytes, read_state

if TYPE_CHECKING:
    from lakesync.ports import ConnectionStore

__all__ = ["backtest", "backtest_request", "session_claim_sets"]


def session_claim_sets(sessions: ConnectionStore, gateway: str, now_s: float) -> list[ClaimSet]:
    """The claim sets of ``gateway``'s live WebSocket sessions: one per client and distinct claims, oldest first."""
    seen: dict[tuple[str, str], ClaimSet] = {}
    for conn in sorted(sessions.list_connections(gateway), key=lambda c: (c.connected_at, c.connection_id)):
        if conn.expired(now_s):
            continue
        claims = {**conn.claims, "sub": conn.claims.get("sub", conn.client_id)}
        key = (conn.client_id, repr(sorted(claims.items())))
        seen.setdefault(key, ClaimSet(conn.client_id, claims, origin="session"))
    return list(seen.values())[:MAX_CLAIM_SETS]


def _memberships(state: TableState, rules: Sequence[SyncRules | None]) -> InMemoryMemberships:
    tables = frozenset(t for r in rules if r is not None for t in r.membership_tables())
    held: dict[str, list[Row]] = {t: [] for t in tables}
    if tables:
        for row in state.rows():
            if row.table in tables and row.values is not None:
                held[row.table].append(row.values)
                if len(held[row.table]) > MAX_MEMBERSHIP_ROWS:
                    raise MembershipTableTooLargeError(
                        f"Membership table {row.table!r} holds more than {MAX_MEMBERSHIP_ROWS} live rows, more than "
                        "a gateway reads to evaluate membership filters"
                    )
    return InMemoryMemberships(held)


def backtest(
    deps: GatewayDeps,
    gateway: str,
    candidate_doc: object,
    claim_sets: Sequence[ClaimSet] | None = None,
    *,
    sessions: ConnectionStore | None = None,
    sample: int = DEFAULT_SAMPLE,
) -> dict[str, Any]:
    """The report of what saving ``candidate_doc`` would change for each claim set (module docstring).

    Args:
        deps: The gateway's stores.
        gateway: The gateway.
        candidate_doc: The candidate rules document.
        claim_sets: Whom to judge it for; ``None``: the clients of the gateway's WebSocket sessions (``sessions``).
        sessions: The WebSocket sessions, where the deployment gives them.
        sample: Sample rows kept per claim set, table and direction.

    Raises:
        SyncRuleError: the candidate is not valid rules (400), as saving it would say; over a bound 400 or 413.
        BacktestInputError: no claim set to judge (400).
        StorageError: the log was released past every readable checkpoint; a membership table is larger than a
            gateway reads (503).
    """
    candidate = parse_sync_rules(candidate_doc)
    check_sync_rules_limits(candidate)
    if claim_sets is None and sessions is not None:
        claim_sets = session_claim_sets(sessions, gateway, deps.wall_ms() / 1000)
    if not claim_sets:
        raise BacktestInputError("No claim sets to judge: give claimSets (no WebSocket session to take them from)")
    current = deps.config.get_sync_rules(gateway)
    now_ms = deps.wall_ms()
    state = read_state(deps, gateway)
    members = _memberships(state, (current, candidate))
    # Subscriptions count only under rules with streams: otherwise the kept ones are not read.
    store = deps.subscriptions if any(r is not None and r.streams for r in (current, candidate)) else None
    comparisons = []
    for claim_set in claim_sets:
        subs = claim_set.subscriptions
        if subs is None:
            subs = tuple(store.get(gateway, claim_set.client, now_ms)) if store is not None else ()
        old = resolve_scope(current, claim_set.claims, subs, members, now_ms)
        new = resolve_scope(candidate, claim_set.claims, subs, members, now_ms)
        comparisons.append(Comparison(claim_set, old, new))
    report = Backtest(current, candidate, comparisons, _drop_bytes, sample)
    for row in state.rows():
        report.observe(row.table, row.row_id, row.values, row.size)
    return report.to_json({"source": state.source, "positions": dict(sorted(state.positions.items()))})


def _drop_bytes(table: str, row_id: str, client: str) -> int:
    return item_bytes(drop_delta(table, row_id, client))


def backtest_request(
    deps: GatewayDeps, gateway: str, document: object, sessions: ConnectionStore | None = None
) -> dict[str, Any]:
    """:func:`backtest` of an admin request's body ``{"rules", "claimSets"?, "sample"?}``.

    Raises:
        BacktestInputError: the body is not such an object (400).
    """
    if not isinstance(document, Mapping) or "rules" not in document:
        raise BacktestInputError('The body must be {"rules", "claimSets"?, "sample"?}')
    unknown = sorted(set(document) - {"rules", "claimSets", "sample"})
    if unknown:
        raise BacktestInputError(f"Unknown fields: {', '.join(unknown)}")
    sample = document.get("sample", DEFAULT_SAMPLE)
    if not isinstance(sample, int) or isinstance(sample, bool) or not 0 <= sample <= MAX_SAMPLE:
        raise BacktestInputError(f"sample must be an integer from 0 to {MAX_SAMPLE}")
    raw = document.get("claimSets")
    claim_sets = parse_claim_sets(raw) if raw is not None else None
    return backtest(deps, gateway, document["rules"], claim_sets, sessions=sessions, sample=sample)
