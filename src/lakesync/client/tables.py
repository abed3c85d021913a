"""User tables of the local store: table schemas as typed SQLite tables, and the checks of what the app writes.

A :class:`~lakesync.core.schema.TableSchema` becomes a plain SQLite table that any tool can read: the table is
named after the deltas' table (``schema.delta_table``), its primary key is ``_rowId TEXT`` (the original client's
naming, reference §16) and each schema column is a column with the affinity of its type:

==========  ===========  =========================================================================================
type        affinity     stored as
==========  ===========  =========================================================================================
string      TEXT         the string
number      NUMERIC      the integer or float (NUMERIC keeps integers exact and stores ``2.0`` as ``2``)
boolean     INTEGER      0 / 1
json        TEXT         the value's compact JSON text (``json_extract`` works on it)
null        (none)       NULL
==========  ===========  =========================================================================================

A value of another type than its column's (another client wrote it; the gateway never checks values against
types) is stored as itself when SQLite can hold it (a scalar) and as JSON text otherwise; :meth:`LocalTable.from_sql`
reads back what :meth:`LocalTable.to_sql` wrote for every value the app can write. The per-column LWW state
(``_lakesync_state``) is the source of truth; the user table is its projection and is rewritten from it.

Exact values: a value whose trip through its column (:func:`to_sql`, the column's affinity, :func:`from_sql`) gives it
back is *exact* (:func:`exact_types`): a string in a string column, a boolean in a boolean column, an int (64-bit) or
float in a number column (an integral float reads back as an int: the same JSON number), anything in a json column.
A row whose written values are all exact needs no copy of them in its state (the store's compact state, see
:mod:`lakesync.client.store`).

Names: SQLite identifiers are case-insensitive, so two columns differing only in case, a column named ``_rowId``
(any case) and tables named ``_lakesync_*`` or ``sqlite_*`` are refused when the store opens.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lakesync.core.canonical import JsonValue, utf8_size
from lakesync.core.errors import ValidationError
from lakesync.core.schema import ColumnType, TableSchema, parse_table_schema

ROW_ID = "_rowId"
"""The primary-key column of every user table (the original client's name)."""
META_PREFIX = "_lakesync_"
"""Prefix of the store's own tables."""

MAX_ROW_KEY_BYTES = 2048
"""The gateway's limit on ``{gateway}#{table}#{rowId}`` (a DynamoDB partition key)."""
MAX_DELTA_BYTES = 100_000
"""The gateway's default limit on a delta's columns as JSON (``max_row_bytes``)."""

_AFFINITY = {
    ColumnType.STRING: "TEXT",
    ColumnType.NUMBER: "NUMERIC",
    ColumnType.BOOLEAN: "INTEGER",
    ColumnType.JSON: "TEXT",
    ColumnType.NULL: "",
}


class LocalWriteError(ValidationError):
    """The app asked for a write the store refuses (unknown table or column, wrong type, bad row id); nothing was
    written."""

    code = "LOCAL_WRITE_ERROR"


class RowExistsError(LocalWriteError):
    """``insert`` of a row that is live in the local store."""

    code = "ROW_EXISTS"


class RowNotFoundError(LocalWriteError):
    """``update`` or ``delete`` of a row that is not live in the local store."""

    code = "ROW_NOT_FOUND"


_AS_IS: dict[ColumnType, tuple[type, ...]] = {
    ColumnType.STRING: (str, int, float),
    ColumnType.NUMBER: (int, float, str),
    ColumnType.BOOLEAN: (int, float, str),
    ColumnType.JSON: (),
    ColumnType.NULL: (str, int, float),
}
"""Python types a column stores unchanged (``type(True)`` is ``bool``, never ``int``: booleans are converted)."""
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
MAX_SAFE_INTEGER = 2**53 - 1
"""The largest integer a JSON number carries exactly (JavaScript's ``Number.MAX_SAFE_INTEGER``): the wire renders
numbers as ECMAScript does, so a larger one reaches the gateway and every other client rounded to a double."""
_INLINE_TYPES: dict[type, tuple[ColumnType, ...]] = {
    bool: (ColumnType.BOOLEAN, ColumnType.JSON),
    int: (ColumnType.NUMBER, ColumnType.JSON),
    float: (ColumnType.NUMBER, ColumnType.JSON),
}
"""Scalar types accepted inline per column type (``type(True)`` is ``bool``, so a bool never passes as a number)."""


KIND_CODES: dict[ColumnType, str] = {
    ColumnType.STRING: "s",
    ColumnType.NUMBER: "n",
    ColumnType.BOOLEAN: "b",
    ColumnType.JSON: "j",
    ColumnType.NULL: "z",
}
"""One letter per column type, as compact states record the types their values were written with."""
KINDS_BY_CODE: dict[str, ColumnType] = {code: kind for kind, code in KIND_CODES.items()}

_EXACT: dict[ColumnType, frozenset[type]] = {
    ColumnType.STRING: frozenset({str, type(None)}),
    ColumnType.NUMBER: frozenset({int, float, type(None)}),
    ColumnType.BOOLEAN: frozenset({bool, type(None)}),
    ColumnType.NULL: frozenset({str, int, float, type(None)}),
}
"""Per column type, the Python types whose values read back as themselves (ints only within 64 bits; a json column
reads back every JSON value)."""
_BIND_AS_IS: dict[ColumnType, frozenset[type]] = {
    ColumnType.STRING: frozenset({str, int, float, bool, type(None)}),
    ColumnType.NUMBER: frozenset({int, float, bool, str, type(None)}),
    ColumnType.BOOLEAN: frozenset({bool, int, float, str, type(None)}),
    ColumnType.NULL: frozenset({str, int, float, bool, type(None)}),
}
"""Per column type, the Python types ``sqlite3`` binds as :func:`to_sql` would convert them (a bool binds as 0/1; ints
only within 64 bits)."""


def exact_types(kind: ColumnType) -> frozenset[type] | None:
    """The Python types whose values read back as themselves from a column of ``kind`` (ints: within 64 bits);
    ``None``: every JSON value does (a json column)."""
    return _EXACT.get(kind)


def bind_column(kind: ColumnType, values: list[Any]) -> tuple[Sequence[Any], bool]:
    """One column of many rows as :meth:`LocalTable.row_params` binds it, and whether every value is exact."""
    if kind is ColumnType.JSON:
        return [None if v is None else _dumps(v) for v in values], True
    types = set(map(type, values))
    if int not in types:
        in_range = True
    elif len(types) == 1:  # ints only: the bounds in C
        in_range = _INT64_MIN <= min(values) and max(values) <= _INT64_MAX
    else:
        in_range = all(_INT64_MIN <= v <= _INT64_MAX for v in values if type(v) is int)
    exact = in_range and types <= _EXACT[kind]
    if in_range and types <= _BIND_AS_IS[kind]:
        return values, exact
    return [to_sql(kind, v) for v in values], exact


def quote(name: str) -> str:
    """A SQLite identifier, quoted (names are validated identifiers; quoting keeps keywords such as ``order`` legal)."""
    return '"' + name.replace('"', '""') + '"'


def _dumps(value: JsonValue) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True, slots=True)
class LocalTable:
    """One user table: its schema's columns (duplicates collapsed, last type wins) and how values map to SQLite."""

    name: str
    columns: tuple[str, ...]
    types: Mapping[str, ColumnType]
    plan: tuple[tuple[str, ColumnType, tuple[type, ...]], ...] = ()
    """Per column: name, type, and the Python types stored unchanged."""
    positions: Mapping[str, tuple[int, ColumnType]] = field(default_factory=dict)
    """Per column: its place among the columns and its type."""

    @classmethod
    def from_schema(cls, schema: TableSchema | Mapping[str, Any]) -> LocalTable:
        """Build from a schema object or its JSON document.

        Raises:
            SchemaDefinitionError: an invalid schema document.
            ValidationError: a name the local store cannot use (see the module docstring).
        """
        if not isinstance(schema, TableSchema):
            schema = parse_table_schema(schema)
        name = schema.delta_table
        lowered = name.lower()
        if lowered.startswith((META_PREFIX, "sqlite_")):
            raise ValidationError(f'Table name "{name}" is reserved in the local store')
        types = schema.column_types
        seen: dict[str, str] = {}
        for column in types:
            key = column.lower()
            if key == ROW_ID.lower():
                raise ValidationError(f'Column "{column}" of table "{name}" clashes with the local key column {ROW_ID}')
            if key in seen:
                raise ValidationError(
                    f'Columns "{seen[key]}" and "{column}" of table "{name}" differ only in case (SQLite would clash)'
                )
            seen[key] = column
        return cls(
            name,
            tuple(types),
            dict(types),
            tuple((c, t, _AS_IS[t]) for c, t in types.items()),
            {c: (i, t) for i, (c, t) in enumerate(types.items())},
        )

    # -- DDL --------------------------------------------------------------------------------------------------------
    def create_sql(self) -> str:
        """``CREATE TABLE IF NOT EXISTS`` with ``_rowId TEXT PRIMARY KEY`` and one typed column per schema column."""
        cols = [f"{quote(ROW_ID)} TEXT PRIMARY KEY NOT NULL"]
        cols += [f"{quote(c)} {_AFFINITY[self.types[c]]}".rstrip() for c in self.columns]
        return f"CREATE TABLE IF NOT EXISTS {quote(self.name)} ({', '.join(cols)})"

    def affinity(self, column: str) -> str:
        """The declared type a column is created with (what ``PRAGMA table_info`` reads back)."""
        return _AFFINITY[self.types[column]]

    def add_column_sql(self, column: str) -> str:
        """``ALTER TABLE ... ADD COLUMN`` for a column a newer schema added."""
        return f"ALTER TABLE {quote(self.name)} ADD COLUMN {quote(column)} {_AFFINITY[self.types[column]]}".rstrip()

    def upsert_sql(self) -> str:
        """``INSERT OR REPLACE`` of a whole row: ``_rowId`` then every column in schema order."""
        names = ", ".join(quote(c) for c in (ROW_ID, *self.columns))
        marks = ", ".join("?" * (len(self.columns) + 1))
        return f"INSERT OR REPLACE INTO {quote(self.name)} ({names}) VALUES ({marks})"

    def delete_sql(self) -> str:
        """``DELETE`` of one row by ``_rowId``."""
        return f"DELETE FROM {quote(self.name)} WHERE {quote(ROW_ID)} = ?"

    def select_sql(self) -> str:
        """``SELECT`` of every row, ``_rowId`` first, columns in schema order."""
        names = ", ".join(quote(c) for c in (ROW_ID, *self.columns))
        return f"SELECT {names} FROM {quote(self.name)}"

    # -- values -----------------------------------------------------------------------------------------------------
    def row_params(self, row_id: str, values: Mapping[str, JsonValue]) -> tuple[Any, ...]:
        """The parameters of :meth:`upsert_sql` for a row's live values (columns it lacks are NULL)."""
        out: list[Any] = [row_id]
        get = values.get
        for column, kind, as_is in self.plan:
            value = get(column)
            # Values SQLite stores as they are skip the call (the common case); ints beyond 64 bits do not.
            kind_of = type(value)
            if value is None or (kind_of in as_is and (kind_of is not int or _INT64_MIN <= value <= _INT64_MAX)):
                out.append(value)
            else:
                out.append(to_sql(kind, value))
        return tuple(out)

    def fresh_params(self, row_id: str, values: Mapping[str, JsonValue]) -> tuple[tuple[Any, ...], bool]:
        """:meth:`row_params`, and whether every value of ``values`` is exact (see the module docstring)."""
        out: list[Any] = [row_id]
        get = values.get
        exact = True
        for column, kind, as_is in self.plan:
            value = get(column)
            kind_of = type(value)
            if value is None or (kind_of in as_is and (kind_of is not int or _INT64_MIN <= value <= _INT64_MAX)):
                out.append(value)
                if value is not None and kind_of not in _EXACT[kind]:
                    exact = False
            else:
                out.append(to_sql(kind, value))
                if kind is not ColumnType.JSON and (kind is not ColumnType.BOOLEAN or kind_of is not bool):
                    exact = False
        return tuple(out), exact

    def prepare_insert(self, gateway: str, row_id: object, values: Mapping[str, Any]) -> tuple[tuple[Any, ...], int]:
        """:meth:`check_write` then :meth:`fresh_params` in one pass for the common row (an ASCII row id, ASCII
        strings, booleans, finite numbers and nulls in columns of their own type); any other row takes those two
        calls. Returns the parameters of :meth:`upsert_sql` and the row's *shape*: bit ``i`` set for each column
        ``i`` it gives, when all its values are exact; else -1.

        Raises:
            LocalWriteError: as :meth:`check_write`.
        """
        if (
            type(row_id) is str
            and row_id
            and row_id.isascii()
            and len(gateway) + len(self.name) + 2 + len(row_id) <= MAX_ROW_KEY_BYTES
            and type(values) is dict
        ):
            slots: list[Any] = [None] * len(self.columns)
            positions = self.positions
            bound = 2
            shape = 0
            for column, value in values.items():
                place = positions.get(column)
                if place is None:
                    break
                at, kind = place
                kind_of = type(value)
                if kind_of is str:
                    if kind is not ColumnType.STRING or not value.isascii():
                        break
                    bound += 6 * len(value) + 26 + 6 * len(column)
                elif kind_of is bool:
                    if kind is not ColumnType.BOOLEAN:
                        break
                    bound += 56 + 6 * len(column)
                elif kind_of is int:
                    if kind is not ColumnType.NUMBER or not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
                        break
                    bound += 56 + 6 * len(column)
                elif kind_of is float:
                    if kind is not ColumnType.NUMBER or not math.isfinite(value):
                        break
                    bound += 56 + 6 * len(column)
                elif value is not None:
                    break
                else:
                    bound += 56 + 6 * len(column)
                slots[at] = value
                shape |= 1 << at
            else:
                if bound <= MAX_DELTA_BYTES:
                    return (row_id, *slots), shape
        self.check_write(gateway, row_id, values)
        assert isinstance(row_id, str)
        params, exact = self.fresh_params(row_id, values)
        return params, sum(1 << self.positions[c][0] for c in values) if exact else -1

    def shape_columns(self, shape: int) -> tuple[str, ...]:
        """The columns of a row shape (see :meth:`prepare_insert`), in schema order."""
        return tuple(c for i, c in enumerate(self.columns) if shape >> i & 1)

    def from_row(self, row: Sequence[Any]) -> dict[str, JsonValue]:
        """A row read with :meth:`select_sql` (without its ``_rowId``) as the app's values."""
        types = self.types
        return {c: from_sql(types[c], v) for c, v in zip(self.columns, row[1:], strict=True)}

    def check_write(self, gateway: str, row_id: object, values: Mapping[str, Any] | None) -> None:
        """Refuse bad input before anything is written.

        Raises:
            LocalWriteError: a bad row id, an unknown column, a value of the wrong type, a non-JSON value, or a
                delta larger than the gateway accepts.
        """
        check_row_id(gateway, self.name, row_id)
        if values is None:
            return
        if not isinstance(values, Mapping):
            raise LocalWriteError(f"values for {self.name}:{row_id} must be a mapping of column to value")
        types = self.types
        bound = 2
        for column, value in values.items():
            kind = types.get(column) if isinstance(column, str) else None
            if kind is None:
                raise LocalWriteError(f'Unknown column "{column}" for table "{self.name}"')
            # Scalars of the column's own type are checked inline (the common case); the rest in full.
            value_type = type(value)
            if value_type is str and (kind is ColumnType.STRING or kind is ColumnType.JSON):
                if not value.isascii():
                    _check_json(value, f"{self.name}.{column}", 0)
                bound += 6 * len(value) + 26 + 6 * len(column)
            elif value is None or (
                kind in _INLINE_TYPES.get(value_type, ())
                and (value_type is not float or math.isfinite(value))
                and (value_type is not int or -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER)
            ):
                bound += 56 + 6 * len(column)
            else:
                _check_value(self.name, column, kind, value)
                bound += _size_bound({column: value})
        if bound <= MAX_DELTA_BYTES:
            return  # the common case: a cheap upper bound suffices
        size = utf8_size([{"column": c, "value": v} for c, v in values.items()])
        if size > MAX_DELTA_BYTES:
            raise LocalWriteError(
                f"The write to {self.name}:{row_id} is {size:,} bytes of JSON; the gateway accepts {MAX_DELTA_BYTES:,}"
            )


