"""MySQL / MariaDB (PyMySQL): the dialect and the executor of a MySQL or MariaDB destination.

Multi-row ``INSERT ... ON DUPLICATE KEY UPDATE`` through executemany.

The session runs in strict mode (a too-long row id fails instead of being truncated into another row's key), in UTC
(``time_zone = '+00:00'``) and with ``utf8mb4``. Deadlocks (1213), lock wait timeouts (1205) and concurrent-DDL
races (1050 table exists, 1060 duplicate column, 1061 duplicate key name) are retried; connection errors (2002-2055,
and the server-gone family) reconnect.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from lakesync.core.schema import ColumnType
from lakesync.sql.dialect import META_TABLE, STATE_TABLE, Dialect, Statement, TableLayout
from lakesync.sql.executor import ErrorKind, Executor, Run, cursor_run

if TYPE_CHECKING:
    import pymysql.connections

    from lakesync.sql.targets import DatabaseTarget

__all__ = ["MySQLDialect", "MySQLExecutor"]

_RETRY_CODES = frozenset({1213, 1205, 1050, 1060, 1061, 1412})
_CONNECTION_CODES = frozenset({1040, 1042, 1043, 1047, 1053, 1077, 1078, 1079, 1080, 1081, 1152, 1153, 1158, 1159})
_SESSION = (
    "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,"
    "NO_ENGINE_SUBSTITUTION', time_zone = '+00:00'"
)


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

    _TYPES: ClassVar[Mapping[ColumnType, str]] = {
        ColumnType.STRING: "LONGTEXT",
        ColumnType.NULL: "LONGTEXT",
        ColumnType.NUMBER: "DOUBLE",
        ColumnType.BOOLEAN: "TINYINT(1)",
        ColumnType.JSON: "JSON",
    }
    current_time = "CURRENT_TIMESTAMP(6)"
    timestamp_type = "DATETIME(6) NULL"
    props_type = "JSON NOT NULL DEFAULT ('{}')"
    share_lock = " LOCK IN SHARE MODE"  # MySQL 8 and MariaDB both accept it

    def __init__(self, *, mariadb: bool = True) -> None:
        """Build the dialect for MariaDB (default) or MySQL (their no-pad binary collations differ)."""
        self.set_flavour(mariadb=mariadb)

    def set_flavour(self, *, mariadb: bool) -> None:
        """Switch between MariaDB and MySQL (the executor finds out when it connects)."""
        self.mariadb = mariadb
        self.key_collation = "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"

    def key_column_type(self, ctype: ColumnType) -> str:
        # LONGTEXT cannot be a key: text key columns are VARCHAR(255) with the binary no-pad collation.
        if ctype in (ColumnType.STRING, ColumnType.NULL):
            return self._key(255)
        return self.column_type(ctype)

    def _key(self, length: int) -> str:
        return f"VARCHAR({length}) CHARACTER SET utf8mb4 COLLATE {self.key_collation}"

    def row_id_type(self) -> str:
        return self._key(255)

    def table_options(self) -> str:
        return f" ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={self.key_collation}"

    def create_system_tables(self) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (tbl {self._key(64)} NOT NULL, "
            f"row_id {self._key(255)} NOT NULL, state LONGTEXT NULL, PRIMARY KEY (tbl, row_id)){self.table_options()}",
            f"CREATE TABLE IF NOT EXISTS {META_TABLE} (tbl {self._key(64)} NOT NULL PRIMARY KEY, "
            f"columns LONGTEXT NOT NULL){self.table_options()}",
        ]

    def add_column(self, table: str, name: str, ctype: ColumnType) -> str:
        return f"ALTER TABLE {self.quote(table)} ADD COLUMN {self.quote(name)} {self.column_type(ctype)} NULL"

    def existing_columns(self, table: str) -> Statement:
        return Statement(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = %s",
            (table,),
            returns=True,
        )

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
        conn.begin()
        try:
            yield cursor_run(cur, bind_empty=False)
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

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                conn.close()
