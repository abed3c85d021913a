"""The bootstrap: the latest checkpoint loaded into the store, and its cursor taken.

Into an empty store, rows are written in bulk without a merge: runs of rows whose values are exact column-wise, as
base records of compact states (:mod:`lakesync.client.base`), every other row with its full state. Into a store with
data (a cursor the gateway no longer serves: 410 ``CURSOR_EXPIRED``), the synced state becomes the checkpoint's,
pending local writes merged on top. Either way in one transaction with the cursor.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lakesync.client import _fast
from lakesync.client.answers import receive_hlc, unreadable_answer
from lakesync.client.http import SyncClient
from lakesync.client.model import SyncReport, SyncStateError
from lakesync.client.pull import Puller
from lakesync.client.storage import Storage
from lakesync.client.tables import LocalTable, bind_column
from lakesync.collector import collector_paused
from lakesync.core.delta import DeltaOp
from lakesync.core.errors import ClockDriftError
from lakesync.core.merge import merge
from lakesync.wire.checkpoint_columns import ColumnsChunk, RowsRun, decode_columns
from lakesync.wire.fast_checkpoint import CheckpointDeltas, RawDelta, decode_checkpoint_deltas, to_row_delta


class Bootstrap:
    """Loads checkpoints (see the module docstring)."""

    def __init__(self, storage: Storage, puller: Puller, http: SyncClient) -> None:
        self._db, self._states, self._base = storage.db, storage.states, storage.base
        self._outbox, self._clock, self._tables = storage.outbox, storage.clock, storage.tables
        self._puller = puller
        self._http = http

    def load(self, report: SyncReport, *, again: bool) -> None:
        """Load the latest checkpoint and take its cursor; without one, pull from the beginning."""
        with unreadable_answer("checkpoint"):
            stream = self._http.checkpoint_stream(columns=True)
        if stream is None:
            with self._db.tx():
                self._db.set_meta("cursor", "")
            return
        if stream.cursor is None:
            raise SyncStateError("The checkpoint came without X-Checkpoint-Cursor")
        with collector_paused(), unreadable_answer("checkpoint"):
            parts = decoded_parts(stream.frames, stream.columnar)
        receive_hlc(self._clock, str(stream.server_hlc))
        with self._db.tx() as db, collector_paused():
            empty = (
                db.execute("SELECT 1 FROM _lakesync_state LIMIT 1").fetchone() is None
                and db.execute("SELECT 1 FROM _lakesync_base LIMIT 1").fetchone() is None
            )
            if empty:
                changed: dict[str, set[str]] = {}
                for part in parts:
                    if isinstance(part, ColumnsChunk):
                        self._load_columns(part, changed)
                    else:
                        for table, ids in self.load_bulk(part).items():
                            changed.setdefault(table, set()).update(ids)
            else:
                changed = self.merge_checkpoint([row for part in parts for row in part.rows()])
            self._db.set_meta("cursor", stream.cursor)
            self._db.set_meta("checkpointId", stream.checkpoint_id or "")
            self._db.save_clock(self._clock)
        for table, ids in changed.items():
            if table in report.changed:
                report.changed[table].update(ids)
            else:
                report.changed[table] = ids
        report.checkpoint_rows += sum(part.row_count() for part in parts)
        report.rebootstrapped = report.rebootstrapped or again

    def _load_columns(self, chunk: ColumnsChunk, changed: dict[str, set[str]]) -> None:
        """An empty store: a columnar document's rows written as :meth:`load_bulk` writes them (rows runs
        column-wise with compact states when their values are exact, every other row with its full state); the rows
        are added to ``changed``."""
        newest = 0
        for run in chunk.runs:
            if isinstance(run, RowsRun):
                local = self._tables.get(run.table)
                given = dict(zip(run.columns, run.values, strict=True))
                if local is None or not self._write_columns(local, given, run.row_ids, run.client_ids, run.hlcs):
                    self._load_rows(run.rows())
                changed.setdefault(run.table, set()).update(run.row_ids)
                newest = max(newest, max(run.hlcs))
            else:
                self._load_rows(run)
                for row in run:
                    changed.setdefault(row[0][1], set()).add(row[0][2])
                    newest = max(newest, *(d[4] for d in row))
        if newest:
            with contextlib.suppress(ClockDriftError):
                self._clock.recv(newest)

    def load_bulk(self, deltas: CheckpointDeltas) -> dict[str, set[str]]:
        """An empty store: write each row's state as the checkpoint gives it (no merge) and its user row, in bulk.

        A run of rows that are each one write delta of the same table and columns, with a schema, and whose values
        are exact (:func:`lakesync.client.tables.exact_types`), is written column-wise: user rows bound straight from
        the decoded columns and compact states (``[hlc, clientId, names, kinds]``: the values are the user row's).
        Any other row goes through :func:`lakesync.client._fast.checkpoint_state_json` (the full state)."""
        count = len(deltas)
        changed: dict[str, set[str]] = {}
        if not count:
            return changed
        tables, row_ids, ops, names = deltas.tables, deltas.row_ids, deltas.ops, deltas.names
        keys = list(zip(tables, row_ids, strict=True))
        same = list(map(operator.eq, keys[1:], keys[:-1]))  # same[i]: delta i + 1 continues delta i's row
        alone = [True, *map(operator.not_, same)]
        alone = list(map(operator.and_, alone, [*alone[1:], True]))
        runs = [
            (table, cols) if single and op is not DeltaOp.DELETE and table in self._tables else None
            for table, cols, single, op in zip(tables, names, alone, ops, strict=True)
        ]
        at = 0
        for run, group in itertools.groupby(runs):
            end = at + sum(1 for _ in group)
            if run is None or not self._load_run(deltas, at, end, *run):
                self._load_rows(deltas.rows(at, end))
            if run is not None:
                changed.setdefault(run[0], set()).update(row_ids[at:end])
            else:
                for table, row_id in keys[at:end]:
                    changed.setdefault(table, set()).add(row_id)
            at = end
        newest = max(deltas.hlcs)
        if newest:
            with contextlib.suppress(ClockDriftError):
                self._clock.recv(newest)
        return changed

    def _load_run(self, deltas: CheckpointDeltas, start: int, end: int, table: str, names: tuple[str, ...]) -> bool:
        """Rows ``start..end``, each one write delta of ``table`` with columns ``names``, written column-wise with
        compact states; False (nothing written) when a column is unknown to the schema, repeated, or has a value that
        is not exact."""
        width = len(names)
        if len(set(names)) != width:
            return False
        values = deltas.values[deltas.starts[start] : deltas.starts[end]]
        given = {name: values[i::width] for i, name in enumerate(names)}
        return self._write_columns(
            self._tables[table], given, deltas.row_ids[start:end], deltas.client_ids[start:end], deltas.hlcs[start:end]
        )

    def _write_columns(
        self,
        local: LocalTable,
        given: Mapping[str, list[Any]],
        row_ids: Sequence[str],
        clients: Sequence[str],
        hlcs: Sequence[int],
    ) -> bool:
        """New rows of ``local``, one write delta each with the columns of ``given`` (a value list per column), at
        ``hlcs`` by ``clients``: user rows bound column-wise and compact states; False (nothing written) when a
        column is unknown to the schema or a value is not exact."""
        if any(n not in local.types for n in given):
            return False
        table = local.name
        names = tuple(given)
        bound: list[Any] = []
        for column, kind, _ in local.plan:
            if column not in given:
                bound.append(itertools.repeat(None))
                continue
            column_values, exact = bind_column(kind, given[column])
            if not exact:
                return False
            bound.append(column_values)
        shape = self._states.shape_json(local, names)
        db = self._db.conn
        if not self._base.write(table, shape, row_ids, clients, hlcs):
            if len(set(clients)) == 1:
                client = _fast.json_text(clients[0])
                texts = [f'["{hlc}",{client},{shape}]' for hlc in hlcs]
            else:
                texts = [f'["{hlc}",{_fast.json_text(c)},{shape}]' for hlc, c in zip(hlcs, clients, strict=True)]
            db.executemany(
                "INSERT OR REPLACE INTO _lakesync_state (tbl, row_id, state) VALUES (?, ?, ?)",
                zip(itertools.repeat(table), row_ids, texts),
            )
        db.executemany(local.upsert_sql(), zip(row_ids, *bound, strict=False))  # absent columns: repeat(None)
        return True

    def _load_rows(self, rows: Iterable[list[RawDelta]]) -> None:
        """Rows of a checkpoint with their full states (no merge: the store is empty)."""
        states = []
        users: dict[str, list[tuple[Any, ...]]] = {}
        for row in rows:
            table, row_id = row[0][1], row[0][2]
            text, values = _fast.checkpoint_state_json(row)
            states.append((table, row_id, text))
            local = self._tables.get(table)
            if local is not None and values is not None:
                users.setdefault(table, []).append(local.row_params(row_id, values))
        db = self._db.conn
        db.executemany("INSERT OR REPLACE INTO _lakesync_state (tbl, row_id, state) VALUES (?, ?, ?)", states)
        for table, params in users.items():
            db.executemany(self._tables[table].upsert_sql(), params)

    def merge_checkpoint(self, rows: Sequence[list[RawDelta]]) -> dict[str, set[str]]:
        """A store with data: its synced state becomes the checkpoint's, with its pending local writes merged on top.
        The checkpoint is everything this client may see as of its cursor (a fresh client would have exactly it), and
        the pull from its cursor delivers every later change. So a local row the checkpoint lacks and no pending
        write holds is dropped, and a column held from a write the gateway no longer has (one it acknowledged and
        then lost with its buffer, restored from the lake) gives way to the checkpoint's. Returns the rows whose
        state changed."""
        self._base.expand()  # so that dropping a row's state below cannot leave its base state behind
        pending = self._outbox.pending_rows()
        db = self._db.conn
        before = _encoded_states(db)
        db.execute("DELETE FROM _lakesync_state")
        self._puller.merge_remote(to_row_delta(d) for row in rows for d in row)
        for key, deltas in self._outbox.pending_deltas(pending).items():
            state = self._states.get(*key)
            for delta in deltas:
                state = merge(state, delta).state
            if state is not None:
                self._states.put(state)
        after = _encoded_states(db)
        changed: dict[str, set[str]] = {}
        for key in before.keys() | after.keys():
            if before.get(key) == after.get(key):
                continue
            local = self._tables.get(key[0])
            if key not in after and local is not None:
                db.execute(local.delete_sql(), (key[1],))
            changed.setdefault(key[0], set()).add(key[1])
        return changed


def _encoded_states(db: sqlite3.Connection) -> dict[tuple[str, str], bytes | str]:
    """Every row's stored state, as stored."""
    return {
        (table, row_id): state for table, row_id, state in db.execute("SELECT tbl, row_id, state FROM _lakesync_state")
    }


def decoded_parts(bodies: Sequence[bytes], columnar: Sequence[bool]) -> list[ColumnsChunk | CheckpointDeltas]:
    """A fetched checkpoint's bodies decoded: each columnar document alone, runs of stream bodies together.

    Raises:
        CodecError: a body that is not what its media type says.
    """
    parts: list[ColumnsChunk | CheckpointDeltas] = []
    streams: list[bytes] = []
    flags = [*columnar[: len(bodies)], *[False] * (len(bodies) - len(columnar))]
    for body, is_columns in zip(bodies, flags, strict=True):
        if not is_columns:
            streams.append(body)
            continue
        if streams:
            parts.append(decode_checkpoint_deltas(streams))
            streams = []
        parts.append(decode_columns(body))
    if streams:
        parts.append(decode_checkpoint_deltas(streams))
    return parts
