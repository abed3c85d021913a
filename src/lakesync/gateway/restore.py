"""Rebuild a gateway's buffer from the lake (docs/lake.md, "Rebuild the gateway from the lake").

:func:`survey` reads what the old buffer can still tell (its heads against the lake: the deltas committed and never
flushed; its configuration) before it goes; :func:`restore` folds the delta log (:mod:`lakesync.core.restore`) and
writes, into tables holding nothing of the gateway: the row index, the configuration, a checkpoint at the restored
positions, the heads (flushed and released at the lake's positions) and last the shard registry, which is what
pulls and the flush list shards by. Old cursors and ``since`` positions then fall behind the release (410, or the
``since`` resync from that checkpoint); clients reload the checkpoint and push their outboxes again.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Protocol

from lakesync.core.checkpoint import checkpoint_id
from lakesync.core.errors import StorageError
from lakesync.core.log import ShardHead, ShardId, StoredRow
from lakesync.core.restore import (
    AtRisk,
    LakeEntry,
    LakeFold,
    RestoreReport,
    RestoreTargetNotEmptyError,
    SavedConfig,
    fold_lake,
    restore_hlc,
    restored_head,
    table_rows,
)
from lakesync.gateway.checkpoint import encode_row, write_checkpoint
from lakesync.ports import ObjectStore

__all__ = ["BufferSurvey", "LakeReader", "RestoreTarget", "Survey", "restore", "survey"]

log = logging.getLogger(__name__)

ROW_BATCH = 1000
"""Rows handed to the target at once (it writes them in requests of its own size)."""


class LakeReader(Protocol):
    """The lake a restore reads: the delta log's flush watermarks and a gateway's entries."""

    def watermarks(self) -> dict[str, int]:
        """``{shard: seq}``: each shard's entries up to ``seq`` are in the delta log."""
        ...

    def entries(self, gateway: str) -> Iterator[LakeEntry]:
        """Every delta-log entry of ``gateway``, in any order."""
        ...


class BufferSurvey(Protocol):
    """The old buffer, read before it is replaced; any read may fail with ``StorageError`` (damaged or gone)."""

    def shards(self, gateway: str) -> list[ShardId]:
        """The gateway's shard registry."""
        ...

    def heads(self, shards: Sequence[ShardId]) -> dict[ShardId, ShardHead]:
        """The heads of ``shards`` (as the log has them)."""
        ...

    def first_commit_after(self, shard: ShardId, seq: int) -> int | None:
        """The commit HLC of the entry at ``seq + 1``, if it can be read."""
        ...

    def config(self, gateway: str) -> SavedConfig:
        """The gateway's configuration (rules, schemas, destinations, connectors and their positions)."""
        ...


class RestoreTarget(Protocol):
    """The tables a restore writes into."""

    def holds(self, gateway: str, shards: Sequence[ShardId]) -> bool:
        """Whether they hold anything of ``gateway`` (configuration, registry, or a head of ``shards``)."""
        ...

    def put_rows(self, gateway: str, rows: Sequence[StoredRow]) -> None:
        """Write rows of the row index."""
        ...

    def put_config(self, items: Sequence[object]) -> None:
        """Write configuration items read by :meth:`BufferSurvey.config`."""
        ...

    def put_heads(self, heads: Sequence[ShardHead]) -> None:
        """Write new shard heads (release marks included)."""
        ...

    def register(self, shards: Sequence[ShardId]) -> None:
        """Add shards to the registry."""
        ...


@dataclass(frozen=True, slots=True)
class Survey:
    """What the old buffer told before the restore: the data at risk, the configuration to bring back, and its heads
    (the restore's HLC follows their last commits)."""

    at_risk: AtRisk
    config: SavedConfig
    heads: tuple[ShardHead, ...] = ()

    @classmethod
    def unreadable(cls, reason: str) -> Survey:
        """No old buffer to read: the data at risk is unknown and no configuration comes back."""
        return cls(AtRisk(False, reason=reason), SavedConfig(reason=reason))


