"""Strict JSON parsing shared by the codec and the JSON API helpers.

Python's :mod:`json` is more lenient than JavaScript's ``JSON.parse`` in ways that matter on the wire; this parser
closes those gaps and adds one limit of our own:

* ``NaN``, ``Infinity`` and ``-Infinity`` literals are rejected (``JSON.parse`` rejects them);
* numbers that overflow a double (``1e999``, a 400-digit integer) are rejected instead of becoming ``inf`` or an int
  that no double can hold (our rule: every number we accept is finite, as :meth:`RowDelta.from_json` demands);
* containers nested deeper than :data:`MAX_DEPTH` are rejected (the same limit as :meth:`RowDelta.from_json`), so a
  decoded value can always be re-encoded and hashed without hitting Python's recursion limit.

Numbers mean what they mean to ``JSON.parse`` -- doubles -- so that decoding what the encoder wrote gives back an
equal value: an integer literal beyond ±2**53 is rounded to the nearest double, yet stays a Python ``int``
(``61128687197751830`` → ``61128687197751832``). Every failure is a :class:`ValueError`.
"""

from __future__ import annotations

import json
import math
from typing import NoReturn

from lakesync.core.canonical import JsonValue

_MAX_SAFE = 2**53
MAX_DEPTH = 64
"""Deepest nesting accepted: the outermost value is depth 0, a container's items one deeper."""


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def is_finite_number(value: float) -> bool:
    """Whether a number is finite as a JavaScript double (ints beyond the double range count as infinite)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _number(value: JsonValue) -> JsonValue:
    """A parsed scalar as JavaScript sees it: big ints rounded to the nearest double, non-finite numbers refused."""
    kind = type(value)
    if kind is int:
        if -_MAX_SAFE <= value <= _MAX_SAFE:
            return value
        try:
            return int(float(value))
        except OverflowError:
            raise ValueError("integer is out of range for a double") from None
    if kind is float and not math.isfinite(value):
        raise ValueError("number is out of range for a double")
    return value


# The C scanner parses; numbers are normalised afterwards (cheaper than parse_int/parse_float callbacks).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def parse(text: str) -> JsonValue:
    """Parse one JSON text strictly.

    Raises:
        ValueError: if ``text`` is not JSON, holds a non-finite number or nests deeper than :data:`MAX_DEPTH`.
    """
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if isinstance(value, dict | list):
        _normalise(value, MAX_DEPTH)
        return value
    return _number(value)


def _normalise(root: dict[str, JsonValue] | list[JsonValue], limit: int) -> None:
    """Check the depth and normalise the numbers of a freshly parsed container, in place, without recursion."""
    stack: list[tuple[dict[str, JsonValue] | list[JsonValue], int]] = [(root, 0)]
    while stack:
        container, depth = stack.pop()
        if not container:
            continue
        if depth >= limit:
            raise ValueError(f"JSON nested deeper than {limit}")
        if isinstance(container, dict):
            for key, item in container.items():  # replacing values keeps the size: safe while iterating
                if isinstance(item, dict | list):
                    stack.append((item, depth + 1))
                elif type(item) is int or type(item) is float:
                    container[key] = _number(item)
        else:
            for index, item in enumerate(container):
                if isinstance(item, dict | list):
                    stack.append((item, depth + 1))
                elif type(item) is int or type(item) is float:
                    container[index] = _number(item)
