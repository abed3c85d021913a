"""Fast paths of the local store's bulk work: the same bytes and states as the generic code, in less Python.

* :func:`json_text` renders a JSON value as ``JSON.stringify`` and ``fast-json-stable-stringify`` both do for
  scalars (strings without lone surrogates, booleans, null, integers within ±2**53); anything else goes through
  :func:`~lakesync.core.canonical.stable_stringify`. So the deltaId of :func:`insert_delta` is byte-identical to
  :func:`~lakesync.core.delta.delta_id` (the canonical text is assembled in its fixed key order: ``clientId``,
  ``columns``, ``hlc``, ``rowId``, ``table``; ``column`` before ``value``).
* :func:`write_state_json` is the JSON of ``merge(None, delta).state`` for a write delta with distinct columns: every
  column at the delta's version, no tombstone, written = the version (the state :func:`~lakesync.core.merge.merge`
  derives, in :func:`~lakesync.core.merge.state_to_json`'s encoding).
* :func:`checkpoint_state_json` writes a checkpoint row's state (rows as
  :func:`lakesync.wire.fast_checkpoint.decode_checkpoint` yields them) without a merge when the row is a single delta
  (the common case: a row written once).

Tests (tests/client/test_client_units.py) check each against the generic code on generated inputs.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from typing import Any, Final

from lakesync.core.canonical import JsonValue, stable_stringify
from lakesync.core.delta import DeltaOp
from lakesync.core.merge import fold, state_to_json
from lakesync.wire.fast_checkpoint import RawDelta, to_row_delta

_SAFE_INT: Final = 2**53
_encode_string = json.encoder.encode_basestring
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def json_text(value: JsonValue) -> str:
    """The canonical JSON text of ``value`` (see the module docstring)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    kind = type(value)
    if kind is str:
        text: str = _encode_string(value)
        # A lone surrogate: json escapes nothing, JSON.stringify escapes it; let the canonical code decide.
        if not text.isascii() and any("\ud800" <= ch <= "\udfff" for ch in text):
            return stable_stringify(value)
        return text
    if isinstance(value, int) and kind is int and -_SAFE_INT < value < _SAFE_INT:
        return str(value)
    return stable_stringify(value)


def state_json_text(value: JsonValue) -> str:
    """JSON text that ``json.loads`` reads back as ``value`` (for stored states; not canonical)."""
    kind = type(value)
    if kind is str:
        text: str = _encode_string(value)
        return text
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if kind is int:
        return str(value)
    if kind is float:
        return repr(value)
    return _dumps(value)


def insert_delta(
    op: str, table: str, row_id: str, client_id: str, hlc: int, values: dict[str, JsonValue]
) -> tuple[str, str, list[tuple[str, str]]]:
    """A write delta's wire JSON and deltaId, and its ``(name JSON, value JSON for the state)`` pairs, built as text.

    Returns:
        ``(delta wire JSON, deltaId, pairs)``.
    """
    wire_pairs = []
    state_pairs = []
    for name, value in values.items():
        name_json = _encode_string(name)
        canonical = json_text(value)
        wire_pairs.append(f'{{"column":{name_json},"value":{canonical}}}')
        # The canonical text of a float may read back as another number (1e16 → an int); the state keeps the value.
        kind = type(value)
        exact = canonical if kind in _EXACT_TYPES or (kind is int and canonical.lstrip("-").isdigit()) else None
        if exact is None or (kind is int and len(canonical) > 15):
            exact = state_json_text(value)
        state_pairs.append((name_json, exact))
    columns = ",".join(wire_pairs)
    client = _encode_string(client_id)
    row = _encode_string(row_id)
    tbl = _encode_string(table)
    canonical_delta = f'{{"clientId":{client},"columns":[{columns}],"hlc":"{hlc}","rowId":{row},"table":{tbl}}}'
    did = hashlib.sha256(canonical_delta.encode("utf-8")).hexdigest()
    wire = (
        f'{{"op":"{op}","table":{tbl},"rowId":{row},"clientId":{client},"columns":[{columns}],'
        f'"hlc":"{hlc}","deltaId":"{did}"}}'
    )
    return wire, did, state_pairs


_EXACT_TYPES: Final = frozenset({str, bool, type(None)})


def write_state_json(pairs: Sequence[tuple[str, str]], hlc: int, client_json: str) -> str:
    """``state_to_json(merge(None, delta).state)`` as text, for a write delta with distinct columns ``pairs``
    (``(name JSON, value JSON)``) at ``(hlc, client)``; ``client_json`` is the client id's JSON string."""
    version = f'"{hlc}",{client_json}'
    columns = ",".join(f"{n}:[{v},{version}]" for n, v in pairs)
    return f'{{"c":{{{columns}}},"t":null,"w":[{version}]}}'


@functools.lru_cache(maxsize=4096)
def _name_json(name: str) -> str:
    """The JSON string of a column name or client id (few distinct ones: encoded once)."""
    text: str = _encode_string(name)
    return text


def checkpoint_state_json(row: list[RawDelta]) -> tuple[str, dict[str, JsonValue] | None]:
    """A checkpoint row's state JSON and live values (``None``: the row is deleted), without a merge when the row is
    one delta with distinct columns, else by :func:`~lakesync.core.merge.fold`."""
    if len(row) == 1:
        op, _table, _row_id, client_id, hlc, _did, names, values = row[0]
        if op is DeltaOp.DELETE:
            return f'{{"c":{{}},"t":["{hlc}",{_name_json(client_id)}],"w":null}}', None
        live = dict(zip(names, values, strict=True))
        if len(live) == len(names):
            version = f'"{hlc}",{_name_json(client_id)}'
            columns = ",".join([f"{_name_json(n)}:[{state_json_text(v)},{version}]" for n, v in live.items()])
            return f'{{"c":{{{columns}}},"t":null,"w":[{version}]}}', live
    state = fold(to_row_delta(d) for d in row)
    assert state is not None
    return _dumps(state_to_json(state)), state.values()


def encode_state(state_json: dict[str, Any]) -> str:
    """Compact JSON text of a state's JSON document."""
    return _dumps(state_json)
