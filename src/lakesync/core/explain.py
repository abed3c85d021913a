"""Why a client has (or has not) a row: the answer of ``lakesync explain`` and ``GET /v1/admin/explain/{gw}``.

Pure: it takes the row's history (:mod:`lakesync.core.row_history`, read from the lake and the buffer) and what the
gateway knows of the client, and judges them with the one merge rule (:mod:`lakesync.core.merge`) and the one rule
evaluation (:mod:`lakesync.core.scope`, :mod:`lakesync.core.rules`, :mod:`lakesync.core.filters`); it re-implements
neither. What it answers:

* **scope** -- whether the client's scope covers the row, under which rules version, through which bucket or
  subscription, and for each of their filters the values (claims, parameters, memberships) it compared with; now,
  at a given time (the row's values then, under the rules given), and under another rules version or the scopes the
  client was served lately;
* **columns** -- each column's winning write (client, HLC, deltaId, commit and flush time) and the writes that lost,
  with the version they lost to (a later write, or a delete); the deletes;
* **delivery** -- the latest change the client's scope lets through against the client's position on the row's shard
  (a cursor the caller passes, or what a ``since`` session records): the server keeps no cursor, so without one
  delivery is unknown;
* **storage** -- what is not flushed yet, whether the buffer's row index and the lake's state table equal the fold of
  the history, and whether the row's last change was published for materialisation.

Its inputs and answer are :mod:`lakesync.core.explanation`; rendering for people is :mod:`lakesync.core.explain_text`.
"""

from __future__ import annotations

from collections.abc import Sequence

from lakesync.core.delta import DeltaOp
from lakesync.core.explanation import (
    ClauseCheck,
    ClientView,
    ColumnVerdict,
    Delivery,
    Explanation,
    GrantCheck,
    LostWrite,
    Position,
    RowEvidence,
    ScopeVerdict,
    Storage,
    Write,
    iso_ms,
)
from lakesync.core.filters import Condition, Filter, Row
from lakesync.core.merge import RowState, Version, fold, merge
from lakesync.core.row_history import HistoryDelta
from lakesync.core.rules import SyncRules, resolve_bucket
from lakesync.core.scope import Scope, resolve_scope, resolve_stream

__all__ = ["explain"]


# --- scope ------------------------------------------------------------------------------------------------------


def _source(flt: Filter) -> str:
    if flt.membership is not None:
        return f"membership:{flt.membership.table}.{flt.membership.column}"
    return flt.value


def _grant_check(
    origin: str, filters: Sequence[Filter], condition: Condition, table: str, row: Row | None
) -> GrantCheck:
    checks = tuple(
        ClauseCheck(
            clause.column,
            clause.op.value,
            _source(flt),
            clause.values,
            None if row is None else row.get(clause.column),
            row is not None and clause.column in row,
            row is not None and clause.holds(row),
        )
        for flt, clause in zip(filters, condition.clauses, strict=True)
    )
    return GrantCheck(origin, condition.covers_table(table), condition.matches(table, row), checks)


def _grants(rules: SyncRules, scope: Scope, view: ClientView, table: str, row: Row | None) -> tuple[GrantCheck, ...]:
    """Each bucket and each subscription in force, resolved as :func:`~lakesync.core.scope.resolve_scope` resolves
    them (the same calls), judged on the row."""
    checks = [
        _grant_check(f'Bucket "{b.name}"', b.filters, resolve_bucket(b, view.claims, view.memberships), table, row)
        for b in rules.buckets
    ]
    for sub in scope.subscriptions:
        stream = rules.stream(sub.stream)
        if stream is not None:
            condition = resolve_stream(stream, view.claims, sub, view.memberships)
            checks.append(_grant_check(sub.label(), stream.filters, condition, table, row))
    return tuple(checks)


def _reason(scope: Scope, rules: SyncRules | None, grants: Sequence[GrantCheck], table: str, covered: bool) -> str:
    if rules is None:
        return "no sync rules: every row is in scope"
    if table in scope.hidden:
        return f"table {table!r} is admin-only: no client sees it"
    matching = [g.origin for g in grants if g.matches]
    if covered and not matching:
        return "the rules neither confine with buckets nor streams: every row is in scope"
    if covered:
        return "in scope through " + ", ".join(matching)
    if not any(g.covers_table for g in grants):
        return f"no bucket or subscription covers table {table!r}"
    return "no bucket or subscription in force matches the row"


