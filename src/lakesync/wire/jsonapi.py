"""The JSON conventions of the HTTP API: HLCs travel as decimal strings.

JavaScript has two integer types, ``number`` (a double) and ``bigint``; the original LakeSync keeps every HLC in a
``bigint`` and writes it to JSON as a decimal string. Python has one ``int``, so the distinction is carried by a marker
type: :class:`BigInt`, an ``int`` subclass. The rules:

* :func:`revive` (``bigintReviver``): for **any** object key at any depth that ends in ``hlc`` (ASCII,
  case-insensitive: ``/hlc$/i``) and whose value is a string, the value becomes a :class:`BigInt` if
  :func:`string_to_bigint` accepts it; otherwise it stays a string. Numbers and non-string values are left alone.
* :func:`replace` / :func:`dumps` (``bigintReplacer``): every :class:`BigInt` becomes its decimal string; plain ints
  stay JSON numbers. Domain objects' ``to_json`` already write HLCs as strings, so they need no marker.
* :func:`string_to_bigint` is ECMAScript ``StringToBigInt``: JavaScript whitespace trimmed, ``""`` → 0, decimal
  digits with an optional sign, or ``0x``/``0o``/``0b`` (either case) digits without a sign; no ``.``, exponent or
  ``_``. It parses the pull ``since`` parameter too.

:class:`BigInt` behaves as an ``int`` everywhere (HLC arithmetic, comparisons, protobuf fields); arithmetic on it yields
a plain ``int``. Note that :func:`json.dumps` writes it as a number: use :func:`dumps` for API bodies.

Request bodies need not be revived: :meth:`RowDelta.from_json` and the message types read HLCs from their strings.
Reviving rewrites strings *inside* column values too (``{"lastHlc": " 7"}`` → ``"7"`` on the way back), a quirk of
the original that our handlers avoid by parsing bodies with :func:`loads` ``(revive=False)``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from lakesync.core.canonical import JsonValue, js_stringify
from lakesync.core.errors import CodecError
from lakesync.wire import _json


class BigInt(int):
    """An int that JSON carries as a decimal string (a JavaScript ``bigint``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"BigInt({int(self)})"


# ECMAScript WhiteSpace and LineTerminator code points (StrWhiteSpaceChar): TAB, VT, FF, ZWNBSP, the Unicode "Zs"
# space separators, LF, CR, LS and PS. Python's str.strip() uses a different set (it strips U+001C-U+001F and U+0085,
# keeps U+FEFF), so the set is spelled out.
_JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_INTEGER_LITERAL = re.compile(r"[+-]?[0-9]+|0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+")
_RADIX = {"x": 16, "o": 8, "b": 2}


def string_to_bigint(text: str) -> int | None:
    """ECMAScript ``StringToBigInt(text)``: the integer, or ``None`` where ``BigInt(text)`` throws.

    Examples: ``" 42 "`` → 42, ``""`` → 0, ``"-5"`` → -5, ``"0x10"`` → 16; ``"1.5"``, ``"1e3"``, ``"-0x1"``,
    ``"1_000"`` → ``None``. One divergence: decimal literals longer than Python's int conversion limit (4300 digits)
    give ``None`` where JavaScript would build a huge bigint.
    """
    literal = text.strip(_JS_WHITESPACE)
    if not literal:
        return 0
    if _INTEGER_LITERAL.fullmatch(literal) is None:
        return None
    if len(literal) > 2 and literal[0] == "0" and literal[1] in "xXoObB":
        return int(literal[2:], _RADIX[literal[1].lower()])
    try:
        return int(literal, 10)
    except ValueError:  # beyond Python's int-from-decimal-string limit (4300 digits): certainly no HLC
        return None


def is_hlc_key(key: str) -> bool:
    """Whether an object key matches ``/hlc$/i`` (only ASCII letters match, as in JavaScript)."""
    tail = key[-3:]
    return tail.isascii() and tail.lower() == "hlc"


def revive(value: JsonValue) -> JsonValue:
    """A copy of ``value`` with HLC-keyed strings turned into :class:`BigInt` (the reviver of the API)."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(item, str) and is_hlc_key(key):
                number = string_to_bigint(item)
                out[key] = item if number is None else BigInt(number)
            else:
                out[key] = revive(item)
        return out
    if isinstance(value, list | tuple):
        return [revive(item) for item in value]
    return value


def replace(value: JsonValue) -> JsonValue:
    """A copy of ``value`` with every :class:`BigInt` turned into its decimal string (the replacer of the API)."""
    if isinstance(value, BigInt):
        return str(int(value))
    if isinstance(value, Mapping):
        return {key: replace(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [replace(item) for item in value]
    return value


def dumps(value: JsonValue) -> str:
    """``JSON.stringify(value, bigintReplacer)``: compact JSON, keys in insertion order, BigInts as strings.

    Raises:
        TypeError: if ``value`` holds something JSON cannot carry.
    """
    return js_stringify(replace(value))


def loads(text: str | bytes, *, revive_hlcs: bool = True) -> JsonValue:
    """Parse a request body like ``JSON.parse(text, bigintReviver)`` (or without the reviver).

    The parse is strict (no ``NaN``/``Infinity``, finite numbers only, bounded nesting; see ``lakesync.wire._json``).

    Raises:
        CodecError: ``Invalid JSON body`` if ``text`` is not UTF-8 JSON.
    """
    try:
        source = text.decode("utf-8") if isinstance(text, bytes) else text
        value = _json.parse(source)
    except ValueError as exc:
        raise CodecError("Invalid JSON body") from exc
    return revive(value) if revive_hlcs else value


__all__ = ["BigInt", "dumps", "is_hlc_key", "loads", "replace", "revive", "string_to_bigint"]
