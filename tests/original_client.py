"""A faithful model of the original LakeSync TypeScript client (reference §16: tracker, outbox, coordinator, applier),
used to check that it converges against us. It is deliberately as the original is, defects included:

* ``lastSyncedHlc := serverHlc`` after a push, and after a pull that applied a non-empty page (an empty page, or a
  failed apply, leaves it); ``hasMore`` is ignored; a sync is pull, then push; the first sync (``lastSyncedHlc`` 0)
  tries the checkpoint first and moves to its ``snapshotHlc`` whatever the apply did.
* A page is applied in one SQLite transaction with plain ``INSERT INTO t (_rowId, ...)``, ``UPDATE t SET ... WHERE
  _rowId = ?`` (nothing when no columns) and ``DELETE``; any error rolls the page back.
* A remote delta for a row with a pending outbox entry is resolved with the original's pairwise ``resolveLWW``
  against the *last* pending entry of that row (the map is built once per page): if the resolved delta carries the
  remote's clientId and HLC, the resolved delta is applied and the local entry acknowledged (dropped) at once -- not
  undone by a rollback -- otherwise the remote delta is skipped.
* Local writes go to SQLite at once and queue the delta (UPDATE carries only the written columns); the client's HLC
  never receives remote HLCs. A push sends up to 100 entries; on success they are acknowledged.

``apply_failures`` counts rolled-back pages: a client that keeps failing to apply is stuck.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lakesync.core.canonical import utf16_key
from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta, make_delta
from lakesync.core.hlc import HLC

Transport = Any
"""``push(client_id, deltas, last_seen) -> dict | None`` and ``pull(client_id, since, limit) -> dict | None`` (the
wire JSON bodies, ``None`` for a failed request) and ``checkpoint() -> (deltas, snapshot_hlc) | None``."""


@dataclass
class QueueEntry:
    id: int
    delta: RowDelta
    retry: int = 0


def resolve_lww(local: RowDelta, remote: RowDelta) -> RowDelta:
    """The original's pairwise ``resolveLWW`` (reference §3)."""
    if local.hlc > remote.hlc:
        winner = local
    elif local.hlc < remote.hlc:
        winner = remote
    else:
        winner = local if utf16_key(local.client_id) > utf16_key(remote.client_id) else remote
    if local.op is DeltaOp.DELETE and remote.op is DeltaOp.DELETE:
        return replace(winner, columns=())
    if local.op is DeltaOp.DELETE or remote.op is DeltaOp.DELETE:
        if winner.op is DeltaOp.DELETE:
            return replace(winner, columns=())
        return winner
    names = list(dict.fromkeys([*(c.column for c in local.columns), *(c.column for c in remote.columns)]))
    lv, rv = local.values(), remote.values()
    wv = winner.values()
    merged = []
    for name in names:
        if name in lv and name in rv:
            merged.append(ColumnDelta(name, wv[name]))
        elif name in lv:
            merged.append(ColumnDelta(name, lv[name]))
        else:
            merged.append(ColumnDelta(name, rv[name]))
    op = DeltaOp.INSERT if local.op is DeltaOp.INSERT and remote.op is DeltaOp.INSERT else DeltaOp.UPDATE
    return RowDelta(op, local.table, local.row_id, winner.client_id, tuple(merged), winner.hlc, winner.delta_id)


