"""A client's scope: its buckets and its subscriptions, resolved once into plain conditions.

:func:`resolve_scope` evaluates the rules for one client: every bucket (:func:`lakesync.core.rules.resolve_bucket`)
and every live, allowed subscription (:func:`check_subscription`, then the stream's filters with the subscription's
parameters) against its claims and the membership tables (:class:`~lakesync.core.filters.MembershipSource`), giving
a :class:`Scope` of plain :class:`~lakesync.core.filters.Condition` s. A row is in scope when it meets any of them and
its table is not admin-only; rules that neither confine (no bucket, no stream) nor exist put every row in scope, as
:func:`~lakesync.core.rules.row_matches` does. The evaluation of a condition is the buckets' own
(:meth:`~lakesync.core.filters.Clause.holds`), and writes are judged by the same code over the scope's grants
(:func:`lakesync.core.rules.check_write_in`).

The scope carries what its users need:

* :attr:`Scope.fingerprint` -- a digest of what the scope covers (not of how the rules spell it), which a cursor
  records; an equal fingerprint means the client needs nothing when the rules, its claims or its memberships change.
* :func:`difference` -- the conditions that entered and left between two scopes, so that a backfill fetches the rows
  entering (:meth:`ScopeDifference.enters`) and sends deletes for the rows leaving (:meth:`ScopeDifference.leaves`).
* :meth:`Scope.index_keys` and :func:`row_keys` -- keys through which a broadcaster finds the sessions a row change
  concerns without evaluating every session (:class:`ScopeIndex`): each condition is indexed by its most selective
  ``eq``/``in`` clause, or by a catch-all for its tables when it has none. The membership queries a scope read are
  indexed the same way (:meth:`ScopeIndex.dependents`): a change of a membership row finds the sessions whose scope
  to resolve again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from lakesync.core.canonical import js_string_coerce
from lakesync.core.claims import Claims
from lakesync.core.delta import RowDelta
from lakesync.core.filters import (
    INDEXABLE_OPS,
    Condition,
    MembershipQuery,
    MembershipSource,
    Row,
    resolve_filter,
)
from lakesync.core.rules import (
    Grant,
    SyncRules,
    WriteRefusal,
    bucket_grants,
    check_write_in,
    confines,
)
from lakesync.core.streams import (
    EXPIRED,
    UNKNOWN_STREAM,
    Stream,
    Subscription,
    SubscriptionRefusal,
    check_stream_params,
    stream_params,
)

EVERYTHING = Condition()
"""The condition of rules that do not confine: every row of every table."""


def check_subscription(
    rules: SyncRules | None,
    claims: Claims,
    subscription: Subscription,
    memberships: MembershipSource | None = None,
) -> SubscriptionRefusal | None:
    """Why a client with ``claims`` may not hold ``subscription``, or ``None`` when it may.

    The codes are those of :mod:`lakesync.core.streams`: ``UNKNOWN_STREAM``, ``UNEXPECTED_PARAM``, ``INVALID_PARAM``,
    ``MISSING_PARAM``, ``NOT_ALLOWED`` (expiry is not judged here; :func:`resolve_scope` drops what has run out).
    """
    stream = rules.stream(subscription.stream) if rules is not None else None
    if stream is None:
        return SubscriptionRefusal(UNKNOWN_STREAM, f'The sync rules have no stream "{subscription.stream}"')
    return check_stream_params(stream, claims, subscription.param_map, memberships)


def resolve_stream(
    stream: Stream, claims: Claims, subscription: Subscription, memberships: MembershipSource | None = None
) -> Condition:
    """The rows ``subscription`` (already checked) gives of ``stream``, as a plain condition."""
    params = stream_params(stream, claims, subscription)
    return Condition((stream.table,), tuple(resolve_filter(f, claims, params, memberships) for f in stream.filters))


class _Memo:
    """A membership source that answers each query once (a scope reads a membership for every filter naming it)."""

    def __init__(self, source: MembershipSource) -> None:
        self._source = source
        self._answers: dict[MembershipQuery, Collection[str]] = {}

    @property
    def queries(self) -> frozenset[MembershipQuery]:
        """Every query asked so far."""
        return frozenset(self._answers)

    def member_values(self, query: MembershipQuery) -> Collection[str]:
        if query not in self._answers:
            self._answers[query] = frozenset(self._source.member_values(query))
        return self._answers[query]


@dataclass(frozen=True, slots=True)
class IndexKey:
    """A key of the broadcaster's index: rows of ``table`` (``None``: any table) whose ``column`` equals ``value``;
    with ``column`` ``None``, every row of the table (a catch-all)."""

    table: str | None
    column: str | None = None
    value: str | None = None


def condition_keys(condition: Condition) -> frozenset[IndexKey]:
    """Keys such that every row meeting ``condition`` (satisfiable) has one of them among its :func:`row_keys`."""
    tables: tuple[str | None, ...] = condition.tables or (None,)
    indexable = [c for c in condition.clauses if c.op in INDEXABLE_OPS]
    if not indexable:
        return frozenset(IndexKey(t) for t in tables)
    best = min(indexable, key=lambda c: (len(c.values), c.column))
    return frozenset(IndexKey(t, best.column, v) for t in tables for v in best.values)


def row_keys(table: str, row: Row | None) -> frozenset[IndexKey]:
    """The keys under which the sessions ``row`` of ``table`` may concern are indexed (``None``: an absent row)."""
    keys = {IndexKey(table), IndexKey(None)}
    for column, value in (row or {}).items():
        text = js_string_coerce(value)
        keys.add(IndexKey(table, column, text))
        keys.add(IndexKey(None, column, text))
    return frozenset(keys)


def _fingerprint(conditions: Iterable[Condition], hidden: Iterable[str]) -> str:
    doc = {
        "conditions": sorted(_json_text(c.to_json()) for c in conditions),
        "hidden": sorted(hidden),
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Scope:
    """What one client may see and write: :attr:`conditions` (canonical, each satisfiable) over every table but the
    :attr:`hidden` (admin-only) ones.

    Build it with :func:`resolve_scope`. :attr:`grants` keep each bucket's and subscription's condition with its write
    policy, for :meth:`check_write`; :attr:`subscriptions` are the ones in force, :attr:`refused` those dropped with
    why (run out, no longer allowed, their stream gone); :attr:`memberships` the membership queries it read, whose
    answers a change of a membership row may alter (:meth:`depends_on`).
    """

    conditions: frozenset[Condition]
    hidden: frozenset[str] = frozenset()
    grants: tuple[Grant, ...] = ()
    subscriptions: tuple[Subscription, ...] = ()
    refused: tuple[tuple[Subscription, SubscriptionRefusal], ...] = ()
    fingerprint: str = ""
    rules: SyncRules | None = field(default=None, compare=False, repr=False)
    memberships: frozenset[MembershipQuery] = frozenset()

    def covers(self, table: str, row: Row | None) -> bool:
        """Whether the client may see ``row`` of ``table`` (``None``: the row does not exist)."""
        if table in self.hidden:
            return False
        return any(c.matches(table, row) for c in self.conditions)

    def change_visible(self, table: str, before: Row | None, after: Row | None) -> bool:
        """Whether a change of a row of ``table`` from ``before`` to ``after`` reaches the client: the row was in
        scope before it or is after it."""
        return self.covers(table, before) or self.covers(table, after)

    def crosses(self, table: str, before: Row | None, after: Row | None) -> bool:
        """Whether a write moves an existing row of ``table`` across the scope: out of it (``before`` covered,
        ``after`` an existing row that is not), or into it by an update (``before`` an existing row that is not
        covered, ``after`` covered). Such a change alone leaves a client that follows the scope wrong: it would keep
        the values of a row it may no longer see, or hold only the columns the update carried."""
        if before is None or after is None:
            return False
        return self.covers(table, before) != self.covers(table, after)

    def check_write(self, delta: RowDelta, before: Row | None, after: Row | None) -> WriteRefusal | None:
        """Why the client may not make ``delta`` (:func:`lakesync.core.rules.check_write` over the scope's grants:
        its buckets' and its subscriptions'), or ``None``."""
        return check_write_in(self.rules, self.grants, delta, before, after)

    def index_keys(self) -> frozenset[IndexKey]:
        """The keys to index this scope under (:func:`condition_keys` of every condition)."""
        return frozenset(k for c in self.conditions for k in condition_keys(c))

    def depends_on(self, table: str, before: Row | None, after: Row | None) -> bool:
        """Whether changing a row of ``table`` from ``before`` to ``after`` may change this scope: the row gives, or
        gave, a value to one of the membership queries it read (so the scope must be resolved again)."""
        return any(
            q.table == table and any(row is not None and q.contributes(row) is not None for row in (before, after))
            for q in self.memberships
        )

    def dependency_keys(self) -> frozenset[IndexKey]:
        """The keys to index this scope's membership queries under, for :meth:`depends_on`."""
        return frozenset(k for q in self.memberships for k in condition_keys(Condition((q.table,), q.where)))

    def to_json(self) -> dict[str, Any]:
        """What the scope covers, as JSON (``{"conditions", "hidden"}``): enough to judge rows by it after the rules,
        the claims or the memberships it came from have changed (:func:`held_scope`)."""
        return {
            "conditions": sorted((c.to_json() for c in self.conditions), key=_json_text),
            "hidden": sorted(self.hidden),
        }


