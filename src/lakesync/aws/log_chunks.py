"""The stored form of the log on DynamoDB: one item per commit chunk, its entries in one compressed attribute.

A push commits a chunk of consecutive entries ``first .. last`` of a shard at once. They are stored as one item keyed
``(shard, seq=last)`` rather than an item each (keyed by the last, a Query ``seq > p`` starts with the chunk holding
``p + 1``): DynamoDB bills writes per started kilobyte of every
item (twice in a transaction), so ten 300-byte entries cost 20 write units as items and 2 as one compressed item.

Entry ``first + i`` has commit HLC ``c + i`` (the push gives a chunk's entries consecutive commit HLCs), so the
item keeps only ``c``, ``n`` and the last commit HLC ``chlc`` (the sort key of the ``by_commit`` index).

Each entry is stored as ``[wire JSON, after, before]`` (and its size when it is not the wire JSON's UTF-8 length):

* the effective delta's wire JSON, exactly as pulls send it;
* ``after``, the row's values after the change (``null``: the row is gone);
* ``before`` relative to ``after``, so an UPDATE stores the row once: ``null`` when the row did not exist,
  ``{"f": values}`` when it is gone after the change (a DELETE), else ``{"p": {column: old value}}`` for the columns
  whose value differs or that ``after`` lacks, and ``"m": [column, ...]`` for the columns ``after`` has and
  ``before`` lacked.

The list is JSON, compressed with zlib.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import Any

from lakesync.core.canonical import JsonValue
from lakesync.gateway.model import LogEntry, ShardId

__all__ = ["decode_entries", "encode_entries"]

_LEVEL = 6


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _same(a: JsonValue, b: JsonValue) -> bool:
    """Equal as JSON (``1``, ``1.0`` and ``true`` differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict | list):
        return _dumps(a) == _dumps(b)
    return bool(a == b)


def _before_form(before: dict[str, JsonValue] | None, after: dict[str, JsonValue] | None) -> Any:
    if before is None:
        return None
    if after is None:
        return {"f": before}
    changed = {c: v for c, v in before.items() if c not in after or not _same(v, after[c])}
    missing = [c for c in after if c not in before]
    form: dict[str, Any] = {"p": changed}
    if missing:
        form["m"] = missing
    return form


def _before(form: Any, after: dict[str, JsonValue] | None) -> dict[str, JsonValue] | None:
    if form is None:
        return None
    if "f" in form:
        return dict(form["f"])
    assert after is not None
    missing = set(form.get("m", ()))
    before = {c: v for c, v in after.items() if c not in missing}
    before.update(form["p"])
    return before


def encode_entries(entries: Sequence[LogEntry]) -> bytes:
    """The compressed form of a chunk's entries (consecutive, in sequence order)."""
    rows = []
    for entry in entries:
        wire = entry.wire_json if entry.wire_json is not None else _dumps(entry.delta.to_json())
        row = [wire, entry.after, _before_form(entry.before, entry.after)]
        if entry.size != len(wire.encode("utf-8", "surrogatepass")):
            row.append(entry.size)
        rows.append(row)
    return zlib.compress(_dumps(rows).encode("utf-8", "surrogatepass"), _LEVEL)


def decode_entries(
    shard: ShardId, first_seq: int, first_commit_hlc: int, blob: bytes, *, images: bool = True
) -> list[LogEntry]:
    """The entries of a stored chunk; with ``images=False`` their ``before``/``after`` are ``None``."""
    rows = json.loads(zlib.decompress(blob).decode("utf-8", "surrogatepass"))
    entries = []
    for i, (wire, after, before, *size) in enumerate(rows):
        entries.append(
            LogEntry(
                shard,
                first_seq + i,
                first_commit_hlc + i,
                None,
                _before(before, after) if images else None,
                after if images else None,
                size[0] if size else len(wire.encode("utf-8", "surrogatepass")),
                wire,
            )
        )
    return entries
