"""The MySQL / MariaDB runner of the SQL connectors (PyMySQL): read-only queries, one statement each."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lakesync.connectors.sql.runner import driver
from lakesync.core.errors import AdapterError
from lakesync.core.redact import redact
from lakesync.sql.targets import mysql_kwargs, mysql_target

__all__ = ["MySQLRunner"]


class MySQLRunner:
    """PyMySQL, one connection (opened on first use, reopened after a failure), read-only transactions.

    As :class:`~lakesync.connectors.sql.postgres.PostgresRunner`: the URL checked when made, the host resolved,
    checked and dialled by address at every connect; the session's transactions default to read-only, each query runs
    inside ``START TRANSACTION READ ONLY``, and the connection never enables multi-statements (``client_flag`` without
    ``MULTI_STATEMENTS``), so a query is one statement.
    """

    dialect = "mysql"

    def __init__(self, url: str, *, name: str, connect_timeout_s: int = 10) -> None:
        self._name = name
        self._what = f'Connector "{name}" connectionString'
        self._target = mysql_target(url, what=self._what)
        self._timeout = connect_timeout_s
        self._conn: Any = None

    def _connect(self, pymysql: Any) -> Any:
        last: Exception | None = None
        for address in self._target.addresses(what=self._what):
            try:
                return pymysql.connect(
                    **{"connect_timeout": self._timeout, **mysql_kwargs(self._target, address)},
                    charset="utf8mb4",
                    client_flag=0,
                    local_infile=False,
                    autocommit=False,
                    init_command="SET SESSION TRANSACTION READ ONLY",
                )
            except pymysql.err.OperationalError as exc:
                last = exc
        assert last is not None
        raise last

    def query(self, sql: str, params: Sequence[Any] = ()) -> tuple[list[str], list[tuple[Any, ...]]]:
        pymysql = driver("pymysql", self._name, "MySQL")
        try:
            if self._conn is None or not self._conn.open:
                self._conn = self._connect(pymysql)
            with self._conn.cursor() as cur:
                cur.execute("START TRANSACTION READ ONLY")
                try:
                    cur.execute(sql, tuple(params) if params else None)
                    names = [d[0] for d in cur.description or ()]
                    rows = list(cur.fetchall())
                finally:
                    self._conn.rollback()
                return names, rows
        except pymysql.Error as exc:
            self.close()
            detail = redact(str(exc), (self._target.password or "",))
            raise AdapterError(f'Connector "{self._name}": MySQL at {self._target.location} failed: {detail}') from None

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # already broken: nothing to release
                pass
            finally:
                self._conn = None