def _json_text(doc: object) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def held_scope(doc: object) -> Scope:
    """The scope :meth:`Scope.to_json` gave: what it covers (:meth:`Scope.covers`, :func:`difference`), without the
    grants, subscriptions and rules it was resolved from, with its fingerprint computed again.

    Raises:
        ValueError: not such a document.
    """
    if not isinstance(doc, dict) or set(doc) != {"conditions", "hidden"}:
        raise ValueError("a held scope is {conditions, hidden}")
    raw_conditions, hidden = doc["conditions"], doc["hidden"]
    if not isinstance(raw_conditions, list) or not isinstance(hidden, list):
        raise ValueError("a held scope has a list of conditions and a list of hidden tables")
    if not all(isinstance(t, str) for t in hidden):
        raise ValueError("hidden tables are strings")
    conditions = frozenset(Condition.from_json(c).canonical() for c in raw_conditions)
    return Scope(conditions, frozenset(hidden), fingerprint=_fingerprint(conditions, hidden))


UNCONFINED = Scope(frozenset({EVERYTHING}), fingerprint=_fingerprint((EVERYTHING,), ()))
"""The scope of a gateway without rules: every row of every table."""


def _subscription_grants(
    rules: SyncRules,
    claims: Claims,
    subscriptions: Iterable[Subscription],
    memberships: MembershipSource | None,
    now_ms: int | None,
) -> tuple[list[Grant], list[Subscription], list[tuple[Subscription, SubscriptionRefusal]]]:
    latest: dict[Subscription, Subscription] = {}
    for sub in subscriptions:
        held = latest.get(sub)
        if held is None or (
            held.expires_at is not None and (sub.expires_at is None or sub.expires_at > held.expires_at)
        ):
            latest[sub] = sub
    grants: list[Grant] = []
    accepted: list[Subscription] = []
    refused: list[tuple[Subscription, SubscriptionRefusal]] = []
    for sub in sorted(latest.values(), key=lambda s: (s.stream, s.params)):
        if sub.expired(now_ms):
            refused.append((sub, SubscriptionRefusal(EXPIRED, f"{sub.label()} has run out")))
            continue
        refusal = check_subscription(rules, claims, sub, memberships)
        if refusal is not None:
            refused.append((sub, refusal))
            continue
        stream = rules.stream(sub.stream)
        assert stream is not None
        accepted.append(sub)
        grants.append(Grant(sub.label(), resolve_stream(stream, claims, sub, memberships), stream.write))
    return grants, accepted, refused