def _verdict(
    label: str, rules: SyncRules | None, view: ClientView, table: str, row: Row | None, judged_on: str, now_ms: int
) -> tuple[ScopeVerdict, Scope]:
    """The verdict of the client's scope under ``rules`` at ``now_ms``, and that scope."""
    scope = resolve_scope(rules, view.claims, view.subscriptions, view.memberships, now_ms)
    covered = scope.covers(table, row)
    grants = _grants(rules, scope, view, table, row) if rules is not None else ()
    refused = tuple(f"{sub.label()}: {why.reason}" for sub, why in scope.refused)
    version = None if rules is None else rules.version
    reason = _reason(scope, rules, grants, table, covered)
    return ScopeVerdict(label, version, covered, reason, judged_on, scope.fingerprint, grants, refused), scope


def _held_verdict(fingerprint: str, scope: Scope, table: str, row: Row | None, judged_on: str) -> ScopeVerdict:
    covered = scope.covers(table, row)
    reason = "the scope a pull served the client covers the row" if covered else "that served scope does not cover it"
    return ScopeVerdict(f"served {fingerprint}", None, covered, reason, judged_on, fingerprint)


# --- columns ----------------------------------------------------------------------------------------------------


def _columns(history: Sequence[HistoryDelta], final: RowState | None) -> tuple[ColumnVerdict, ...]:
    """Each written column: the write holding it and the writes that lost, as :func:`~lakesync.core.merge.merge`
    judges each delta against the final state (a receipt applied is the write holding the column; one not applied
    names the version it lost to)."""
    if final is None:
        return ()
    winners: dict[str, HistoryDelta] = {}
    lost: dict[str, list[LostWrite]] = {}
    tomb = final.tombstone
    for entry in history:
        if entry.delta.op is DeltaOp.DELETE:
            continue
        values = entry.delta.values()
        for receipt in merge(final, entry.delta).receipts:
            if receipt.applied:
                winners.setdefault(receipt.column, entry)
                continue
            to = Version(receipt.winner_hlc, receipt.winner_client_id)
            by_delete = tomb is not None and to == tomb and receipt.column not in final.columns
            lost.setdefault(receipt.column, []).append(
                LostWrite(Write.of(entry), values[receipt.column], to.hlc, to.client_id, by_delete)
            )
    verdicts = []
    for name in sorted({*winners, *lost}):
        col = final.columns.get(name)
        winner = winners.get(name)
        held = None if winner is None else Write.of(winner)
        verdicts.append(ColumnVerdict(name, None if col is None else col.value, held, tuple(lost.get(name, ()))))
    return tuple(verdicts)


# --- delivery ---------------------------------------------------------------------------------------------------


def _visible_changes(history: Sequence[HistoryDelta], scope: Scope, table: str) -> list[HistoryDelta]:
    """The changes the scope lets through: judged on the row before and after each (as a pull judges a log entry's
    images), the row folded change after change with :func:`~lakesync.core.merge.merge`."""
    state: RowState | None = None
    visible = []
    for entry in history:
        before = None if state is None else state.values()
        state = merge(state, entry.delta).state
        if scope.change_visible(table, before, state.values()):
            visible.append(entry)
    return visible


def _delivery(evidence: RowEvidence, scope: Scope, position: Position | None) -> Delivery:
    visible = _visible_changes(evidence.history, scope, evidence.table)
    last = visible[-1] if visible else None
    last_write = None if last is None else Write.of(last)
    if position is None:
        why = "no cursor given and no since session: the server keeps no cursor, so delivery is unknown"
        return Delivery(last_write, len(visible), None, None, None, False, why)
    if last is None:
        return Delivery(None, 0, position.source, None, None, False, "no change of the row was ever in its scope")
    at = position.positions.get(last.shard)
    expired = at is not None and at < evidence.released_seq
    if at is None:
        why = f"its position names no entry of shard {last.shard}: the change is not delivered yet"
        return Delivery(last_write, len(visible), position.source, None, False, False, why)
    delivered = at >= last.seq
    why = (
        f"position {at} is at or past the change's entry {last.seq}: delivered"
        if delivered
        else f"position {at} is before the change's entry {last.seq}: its next pull delivers it"
    )
    if expired:
        why += f"; the position is behind the log's release mark {evidence.released_seq}: its next pull gets 410"
    return Delivery(last_write, len(visible), position.source, at, delivered, expired, why)