def check_row_size(table: str, row_id: str, values: Mapping[str, JsonValue] | None) -> None:
    """A row's live values after a write fit the gateway's limit on a merged row (its values as compact UTF-8 JSON,
    as the gateway measures them: ``max_row_bytes``).

    Raises:
        LocalWriteError: otherwise (the gateway would refuse the write with 422).
    """
    if not values or _size_bound(values) <= MAX_DELTA_BYTES:
        return  # the common case: a cheap upper bound suffices
    size = len(_dumps(dict(values)).encode("utf-8"))
    if size > MAX_DELTA_BYTES:
        raise LocalWriteError(
            f"The row {table}:{row_id} would grow to {size:,} bytes of JSON; the gateway accepts {MAX_DELTA_BYTES:,}"
        )


def _size_bound(values: Mapping[str, Any]) -> int:
    """An upper bound of ``utf8_size`` of the delta's columns: 6 bytes per character of a string (an escape is at
    most 6, a character's UTF-8 at most 4), 32 per number, and twice the C encoder's length for containers."""
    total = 2
    for column, value in values.items():
        total += 24 + 6 * len(column)
        if isinstance(value, str):
            total += 6 * len(value) + 2
        elif isinstance(value, list | tuple | dict):
            total += 2 * len(_dumps(value).encode("utf-8")) + 64
        else:
            total += 32
    return total


