"""Database connectors (``postgres``, ``mysql``; ``bigquery`` generates SQL only): ingest pollers and ``source=`` pulls.

Config (reference §14.2; validated by :func:`lakesync.core.connectors.validate_connector_config`)::

    {"name": "crm", "type": "postgres",
     "postgres": {"connectionString": "secret://arn:aws:secretsmanager:...:secret:crm-db-AbCdEf"},
     "ingest": {"intervalMs": 60000,
                "tables": [{"table": "customers", "query": "SELECT id, name, updated_at FROM customers",
                            "rowIdColumn": "id", "strategy": {"type": "cursor", "cursorColumn": "updated_at",
                                                               "lookbackMs": 5000}},
                           {"table": "plans", "query": "SELECT * FROM plans", "strategy": {"type": "diff"}}]}}

Every query runs as **one statement in a read-only transaction** (``BEGIN READ ONLY`` over PostgreSQL's extended
protocol / ``START TRANSACTION READ ONLY`` without MySQL multi-statements; the sessions default to read-only too): a
connector never writes to its source, whatever its configured query says, and ``...; COMMIT; DROP ...`` is refused
by the server (and by registration, which refuses a query with a ``;`` outside quotes and comments). The connection
string may carry only its location and options that do not redirect it (:mod:`lakesync.sql.targets`), and its host
is resolved and checked against the deployment's network policy at every connect (:mod:`lakesync.egress`).

**Cursor strategy** (incremental; cannot see deletes), as the original's: the first poll reads
``SELECT * FROM ({query}) AS _src ORDER BY {c} ASC``, later ones ``... WHERE {c} > %s`` with the stored cursor minus
``lookbackMs`` (numbers: ``n - lookbackMs``; datetimes and ISO strings: the instant minus the look-back). Unlike the
original, a poll reads at most ``limit`` rows (the position then says ``paging`` and the next poll continues exactly
after the last cursor value, without look-back; rows sharing the page's last cursor value all land on one page), and
rows the look-back window re-delivers unchanged are skipped (the position remembers the content hash of the rows
inside the window), so they are not written again.

**Diff strategy** (full scan; sees deletes): each poll reads the whole query and compares every row's content hash
with the snapshot in the position (``{rowId: hash}``): new and changed rows are emitted, rows gone from the result
are emitted as deletions. Unlike the original, the snapshot is part of the stored position, so a restart does not
re-insert everything.

A change's ``version`` is the row's content hash (with its cursor value in cursor mode); the poller derives the
deltaId from it and the position's generation (:mod:`lakesync.connectors.poller`).

**Source pulls** (``GET /pull?source={name}``, reference §5.3): the ingest tables' rows served live as INSERT deltas.
A cursor table's rows carry ``HLC(cursor as epoch ms, 0)`` (datetime cursors; numeric cursors as they are) and
``since`` becomes ``WHERE {c} > since``; a diff table has no notion of change time: its rows are served with HLC 1,
so only a pull from ``since=0`` sees them.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import hashlib
import importlib
import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from lakesync.connectors.base import (
    ChangedRow,
    Connector,
    ConnectorTypeDescriptor,
    PollBatch,
    Position,
)
from lakesync.core import hlc as hlc_mod
from lakesync.core.canonical import JsonValue, stable_stringify
from lakesync.core.connectors import ConnectorConfig
from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta
from lakesync.core.errors import AdapterError
from lakesync.core.redact import redact
from lakesync.sql.targets import mysql_kwargs, mysql_target, postgres_target

__all__ = [
    "BIGQUERY",
    "MYSQL",
    "POSTGRES",
    "IngestTable",
    "MySQLRunner",
    "PostgresRunner",
    "QueryRunner",
    "SqlIngestSource",
    "SqlSourceAdapter",
    "bigquery_poll_statement",
    "open_sql_connector",
]

DEFAULT_LOOKBACK_MS: Final = 5000
DIFF_SOURCE_HLC: Final = 1


class QueryRunner(Protocol):
    """Runs read-only queries against one database."""

    dialect: str

    def query(self, sql: str, params: Sequence[Any] = ()) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Column names and rows of one read-only query.

        Raises:
            AdapterError: the database is unreachable or refused the query (the message holds no credential).
        """
        ...

    def close(self) -> None:
        """Close the connection."""
        ...


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
        psycopg = _driver("psycopg", self._name, "PostgreSQL")
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


