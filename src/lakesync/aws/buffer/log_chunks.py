"""The stored form of the log on DynamoDB: one item per commit chunk, its entries in one compressed attribute.

A push commits a chunk of consecutive entries ``first .. last`` of a shard at once. They are stored as one item keyed
``(shard, seq=FIRST_KEYED + first)`` rather than an item each: DynamoDB bills writes per started kilobyte of every
item, so ten 300-byte entries cost 10 write units as items and 1 as one compressed item. Keyed by its first sequence,
a chunk is committed by a conditional put alone: two writers that read the same log end claim the same key, so the
log stays one chain without a transaction. :data:`FIRST_KEYED` keeps the keys far above any sequence.

Entry ``first + i`` has commit HLC ``c + i`` (the push gives a chunk's entries consecutive commit HLCs), so every
item keeps only ``c`` and ``n``. Only *commit marks* also carry their last commit HLC ``chlc``, the sort key of the
sparse ``by_commit`` index (an item without it has no index entry, which saves a transaction's two write units per
chunk): a chunk is a mark when it holds a multiple of :data:`COMMIT_MARK_EVERY` (:func:`is_commit_mark`), so the
index has an entry about once per that many entries. Readers find a position by commit HLC from the last mark at or
below it and walk the chunks after it on the table. They are correct whichever chunks carry ``chlc`` (a log written
before marks has it on every chunk; TTL deletes old chunks): commit HLCs grow with the sequence, so a mark with
``chlc <= h`` shows every entry up to its sequence has a commit HLC at or below ``h``. Only how far they walk depends
on the marks.

Each entry is stored as ``[wire JSON, after, before]`` (and its size when it is not the wire JSON's UTF-8 length):

* the effective delta's wire JSON, exactly as pulls send it;
* ``after``, the row's values after the change (``null``: the row is gone);
* ``before`` relative to ``after``, so an UPDATE stores the row once: ``null`` when the row did not exist,
  ``{"f": values}`` when it is gone after the change (a DELETE), else ``{"p": {column: old value}}`` for the columns
  whose value differs or that ``after`` lacks, and ``"m": [column, ...]`` for the columns ``after`` has and
  ``before`` lacked.

Two layouts of the compressed text, told apart by its first character (both are read and written):

* **1**: the list of entries as JSON: ``[[wire, after, before, size?], ...]``.
* **2**: a header line, then two lines per entry: its wire JSON, then its images ``[after, before]`` as JSON. The
  header is ``2``, or ``2:`` and every entry's size, comma-separated, when one of them is not its wire JSON's UTF-8
  length. A pull without sync rules (the images serve only them) splits the lines and parses nothing: the wire JSON
  is sent as it is stored. Each entry's images follow its wire JSON, whose values they mostly repeat, so they
  compress against it (zlib looks back 32 KiB). Wire JSON is compact (a newline in it is escaped), so a line holds
  one. Layout 2 is what chunks are written in, except a chunk whose wire JSON would hold a raw newline (a line could
  not hold it): that one is written in layout 1.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any

from lakesync.core.canonical import JsonValue
from lakesync.core.log import LogEntry, RowImages, ShardId, stored_entry

__all__ = [
    "COMMIT_MARK_EVERY",
    "FIRST_KEYED",
    "chunk_first",
    "chunk_key",
    "decode_entries",
    "encode_entries",
    "is_commit_mark",
]

_LEVEL = 6

COMMIT_MARK_EVERY = 64
"""Entries per commit mark: the chunk holding each multiple of it carries ``chlc`` (an entry of ``by_commit``)."""


FIRST_KEYED = 10**15
"""The sort key of a chunk is ``seq = FIRST_KEYED + first``. Sequences stay far below it."""


def chunk_key(first_seq: int) -> int:
    """The sort key ``seq`` of the chunk whose first entry is ``first_seq``."""
    return FIRST_KEYED + first_seq


def chunk_first(key: int) -> int:
    """The first sequence of the chunk keyed ``key``."""
    return key - FIRST_KEYED


def is_commit_mark(first_seq: int, last_seq: int, every: int = COMMIT_MARK_EVERY) -> bool:
    """Whether the chunk of entries ``first_seq .. last_seq`` is a commit mark: it holds a multiple of ``every``.

    Each sequence is in one chunk, so entries ``m * every`` are each in a mark, and two marks in a row are at most
    ``every`` plus one chunk's entries apart.
    """
    return last_seq // every > (first_seq - 1) // every


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


def _utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def encode_entries(entries: Sequence[LogEntry]) -> bytes:
    """The compressed form of a chunk's entries (consecutive, in sequence order): layout 2, or layout 1 when a wire
    JSON holds a raw newline."""
    wires = [entry.wire_json if entry.wire_json is not None else _dumps(entry.delta.to_json()) for entry in entries]
    return _encode(entries, wires, 1 if any("\n" in wire for wire in wires) else 2)


def _encode(entries: Sequence[LogEntry], wires: Sequence[str], layout: int) -> bytes:
    """The compressed text of the entries, whose wire JSON is ``wires``, in ``layout`` (1 or 2)."""
    images = [[entry.after, _before_form(entry.before, entry.after)] for entry in entries]
    sized = [entry.size == _utf8_length(wire) for entry, wire in zip(entries, wires, strict=True)]
    if layout == 2:
        header = "2" if all(sized) else "2:" + ",".join(str(entry.size) for entry in entries)
        lines = [header]
        for wire, image in zip(wires, images, strict=True):
            lines += (wire, _dumps(image))
        text = "\n".join(lines)
    else:
        rows = [
            [wire, *image] if plain else [wire, *image, entry.size]
            for entry, wire, image, plain in zip(entries, wires, images, sized, strict=True)
        ]
        text = _dumps(rows)
    return zlib.compress(text.encode("utf-8", "surrogatepass"), _LEVEL)


def decode_entries(
    shard: ShardId,
    first_seq: int,
    first_commit_hlc: int,
    blob: bytes,
    *,
    images: bool = True,
    start: int = 0,
    stop: int | None = None,
) -> list[LogEntry]:
    """The entries of a stored chunk (either layout); with ``images=False`` their ``before``/``after`` are ``None``.

    ``start``/``stop``: only the entries at those indexes, as a slice of them; a layout-2 chunk is then inflated no
    further than the last entry wanted (a page that ends at the start of a chunk reads little of it).
    """
    if stop is not None and stop <= start:
        return []
    text = _inflate(blob, stop)
    if text.startswith("["):
        rows = json.loads(text)[start:stop]
        return _decode_list(shard, first_seq + start, first_commit_hlc + start, rows, images)
    header, *lines = text.split("\n")
    if header == "2":
        sizes = None
    elif header.startswith("2:"):
        sizes = [int(size) for size in header[2:].split(",")]
    else:
        raise ValueError(f"not a chunk layout this code reads: {header[:20]!r}")
    wires, image_lines = lines[::2], lines[1::2]
    if stop is None or len(wires) < stop or len(image_lines) < stop:
        # Whole (or shorter than asked): every line is there, and agrees with the header.
        if len(image_lines) != len(wires) or (sizes is not None and len(sizes) != len(wires)):
            raise ValueError("a chunk's header and lines disagree on its entries")
    end = len(wires) if stop is None else min(stop, len(wires))
    wires = wires[start:end]
    load = _ImageLines(image_lines[:end]) if images else None
    seq, hlc = first_seq + start, first_commit_hlc + start
    if sizes is not None:
        lengths: Iterable[int] = sizes[start:end]
    elif text.isascii():  # then every size is its wire JSON's length
        lengths = map(len, wires)
    else:
        lengths = map(_utf8_length, wires)
    loaders: Iterable[tuple[_ImageLines, int] | None] = (
        zip(repeat(load), range(start, end)) if load is not None else repeat(None)
    )
    count = len(wires)
    # One C-level loop over the columns: a page decodes a thousand entries.
    return list(
        map(
            stored_entry,
            repeat(shard, count),
            range(seq, seq + count),
            range(hlc, hlc + count),
            lengths,
            wires,
            loaders,
        )
    )


_INFLATE_STEP = 16 * 1024


def _inflate(blob: bytes, entries: int | None) -> str:
    """A chunk's text: whole, or (``entries``) at least as far as that many entries of a layout-2 chunk reach (its
    header, then two lines each), cut at a line's end."""
    if entries is None:
        return zlib.decompress(blob).decode("utf-8", "surrogatepass")
    inflater = zlib.decompressobj()
    pieces = [inflater.decompress(blob, _INFLATE_STEP)]
    lines = 1 + 2 * entries
    newlines = pieces[0].count(b"\n")
    while not inflater.eof and newlines < lines:
        pieces.append(inflater.decompress(inflater.unconsumed_tail, _INFLATE_STEP))
        newlines += pieces[-1].count(b"\n")
    data = b"".join(pieces)
    if inflater.eof:
        return data.decode("utf-8", "surrogatepass")
    # Up to the end of the last line wanted: UTF-8 never has a newline byte inside a character.
    cut = -1
    for _ in range(lines):
        cut = data.index(b"\n", cut + 1)
    return data[:cut].decode("utf-8", "surrogatepass")


class _ImageLines:
    """A layout-2 chunk's image lines, parsed (all at once) when an entry first asks for its own."""

    __slots__ = ("_lines", "_pairs")

    def __init__(self, lines: list[str]) -> None:
        self._lines = lines
        self._pairs: list[RowImages] | None = None

    def __call__(self) -> list[RowImages]:
        if self._pairs is None:
            stored = json.loads("[" + ",".join(self._lines) + "]")
            if len(stored) != len(self._lines):
                raise ValueError("a chunk's image lines do not hold one pair each")
            self._pairs = [(_before(before, after), after) for after, before in stored]
        return self._pairs


def _decode_list(
    shard: ShardId, first_seq: int, first_commit_hlc: int, rows: list[Any], images: bool
) -> list[LogEntry]:
    return [
        LogEntry(
            shard,
            first_seq + i,
            first_commit_hlc + i,
            None,
            _before(before, after) if images else None,
            after if images else None,
            size[0] if size else _utf8_length(wire),
            wire,
        )
        for i, (wire, after, before, *size) in enumerate(rows)
    ]
