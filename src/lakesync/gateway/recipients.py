"""Who receives a committed change: the broadcaster's index of sessions by scope (issue 43, item 6).

Sessions are grouped by what decides their scope: their claims and their client's live stream subscriptions
(sessions of a group see the same rows). Each group's scope is resolved once, with the subscriptions and the
gateway's membership tables (:func:`lakesync.core.scope.resolve_scope`), and kept in a
:class:`~lakesync.core.scope.ScopeIndex`. For a change, the index names the groups whose scope may cover the row
before or after it; each of those is then confirmed by :meth:`~lakesync.core.scope.Scope.change_visible`, the rule
a pull of that scope applies (for a scope of buckets alone, the same answer as
:func:`lakesync.gateway.log_pages.entry_visible`), once per group. So the broadcast never delivers what a pull would
not, and its work grows with the groups a change may concern and the sessions it reaches, not with every connected
session.

A change of a membership row may move rows into or out of scopes that read it. The index names the groups whose
scope may read the row (:meth:`~lakesync.core.scope.ScopeIndex.dependents`), each confirmed by
:meth:`~lakesync.core.scope.Scope.depends_on`, and their sessions (the author's too: its own scope moved) are told
to pull (:attr:`Delivery.pull_at`); the pull serves the difference of the scope, rows entering and leaving, once.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from lakesync.core.filters import MembershipQuery, MembershipSource
from lakesync.core.log import LogEntry
from lakesync.core.realtime import Connection
from lakesync.core.rules import SyncRules
from lakesync.core.scope import Scope, ScopeIndex, resolve_scope
from lakesync.core.streams import Subscription

__all__ = ["Delivery", "RecipientIndex", "claims_key", "group_key"]


def claims_key(connection: Connection) -> str:
    """The key of a session's claims: sessions with equal keys and subscriptions see the same rows."""
    claims = {k: list(v) if isinstance(v, tuple | list) else v for k, v in connection.claims.items()}
    return json.dumps(claims, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def group_key(connection: Connection, subscriptions: Iterable[Subscription], now_ms: int | None = None) -> str:
    """The key of a session's scope: its claims and its subscriptions live at ``now_ms`` (by stream and
    parameters; a subscription's expiry beyond ``now_ms`` does not change what it covers)."""
    held = sorted({(s.stream, s.params) for s in subscriptions if not s.expired(now_ms)})
    return claims_key(connection) + json.dumps(held, separators=(",", ":"), ensure_ascii=True)


@dataclass(slots=True)
class Delivery:
    """What one session receives of a broadcast.

    Attributes:
        entries: The entries it sees, in commit order.
        pull_at: The commit HLC of the latest change that moved its scope or a row across it (a membership row its
            scope depends on, a row entering or leaving it by an update): the session is told to pull (``None``: it
            is not).
    """

    entries: list[LogEntry] = field(default_factory=list)
    pull_at: int | None = None


class _SharedAnswers:
    """A membership source answering each query once for every scope of one broadcast (sessions of one user, or of
    one project, ask the same queries)."""

    def __init__(self, source: MembershipSource) -> None:
        self._source = source
        self._answers: dict[MembershipQuery, Collection[str]] = {}

    def member_values(self, query: MembershipQuery) -> Collection[str]:
        answer = self._answers.get(query)
        if answer is None:
            answer = self._answers[query] = frozenset(self._source.member_values(query))
        return answer


class RecipientIndex:
    """The sessions of one gateway under ``rules``, indexed by scope (see the module docstring).

    Args:
        rules: The gateway's sync rules (``None``: none, every row is visible).
        connections: The sessions to index.
        subscriptions: Each client's live subscriptions, by clientId (absent: none).
        memberships: The gateway's membership tables, current (``None``: a membership gives no values).
        now_ms: The wall clock in epoch milliseconds: a subscription run out by then is left out.
    """

    def __init__(
        self,
        rules: SyncRules | None,
        connections: Iterable[Connection] = (),
        subscriptions: Mapping[str, Sequence[Subscription]] | None = None,
        memberships: MembershipSource | None = None,
        now_ms: int | None = None,
    ) -> None:
        self.rules = rules
        self._subscriptions = dict(subscriptions or {})
        self._memberships = _SharedAnswers(memberships) if memberships is not None else None
        self._now_ms = now_ms
        self._membership_tables = rules.membership_tables() if rules is not None else frozenset()
        self._index = ScopeIndex()
        self._scopes: dict[str, Scope] = {}
        self._groups: dict[str, dict[str, Connection]] = {}
        self._group_of: dict[str, str] = {}
        for connection in connections:
            self.add(connection)

    def add(self, connection: Connection) -> None:
        """Index ``connection`` (replacing it if indexed) under its claims and its client's subscriptions."""
        self.remove(connection.connection_id)
        held = self._subscriptions.get(connection.client_id, ())
        key = group_key(connection, held, self._now_ms)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = {}
            scope = resolve_scope(self.rules, connection.claims, held, self._memberships, self._now_ms)
            self._scopes[key] = scope
            self._index.put(key, scope)
        group[connection.connection_id] = connection
        self._group_of[connection.connection_id] = key

    def remove(self, connection_id: str) -> None:
        """Forget a session (nothing when it is not indexed)."""
        key = self._group_of.pop(connection_id, None)
        if key is None:
            return
        group = self._groups[key]
        group.pop(connection_id, None)
        if not group:
            del self._groups[key]
            del self._scopes[key]
            self._index.remove(key)

    def __len__(self) -> int:
        return len(self._group_of)

    def scope_of(self, connection_id: str) -> Scope | None:
        """The scope an indexed session is judged by (``None``: not indexed)."""
        key = self._group_of.get(connection_id)
        return self._scopes[key] if key is not None else None

    def recipients(self, entry: LogEntry) -> list[Connection]:
        """The sessions ``entry`` reaches: their scope covers its row before or after it, and it is not their own."""
        return [connection for connection, _ in self._reached(entry)]

    def _reached(self, entry: LogEntry) -> list[tuple[Connection, bool]]:
        """The sessions ``entry`` reaches, each with whether it moves the row across the session's scope
        (:meth:`~lakesync.core.scope.Scope.crosses`)."""
        found: list[tuple[Connection, bool]] = []
        author = entry.delta.client_id
        table, before, after = entry.shard.table, entry.before, entry.after
        for key in self._index.candidates(table, before, after):
            scope = self._scopes[key]
            if scope.change_visible(table, before, after):
                crosses = scope.crosses(table, before, after)
                found.extend((c, crosses) for c in self._groups[key].values() if c.client_id != author)
        return found

    def dependents(self, entry: LogEntry) -> list[Connection]:
        """The sessions whose scope ``entry`` may change: it changes a membership row their scope read (its author's
        sessions included)."""
        table, before, after = entry.shard.table, entry.before, entry.after
        if table not in self._membership_tables:
            return []
        found: list[Connection] = []
        for key in self._index.dependents(table, before, after):
            if self._scopes[key].depends_on(table, before, after):
                found.extend(self._groups[key].values())
        return found

    def plan(self, entries: Sequence[LogEntry]) -> dict[str, tuple[Connection, Delivery]]:
        """Connection id -> the session and its :class:`Delivery`, for each session that receives an entry or is
        told to pull."""
        out: dict[str, tuple[Connection, Delivery]] = {}

        def of(connection: Connection) -> Delivery:
            held = out.get(connection.connection_id)
            if held is None:
                held = out[connection.connection_id] = (connection, Delivery())
            return held[1]

        for entry in entries:
            for connection, crosses in self._reached(entry):
                delivery = of(connection)
                if crosses:
                    # A row moved across the scope: its change alone would show values the session may no longer
                    # read, or a partial row. Its pull sends a drop or the row whole (gateway/scope_moves.py).
                    delivery.pull_at = max(entry.commit_hlc, delivery.pull_at or 0)
                else:
                    delivery.entries.append(entry)
            for connection in self.dependents(entry):
                delivery = of(connection)
                delivery.pull_at = max(entry.commit_hlc, delivery.pull_at or 0)
        return out

    def deliveries(self, entries: Sequence[LogEntry]) -> dict[str, tuple[Connection, list[LogEntry]]]:
        """Connection id -> the session and the entries it receives, in order, for each session that receives any."""
        return {cid: (c, d.entries) for cid, (c, d) in self.plan(entries).items() if d.entries}
