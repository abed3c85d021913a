"""PostgreSQL executor (psycopg 3): each batch step is one statement over ``unnest`` of typed arrays.

Deadlocks (``40P01``), serialization failures (``40001``), lock timeouts (``55P03``) and the races of concurrent
``CREATE TABLE IF NOT EXISTS`` (unique violations in the catalog, duplicate table/column) are retried by the
destination; ``OperationalError`` (connection refused or lost) reconnects.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from lakesync.sql.dialect import PostgresDialect, Statement
from lakesync.sql.executor import ErrorKind, Executor, Run

if TYPE_CHECKING:
    import psycopg

    from lakesync.sql.targets import DatabaseTarget

__all__ = ["PostgresExecutor"]

_RETRY_SQLSTATES = frozenset({"40P01", "40001", "55P03", "42P07", "42701", "42710"})
"""deadlock, serialization failure, lock not available, duplicate table / column / object (concurrent DDL)."""


class PostgresExecutor(Executor):
    """One psycopg connection.

    Args:
        conninfo: A libpq URL or ``key=value`` string (may be empty when ``kwargs`` say everything).
        kwargs: Connection parameters (``host``, ``port``, ``user``, ``password``, ``dbname``, ``sslmode``, ...).
        location: Password-free description for messages.
        secrets: Strings to scrub from messages (the password).
        target: A checked admin-configured target (:mod:`lakesync.sql.targets`): resolved, checked against the
            network policy and dialled by address (``hostaddr``) at every connect; ``conninfo`` is then unused.
    """

    def __init__(
        self,
        conninfo: str = "",
        *,
        kwargs: Mapping[str, Any] | None = None,
        location: str = "postgresql",
        secrets: tuple[str, ...] = (),
        target: DatabaseTarget | None = None,
    ) -> None:
        self.dialect = PostgresDialect()
        self._conninfo = conninfo
        self._kwargs = dict(kwargs or {})
        self.location = location
        self.secrets = secrets
        self._target = target
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None

    def _connection(self) -> psycopg.Connection[tuple[Any, ...]]:
        import psycopg

        if self._conn is None or self._conn.closed:
            self._kwargs.setdefault("connect_timeout", 10)
            self._kwargs.setdefault("application_name", "lakesync-materialise")
            kwargs = dict(self._kwargs)
            if self._target is not None:
                kwargs.update(self._target.postgres_kwargs(what=f"destination at {self._target.location}"))
            self._conn = psycopg.connect(self._conninfo, autocommit=True, **kwargs)
        return self._conn

    @contextlib.contextmanager
    def transaction(self, *, ddl: bool = False) -> Iterator[Run]:
        conn = self._connection()
        # Pipeline mode: a statement whose results are not read is sent without waiting for its answer, so the server
        # executes it while the caller prepares the next (errors surface at the next read or at COMMIT).
        pipeline = contextlib.nullcontext() if ddl else conn.pipeline()
        with pipeline, conn.transaction(), conn.cursor() as cur:

            def run(stmt: Statement) -> list[tuple[Any, ...]]:
                if stmt.many:
                    cur.executemany(stmt.sql, stmt.params)
                    return []
                cur.execute(stmt.sql, stmt.params or None)
                return list(cur.fetchall()) if stmt.returns else []

            yield run

    def classify(self, exc: BaseException) -> ErrorKind | None:
        import psycopg

        if not isinstance(exc, psycopg.Error):
            return None
        if exc.sqlstate in _RETRY_SQLSTATES:
            return ErrorKind.RETRY
        if exc.sqlstate == "23505" and getattr(exc.diag, "table_name", None) in ("pg_type", "pg_class"):
            return ErrorKind.RETRY  # two sessions creating the same table at once
        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) and (
            exc.sqlstate is None or exc.sqlstate.startswith("08") or exc.sqlstate.startswith("57P")
        ):
            return ErrorKind.CONNECTION
        return ErrorKind.FATAL

    def reset(self) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                conn.close()
