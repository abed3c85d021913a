"""Checkpoints, the pure part: a row's state as deltas, chunk packing, object keys and the manifest (docs/lake.md).

Exact versions
    :func:`row_deltas` turns a :class:`~lakesync.core.merge.RowState` into deltas that carry the state's own versions:
    a DELETE at the tombstone (if any), then one write per distinct column version ``(hlc, clientId)`` carrying exactly
    the columns at that version (sorted by name in UTF-16 order), oldest first, plus a write without columns at
    ``written`` when no column holds that version (an INSERT without columns, or a write whose columns all lost). The
    first write is an INSERT, the others UPDATEs: per-column LWW treats them alike, and a client that applies deltas as
    plain SQL (INSERT creates the row, UPDATE of a missing row does nothing) still gets the row. DeltaIds come from
    :func:`~lakesync.core.delta.delta_id`, so the same state always gives the same deltas.

    Because :func:`~lakesync.core.merge.fold` is a function of the *set* of deltas and ``fold(row_deltas(s)) == s``,
    folding a checkpoint's deltas together with any later deltas gives the state of the whole history: the
    checkpoint + tail claim, proven by property tests.

Chunks
    :func:`pack_chunks` cuts a sequence of rows into chunks under a byte budget, never splitting a row: a row that
    would push a non-empty chunk over the budget starts the next chunk, and a row larger than the budget gets a chunk
    of its own.

Objects (under a bucket)
    ``checkpoints/<gateway>/<checkpointId>/chunk-00000.bin ...``, ``.../manifest.json`` and
    ``checkpoints/<gateway>/latest.json`` (``{"checkpointId": ...}``, written last). Checkpoint ids are
    ``<createdAtMs, 13 digits>-<8 hex>`` so they sort by creation time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from lakesync.core.canonical import utf16_key
from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta, delta_id
from lakesync.core.errors import StorageError, ValidationError
from lakesync.core.merge import ColumnState, RowState, Version

_T = TypeVar("_T")

MANIFEST_VERSION: Final = 1
DEFAULT_CHUNK_BYTES: Final = 1024 * 1024
PREFIX: Final = "checkpoints"
_ID = re.compile(r"[0-9]{13}-[0-9a-f]{8}")


# -- a row's state as deltas ---------------------------------------------------------------------------------------


def row_deltas(state: RowState) -> list[RowDelta]:
    """The deltas that rebuild ``state`` exactly under per-column LWW (see the module docstring).

    Returns:
        A DELETE at the tombstone if there is one, then the writes oldest first (the first an INSERT); empty for a
        state with neither (never produced by a merge).
    """
    deltas: list[RowDelta] = []
    if state.tombstone is not None:
        deltas.append(_delta(DeltaOp.DELETE, state, state.tombstone, ()))
    groups: dict[Version, list[tuple[str, ColumnState]]] = {}
    for name, col in state.columns.items():
        groups.setdefault(col.version, []).append((name, col))
    if state.written is not None and state.written not in groups:
        groups[state.written] = []
    for i, version in enumerate(sorted(groups, key=lambda v: v.key)):
        columns = tuple(ColumnDelta(name, col.value) for name, col in sorted(groups[version], key=_by_name))
        deltas.append(_delta(DeltaOp.INSERT if i == 0 else DeltaOp.UPDATE, state, version, columns))
    return deltas


def _by_name(item: tuple[str, ColumnState]) -> bytes:
    return utf16_key(item[0])


def _delta(op: DeltaOp, state: RowState, version: Version, columns: tuple[ColumnDelta, ...]) -> RowDelta:
    did = delta_id(version.client_id, version.hlc, state.table, state.row_id, [c.to_json() for c in columns])
    return RowDelta(op, state.table, state.row_id, version.client_id, columns, version.hlc, did)


def group_rows(deltas: Iterable[RowDelta]) -> Iterator[list[RowDelta]]:
    """Runs of consecutive deltas of the same row (a checkpoint chunk lists each row's deltas together)."""
    run: list[RowDelta] = []
    for delta in deltas:
        if run and (delta.table != run[0].table or delta.row_id != run[0].row_id):
            yield run
            run = []
        run.append(delta)
    if run:
        yield run


# -- chunks --------------------------------------------------------------------------------------------------------


def pack_chunks(items: Iterable[_T], budget: int, size: Callable[[_T], int]) -> Iterator[list[_T]]:
    """Group ``items`` (whole rows) into chunks of at most ``budget`` bytes by ``size``, in order.

    A chunk closes before the item that would take it over the budget; an item larger than the budget alone gets a
    chunk of its own. No chunk is empty.

    Raises:
        ValueError: if ``budget`` is not positive.
    """
    if budget <= 0:
        raise ValueError("the chunk budget must be positive")
    chunk: list[_T] = []
    used = 0
    for item in items:
        n = size(item)
        if chunk and used + n > budget:
            yield chunk
            chunk, used = [], 0
        chunk.append(item)
        used += n
    if chunk:
        yield chunk


# -- keys ------------------------------------------------------------------------------------------------------------


def checkpoint_id(created_at_ms: int, nonce: str) -> str:
    """``<created_at_ms as 13 digits>-<nonce>``; ``nonce`` is 8 lowercase hex digits (callers draw it at random).

    Raises:
        ValueError: if the result would not be a valid checkpoint id.
    """
    cid = f"{created_at_ms:013d}-{nonce}"
    if not is_checkpoint_id(cid):
        raise ValueError(f"invalid checkpoint id {cid!r}")
    return cid


def is_checkpoint_id(text: str) -> bool:
    """Whether ``text`` has the shape of a checkpoint id (safe inside an object key)."""
    return _ID.fullmatch(text) is not None


def gateway_prefix(gateway: str) -> str:
    """``checkpoints/<gateway>/``."""
    return f"{PREFIX}/{gateway}/"


def latest_key(gateway: str) -> str:
    """The key of the pointer to the gateway's latest checkpoint."""
    return f"{gateway_prefix(gateway)}latest.json"


def manifest_key(gateway: str, cid: str) -> str:
    """The key of a checkpoint's manifest."""
    return f"{gateway_prefix(gateway)}{cid}/manifest.json"


def chunk_key(gateway: str, cid: str, index: int) -> str:
    """The key of a checkpoint's chunk ``index`` (``chunk-00000.bin``, ...)."""
    return f"{gateway_prefix(gateway)}{cid}/chunk-{index:05d}.bin"


def latest_to_json(cid: str) -> dict[str, Any]:
    """The body of ``latest.json``."""
    return {"checkpointId": cid}


def latest_from_json(data: object) -> str:
    """The checkpoint id in a ``latest.json`` body.

    Raises:
        StorageError: the body is not a pointer to a well-formed id.
    """
    cid = data.get("checkpointId") if isinstance(data, Mapping) else None
    if not isinstance(cid, str) or not is_checkpoint_id(cid):
        raise StorageError("Corrupt checkpoint pointer (latest.json)")
    return cid


# -- the manifest ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChunkInfo:
    """One chunk object: its key, how many rows and deltas it holds, and its size in bytes."""

    key: str
    rows: int
    deltas: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        """``{"key", "rows", "deltas", "bytes"}``."""
        return {"key": self.key, "rows": self.rows, "deltas": self.deltas, "bytes": self.bytes}


@dataclass(frozen=True, slots=True)
class Manifest:
    """What a checkpoint holds and which part of the log it covers.

    Attributes:
        gateway: The gateway.
        checkpoint_id: The checkpoint's id.
        created_at_ms: When the job cut it (wall clock, ms).
        positions: ``{shard: seq}``: every delta-log entry up to ``seq`` of each shard is in the checkpoint.
        cursor: The pull cursor of ``positions``: pulling from it continues exactly after the checkpoint.
        server_hlc: A ``since`` HLC to resume from for clients without cursors (at-least-once).
        tables: The tables whose state was read.
        rows: Rows in the checkpoint.
        chunks: The chunk objects, in order.
    """

    gateway: str
    checkpoint_id: str
    created_at_ms: int
    positions: Mapping[str, int]
    cursor: str
    server_hlc: int
    tables: tuple[str, ...] = ()
    rows: int = 0
    chunks: tuple[ChunkInfo, ...] = ()
    version: int = field(default=MANIFEST_VERSION)

    @property
    def bytes(self) -> int:
        """Total bytes of the chunk objects."""
        return sum(c.bytes for c in self.chunks)

    @property
    def deltas(self) -> int:
        """Total deltas in the chunks."""
        return sum(c.deltas for c in self.chunks)

    def releasable(self, shard: str, seq: int, commit_hlc: int) -> bool:
        """Whether this checkpoint lets the buffer release log entry ``seq`` of ``shard`` (committed at
        ``commit_hlc``): it is covered by ``positions`` AND at or below ``server_hlc``.

        Both bounds matter: a client resuming from the cursor must not be behind the released part of any shard, and
        neither may one resuming ``since`` the checkpoint's HLC (a pull with ``since`` below a shard's released HLC
        is refused, so releasing up to ``positions`` alone would send such a client back to the checkpoint forever).
        """
        return seq <= self.positions.get(shard, 0) and commit_hlc <= self.server_hlc

    def to_json(self) -> dict[str, Any]:
        """The ``manifest.json`` body (docs/lake.md); HLCs as decimal strings."""
        return {
            "version": self.version,
            "gateway": self.gateway,
            "checkpointId": self.checkpoint_id,
            "createdAtMs": self.created_at_ms,
            "positions": dict(sorted(self.positions.items())),
            "cursor": self.cursor,
            "serverHlc": str(self.server_hlc),
            "tables": list(self.tables),
            "rows": self.rows,
            "chunks": [c.to_json() for c in self.chunks],
        }

    @classmethod
    def from_json(cls, data: object) -> Manifest:
        """Parse and check a ``manifest.json`` body.

        Raises:
            StorageError: ``Corrupt checkpoint manifest: ...`` naming the first bad field.
        """
        body = _mapping(data, "manifest")
        version = _count(body, "version")
        if version != MANIFEST_VERSION:
            raise _corrupt(f"unsupported version {version}")
        cid = _text(body, "checkpointId")
        if not is_checkpoint_id(cid):
            raise _corrupt("bad checkpointId")
        positions = _mapping(body.get("positions"), "positions")
        for shard, seq in positions.items():
            if not isinstance(shard, str) or not _is_count(seq):
                raise _corrupt("bad positions")
        server_hlc = body.get("serverHlc")
        if not isinstance(server_hlc, str) or not server_hlc.isascii() or not server_hlc.isdigit():
            raise _corrupt("bad serverHlc")
        tables = body.get("tables")
        if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
            raise _corrupt("bad tables")
        raw_chunks = body.get("chunks")
        if not isinstance(raw_chunks, list):
            raise _corrupt("bad chunks")
        chunks = []
        for raw in raw_chunks:
            chunk = _mapping(raw, "chunks[]")
            chunks.append(
                ChunkInfo(_text(chunk, "key"), _count(chunk, "rows"), _count(chunk, "deltas"), _count(chunk, "bytes"))
            )
        return cls(
            gateway=_text(body, "gateway"),
            checkpoint_id=cid,
            created_at_ms=_count(body, "createdAtMs"),
            positions=dict(positions),
            cursor=_text(body, "cursor", allow_empty=True),
            server_hlc=int(server_hlc),
            tables=tuple(tables),
            rows=_count(body, "rows"),
            chunks=tuple(chunks),
            version=version,
        )


def _corrupt(what: str) -> StorageError:
    return StorageError(f"Corrupt checkpoint manifest: {what}")


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _corrupt(f"{where} is not an object")
    return value


def _is_count(value: object) -> bool:
    return type(value) is int and value >= 0


def _count(body: Mapping[str, Any], key: str) -> int:
    value = body.get(key)
    if not _is_count(value):
        raise _corrupt(f"bad {key}")
    assert isinstance(value, int)
    return value


def _text(body: Mapping[str, Any], key: str, *, allow_empty: bool = False) -> str:
    value = body.get(key)
    if not isinstance(value, str) or (not value and not allow_empty):
        raise _corrupt(f"bad {key}")
    return value


def positions_of_gateway(positions: Mapping[str, int], gateway: str) -> dict[str, int]:
    """The entries of a ``{shard: seq}`` map whose shard key (``gateway#table#sub``) belongs to ``gateway``."""
    return {shard: seq for shard, seq in positions.items() if shard.rsplit("#", 2)[0] == gateway}


def merge_positions(maps: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """The union of per-table ``{shard: seq}`` maps (each shard belongs to one table, so keys do not collide).

    Raises:
        ValueError: if two maps disagree on a shard.
    """
    merged: dict[str, int] = {}
    for positions in maps:
        for shard, seq in positions.items():
            if merged.setdefault(shard, seq) != seq:
                raise ValueError(f"shard {shard!r} has two positions ({merged[shard]} and {seq})")
    return merged


def load_manifest(
    read: Callable[[str], bytes | None], gateway: str, checkpoint_id: str | None = None
) -> Manifest | None:
    """The gateway's latest checkpoint's manifest (or that of ``checkpoint_id``); ``None`` if there is none.

    ``read`` fetches an object by key (``None`` when absent): an :class:`~lakesync.ports.ObjectStore`'s ``get``.

    Raises:
        ValidationError: ``checkpoint_id`` is malformed.
        StorageError: the pointer or manifest is corrupt, or names another gateway or checkpoint.
    """
    if checkpoint_id is None:
        pointer = read(latest_key(gateway))
        if pointer is None:
            return None
        checkpoint_id = latest_from_json(_parse_json(pointer, "Corrupt checkpoint pointer (latest.json)"))
    elif not is_checkpoint_id(checkpoint_id):
        raise ValidationError("Invalid 'checkpoint' parameter")
    raw = read(manifest_key(gateway, checkpoint_id))
    if raw is None:
        return None
    manifest = Manifest.from_json(_parse_json(raw, "Corrupt checkpoint manifest: not JSON"))
    if manifest.gateway != gateway or manifest.checkpoint_id != checkpoint_id:
        raise StorageError(f"Corrupt checkpoint manifest: {manifest_key(gateway, checkpoint_id)} names another one")
    return manifest


def _parse_json(data: bytes, message: str) -> object:
    try:
        parsed: object = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise StorageError(message) from exc
    return parsed


__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "MANIFEST_VERSION",
    "PREFIX",
    "ChunkInfo",
    "Manifest",
    "checkpoint_id",
    "chunk_key",
    "gateway_prefix",
    "group_rows",
    "is_checkpoint_id",
    "latest_from_json",
    "latest_key",
    "latest_to_json",
    "load_manifest",
    "manifest_key",
    "merge_positions",
    "pack_chunks",
    "positions_of_gateway",
    "row_deltas",
]
