"""SQLite (stdlib :mod:`sqlite3`): the dialect and the executor of the embedded default's destination.

Every transaction is ``BEGIN IMMEDIATE``: it takes the database's write lock up front, so concurrent writers (other
processes on the same file) queue on ``busy_timeout`` instead of deadlocking between a read and a write; a
``database is locked`` that outlasts the timeout is retried by the destination.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

from lakesync.core.schema import ColumnType
from lakesync.sql.dialect import META_TABLE, STATE_TABLE, Dialect, Statement, TableLayout
from lakesync.sql.executor import ErrorKind, Executor, Run, cursor_run

__all__ = ["SQLiteDialect", "SQLiteExecutor"]


class SQLiteDialect(Dialect):
    """SQLite 3.35+ (stdlib ``sqlite3``): executemany in one ``BEGIN IMMEDIATE`` transaction.

    Types use SQLite's affinities: TEXT, REAL, INTEGER (booleans 0/1) and TEXT for JSON (a ``JSON`` declared type
    would get NUMERIC affinity and turn the text ``"1.0"`` into a number). Timestamps are ISO-8601 UTC text.
    """

    name = "sqlite"
    max_identifier = 64
    allow_nul = True

    _TYPES: ClassVar[Mapping[ColumnType, str]] = {
        ColumnType.STRING: "TEXT",
        ColumnType.NULL: "TEXT",
        ColumnType.NUMBER: "REAL",
        ColumnType.BOOLEAN: "INTEGER",
        ColumnType.JSON: "TEXT",
    }
    current_time = "(strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"
    timestamp_type = "TEXT"
    props_type = "TEXT NOT NULL DEFAULT '{}'"
    share_lock = ""  # BEGIN IMMEDIATE already holds the database's write lock
    update_lock = ""

    def create_system_tables(self) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (tbl TEXT NOT NULL, row_id TEXT NOT NULL, state TEXT, "
            "PRIMARY KEY (tbl, row_id))",
            f"CREATE TABLE IF NOT EXISTS {META_TABLE} (tbl TEXT PRIMARY KEY, columns TEXT NOT NULL)",
        ]

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
            sets.append(f"synced_at = {self.current_time}")
            return f" ON CONFLICT ({', '.join(self.quote(c) for c in target)}) DO UPDATE SET {', '.join(sets)}"

        # The row's own primary key first (a stored row whose external id is NULL or changed), then the external id.
        conflicts = clause(layout.primary_key)
        if layout.external_id is not None:
            conflicts += clause((layout.external_id,))
        sql = f"INSERT INTO {self.quote(layout.table)} ({cols}) VALUES ({self._ph(len(names) + 1)}){conflicts}"
        return [Statement(sql, [tuple(r) for r in rows], many=True)]


class SQLiteExecutor(Executor):
    """One ``sqlite3`` connection to a database file (or ``:memory:``).

    Args:
        path: The database file, or ``:memory:``.
        timeout_s: How long a statement waits for another writer's lock.
    """

    def __init__(self, path: str, *, timeout_s: float = 10.0) -> None:
        self.dialect = SQLiteDialect()
        self.path = path
        self.location = f"sqlite:///{path}"
        self._timeout = timeout_s
        self._conn: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            # isolation_level=None: no implicit transactions; ours are explicit BEGIN IMMEDIATE ... COMMIT.
            conn = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA foreign_keys = ON")
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
            self._conn = conn
        return self._conn

    @contextlib.contextmanager
    def transaction(self, *, ddl: bool = False) -> Iterator[Run]:
        conn = self._connection()
        cur = conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cursor_run(cur)
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.rollback()
            raise
        else:
            cur.execute("COMMIT")
        finally:
            cur.close()

    def classify(self, exc: BaseException) -> ErrorKind | None:
        if isinstance(exc, sqlite3.OperationalError):
            text = str(exc).lower()
            if "locked" in text or "busy" in text:
                return ErrorKind.RETRY
            if "unable to open" in text or "disk i/o" in text:
                return ErrorKind.CONNECTION
            return ErrorKind.FATAL
        if isinstance(exc, sqlite3.Error):
            return ErrorKind.FATAL
        return None

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(sqlite3.Error):
                conn.close()
