"""JSON text exactly as the original JavaScript LakeSync writes it.

Two forms matter on the wire:

* :func:`stable_stringify` -- keys sorted by UTF-16 code units at every level, compact. It feeds the SHA-256 of
  deltaIds and actionIds, so it must be byte-identical to ``fast-json-stable-stringify``.
  :func:`canonical_value` writes the same text, faster for the common scalar kinds (the flush's column values).
* :func:`js_stringify` -- ``JSON.stringify``: insertion-ordered keys, compact. It encodes column values, action
  params and results inside protobuf messages.

Both print numbers with ECMAScript ``Number::toString`` (:func:`js_number`): every JSON number is a double, ``30.0``
prints as ``30``, ``1e21`` as ``1e+21``, and integers beyond 2**53 are rounded to the nearest double first.
Non-finite numbers print as ``null``. Strings are escaped as ``JSON.stringify`` does (lone surrogates as ``\\udxxx``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

JsonValue = Any
"""Any value that JSON can carry: None, bool, int, float, str, list, dict[str, ...]."""

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\ud800-\udfff]')
_SURROGATE_PAIR = re.compile(r"[\ud800-\udbff][\udc00-\udfff]")


def js_number(x: float | int) -> str | None:
    """ECMAScript ``Number::toString`` for a double; ``None`` for NaN and infinities."""
    try:
        value = float(x)
    except OverflowError:  # an int beyond the double range is an infinity in JavaScript
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    mantissa, _, exp_text = repr(abs(value)).partition("e")
    exponent = int(exp_text or "0")
    int_part, _, frac_part = mantissa.partition(".")
    if frac_part == "0":
        frac_part = ""
    raw = int_part + frac_part
    digits = raw.lstrip("0")
    n = len(int_part) + exponent - (len(raw) - len(digits))
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    e = n - 1
    exp_str = ("+" if e >= 0 else "-") + str(abs(e))
    if k == 1:
        return sign + digits + "e" + exp_str
    return sign + digits[0] + "." + digits[1:] + "e" + exp_str


def _escape_char(match: re.Match[str]) -> str:
    char = match.group(0)
    return _ESCAPES.get(char) or f"\\u{ord(char):04x}"


def js_string(s: str) -> str:
    """A string literal as ``JSON.stringify`` writes it."""
    if not _NEEDS_ESCAPE.search(s):
        return '"' + s + '"'
    # Well-formed surrogate pairs (only present in strings decoded with surrogatepass) stay raw; lone ones escape.
    parts: list[str] = []
    pos = 0
    for pair in _SURROGATE_PAIR.finditer(s):
        parts.append(_NEEDS_ESCAPE.sub(_escape_char, s[pos : pair.start()]))
        parts.append(pair.group(0))
        pos = pair.end()
    parts.append(_NEEDS_ESCAPE.sub(_escape_char, s[pos:]))
    return '"' + "".join(parts) + '"'


def utf16_key(s: str) -> bytes:
    """Sort key giving JavaScript's default string order (UTF-16 code units)."""
    return s.encode("utf-16-be", "surrogatepass")


def _scalar(value: JsonValue) -> str | None:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int | float):
        return js_number(value) or "null"
    if isinstance(value, str):
        return js_string(value)
    return None


def stable_stringify(value: JsonValue) -> str:
    """``fast-json-stable-stringify``: compact JSON with object keys in UTF-16 order at every level."""
    scalar = _scalar(value)
    if scalar is not None:
        return scalar
    if isinstance(value, Mapping):
        keys = sorted(value, key=utf16_key)
        return "{" + ",".join(js_string(k) + ":" + stable_stringify(value[k]) for k in keys) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(stable_stringify(v) for v in value) + "]"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


_SAFE_INTEGER = 2**53
"""Integers within this magnitude are exact doubles: ``Number::toString`` writes their decimal digits."""


def canonical_value(value: JsonValue) -> str:
    """:func:`stable_stringify` of one value, with direct paths for the kinds nearly every column value is: a string,
    an integer within 2**53, a boolean, null (the delta log's column values)."""
    kind = type(value)
    if kind is str:
        return js_string(value)
    if kind is int:
        if -_SAFE_INTEGER <= value <= _SAFE_INTEGER:
            return str(value)
    elif value is None:
        return "null"
    elif kind is bool:
        return "true" if value else "false"
    return stable_stringify(value)


@dataclass(frozen=True, slots=True)
class RawJson:
    """JSON text that :func:`js_stringify` writes as it is (already rendered the same way, e.g. stored)."""

    text: str


def js_stringify(value: JsonValue) -> str:
    """``JSON.stringify``: compact JSON with object keys in insertion order (:class:`RawJson` written verbatim)."""
    scalar = _scalar(value)
    if scalar is not None:
        return scalar
    if isinstance(value, RawJson):
        return value.text
    if isinstance(value, Mapping):
        return "{" + ",".join(js_string(k) + ":" + js_stringify(v) for k, v in value.items()) + "}"
    if isinstance(value, Sequence):
        # A pull page is a list of stored deltas: their text goes in as it is, without the scalar checks.
        return "[" + ",".join(v.text if type(v) is RawJson else js_stringify(v) for v in value) + "]"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def js_string_coerce(value: JsonValue) -> str:
    """JavaScript ``String(value)`` for a JSON value (used by sync-rule matching)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return js_number(value) or ("NaN" if value != value else ("Infinity" if value > 0 else "-Infinity"))
    if isinstance(value, Mapping):
        return "[object Object]"
    if isinstance(value, Sequence):
        return ",".join("" if v is None else js_string_coerce(v) for v in value)
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def utf8_size(value: JsonValue) -> int:
    """Bytes of the compact UTF-8 JSON of ``value``: what storing it costs."""
    return len(js_stringify(value).encode("utf-8", "surrogatepass"))
