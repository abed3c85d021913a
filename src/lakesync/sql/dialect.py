"""The dialect seam: per database, the SQL text and parameter binding of every step of materialisation (pure).

A dialect knows how to quote identifiers, map column types, create the destination table, add a column, and build
the batched statements of one ``apply``: ensure and lock the hidden state rows, write them back, upsert live rows,
delete (hard) or soft-delete dead ones, back-fill added columns. It never talks to a database: it returns
:class:`Statement` objects that a driver executor runs. This module holds the contract (:class:`Dialect`, with the SQL
most databases share) and the table layout; each database's dialect lives beside its executor in its own module
(:mod:`lakesync.sql.postgres`, :mod:`~lakesync.sql.mysql`, :mod:`~lakesync.sql.sqlite`, :mod:`~lakesync.sql.bigquery`).

Identifiers are validated by :func:`check_layout` (``[A-Za-z_][A-Za-z0-9_]*``, the dialect's length limit, no
collision with the system columns, case-insensitively) *and* quoted, so no table or column name can inject SQL;
values are always bound parameters.

Destination table (reference §9.2; PostgreSQL / MySQL-MariaDB / SQLite / BigQuery)::

    row_id      TEXT NOT NULL / VARCHAR(255) (binary, no-pad collation) / TEXT / STRING NOT NULL
    <column>    string,null → TEXT / LONGTEXT / TEXT / STRING;  number → DOUBLE PRECISION / DOUBLE / REAL / FLOAT64
                boolean → BOOLEAN / TINYINT(1) / INTEGER / BOOL;  json → JSONB / JSON / TEXT / JSON
    props       JSON NOT NULL DEFAULT '{}'   -- the consumer's; never written by the materialiser
    deleted_at  timestamp, only with soft delete
    synced_at   timestamp NOT NULL DEFAULT now
    PRIMARY KEY (schema.effective_primary_key) [, UNIQUE (external_id_column)]   (BigQuery: CLUSTER BY the key)

Hidden tables (one each per database; users' tables never get extra columns):

* ``_lakesync_state (tbl, row_id, state)``: each materialised row's per-column LWW state
  (:func:`lakesync.core.merge.state_to_json`), keyed by destination table and row id. ``state`` NULL = not seen yet.
* ``_lakesync_tables (tbl, columns)``: the columns materialised so far in each destination table, as JSON
  ``[[name, type], ...]``; a column is listed once it exists *and* has been back-filled.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from lakesync.core.schema import ColumnType, TableSchema, is_valid_identifier

__all__ = [
    "META_TABLE",
    "STATE_TABLE",
    "SYSTEM_COLUMNS",
    "Dialect",
    "LayoutError",
    "Statement",
    "TableLayout",
    "check_layout",
    "layout_for",
]

STATE_TABLE: Final = "_lakesync_state"
META_TABLE: Final = "_lakesync_tables"
SYSTEM_COLUMNS: Final = ("row_id", "props", "deleted_at", "synced_at")
"""Columns every destination table has besides the schema's; a schema column may not be named like one."""

_IN_CHUNK: Final = 1000
"""Most values in one ``IN (...)`` list (and rows in one multi-row statement) for list-binding dialects."""