def _driver(module: str, connector: str, database: str) -> Any:
    """The driver module, or a clear 502 where this function was deployed without it (the API functions' small asset
    carries no SQL drivers)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise AdapterError(
            f'Connector "{connector}": this function has no {database} driver ({module}); deploy it with the SQL '
            "drivers (the materialise asset) to use this connector here"
        ) from None


class MySQLRunner:
    """PyMySQL, one connection (opened on first use, reopened after a failure), read-only transactions.

    As :class:`PostgresRunner`: the URL checked when made, the host resolved, checked and dialled by address at every
    connect; the session's transactions default to read-only, each query runs inside ``START TRANSACTION READ ONLY``,
    and the connection never enables multi-statements (``client_flag`` without ``MULTI_STATEMENTS``), so a query is
    one statement.
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
        pymysql = _driver("pymysql", self._name, "MySQL")
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


def to_json_value(value: Any) -> JsonValue:
    """A database value as JSON: datetimes as ISO 8601 (UTC ``Z`` when aware), decimals as numbers, bytes as base64,
    UUIDs as strings; JSON columns pass through."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():  # PostgreSQL numeric holds NaN and ±Infinity: text, as for a float
            return str(float(value))
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
        return value.isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, list | tuple):
        return [to_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json_value(v) for k, v in value.items()}
    return str(value)


def content_hash(values: Mapping[str, JsonValue]) -> str:
    """A 60-bit hash (10 base64url characters) of a row's JSON with sorted keys (the C encoder: a diff poll hashes
    every row of its table)."""
    text = json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii")[:10]


# Cursor values in a position: JSON numbers and strings as they are; datetimes tagged so they bind back as datetimes.
def encode_cursor(value: Any) -> JsonValue:
    """A cursor value as position JSON."""
    if isinstance(value, dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bool | int | float | str):
        return value
    return str(value)


def decode_cursor(value: JsonValue) -> Any:
    """The inverse of :func:`encode_cursor`."""
    if isinstance(value, dict):
        if "$datetime" in value:
            return dt.datetime.fromisoformat(str(value["$datetime"]))
        if "$date" in value:
            return dt.date.fromisoformat(str(value["$date"]))
    return value


def _js_iso(instant: dt.datetime) -> str:
    """JavaScript's ``toISOString``: ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    utc = instant.astimezone(dt.UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def look_back(cursor: Any, lookback_ms: float) -> Any:
    """The original's effective cursor: numbers minus ``lookback_ms``, datetimes minus that many milliseconds, ISO
    strings parsed, moved and written back as JavaScript ISO strings; anything else unchanged."""
    if not lookback_ms:
        return cursor
    if isinstance(cursor, bool):
        return cursor
    if isinstance(cursor, int | float):
        moved = cursor - lookback_ms
        return int(moved) if isinstance(cursor, int) and float(moved).is_integer() else moved
    if isinstance(cursor, dt.datetime):
        return cursor - dt.timedelta(milliseconds=lookback_ms)
    if isinstance(cursor, str):
        try:
            parsed = dt.datetime.fromisoformat(cursor)
        except ValueError:
            return cursor
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        return _js_iso(parsed - dt.timedelta(milliseconds=lookback_ms))
    return cursor


