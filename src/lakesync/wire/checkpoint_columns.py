"""The columnar checkpoint encoding: one chunk of a checkpoint as JSON columns, for bulk loaders.

``GET .../checkpoint?format=columns`` answers with this instead of the framed protobuf stream (which stays the default
and the original client's format). It carries the same rows in the same order, with the same filtering, but a loader
parses it with one ``json.loads`` and binds whole columns, instead of walking a message per delta and a message per
column: the local-first SDK's first sync reads it about twice as fast, and it is about 40 % of the stream's bytes.

The document (:data:`MEDIA_TYPE`)::

    {"serverHlc": "<decimal>",
     "runs": [
       {"op": "INSERT", "table": "todos", "columns": ["title", "done"],
        "rowIds": ["r1", "r2"], "clientIds": ["c1", "c1"], "hlcs": ["<decimal>", "<decimal>"],
        "values": [["first", "second"], [false, true]]},
       {"deltas": [<wire delta JSON>, ...]}
     ]}

* A **rows run** holds consecutive rows that are each exactly one write delta (``INSERT`` or ``UPDATE``) of the same
  table, op and column names (distinct): row ``i`` is the delta ``{op, table, rowId: rowIds[i], clientId:
  clientIds[i], hlc: hlcs[i], columns: [{column: columns[k], value: values[k][i]}]}``. Its deltaId is not sent: it is
  the deltaId rule applied to those fields (:func:`~lakesync.core.delta.delta_id`), as the checkpoint writer made it.
* A **deltas run** holds every other row (deletes, rows of several versions) as wire deltas, as ``pull`` sends them,
  each row's deltas together.
* Numbers are doubles as in the stream; HLCs are decimal strings as everywhere in JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

from lakesync.core.canonical import JsonValue
from lakesync.core.delta import DeltaOp, RowDelta, delta_id
from lakesync.core.errors import CodecError, ValidationError
from lakesync.core.hlc import MAX_HLC, MAX_HLC_DIGITS
from lakesync.wire import _json
from lakesync.wire.fast_checkpoint import RawDelta, to_raw
from lakesync.wire.fast_checkpoint import _as_doubles as each_as_double

__all__ = ["MEDIA_TYPE", "ColumnsChunk", "RowsRun", "decode_columns", "encode_columns"]

MEDIA_TYPE: Final = "application/x-lakesync-checkpoint-columns+json"
"""The media type of the columnar encoding."""

_WRITES: Final = {"INSERT": DeltaOp.INSERT, "UPDATE": DeltaOp.UPDATE}
_SAFE_INT: Final = 2**53
_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


@dataclass(frozen=True, slots=True)
class RowsRun:
    """Consecutive rows, each one write delta of ``table`` with the columns ``columns`` (see the module docstring).

    Attributes:
        values: One list per column, in ``columns`` order, a value per row.
    """

    op: DeltaOp
    table: str
    columns: tuple[str, ...]
    row_ids: list[str]
    client_ids: list[str]
    hlcs: list[int]
    values: list[list[JsonValue]]

    def __len__(self) -> int:
        return len(self.row_ids)

    def rows(self) -> Iterator[list[RawDelta]]:
        """The run's rows as the stream decoder gives them (each a one-delta list, its deltaId derived)."""
        op, table, names = self.op, self.table, self.columns
        for i, (row_id, client_id, hlc) in enumerate(zip(self.row_ids, self.client_ids, self.hlcs, strict=True)):
            values = [column[i] for column in self.values]
            cells = [{"column": n, "value": v} for n, v in zip(names, values, strict=True)]
            did = delta_id(client_id, hlc, table, row_id, cells)
            yield [(op, table, row_id, client_id, hlc, did, names, values)]


