"""What an untrusted client may write: its deltas judged by its whole scope, its buckets and its subscriptions.

A write is a read that changes (docs/security.md, "Write rules"): a client may make a delta only if its scope holds
the row before the write and after it, under grants whose write policies allow the write. The scope is the one
:func:`lakesync.core.scope.resolve_scope` gives the pull: the buckets, the live subscriptions to the rules' streams,
and the membership tables their filters name; the judgement is :func:`lakesync.core.rules.check_write_in` (through
:meth:`lakesync.core.scope.Scope.check_write` where subscriptions count), never a second implementation.

What a push reads for it, and when:

* each table's bucket grants are resolved once per push, at its first delta, as they always were;
* the client's subscriptions are read at most once per push, and only when the buckets alone refuse a delta on a
  table some stream serves. Grants only ever add what a client may do, so a delta the buckets allow is allowed by the
  whole scope; one they refuse is judged again by the scope of its table, subscriptions included;
* the deployment's membership source (:meth:`~lakesync.gateway.deps.GatewayDeps.membership_source`, one per push)
  is taken only under rules that name a membership table, and is asked only the queries of the filters a delta's
  judgement needs: the buckets covering its table and, when they refuse it, its table's streams.

Rules without streams and without membership filters are judged exactly as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from lakesync.core.rules import Grant, SyncRules, WriteRefusal, bucket_grants, check_write_in, confines, row_matches

if TYPE_CHECKING:
    from lakesync.core import merge as lww
    from lakesync.core.claims import Claims
    from lakesync.core.delta import RowDelta
    from lakesync.core.filters import MembershipSource
    from lakesync.core.scope import Scope
    from lakesync.core.streams import Subscription
    from lakesync.gateway.deps import GatewayDeps


class WriteGuard:
    """What an untrusted client with ``claims`` may write under ``rules``: its deltas judged by its scope.

    Args:
        rules: The gateway's sync rules as the push read them (``None``: none).
        claims: The client's JWT claims.
        subscriptions: Reads the client's live subscriptions (called at most once; ``None``: it holds none).
        memberships: Answers the membership filters (``None``: they hold for no row).
        now_ms: The push's wall clock, at which a subscription that has run out no longer counts.
    """

    __slots__ = (
        "_grants",
        "_held",
        "_memberships",
        "_now_ms",
        "_read_subscriptions",
        "_scopes",
        "_streamed",
        "claims",
        "rules",
    )

    def __init__(
        self,
        rules: SyncRules | None,
        claims: Claims,
        *,
        subscriptions: Callable[[], Sequence[Subscription]] | None = None,
        memberships: MembershipSource | None = None,
        now_ms: int | None = None,
    ) -> None:
        self.rules = rules
        self.claims = claims
        self._read_subscriptions = subscriptions
        self._memberships = memberships
        self._now_ms = now_ms
        self._streamed = frozenset(s.table for s in rules.streams) if rules is not None else frozenset()
        self._grants: dict[str, list[Grant]] = {}
        self._scopes: dict[str, Scope] = {}
        self._held: Sequence[Subscription] | None = None

    @classmethod
    def for_client(
        cls, deps: GatewayDeps, gateway: str, rules: SyncRules | None, claims: Claims, client_id: str
    ) -> WriteGuard:
        """The guard of a push by ``client_id`` (the token's subject, whose subscriptions count) to ``gateway``: the
        membership source is taken only under rules that name a membership table (it reads a table at its first
        query), the subscription store is read only when a delta needs it."""
        if rules is None or not confines(rules):
            return cls(rules, claims)
        memberships = deps.membership_source(gateway) if rules.membership_tables() else None
        store = deps.subscriptions
        if store is None or not rules.streams:
            return cls(rules, claims, memberships=memberships)
        now_ms = deps.wall_ms()
        return cls(
            rules,
            claims,
            subscriptions=lambda: store.get(gateway, client_id, now_ms),
            memberships=memberships,
            now_ms=now_ms,
        )

    def refusal(self, delta: RowDelta, before: lww.RowState | None, after: lww.RowState | None) -> WriteRefusal | None:
        """Why the client may not merge ``delta`` into the row ``before`` (giving ``after``), or ``None``."""
        before_values = before.values() if before is not None else None
        after_values = after.values() if after is not None else None
        rules = self.rules
        if rules is None or not confines(rules):
            return check_write_in(rules, (), delta, before_values, after_values)
        grants = self._grants.get(delta.table)
        if grants is None:
            grants = self._grants[delta.table] = bucket_grants(rules, self.claims, self._memberships, delta.table)
        refusal = check_write_in(rules, grants, delta, before_values, after_values)
        if refusal is None or not self._subscribable(delta.table):
            return refusal
        return self._scope(delta.table).check_write(delta, before_values, after_values)

    def readable(self, table: str, state: lww.RowState | None) -> lww.RowState | None:
        """``state`` when the row exists and the client's scope lets it read the row, else ``None``."""
        values = state.values() if state is not None else None
        if values is None:
            return None
        if self._subscribable(table):
            visible = self._scope(table).covers(table, values)
        else:
            visible = row_matches(self.rules, self.claims, table, values, self._memberships)
        return state if visible else None

    def _subscribable(self, table: str) -> bool:
        """Whether a subscription may give the client rows of ``table``: a stream serves it, subscriptions are read."""
        return table in self._streamed and self._read_subscriptions is not None

    def _scope(self, table: str) -> Scope:
        """The client's scope on ``table``: the buckets covering it and the live subscriptions to its streams."""
        scope = self._scopes.get(table)
        if scope is None:
            from lakesync.core.scope import resolve_scope  # only a push its buckets refuse under streams needs it

            rules = self.rules
            assert rules is not None and self._read_subscriptions is not None
            if self._held is None:
                self._held = self._read_subscriptions()
            streams = {s.name for s in rules.streams if s.table == table}
            # Only the buckets and subscriptions that can hold rows of `table`: the others' memberships are not read.
            on_table = dataclasses.replace(rules, buckets=tuple(b for b in rules.buckets if b.covers_table(table)))
            held = [s for s in self._held if s.stream in streams]
            scope = self._scopes[table] = resolve_scope(on_table, self.claims, held, self._memberships, self._now_ms)
        return scope