def cursor_ms(value: Any) -> int | None:
    """A cursor value as epoch milliseconds (source pulls' HLC), or ``None`` when it is not a time or number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float | decimal.Decimal):
        return max(0, int(value))
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return max(0, int(aware.timestamp() * 1000))
    if isinstance(value, dt.date):
        return cursor_ms(dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC))
    return None


def _quote(identifier: str, dialect: str) -> str:
    if dialect == "mysql":
        return "`" + identifier.replace("`", "``") + "`"
    if dialect == "bigquery":
        return "`" + identifier.replace("`", "\\`") + "`"
    return '"' + identifier.replace('"', '""') + '"'


@dataclass(frozen=True, slots=True)
class IngestTable:
    """One entry of ``ingest.tables``."""

    table: str
    query: str
    row_id_column: str
    strategy: str
    cursor_column: str | None = None
    lookback_ms: float = DEFAULT_LOOKBACK_MS

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> IngestTable:
        """From a validated config entry."""
        strategy = doc["strategy"]
        lookback = strategy.get("lookbackMs", DEFAULT_LOOKBACK_MS)
        return cls(
            table=doc["table"],
            query=doc["query"].strip().rstrip(";"),
            row_id_column=str(doc.get("rowIdColumn") or "id"),
            strategy=strategy["type"],
            cursor_column=strategy.get("cursorColumn"),
            lookback_ms=float(lookback) if isinstance(lookback, int | float) and lookback >= 0 else DEFAULT_LOOKBACK_MS,
        )

    def select(self, dialect: str, *, where: str = "", order: bool = True, limit: int | None = None) -> str:
        """``SELECT * FROM ({query}) AS _src [WHERE ...] [ORDER BY cursor] [LIMIT n]``."""
        # With a placeholder in the statement the driver formats it: a literal % of the user's query must be doubled.
        query = self.query.replace("%", "%%") if "%s" in where else self.query
        sql = f"SELECT * FROM ({query}) AS _src"
        if where:
            sql += f" WHERE {where}"
        if order and self.cursor_column:
            sql += f" ORDER BY {_quote(self.cursor_column, dialect)} ASC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return sql


def _split_row(table: IngestTable, names: Sequence[str], raw: tuple[Any, ...]) -> tuple[str, dict[str, JsonValue], Any]:
    row = dict(zip(names, raw, strict=True))
    if table.row_id_column not in row:
        raise AdapterError(f"Ingest table {table.table!r}: the query returns no column {table.row_id_column!r}")
    row_id_value = row.pop(table.row_id_column)
    if row_id_value is None:
        raise AdapterError(f"Ingest table {table.table!r}: a row has a null {table.row_id_column!r}")
    row_id = to_json_value(row_id_value)
    cursor = row.get(table.cursor_column) if table.cursor_column else None
    return (
        row_id if isinstance(row_id, str) else stable_stringify(row_id),
        {k: to_json_value(v) for k, v in row.items()},
        cursor,
    )


class SqlIngestSource:
    """An :class:`~lakesync.connectors.base.IngestSource` over one database (see the module docstring).

    Position: ``{"tables": {table: {"cursor", "paging", "recent": {rowId: [hash, cursor]}}}}`` for cursor tables,
    ``{"tables": {table: {"rows": {rowId: hash}}}}`` for diff tables.
    """

    def __init__(self, name: str, runner: QueryRunner, tables: Sequence[IngestTable]) -> None:
        self._name = name
        self._runner = runner
        self._tables = tuple(tables)

    @property
    def name(self) -> str:
        return self._name

    @property
    def tables(self) -> tuple[IngestTable, ...]:
        """The ingest tables."""
        return self._tables

    def poll(self, position: Position, limit: int) -> PollBatch:
        states = position.get("tables")
        old: Mapping[str, Any] = states if isinstance(states, Mapping) else {}
        new_states: dict[str, JsonValue] = {}
        rows: list[ChangedRow] = []
        more = False
        for table in self._tables:
            state = old.get(table.table)
            state = state if isinstance(state, Mapping) else {}
            if table.strategy == "diff":
                changes, new_state = self._diff(table, state)
            else:
                changes, new_state, paging = self._cursor(table, state, max(1, limit - len(rows)))
                more = more or paging
            rows.extend(changes)
            new_states[table.table] = new_state
        return PollBatch(rows, {"tables": new_states}, more)

    def _diff(self, table: IngestTable, state: Mapping[str, Any]) -> tuple[list[ChangedRow], dict[str, JsonValue]]:
        names, raw_rows = self._runner.query(table.select(self._runner.dialect, order=False))
        before = state.get("rows")
        previous: Mapping[str, Any] = before if isinstance(before, Mapping) else {}
        current: dict[str, JsonValue] = {}
        changes: list[ChangedRow] = []
        for raw in raw_rows:
            row_id, values, _ = _split_row(table, names, raw)
            digest = content_hash(values)
            current[row_id] = digest
            if previous.get(row_id) != digest:
                changes.append(ChangedRow(table.table, row_id, values, digest, {"strategy": "diff"}))
        for row_id in previous:
            if row_id not in current:
                changes.append(ChangedRow(table.table, row_id, None, "deleted", {"strategy": "diff"}))
        return changes, {"rows": current}

    def _cursor(
        self, table: IngestTable, state: Mapping[str, Any], limit: int
    ) -> tuple[list[ChangedRow], dict[str, JsonValue], bool]:
        assert table.cursor_column is not None
        dialect = self._runner.dialect
        column = _quote(table.cursor_column, dialect)
        stored = state.get("cursor")
        cursor = decode_cursor(stored) if stored is not None else None
        paging = bool(state.get("paging"))
        params: tuple[Any, ...] = ()
        if cursor is None:
            # Rows without a cursor value are skipped below; read past them here, or a page of them (NULLs sort
            # first on MySQL) would be the first page forever.
            sql = table.select(dialect, where=f"{column} IS NOT NULL", limit=limit + 1)
        else:
            effective = cursor if paging else look_back(cursor, table.lookback_ms)
            sql, params = table.select(dialect, where=f"{column} > %s", limit=limit + 1), (effective,)
        names, raw_rows = self._runner.query(sql, params)
        parsed = [_split_row(table, names, raw) for raw in raw_rows]
        full = len(parsed) > limit
        if full:
            parsed = parsed[:limit]
            last = parsed[-1][2]
            kept = [p for p in parsed if p[2] != last]
            if kept:
                parsed = kept
            else:  # more than a page shares one cursor value: take all of them at once
                names, raw_rows = self._runner.query(table.select(dialect, where=f"{column} = %s"), (last,))
                parsed = [_split_row(table, names, raw) for raw in raw_rows]
        recent_raw = state.get("recent")
        recent: dict[str, list[JsonValue]] = (
            {k: list(v) for k, v in recent_raw.items() if isinstance(v, list)}
            if isinstance(recent_raw, Mapping)
            else {}
        )
        changes: list[ChangedRow] = []
        for row_id, values, value in parsed:
            if value is None:
                continue  # a row without a cursor value can never be ordered after the cursor
            digest = content_hash(values)
            encoded = encode_cursor(value)
            known = recent.get(row_id)
            recent[row_id] = [digest, encoded]
            if known is not None and known[0] == digest:
                continue  # re-delivered by the look-back window, unchanged
            version = f"{stable_stringify(encoded)}:{digest}"
            changes.append(ChangedRow(table.table, row_id, values, version, {"cursor": encoded}))
        seen = [p[2] for p in parsed if p[2] is not None]
        new_cursor = seen[-1] if seen else cursor
        if new_cursor is not None:
            horizon = look_back(new_cursor, table.lookback_ms)
            recent = {k: v for k, v in recent.items() if _at_or_after(decode_cursor(v[1]), horizon)}
        new_state: dict[str, JsonValue] = {
            "cursor": encode_cursor(new_cursor) if new_cursor is not None else None,
            "paging": full,
            "recent": dict(recent),
        }
        return changes, new_state, full

    def close(self) -> None:
        self._runner.close()


def _at_or_after(value: Any, horizon: Any) -> bool:
    try:
        return bool(value >= horizon)
    except TypeError:  # mixed types (naive vs aware, str vs number): keep the entry
        return True


class SqlSourceAdapter:
    """A :class:`~lakesync.ports.SourceAdapter`: the connector's ingest tables served live as deltas."""

    def __init__(self, name: str, runner: QueryRunner, tables: Sequence[IngestTable]) -> None:
        self.name = name
        self._runner = runner
        self._tables = tuple(tables)

    def check(self) -> None:
        """Connect, and run every ingest query with ``LIMIT 0``: the row-id and cursor columns must be in its result.

        Raises:
            AdapterError: the database cannot be reached or refuses a query (502).
            ConnectorValidationError: a query lacks its row-id or cursor column (400).
        """
        from lakesync.core.connectors import ConnectorValidationError

        self._runner.query("SELECT 1")
        for i, table in enumerate(self._tables):
            names, _ = self._runner.query(table.select(self._runner.dialect, order=False, limit=0))
            for what, column in (("rowIdColumn", table.row_id_column), ("cursorColumn", table.cursor_column)):
                if column is not None and column not in names:
                    raise ConnectorValidationError(
                        f"Ingest table at index {i}: the query returns no {what} column {column!r}"
                    )

    def query_deltas_since(self, since_hlc: int, limit: int) -> list[RowDelta]:
        since_ms = hlc_mod.decode(since_hlc)[0] if since_hlc > 0 else None
        found: list[RowDelta] = []
        dialect = self._runner.dialect
        for table in self._tables:
            if table.strategy == "diff" or table.cursor_column is None:
                if since_hlc >= DIFF_SOURCE_HLC:
                    continue
                names, raw_rows = self._runner.query(table.select(dialect, order=False, limit=limit))
                found.extend(self._delta(table, names, raw, DIFF_SOURCE_HLC) for raw in raw_rows)
                continue
            column = _quote(table.cursor_column, dialect)
            if since_ms is None:
                names, raw_rows = self._runner.query(table.select(dialect, limit=limit))
            else:
                bound = self._bound(table, since_ms)
                names, raw_rows = self._runner.query(
                    table.select(dialect, where=f"{column} > %s", limit=limit), (bound,)
                )
            for raw in raw_rows:
                value = dict(zip(names, raw, strict=True)).get(table.cursor_column)
                ms = cursor_ms(value)
                stamp = hlc_mod.encode(ms, 0) if ms else DIFF_SOURCE_HLC
                if stamp > since_hlc:
                    found.append(self._delta(table, names, raw, stamp))
        found.sort(key=lambda d: (d.hlc, d.table, d.row_id))
        return found[:limit]

    def _bound(self, table: IngestTable, since_ms: int) -> Any:
        """``since`` in the cursor column's type (probed once: numbers stay numbers, times become datetimes)."""
        assert table.cursor_column is not None
        column = _quote(table.cursor_column, self._runner.dialect)
        names, rows = self._runner.query(table.select(self._runner.dialect, where=f"{column} IS NOT NULL", limit=1))
        sample = dict(zip(names, rows[0], strict=True)).get(table.cursor_column) if rows else None
        if isinstance(sample, dt.datetime):
            instant = dt.datetime.fromtimestamp(since_ms / 1000, dt.UTC)
            return instant if sample.tzinfo is not None else instant.replace(tzinfo=None)
        if isinstance(sample, dt.date):
            return dt.datetime.fromtimestamp(since_ms / 1000, dt.UTC).date()
        return since_ms

    def _delta(self, table: IngestTable, names: Sequence[str], raw: tuple[Any, ...], stamp: int) -> RowDelta:
        row_id, values, _ = _split_row(table, names, raw)
        client_id = f"ingest:{self.name}"
        digest = content_hash(values)
        delta_id = hashlib.sha256(
            stable_stringify(["source", self.name, table.table, row_id, digest]).encode("utf-8", "surrogatepass")
        ).hexdigest()
        columns = tuple(ColumnDelta(k, v) for k, v in values.items())
        return RowDelta(DeltaOp.INSERT, table.table, row_id, client_id, columns, stamp, delta_id)

    def close(self) -> None:
        self._runner.close()


