"""Builders of the test data many suites share: table schemas and row deltas, with the defaults most tests use (the
``todos`` table, row ``row-1``, client ``c1``, an HLC at :data:`T0`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lakesync.core.canonical import JsonValue
from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta, make_delta
from lakesync.core.hlc import encode
from lakesync.core.schema import TableSchema, parse_table_schema

T0 = 1_700_000_000_000
"""The wall-clock millisecond the tests' HLCs count from."""

TODO_COLUMNS = {"title": "string", "done": "boolean", "priority": "number", "tags": "json"}
"""The todo table's columns, one of every type but null."""


def at(ms: int = 0, counter: int = 0) -> int:
    """The HLC ``ms`` milliseconds after :data:`T0`, with logical ``counter``."""
    return encode(T0 + ms, counter)


def schema_doc(table: str = "todos", /, **columns: str) -> dict[str, Any]:
    """A table schema document with one column per keyword (``name="type"``), in the order given."""
    return {"table": table, "columns": [{"name": name, "type": kind} for name, kind in columns.items()]}


def table_schema(table: str = "todos", /, **columns: str) -> TableSchema:
    """:func:`schema_doc`, parsed."""
    return parse_table_schema(schema_doc(table, **columns))


def schema_of(table: str, /, columns: Mapping[str, str], **options: JsonValue) -> TableSchema:
    """A schema of ``table`` with ``columns`` (name to type, in order) and document options (``primaryKey``,
    ``softDelete``, ``externalIdColumn``, ...), parsed. ``functools.partial(schema_of, columns=...)`` gives a suite its
    usual columns, which a call can still replace."""
    return parse_table_schema({**schema_doc(table, **columns), **options})


def schema_with(schema: TableSchema, **options: JsonValue) -> TableSchema:
    """``schema`` with document options set (``primaryKey``, ``softDelete``, ``sourceTable``, ...), parsed again."""
    return parse_table_schema({**schema.to_json(), **options})


def todo_schema(table: str = "todos", /, **extra: str) -> dict[str, Any]:
    """The document of a todo table (:data:`TODO_COLUMNS`), then the ``extra`` columns."""
    return schema_doc(table, **TODO_COLUMNS, **extra)


def delta(
    op: DeltaOp | str,
    row: str = "row-1",
    *,
    hlc: int | None = None,
    table: str = "todos",
    client: str = "c1",
    columns: Mapping[str, JsonValue] | Sequence[ColumnDelta] = (),
) -> RowDelta:
    """A delta (with its deterministic id); ``hlc`` defaults to :data:`T0`'s."""
    return make_delta(op, table=table, row_id=row, client_id=client, hlc=at() if hlc is None else hlc, columns=columns)


def insert(
    row: str = "row-1", *, hlc: int | None = None, table: str = "todos", client: str = "c1", **columns: JsonValue
) -> RowDelta:
    """An INSERT of ``columns``."""
    return delta("INSERT", row, hlc=hlc, table=table, client=client, columns=columns)


def update(
    row: str = "row-1", *, hlc: int | None = None, table: str = "todos", client: str = "c1", **columns: JsonValue
) -> RowDelta:
    """An UPDATE of ``columns``."""
    return delta("UPDATE", row, hlc=hlc, table=table, client=client, columns=columns)


def delete(row: str = "row-1", *, hlc: int | None = None, table: str = "todos", client: str = "c1") -> RowDelta:
    """A DELETE."""
    return delta("DELETE", row, hlc=hlc, table=table, client=client)
