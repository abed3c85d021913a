"""Rows that a write moves across a client's scope, as a cursor pull with a scope serves them (docs/streams.md, "Rows
that move").

A change is sent to a client when its scope covers the row before or after it. When it covers only one side, the
change alone would leave the client wrong:

* **a row leaving** (covered before, not after, and not deleted): the client would keep a row it may no longer see,
  with values it was not meant to read. It is sent a *drop* instead: a ``DELETE`` at HLC 0 under its own id, which
  no write can be (the scope difference's drop, :mod:`lakesync.gateway.scope_change`);
* **a row entering by an update** (covered after, not before, existing before): the change carries only the columns
  that won, so the client would hold a partial row. It is sent the row's whole state instead, each column with its
  real version (:func:`~lakesync.core.checkpoint.row_deltas` of the row index's row). That state may be newer than
  the change (the row index holds the row's latest version): per-column LWW makes the later changes the client then
  receives a no-op or a step forward, never a step back. When the row index does not hold the change yet (its rows
  are written just after the commit, on the chunk's turn), the pull answers 503 and the client retries: it never
  receives a state older than the change.

Deletes and inserts of new rows need nothing: a delete is whole, and a new row's change is its whole state.
"""

from __future__ import annotations

from collections.abc import Sequence

from lakesync.core.checkpoint import row_deltas
from lakesync.core.delta import DeltaOp, RowDelta, make_delta
from lakesync.core.errors import StorageBusyError
from lakesync.core.log import LogEntry
from lakesync.core.scope import Scope
from lakesync.ports import BufferStore

__all__ = ["drop_delta", "shape_moves"]


def drop_delta(table: str, row_id: str, subscriber: str) -> RowDelta:
    """The delete telling a client to drop a row that left its scope: HLC 0, under its own id."""
    return make_delta(DeltaOp.DELETE, table=table, row_id=row_id, client_id=subscriber, hlc=0)


def shape_moves(
    buffer: BufferStore, gateway: str, entries: Sequence[LogEntry], scope: Scope, subscriber: str
) -> list[LogEntry | RowDelta]:
    """``entries`` (each visible to ``scope``) as the client is sent them: a row leaving as a drop, a row entering by
    an update as its whole state (see the module docstring).

    Raises:
        StorageBusyError: the row index does not hold an entering row's change yet (503: retry).
    """
    moves = [e for e in entries if scope.crosses(e.shard.table, e.before, e.after)]
    if not moves:
        return list(entries)
    entering = [e for e in moves if scope.covers(e.shard.table, e.after)]
    keys = list(dict.fromkeys((e.shard.table, e.delta.row_id) for e in entering))
    stored = buffer.get_rows(gateway, keys) if keys else {}
    out: list[LogEntry | RowDelta] = []
    for entry in entries:
        table, row_id = entry.shard.table, entry.delta.row_id
        if not scope.crosses(table, entry.before, entry.after):
            out.append(entry)
        elif not scope.covers(table, entry.after):
            out.append(drop_delta(table, row_id, subscriber))
        else:
            row = stored.get((table, row_id))
            if row is None or row.version < entry.seq:
                raise StorageBusyError(f"The row index is catching up with a change of {table!r}; retry the pull")
            out.extend(row_deltas(row.state))
    return out
