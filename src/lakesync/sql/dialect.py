"""The dialect seam: per database, the SQL text and parameter binding of every step of materialisation (pure).

A dialect knows how to quote identifiers, map column types, create the destination table, add a column, and build
the batched statements of one ``apply``: ensure and lock the hidden state rows, write them back, upsert live rows,
delete (hard) or soft-delete dead ones, back-fill added columns. It never talks to a database: it returns
:class:`Statement` objects that a driver executor (:mod:`lakesync.sql.postgres`, :mod:`~lakesync.sql.mysql`,
:mod:`~lakesync.sql.sqlite`, :mod:`~lakesync.sql.bigquery`) runs.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from lakesync.core.schema import ColumnType, TableSchema, is_valid_identifier

__all__ = [
    "META_TABLE",
    "STATE_TABLE",
    "SYSTEM_COLUMNS",
    "Dialect",
    "LayoutError",
    "MySQLDialect",
    "PostgresDialect",
    "SQLiteDialect",
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


_rows_json = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


def _chunks(items: Sequence[Any], size: int = _IN_CHUNK) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class Dialect:
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

    # -- identifiers and types ---------------------------------------------------------------------------------

    def quote(self, name: str) -> str:
        """Quote an identifier (already validated; the quote character is doubled anyway)."""
        q = self.quote_char
        return q + name.replace(q, q + q) + q

    def column_type(self, ctype: ColumnType) -> str:
        """The SQL type of a schema column."""
        raise NotImplementedError

    def key_column_type(self, ctype: ColumnType) -> str:
        """The SQL type of a schema column that is part of the primary key or the external id."""
        return self.column_type(ctype)

    def now(self) -> str:
        """The SQL expression of the current time as stored in ``synced_at`` / ``deleted_at``."""
        return "CURRENT_TIMESTAMP"

    def _ph(self, n: int) -> str:
        return ", ".join([self.placeholder] * n)

    # -- DDL ---------------------------------------------------------------------------------------------------

    def create_system_tables(self) -> list[str]:
        """``CREATE TABLE IF NOT EXISTS`` of the hidden state and metadata tables."""
        raise NotImplementedError

    def create_table(self, layout: TableLayout) -> list[str]:
        """``CREATE TABLE IF NOT EXISTS`` of the destination table (plus its row_id index when needed)."""
        raise NotImplementedError

    def add_column(self, table: str, name: str, ctype: ColumnType) -> str:
        """``ALTER TABLE ... ADD COLUMN`` of a nullable column."""
        return f"ALTER TABLE {self.quote(table)} ADD COLUMN {self.quote(name)} {self.column_type(ctype)}"

    def add_deleted_at(self, table: str) -> str:
        """``ALTER TABLE ... ADD COLUMN deleted_at`` (a table switched to soft delete)."""
        return f"ALTER TABLE {self.quote(table)} ADD COLUMN deleted_at {self.timestamp_type()}"

    def timestamp_type(self) -> str:
        """The type of ``deleted_at`` / ``synced_at``."""
        return "TIMESTAMP"

    def existing_columns(self, table: str) -> Statement:
        """A query returning one row per physical column name of ``table``."""
        raise NotImplementedError

    # -- metadata ----------------------------------------------------------------------------------------------

    def insert_meta(self, table: str) -> Statement:
        """Insert the table's metadata row (no columns yet) unless it exists."""
        raise NotImplementedError

    def read_meta(self, table: str, *, exclusive: bool) -> Statement:
        """Read (and lock: shared, or exclusive for schema changes) the table's metadata row: ``(columns,)``."""
        lock = self.update_lock() if exclusive else self.share_lock()
        p = self.placeholder
        return Statement(f"SELECT columns FROM {META_TABLE} WHERE tbl = {p}{lock}", (table,), returns=True)

    def share_lock(self) -> str:
        """The shared row lock clause."""
        return " FOR SHARE"

    def update_meta(self, table: str, columns: Sequence[tuple[str, ColumnType]]) -> Statement:
        """Record the table's materialised columns."""
        p = self.placeholder
        return Statement(f"UPDATE {META_TABLE} SET columns = {p} WHERE tbl = {p}", (columns_to_json(columns), table))

    # -- state rows --------------------------------------------------------------------------------------------

    def ensure_states(self, table: str, row_ids: Sequence[str]) -> list[Statement]:
        """Create missing state rows (``state`` NULL) for ``row_ids`` (sorted)."""
        raise NotImplementedError

    def lock_states(self, table: str, row_ids: Sequence[str]) -> list[Statement]:
        """Queries returning ``(row_id, state)`` for ``row_ids``, locking them in ``row_id`` order."""
        p = self.placeholder
        return [
            Statement(
                f"SELECT row_id, state FROM {STATE_TABLE} WHERE tbl = {p} AND row_id IN ({self._ph(len(chunk))}) "
                f"ORDER BY row_id{self.update_lock()}",
                (table, *chunk),
                returns=True,
            )
            for chunk in _chunks(row_ids)
        ]

    def update_lock(self) -> str:
        """The exclusive row lock clause of a SELECT."""
        return " FOR UPDATE"

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

    def upsert_rows(self, layout: TableLayout, rows: Sequence[Sequence[Any]]) -> list[Statement]:
        """Insert or update ``rows`` (``(row_id, *values in layout column order)``), un-deleting them."""
        raise NotImplementedError

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
                now = self.now()
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

    def props_type(self) -> str:
        """The column definition of ``props``."""
        raise NotImplementedError

    def _table_body(self, layout: TableLayout, row_id_type: str) -> list[str]:
        parts = [f"row_id {row_id_type} NOT NULL"]
        keys = {*layout.primary_key, layout.external_id}
        parts += [
            f"{self.quote(n)} {self.key_column_type(t) if n in keys else self.column_type(t)}"
            for n, t in layout.columns
        ]
        parts.append(f"props {self.props_type()}")
        ts = self.timestamp_type()
        if layout.soft_delete:
            parts.append(f"deleted_at {ts}")
        parts.append(f"synced_at {ts} NOT NULL DEFAULT {self.now()}")
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


