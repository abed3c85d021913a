"""SQLite executor (stdlib :mod:`sqlite3`): the embedded default's destination.

Every transaction is ``BEGIN IMMEDIATE``: it takes the database's write lock up front, so concurrent writers (other
processes on the same file) queue on ``busy_timeout`` instead of deadlocking between a read and a write; a
``database is locked`` that outlasts the timeout is retried by the destination.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any

from lakesync.sql.dialect import SQLiteDialect, Statement
from lakesync.sql.executor import ErrorKind, Executor, Run

__all__ = ["SQLiteExecutor"]


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

        def run(stmt: Statement) -> list[tuple[Any, ...]]:
            if stmt.many:
                cur.executemany(stmt.sql, stmt.params)
                return []
            cur.execute(stmt.sql, stmt.params)
            return [tuple(r) for r in cur.fetchall()] if stmt.returns else []

        cur.execute("BEGIN IMMEDIATE")
        try:
            yield run
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

    def reset(self) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(sqlite3.Error):
                conn.close()