def resolve_scope(
    rules: SyncRules | None,
    claims: Claims,
    subscriptions: Iterable[Subscription] = (),
    memberships: MembershipSource | None = None,
    now_ms: int | None = None,
) -> Scope:
    """The scope of a client with ``claims`` holding ``subscriptions`` under ``rules``.

    Each subscription is judged again (:func:`check_subscription`): one whose stream is gone, whose parameters are no
    longer allowed (a membership row removed) or that has run out at ``now_ms`` is left out and listed in
    :attr:`Scope.refused`. Of subscriptions equal but for their expiry, the one lasting longest counts.
    """
    if rules is None:
        return UNCONFINED
    source = _Memo(memberships) if memberships is not None else None
    hidden = frozenset(name for name, policy in rules.tables.items() if policy.admin_only)
    if not confines(rules):
        return Scope(frozenset({EVERYTHING}), hidden, fingerprint=_fingerprint((EVERYTHING,), hidden), rules=rules)
    grants = bucket_grants(rules, claims, source)
    stream_grants, accepted, refused = _subscription_grants(rules, claims, subscriptions, source, now_ms)
    grants.extend(stream_grants)
    conditions = frozenset(g.condition.canonical() for g in grants if g.condition.satisfiable)
    return Scope(
        conditions,
        hidden,
        tuple(grants),
        tuple(accepted),
        tuple(refused),
        _fingerprint(conditions, hidden),
        rules,
        source.queries if source is not None else frozenset(),
    )


