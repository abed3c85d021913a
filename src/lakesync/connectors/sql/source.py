"""``source=`` pulls of a SQL connector: its ingest tables' rows served live as INSERT deltas (see
:mod:`lakesync.connectors.sql`)."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from typing import Any, Final

from lakesync.connectors.sql.query import IngestTable, quote_identifier, split_row
from lakesync.connectors.sql.runner import QueryRunner
from lakesync.connectors.sql.values import content_hash, cursor_ms
from lakesync.core import hlc as hlc_mod
from lakesync.core.canonical import stable_stringify
from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta

__all__ = ["DIFF_SOURCE_HLC", "SqlSourceAdapter"]

DIFF_SOURCE_HLC: Final = 1
"""The HLC of a diff table's rows (no notion of change time): only a pull from ``since=0`` sees them."""


class SqlSourceAdapter:
    """A :class:`~lakesync.ports.SourceAdapter`: the connector's ingest tables served live as deltas."""

    def __init__(self, name: str, runner: QueryRunner, tables: Sequence[IngestTable]) -> None:
        self.name = name
        self._runner = runner
        self._tables = tuple(tables)

    def check(self) -> None:
        """Connect, and run every ingest query with ``LIMIT 0``: the row-id and cursor columns must be in its result.

        Raises:
            AdapterError: the database cannot be reached or refuses a query (502).
            ConnectorValidationError: a query lacks its row-id or cursor column (400).
        """
        from lakesync.core.connectors import ConnectorValidationError

        self._runner.query("SELECT 1")
        for i, table in enumerate(self._tables):
            names, _ = self._runner.query(table.select(self._runner.dialect, order=False, limit=0))
            for what, column in (("rowIdColumn", table.row_id_column), ("cursorColumn", table.cursor_column)):
                if column is not None and column not in names:
                    raise ConnectorValidationError(
                        f"Ingest table at index {i}: the query returns no {what} column {column!r}"
                    )

    def query_deltas_since(self, since_hlc: int, limit: int) -> list[RowDelta]:
        since_ms = hlc_mod.decode(since_hlc)[0] if since_hlc > 0 else None
        found: list[RowDelta] = []
        dialect = self._runner.dialect
        for table in self._tables:
            if table.strategy == "diff" or table.cursor_column is None:
                if since_hlc >= DIFF_SOURCE_HLC:
                    continue
                names, raw_rows = self._runner.query(table.select(dialect, order=False, limit=limit))
                found.extend(self._delta(table, names, raw, DIFF_SOURCE_HLC) for raw in raw_rows)
                continue
            column = quote_identifier(table.cursor_column, dialect)
            if since_ms is None:
                names, raw_rows = self._runner.query(table.select(dialect, limit=limit))
            else:
                bound = self._bound(table, since_ms)
                names, raw_rows = self._runner.query(
                    table.select(dialect, where=f"{column} > %s", limit=limit), (bound,)
                )
            for raw in raw_rows:
                value = dict(zip(names, raw, strict=True)).get(table.cursor_column)
                ms = cursor_ms(value)
                stamp = hlc_mod.encode(ms, 0) if ms else DIFF_SOURCE_HLC
                if stamp > since_hlc:
                    found.append(self._delta(table, names, raw, stamp))
        found.sort(key=lambda d: (d.hlc, d.table, d.row_id))
        return found[:limit]

    def _bound(self, table: IngestTable, since_ms: int) -> Any:
        """``since`` in the cursor column's type (probed once: numbers stay numbers, times become datetimes)."""
        assert table.cursor_column is not None
        column = quote_identifier(table.cursor_column, self._runner.dialect)
        names, rows = self._runner.query(table.select(self._runner.dialect, where=f"{column} IS NOT NULL", limit=1))
        sample = dict(zip(names, rows[0], strict=True)).get(table.cursor_column) if rows else None
        if isinstance(sample, dt.datetime):
            instant = dt.datetime.fromtimestamp(since_ms / 1000, dt.UTC)
            return instant if sample.tzinfo is not None else instant.replace(tzinfo=None)
        if isinstance(sample, dt.date):
            return dt.datetime.fromtimestamp(since_ms / 1000, dt.UTC).date()
        return since_ms

    def _delta(self, table: IngestTable, names: Sequence[str], raw: tuple[Any, ...], stamp: int) -> RowDelta:
        row_id, values, _ = split_row(table, names, raw)
        client_id = f"ingest:{self.name}"
        digest = content_hash(values)
        delta_id = hashlib.sha256(
            stable_stringify(["source", self.name, table.table, row_id, digest]).encode("utf-8", "surrogatepass")
        ).hexdigest()
        columns = tuple(ColumnDelta(k, v) for k, v in values.items())
        return RowDelta(DeltaOp.INSERT, table.table, row_id, client_id, columns, stamp, delta_id)

    def close(self) -> None:
        self._runner.close()
