"""The ingest tables of a SQL connector and the statements over them: ``SELECT * FROM ({query}) AS _src ...`` with
quoted identifiers, a row split into its id, values and cursor, and the check that a query is one statement."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from lakesync.connectors.sql.values import look_back, to_json_value
from lakesync.core.canonical import JsonValue, stable_stringify
from lakesync.core.connectors import ConnectorConfig
from lakesync.core.errors import AdapterError

__all__ = [
    "DEFAULT_LOOKBACK_MS",
    "IngestTable",
    "bigquery_poll_statement",
    "check_single_statements",
    "ingest_tables",
    "is_single_statement",
    "quote_identifier",
    "split_row",
]

DEFAULT_LOOKBACK_MS: Final = 5000


def quote_identifier(identifier: str, dialect: str) -> str:
    """``identifier`` quoted for ``dialect`` (``postgres``, ``mysql`` or ``bigquery``)."""
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
            sql += f" ORDER BY {quote_identifier(self.cursor_column, dialect)} ASC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return sql


def split_row(table: IngestTable, names: Sequence[str], raw: tuple[Any, ...]) -> tuple[str, dict[str, JsonValue], Any]:
    """A result row as ``(row id, values as JSON, cursor value)``.

    Raises:
        AdapterError: the row has no row-id column, or a null one.
    """
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


def bigquery_poll_statement(
    table: IngestTable, project: str, dataset: str, cursor: Any | None
) -> tuple[str, dict[str, Any]]:
    """The BigQuery statement of a cursor poll, with named parameters (not run here: no BigQuery is reachable).

    The query runs with ``default_dataset = project.dataset``; the cursor binds as ``@cursor``.
    """
    if table.cursor_column is None or cursor is None:
        return table.select("bigquery"), {}
    column = quote_identifier(table.cursor_column, "bigquery")
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
