"""Database values as a connector sees them: as JSON (row values), hashed (a row's version) and as cursors (stored in
the position, moved back by the look-back window, read as epoch milliseconds)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import hashlib
import json
import uuid
from collections.abc import Mapping
from typing import Any

from lakesync.core.canonical import JsonValue

__all__ = ["content_hash", "cursor_ms", "decode_cursor", "encode_cursor", "look_back", "to_json_value"]


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