@dataclass(frozen=True, slots=True)
class ColumnsChunk:
    """A decoded document: its runs in stream order (a :class:`RowsRun`, or rows of deltas) and ``serverHlc``."""

    server_hlc: int
    runs: list[RowsRun | list[list[RawDelta]]]

    def rows(self) -> Iterator[list[RawDelta]]:
        """Every row, in stream order, as its deltas."""
        for run in self.runs:
            yield from run.rows() if isinstance(run, RowsRun) else run

    def row_count(self) -> int:
        """How many rows the document holds."""
        return sum(len(run) for run in self.runs)


def encode_columns(rows: Iterable[list[RawDelta]], server_hlc: int) -> str:
    """The document of ``rows`` (each a row's deltas, as :mod:`lakesync.wire.fast_checkpoint` decodes them), as
    ASCII JSON text."""
    runs: list[dict[str, Any]] = []
    key: tuple[Any, ...] | None = None  # the current rows run's (op, table, names); None in a deltas run
    run: dict[str, Any] = {}
    for row in rows:
        first = row[0]
        op, table, _row_id, _client, _hlc, _did, names, _values = first
        if len(row) == 1 and op is not DeltaOp.DELETE and len(set(names)) == len(names):
            if key != (op, table, names):
                key = (op, table, names)
                run = {
                    "op": op.value,
                    "table": table,
                    "columns": list(names),
                    "rowIds": [],
                    "clientIds": [],
                    "hlcs": [],
                    "values": [[] for _ in names],
                }
                runs.append(run)
            run["rowIds"].append(first[2])
            run["clientIds"].append(first[3])
            run["hlcs"].append(str(first[4]))
            for column, value in zip(run["values"], first[7], strict=True):
                column.append(value)
            continue
        if key is not None or not runs:
            key = None
            run = {"deltas": []}
            runs.append(run)
        run["deltas"].extend(_wire(d) for d in row)
    text: str = _dumps({"serverHlc": str(server_hlc), "runs": runs})
    return text


def _wire(raw: RawDelta) -> dict[str, Any]:
    op, table, row_id, client_id, hlc, did, names, values = raw
    return {
        "op": op.value,
        "table": table,
        "rowId": row_id,
        "clientId": client_id,
        "columns": [{"column": n, "value": v} for n, v in zip(names, values, strict=True)],
        "hlc": str(hlc),
        "deltaId": did,
    }