def bigquery_poll_statement(
    table: IngestTable, project: str, dataset: str, cursor: Any | None
) -> tuple[str, dict[str, Any]]:
    """The BigQuery statement of a cursor poll, with named parameters (not run here: no BigQuery is reachable).

    The query runs with ``default_dataset = project.dataset``; the cursor binds as ``@cursor``.
    """
    if table.cursor_column is None or cursor is None:
        return table.select("bigquery"), {}
    column = _quote(table.cursor_column, "bigquery")
    return table.select("bigquery", where=f"{column} > @cursor"), {
        "cursor": look_back(cursor, table.lookback_ms),
        "default_dataset": f"{project}.{dataset}",
    }


_DOLLAR_TAG: Final = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$")


def _skip_quoted(query: str, i: int, quote: str, backslash: bool) -> int:
    """The index after the literal or identifier opened at ``i`` (a doubled quote escapes it; ``\\`` too in MySQL)."""
    i += 1
    while i < len(query):
        if backslash and query[i] == "\\":
            i += 2
            continue
        if query[i] == quote:
            if query[i + 1 : i + 2] == quote:
                i += 2
                continue
            return i + 1
        i += 1
    return i


def _skip(query: str, i: int, dialect: str) -> int | None:
    """The index after a literal, identifier or comment starting at ``i``, or ``None`` when none starts there."""
    ch, pair = query[i], query[i : i + 2]
    if pair == "--" or (ch == "#" and dialect == "mysql"):
        end = query.find("\n", i)
        return len(query) if end < 0 else end + 1
    if pair == "/*":
        end = query.find("*/", i + 2)
        return len(query) if end < 0 else end + 2
    if ch in "'\"`":
        return _skip_quoted(query, i, ch, backslash=dialect == "mysql" and ch != "`")
    if ch == "$" and dialect == "postgres":
        tag = _DOLLAR_TAG.match(query, i)
        if tag is not None:
            end = query.find(tag.group(), tag.end())
            return len(query) if end < 0 else end + len(tag.group())
    return None