def survey(old: BufferSurvey, gateway: str, watermarks: Mapping[str, int]) -> Survey:
    """Read the old buffer of ``gateway``: its entries past the lake's ``watermarks`` (committed, never flushed) and
    its configuration. A buffer that cannot be read gives an unknown risk and no configuration, with the reason."""
    try:
        heads = old.heads(old.shards(gateway))
    except StorageError as exc:  # a damaged or missing buffer: the restore goes on without it
        log.warning("the old buffer of %r cannot be read: %s", gateway, exc)
        return Survey.unreadable(f"the old buffer cannot be read: {exc}")
    firsts: dict[str, int | None] = {}
    for shard, head in heads.items():
        flushed = watermarks.get(shard.key, 0)
        if head.seq > flushed:
            try:
                firsts[shard.key] = old.first_commit_after(shard, flushed)
            except StorageError as exc:  # the count stands without its time
                log.warning("the first unflushed entry of %s cannot be read: %s", shard.key, exc)
                firsts[shard.key] = None
    try:
        config = old.config(gateway)
    except StorageError as exc:
        log.warning("the old configuration of %r cannot be read: %s", gateway, exc)
        config = SavedConfig(reason=f"the old config table cannot be read: {exc}")
    return Survey(AtRisk.of(heads.values(), watermarks, firsts), config, tuple(heads.values()))


def restore(
    gateway: str,
    lake: LakeReader,
    target: RestoreTarget,
    *,
    now: Callable[[], int],
    objects: ObjectStore | None,
    old: Survey | None = None,
    progress: Callable[[str], None] | None = None,
) -> RestoreReport:
    """Rebuild ``gateway``'s buffer from the lake into ``target``.

    Args:
        gateway: The gateway.
        lake: The delta log.
        target: Tables holding nothing of the gateway.
        now: The server's HLC clock (the restore's HLC follows it).
        objects: The checkpoint bucket: a checkpoint at the restored positions is cut there (``None``: none is, and
            clients get 410 until one covers the positions).
        old: What the old buffer told (:func:`survey`); ``None``: nothing (risk unknown, no configuration).
        progress: Called with a line now and then.

    Raises:
        RestoreTargetNotEmptyError: the target already holds something of the gateway.
    """
    started = time.monotonic()
    say = progress or (lambda _line: None)
    old = old or Survey.unreadable("no old buffer was read")
    watermarks = {k: v for k, v in lake.watermarks().items() if ShardId.parse(k).gateway == gateway}
    shards = [ShardId.parse(k) for k in watermarks]
    if target.holds(gateway, shards):
        raise RestoreTargetNotEmptyError(
            f"the buffer tables already hold gateway {gateway!r}: a restore writes into tables holding nothing of it"
        )
    say(f"{gateway}: reading the delta log")
    fold = fold_lake(lake.entries(gateway), watermarks)
    at_hlc = restore_hlc(now(), fold, old.heads)
    _write_rows(gateway, fold, target, say)
    if old.config.items:
        target.put_config(old.config.items)
    cid = _cut_checkpoint(gateway, fold, objects, at_hlc) if objects is not None and fold.shards else None
    heads = [restored_head(s, at_hlc) for _, s in sorted(fold.shards.items())]
    target.put_heads(heads)
    target.register([h.shard for h in heads])
    say(f"{gateway}: {len(fold.rows):,} rows, {len(heads)} shards restored")
    return RestoreReport(
        gateway=gateway,
        restore_hlc=at_hlc,
        tables=table_rows(r.state for r in fold.rows.values()),
        shards={h.shard.key: h.seq for h in heads},
        at_risk=old.at_risk,
        config=old.config,
        checkpoint_id=cid,
        seconds=time.monotonic() - started,
    )


def _write_rows(gateway: str, fold: LakeFold, target: RestoreTarget, say: Callable[[str], None]) -> None:
    started = time.monotonic()
    total, done = len(fold.rows), 0
    rows = iter(fold.rows.values())
    while batch := list(islice(rows, ROW_BATCH)):
        target.put_rows(gateway, batch)
        done += len(batch)
        if done % (100 * ROW_BATCH) < ROW_BATCH or done == total:
            rate = done / max(time.monotonic() - started, 1e-6)
            say(f"{gateway}: rows written {done:,}/{total:,} ({rate:,.0f} rows/s)")


def _cut_checkpoint(gateway: str, fold: LakeFold, objects: ObjectStore, at_hlc: int) -> str:
    """A checkpoint of the restored rows at the restored positions, its ``serverHlc`` the restore's HLC (so a
    ``since`` client resuming from it is not behind the release); deleted rows as their DELETE, as the checkpoint
    job keeps them by default."""
    created = at_hlc >> 16
    cid = checkpoint_id(created, secrets.token_hex(4))
    states = sorted((r.state for r in fold.rows.values()), key=lambda s: (s.table, s.row_id))
    write_checkpoint(
        objects,
        gateway=gateway,
        checkpoint_id=cid,
        created_at_ms=created,
        positions={s.key: info.seq for s, info in fold.shards.items()},
        server_hlc=at_hlc,
        tables=[s.table for s in fold.shards],
        rows=(encode_row(state) for state in states),
    )
    return cid