def decode_columns(body: bytes | str) -> ColumnsChunk:
    """Parse and check a document.

    Numbers are read as ``JSON.parse`` reads them (integers beyond 2**53 rounded to doubles, non-finite refused).

    Raises:
        CodecError: not such a document (the message says where).
    """
    try:
        doc = _json._DECODER.decode(body if isinstance(body, str) else body.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise CodecError(f"Columnar checkpoint is not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        raise CodecError("Columnar checkpoint must be an object with a 'runs' array")
    server_hlc = _hlc(doc.get("serverHlc"), "serverHlc")
    runs: list[RowsRun | list[list[RawDelta]]] = []
    for index, run in enumerate(doc["runs"]):
        where = f"runs[{index}]"
        if not isinstance(run, dict):
            raise CodecError(f"{where} must be an object")
        runs.append(_deltas_run(run, where) if "deltas" in run else _rows_run(run, where))
    return ColumnsChunk(server_hlc, runs)


def _hlc(value: object, where: str) -> int:
    if not (isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= MAX_HLC_DIGITS):
        raise CodecError(f"{where} must be a decimal string")
    stamp = int(value)
    if stamp > MAX_HLC:
        raise CodecError(f"{where} is out of range for a 64-bit HLC")
    return stamp


def _deltas_run(run: dict[str, Any], where: str) -> list[list[RawDelta]]:
    deltas = run["deltas"]
    if not isinstance(deltas, list) or not deltas:
        raise CodecError(f"{where}.deltas must be a non-empty array")
    rows: list[list[RawDelta]] = []
    for i, obj in enumerate(deltas):
        try:
            _values_as_doubles(obj)
            d = RowDelta.from_json(obj, where=f"{where}.deltas[{i}]")
        except (ValueError, ValidationError) as exc:
            raise CodecError(f"{where}.deltas[{i}]: {exc}") from None
        raw = to_raw(d)
        if rows and rows[-1][0][1] == d.table and rows[-1][0][2] == d.row_id:
            rows[-1].append(raw)
        else:
            rows.append([raw])
    return rows


def _values_as_doubles(obj: object) -> None:
    """A wire delta's column values as ``JSON.parse`` reads them, in place (shapes are checked by ``from_json``)."""
    columns = obj.get("columns") if isinstance(obj, dict) else None
    if not isinstance(columns, list):
        return
    cells = [c for c in columns if isinstance(c, dict) and "value" in c]
    values = [c["value"] for c in cells]
    each_as_double(values)
    for cell, value in zip(cells, values, strict=True):
        cell["value"] = value


def _rows_run(run: dict[str, Any], where: str) -> RowsRun:
    op = _WRITES.get(run.get("op"))  # type: ignore[arg-type]
    if op is None:
        raise CodecError(f"{where}.op must be INSERT or UPDATE")
    table, columns = run.get("table"), run.get("columns")
    if not isinstance(table, str) or not table:
        raise CodecError(f"{where}.table must be a non-empty string")
    if not _strings(columns) or "" in columns or len(set(columns)) != len(columns):
        raise CodecError(f"{where}.columns must be distinct non-empty strings")
    row_ids, client_ids, hlcs, values = run.get("rowIds"), run.get("clientIds"), run.get("hlcs"), run.get("values")
    if not _strings(row_ids) or not row_ids or "" in row_ids:
        raise CodecError(f"{where}.rowIds must be a non-empty array of non-empty strings")
    count = len(row_ids)
    if not _strings(client_ids) or len(client_ids) != count or "" in client_ids:
        raise CodecError(f"{where}.clientIds must hold a non-empty string per row")
    if not _strings(hlcs) or len(hlcs) != count:
        raise CodecError(f"{where}.hlcs must hold a decimal string per row")
    digits = "".join(hlcs)  # every character checked in C at once; then no empty string and none too long
    if not (digits.isascii() and digits.isdigit()) or min(map(len, hlcs)) == 0 or max(map(len, hlcs)) > MAX_HLC_DIGITS:
        raise CodecError(f"{where}.hlcs must be decimal strings")
    stamps = list(map(int, hlcs))
    if max(stamps) > MAX_HLC:
        raise CodecError(f"{where}.hlcs: out of range for a 64-bit HLC")
    if not isinstance(values, list) or len(values) != len(columns):
        raise CodecError(f"{where}.values must hold one array per column")
    for k, column in enumerate(values):
        if not isinstance(column, list) or len(column) != count:
            raise CodecError(f"{where}.values[{k}] must hold a value per row")
        try:
            _as_doubles(column)
        except ValueError as exc:
            raise CodecError(f"{where}.values[{k}]: {exc}") from None
    return RowsRun(op, table, tuple(columns), row_ids, client_ids, stamps, values)


def _strings(items: object) -> TypeGuard[list[str]]:
    return isinstance(items, list) and set(map(type, items)) <= {str}


def _as_doubles(column: list[Any]) -> None:
    """The values of one column as ``JSON.parse`` reads them, in place (checked in bulk when they are scalars)."""
    types = set(map(type, column))
    if int in types and types <= {int, str, bool, type(None)}:
        ints = [v for v in column if type(v) is int]
        if -_SAFE_INT <= min(ints) and max(ints) <= _SAFE_INT:
            return
    elif float in types and types <= {int, float, str, bool, type(None)}:
        if all(map(math.isfinite, (v for v in column if type(v) is float))) and all(
            -_SAFE_INT <= v <= _SAFE_INT for v in column if type(v) is int
        ):
            return
    elif not types & {int, float, dict, list}:
        return
    each_as_double(column)