def check_row_id(gateway: str, table: str, row_id: object) -> None:
    """A row id is a non-empty string of valid text whose row key fits the gateway's limit.

    Raises:
        LocalWriteError: otherwise.
    """
    if not isinstance(row_id, str) or not row_id:
        raise LocalWriteError(f"row_id must be a non-empty string, not {row_id!r}")
    try:
        size = len(row_id.encode("utf-8"))
    except UnicodeEncodeError:
        raise LocalWriteError(f"row_id {row_id!r} is not valid text (it holds a lone surrogate)") from None
    if len(gateway) + len(table) + 2 + size > MAX_ROW_KEY_BYTES:
        raise LocalWriteError(f"row_id is {size:,} bytes; the row key {gateway}#{table}#<rowId> must fit 2,048 bytes")


def _check_value(table: str, column: str, kind: ColumnType, value: Any) -> None:
    where = f"{table}.{column}"
    if value is None:
        return
    ok: bool
    if kind is ColumnType.STRING:
        ok = isinstance(value, str)
    elif kind is ColumnType.NUMBER:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind is ColumnType.BOOLEAN:
        ok = isinstance(value, bool)
    elif kind is ColumnType.NULL:
        ok = False
    else:
        ok = True
    if not ok:
        raise LocalWriteError(f"{where} is a {kind.value} column; got {type(value).__name__} {value!r:.60}")
    _check_json(value, where, 0)