def is_single_statement(query: str, dialect: str) -> bool:
    """Whether ``query`` holds no ``;`` outside literals, quoted identifiers and comments (a trailing one aside).

    A check at registration with a clear message; the guarantee is the driver's (one statement per execution)."""
    text = query.strip().rstrip(";")
    i = 0
    while i < len(text):
        after = _skip(text, i, dialect)
        if after is not None:
            i = after
            continue
        if text[i] == ";":
            return False
        i += 1
    return True


def check_single_statements(tables: Sequence[IngestTable], dialect: str) -> None:
    """Refuse an ingest query of more than one statement.

    Raises:
        ConnectorValidationError: naming the table's index (400).
    """
    from lakesync.core.connectors import ConnectorValidationError

    for i, table in enumerate(tables):
        if not is_single_statement(table.query, dialect):
            raise ConnectorValidationError(f"Ingest table at index {i} query must be a single statement (no ';')")


def ingest_tables(config: ConnectorConfig) -> list[IngestTable]:
    """The config's ingest tables (none without an ``ingest`` section)."""
    ingest = config.ingest
    if ingest is None:
        return []
    return [IngestTable.from_json(t) for t in ingest.get("tables", [])]


RunnerFactory = Callable[[str, str], QueryRunner]
"""``(connection string, connector name) -> runner``."""


