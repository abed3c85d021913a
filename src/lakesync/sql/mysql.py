"""MySQL / MariaDB executor (PyMySQL): multi-row ``INSERT ... ON DUPLICATE KEY UPDATE`` through executemany.

The session runs in strict mode (a too-long row id fails instead of being truncated into another row's key), in UTC
(``time_zone = '+00:00'``) and with ``utf8mb4``. Deadlocks (1213), lock wait timeouts (1205) and concurrent-DDL
races (1050 table exists, 1060 duplicate column, 1061 duplicate key name) are retried; connection errors (2002-2055,
and the server-gone family) reconnect.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from lakesync.sql.dialect import MySQLDialect, Statement
from lakesync.sql.executor import ErrorKind, Executor, Run

if TYPE_CHECKING:
    import pymysql.connections

    from lakesync.sql.targets import DatabaseTarget

__all__ = ["MySQLExecutor"]

_RETRY_CODES = frozenset({1213, 1205, 1050, 1060, 1061, 1412})
_CONNECTION_CODES = frozenset({1040, 1042, 1043, 1047, 1053, 1077, 1078, 1079, 1080, 1081, 1152, 1153, 1158, 1159})
_SESSION = (
    "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,"
    "NO_ENGINE_SUBSTITUTION', time_zone = '+00:00'"
)


class MySQLExecutor(Executor):
    """One PyMySQL connection.

    Args:
        params: ``pymysql.connect`` keyword arguments (``host``, ``port``, ``user``, ``password``, ``database``,
            ``ssl``, ``unix_socket``, ...).
        location: Password-free description for messages.
        secrets: Strings to scrub from messages (the password).
        target: A checked admin-configured target (:mod:`lakesync.sql.targets`): resolved, checked against the
            network policy and dialled by address at every connect (``params`` then add to it).
    """

    dialect: MySQLDialect

    def __init__(
        self,
        params: Mapping[str, Any],
        *,
        location: str = "mysql",
        secrets: tuple[str, ...] = (),
        target: DatabaseTarget | None = None,
    ) -> None:
        self._params = dict(params)
        self.location = location
        self.secrets = secrets
        self._target = target
        self.dialect = MySQLDialect()
        self._conn: pymysql.connections.Connection[Any] | None = None

    def _open(self) -> pymysql.connections.Connection[Any]:
        import pymysql

        if self._target is None:
            choices = [self._params]
        else:
            from lakesync.sql.targets import mysql_kwargs

            what = f"destination at {self._target.location}"
            choices = [{**mysql_kwargs(self._target, a), **self._params} for a in self._target.addresses(what=what)]
        for i, params in enumerate(choices):
            try:
                return pymysql.connect(
                    **{"connect_timeout": 10, **params},
                    charset="utf8mb4",
                    autocommit=True,
                    local_infile=False,
                    init_command=_SESSION,
                )
            except pymysql.err.OperationalError:
                if i == len(choices) - 1:
                    raise
        raise AssertionError("no address to connect to")

    def _connection(self) -> pymysql.connections.Connection[Any]:
        if self._conn is None or not self._conn.open:
            conn = self._open()
            with conn.cursor() as cur:
                cur.execute("SELECT VERSION()")
                row = cur.fetchone()
            # Collations differ between the two (SQL is generated inside transactions, so after this).
            self.dialect.set_flavour(mariadb="mariadb" in str(row[0] if row else "").lower())
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
            cur.execute(stmt.sql, stmt.params or None)
            return [tuple(r) for r in cur.fetchall()] if stmt.returns else []

        conn.begin()
        try:
            yield run
        except BaseException:
            with contextlib.suppress(Exception):
                conn.rollback()
            raise
        else:
            conn.commit()
        finally:
            cur.close()

    def classify(self, exc: BaseException) -> ErrorKind | None:
        import pymysql

        if not isinstance(exc, pymysql.err.Error):
            return None
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        if code in _RETRY_CODES:
            return ErrorKind.RETRY
        if isinstance(exc, pymysql.err.InterfaceError) or (
            code is not None and (2000 <= code < 3000 or code in _CONNECTION_CODES)
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