class PostgresDialect(Dialect):
    """PostgreSQL 12+ (psycopg 3): each batch step is one statement over ``unnest`` of typed arrays."""

    name = "postgres"
    max_identifier = 63  # NAMEDATALEN - 1: longer names are silently truncated
    allow_nul = False  # text and jsonb cannot hold U+0000
    placeholder = "%s"

    _TYPES: Final = {
        ColumnType.STRING: "TEXT",
        ColumnType.NULL: "TEXT",
        ColumnType.NUMBER: "DOUBLE PRECISION",
        ColumnType.BOOLEAN: "BOOLEAN",
        ColumnType.JSON: "JSONB",
    }
    _CASTS: Final = {
        ColumnType.STRING: "",
        ColumnType.NULL: "",
        ColumnType.NUMBER: "::float8",
        ColumnType.BOOLEAN: "::boolean",
        ColumnType.JSON: "::jsonb",
    }

    def column_type(self, ctype: ColumnType) -> str:
        return self._TYPES[ctype]

    def timestamp_type(self) -> str:
        return "TIMESTAMPTZ"

    def now(self) -> str:
        return "now()"

    def props_type(self) -> str:
        return "JSONB NOT NULL DEFAULT '{}'"

    def create_system_tables(self) -> list[str]:
        # COLLATE "C": the database orders row ids bytewise, as Python sorts them, so locks are taken in one order.
        return [
            f'CREATE TABLE IF NOT EXISTS {STATE_TABLE} (tbl TEXT NOT NULL, row_id TEXT COLLATE "C" NOT NULL, '
            "state TEXT, PRIMARY KEY (tbl, row_id))",
            f"CREATE TABLE IF NOT EXISTS {META_TABLE} (tbl TEXT PRIMARY KEY, columns TEXT NOT NULL)",
        ]

    def create_table(self, layout: TableLayout) -> list[str]:
        body = ",\n  ".join(self._table_body(layout, "TEXT"))
        return [f"CREATE TABLE IF NOT EXISTS {self.quote(layout.table)} (\n  {body}\n)", *self._row_id_index(layout)]

    def existing_columns(self, table: str) -> Statement:
        return Statement(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = %s",
            (table,),
            returns=True,
        )

    def insert_meta(self, table: str) -> Statement:
        return Statement(
            f"INSERT INTO {META_TABLE} (tbl, columns) VALUES (%s, '[]') ON CONFLICT (tbl) DO NOTHING", (table,)
        )

    def ensure_states(self, table: str, row_ids: Sequence[str]) -> list[Statement]:
        return [
            Statement(
                f"INSERT INTO {STATE_TABLE} (tbl, row_id) SELECT %s, r FROM unnest(%b::text[]) AS r "
                "ON CONFLICT (tbl, row_id) DO NOTHING",
                (table, list(row_ids)),
            )
        ]

    def lock_states(self, table: str, row_ids: Sequence[str]) -> list[Statement]:
        return [
            Statement(
                f"SELECT row_id, state FROM {STATE_TABLE} WHERE tbl = %s AND row_id = ANY(%b::text[]) "
                "ORDER BY row_id FOR UPDATE",
                (table, list(row_ids)),
                returns=True,
            )
        ]

    def write_states(self, table: str, states: Sequence[tuple[str, str]]) -> list[Statement]:
        if not states:
            return []
        return [
            Statement(
                f"UPDATE {STATE_TABLE} AS s SET state = v.state "
                "FROM (SELECT e->>0 AS row_id, e->>1 AS state FROM json_array_elements(%s::json) AS e) AS v "
                "WHERE s.tbl = %s AND s.row_id = v.row_id",
                (_rows_json(states), table),
            )
        ]

    def _unnest(
        self, layout: TableLayout, names: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> tuple[str, list[Any]]:
        # One JSON text of the rows, each an array, expanded and cast by the server: psycopg binds it as one string,
        # where typed arrays would be dumped value by value in Python. Values are already coerced: text, finite
        # doubles, booleans, JSON text (json columns) or NULL.
        fields = ", ".join(
            [
                "e->>0 AS row_id",
                *(f"(e->>{i}){self._CASTS[layout.types[n]]} AS {self.quote(n)}" for i, n in enumerate(names, 1)),
            ]
        )
        return f"(SELECT {fields} FROM json_array_elements(%s::json) AS e) AS v", [_rows_json(rows)]

    def upsert_rows(self, layout: TableLayout, rows: Sequence[Sequence[Any]]) -> list[Statement]:
        if not rows:
            return []
        names = layout.column_names
        source, params = self._unnest(layout, names, rows)
        q = self.quote(layout.table)
        cols = ", ".join(["row_id", *(self.quote(n) for n in names)])
        target = layout.conflict_target
        sets = [f"{self.quote(n)} = EXCLUDED.{self.quote(n)}" for n in names if n not in target]
        if layout.soft_delete:
            sets.append("deleted_at = NULL")
        sets.append("synced_at = now()")
        conflict = ", ".join(self.quote(c) for c in target)
        insert = (
            f"INSERT INTO {q} ({cols}) SELECT * FROM {source} ON CONFLICT ({conflict}) DO UPDATE SET {', '.join(sets)}"
        )
        return [Statement(insert, params)]

    def update_by_key(self, layout: TableLayout, rows: Sequence[Sequence[Any]]) -> Statement | None:
        # One conflict target per statement here: with an external id as the target, a row already stored under its
        # primary key (its external id still NULL, or changed) is updated in place first, and only the others go
        # through INSERT ... ON CONFLICT (external id).
        if layout.external_id is None or not rows:
            return None
        names = layout.column_names
        source, params = self._unnest(layout, names, rows)
        key = " AND ".join(f"t.{self.quote(c)} = v.{self.quote(c)}" for c in layout.primary_key)
        upd = [f"{self.quote(n)} = v.{self.quote(n)}" for n in names if n not in layout.primary_key]
        if layout.soft_delete:
            upd.append("deleted_at = NULL")
        upd.append("synced_at = now()")
        q = self.quote(layout.table)
        return Statement(
            f"UPDATE {q} AS t SET {', '.join(upd)} FROM {source} WHERE {key} RETURNING v.row_id", params, returns=True
        )

    def delete_rows(self, layout: TableLayout, row_ids: Sequence[str]) -> list[Statement]:
        if not row_ids:
            return []
        q = self.quote(layout.table)
        if layout.soft_delete:
            sql = (
                f"UPDATE {q} SET deleted_at = now(), synced_at = now() "
                "WHERE row_id = ANY(%b::text[]) AND deleted_at IS NULL"
            )
        else:
            sql = f"DELETE FROM {q} WHERE row_id = ANY(%b::text[])"
        return [Statement(sql, (list(row_ids),))]

    def backfill(self, layout: TableLayout, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[Statement]:
        if not rows:
            return []
        source, params = self._unnest(layout, columns, rows)
        sets = ", ".join(f"{self.quote(c)} = v.{self.quote(c)}" for c in columns)
        return [
            Statement(
                f"UPDATE {self.quote(layout.table)} AS t SET {sets} FROM {source} WHERE t.row_id = v.row_id", params
            )
        ]

    def select_expr(self, name: str, ctype: ColumnType) -> str:
        return f"{self.quote(name)}::text" if ctype is ColumnType.JSON else self.quote(name)


class MySQLDialect(Dialect):
    """MySQL 8 / MariaDB 10.5+ (PyMySQL): multi-row ``INSERT ... ON DUPLICATE KEY UPDATE`` through executemany.

    Text keys use a binary, no-pad collation (``utf8mb4_nopad_bin`` on MariaDB, ``utf8mb4_0900_bin`` on MySQL), so
    ``"a"``, ``"A"`` and ``"a "`` are distinct row ids. Timestamps are ``DATETIME(6)`` in UTC (the session time zone
    is set to ``+00:00``), not ``TIMESTAMP``, which ends in 2038.
    """

    name = "mysql"
    max_identifier = 64
    allow_nul = True
    max_key_chars = 255  # VARCHAR(255): LONGTEXT cannot be a key
    placeholder = "%s"
    quote_char = "`"

    _TYPES: Final = {
        ColumnType.STRING: "LONGTEXT",
        ColumnType.NULL: "LONGTEXT",
        ColumnType.NUMBER: "DOUBLE",
        ColumnType.BOOLEAN: "TINYINT(1)",
        ColumnType.JSON: "JSON",
    }

    def __init__(self, *, mariadb: bool = True) -> None:
        """Build the dialect for MariaDB (default) or MySQL (their no-pad binary collations differ)."""
        self.set_flavour(mariadb=mariadb)

    def set_flavour(self, *, mariadb: bool) -> None:
        """Switch between MariaDB and MySQL (the executor finds out when it connects)."""
        self.mariadb = mariadb
        self.key_collation = "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"

    def column_type(self, ctype: ColumnType) -> str:
        return self._TYPES[ctype]

    def key_column_type(self, ctype: ColumnType) -> str:
        # LONGTEXT cannot be a key: text key columns are VARCHAR(255) with the binary no-pad collation.
        if ctype in (ColumnType.STRING, ColumnType.NULL):
            return self._key(255)
        return self.column_type(ctype)

    def timestamp_type(self) -> str:
        return "DATETIME(6) NULL"

    def now(self) -> str:
        return "CURRENT_TIMESTAMP(6)"

    def props_type(self) -> str:
        return "JSON NOT NULL DEFAULT ('{}')"

    def _key(self, length: int) -> str:
        return f"VARCHAR({length}) CHARACTER SET utf8mb4 COLLATE {self.key_collation}"

    def _table_options(self) -> str:
        return f" ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={self.key_collation}"

    def create_system_tables(self) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (tbl {self._key(64)} NOT NULL, "
            f"row_id {self._key(255)} NOT NULL, state LONGTEXT NULL, PRIMARY KEY (tbl, row_id)){self._table_options()}",
            f"CREATE TABLE IF NOT EXISTS {META_TABLE} (tbl {self._key(64)} NOT NULL PRIMARY KEY, "
            f"columns LONGTEXT NOT NULL){self._table_options()}",
        ]

    def create_table(self, layout: TableLayout) -> list[str]:
        body = ",\n  ".join(self._table_body(layout, self._key(255)))
        stmts = [f"CREATE TABLE IF NOT EXISTS {self.quote(layout.table)} (\n  {body}\n){self._table_options()}"]
        return stmts + self._row_id_index(layout)

    def add_column(self, table: str, name: str, ctype: ColumnType) -> str:
        return f"ALTER TABLE {self.quote(table)} ADD COLUMN {self.quote(name)} {self.column_type(ctype)} NULL"

    def existing_columns(self, table: str) -> Statement:
        return Statement(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = %s",
            (table,),
            returns=True,
        )

    def share_lock(self) -> str:
        return " LOCK IN SHARE MODE"  # MySQL 8 and MariaDB both accept it

    def insert_meta(self, table: str) -> Statement:
        return Statement(
            f"INSERT INTO {META_TABLE} (tbl, columns) VALUES (%s, '[]') ON DUPLICATE KEY UPDATE tbl = tbl", (table,)
        )

    def ensure_states(self, table: str, row_ids: Sequence[str]) -> list[Statement]:
        # Not INSERT IGNORE: that would also silence a too-long row id (truncated into another row's key).
        sql = f"INSERT INTO {STATE_TABLE} (tbl, row_id) VALUES (%s, %s) ON DUPLICATE KEY UPDATE tbl = tbl"
        return [Statement(sql, [(table, rid) for rid in row_ids], many=True)] if row_ids else []

    def write_states(self, table: str, states: Sequence[tuple[str, str]]) -> list[Statement]:
        if not states:
            return []
        sql = (
            f"INSERT INTO {STATE_TABLE} (tbl, row_id, state) VALUES (%s, %s, %s) "
            "ON DUPLICATE KEY UPDATE state = VALUES(state)"
        )
        return [Statement(sql, [(table, rid, state) for rid, state in states], many=True)]

    def upsert_rows(self, layout: TableLayout, rows: Sequence[Sequence[Any]]) -> list[Statement]:
        if not rows:
            return []
        names = layout.column_names
        cols = ", ".join(["row_id", *(self.quote(n) for n in names)])
        # ON DUPLICATE KEY fires on the primary key and on the external id's UNIQUE key alike.
        # Key columns stay (a row found by its external id keeps its primary key); the external id itself is set.
        sets = [f"{self.quote(n)} = VALUES({self.quote(n)})" for n in names if n not in layout.primary_key]
        if layout.soft_delete:
            sets.append("deleted_at = NULL")
        sets.append("synced_at = CURRENT_TIMESTAMP(6)")
        sql = (
            f"INSERT INTO {self.quote(layout.table)} ({cols}) VALUES ({self._ph(len(names) + 1)}) "
            f"ON DUPLICATE KEY UPDATE {', '.join(sets)}"
        )
        return [Statement(sql, [tuple(r) for r in rows], many=True)]


class SQLiteDialect(Dialect):
    """SQLite 3.35+ (stdlib ``sqlite3``): executemany in one ``BEGIN IMMEDIATE`` transaction.

    Types use SQLite's affinities: TEXT, REAL, INTEGER (booleans 0/1) and TEXT for JSON (a ``JSON`` declared type
    would get NUMERIC affinity and turn the text ``"1.0"`` into a number). Timestamps are ISO-8601 UTC text.
    """

    name = "sqlite"
    max_identifier = 64
    allow_nul = True

    _TYPES: Final = {
        ColumnType.STRING: "TEXT",
        ColumnType.NULL: "TEXT",
        ColumnType.NUMBER: "REAL",
        ColumnType.BOOLEAN: "INTEGER",
        ColumnType.JSON: "TEXT",
    }

    def column_type(self, ctype: ColumnType) -> str:
        return self._TYPES[ctype]

    def timestamp_type(self) -> str:
        return "TEXT"

    def now(self) -> str:
        return "(strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"

    def props_type(self) -> str:
        return "TEXT NOT NULL DEFAULT '{}'"

    def share_lock(self) -> str:
        return ""  # BEGIN IMMEDIATE already holds the database's write lock

    def update_lock(self) -> str:
        return ""

    def create_system_tables(self) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (tbl TEXT NOT NULL, row_id TEXT NOT NULL, state TEXT, "
            "PRIMARY KEY (tbl, row_id))",
            f"CREATE TABLE IF NOT EXISTS {META_TABLE} (tbl TEXT PRIMARY KEY, columns TEXT NOT NULL)",
        ]

    def create_table(self, layout: TableLayout) -> list[str]:
        body = ",\n  ".join(self._table_body(layout, "TEXT"))
        return [f"CREATE TABLE IF NOT EXISTS {self.quote(layout.table)} (\n  {body}\n)", *self._row_id_index(layout)]

    def existing_columns(self, table: str) -> Statement:
        return Statement("SELECT name FROM pragma_table_info(?)", (table,), returns=True)

    def insert_meta(self, table: str) -> Statement:
        return Statement(
            f"INSERT INTO {META_TABLE} (tbl, columns) VALUES (?, '[]') ON CONFLICT (tbl) DO NOTHING", (table,)
        )

    def ensure_states(self, table: str, row_ids: Sequence[str]) -> list[Statement]:
        sql = f"INSERT INTO {STATE_TABLE} (tbl, row_id) VALUES (?, ?) ON CONFLICT (tbl, row_id) DO NOTHING"
        return [Statement(sql, [(table, rid) for rid in row_ids], many=True)] if row_ids else []

    def upsert_rows(self, layout: TableLayout, rows: Sequence[Sequence[Any]]) -> list[Statement]:
        if not rows:
            return []
        names = layout.column_names
        cols = ", ".join(["row_id", *(self.quote(n) for n in names)])

        def clause(target: Sequence[str]) -> str:
            sets = [f"{self.quote(n)} = excluded.{self.quote(n)}" for n in names if n not in target]
            if layout.soft_delete:
                sets.append("deleted_at = NULL")
            sets.append(f"synced_at = {self.now()}")
            return f" ON CONFLICT ({', '.join(self.quote(c) for c in target)}) DO UPDATE SET {', '.join(sets)}"

        # The row's own primary key first (a stored row whose external id is NULL or changed), then the external id.
        conflicts = clause(layout.primary_key)
        if layout.external_id is not None:
            conflicts += clause((layout.external_id,))
        sql = f"INSERT INTO {self.quote(layout.table)} ({cols}) VALUES ({self._ph(len(names) + 1)}){conflicts}"
        return [Statement(sql, [tuple(r) for r in rows], many=True)]