def _check_json(value: Any, where: str, depth: int) -> None:
    if depth > 64:
        raise LocalWriteError(f"{where} is nested too deeply (64 levels at most)")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            raise LocalWriteError(
                f"{where} is an integer beyond ±{MAX_SAFE_INTEGER:,}: a JSON number would carry it rounded to a double"
                " (other clients would read another value); write it as a string"
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise LocalWriteError(f"{where} must be a finite number")
        return
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise LocalWriteError(f"{where} is not valid text (it holds a lone surrogate)") from None
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check_json(item, where, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise LocalWriteError(f"{where} has a non-string object key {key!r}")
            _check_json(key, where, depth + 1)
            _check_json(item, where, depth + 1)
        return
    raise LocalWriteError(f"{where} is not a JSON value ({type(value).__name__})")


def to_sql(kind: ColumnType, value: JsonValue) -> Any:
    """A JSON value as the column stores it (see the module docstring)."""
    if value is None:
        return None
    if kind is ColumnType.JSON:
        return _dumps(value)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, list | dict):
        return _dumps(value)
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return float(value)  # SQLite integers are 64-bit; the value is a double on the wire anyway
    return value


def from_sql(kind: ColumnType, value: Any) -> JsonValue:
    """Inverse of :func:`to_sql` for values of the column's type."""
    if value is None:
        return None
    if kind is ColumnType.JSON:
        parsed: JsonValue = json.loads(value)
        return parsed
    if kind is ColumnType.BOOLEAN and isinstance(value, int):
        return bool(value)
    result: JsonValue = value
    return result


def load_tables(schemas: Iterable[TableSchema | Mapping[str, Any]]) -> dict[str, LocalTable]:
    """The local tables of the given schemas, by table name.

    Raises:
        ValidationError: two schemas for one table, or a name the store cannot use.
    """
    tables: dict[str, LocalTable] = {}
    for schema in schemas:
        table = LocalTable.from_schema(schema)
        if table.name.lower() in {t.lower() for t in tables}:
            raise ValidationError(f'Two schemas for table "{table.name}"')
        tables[table.name] = table
    return tables
