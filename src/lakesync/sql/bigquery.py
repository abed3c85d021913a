"""BigQuery destination: dialect (pure) and executor (google-cloud-bigquery, imported lazily).

**Not run against BigQuery.** No BigQuery (nor an emulator) is reachable where this was written: the generated SQL
and the parameter binding are tested with a recording fake client (``tests/sql/test_bigquery.py``), and the design
follows Google's documentation. Treat the first run against a real dataset as the real test.

How it maps the algorithm of :mod:`lakesync.sql.destination`:

* Every job runs with the destination dataset as ``default_dataset``; identifiers are quoted with backticks and
  values bound as positional (``?``) query parameters with explicit types: scalars, ``ARRAY<STRING>`` of row ids and
  ``ARRAY<STRUCT<...>>`` of rows.
* One ``apply`` is one multi-statement transaction in a BigQuery session (``BEGIN TRANSACTION`` with
  ``create_session``; the following jobs carry the ``session_id`` connection property; ``COMMIT TRANSACTION``).
  BigQuery has no row locks: transactions are snapshot-isolated and a concurrent change of the same table aborts
  one of them at commit ("concurrent update"), which the destination retries from a fresh read. DDL (create table,
  add column) runs outside transactions, as BigQuery requires.
* Upserts and state writes are ``MERGE`` from ``UNNEST`` of a struct array; JSON columns are bound as STRING and
  stored with ``PARSE_JSON``. Tables have no enforced keys: ``CLUSTER BY`` the primary key (reference §9.2).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from lakesync.core.schema import ColumnType
from lakesync.sql.dialect import META_TABLE, STATE_TABLE, Dialect, Statement, TableLayout
from lakesync.sql.executor import ErrorKind, Executor, Run

__all__ = [
    "BigQueryDialect",
    "BigQueryExecutor",
    "Scalar",
    "ScalarArray",
    "StructArray",
    "parse_bigquery_url",
]

_PROJECT_RE: Final = re.compile(r"\A[a-z][a-z0-9-]{4,28}[a-z0-9]\Z")
_DATASET_RE: Final = re.compile(r"\A[A-Za-z0-9_]{1,1024}\Z")


def parse_bigquery_url(url: str) -> tuple[str, str]:
    """``bigquery://project/dataset`` → ``(project, dataset)``.

    Raises:
        ValueError: when the URL is not of that form or a name is invalid.
    """
    prefix = "bigquery://"
    if not url.lower().startswith(prefix):
        raise ValueError("BigQuery URL must be bigquery://project/dataset")
    rest = url[len(prefix) :]
    project, _, dataset = rest.partition("/")
    if not _PROJECT_RE.match(project) or not _DATASET_RE.match(dataset):
        raise ValueError("BigQuery URL must be bigquery://project/dataset with a valid project id and dataset name")
    return project, dataset


@dataclass(frozen=True, slots=True)
class Scalar:
    """A typed scalar parameter (``STRING``, ``FLOAT64``, ``BOOL``, ``INT64``)."""

    type: str
    value: Any


@dataclass(frozen=True, slots=True)
class ScalarArray:
    """An ``ARRAY<type>`` parameter."""

    type: str
    values: Sequence[Any]


@dataclass(frozen=True, slots=True)
class StructArray:
    """An ``ARRAY<STRUCT<fields>>`` parameter; ``rows`` hold one value per field."""

    fields: tuple[tuple[str, str], ...]
    rows: Sequence[Sequence[Any]]


class BigQueryDialect(Dialect):
    """GoogleSQL for BigQuery; statements carry :class:`Scalar` / :class:`ScalarArray` / :class:`StructArray`."""

    name = "bigquery"
    max_identifier = 300
    allow_nul = True
    placeholder = "?"
    quote_char = "`"

    _TYPES: ClassVar[Mapping[ColumnType, str]] = {
        ColumnType.STRING: "STRING",
        ColumnType.NULL: "STRING",
        ColumnType.NUMBER: "FLOAT64",
        ColumnType.BOOLEAN: "BOOL",
        ColumnType.JSON: "JSON",
    }
    current_time = "CURRENT_TIMESTAMP()"
    timestamp_type = "TIMESTAMP"
    props_type = "JSON DEFAULT JSON '{}'"
    share_lock = ""
    update_lock = ""
    # How each column travels as a parameter (JSON as its text, parsed in SQL).
    _PARAM_TYPES: Final = {
        ColumnType.STRING: "STRING",
        ColumnType.NULL: "STRING",
        ColumnType.NUMBER: "FLOAT64",
        ColumnType.BOOLEAN: "BOOL",
        ColumnType.JSON: "STRING",
    }
    _CLUSTERABLE: Final = frozenset({ColumnType.STRING, ColumnType.NULL, ColumnType.BOOLEAN})

    def __init__(self, project: str, dataset: str) -> None:
        """Build the dialect for ``project.dataset`` (the jobs' default dataset)."""
        self.project = project
        self.dataset = dataset

    def create_system_tables(self) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (tbl STRING NOT NULL, row_id STRING NOT NULL, state STRING) "
            "CLUSTER BY tbl, row_id",
            f"CREATE TABLE IF NOT EXISTS {META_TABLE} (tbl STRING NOT NULL, columns STRING NOT NULL)",
        ]

    def create_table(self, layout: TableLayout) -> list[str]:
        parts = ["row_id STRING NOT NULL"]
        parts += [f"{self.quote(n)} {self.column_type(t)}" for n, t in layout.columns]
        parts.append(f"props {self.props_type}")
        if layout.soft_delete:
            parts.append("deleted_at TIMESTAMP")
        parts.append("synced_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP()")
        # No enforced keys in BigQuery: cluster by the key (FLOAT64 and JSON cannot be clustering columns).
        cluster = [c for c in layout.primary_key if c == "row_id" or layout.types.get(c) in self._CLUSTERABLE][:4]
        body = ",\n  ".join(parts)
        return [
            f"CREATE TABLE IF NOT EXISTS {self.quote(layout.table)} (\n  {body}\n) "
            f"CLUSTER BY {', '.join(self.quote(c) for c in cluster or ['row_id'])}"
        ]

    def add_column(self, table: str, name: str, ctype: ColumnType) -> str:
        return f"ALTER TABLE {self.quote(table)} ADD COLUMN IF NOT EXISTS {self.quote(name)} {self.column_type(ctype)}"

    def add_deleted_at(self, table: str) -> str:
        return f"ALTER TABLE {self.quote(table)} ADD COLUMN IF NOT EXISTS deleted_at TIMESTAMP"

    def existing_columns(self, table: str) -> Statement:
        dataset = self.quote(f"{self.project}.{self.dataset}")
        return Statement(
            f"SELECT column_name FROM {dataset}.INFORMATION_SCHEMA.COLUMNS WHERE table_name = ?",
            (Scalar("STRING", table),),
            returns=True,
        )

    def insert_meta(self, table: str) -> Statement:
        return Statement(
            f"MERGE {META_TABLE} AS m USING (SELECT ? AS tbl) AS s ON m.tbl = s.tbl "
            "WHEN NOT MATCHED THEN INSERT (tbl, columns) VALUES (s.tbl, '[]')",
            (Scalar("STRING", table),),
        )

    def read_meta(self, table: str, *, exclusive: bool) -> Statement:
        return Statement(f"SELECT columns FROM {META_TABLE} WHERE tbl = ?", (Scalar("STRING", table),), returns=True)

    def update_meta(self, table: str, columns: Sequence[tuple[str, ColumnType]]) -> Statement:
        from lakesync.sql.dialect import columns_to_json

        return Statement(
            f"UPDATE {META_TABLE} SET columns = ? WHERE tbl = ?",
            (Scalar("STRING", columns_to_json(columns)), Scalar("STRING", table)),
        )

    def ensure_states(self, table: str, row_ids: Sequence[str]) -> list[Statement]:
        return []  # no row locks to take: the transaction's snapshot plus commit-time conflict detection serialise

    def lock_states(self, table: str, row_ids: Sequence[str]) -> list[Statement]:
        return [
            Statement(
                f"SELECT row_id, state FROM {STATE_TABLE} WHERE tbl = ? AND row_id IN UNNEST(?)",
                (Scalar("STRING", table), ScalarArray("STRING", list(row_ids))),
                returns=True,
            )
        ]

    def write_states(self, table: str, states: Sequence[tuple[str, str]]) -> list[Statement]:
        if not states:
            return []
        rows = StructArray((("row_id", "STRING"), ("state", "STRING")), [tuple(s) for s in states])
        return [
            Statement(
                f"MERGE {STATE_TABLE} AS s USING (SELECT * FROM UNNEST(?)) AS v ON s.tbl = ? AND s.row_id = v.row_id "
                "WHEN MATCHED THEN UPDATE SET state = v.state "
                "WHEN NOT MATCHED THEN INSERT (tbl, row_id, state) VALUES (?, v.row_id, v.state)",
                (rows, Scalar("STRING", table), Scalar("STRING", table)),
            )
        ]

    def all_states(self, table: str) -> Statement:
        return Statement(
            f"SELECT row_id, state FROM {STATE_TABLE} WHERE tbl = ? AND state IS NOT NULL",
            (Scalar("STRING", table),),
            returns=True,
        )

    def _struct(self, layout: TableLayout, names: Sequence[str], rows: Sequence[Sequence[Any]]) -> StructArray:
        fields = (("row_id", "STRING"), *((n, self._PARAM_TYPES[layout.types[n]]) for n in names))
        return StructArray(fields, [tuple(r) for r in rows])

    def _value(self, layout: TableLayout, name: str) -> str:
        ref = f"v.{self.quote(name)}"
        return f"PARSE_JSON({ref})" if layout.types[name] is ColumnType.JSON else ref

    def upsert_rows(self, layout: TableLayout, rows: Sequence[Sequence[Any]]) -> list[Statement]:
        if not rows:
            return []
        names = layout.column_names
        match = " AND ".join(f"t.{self.quote(c)} = v.{self.quote(c)}" for c in layout.primary_key)
        if layout.external_id is not None:
            ext = self.quote(layout.external_id)
            match = f"({match}) OR (v.{ext} IS NOT NULL AND t.{ext} = v.{ext})"
        sets = [f"{self.quote(n)} = {self._value(layout, n)}" for n in names if n not in layout.primary_key]
        if layout.soft_delete:
            sets.append("deleted_at = NULL")
        sets.append("synced_at = CURRENT_TIMESTAMP()")
        cols = ", ".join(["row_id", *(self.quote(n) for n in names), "synced_at"])
        vals = ", ".join(["v.row_id", *(self._value(layout, n) for n in names), "CURRENT_TIMESTAMP()"])
        sql = (
            f"MERGE {self.quote(layout.table)} AS t USING (SELECT * FROM UNNEST(?)) AS v ON {match} "
            f"WHEN MATCHED THEN UPDATE SET {', '.join(sets)} "
            f"WHEN NOT MATCHED THEN INSERT ({cols}) VALUES ({vals})"
        )
        return [Statement(sql, (self._struct(layout, names, rows),))]

    def delete_rows(self, layout: TableLayout, row_ids: Sequence[str]) -> list[Statement]:
        if not row_ids:
            return []
        q = self.quote(layout.table)
        if layout.soft_delete:
            sql = (
                f"UPDATE {q} SET deleted_at = CURRENT_TIMESTAMP(), synced_at = CURRENT_TIMESTAMP() "
                "WHERE row_id IN UNNEST(?) AND deleted_at IS NULL"
            )
        else:
            sql = f"DELETE FROM {q} WHERE row_id IN UNNEST(?)"
        return [Statement(sql, (ScalarArray("STRING", list(row_ids)),))]

    def backfill(self, layout: TableLayout, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[Statement]:
        if not rows:
            return []
        sets = ", ".join(f"{self.quote(c)} = {self._value(layout, c)}" for c in columns)
        sql = (
            f"UPDATE {self.quote(layout.table)} AS t SET {sets} "
            "FROM (SELECT * FROM UNNEST(?)) AS v WHERE t.row_id = v.row_id"
        )
        return [Statement(sql, (self._struct(layout, columns, rows),))]

    def select_expr(self, name: str, ctype: ColumnType) -> str:
        return f"TO_JSON_STRING({self.quote(name)})" if ctype is ColumnType.JSON else self.quote(name)


def to_query_parameters(params: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
    """Turn a statement's :class:`Scalar` / :class:`ScalarArray` / :class:`StructArray` into BigQuery parameters."""
    from google.cloud import bigquery

    out: list[Any] = []
    for p in params if not isinstance(params, Mapping) else params.values():
        if isinstance(p, Scalar):
            out.append(bigquery.ScalarQueryParameter(None, p.type, p.value))
        elif isinstance(p, ScalarArray):
            out.append(bigquery.ArrayQueryParameter(None, p.type, list(p.values)))
        elif isinstance(p, StructArray):
            structs = [
                bigquery.StructQueryParameter(
                    None, *(bigquery.ScalarQueryParameter(n, t, v) for (n, t), v in zip(p.fields, row, strict=True))
                )
                for row in p.rows
            ]
            out.append(bigquery.ArrayQueryParameter(None, "STRUCT", structs))
        else:
            raise TypeError(f"unsupported BigQuery parameter {type(p).__name__}")
    return out


class BigQueryExecutor(Executor):
    """Runs statements as BigQuery query jobs; a transaction is a session with ``BEGIN``/``COMMIT TRANSACTION``.

    Args:
        project: The project id.
        dataset: The dataset holding the destination and hidden tables.
        client_factory: Builds the client from the project id (tests inject a fake); default
            ``google.cloud.bigquery.Client``, with ``credentials`` when given.
        credentials: Service-account JSON (from a secret); default credentials when ``None``.
    """

    dialect: BigQueryDialect

    def __init__(
        self,
        project: str,
        dataset: str,
        *,
        client_factory: Callable[[str], Any] | None = None,
        credentials: Mapping[str, Any] | None = None,
    ) -> None:
        self.dialect = BigQueryDialect(project, dataset)
        self.location = f"bigquery://{project}/{dataset}"
        self._factory = client_factory
        self._credentials = dict(credentials) if credentials is not None else None
        self._client: Any = None

    def _get_client(self) -> Any:
        if self._client is None:
            if self._factory is not None:
                self._client = self._factory(self.dialect.project)
            else:
                from google.cloud import bigquery

                if self._credentials is not None:
                    self._client = bigquery.Client.from_service_account_info(  # type: ignore[no-untyped-call]
                        self._credentials, project=self.dialect.project
                    )
                else:
                    self._client = bigquery.Client(project=self.dialect.project)
        return self._client

    def _job_config(self, params: Sequence[Any] | Mapping[str, Any], session: str | None, create: bool) -> Any:
        from google.cloud import bigquery

        config = bigquery.QueryJobConfig(
            default_dataset=f"{self.dialect.project}.{self.dialect.dataset}",
            query_parameters=to_query_parameters(params),
        )
        if create:
            config.create_session = True
        if session is not None:
            config.connection_properties = [bigquery.ConnectionProperty("session_id", session)]
        return config

    def _query(self, sql: str, params: Sequence[Any] | Mapping[str, Any], session: str | None = None) -> Any:
        return self._get_client().query(sql, job_config=self._job_config(params, session, False))

    @contextlib.contextmanager
    def transaction(self, *, ddl: bool = False) -> Iterator[Run]:
        if ddl:

            def run_plain(stmt: Statement) -> list[tuple[Any, ...]]:
                rows = self._query(stmt.sql, stmt.params).result()
                return [tuple(r.values()) for r in rows] if stmt.returns else []

            yield run_plain
            return
        begin = self._get_client().query("BEGIN TRANSACTION", job_config=self._job_config((), None, True))
        begin.result()
        session: str = begin.session_info.session_id

        def run(stmt: Statement) -> list[tuple[Any, ...]]:
            rows = self._query(stmt.sql, stmt.params, session).result()
            return [tuple(r.values()) for r in rows] if stmt.returns else []

        try:
            yield run
        except BaseException:
            with contextlib.suppress(Exception):
                self._query("ROLLBACK TRANSACTION", (), session).result()
            raise
        else:
            self._query("COMMIT TRANSACTION", (), session).result()
        finally:
            with contextlib.suppress(Exception):
                self._query("CALL BQ.ABORT_SESSION()", (), session).result()

    def classify(self, exc: BaseException) -> ErrorKind | None:
        try:
            from google.api_core import exceptions as gexc
        except ImportError:  # pragma: no cover - the sql extra installs it
            return None
        if not isinstance(exc, gexc.GoogleAPIError):
            return None
        text = str(exc).lower()
        if "concurrent update" in text or "could not serialize" in text or "aborted" in text:
            return ErrorKind.RETRY
        if isinstance(
            exc, gexc.ServiceUnavailable | gexc.InternalServerError | gexc.TooManyRequests | gexc.GatewayTimeout
        ):
            return ErrorKind.CONNECTION
        return ErrorKind.FATAL

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None and hasattr(client, "close"):
            with contextlib.suppress(Exception):
                client.close()