# --- storage ----------------------------------------------------------------------------------------------------


def _storage(evidence: RowEvidence, final: RowState | None) -> Storage:
    history = evidence.history
    unflushed = [e for e in history if e.flushed_ms is None and e.seq > evidence.flushed_seq]
    since = min((e.committed_ms for e in unflushed), default=None)
    index_agrees = (evidence.index == final) if evidence.complete else None
    lake_agrees = current = None
    if evidence.lake_read:
        lake_agrees = evidence.lake_state == final
        flushed = fold(e.delta for e in history if e.flushed_ms is not None or e.seq <= evidence.flushed_seq)
        current = evidence.lake_state == flushed
    published = None
    if history and evidence.published_seq is not None:
        last = history[-1]
        published = last.seq <= evidence.published_seq
    elif history:
        published = False
    return Storage(len(unflushed), since, index_agrees, lake_agrees, current, published)


# --- the answer -------------------------------------------------------------------------------------------------


def _judged_row(final: RowState | None, history: Sequence[HistoryDelta]) -> tuple[Row | None, str]:
    """The values to judge the scope on: the current ones, or for a deleted row the last it had."""
    if final is None:
        return None, "absent (no committed delta)"
    values = final.values()
    if values is not None:
        return values, "current values"
    state: RowState | None = None
    last: Row | None = None
    for entry in history:
        state = merge(state, entry.delta).state
        current = state.values()
        if current is not None:
            last = current
    return last, "its values before its delete" if last is not None else "absent (never had values)"


def explain(
    gateway: str, view: ClientView, evidence: RowEvidence, *, now_ms: int, at_ms: int | None = None
) -> Explanation:
    """Explain ``evidence``'s row to an operator, for the client ``view`` describes (see the module)."""
    history = evidence.history
    final = fold(e.delta for e in history)
    row, judged_on = _judged_row(final, history)
    now, scope = _verdict("now", view.rules, view, evidence.table, row, judged_on, now_ms)
    scopes = [now]
    values_at = None
    if at_ms is not None:
        earlier = [e for e in history if e.committed_ms <= at_ms]
        state_at = fold(e.delta for e in earlier)
        row_at, on_at = _judged_row(state_at, earlier)
        values_at = None if state_at is None else state_at.values()
        at = _verdict("at", view.rules, view, evidence.table, row_at, f"{on_at} at {iso_ms(at_ms)}", at_ms)[0]
        scopes.append(at)
    if view.other_rules is not None:
        label = f"rules v{view.other_rules.version}"
        scopes.append(_verdict(label, view.other_rules, view, evidence.table, row, judged_on, now_ms)[0])
    for fingerprint, held in view.served.items():
        scopes.append(_held_verdict(fingerprint, held, evidence.table, row, judged_on))
    deletes = tuple(Write.of(e) for e in history if e.delta.op is DeltaOp.DELETE)
    tomb = None if final is None else final.tombstone
    tombstone = next((d for d in deletes if (d.hlc, d.client_id) == (tomb.hlc, tomb.client_id)), None) if tomb else None
    notes = list(evidence.notes)
    if not evidence.complete:
        notes.append("the history is incomplete (the lake was not read and the buffer released older entries)")
    if view.memberships is None and view.rules is not None and view.rules.membership_tables():
        notes.append("membership tables were not read: membership filters hold for no row here")
    return Explanation(
        gateway,
        view.client_id,
        evidence.table,
        evidence.row_id,
        final is not None and final.exists,
        None if final is None else final.values(),
        tuple(scopes),
        _columns(history, final),
        deletes,
        tombstone,
        tuple(Write.of(e) for e in history),
        evidence.complete,
        _delivery(evidence, scope, view.position),
        _storage(evidence, final),
        at_ms,
        values_at,
        tuple(notes),
    )
