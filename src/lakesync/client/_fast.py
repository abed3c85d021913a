"""Fast paths of the local store's bulk work: the same bytes and states as the generic code, in less Python.

* :func:`json_text` renders a JSON value as ``JSON.stringify`` and ``fast-json-stable-stringify`` both do for
  scalars (strings without lone surrogates, booleans, null, integers within ±2**53); anything else goes through
  :func:`~lakesync.core.canonical.stable_stringify`. So the deltaId of :func:`insert_delta` is byte-identical to
  :func:`~lakesync.core.delta.delta_id` (the canonical text is assembled in its fixed key order: ``clientId``,
  ``columns``, ``hlc``, ``rowId``, ``table``; ``column`` before ``value``).
* :func:`write_state_json` is the JSON of ``merge(None, delta).state`` for a write delta with distinct columns: every
  column at the delta's version, no tombstone, written = the version (the state :func:`~lakesync.core.merge.merge`
  derives, in :func:`~lakesync.core.merge.state_to_json`'s encoding).
* :func:`decode_checkpoint` reads checkpoint frames straight from the protobuf messages and parses every value of a
  frame in one strict JSON parse; :func:`checkpoint_state_json` writes a checkpoint row's state without a merge when
  the row is a single delta (the common case: a row written once). The generic codec builds a ``RowDelta`` and parses
  each value on its own: 1.2 s per 100,000 rows against 0.5 s here.

Tests (tests/client/test_fast_paths.py) check each against the generic code on generated inputs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

from lakesync.core.canonical import JsonValue, stable_stringify
from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta
from lakesync.core.merge import fold, state_to_json
from lakesync.wire import _json
from lakesync.wire._pb import lakesync_pb2 as _pb  # private to lakesync.wire; read-only use, see the docstring
from lakesync.wire.codec import decode_sync_response
from lakesync.wire.framing import iter_checkpoint

_SAFE_INT: Final = 2**53
_encode_string = json.encoder.encode_basestring
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_LOADS = json.JSONDecoder(parse_constant=_json._reject_constant).decode
_OPS: Final = {
    _pb.DELTA_OP_INSERT: DeltaOp.INSERT,
    _pb.DELTA_OP_UPDATE: DeltaOp.UPDATE,
    _pb.DELTA_OP_DELETE: DeltaOp.DELETE,
}


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


# -- checkpoints ------------------------------------------------------------------------------------------------------
RawDelta = tuple[DeltaOp, str, str, str, int, str, tuple[str, ...], list[JsonValue]]
"""``(op, table, row_id, client_id, hlc, delta_id, column names, values)``."""


def decode_checkpoint(frames: Iterable[bytes]) -> Iterator[list[RawDelta]]:
    """Every row of a checkpoint (its bodies as served) as its deltas, in stream order; a row's deltas are
    consecutive (:func:`~lakesync.core.checkpoint.group_rows`).

    Raises:
        CodecError: a truncated stream or an undecodable frame.
    """
    row: list[RawDelta] = []
    for body in frames:
        for payload in iter_checkpoint(body):
            for delta in _decode_frame(payload):
                if row and (row[-1][1] != delta[1] or row[-1][2] != delta[2]):
                    yield row
                    row = []
                row.append(delta)
    if row:
        yield row


def _decode_frame(payload: bytes) -> list[RawDelta]:
    try:
        msg = _pb.SyncResponse.FromString(payload)
        shapes: list[tuple[DeltaOp, str, str, str, int, str, tuple[str, ...]]] = []
        raw_values: list[bytes] = []
        for d in msg.deltas:
            column_names: list[str] = []
            for c in d.columns:
                column_names.append(c.column)
                raw_values.append(c.value)
            shapes.append((_OPS[d.op], d.table, d.row_id, d.client_id, d.hlc, d.delta_id, tuple(column_names)))
        # One C parse of every value of the frame, then the strict codec's number rules (doubles, finite) applied in
        # one pass instead of a walk per value.
        values = _LOADS((b"[" + b",".join(raw_values) + b"]").decode("utf-8")) if raw_values else []
        _as_doubles(values)
        if not isinstance(values, list) or len(values) != len(raw_values):
            raise ValueError("value count")
    except Exception:  # any oddity (a BOM, depth at the limit, a bad op): the generic, strict codec
        return [_raw(d) for d in decode_sync_response(payload).deltas]
    out: list[RawDelta] = []
    at = 0
    for op, table, row_id, client_id, hlc, delta_id, names in shapes:
        n = len(names)
        out.append((op, table, row_id, client_id, hlc, delta_id, names, values[at : at + n]))
        at += n
    return out


def _as_doubles(values: list[Any]) -> None:
    """Numbers as ``JSON.parse`` reads them (big ints rounded to doubles; non-finite refused), in place."""
    for index, value in enumerate(values):
        kind = type(value)
        if kind is int:
            if not -_SAFE_INT <= value <= _SAFE_INT:
                values[index] = _json._number(value)
        elif kind is float:
            if not math.isfinite(value):
                raise ValueError("number is out of range for a double")
        elif kind is dict or kind is list:
            _json._normalise(value, _json.MAX_DEPTH - 1)


def _raw(d: RowDelta) -> RawDelta:
    return (
        d.op,
        d.table,
        d.row_id,
        d.client_id,
        d.hlc,
        d.delta_id,
        tuple(c.column for c in d.columns),
        [c.value for c in d.columns],
    )


def to_row_delta(raw: RawDelta) -> RowDelta:
    """The :class:`RowDelta` of a decoded checkpoint delta."""
    op, table, row_id, client_id, hlc, delta_id, names, values = raw
    columns = tuple(ColumnDelta(n, v) for n, v in zip(names, values, strict=True))
    return RowDelta(op, table, row_id, client_id, columns, hlc, delta_id)


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
