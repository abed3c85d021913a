"""Identifiers, table schemas, safe schema evolution and delta-vs-schema checks.

Invariants:

* An identifier (table or column name) matches ``[A-Za-z_][A-Za-z0-9_]{0,63}`` over the *whole* string: ASCII only,
  1 to 64 characters, no trailing newline (Python's ``$`` would allow one, so the pattern is anchored with ``\\Z``).
* A :class:`TableSchema` built by :func:`parse_table_schema` has valid identifiers everywhere, column types from
  :class:`ColumnType`, and a ``primaryKey`` / ``externalIdColumn`` that name its columns (``row_id`` is always a valid
  primary-key column). Column order is kept; duplicate column names are accepted, as in the original.
* A schema constrains only the deltas of *its* table (``sourceTable`` if set, else ``table``). The original applied
  one schema to every table pushed to the gateway; we do not.
* Evolution only adds columns: removing a column or changing its type is refused, and every added column is nullable
  (our schemas have no NOT NULL). What keys and routes the rows may not change either (ours; the original accepted
  it): ``primaryKey``, ``softDelete`` and ``sourceTable``, compared with their defaults applied (``["row_id"]``,
  true, the table), so spelling a default out is no change. The version bumps only when the schema document actually
  changes -- the original bumped it even for an identical schema.
* A schema saved through the admin route has at most :data:`MAX_SCHEMA_COLUMNS` columns and a stored document of at
  most :data:`MAX_SCHEMA_BYTES` (:func:`check_schema_limits`; stored schemas are read back without these checks).

Checks and messages of :func:`parse_table_schema` follow the original's ``validateSchemaBody`` in order, so any
document the original rejects is rejected with the same message. Checks the original lacks run last: ``sourceTable``
must be an identifier and a column's ``references`` must be ``{table, column, cardinality}`` with identifier names
(``null`` counts as absent for both). Non-string table names are refused (JavaScript coerced them).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from lakesync.core.canonical import JsonValue, js_string_coerce, js_stringify, utf8_size
from lakesync.core.delta import DeltaOp, RowDelta
from lakesync.core.errors import PayloadTooLargeError, SchemaDefinitionError, SchemaError, ValidationError

IDENTIFIER_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
"""A SQL-safe identifier; anchored with ``\\A``/``\\Z`` so ``match``, ``search`` and ``fullmatch`` all agree."""

IDENTIFIER_RULE = (
    "Identifiers must start with a letter or underscore, contain only alphanumeric characters and underscores, "
    "and be at most 64 characters long."
)

MAX_SCHEMA_COLUMNS = 1000
"""Most columns a table schema may have (the SQL destinations' limits are 1,600 and up)."""
MAX_SCHEMA_BYTES = 300 * 1024
"""Largest stored schema document (UTF-8 JSON), well within a 400 KB DynamoDB item."""

ROW_ID_COLUMN = "row_id"
"""The implicit row-id column every destination table has; always allowed in ``primaryKey``."""


class ColumnType(enum.StrEnum):
    """The type of a schema column (values are never checked against it in deltas)."""

    STRING = "string"
    NUMBER = "number"
    BOOLEAN = "boolean"
    JSON = "json"
    NULL = "null"


class Cardinality(enum.StrEnum):
    """How a column's reference relates rows."""

    MANY_TO_ONE = "many-to-one"
    ONE_TO_MANY = "one-to-many"


def is_valid_identifier(name: object) -> TypeGuard[str]:
    """Whether ``name`` is a string and a valid identifier (see module docstring)."""
    return isinstance(name, str) and IDENTIFIER_RE.match(name) is not None


def validate_table_name(table: str) -> None:
    """Check a delta's table name, as the push pipeline does before anything else.

    Raises:
        SchemaError: ``Invalid SQL identifier: "{table}". Identifiers must ...`` (HTTP 422).
    """
    if not is_valid_identifier(table):
        raise SchemaError(f'Invalid SQL identifier: "{table}". {IDENTIFIER_RULE}')


@dataclass(frozen=True, slots=True)
class ColumnReference:
    """A column's pointer at a column of another table."""

    table: str
    column: str
    cardinality: Cardinality

    def to_json(self) -> dict[str, Any]:
        """The wire JSON shape ``{"table", "column", "cardinality"}``."""
        return {"table": self.table, "column": self.column, "cardinality": self.cardinality.value}


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """One column of a table schema."""

    name: str
    type: ColumnType
    references: ColumnReference | None = None

    def to_json(self) -> dict[str, Any]:
        """The wire JSON shape ``{"name", "type", "references"?}``."""
        out: dict[str, Any] = {"name": self.name, "type": self.type.value}
        if self.references is not None:
            out["references"] = self.references.to_json()
        return out


@dataclass(frozen=True, slots=True)
class TableSchema:
    """A table's columns and its materialisation options.

    Attributes:
        table: The destination table name.
        columns: Columns in schema order.
        primary_key: Destination primary key; ``None`` means ``("row_id",)``.
        soft_delete: Whether deletes only set ``deleted_at``; ``None`` means true.
        external_id_column: A column that must be unique in the destination (the upsert conflict target).
        source_table: The table name deltas carry, when it differs from ``table``.
    """

    table: str
    columns: tuple[ColumnSpec, ...]
    primary_key: tuple[str, ...] | None = None
    soft_delete: bool | None = None
    external_id_column: str | None = None
    source_table: str | None = None

    @property
    def delta_table(self) -> str:
        """The table name of the deltas this schema describes: ``source_table`` or ``table``."""
        return self.source_table if self.source_table is not None else self.table

    @property
    def column_names(self) -> tuple[str, ...]:
        """Column names in schema order (duplicates kept)."""
        return tuple(c.name for c in self.columns)

    @property
    def column_types(self) -> dict[str, ColumnType]:
        """Name → type; with duplicate names the last declaration wins (at the first one's position)."""
        return {c.name: c.type for c in self.columns}

    @property
    def effective_primary_key(self) -> tuple[str, ...]:
        """The primary key with its default applied."""
        return self.primary_key if self.primary_key is not None else (ROW_ID_COLUMN,)

    @property
    def is_soft_delete(self) -> bool:
        """Soft delete with its default (true) applied."""
        return self.soft_delete is not False

    def to_json(self) -> dict[str, Any]:
        """The wire JSON shape (camelCase; unset optional fields are omitted)."""
        out: dict[str, Any] = {"table": self.table}
        if self.source_table is not None:
            out["sourceTable"] = self.source_table
        out["columns"] = [c.to_json() for c in self.columns]
        if self.primary_key is not None:
            out["primaryKey"] = list(self.primary_key)
        if self.soft_delete is not None:
            out["softDelete"] = self.soft_delete
        if self.external_id_column is not None:
            out["externalIdColumn"] = self.external_id_column
        return out

    @classmethod
    def from_json(cls, obj: object) -> TableSchema:
        """Same as :func:`parse_table_schema`."""
        return parse_table_schema(obj)


def _fail(message: str) -> SchemaDefinitionError:
    return SchemaDefinitionError(message)


def _js_falsy(value: JsonValue) -> bool:
    """JavaScript falsiness of a JSON value (``None`` also stands for an absent key)."""
    if value is None or value is False:
        return True
    if isinstance(value, str):
        return value == ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value == 0 or value != value
    return False


def _js_text(value: JsonValue) -> str:
    """How a JavaScript template literal prints a JSON value."""
    return value if isinstance(value, str) else js_string_coerce(value)


_COLUMN_TYPES = frozenset(t.value for t in ColumnType)
_ABSENT: Any = object()


def parse_table_schema(obj: object) -> TableSchema:
    """Validate a table-schema document (already parsed JSON) and build the typed schema.

    First failure wins, in the original's order: required fields, table name, each column (name present, name an
    identifier, known type), ``primaryKey``, ``softDelete``, ``externalIdColumn``; then our extra checks of
    ``sourceTable`` and column ``references``. Empty ``columns`` and duplicate column names are accepted.

    Raises:
        SchemaDefinitionError: with the original's exact message (HTTP 400, code ``SCHEMA_ERROR``).
    """
    doc: Mapping[str, Any] = obj if isinstance(obj, Mapping) else {}
    table = doc.get("table")
    raw_columns = doc.get("columns")
    if _js_falsy(table) or not isinstance(raw_columns, list):
        raise _fail("Missing required fields: table, columns")
    if not is_valid_identifier(table):
        raise _fail(f'Invalid table name: "{_js_text(table)}". {IDENTIFIER_RULE}')

    for col in raw_columns:
        _check_column(col)
    names = {col["name"] for col in raw_columns}

    primary_key = _primary_key(doc, names)

    soft_delete = doc.get("softDelete")
    if "softDelete" in doc and not isinstance(soft_delete, bool):
        raise _fail("softDelete must be a boolean")

    external_id = _external_id(doc, names)

    source_table = doc.get("sourceTable")
    if source_table is not None and not is_valid_identifier(source_table):
        raise _fail(f'Invalid source table name: "{_js_text(source_table)}". {IDENTIFIER_RULE}')

    columns = tuple(
        ColumnSpec(col["name"], ColumnType(col["type"]), _parse_reference(col["name"], col.get("references")))
        for col in raw_columns
    )
    return TableSchema(
        table=table,
        columns=columns,
        primary_key=primary_key,
        soft_delete=soft_delete,
        external_id_column=external_id,
        source_table=source_table,
    )


def _check_column(col: object) -> None:
    spec: Mapping[str, Any] = col if isinstance(col, Mapping) else {}
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise _fail("Each column must have a non-empty 'name' string")
    if not is_valid_identifier(name):
        raise _fail(f'Invalid column name: "{name}". {IDENTIFIER_RULE}')
    col_type = spec.get("type", _ABSENT)
    if not isinstance(col_type, str) or col_type not in _COLUMN_TYPES:
        shown = "undefined" if col_type is _ABSENT else _js_text(col_type)
        raise _fail(f'Invalid column type "{shown}" for column "{name}". Allowed: string, number, boolean, json, null')


def _primary_key(doc: Mapping[str, Any], names: set[str]) -> tuple[str, ...] | None:
    if "primaryKey" not in doc:
        return None
    pk = doc["primaryKey"]
    if not isinstance(pk, list) or not pk:
        raise _fail("primaryKey must be a non-empty array of strings")
    for item in pk:
        if not isinstance(item, str):
            raise _fail("primaryKey must be a non-empty array of strings")
        if item != ROW_ID_COLUMN and item not in names:
            raise _fail(f'primaryKey column "{item}" must be "row_id" or exist in columns')
    return tuple(pk)


def _external_id(doc: Mapping[str, Any], names: set[str]) -> Any:
    external_id = doc.get("externalIdColumn")
    if "externalIdColumn" in doc:
        if not isinstance(external_id, str) or not external_id:
            raise _fail("externalIdColumn must be a non-empty string")
        if external_id not in names:
            raise _fail(f'externalIdColumn "{external_id}" must exist in columns')
    return external_id


def _parse_reference(column: str, ref: object) -> ColumnReference | None:
    if ref is None:
        return None
    if (
        isinstance(ref, Mapping)
        and is_valid_identifier(ref.get("table"))
        and is_valid_identifier(ref.get("column"))
        and isinstance(ref.get("cardinality"), str)  # an unhashable JSON value cannot be looked up in a set
        and ref.get("cardinality") in {c.value for c in Cardinality}
    ):
        return ColumnReference(ref["table"], ref["column"], Cardinality(ref["cardinality"]))
    raise _fail(
        f'Invalid references for column "{column}": expected {{table, column, cardinality}} with identifier '
        'table and column and cardinality "many-to-one" or "one-to-many"'
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_table_schema_json(raw: str | bytes) -> TableSchema:
    """Parse a request body as JSON, then :func:`parse_table_schema` it.

    Raises:
        ValidationError: ``Invalid JSON body`` when ``raw`` is not JSON (HTTP 400, ``VALIDATION_ERROR``).
        SchemaDefinitionError: when the document is not a valid schema.
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        doc = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise ValidationError("Invalid JSON body") from None
    return parse_table_schema(doc)


def evolve_schema(current: TableSchema, proposed: TableSchema, current_version: int) -> tuple[TableSchema, int]:
    """Replace ``current`` by ``proposed`` if that only adds columns (reordering is allowed).

    Returns:
        ``(proposed, current_version + 1)``, or ``(current, current_version)`` when ``proposed`` equals ``current``
        (our semantics: an identical schema is not a new version).

    Raises:
        SchemaDefinitionError: ``Cannot evolve schema: table name mismatch``; ``Cannot remove column "{name}" — only
            adding nullable columns is supported`` (first missing column in current order); ``Cannot change type of
            column "{name}" from "{old}" to "{new}"``; ``Cannot change primaryKey from ["row_id"] to ["id"]`` (and
            likewise ``softDelete`` and ``sourceTable``, values as JSON, defaults applied).
    """
    if proposed.table != current.table:
        raise _fail("Cannot evolve schema: table name mismatch")
    check_column_evolution(current, proposed)
    # The destination tables are keyed, deleted from and fed by these: changing them would leave the rows already
    # materialised under the old rule. Compared with their defaults applied, so spelling a default out is no change.
    for field, old, new in (
        ("primaryKey", list(current.effective_primary_key), list(proposed.effective_primary_key)),
        ("softDelete", current.is_soft_delete, proposed.is_soft_delete),
        ("sourceTable", current.delta_table, proposed.delta_table),
    ):
        if old != new:
            raise _fail(f"Cannot change {field} from {js_stringify(old)} to {js_stringify(new)}")
    if proposed == current:
        return current, current_version
    return proposed, current_version + 1


def check_column_evolution(current: TableSchema, proposed: TableSchema) -> None:
    """The column part of :func:`evolve_schema`: every current column is kept with its type (new ones may be added).

    For stores that hold the columns only (the Spark state tables), where the table options do not matter.

    Raises:
        SchemaDefinitionError: ``Cannot remove column "{name}" — only adding nullable columns is supported``;
            ``Cannot change type of column "{name}" from "{old}" to "{new}"``.
    """
    old_types = current.column_types
    new_types = proposed.column_types
    for name in old_types:
        if name not in new_types:
            raise _fail(f'Cannot remove column "{name}" — only adding nullable columns is supported')
    for name, old_type in old_types.items():
        new_type = new_types[name]
        if new_type is not old_type:
            raise _fail(f'Cannot change type of column "{name}" from "{old_type.value}" to "{new_type.value}"')


def check_schema_limits(schema: TableSchema) -> None:
    """Check the bounds of a schema about to be stored (the admin route; see the module docstring).

    Raises:
        SchemaDefinitionError: more than :data:`MAX_SCHEMA_COLUMNS` columns (HTTP 400).
        PayloadTooLargeError: the stored document would exceed :data:`MAX_SCHEMA_BYTES` (HTTP 413).
    """
    if len(schema.columns) > MAX_SCHEMA_COLUMNS:
        raise _fail(
            f"A schema may have at most {MAX_SCHEMA_COLUMNS:,} columns; {schema.table} has {len(schema.columns):,}"
        )
    size = utf8_size(schema.to_json())
    if size > MAX_SCHEMA_BYTES:
        raise PayloadTooLargeError(f"Schema document is {size:,} bytes; the limit is {MAX_SCHEMA_BYTES:,}")


def validate_delta(schema: TableSchema, delta: RowDelta, version: int) -> None:
    """Check that a delta only sets columns its table's schema declares.

    Only deltas for ``schema.delta_table`` are constrained (the original applied its single schema to every table);
    others pass. A DELETE always passes, and so do sparse deltas (missing columns). Column *values* are not checked
    against the column types, as in the original.

    Args:
        schema: The table's schema.
        delta: The incoming delta.
        version: The schema's version, quoted in the error.

    Raises:
        SchemaError: ``Unknown column "{col}" in delta for table "{table}". Schema version {v} does not include this
            column.`` (HTTP 422).
    """
    if delta.table != schema.delta_table or delta.op is DeltaOp.DELETE:
        return
    allowed = set(schema.column_names)
    for col in delta.columns:
        if col.column not in allowed:
            raise SchemaError(
                f'Unknown column "{col.column}" in delta for table "{delta.table}". '
                f"Schema version {version} does not include this column."
            )
