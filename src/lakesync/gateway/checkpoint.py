"""Checkpoints in the object store: writing one (for the checkpoint job) and serving it (``GET .../checkpoint``).

Layout and manifest: docs/lake.md and :mod:`lakesync.core.checkpoint`. Each chunk object is one frame of the
checkpoint stream (``uint32`` big-endian length + ``SyncResponse``), so the unfiltered stream is the chunks' bytes
back to back; readers accept any number of frames per chunk.

Writing (:func:`write_checkpoint`): chunks first, then ``manifest.json``, then ``latest.json``. A reader that finds
``latest.json`` finds a complete checkpoint; a job that dies half-way leaves unreferenced objects and nothing else.

Serving (:func:`serve`), our semantics:

* Rows are filtered by the caller's sync rules on each row's *values* (its deltas folded with per-column LWW), with
  the caller's buckets (:func:`~lakesync.core.scope.resolve_scope`, with the membership tables they read); a row is
  served whole or not at all, and frames left empty are dropped.
  Without rules the stored chunks are served as they are.
* No checkpoint (or no bucket configured) → 404 ``No checkpoint available``: the client syncs from the log instead.
* ``chunk=i`` serves chunk ``i`` alone; an index outside ``0..chunks-1`` → 400. ``checkpoint=<id>`` pins the
  checkpoint, so a client fetching chunk by chunk does not mix two checkpoints when a newer one is published
  meanwhile (every response names its checkpoint in ``X-Checkpoint-Id``); an unknown id → 404.
* The whole checkpoint in one response is refused with 413 when its chunks total more than ``max_bytes`` (default
  4 MiB: base64 makes it ~5.6 MB, under Lambda's 6 MB response limit) -- fetch it by ``chunk`` then. The decision
  uses the stored size, before filtering, so a client gets the same answer whoever it is.
* A listed chunk that is missing, of the wrong size or undecodable is a storage fault (500), never skipped: a client
  must not take a partial checkpoint for the whole and then resume from its cursor.
* ``columns=True`` (``?format=columns``) serves the same rows, filtered the same way, as one columnar JSON document
  (:mod:`lakesync.wire.checkpoint_columns`) instead of the framed stream: what bulk loaders such as the local-first SDK
  read fastest. Its whole-checkpoint limit is a third of the stream's (JSON of tiny values can be three times their
  protobuf), still decided on the stored size.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from lakesync.core.checkpoint import (
    DEFAULT_CHUNK_BYTES,
    ChunkInfo,
    Manifest,
    chunk_key,
    group_rows,
    is_checkpoint_id,
    latest_key,
    latest_to_json,
    load_manifest,
    manifest_key,
    pack_chunks,
    row_deltas,
)
from lakesync.core.delta import RowDelta
from lakesync.core.errors import (
    CodecError,
    NotFoundError,
    PayloadTooLargeError,
    StorageError,
    ValidationError,
)
from lakesync.core.filters import Row
from lakesync.core.merge import RowState, fold
from lakesync.core.messages import SyncResponse
from lakesync.core.rules import Claims, rules_apply
from lakesync.core.scope import resolve_scope
from lakesync.gateway.cursor import encode_cursor
from lakesync.gateway.deps import MIB, GatewayDeps
from lakesync.ports import ObjectStore
from lakesync.wire import checkpoint_columns
from lakesync.wire.codec import encode_sync_response
from lakesync.wire.fast_checkpoint import RawDelta, decode_checkpoint, to_row_delta
from lakesync.wire.framing import frame_checkpoint_chunk, iter_checkpoint_responses

CONTENT_TYPE: Final = "application/x-lakesync-checkpoint-stream"
"""The media type of the framed stream (the original's)."""
MAX_SERVE_BYTES: Final = 4 * MIB
COLUMNS_EXPANSION: Final = 3
"""The most the columnar document can outgrow the stored stream (one-byte values under short names)."""
NO_CHECKPOINT: Final = "No checkpoint available"
_FRAME_PREFIX: Final = 4

HEADER_ID: Final = "X-Checkpoint-Id"
HEADER_CURSOR: Final = "X-Checkpoint-Cursor"
HEADER_HLC: Final = "X-Checkpoint-Hlc"
HEADER_CHUNKS: Final = "X-Checkpoint-Chunks"


@dataclass(frozen=True, slots=True)
class EncodedRow:
    """One row's checkpoint deltas, encoded: ``data`` is a ``SyncResponse`` holding only them (``serverHlc`` 0).

    Protobuf messages concatenate into their merge, so rows' ``data`` joined with a trailer that sets ``serverHlc``
    is the chunk's ``SyncResponse``.
    """

    table: str
    data: bytes
    deltas: int


def encode_row(state: RowState) -> EncodedRow:
    """The row's exact-version deltas (:func:`~lakesync.core.checkpoint.row_deltas`), encoded."""
    deltas = row_deltas(state)
    return EncodedRow(state.table, encode_sync_response(SyncResponse(tuple(deltas), 0)), len(deltas))


def write_checkpoint(
    objects: ObjectStore,
    *,
    gateway: str,
    checkpoint_id: str,
    created_at_ms: int,
    positions: Mapping[str, int],
    server_hlc: int,
    tables: Iterable[str],
    rows: Iterable[EncodedRow],
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> Manifest:
    """Write a checkpoint: its chunks (rows packed under ``chunk_bytes`` per object), its manifest, then make it the
    gateway's latest.

    Args:
        objects: The bucket.
        gateway: The gateway.
        checkpoint_id: A fresh id (:func:`~lakesync.core.checkpoint.checkpoint_id`).
        created_at_ms: When the checkpoint was cut.
        positions: ``{shard: seq}`` of the gateway's log entries the rows cover.
        server_hlc: The ``since`` HLC for clients without cursors.
        tables: The tables read.
        rows: The rows, in the order to serve them.
        chunk_bytes: Byte budget of one chunk object (a row larger than it gets a chunk of its own).

    Returns:
        The manifest written.

    Raises:
        ValueError: a malformed checkpoint id or a non-positive budget.
        StorageError: the object store failed (the checkpoint is then not published).
    """
    if not is_checkpoint_id(checkpoint_id):
        raise ValueError(f"invalid checkpoint id {checkpoint_id!r}")
    if chunk_bytes <= 0:
        raise ValueError("chunk_bytes must be positive")
    trailer = encode_sync_response(SyncResponse((), server_hlc))
    budget = max(1, chunk_bytes - _FRAME_PREFIX - len(trailer))
    chunks: list[ChunkInfo] = []
    row_count = 0
    for index, chunk in enumerate(pack_chunks(rows, budget, lambda r: len(r.data))):
        body = frame_checkpoint_chunk(b"".join(r.data for r in chunk) + trailer)
        key = chunk_key(gateway, checkpoint_id, index)
        objects.put(key, body)
        chunks.append(ChunkInfo(key, len(chunk), sum(r.deltas for r in chunk), len(body)))
        row_count += len(chunk)
    manifest = Manifest(
        gateway=gateway,
        checkpoint_id=checkpoint_id,
        created_at_ms=created_at_ms,
        positions=dict(positions),
        cursor=encode_cursor(positions),
        server_hlc=server_hlc,
        tables=tuple(sorted(set(tables))),
        rows=row_count,
        chunks=tuple(chunks),
    )
    objects.put(manifest_key(gateway, checkpoint_id), _json_bytes(manifest.to_json()), "application/json")
    objects.put(latest_key(gateway), _json_bytes(latest_to_json(checkpoint_id)), "application/json")
    return manifest


@dataclass(frozen=True, slots=True)
class CheckpointPayload:
    """A served checkpoint: the framed stream (all chunks, or one) or its columnar JSON text, and the manifest it came
    from."""

    body: bytes | str
    manifest: Manifest
    chunk: int | None = None
    content_type: str = CONTENT_TYPE

    @property
    def headers(self) -> dict[str, str]:
        """``X-Checkpoint-Id``, ``-Cursor`` (pull from it next), ``-Hlc`` (or ``since`` from it) and ``-Chunks``."""
        return {
            HEADER_ID: self.manifest.checkpoint_id,
            HEADER_CURSOR: self.manifest.cursor,
            HEADER_HLC: str(self.manifest.server_hlc),
            HEADER_CHUNKS: str(len(self.manifest.chunks)),
        }


def serve(
    deps: GatewayDeps,
    gateway: str,
    claims: Claims,
    chunk: int | None = None,
    *,
    checkpoint_id: str | None = None,
    max_bytes: int = MAX_SERVE_BYTES,
    columns: bool = False,
) -> CheckpointPayload:
    """The gateway's checkpoint (or one chunk of it) as the caller may see it.

    Args:
        deps: Stores (``deps.objects`` holds the checkpoints) and settings.
        gateway: The gateway.
        claims: The caller's JWT claims for sync rules.
        chunk: Serve only this chunk (0-based); ``None`` for the whole checkpoint.
        checkpoint_id: Serve this checkpoint instead of the latest.
        max_bytes: Largest stored size served whole.
        columns: Serve the columnar JSON document instead of the framed stream.

    Raises:
        NotFoundError: no checkpoint (404). ValidationError: bad ``chunk`` or ``checkpoint_id`` (400).
        PayloadTooLargeError: the whole checkpoint is over ``max_bytes`` (413). StorageError: corrupt objects (500).
    """
    objects = deps.objects
    manifest = None if objects is None else load_manifest(objects.get, gateway, checkpoint_id)
    if objects is None or manifest is None:
        raise NotFoundError(NO_CHECKPOINT if checkpoint_id is None else f"Checkpoint {checkpoint_id} not found")
    count = len(manifest.chunks)
    if chunk is not None:
        if not 0 <= chunk < count:
            valid = f"0..{count - 1}" if count else "none"
            raise ValidationError(f"Invalid 'chunk' parameter: this checkpoint has {count} chunks ({valid})")
        selected: tuple[ChunkInfo, ...] = (manifest.chunks[chunk],)
    else:
        if columns:
            max_bytes //= COLUMNS_EXPANSION
        if manifest.bytes > max_bytes:
            raise PayloadTooLargeError(
                f"Checkpoint too large to serve whole ({manifest.bytes} bytes in {count} chunks, max {max_bytes}); "
                f"fetch it with ?chunk=0..{count - 1}&checkpoint={manifest.checkpoint_id}"
            )
        selected = manifest.chunks
    rules = deps.config.get_sync_rules(gateway)
    # The caller's buckets, with the memberships they read: what a pull from the checkpoint's cursor holds.
    visible = resolve_scope(rules, claims, (), deps.membership_source(gateway)).covers if rules_apply(rules) else None
    if columns:
        rows = (row for info in selected for row in _chunk_raw_rows(objects, info, visible))
        document = checkpoint_columns.encode_columns(rows, manifest.server_hlc)
        return CheckpointPayload(document, manifest, chunk, checkpoint_columns.MEDIA_TYPE)
    body = b"".join(_chunk_stream(objects, info, manifest.server_hlc, visible) for info in selected)
    return CheckpointPayload(body, manifest, chunk)


def _chunk_data(objects: ObjectStore, info: ChunkInfo) -> bytes:
    data = objects.get(info.key)
    if data is None:
        raise StorageError(f"Checkpoint chunk {info.key} is missing")
    if len(data) != info.bytes:
        raise StorageError(f"Checkpoint chunk {info.key} has {len(data)} bytes, the manifest says {info.bytes}")
    return data


def chunk_rows(objects: ObjectStore, info: ChunkInfo) -> list[list[RowDelta]]:
    """The rows of one chunk, each as its deltas, in stored order (unfiltered).

    Raises:
        StorageError: the chunk is missing, of the wrong size or undecodable.
    """
    data = _chunk_data(objects, info)
    try:
        return list(group_rows(d for response in iter_checkpoint_responses(data) for d in response.deltas))
    except CodecError as exc:
        raise StorageError(f"Corrupt checkpoint chunk {info.key}") from exc


def _chunk_stream(objects: ObjectStore, info: ChunkInfo, server_hlc: int, visible: Visible | None) -> bytes:
    data = _chunk_data(objects, info)
    if visible is None:
        return data
    frames: list[bytes] = []
    try:
        for response in iter_checkpoint_responses(data):
            kept = tuple(delta for row in group_rows(response.deltas) if _row_visible(row, visible) for delta in row)
            if kept:
                frames.append(frame_checkpoint_chunk(encode_sync_response(SyncResponse(kept, server_hlc))))
    except CodecError as exc:
        raise StorageError(f"Corrupt checkpoint chunk {info.key}") from exc
    return b"".join(frames)


def _chunk_raw_rows(objects: ObjectStore, info: ChunkInfo, visible: Visible | None) -> list[list[RawDelta]]:
    """One chunk's rows the caller may see, decoded for the columnar document."""
    data = _chunk_data(objects, info)
    try:
        rows = list(decode_checkpoint((data,)))
    except CodecError as exc:
        raise StorageError(f"Corrupt checkpoint chunk {info.key}") from exc
    if visible is None:
        return rows
    return [row for row in rows if _row_visible([to_row_delta(d) for d in row], visible)]


Visible = Callable[[str, Row | None], bool]
"""Whether the caller may see a row of a table (its values; ``None``: the row does not exist)."""


def _row_visible(row: list[RowDelta], visible: Visible) -> bool:
    state = fold(row)
    return visible(row[0].table, None if state is None else state.values())


def _json_bytes(body: object) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode("ascii")


__all__ = [
    "CONTENT_TYPE",
    "HEADER_CHUNKS",
    "HEADER_CURSOR",
    "HEADER_HLC",
    "HEADER_ID",
    "MAX_SERVE_BYTES",
    "NO_CHECKPOINT",
    "CheckpointPayload",
    "EncodedRow",
    "chunk_rows",
    "encode_row",
    "serve",
    "write_checkpoint",
]