@dataclass
class OriginalClient:
    """One original client with its SQLite database, outbox and coordinator."""

    client_id: str
    transport: Transport
    tables: Mapping[str, Sequence[str]]
    wall_ms: Callable[[], int]
    last_synced: int = 0
    queue: list[QueueEntry] = field(default_factory=list)
    apply_failures: int = 0
    applied_pages: int = 0
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        self.db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        for table, columns in self.tables.items():
            cols = "".join(f', "{c}" TEXT' for c in columns)
            self.db.execute(f'CREATE TABLE "{table}" (_rowId TEXT PRIMARY KEY{cols})')
        self.hlc = HLC(self.wall_ms)

    # -- tracker: local writes --------------------------------------------------------------------------------------
    def holds(self, table: str, row_id: str) -> bool:
        return self.db.execute(f'SELECT 1 FROM "{table}" WHERE _rowId = ?', (row_id,)).fetchone() is not None

    def insert(self, table: str, row_id: str, values: Mapping[str, Any]) -> None:
        self._sql(make_delta("INSERT", table=table, row_id=row_id, client_id=self.client_id, hlc=0, columns=values))
        self._enqueue("INSERT", table, row_id, values)

    def update(self, table: str, row_id: str, values: Mapping[str, Any]) -> None:
        self._sql(make_delta("UPDATE", table=table, row_id=row_id, client_id=self.client_id, hlc=0, columns=values))
        self._enqueue("UPDATE", table, row_id, values)

    def delete(self, table: str, row_id: str) -> None:
        self._sql(make_delta("DELETE", table=table, row_id=row_id, client_id=self.client_id, hlc=0))
        self._enqueue("DELETE", table, row_id, {})

    def _enqueue(self, op: str, table: str, row_id: str, values: Mapping[str, Any]) -> None:
        delta = make_delta(op, table=table, row_id=row_id, client_id=self.client_id, hlc=self.hlc.now(), columns=values)
        self.queue.append(QueueEntry(next(self._ids), delta))

    # -- coordinator -----------------------------------------------------------------------------------------------
    def sync_once(self) -> None:
        if self.last_synced == 0:
            self.initial_sync()
        self.pull()
        self.push()

    def restart(self) -> None:
        """A page reload: the database and the outbox persist, ``lastSyncedHlc`` does not."""
        self.last_synced = 0

    def initial_sync(self) -> None:
        found = self.transport.checkpoint()
        if found is None:
            return
        deltas, snapshot_hlc = found
        if deltas:
            self.apply(deltas)
        self.last_synced = snapshot_hlc

    def pull(self) -> None:
        body = self.transport.pull(self.client_id, self.last_synced, 1000)
        if body is None or not body["deltas"]:
            return
        deltas = [RowDelta.from_json(d) for d in body["deltas"]]
        if self.apply(deltas):
            self.last_synced = int(body["serverHlc"])

    def push(self) -> None:
        entries = self.queue[:100]
        if not entries:
            return
        body = self.transport.push(self.client_id, [e.delta for e in entries], self.hlc.now())
        if body is None:
            for e in entries:
                e.retry += 1
            return
        sent = {e.id for e in entries}
        self.queue = [e for e in self.queue if e.id not in sent]
        self.last_synced = int(body["serverHlc"])

    # -- applier ---------------------------------------------------------------------------------------------------
    def apply(self, deltas: Sequence[RowDelta]) -> bool:
        self.db.execute("BEGIN")
        pending = {(e.delta.table, e.delta.row_id): e for e in self.queue}
        try:
            for remote in deltas:
                local_entry = pending.get((remote.table, remote.row_id))
                if local_entry is None:
                    self._sql(remote)
                    continue
                resolved = resolve_lww(local_entry.delta, remote)
                if resolved.client_id == remote.client_id and resolved.hlc == remote.hlc:
                    self._sql(resolved)
                    self.queue = [e for e in self.queue if e.id != local_entry.id]
        except sqlite3.Error:
            self.db.execute("ROLLBACK")
            self.apply_failures += 1
            return False
        self.db.execute("COMMIT")
        self.applied_pages += 1
        return True

    def _sql(self, delta: RowDelta) -> None:
        table = f'"{delta.table}"'
        if delta.op is DeltaOp.INSERT:
            names = ", ".join(["_rowId", *(f'"{c.column}"' for c in delta.columns)])
            marks = ", ".join("?" * (1 + len(delta.columns)))
            self.db.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", [delta.row_id, *_values(delta)])
        elif delta.op is DeltaOp.UPDATE:
            if delta.columns:
                sets = ", ".join(f'"{c.column}" = ?' for c in delta.columns)
                self.db.execute(f"UPDATE {table} SET {sets} WHERE _rowId = ?", [*_values(delta), delta.row_id])
        else:
            self.db.execute(f"DELETE FROM {table} WHERE _rowId = ?", (delta.row_id,))

    # -- inspection ------------------------------------------------------------------------------------------------
    def rows(self, table: str) -> dict[str, dict[str, Any]]:
        """The table as ``{rowId: {column: value}}`` (NULL columns left out, values decoded)."""
        cursor = self.db.execute(f'SELECT * FROM "{table}"')
        names = [d[0] for d in cursor.description]
        out = {}
        for row in cursor.fetchall():
            record = dict(zip(names, row, strict=True))
            row_id = record.pop("_rowId")
            out[row_id] = {k: json.loads(v) for k, v in record.items() if v is not None}
        return out


def _values(delta: RowDelta) -> list[str | None]:
    # JavaScript binds null as SQL NULL; other values are stored as JSON text here (so types survive the round trip).
    return [None if c.value is None else json.dumps(c.value, sort_keys=True) for c in delta.columns]


__all__ = ["OriginalClient", "QueueEntry", "resolve_lww"]
