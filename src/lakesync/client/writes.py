"""Local writes: each write call one SQLite transaction (user rows, states, one outbox entry, the clock); bad input
raises before it starts.

Distinct INSERTs of rows that have no state go in bulk: compact states where the values are exact, user rows by
``executemany``, and one outbox entry holding the rows, whose wire JSON and deltaIds are derived at push time
(:func:`lakesync.client.outbox.entry_wires`). Anything else merges each write into the row's state
(:func:`lakesync.core.merge.merge`) and keeps its wire delta in the outbox.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lakesync.client import _fast
from lakesync.client.storage import Storage
from lakesync.client.tables import LocalTable, LocalWriteError, RowExistsError, RowNotFoundError, check_row_size
from lakesync.collector import collector_paused
from lakesync.core.canonical import JsonValue, stable_stringify
from lakesync.core.delta import DeltaOp, make_delta
from lakesync.core.merge import RowState, merge

WriteOp = tuple[DeltaOp, str, str, Mapping[str, JsonValue] | None]
"""``(op, table, rowId, values)``; ``values`` is ``None`` for a delete."""


class LocalWrites:
    """Applies the app's writes (see the module docstring); ``on_written`` gets the rows of each committed write."""

    def __init__(
        self,
        storage: Storage,
        *,
        client_id: str,
        gateway: str,
        on_written: Callable[[dict[str, set[str]]], None],
    ) -> None:
        self._db, self._states, self._base = storage.db, storage.states, storage.base
        self._outbox, self._clock = storage.outbox, storage.clock
        self.tables = storage.tables
        self.client_id = client_id
        self.gateway = gateway
        self._on_written = on_written

    def table(self, table: str) -> LocalTable:
        """The user table named ``table``.

        Raises:
            LocalWriteError: an unknown table.
        """
        local = self.tables.get(table)
        if local is None:
            raise LocalWriteError(f'Unknown table "{table}" (known: {", ".join(sorted(self.tables)) or "none"})')
        return local

    def insert_many(self, table: str, rows: Mapping[str, Mapping[str, JsonValue]]) -> None:
        """Insert many rows (``{row_id: values}``) in one transaction: all or nothing."""
        if len(rows) < 2:
            self.write([(DeltaOp.INSERT, table, row_id, values) for row_id, values in rows.items()])
            return
        local = self.table(table)
        gateway = self.gateway
        with collector_paused():
            prepared = [local.prepare_insert(gateway, row_id, values or {}) for row_id, values in rows.items()]
            items = list(zip(itertools.repeat(table), rows.keys(), rows.values(), strict=False))
            self._write_fresh(items, prepared, {table: set(rows)})

    def write(self, ops: Sequence[WriteOp]) -> None:
        """Apply ``ops`` in one transaction: all or nothing."""
        if (
            len(ops) > 1
            and all(op is DeltaOp.INSERT for op, *_ in ops)
            and len({(t, r) for _, t, r, _ in ops}) == len(ops)
        ):
            # Checked and bound in one pass per row (the rows are kept for the bulk insert).
            prepared = [self.table(t).prepare_insert(self.gateway, r, v or {}) for _, t, r, v in ops]
            changed: dict[str, set[str]] = {}
            for _, table, row_id, _ in ops:
                changed.setdefault(table, set()).add(row_id)
            self._write_fresh([(t, r, v or {}) for _, t, r, v in ops], prepared, changed)
            return
        for _op, table, row_id, values in ops:
            self.table(table).check_write(self.gateway, row_id, values)
        with self._db.tx():
            self._write_general(ops)
            self._db.save_clock(self._clock)
        changed = {}
        for _, table, row_id, _ in ops:
            changed.setdefault(table, set()).add(row_id)
        self._on_written(changed)

    def _write_fresh(
        self,
        items: Sequence[tuple[str, str, Mapping[str, JsonValue]]],
        prepared: Sequence[tuple[tuple[Any, ...], int]],
        changed: dict[str, set[str]],
    ) -> None:
        """Checked INSERTs of distinct rows: in bulk when none has a state, else through the general path."""
        with self._db.tx():
            self._db.conn.execute("SAVEPOINT fast_insert")
            try:
                self._insert_fresh(items, prepared)
                self._db.conn.execute("RELEASE fast_insert")
            except sqlite3.IntegrityError:
                # Some row already has a state (live, or deleted): the general path decides per row.
                self._db.conn.execute("ROLLBACK TO fast_insert")
                self._db.conn.execute("RELEASE fast_insert")
                self._write_general([(DeltaOp.INSERT, t, r, v) for t, r, v in items])
            self._db.save_clock(self._clock)
        self._on_written(changed)

    def _insert_fresh(
        self,
        items: Sequence[tuple[str, str, Mapping[str, JsonValue]]],
        prepared: Sequence[tuple[tuple[Any, ...], int]],
    ) -> None:
        """Bulk INSERTs of rows with no state at all: states, user rows and one outbox entry. Raises IntegrityError if
        any row has a state.

        A row whose values are exact gets a compact state (its values are the user row's, see
        :meth:`~lakesync.client.states.RowStates.decode`); the outbox entry keeps the rows
        (:meth:`~lakesync.client.outbox.Outbox.add_inserts`) and their wire JSON and deltaIds are derived from it at
        push time (:func:`lakesync.client._fast.insert_delta`, deterministic: a re-send carries the same deltaIds)."""
        hlc = self._clock.now()  # one event: every row of the batch carries this stamp (rows are distinct)
        by_table: dict[str, list[str]] = {}
        for table, row_id, _values in items:
            by_table.setdefault(table, []).append(row_id)
        if any(self._base.holds_any(table, ids) for table, ids in by_table.items()):
            raise sqlite3.IntegrityError("a row of the batch has a base state")  # as the state insert below would
        client_json = _fast.json_text(self.client_id)
        states = []
        users: dict[str, list[tuple[Any, ...]]] = {}
        texts: dict[tuple[str, int], str] = {}
        shapes = []
        for (table, row_id, values), (params, shape) in zip(items, prepared, strict=True):
            shapes.append(shape)
            if shape >= 0:
                text = texts.get((table, shape))
                if text is None:
                    local = self.tables[table]
                    compact = self._states.shape_json(local, local.shape_columns(shape))
                    text = texts[(table, shape)] = f'["{hlc}",{client_json},{compact}]'
            else:
                given = dict(values or {})
                _wire, _did, pairs = _fast.insert_delta("INSERT", table, row_id, self.client_id, hlc, given)
                text = _fast.write_state_json(pairs, hlc, client_json)
            states.append((table, row_id, text))
            rows = users.get(table)
            if rows is None:
                rows = users[table] = []
            rows.append(params)
        db = self._db.conn
        db.executemany("INSERT INTO _lakesync_state (tbl, row_id, state) VALUES (?, ?, ?)", states)
        for table, table_rows in users.items():
            db.executemany(self.tables[table].upsert_sql(), table_rows)
        columnar = None
        if len(users) == 1 and min(shapes) >= 0:
            # Every row exact, one table: the rows are kept as their user-row parameters.
            ((table, table_rows),) = users.items()
            columnar = (self.tables[table], shapes, table_rows)
        self._outbox.add_inserts(hlc, items, columnar)

    def _write_general(self, ops: Sequence[WriteOp]) -> None:
        """Each write merged into its row's state (inside a transaction); one outbox entry of their wire deltas."""
        wires: list[str] = []
        states: dict[tuple[str, str], RowState | None] = {}
        for op, table, row_id, values in ops:
            key = (table, row_id)
            state = states[key] if key in states else self._states.get(table, row_id)
            live = state.values() if state is not None else None
            if op is DeltaOp.INSERT and live is not None:
                raise RowExistsError(f"Row {table}:{row_id} exists; update it instead")
            if op is not DeltaOp.INSERT and live is None:
                raise RowNotFoundError(f"Row {table}:{row_id} does not exist")
            columns: dict[str, JsonValue] = dict(values or {})
            if op is DeltaOp.UPDATE:
                assert live is not None
                columns = {
                    k: v
                    for k, v in columns.items()
                    if k not in live or stable_stringify(live[k]) != stable_stringify(v)
                }
                if not columns:
                    continue
            delta = make_delta(
                op, table=table, row_id=row_id, client_id=self.client_id, hlc=self._clock.now(), columns=columns
            )
            result = merge(state, delta)
            if op is not DeltaOp.DELETE:
                check_row_size(table, row_id, result.state.values())  # as the gateway checks the merged row
            states[key] = result.state
            if result.changed:
                self._states.put(result.state)
            wires.append(_fast.encode_state(delta.to_json()))
        if wires:
            self._outbox.add_wires(wires)
