"""Safe coercion of merged column values to destination column types (pure).

Deltas carry JSON values that were never checked against the schema's column types, so the materialiser must cope
with anything. The rule: a value is written as its column type when it can be represented exactly (or, for text,
losslessly rendered); otherwise the column is written as SQL NULL and the miss is *counted*, never raised -- a bad
value must not fail a batch forever.

=========  ==================================================================================================
type       accepted → stored
=========  ==================================================================================================
string     str as is; a boolean as ``"true"``/``"false"``; a number in JavaScript's formatting (``1``, ``0.5``,
null       ``1e+21``); an object or array as its canonical JSON text. JSON ``null`` → NULL (not counted).
number     int or float (not bool) that fits a double → ``float``; anything else → NULL, counted. Integers beyond
           2**53 lose precision (DOUBLE), as in every database of the original.
boolean    bool → bool; anything else (``0``/``1``, ``"true"``) → NULL, counted: no guessing.
json       any JSON value → its JSON text (``null`` → SQL NULL).
=========  ==================================================================================================

A text value (string, or any string inside a JSON value, keys included) that the database cannot store is not
representable either: lone UTF-16 surrogates (not UTF-8 encodable) anywhere, and NUL (U+0000) where the dialect
forbids it (PostgreSQL's ``text`` and ``jsonb``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Final

from lakesync.core.canonical import JsonValue, js_string_coerce, stable_stringify
from lakesync.core.schema import ColumnType

__all__ = ["NOT_REPRESENTABLE", "Coerced", "coerce_value", "decode_value"]


@dataclass(frozen=True, slots=True)
class Coerced:
    """A coerced value: what to bind (``None`` = SQL NULL) and whether a non-null input was dropped."""

    value: str | float | bool | None
    dropped: bool = False


NOT_REPRESENTABLE: Final = Coerced(None, True)
_NULL: Final = Coerced(None, False)


def _text_ok(text: str, allow_nul: bool) -> bool:
    if not allow_nul and "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_ok(value: Any, allow_nul: bool, depth: int = 0) -> bool:
    if depth > 512:
        return False
    if isinstance(value, str):
        return _text_ok(value, allow_nul)
    if isinstance(value, dict):
        return all(
            _text_ok(k, allow_nul) and _json_ok(v, allow_nul, depth + 1) for k, v in value.items() if isinstance(k, str)
        ) and all(isinstance(k, str) for k in value)
    if isinstance(value, list):
        return all(_json_ok(v, allow_nul, depth + 1) for v in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, bool | int)


_json_text = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def json_text(value: JsonValue) -> str:
    """The JSON text stored for a json column (compact, non-ASCII kept as is)."""
    return _json_text(value)


def coerce_value(value: JsonValue, column_type: ColumnType, *, allow_nul: bool = True) -> Coerced:
    """Coerce one merged value to what is bound for a column of ``column_type`` (see the module docstring).

    Args:
        value: The column's merged JSON value (``None`` for JSON null or a missing column).
        column_type: The destination column's type.
        allow_nul: Whether the database stores U+0000 in text (PostgreSQL does not).

    Returns:
        The value to bind, and whether a non-null input had to be written as NULL.
    """
    if value is None:
        return _NULL
    if column_type is ColumnType.NUMBER:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return NOT_REPRESENTABLE
        try:
            number = float(value)
        except OverflowError:
            return NOT_REPRESENTABLE
        return Coerced(number) if math.isfinite(number) else NOT_REPRESENTABLE
    if column_type is ColumnType.BOOLEAN:
        return Coerced(value) if isinstance(value, bool) else NOT_REPRESENTABLE
    if column_type is ColumnType.JSON:
        try:
            text = json_text(value)
        except (TypeError, ValueError, RecursionError):
            return NOT_REPRESENTABLE
        # One check of the whole text: a lone surrogate anywhere (keys too) makes it unencodable. json.dumps
        # escapes U+0000 as \u0000; the walk tells a real NUL from a literal backslash-u0000 in a string.
        if not _text_ok(text, True) or (not allow_nul and "\\u0000" in text and not _json_ok(value, False)):
            return NOT_REPRESENTABLE
        return Coerced(text)
    # string and null columns are text.
    if isinstance(value, str):
        return Coerced(value) if _text_ok(value, allow_nul) else NOT_REPRESENTABLE
    if isinstance(value, bool | int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return NOT_REPRESENTABLE
        return Coerced(js_string_coerce(value))
    if not _json_ok(value, allow_nul):
        return NOT_REPRESENTABLE
    try:
        return Coerced(stable_stringify(value))
    except (TypeError, ValueError, RecursionError):
        return NOT_REPRESENTABLE


def decode_value(raw: Any, column_type: ColumnType) -> JsonValue:
    """Turn a value read back from a destination column into the JSON value it stands for.

    Drivers differ: booleans may come back as ``0``/``1`` (MySQL, SQLite), JSON as text (MySQL, SQLite, BigQuery) or
    already parsed (psycopg's ``jsonb``). The result is comparable with :func:`coerce_value`'s input.
    """
    if raw is None:
        return None
    if column_type is ColumnType.BOOLEAN:
        return bool(raw)
    if column_type is ColumnType.NUMBER:
        return float(raw)
    if column_type is ColumnType.JSON:
        if isinstance(raw, bytes | bytearray):
            raw = raw.decode("utf-8")
        if isinstance(raw, str):
            parsed: JsonValue = json.loads(raw)
            return parsed
        return raw
    if isinstance(raw, bytes | bytearray):
        return raw.decode("utf-8")
    return str(raw)