@dataclass(frozen=True, slots=True)
class ScopeDifference:
    """How a client's scope changed from :attr:`old` to :attr:`new`.

    :attr:`entered` holds a condition for every row that may enter (the new conditions, and the new conditions on a
    table that stopped being admin-only); :attr:`left` one for every row that may leave. They are where to look, not
    the answer (a row meeting an entered condition may have been in scope already, or be on an admin-only table): a
    backfill queries the rows meeting :attr:`entered` and keeps those that :meth:`enters`; it sends deletes for the
    rows meeting :attr:`left` that :meth:`leaves`.
    """

    old: Scope
    new: Scope
    entered: tuple[Condition, ...]
    left: tuple[Condition, ...]

    @property
    def unchanged(self) -> bool:
        """Whether no row can enter or leave."""
        return not self.entered and not self.left

    def enters(self, table: str, row: Row | None) -> bool:
        """Whether ``row`` of ``table`` is in the new scope and was not in the old one."""
        return self.new.covers(table, row) and not self.old.covers(table, row)

    def leaves(self, table: str, row: Row | None) -> bool:
        """Whether ``row`` of ``table`` was in the old scope and is not in the new one."""
        return self.old.covers(table, row) and not self.new.covers(table, row)

    def entering(self, table: str, rows: Iterable[Row]) -> list[Row]:
        """The rows of ``table`` among ``rows`` that enter the scope, found through :attr:`entered`."""
        candidates = [c for c in self.entered if c.covers_table(table)]
        return [r for r in rows if any(c.matches(table, r) for c in candidates) and self.enters(table, r)]

    def leaving(self, table: str, rows: Iterable[Row]) -> list[Row]:
        """The rows of ``table`` among ``rows`` that leave the scope, found through :attr:`left`."""
        candidates = [c for c in self.left if c.covers_table(table)]
        return [r for r in rows if any(c.matches(table, r) for c in candidates) and self.leaves(table, r)]


def _gained(gainer: Scope, other: Scope) -> list[Condition]:
    """Conditions of ``gainer`` covering rows ``other`` may not: its own new conditions, and all of its conditions
    on each table hidden in ``other`` only."""
    gained = sorted(gainer.conditions - other.conditions, key=lambda c: json.dumps(c.to_json()))
    for table in sorted(other.hidden - gainer.hidden):
        gained.extend(c.restricted_to(table) for c in gainer.conditions if c.covers_table(table))
    return gained


def difference(old: Scope, new: Scope) -> ScopeDifference:
    """The conditions that entered and left a client's scope between ``old`` and ``new``."""
    if old.fingerprint == new.fingerprint and old.fingerprint:
        return ScopeDifference(old, new, (), ())
    return ScopeDifference(old, new, tuple(_gained(new, old)), tuple(_gained(old, new)))


class ScopeIndex:
    """Sessions indexed by their scopes' :meth:`~Scope.index_keys`: the broadcaster's way to the sessions a row change
    may concern, in time that grows with the keys of the row, not with the sessions."""

    def __init__(self) -> None:
        self._rows = _KeyIndex()
        self._memberships = _KeyIndex()

    def put(self, session: str, scope: Scope) -> None:
        """Index ``session`` under ``scope`` (replacing its previous scope)."""
        self._rows.put(session, scope.index_keys())
        self._memberships.put(session, scope.dependency_keys())

    def remove(self, session: str) -> None:
        """Forget ``session``."""
        self._rows.remove(session)
        self._memberships.remove(session)

    def candidates(self, table: str, before: Row | None, after: Row | None) -> set[str]:
        """Every session whose scope may cover the row before or after the change (a superset: confirm each with
        :meth:`Scope.change_visible`)."""
        return self._rows.find(row_keys(table, before) | row_keys(table, after))

    def dependents(self, table: str, before: Row | None, after: Row | None) -> set[str]:
        """Every session whose scope may change with this change of a membership row (a superset: confirm each
        with :meth:`Scope.depends_on`, then resolve its scope again and send the :func:`difference`)."""
        return self._memberships.find(row_keys(table, before) | row_keys(table, after))

    def __len__(self) -> int:
        return len(self._rows)


class _KeyIndex:
    """Sessions by key, and each session's keys."""

    def __init__(self) -> None:
        self._keys: dict[str, frozenset[IndexKey]] = {}
        self._sessions: dict[IndexKey, set[str]] = {}

    def put(self, session: str, keys: frozenset[IndexKey]) -> None:
        self.remove(session)
        self._keys[session] = keys
        for key in keys:
            self._sessions.setdefault(key, set()).add(session)

    def remove(self, session: str) -> None:
        for key in self._keys.pop(session, ()):
            sessions = self._sessions[key]
            sessions.discard(session)
            if not sessions:
                del self._sessions[key]

    def find(self, keys: Iterable[IndexKey]) -> set[str]:
        found: set[str] = set()
        for key in keys:
            found |= self._sessions.get(key, set())
        return found

    def __len__(self) -> int:
        return len(self._keys)


__all__ = [
    "EVERYTHING",
    "UNCONFINED",
    "IndexKey",
    "Scope",
    "ScopeDifference",
    "ScopeIndex",
    "check_subscription",
    "condition_keys",
    "difference",
    "held_scope",
    "resolve_scope",
    "resolve_stream",
    "row_keys",
]
