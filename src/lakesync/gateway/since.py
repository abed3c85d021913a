"""The original client's ``since`` pulls, served so that it converges and never gets stuck (docs/since.md).

The original client (reference §16) keeps one number, ``lastSyncedHlc``: the ``serverHlc`` of its last push, or of
its last pull that applied something (an empty page leaves it). It applies a page in one transaction with plain
``INSERT INTO`` (failing on a row it already holds, which rolls the whole page back), ``UPDATE ... WHERE`` (a no-op on
a row it lacks) and ``DELETE``. When a pending local edit of the row exists it compares the two *deltas* by HLC: if
the local one wins the remote delta is skipped; if the remote one wins the two are merged, applied, and the local
edit is dropped from the outbox, never pushed.

What the server does about each of those:

* **Exact positions.** A session per client (:class:`SinceSession`, keyed by gateway and clientId) records every
  ``serverHlc`` handed to it with the log positions it stands for. A pull ``since`` one of them resumes from exactly
  there: nothing re-read, nothing committed late skipped.
* **Full rows, with the op the client can apply.** Each change is sent with its own op, HLC, clientId and deltaId but
  with the row's *full* state after it as columns (as the original gateway's merged log deltas do), so a remote delta
  that wins pairwise against a local edit leaves the client holding the server's row. The op follows what the client
  holds: ``INSERT`` for a row it cannot hold yet, ``UPDATE`` for one it holds (it could see the row before the change,
  or wrote the change itself), ``DELETE`` when the row is gone or left its buckets, nothing for a row it never could
  see. A page with nothing uncertain in it is exactly what the original gateway would send for a fresh client.
* **Row form where the server cannot know what the client holds** (:func:`row_form`): a ``DELETE`` followed by an
  ``INSERT`` of every live column, both with HLC 0 -- idempotent whatever the client holds, and losing pairwise
  against any pending local edit (which the client then keeps and pushes). Used for entries that may have been
  delivered already: the re-read window of an unknown ``since``; the page before a push (a push hands out a
  ``serverHlc`` standing for the positions the client last *confirmed*, since it does not say whether the client
  applied its last pull); everything after a client that had a session comes back with an unknown ``since`` (it
  restarted and forgot its position, so it resumes from the positions it last confirmed).
* **Redelivery.** A pushed delta that produced no log entry (a column lost, a duplicate, a delete) leaves the pusher
  with a row the server does not have, and no commit would ever send it back: the push records the row in the
  pusher's session (:func:`note_push`) and the next pull sends its current state in row form.

* **Resync behind a release.** A client whose position is behind a release of the log is sent the latest
  checkpoint's rows in row form, then the log from the checkpoint's positions (:mod:`lakesync.gateway.resync`); its
  handouts carry a :class:`ResyncMark`, and the session stays marked ``resynced`` (no plain ``INSERT`` any more).

A client without a session (the first pull) is served like the original gateway serves it: full rows from the first
entry after ``since`` (and the re-read window before a recent ``since`` in row form). Cursor pulls are unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from lakesync.core.canonical import JsonValue
from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta, make_delta
from lakesync.core.errors import CommitConflictError
from lakesync.core.log import CommitConflict
from lakesync.core.rules import Claims, SyncRules, row_matches
from lakesync.core.since import (
    MAX_PUSHED,
    MAX_REDELIVER,
    SESSION_TTL_S,
    Handout,
    Positions,
    RowKey,
    SinceSession,
)
from lakesync.ports import SinceSessionStore


def row_form(
    table: str, row_id: str, writer: str, values: Mapping[str, JsonValue] | None, *, held: bool
) -> list[RowDelta]:
    """A row's current state as the original applier applies it idempotently, whatever it holds: ``DELETE`` then
    ``INSERT`` of the live columns (``values`` not None), or just ``DELETE`` when the client may hold a row that is
    gone or invisible to it (``held``). HLC 0: a pending local edit of the row wins pairwise and is kept."""
    if values is None and not held:
        return []
    out = [make_delta(DeltaOp.DELETE, table=table, row_id=row_id, client_id=writer, hlc=0)]
    if values is not None:
        out.append(make_delta(DeltaOp.INSERT, table=table, row_id=row_id, client_id=writer, hlc=0, columns=values))
    return out


def full_row(
    delta: RowDelta,
    values: Mapping[str, JsonValue] | None,
    *,
    held: bool,
    before: Mapping[str, JsonValue] | None = None,
    hlc: int | None = None,
) -> RowDelta | None:
    """One change as the original applier should apply it: the delta's identity with the row's full state after it,
    ``INSERT`` for a row the client does not hold, ``UPDATE`` for one it holds (columns the row had ``before`` and no
    longer has -- a delete removed them -- set to null), ``DELETE`` when the row is gone or invisible (``values``
    None) and held, ``None`` when there is nothing for the client to do. ``hlc`` replaces the delta's HLC (0 for a
    client with a session: its pending local edits always win pairwise)."""
    stamp = delta.hlc if hlc is None else hlc
    if values is None:
        if not held:
            return None
        return replace(delta, op=DeltaOp.DELETE, columns=(), hlc=stamp)
    columns = [ColumnDelta(k, v) for k, v in values.items()]
    if held:
        columns.extend(ColumnDelta(k, None) for k in (before or {}) if k not in values)
    op = DeltaOp.UPDATE if held else DeltaOp.INSERT
    return replace(delta, op=op, columns=tuple(columns), hlc=stamp)


def visible_values(
    rules: SyncRules | None, claims: Claims, table: str, values: Mapping[str, JsonValue] | None
) -> dict[str, JsonValue] | None:
    """``values`` if the client may see the row, else ``None``."""
    if values is None or not row_matches(rules, claims, table, dict(values)):
        return None
    return dict(values)


def lost_rows(deltas: Sequence[RowDelta], receipts: Sequence[Any]) -> list[RowKey]:
    """Rows of pushed deltas whose push may leave the pusher holding what the server does not: a losing column, a
    duplicate, a delta the write rules rejected, or any delete (the client's row is gone while the server's may live
    on in newer columns).

    ``receipts`` are the push's :class:`~lakesync.gateway.push.DeltaReceipt` in the deltas' order.
    """
    out: dict[RowKey, None] = {}
    for delta, receipt in zip(deltas, receipts, strict=False):
        if (
            receipt.duplicate
            or receipt.rejected is not None
            or delta.op is DeltaOp.DELETE
            or any(not c.applied for c in receipt.columns)
        ):
            out[(delta.table, delta.row_id)] = None
    return list(out)


def merge_redeliver(current: Sequence[RowKey], more: Iterable[RowKey]) -> tuple[RowKey, ...]:
    """``current`` plus ``more`` (deduplicated, order kept), the newest :data:`MAX_REDELIVER`."""
    merged = dict.fromkeys([*current, *more])
    return tuple(merged)[-MAX_REDELIVER:]


def note_push(
    store: SinceSessionStore | None,
    gateway: str,
    client_id: str,
    deltas: Sequence[RowDelta],
    receipts: Sequence[Any],
    server_hlc: int,
    now_s: int,
    *,
    prefetched: bool = False,
    session: SinceSession | None = None,
    last_seen: int = 0,
    attempts: int = 5,
) -> None:
    """Record a push in the pusher's session, if it has one (only ``since`` clients do): the ``serverHlc`` it hands
    out resumes from the positions the client last confirmed, with the entries handed out since then uncertain (the
    client may or may not have applied its last pull); rows that may differ at the pusher are queued for redelivery.
    With ``prefetched``, ``session`` is the session as the caller read it while the push committed.

    ``last_seen`` is the push's ``lastSeenHlc``: the original client sends the ``serverHlc`` of the last page it
    applied (or of its last push), so a handout of that ``serverHlc`` is confirmed as a ``since`` would confirm it,
    and the push resumes from it (mid-resync: from the page after it, not from where the pull before confirmed).

    Raises:
        CommitConflictError: the session kept changing under concurrent requests of the same client.
    """
    if store is None:
        return
    lost = lost_rows(deltas, receipts)
    rejected = [(d.table, d.row_id) for d, r in zip(deltas, receipts, strict=False) if r.rejected is not None]
    for attempt in range(attempts):
        # The first attempt may use the session the caller read meanwhile (``prefetched``); a retry reads again.
        if attempt or not prefetched:
            session = store.get(gateway, client_id)
        if session is None:
            if not rejected:
                return
            # A client that pushes before its first pull holds rows the write rules refused: its first pull, served
            # as for a client without a session, puts them right.
            updated = SinceSession(redeliver=merge_redeliver((), rejected), pushed=merge_redeliver((), rejected))
            try:
                store.put(gateway, client_id, updated, now_s + SESSION_TTL_S)
            except CommitConflict:
                continue
            return
        resumed = _resumed(session, last_seen)
        updated = replace(
            session.handed(replace(resumed, server_hlc=server_hlc)),
            redeliver=merge_redeliver(session.redeliver, lost)[-MAX_REDELIVER:],
            pushed=merge_redeliver(session.pushed, ((d.table, d.row_id) for d in deltas))[-MAX_PUSHED:],
        )
        if session.handout(last_seen) is not None:  # confirmed as a `since` confirms it
            updated = replace(updated, confirmed=dict(resumed.positions), resync=resumed.resync)
        try:
            store.put(gateway, client_id, updated, now_s + SESSION_TTL_S)
        except CommitConflict:
            continue
        return
    raise CommitConflictError(f"The sync session of client {client_id!r} is being changed concurrently; retry")


def _resumed(session: SinceSession, last_seen: int) -> Handout:
    """Where a push resumes the client (``server_hlc`` left 0): from the handout of ``last_seen`` when the session has
    it, the entries handed out after it uncertain; else from the positions the client last confirmed with a ``since``,
    everything handed out since uncertain (mid-resync, the resync where it last confirmed it stood)."""
    seen = session.handout(last_seen) if last_seen else None
    if seen is not None:
        later = session.handouts[session.handouts.index(seen) + 1 :]
        uncertain = dict(seen.uncertain or {})
        for handout in later:
            uncertain = _furthest(_furthest(uncertain, handout.positions), handout.uncertain)
        return Handout(0, dict(seen.positions), uncertain or None, seen.resync)
    latest = session.handouts[-1] if session.handouts else None
    base = session.confirmed if session.confirmed is not None else (latest.positions if latest else {})
    reach = _furthest(latest.positions, latest.uncertain) if latest is not None else None
    return Handout(0, dict(base), reach, session.resync)


def _furthest(a: Positions, b: Positions | None) -> dict[str, int]:
    out = dict(a)
    for key, seq in (b or {}).items():
        out[key] = max(out.get(key, 0), seq)
    return out


__all__ = ["full_row", "lost_rows", "merge_redeliver", "note_push", "row_form", "visible_values"]
