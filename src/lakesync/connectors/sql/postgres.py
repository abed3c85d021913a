"""The PostgreSQL runner of the SQL connectors (psycopg 3): read-only queries over the extended protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from lakesync.connectors.sql.runner import driver
from lakesync.core.errors import AdapterError
from lakesync.core.redact import redact
from lakesync.sql.targets import postgres_target

__all__ = ["PostgresRunner"]

_READ_ONLY_SESSION: Final = "-c default_transaction_read_only=on"


class PostgresRunner:
    """psycopg 3, one connection (opened on first use, reopened after a failure), read-only transactions.

    The connection string is checked when the runner is made (:func:`lakesync.sql.targets.postgres_target`: only
    its location and options that do not redirect it) and its host resolved and checked at every connect, which
    dials the checked address (``hostaddr``). The session defaults to read-only transactions, each query runs in
    ``BEGIN READ ONLY`` through the extended protocol (pipeline mode), which carries exactly one statement: a query
    smuggling ``; COMMIT; DROP ...`` is refused by the server, not executed.
    """

    dialect = "postgres"

    def __init__(self, conninfo: str, *, name: str, connect_timeout_s: int = 10) -> None:
        self._name = name
        self._what = f'Connector "{name}" connectionString'
        self._target = postgres_target(conninfo, what=self._what)
        self._timeout = connect_timeout_s
        self._conn: Any = None

    def _fail(self, exc: BaseException) -> AdapterError:
        text = str(exc).strip()
        detail = redact(text.splitlines()[0] if text else type(exc).__name__, (self._target.password or "",))
        return AdapterError(f'Connector "{self._name}": PostgreSQL at {self._target.location} failed: {detail}')

    def query(self, sql: str, params: Sequence[Any] = ()) -> tuple[list[str], list[tuple[Any, ...]]]:
        psycopg = driver("psycopg", self._name, "PostgreSQL")
        try:
            if self._conn is None or self._conn.closed:
                kwargs = {
                    "connect_timeout": self._timeout,
                    "application_name": "lakesync-connector",
                    **self._target.postgres_kwargs(what=self._what),
                    "options": _READ_ONLY_SESSION,
                }
                self._conn = psycopg.connect(**kwargs)
                self._conn.read_only = True
            with self._conn.pipeline(), self._conn.transaction(), self._conn.cursor() as cur:
                cur.execute(sql, tuple(params) if params else None)
                rows = cur.fetchall()  # in pipeline mode, the result (and its description) arrives here
                return [d.name for d in cur.description or ()], rows
        except psycopg.Error as exc:
            self.close()
            raise self._fail(exc) from None

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
