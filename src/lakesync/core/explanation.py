"""What ``lakesync explain`` answers: its inputs (the client as the gateway knows it, the row as the stores hold it)
and its answer (:class:`Explanation`), each with its JSON shape (camelCase keys, HLCs as decimal strings, times as
ISO-8601 UTC). The judgement itself is :mod:`lakesync.core.explain`.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lakesync.core.canonical import JsonValue
from lakesync.core.claims import Claims
from lakesync.core.filters import MembershipSource
from lakesync.core.merge import RowState
from lakesync.core.row_history import HistoryDelta
from lakesync.core.rules import SyncRules
from lakesync.core.scope import Scope
from lakesync.core.streams import Subscription

__all__ = [
    "ClauseCheck",
    "ClientView",
    "ColumnVerdict",
    "Delivery",
    "Explanation",
    "GrantCheck",
    "LostWrite",
    "Position",
    "RowEvidence",
    "ScopeVerdict",
    "Storage",
    "Write",
    "iso_ms",
]


def iso_ms(ms: int | None) -> str | None:
    """Epoch milliseconds as ISO-8601 UTC (``2026-12-07T23:00:00.123Z``), ``None`` for ``None``."""
    if ms is None:
        return None
    try:
        moment = datetime.datetime.fromtimestamp(ms // 1000, tz=datetime.UTC)
    except (OverflowError, ValueError, OSError):  # past year 9999: an HLC's wall clock can name it
        return f"{ms} ms"
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


# --- inputs -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Position:
    """Where a client stands in the log: per shard key, the last sequence number it was handed (``source`` says
    what told it: ``cursor``, ``since-confirmed``, ``since-handed-out``)."""

    source: str
    positions: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class ClientView:
    """What the gateway knows of the client.

    Attributes:
        client_id: The client (a token's ``sub``).
        claims: Its token's claims (the server keeps none: the caller gives them).
        rules: The gateway's current rules (``None``: none stored, every row in scope).
        subscriptions: Its live stream subscriptions.
        memberships: The membership tables' rows now (``None``: not read; membership filters then hold for no row).
        other_rules: Another rules version to judge the row under (an earlier or a candidate one).
        served: The scopes pulls served the client lately, by fingerprint.
        position: Its position, when known.
    """

    client_id: str
    claims: Claims
    rules: SyncRules | None
    subscriptions: Sequence[Subscription] = ()
    memberships: MembershipSource | None = None
    other_rules: SyncRules | None = None
    served: Mapping[str, Scope] = field(default_factory=dict)
    position: Position | None = None


@dataclass(frozen=True, slots=True)
class RowEvidence:
    """What the stores hold of the row.

    Attributes:
        table: The table.
        row_id: The row id.
        history: Its committed deltas (:func:`~lakesync.core.row_history.combine`).
        complete: Whether ``history`` is all of it (the lake was read, or the buffer never released an entry).
        index: The buffer row index's state, or ``None`` (no entry).
        lake_state: The lake state table's row, or ``None``; ``lake_read`` says whether the lake was read at all.
        lake_read: Whether the lake was read.
        flushed_seq: The row's shard's flush mark (entries up to it are in the lake).
        released_seq: Entries up to it have left the buffer's log (a position behind it has expired).
        published_seq: Entries up to it were published for materialisation (``None``: never).
        notes: What could not be read, for people.
    """

    table: str
    row_id: str
    history: tuple[HistoryDelta, ...]
    complete: bool = True
    index: RowState | None = None
    lake_state: RowState | None = None
    lake_read: bool = False
    flushed_seq: int = 0
    released_seq: int = 0
    published_seq: int | None = None
    notes: tuple[str, ...] = ()


# --- outputs ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Write:
    """A committed delta as the explanation names it."""

    op: str
    client_id: str
    hlc: int
    delta_id: str
    shard: str
    seq: int
    committed_ms: int
    flushed_ms: int | None

    @classmethod
    def of(cls, entry: HistoryDelta) -> Write:
        """The write of one history entry."""
        d = entry.delta
        return cls(
            d.op.value, d.client_id, d.hlc, d.delta_id, entry.shard, entry.seq, entry.committed_ms, entry.flushed_ms
        )

    def to_json(self) -> dict[str, Any]:
        """``{op, clientId, hlc, deltaId, shard, seq, committedAt, flushedAt}`` (HLC as a decimal string)."""
        return {
            "op": self.op,
            "clientId": self.client_id,
            "hlc": str(self.hlc),
            "deltaId": self.delta_id,
            "shard": self.shard,
            "seq": self.seq,
            "committedAt": iso_ms(self.committed_ms),
            "flushedAt": iso_ms(self.flushed_ms),
        }


@dataclass(frozen=True, slots=True)
class LostWrite:
    """A column write that lost: to the version ``(to_hlc, to_client_id)``, a delete when ``by_delete``."""

    write: Write
    value: JsonValue
    to_hlc: int
    to_client_id: str
    by_delete: bool

    def to_json(self) -> dict[str, Any]:
        """The write, its value, and what it lost to."""
        lost_to = {"hlc": str(self.to_hlc), "clientId": self.to_client_id, "delete": self.by_delete}
        return {**self.write.to_json(), "value": self.value, "lostTo": lost_to}


@dataclass(frozen=True, slots=True)
class ColumnVerdict:
    """One column: its value and the write holding it (``None``: no live value), and the writes that lost."""

    column: str
    value: JsonValue
    winner: Write | None
    lost: tuple[LostWrite, ...]

    def to_json(self) -> dict[str, Any]:
        """``{column, value, winner, lost}``."""
        winner = None if self.winner is None else self.winner.to_json()
        return {"column": self.column, "value": self.value, "winner": winner, "lost": [w.to_json() for w in self.lost]}


@dataclass(frozen=True, slots=True)
class ClauseCheck:
    """One filter judged on the row: what the rules say (``source``: a literal, ``jwt:<claim>``, ``param:<name>``,
    or ``membership:<table>.<column>``), the values it resolved to for this client, the row's value and the result."""

    column: str
    op: str
    source: str
    values: tuple[str, ...]
    row_value: JsonValue
    row_has_column: bool
    holds: bool

    def to_json(self) -> dict[str, Any]:
        """``{column, op, source, values, rowValue, holds}`` (``rowValue`` absent when the row lacks the column)."""
        doc: dict[str, Any] = {"column": self.column, "op": self.op, "source": self.source, "values": list(self.values)}
        if self.row_has_column:
            doc["rowValue"] = self.row_value
        doc["holds"] = self.holds
        return doc


@dataclass(frozen=True, slots=True)
class GrantCheck:
    """A bucket or subscription judged on the row: whether it covers the table and whether the row meets it."""

    origin: str
    covers_table: bool
    matches: bool
    clauses: tuple[ClauseCheck, ...]

    def to_json(self) -> dict[str, Any]:
        """``{origin, coversTable, matches, filters}``."""
        return {
            "origin": self.origin,
            "coversTable": self.covers_table,
            "matches": self.matches,
            "filters": [c.to_json() for c in self.clauses],
        }


@dataclass(frozen=True, slots=True)
class ScopeVerdict:
    """Whether a scope covers the row, and why.

    ``label`` names the judgement (``now``, ``at``, ``rules vN``, ``served <fingerprint>``); ``judged_on`` the row
    values judged (``current``, ``before its delete``, ``at <time>``, ``absent``); ``covered`` is the scope's own
    answer (:meth:`~lakesync.core.scope.Scope.covers`), the grants say which bucket or stream gave it.
    """

    label: str
    rules_version: int | None
    covered: bool
    reason: str
    judged_on: str
    fingerprint: str
    grants: tuple[GrantCheck, ...] = ()
    refused: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The verdict as JSON."""
        return {
            "label": self.label,
            "rulesVersion": self.rules_version,
            "covered": self.covered,
            "reason": self.reason,
            "judgedOn": self.judged_on,
            "fingerprint": self.fingerprint,
            "grants": [g.to_json() for g in self.grants],
            "refusedSubscriptions": list(self.refused),
        }


@dataclass(frozen=True, slots=True)
class Delivery:
    """The latest change the client's scope lets through (``None``: none ever did), the client's position on its
    shard, and whether that position is past it (``None``: unknown, no position given)."""

    last_visible: Write | None
    visible_changes: int
    position_source: str | None
    position: int | None
    delivered: bool | None
    expired: bool
    reason: str

    def to_json(self) -> dict[str, Any]:
        """The delivery as JSON."""
        return {
            "lastVisibleChange": None if self.last_visible is None else self.last_visible.to_json(),
            "visibleChanges": self.visible_changes,
            "positionSource": self.position_source,
            "position": self.position,
            "delivered": self.delivered,
            "positionExpired": self.expired,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Storage:
    """Where the row's data stands: deltas not yet flushed (and since when), whether the row index and the lake's
    state table equal the fold of the history (``None``: not known), whether its last change was published for
    materialisation."""

    unflushed: int
    unflushed_since_ms: int | None
    index_agrees: bool | None
    lake_state_agrees: bool | None
    lake_state_current_to_flush: bool | None
    published: bool | None

    def to_json(self) -> dict[str, Any]:
        """The storage facts as JSON."""
        return {
            "unflushedDeltas": self.unflushed,
            "unflushedSince": iso_ms(self.unflushed_since_ms),
            "rowIndexAgrees": self.index_agrees,
            "lakeStateAgrees": self.lake_state_agrees,
            "lakeStateCurrentToFlush": self.lake_state_current_to_flush,
            "publishedForMaterialisation": self.published,
        }


@dataclass(frozen=True, slots=True)
class Explanation:
    """The whole answer for one client and one row (:func:`explain`)."""

    gateway: str
    client_id: str
    table: str
    row_id: str
    exists: bool
    values: dict[str, JsonValue] | None
    scopes: tuple[ScopeVerdict, ...]
    columns: tuple[ColumnVerdict, ...]
    deletes: tuple[Write, ...]
    tombstone: Write | None
    history: tuple[Write, ...]
    history_complete: bool
    delivery: Delivery
    storage: Storage
    at_ms: int | None = None
    values_at: dict[str, JsonValue] | None = None
    notes: tuple[str, ...] = ()

    @property
    def covered(self) -> bool:
        """Whether the client's scope covers the row now."""
        return self.scopes[0].covered

    def to_json(self) -> dict[str, Any]:
        """The answer as JSON, for tools."""
        return {
            "gateway": self.gateway,
            "clientId": self.client_id,
            "table": self.table,
            "rowId": self.row_id,
            "exists": self.exists,
            "values": self.values,
            "at": iso_ms(self.at_ms),
            "valuesAt": self.values_at,
            "scopes": [s.to_json() for s in self.scopes],
            "columns": [c.to_json() for c in self.columns],
            "deletes": [d.to_json() for d in self.deletes],
            "tombstone": None if self.tombstone is None else self.tombstone.to_json(),
            "history": [w.to_json() for w in self.history],
            "historyComplete": self.history_complete,
            "delivery": self.delivery.to_json(),
            "storage": self.storage.to_json(),
            "notes": list(self.notes),
        }
