"""Row deltas: the unit of change that clients push and pull.

A :class:`RowDelta` names one row (``table`` + ``row_id``), the client and HLC that wrote it, an operation and the
ordered list of columns it sets. ``columns`` order is significant: it feeds the deltaId.

The deltaId is ``sha256_hex(stable_stringify({clientId, hlc: decimal string, table, rowId, columns}))`` -- the same
bytes as every other LakeSync implementation. Servers treat it as an opaque idempotency key and never recompute it.

The JSON shape (:meth:`RowDelta.to_json` / :meth:`RowDelta.from_json`) is the wire's: camelCase keys, ``op`` as
``"INSERT" | "UPDATE" | "DELETE"``, ``hlc`` as a decimal string.

:func:`validate_row_delta` is the one field check of a delta a client sent, whatever its encoding (JSON or protobuf,
whose proto3 defaults make every missing string an empty one): ``table``, ``rowId``, ``clientId``, ``deltaId`` and
every column name are non-empty; every string -- those, and every string and object key inside column values -- is
valid Unicode, so that it has a UTF-8 encoding (JSON's ``"\ud800"`` escape and ``surrogatepass`` decoding can make
Python strings with lone surrogates, which no store accepts); ``clientId`` and ``deltaId`` are at most
:data:`MAX_ID_BYTES` bytes; values are finite and nested at most 64 deep. :meth:`RowDelta.from_json` only parses
(it also reads stored deltas), so it checks types, emptiness and values, not Unicode or lengths.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lakesync.core import hlc as hlc_mod
from lakesync.core.canonical import JsonValue, stable_stringify
from lakesync.core.errors import ValidationError


class DeltaOp(enum.StrEnum):
    """What a delta does to its row."""

    INSERT = "INSERT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"


_OPS = {op.value: op for op in DeltaOp}


MAX_ID_BYTES = 256
"""Longest ``clientId`` and ``deltaId`` in UTF-8 bytes (a generated deltaId has 64; a clientId is a token's ``sub``).
Both are stored with every delta, and the clientId with every column of a row's state."""

_SURROGATE = re.compile(r"[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class ColumnDelta:
    """One column set to a JSON value (``None`` is JSON null)."""

    column: str
    value: JsonValue

    def to_json(self) -> dict[str, Any]:
        """The wire JSON shape ``{"column", "value"}``."""
        return {"column": self.column, "value": self.value}


@dataclass(frozen=True, slots=True)
class RowDelta:
    """A change to one row, stamped with the writer's HLC."""

    op: DeltaOp
    table: str
    row_id: str
    client_id: str
    columns: tuple[ColumnDelta, ...]
    hlc: int
    delta_id: str

    @property
    def row_key(self) -> str:
        """``"{table}:{rowId}"``, unambiguous because table names are identifiers."""
        return f"{self.table}:{self.row_id}"

    def to_json(self) -> dict[str, Any]:
        """The wire JSON shape with the HLC as a decimal string."""
        return {
            "op": self.op.value,
            "table": self.table,
            "rowId": self.row_id,
            "clientId": self.client_id,
            "columns": [c.to_json() for c in self.columns],
            "hlc": str(self.hlc),
            "deltaId": self.delta_id,
        }

    @classmethod
    def from_json(cls, obj: object, *, where: str = "delta") -> RowDelta:
        """Parse and type-check the wire JSON shape.

        Raises:
            ValidationError: naming the first field that is missing or of the wrong type.
        """
        if not isinstance(obj, Mapping):
            raise ValidationError(f"{where} must be an object")
        op_text = obj.get("op")
        try:
            op = DeltaOp(str(op_text))
        except ValueError:
            raise ValidationError(f"{where}.op must be one of INSERT, UPDATE, DELETE") from None
        texts = {}
        for key in ("table", "rowId", "clientId", "deltaId"):
            value = obj.get(key)
            if not isinstance(value, str) or not value:
                raise ValidationError(f"{where}.{key} must be a non-empty string")
            texts[key] = value
        stamp = hlc_mod.parse(obj.get("hlc"), field=f"{where}.hlc")
        raw_columns = obj.get("columns", [])
        if not isinstance(raw_columns, list):
            raise ValidationError(f"{where}.columns must be an array")
        columns = []
        for i, col in enumerate(raw_columns):
            if not isinstance(col, Mapping):
                raise ValidationError(f"{where}.columns[{i}] must be an object")
            if not isinstance(col.get("column"), str) or not col["column"]:
                raise ValidationError(f"{where}.columns[{i}].column must be a non-empty string")
            if "value" not in col:
                raise ValidationError(f"{where}.columns[{i}] must have a 'value' (use null)")
            _check_json_value(col["value"], f"{where}.columns[{i}].value")
            columns.append(ColumnDelta(col["column"], col["value"]))
        return cls(
            op=op,
            table=texts["table"],
            row_id=texts["rowId"],
            client_id=texts["clientId"],
            columns=tuple(columns),
            hlc=stamp,
            delta_id=texts["deltaId"],
        )

    @classmethod
    def from_stored_json(cls, text: str) -> RowDelta:
        """Decode wire JSON this system rendered from an already validated delta (a stored log entry), without
        :meth:`from_json`'s checks: half the cost, for the pull's hot path. Never use it on client input."""
        obj = json.loads(text)
        return cls(
            _OPS[obj["op"]],
            obj["table"],
            obj["rowId"],
            obj["clientId"],
            tuple(ColumnDelta(column["column"], column["value"]) for column in obj["columns"]),
            int(obj["hlc"]),
            obj["deltaId"],
        )

    def values(self) -> dict[str, JsonValue]:
        """The columns as a dict (a later duplicate of a column wins)."""
        return {c.column: c.value for c in self.columns}


def _check_json_value(value: object, where: str, depth: int = 0, *, text: bool = False) -> None:
    """A JSON value: finite numbers, string keys, nesting at most 64 deep; with ``text``, valid Unicode strings."""
    if depth > 64:
        raise ValidationError(f"{where} is nested too deeply")
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, str):
        if text:
            _check_unicode(value, where)
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(f"{where} must be a finite number")
        return
    if isinstance(value, list):
        for item in value:
            _check_json_value(item, where, depth + 1, text=text)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationError(f"{where} has a non-string key")
            if text:
                _check_unicode(key, where)
            _check_json_value(item, where, depth + 1, text=text)
        return
    raise ValidationError(f"{where} is not a JSON value")


def _check_unicode(value: str, where: str) -> None:
    if not value.isascii():
        found = _SURROGATE.search(value)
        if found is not None:
            raise ValidationError(
                f"{where} is not valid UTF-8 text (it holds the lone surrogate U+{ord(found.group(0)):04X})"
            )


def _check_text(value: object, where: str, max_bytes: int | None = None) -> None:
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{where} must be a non-empty string")
    _check_unicode(value, where)
    if max_bytes is not None and len(value) * 4 > max_bytes:  # a code point is at most 4 bytes of UTF-8
        size = len(value.encode("utf-8"))
        if size > max_bytes:
            raise ValidationError(f"{where} is {size:,} bytes; the limit is {max_bytes:,}")


def is_valid_client_id(value: str) -> bool:
    """Whether ``value`` is a ``clientId`` :func:`validate_row_delta` accepts (a writer of deltas may have it)."""
    try:
        _check_text(value, "clientId", MAX_ID_BYTES)
    except ValidationError:
        return False
    return True


def validate_row_delta(delta: RowDelta, *, where: str = "delta") -> None:
    """Check the fields of a delta a client sent, whatever its encoding (see the module docstring).

    The gateway runs it on every pushed delta before anything else, so a JSON and a protobuf push of the same
    deltas are accepted or refused alike, with the same message.

    Args:
        delta: The decoded delta.
        where: How the message names the delta, e.g. ``deltas[3]``.

    Raises:
        ValidationError: naming the first bad field (HTTP 400).
    """
    if not isinstance(delta.op, DeltaOp):
        raise ValidationError(f"{where}.op must be one of INSERT, UPDATE, DELETE")
    _check_text(delta.table, f"{where}.table")
    _check_text(delta.row_id, f"{where}.rowId")
    _check_text(delta.client_id, f"{where}.clientId", MAX_ID_BYTES)
    _check_text(delta.delta_id, f"{where}.deltaId", MAX_ID_BYTES)
    if isinstance(delta.hlc, bool) or not isinstance(delta.hlc, int) or not 0 <= delta.hlc <= hlc_mod.MAX_HLC:
        raise ValidationError(f"{where}.hlc is out of range for a 64-bit HLC")
    for i, col in enumerate(delta.columns):
        _check_text(col.column, f"{where}.columns[{i}].column")
        _check_json_value(col.value, f"{where}.columns[{i}].value", text=True)


def delta_id(client_id: str, hlc: int, table: str, row_id: str, columns: Sequence[Mapping[str, Any]]) -> str:
    """The deterministic deltaId: lowercase hex SHA-256 of the canonical JSON of the delta's identity and columns.

    Args:
        client_id: The writing client.
        hlc: The delta's HLC (an integer; it is hashed as its decimal string).
        table: The table name.
        row_id: The row id.
        columns: ``[{"column": ..., "value": ...}, ...]`` in delta order.
    """
    payload = stable_stringify(
        {
            "clientId": client_id,
            "hlc": str(hlc),
            "table": table,
            "rowId": row_id,
            "columns": [{"column": c["column"], "value": c["value"]} for c in columns],
        }
    )
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


def make_delta(
    op: DeltaOp | str,
    *,
    table: str,
    row_id: str,
    client_id: str,
    hlc: int,
    columns: Mapping[str, JsonValue] | Sequence[ColumnDelta] = (),
) -> RowDelta:
    """Build a delta with its deterministic deltaId."""
    if isinstance(columns, Mapping):
        cols = tuple(ColumnDelta(k, v) for k, v in columns.items())
    else:
        cols = tuple(columns)
    op = DeltaOp(op)
    if op is DeltaOp.DELETE:
        cols = ()
    did = delta_id(client_id, hlc, table, row_id, [c.to_json() for c in cols])
    return RowDelta(op, table, row_id, client_id, cols, hlc, did)


def _same_value(a: JsonValue, b: JsonValue) -> bool:
    """``Object.is`` for scalars, deep equality (key-order-insensitive objects) for containers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        if a != a and b != b:  # NaN is NaN
            return True
        if a == 0 and b == 0:
            return math.copysign(1.0, float(a)) == math.copysign(1.0, float(b))
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_deep_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _deep_equal(a: JsonValue, b: JsonValue) -> bool:
    """``fast-deep-equal``: like :func:`_same_value` but numbers compare with ``===`` (so ``0 == -0``)."""
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool | None):
        if isinstance(b, bool):
            return False
        return (a != a and b != b) or a == b
    return _same_value(a, b)


def extract_delta(
    before: Mapping[str, JsonValue] | None,
    after: Mapping[str, JsonValue] | None,
    *,
    table: str,
    row_id: str,
    client_id: str,
    hlc: int,
    schema_columns: Sequence[str] | None = None,
) -> RowDelta | None:
    """The delta that turns ``before`` into ``after``, or ``None`` when nothing changed.

    ``None`` rows mean "absent": absent → present is an INSERT of every column (in the row's key order), present →
    absent a DELETE, present → present an UPDATE of the changed columns only. A column removed from ``after`` is not
    emitted. With ``schema_columns``, columns outside the schema are ignored.
    """
    allowed = set(schema_columns) if schema_columns is not None else None

    def keep(name: str) -> bool:
        return allowed is None or name in allowed

    if before is None and after is None:
        return None
    if before is None:
        assert after is not None
        cols = {k: v for k, v in after.items() if keep(k)}
        return make_delta(DeltaOp.INSERT, table=table, row_id=row_id, client_id=client_id, hlc=hlc, columns=cols)
    if after is None:
        return make_delta(DeltaOp.DELETE, table=table, row_id=row_id, client_id=client_id, hlc=hlc)
    changed: dict[str, JsonValue] = {}
    for name in dict.fromkeys([*before, *after]):
        if not keep(name) or name not in after:
            continue
        new = after[name]
        if name not in before or not _same_value(before[name], new):
            if name in before and isinstance(new, dict | list) and _deep_equal(before[name], new):
                continue
            changed[name] = new
    if not changed:
        return None
    return make_delta(DeltaOp.UPDATE, table=table, row_id=row_id, client_id=client_id, hlc=hlc, columns=changed)


def apply_delta(row: Mapping[str, JsonValue] | None, delta: RowDelta) -> dict[str, JsonValue] | None:
    """Apply a delta to a plain row without conflict resolution: DELETE gives ``None``, otherwise the columns are
    written over a copy of the row in order (an INSERT onto an existing row merges)."""
    if delta.op is DeltaOp.DELETE:
        return None
    result = dict(row or {})
    for col in delta.columns:
        result[col.column] = col.value
    return result


__all__ = [
    "MAX_ID_BYTES",
    "ColumnDelta",
    "DeltaOp",
    "RowDelta",
    "apply_delta",
    "delta_id",
    "extract_delta",
    "is_valid_client_id",
    "make_delta",
    "validate_row_delta",
]
