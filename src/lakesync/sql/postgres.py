"""PostgreSQL (psycopg 3): the dialect and the executor of a PostgreSQL destination.

Each batch step is one statement over the rows as one JSON array, expanded and cast by the server.

Deadlocks (``40P01``), serialization failures (``40001``), lock timeouts (``55P03``) and the races of concurrent
``CREATE TABLE IF NOT EXISTS`` (unique violations in the catalog, duplicate table/column) are retried by the
destination; ``OperationalError`` (connection refused or lost) reconnects.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

from lakesync.core.schema import ColumnType
from lakesync.sql.dialect import META_TABLE, STATE_TABLE, Dialect, Statement, TableLayout
from lakesync.sql.executor import ErrorKind, Executor, Run, cursor_run

if TYPE_CHECKING:
    import psycopg

    from lakesync.sql.targets import DatabaseTarget

__all__ = ["PostgresDialect", "PostgresExecutor"]

_RETRY_SQLSTATES = frozenset({"40P01", "40001", "55P03", "42P07", "42701", "42710"})
"""deadlock, serialization failure, lock not available, duplicate table / column / object (concurrent DDL)."""


_rows_json = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


class PostgresDialect(Dialect):
    """PostgreSQL 12+ (psycopg 3): each batch step is one statement over ``unnest`` of typed arrays."""

    name = "postgres"
    max_identifier = 63  # NAMEDATALEN - 1: longer names are silently truncated
    allow_nul = False  # text and jsonb cannot hold U+0000
    placeholder = "%s"

    _TYPES: ClassVar[Mapping[ColumnType, str]] = {
        ColumnType.STRING: "TEXT",
        ColumnType.NULL: "TEXT",
        ColumnType.NUMBER: "DOUBLE PRECISION",
        ColumnType.BOOLEAN: "BOOLEAN",
        ColumnType.JSON: "JSONB",
    }
    current_time = "now()"
    timestamp_type = "TIMESTAMPTZ"
    props_type = "JSONB NOT NULL DEFAULT '{}'"
    _CASTS: Final = {
        ColumnType.STRING: "",
        ColumnType.NULL: "",
        ColumnType.NUMBER: "::float8",
        ColumnType.BOOLEAN: "::boolean",
        ColumnType.JSON: "::jsonb",
    }

    def create_system_tables(self) -> list[str]:
        # COLLATE "C": the database orders row ids bytewise, as Python sorts them, so locks are taken in one order.
        return [
            f'CREATE TABLE IF NOT EXISTS {STATE_TABLE} (tbl TEXT NOT NULL, row_id TEXT COLLATE "C" NOT NULL, '
            "state TEXT, PRIMARY KEY (tbl, row_id))",
            f"CREATE TABLE IF NOT EXISTS {META_TABLE} (tbl TEXT PRIMARY KEY, columns TEXT NOT NULL)",
        ]

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
            yield cursor_run(cur, bind_empty=False)

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

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                conn.close()