def _runner(kind: str, connection: str, name: str) -> QueryRunner:
    if kind == "postgres":
        return PostgresRunner(connection, name=name)
    return MySQLRunner(connection, name=name)


def open_sql_connector(config: ConnectorConfig, secrets: Mapping[str, str]) -> Connector:
    """The connector of a ``postgres`` or ``mysql`` config (its ``connectionString`` resolved in ``secrets``).

    Nothing connects here: the first poll or pull does (and reports an unreachable source as ``AdapterError``).

    Raises:
        ForbiddenTargetError: the connection string carries a parameter that redirects it, or names a refused host.
        ConnectorValidationError: an ingest query of more than one statement.
    """
    settings = config.settings or {}
    connection = secrets.get("connectionString") or str(settings.get("connectionString", ""))
    tables = ingest_tables(config)
    check_single_statements(tables, config.type)
    ingest_runner = _runner(config.type, connection, config.name)
    source_runner = _runner(config.type, connection, config.name)
    return Connector(
        name=config.name,
        ingest=SqlIngestSource(config.name, ingest_runner, tables) if tables else None,
        source=SqlSourceAdapter(config.name, source_runner, tables),
    )


def _object(properties: Mapping[str, JsonValue], required: Sequence[str]) -> dict[str, JsonValue]:
    return {"type": "object", "properties": dict(properties), "required": list(required)}


