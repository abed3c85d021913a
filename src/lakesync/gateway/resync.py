"""Resync of an original (``since``) client whose position is behind a release (docs/since.md, "Behind a
release").

The flush job releases log entries once they are in the lake and covered by the gateway's latest checkpoint, so a
client positioned behind a release can no longer be served from the log. A cursor client gets 410 and reloads the
checkpoint; the original client does not handle 410 (it would stay stuck), so a ``since`` pull behind a release is
answered 200 with a *resync* instead: the rows of the latest checkpoint, page by page, each in the form the original
applier applies whatever it holds (:func:`~lakesync.gateway.since.row_form`), then the log from the checkpoint's
positions -- what a checkpoint-then-cursor client gets.

Per checkpoint row (:func:`resync_row`), judged on the row's values with the caller's sync rules as checkpoint
serving judges them:

* a live row the client may see: ``DELETE`` + ``INSERT`` of its values (HLC 0);
* a deleted row (a tombstone; the checkpoint job keeps them by default, ``include_deleted``) the checkpoint route
  would serve to the client -- every tombstone without sync rules, or under a bucket without filters: ``DELETE`` (a
  no-op for a row it does not hold);
* a row it may not see, or a tombstone whose last values are gone (so the rules cannot say whether it saw the row):
  ``DELETE`` only when the client itself named the row (it pushed it recently, or it is queued for redelivery);
  otherwise nothing, since naming rows outside its buckets would disclose them.

Where the resync stands is a :class:`~lakesync.core.since.ResyncMark` in the handouts of the client's session;
pages are cut at row boundaries, after at most ``limit`` deltas (a row counts as two), ``max_page_bytes`` or
:data:`MAX_CHUNKS_PER_PAGE` chunks read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Final

from lakesync.core.checkpoint import Manifest, load_manifest
from lakesync.core.delta import RowDelta
from lakesync.core.errors import StorageError
from lakesync.core.log import ShardHead, ShardId
from lakesync.core.merge import fold
from lakesync.core.rules import Claims, SyncRules, row_matches
from lakesync.core.since import ResyncMark, RowKey
from lakesync.gateway.checkpoint import chunk_rows
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.since import row_form, visible_values

MAX_CHUNKS_PER_PAGE: Final = 4
"""Checkpoint chunks (1 MiB each by default) one resync page may read; a client that may see few rows progresses
through a large checkpoint over several pulls rather than reading all of it in one request."""
_ROW_OVERHEAD: Final = 96
"""Bytes counted per delta on top of its values (ids, op, HLC), for the page byte budget."""


def covering_checkpoint(deps: GatewayDeps, gateway: str, heads: Mapping[ShardId, ShardHead]) -> Manifest | None:
    """The gateway's latest checkpoint if it covers every release marked on ``heads`` (the flush job releases only
    entries its latest checkpoint covers, so it does unless the checkpoint is missing or unreadable); else ``None``."""
    if deps.objects is None:
        return None
    try:
        manifest = load_manifest(deps.objects.get, gateway)
    except StorageError:
        return None
    if manifest is None:
        return None
    for head in heads.values():
        if head.released_seq and manifest.positions.get(head.shard.key, 0) < head.released_seq:
            return None
    return manifest


@dataclass(frozen=True, slots=True)
class ResyncPage:
    """One resync page: its deltas, and where the resync resumes (``None``: the checkpoint is done)."""

    manifest: Manifest
    deltas: tuple[RowDelta, ...]
    next: ResyncMark | None


def resync_page(
    deps: GatewayDeps,
    gateway: str,
    mark: ResyncMark,
    limit: int,
    rules: SyncRules | None,
    claims: Claims,
    client_id: str,
    known: Set[RowKey],
) -> ResyncPage | None:
    """The checkpoint's rows from ``mark`` as the client should apply them (:func:`resync_row`).

    Returns:
        The page, or ``None`` when the checkpoint of ``mark`` no longer exists.

    Raises:
        StorageError: a chunk of the checkpoint is missing or corrupt (500, as checkpoint serving).
    """
    objects = deps.objects
    manifest = None if objects is None else load_manifest(objects.get, gateway, mark.checkpoint_id)
    if objects is None or manifest is None:
        return None
    out: list[RowDelta] = []
    size = 0
    chunk, row = mark.chunk, mark.row
    read = 0
    budget = deps.settings.max_page_bytes
    while chunk < len(manifest.chunks) and read < MAX_CHUNKS_PER_PAGE and len(out) < limit and size < budget:
        rows = chunk_rows(objects, manifest.chunks[chunk])
        read += 1
        while row < len(rows) and len(out) < limit and size < budget:
            deltas = resync_row(rows[row], rules, claims, client_id, known)
            out.extend(deltas)
            size += sum(_ROW_OVERHEAD + len(json.dumps(d.values(), separators=(",", ":"))) for d in deltas)
            row += 1
        if row >= len(rows):
            chunk, row = chunk + 1, 0
    done = chunk >= len(manifest.chunks)
    return ResyncPage(manifest, tuple(out), None if done else ResyncMark(manifest.checkpoint_id, chunk, row))


def resync_row(
    row: list[RowDelta], rules: SyncRules | None, claims: Claims, client_id: str, known: Set[RowKey]
) -> list[RowDelta]:
    """One checkpoint row (its exact-version deltas) for a client that may hold anything (module docstring)."""
    state = fold(row)
    table, row_id = row[0].table, row[0].row_id
    values = None if state is None else state.values()
    visible = visible_values(rules, claims, table, values)
    if visible is not None:
        assert state is not None and state.written is not None
        return row_form(table, row_id, state.written.client_id, visible, held=True)
    if values is None and row_matches(rules, claims, table, None):
        version = None if state is None else state.tombstone
        return row_form(table, row_id, version.client_id if version else client_id, None, held=True)
    # Not the client's to see: only a row it named itself may be deleted (no other identity goes out).
    return row_form(table, row_id, client_id, None, held=(table, row_id) in known)


__all__ = ["MAX_CHUNKS_PER_PAGE", "ResyncPage", "covering_checkpoint", "resync_page", "resync_row"]
