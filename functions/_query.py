"""Pull query parameters, parsed as the original's ``parsePullParams`` does (reference §12.4).

* ``clientId`` is required: missing or empty → 400 ``Missing required query params: since, clientId``. *Ours:*
  without ``since`` and ``cursor`` the pull starts a cursor stream from the beginning (the original answered 400).
* ``since`` is read with ECMAScript ``StringToBigInt`` (``" 42 "``, ``"0x10"``, ``"-1"`` are accepted; ``"1.5"``,
  ``"1e3"``, ``"abc"`` → 400 ``Invalid 'since' parameter — must be a decimal integer``). *Ours:* the value is then
  clamped to the HLC range ``[0, 2**64 - 1]``, which selects the same deltas.
* ``limit`` absent or empty → 100; else JavaScript ``parseInt(limit, 10)`` (a prefix parse: ``"10abc"`` → 10,
  ``"1.9"`` → 1, ``"0x10"`` → 0); NaN or < 1 → 400 ``Invalid 'limit' parameter — must be a positive integer``;
  then clamped to 10,000.
* ``source``: empty counts as absent. ``cursor`` (*ours*): the opaque position of an earlier response; present but
  empty without ``since`` starts a cursor stream from the beginning (empty with ``since`` counts as absent).

The messages contain an em dash (U+2014).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from lakesync.core.errors import ValidationError
from lakesync.core.hlc import MAX_HLC
from lakesync.wire.jsonapi import string_to_bigint

DEFAULT_LIMIT: Final = 100
MAX_LIMIT: Final = 10_000
_JS_WHITESPACE: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_INT_PREFIX: Final = re.compile(r"([+-]?)0*([0-9]+)")


@dataclass(frozen=True, slots=True)
class PullParams:
    """A validated pull request."""

    client_id: str
    since: int | None
    limit: int
    source: str | None = None
    cursor: str | None = None


def js_parse_int(text: str) -> int | None:
    """JavaScript ``parseInt(text, 10)``; ``None`` for NaN. Values beyond 18 digits saturate (only compared)."""
    found = _INT_PREFIX.match(text.lstrip(_JS_WHITESPACE))
    if found is None:
        return None
    sign, digits = found.groups()
    value = int(digits) if len(digits) <= 18 else 10**18
    return -value if sign == "-" else value


def parse_pull_params(query: Mapping[str, str]) -> PullParams:
    """Validate the query of ``GET /v1/sync/{gw}/pull``.

    Raises:
        ValidationError: with the original's messages (see the module docstring).
    """
    client_id = query.get("clientId") or ""
    since_text = query.get("since") or None
    cursor = query.get("cursor")
    if cursor == "" and since_text is not None:
        cursor = None
    if not client_id:
        raise ValidationError("Missing required query params: since, clientId")
    if since_text is None and cursor is None:
        cursor = ""
    since: int | None = None
    if since_text is not None:
        parsed = string_to_bigint(since_text)
        if parsed is None:
            raise ValidationError("Invalid 'since' parameter — must be a decimal integer")
        since = min(max(parsed, 0), MAX_HLC)
    limit = DEFAULT_LIMIT
    limit_text = query.get("limit")
    if limit_text:
        value = js_parse_int(limit_text)
        if value is None or value < 1:
            raise ValidationError("Invalid 'limit' parameter — must be a positive integer")
        limit = min(value, MAX_LIMIT)
    return PullParams(client_id, since, limit, query.get("source") or None, cursor)
