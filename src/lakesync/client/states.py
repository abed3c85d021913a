"""Row states: each row's per-column LWW state in ``_lakesync_state`` and the user row materialised from it.

A state is stored as :func:`lakesync.core.merge.state_to_json`'s JSON, or, for a row written by one write delta whose
values all read back exactly from their typed columns (:func:`lakesync.client.tables.exact_types`: a fresh bulk
insert, a checkpoint row), as a *compact* state ``[hlc, clientId, [columns], kinds]`` (every listed column and
``written`` at that version, no tombstone): the values are the user row's, read when the state is
(:meth:`RowStates.decode`); the first merge into the row writes its full state. A row with no state row may have one
in a base record (:mod:`lakesync.client.base`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from lakesync.client import _fast
from lakesync.client.base import BaseRecords
from lakesync.client.model import SyncStateError
from lakesync.client.tables import KIND_CODES, KINDS_BY_CODE, ROW_ID, LocalTable, from_sql, quote
from lakesync.core.merge import RowState, state_from_json, state_to_json


class RowStates:
    """Reads and writes row states and keeps the user tables in step with them (the caller holds the store's lock;
    writes happen inside a transaction)."""

    def __init__(self, conn: sqlite3.Connection, tables: Mapping[str, LocalTable], base: BaseRecords) -> None:
        self._db = conn
        self._tables = tables
        self._base = base
        self._shapes: dict[tuple[str, tuple[str, ...]], str] = {}

    def get(self, table: str, row_id: str) -> RowState | None:
        """The row's state, or ``None`` if it has none."""
        row = self._db.execute(
            "SELECT state FROM _lakesync_state WHERE tbl = ? AND row_id = ?", (table, row_id)
        ).fetchone()
        if row is not None:
            return self.decode(table, row_id, row[0])
        text = self._base.state(table, row_id) if self._base.present else None
        return None if text is None else self.decode(table, row_id, text)

    def decode(self, table: str, row_id: str, text: str) -> RowState:
        """A stored state: the full JSON, or a compact state completed with the values of the user row."""
        data = json.loads(text)
        if isinstance(data, dict):
            return state_from_json(table, row_id, data, trusted=True)
        hlc, client_id, names, kinds = data
        values: Sequence[Any] = ()
        if names:
            select = ", ".join(quote(n) for n in names)
            got = self._db.execute(
                f"SELECT {select} FROM {quote(table)} WHERE {quote(ROW_ID)} = ?", (row_id,)
            ).fetchone()
            if got is None:
                raise SyncStateError(f"Row {table}:{row_id} has a compact state but no row in its table")
            values = got
        version = [hlc, client_id]
        columns = {
            name: [from_sql(KINDS_BY_CODE[code], value), hlc, client_id]
            for name, code, value in zip(names, kinds, values, strict=True)
        }
        return state_from_json(table, row_id, {"c": columns, "t": None, "w": version}, trusted=True)

    def put(self, state: RowState) -> None:
        """Store the row's full state and materialise its user row."""
        self._db.execute(
            "INSERT OR REPLACE INTO _lakesync_state (tbl, row_id, state) VALUES (?, ?, ?)",
            (state.table, state.row_id, _fast.encode_state(state_to_json(state))),
        )
        self.materialise(state.table, state)

    def materialise(self, table_name: str, state: RowState) -> None:
        """Write the user row the state gives (delete it for a deleted row); nothing for a table without a schema."""
        table = self._tables.get(table_name)
        if table is None:
            return  # no schema: kept in the state only (materialised if a schema arrives)
        values = state.values()
        if values is None:
            self._db.execute(table.delete_sql(), (state.row_id,))
        else:
            self._db.execute(table.upsert_sql(), table.row_params(state.row_id, values))

    def shape_json(self, local: LocalTable, names: Sequence[str]) -> str:
        """The ``names, kinds`` part of a compact state (see :meth:`decode`)."""
        key = (local.name, tuple(names))
        shape = self._shapes.get(key)
        if shape is None:
            kinds = "".join(KIND_CODES[local.types[n]] for n in names)
            shape = self._shapes[key] = (
                f'{json.dumps(list(names), ensure_ascii=False, separators=(",", ":"))},"{kinds}"'
            )
        return shape

    def ensure_tables(self) -> None:
        """Every user table made to fit its schema (:meth:`ensure_table`)."""
        for table in self._tables.values():
            self.ensure_table(table)

    def ensure_table(self, table: LocalTable) -> None:
        """Create the user table, add the columns a newer schema has, or make it again when a column's type changed;
        rows are then rewritten from their state."""
        db = self._db
        declared = {row[1].lower(): str(row[2]) for row in db.execute(f"PRAGMA table_info({quote(table.name)})")}
        existing = list(declared)
        if any(declared.get(c.lower(), table.affinity(c)) != table.affinity(c) for c in table.columns):
            self._remake_table(table)
            return
        if not existing:
            db.execute(table.create_sql())
        else:
            missing = [c for c in table.columns if c.lower() not in {e.lower() for e in existing}]
            for column in missing:
                db.execute(table.add_column_sql(column))
            if not missing:
                return
        # A new table or new columns: the state may already hold values for them (pulled before the schema was known).
        rows = db.execute("SELECT row_id, state FROM _lakesync_state WHERE tbl = ?", (table.name,)).fetchall()
        for row_id, text in rows:
            self.materialise(table.name, self.decode(table.name, row_id, text))

    def _remake_table(self, table: LocalTable) -> None:
        """A column's type changed: its affinity would keep converting what is written (a number stored in a TEXT
        column reads back as a string), so the table is made again and every row rewritten from its full state
        (compact states, which read their values from the user row, are expanded while the old table is there)."""
        db = self._db
        self._base.expand()
        rows = db.execute("SELECT row_id, state FROM _lakesync_state WHERE tbl = ?", (table.name,)).fetchall()
        states = [self.decode(table.name, row_id, text) for row_id, text in rows]
        db.execute(f"DROP TABLE {quote(table.name)}")
        db.execute(table.create_sql())
        for state in states:
            self.put(state)
