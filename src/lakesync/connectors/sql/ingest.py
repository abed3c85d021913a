"""Polling a SQL connector's ingest tables: the cursor and diff strategies (see :mod:`lakesync.connectors.sql`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lakesync.connectors.base import ChangedRow, PollBatch, Position
from lakesync.connectors.sql.query import IngestTable, quote_identifier, split_row
from lakesync.connectors.sql.runner import QueryRunner
from lakesync.connectors.sql.values import content_hash, decode_cursor, encode_cursor, look_back
from lakesync.core.canonical import JsonValue, stable_stringify

__all__ = ["SqlIngestSource"]


class SqlIngestSource:
    """An :class:`~lakesync.connectors.base.IngestSource` over one database (see :mod:`lakesync.connectors.sql`).

    Position: ``{"tables": {table: {"cursor", "paging", "recent": {rowId: [hash, cursor]}}}}`` for cursor tables,
    ``{"tables": {table: {"rows": {rowId: hash}}}}`` for diff tables.
    """

    def __init__(self, name: str, runner: QueryRunner, tables: Sequence[IngestTable]) -> None:
        self._name = name
        self._runner = runner
        self._tables = tuple(tables)

    @property
    def name(self) -> str:
        return self._name

    @property
    def tables(self) -> tuple[IngestTable, ...]:
        """The ingest tables."""
        return self._tables

    def poll(self, position: Position, limit: int) -> PollBatch:
        states = position.get("tables")
        old: Mapping[str, Any] = states if isinstance(states, Mapping) else {}
        new_states: dict[str, JsonValue] = {}
        rows: list[ChangedRow] = []
        more = False
        for table in self._tables:
            state = old.get(table.table)
            state = state if isinstance(state, Mapping) else {}
            if table.strategy == "diff":
                changes, new_state = self._diff(table, state)
            else:
                changes, new_state, paging = self._cursor(table, state, max(1, limit - len(rows)))
                more = more or paging
            rows.extend(changes)
            new_states[table.table] = new_state
        return PollBatch(rows, {"tables": new_states}, more)

    def _diff(self, table: IngestTable, state: Mapping[str, Any]) -> tuple[list[ChangedRow], dict[str, JsonValue]]:
        names, raw_rows = self._runner.query(table.select(self._runner.dialect, order=False))
        before = state.get("rows")
        previous: Mapping[str, Any] = before if isinstance(before, Mapping) else {}
        current: dict[str, JsonValue] = {}
        changes: list[ChangedRow] = []
        for raw in raw_rows:
            row_id, values, _ = split_row(table, names, raw)
            digest = content_hash(values)
            current[row_id] = digest
            if previous.get(row_id) != digest:
                changes.append(ChangedRow(table.table, row_id, values, digest, {"strategy": "diff"}))
        for row_id in previous:
            if row_id not in current:
                changes.append(ChangedRow(table.table, row_id, None, "deleted", {"strategy": "diff"}))
        return changes, {"rows": current}

    def _cursor(
        self, table: IngestTable, state: Mapping[str, Any], limit: int
    ) -> tuple[list[ChangedRow], dict[str, JsonValue], bool]:
        assert table.cursor_column is not None
        dialect = self._runner.dialect
        column = quote_identifier(table.cursor_column, dialect)
        stored = state.get("cursor")
        cursor = decode_cursor(stored) if stored is not None else None
        paging = bool(state.get("paging"))
        params: tuple[Any, ...] = ()
        if cursor is None:
            # Rows without a cursor value are skipped below; read past them here, or a page of them (NULLs sort
            # first on MySQL) would be the first page forever.
            sql = table.select(dialect, where=f"{column} IS NOT NULL", limit=limit + 1)
        else:
            effective = cursor if paging else look_back(cursor, table.lookback_ms)
            sql, params = table.select(dialect, where=f"{column} > %s", limit=limit + 1), (effective,)
        names, raw_rows = self._runner.query(sql, params)
        parsed = [split_row(table, names, raw) for raw in raw_rows]
        full = len(parsed) > limit
        if full:
            parsed = parsed[:limit]
            last = parsed[-1][2]
            kept = [p for p in parsed if p[2] != last]
            if kept:
                parsed = kept
            else:  # more than a page shares one cursor value: take all of them at once
                names, raw_rows = self._runner.query(table.select(dialect, where=f"{column} = %s"), (last,))
                parsed = [split_row(table, names, raw) for raw in raw_rows]
        recent_raw = state.get("recent")
        recent: dict[str, list[JsonValue]] = (
            {k: list(v) for k, v in recent_raw.items() if isinstance(v, list)}
            if isinstance(recent_raw, Mapping)
            else {}
        )
        changes: list[ChangedRow] = []
        for row_id, values, value in parsed:
            if value is None:
                continue  # a row without a cursor value can never be ordered after the cursor
            digest = content_hash(values)
            encoded = encode_cursor(value)
            known = recent.get(row_id)
            recent[row_id] = [digest, encoded]
            if known is not None and known[0] == digest:
                continue  # re-delivered by the look-back window, unchanged
            version = f"{stable_stringify(encoded)}:{digest}"
            changes.append(ChangedRow(table.table, row_id, values, version, {"cursor": encoded}))
        seen = [p[2] for p in parsed if p[2] is not None]
        new_cursor = seen[-1] if seen else cursor
        if new_cursor is not None:
            horizon = look_back(new_cursor, table.lookback_ms)
            recent = {k: v for k, v in recent.items() if _at_or_after(decode_cursor(v[1]), horizon)}
        new_state: dict[str, JsonValue] = {
            "cursor": encode_cursor(new_cursor) if new_cursor is not None else None,
            "paging": full,
            "recent": dict(recent),
        }
        return changes, new_state, full

    def close(self) -> None:
        self._runner.close()


def _at_or_after(value: Any, horizon: Any) -> bool:
    try:
        return bool(value >= horizon)
    except TypeError:  # mixed types (naive vs aware, str vs number): keep the entry
        return True