_INGEST_SCHEMA: Final = _object(
    {
        "intervalMs": {"type": "number", "minimum": 1, "default": 10000},
        "tables": {
            "type": "array",
            "minItems": 1,
            "items": _object(
                {
                    "table": {"type": "string"},
                    "query": {"type": "string"},
                    "rowIdColumn": {"type": "string", "default": "id"},
                    "strategy": {
                        "oneOf": [
                            _object(
                                {
                                    "type": {"const": "cursor"},
                                    "cursorColumn": {"type": "string"},
                                    "lookbackMs": {"type": "number", "minimum": 0, "default": DEFAULT_LOOKBACK_MS},
                                },
                                ["type", "cursorColumn"],
                            ),
                            _object({"type": {"const": "diff"}}, ["type"]),
                        ]
                    },
                },
                ["table", "query", "strategy"],
            ),
        },
    },
    ["tables"],
)

_CONNECTION_SCHEMA: Final = {
    "type": "string",
    "description": "A connection URL, or secret://<Secrets Manager ARN or name>[#key]; a plaintext value is moved "
    "into Secrets Manager at registration",
}

POSTGRES: Final = ConnectorTypeDescriptor(
    type="postgres",
    display_name="PostgreSQL",
    description="Poll PostgreSQL query results (cursor or diff) and serve them to source= pulls.",
    category="database",
    config_schema=_object({"connectionString": _CONNECTION_SCHEMA}, ["connectionString"]),
    ingest_schema=_INGEST_SCHEMA,
    secret_fields=("connectionString",),
)

MYSQL: Final = ConnectorTypeDescriptor(
    type="mysql",
    display_name="MySQL / MariaDB",
    description="Poll MySQL or MariaDB query results (cursor or diff) and serve them to source= pulls.",
    category="database",
    config_schema=_object({"connectionString": _CONNECTION_SCHEMA}, ["connectionString"]),
    ingest_schema=_INGEST_SCHEMA,
    secret_fields=("connectionString",),
)

BIGQUERY: Final = ConnectorTypeDescriptor(
    type="bigquery",
    display_name="BigQuery",
    description="BigQuery query results (statements generated and bound; polling BigQuery is not available yet).",
    category="database",
    config_schema=_object(
        {
            "projectId": {"type": "string"},
            "dataset": {"type": "string"},
            "keyFilename": {"type": "string"},
            "location": {"type": "string"},
        },
        ["projectId", "dataset"],
    ),
    ingest_schema=_INGEST_SCHEMA,
)


def open_bigquery_connector(config: ConnectorConfig, secrets: Mapping[str, str]) -> Connector:
    """BigQuery connectors register (actions none, ingest none): polling BigQuery is not implemented.

    Raises:
        AdapterError: when the config asks for ingest (502: the source cannot be polled).
    """
    if config.has_ingest:
        raise AdapterError(f'Connector "{config.name}": BigQuery ingest is not supported by this deployment')
    return Connector(name=config.name)