class LayoutError(ValueError):
    """A table layout the destination refuses (bad or colliding identifiers): permanent."""


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement to run.

    Attributes:
        sql: The SQL text with the dialect's placeholders.
        params: Positional parameters, a mapping of named ones (BigQuery), or for ``many`` a sequence of rows.
        many: Run once per parameter row (``executemany``).
        returns: Whether the statement yields rows the caller reads.
    """

    sql: str
    params: Sequence[Any] | Mapping[str, Any] = ()
    many: bool = False
    returns: bool = False


@dataclass(frozen=True, slots=True)
class TableLayout:
    """The shape of one destination table as materialised.

    Attributes:
        table: Destination table name.
        columns: The materialised columns, ``(name, type)`` in creation order (all schema columns ever added).
        primary_key: The primary key columns.
        external_id: The unique external id column, if any (then the upsert's conflict target).
        soft_delete: Whether deletes set ``deleted_at``.
    """

    table: str
    columns: tuple[tuple[str, ColumnType], ...]
    primary_key: tuple[str, ...] = ("row_id",)
    external_id: str | None = None
    soft_delete: bool = True
    types: dict[str, ColumnType] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "types", dict(self.columns))

    @property
    def column_names(self) -> tuple[str, ...]:
        """The materialised column names in order."""
        return tuple(name for name, _ in self.columns)

    @property
    def conflict_target(self) -> tuple[str, ...]:
        """The upsert's conflict target: the external id column if set, else the primary key."""
        return (self.external_id,) if self.external_id is not None else self.primary_key

    def with_columns(self, columns: Sequence[tuple[str, ColumnType]]) -> TableLayout:
        """The same table with ``columns`` as its materialised columns."""
        return TableLayout(self.table, tuple(columns), self.primary_key, self.external_id, self.soft_delete)


def layout_for(schema: TableSchema) -> TableLayout:
    """The layout a schema asks for (its columns, deduplicated by name, in schema order)."""
    types = schema.column_types
    return TableLayout(
        table=schema.table,
        columns=tuple(types.items()),
        primary_key=schema.effective_primary_key,
        external_id=schema.external_id_column,
        soft_delete=schema.is_soft_delete,
    )


def check_layout(layout: TableLayout, max_identifier: int) -> None:
    """Refuse identifiers that are invalid, too long for the dialect, or collide (case-insensitively).

    Raises:
        LayoutError: with a message naming the identifier.
    """
    names = [layout.table, *layout.column_names, *layout.primary_key]
    if layout.external_id is not None:
        names.append(layout.external_id)
    for name in names:
        if not is_valid_identifier(name):
            raise LayoutError(f"invalid SQL identifier: {name!r}")
        if len(name) > max_identifier:
            raise LayoutError(f"identifier {name!r} is longer than this database allows ({max_identifier})")
    if layout.table.lower().startswith("_lakesync"):
        raise LayoutError(f"table name {layout.table!r} is reserved (_lakesync*)")
    seen: dict[str, str] = {}
    for name in layout.column_names:
        folded = name.lower()
        if folded in SYSTEM_COLUMNS:
            raise LayoutError(f"column {name!r} collides with the destination's system column {folded!r}")
        if folded in seen and seen[folded] != name:
            raise LayoutError(f"columns {seen[folded]!r} and {name!r} differ only in case")
        seen[folded] = name
    known = {"row_id", *layout.column_names}
    for name in layout.primary_key:
        if name not in known:
            raise LayoutError(f"primary key column {name!r} is not a column")
    if layout.external_id is not None and layout.external_id not in layout.column_names:
        raise LayoutError(f"external id column {layout.external_id!r} is not a column")


def columns_to_json(columns: Sequence[tuple[str, ColumnType]]) -> str:
    """The ``_lakesync_tables.columns`` text."""
    return json.dumps([[name, ctype.value] for name, ctype in columns], separators=(",", ":"))


def columns_from_json(text: str) -> tuple[tuple[str, ColumnType], ...]:
    """Inverse of :func:`columns_to_json`."""
    return tuple((str(name), ColumnType(ctype)) for name, ctype in json.loads(text))


def _chunks(items: Sequence[Any], size: int = _IN_CHUNK) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class Dialect(ABC):
    """SQL of one database family; subclasses fill in the differences.

    Attributes:
        name: ``postgres``, ``mysql``, ``sqlite`` or ``bigquery``.
        max_identifier: Longest identifier the database keeps intact.
        allow_nul: Whether text columns can store U+0000.
        placeholder: The positional placeholder (``%s`` or ``?``).
        max_key_chars: Longest text a key column (``row_id``, primary key, external id) holds; ``None``: any.
    """

    name: str = "generic"
    max_identifier: int = 64
    allow_nul: bool = True
    max_key_chars: int | None = None
    placeholder: str = "?"
    quote_char: str = '"'
    _TYPES: ClassVar[Mapping[ColumnType, str]]
    """The SQL type of each schema column type."""
    props_type: ClassVar[str]
    """The column definition of ``props``."""
    timestamp_type: ClassVar[str] = "TIMESTAMP"
    """The type of ``deleted_at`` / ``synced_at``."""
    current_time: ClassVar[str] = "CURRENT_TIMESTAMP"
    """The SQL expression of the current time as stored in ``synced_at`` / ``deleted_at``."""
    share_lock: ClassVar[str] = " FOR SHARE"
    """The shared row lock clause of a SELECT."""
    update_lock: ClassVar[str] = " FOR UPDATE"
    """The exclusive row lock clause of a SELECT."""

    # -- identifiers and types ---------------------------------------------------------------------------------

    def quote(self, name: str) -> str:
        """Quote an identifier (already validated; the quote character is doubled anyway)."""
        q = self.quote_char
        return q + name.replace(q, q + q) + q

    def column_type(self, ctype: ColumnType) -> str:
        """The SQL type of a schema column."""
        return self._TYPES[ctype]

    def key_column_type(self, ctype: ColumnType) -> str:
        """The SQL type of a schema column that is part of the primary key or the external id."""
        return self.column_type(ctype)

    def _ph(self, n: int) -> str:
        return ", ".join([self.placeholder] * n)

    # -- DDL ---------------------------------------------------------------------------------------------------

    @abstractmethod
    def create_system_tables(self) -> list[str]:
        """``CREATE TABLE IF NOT EXISTS`` of the hidden state and metadata tables."""

    def create_table(self, layout: TableLayout) -> list[str]:
        """``CREATE TABLE IF NOT EXISTS`` of the destination table (plus its row_id index when needed)."""
        body = ",\n  ".join(self._table_body(layout, self.row_id_type()))
        create = f"CREATE TABLE IF NOT EXISTS {self.quote(layout.table)} (\n  {body}\n){self.table_options()}"
        return [create, *self._row_id_index(layout)]

    def row_id_type(self) -> str:
        """The type of ``row_id``."""
        return "TEXT"

    def table_options(self) -> str:
        """What follows the column list of a ``CREATE TABLE`` (engine, character set), with its leading space."""
        return ""

    def add_column(self, table: str, name: str, ctype: ColumnType) -> str:
        """``ALTER TABLE ... ADD COLUMN`` of a nullable column."""
        return f"ALTER TABLE {self.quote(table)} ADD COLUMN {self.quote(name)} {self.column_type(ctype)}"

    def add_deleted_at(self, table: str) -> str:
        """``ALTER TABLE ... ADD COLUMN deleted_at`` (a table switched to soft delete)."""
        return f"ALTER TABLE {self.quote(table)} ADD COLUMN deleted_at {self.timestamp_type}"

    @abstractmethod
    def existing_columns(self, table: str) -> Statement:
        """A query returning one row per physical column name of ``table``."""

    # -- metadata ----------------------------------------------------------------------------------------------

    @abstractmethod
    def insert_meta(self, table: str) -> Statement:
        """Insert the table's metadata row (no columns yet) unless it exists."""

    def read_meta(self, table: str, *, exclusive: bool) -> Statement:
        """Read (and lock: shared, or exclusive for schema changes) the table's metadata row: ``(columns,)``."""
        lock = self.update_lock if exclusive else self.share_lock
        p = self.placeholder
        return Statement(f"SELECT columns FROM {META_TABLE} WHERE tbl = {p}{lock}", (table,), returns=True)

    def update_meta(self, table: str, columns: Sequence[tuple[str, ColumnType]]) -> Statement:
        """Record the table's materialised columns."""
        p = self.placeholder
        return Statement(f"UPDATE {META_TABLE} SET columns = {p} WHERE tbl = {p}", (columns_to_json(columns), table))

    # -- state rows --------------------------------------------------------------------------------------------

    @abstractmethod
    def ensure_states(self, table: str, row_ids: Sequence[str]) -> list[Statement]:
        """Create missing state rows (``state`` NULL) for ``row_ids`` (sorted)."""

    def lock_states(self, table: str, row_ids: Sequence[str]) -> list[Statement]:
        """Queries returning ``(row_id, state)`` for ``row_ids``, locking them in ``row_id`` order."""
        p = self.placeholder
        return [
            Statement(
                f"SELECT row_id, state FROM {STATE_TABLE} WHERE tbl = {p} AND row_id IN ({self._ph(len(chunk))}) "
                f"ORDER BY row_id{self.update_lock}",
                (table, *chunk),
                returns=True,
            )
            for chunk in _chunks(row_ids)
        ]

    def write_states(self, table: str, states: Sequence[tuple[str, str]]) -> list[Statement]:
        """Store ``(row_id, state_json)`` pairs (the rows exist)."""
        p = self.placeholder
        sql = f"UPDATE {STATE_TABLE} SET state = {p} WHERE tbl = {p} AND row_id = {p}"
        return [Statement(sql, [(state, table, rid) for rid, state in states], many=True)] if states else []

    def all_states(self, table: str) -> Statement:
        """A query returning ``(row_id, state)`` of every seen row of ``table``."""
        p = self.placeholder
        return Statement(
            f"SELECT row_id, state FROM {STATE_TABLE} WHERE tbl = {p} AND state IS NOT NULL", (table,), returns=True
        )

    # -- destination rows --------------------------------------------------------------------------------------

    @abstractmethod
    def upsert_rows(self, layout: TableLayout, rows: Sequence[Sequence[Any]]) -> list[Statement]:
        """Insert or update ``rows`` (``(row_id, *values in layout column order)``), un-deleting them."""

    def update_by_key(self, layout: TableLayout, rows: Sequence[Sequence[Any]]) -> Statement | None:
        """A statement run before :meth:`upsert_rows` updating rows found by primary key, returning their row ids.

        Only dialects whose upsert takes a single conflict target need it (PostgreSQL, with an external id);
        :meth:`upsert_rows` then gets the rows not returned.
        """
        return None

    def delete_rows(self, layout: TableLayout, row_ids: Sequence[str]) -> list[Statement]:
        """Delete (hard) or mark deleted (soft) the rows of ``row_ids``."""
        q = self.quote(layout.table)
        out = []
        for chunk in _chunks(row_ids):
            ph = self._ph(len(chunk))
            if layout.soft_delete:
                now = self.current_time
                sql = (
                    f"UPDATE {q} SET deleted_at = {now}, synced_at = {now} "
                    f"WHERE row_id IN ({ph}) AND deleted_at IS NULL"
                )
            else:
                sql = f"DELETE FROM {q} WHERE row_id IN ({ph})"
            out.append(Statement(sql, tuple(chunk)))
        return out

    def backfill(self, layout: TableLayout, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[Statement]:
        """Set ``columns`` of existing rows: ``rows`` are ``(row_id, *values of columns)``."""
        if not rows:
            return []
        p = self.placeholder
        sets = ", ".join(f"{self.quote(c)} = {p}" for c in columns)
        sql = f"UPDATE {self.quote(layout.table)} SET {sets} WHERE row_id = {p}"
        return [Statement(sql, [(*row[1:], row[0]) for row in rows], many=True)]

    def select_rows(self, layout: TableLayout, columns: Sequence[str]) -> Statement:
        """A query returning ``(row_id, *columns)`` of the live rows (soft-deleted excluded)."""
        cols = "".join(f", {self.select_expr(c, layout.types[c])}" for c in columns)
        where = " WHERE deleted_at IS NULL" if layout.soft_delete else ""
        return Statement(f"SELECT row_id{cols} FROM {self.quote(layout.table)}{where}", (), returns=True)

    def select_expr(self, name: str, ctype: ColumnType) -> str:
        """How a column is selected for :meth:`select_rows` (json as text where the driver would parse it)."""
        return self.quote(name)

    def _table_body(self, layout: TableLayout, row_id_type: str) -> list[str]:
        parts = [f"row_id {row_id_type} NOT NULL"]
        keys = {*layout.primary_key, layout.external_id}
        parts += [
            f"{self.quote(n)} {self.key_column_type(t) if n in keys else self.column_type(t)}"
            for n, t in layout.columns
        ]
        parts.append(f"props {self.props_type}")
        ts = self.timestamp_type
        if layout.soft_delete:
            parts.append(f"deleted_at {ts}")
        parts.append(f"synced_at {ts} NOT NULL DEFAULT {self.current_time}")
        parts.append(f"PRIMARY KEY ({', '.join(self.quote(c) for c in layout.primary_key)})")
        if layout.external_id is not None:
            parts.append(f"UNIQUE ({self.quote(layout.external_id)})")
        return parts

    def _row_id_index(self, layout: TableLayout) -> list[str]:
        if layout.primary_key == ("row_id",):
            return []
        # Deletes, back-fills and updates find rows by row_id: index it when it is not the key.
        name = self.quote(f"{layout.table}_row_id_idx"[: self.max_identifier])
        return [f"CREATE INDEX IF NOT EXISTS {name} ON {self.quote(layout.table)} (row_id)"]
