"""Rebuilding a gateway's buffer from the lake, the pure part (docs/lake.md, "Rebuild the gateway from the lake").

The delta log holds every flushed entry once, with its shard, sequence and commit HLC, so the row index is the
per-column LWW fold of the gateway's entries (:func:`lakesync.core.merge.merge`, order-independent), each row at the
position of the last entry it holds, with the dedup keys of its last deltas. Each shard's head is restored at the
lake's highest flushed position, every entry flushed and released (the log items are not rebuilt), and its last
commit HLC and release HLC at the restore's own HLC, later than any commit or ``serverHlc`` handed out before:

* a cursor behind that position is behind a release (410 ``CURSOR_EXPIRED``); one past it is ahead of the head
  (410); one at it carries the commit HLC of the entry there, which is not the head's (410). Only a cursor that
  records no commit HLC at that position passes: a checkpoint's cursor at exactly those positions;
* every ``since`` from before the restore is below the release HLC: resynced from the checkpoint (or 410);
* new commits take commit HLCs after the restore's (the push orders them after the head's), so a ``since`` at the
  restore's HLC follows them.

What was committed to the old buffer but never flushed is lost; :class:`AtRisk` names it when the old buffer could
still be read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lakesync.core.delta import RowDelta
from lakesync.core.errors import ConflictError
from lakesync.core.hlc import decode
from lakesync.core.log import ROW_RECENT_KEYS, ShardHead, ShardId, StoredRow, dedup_key, recent_key
from lakesync.core.merge import RowState, merge

__all__ = [
    "CONFIG_KINDS",
    "AtRisk",
    "LakeEntry",
    "LakeFold",
    "LakeShard",
    "RestoreReport",
    "RestoreTargetNotEmptyError",
    "SavedConfig",
    "ShardAtRisk",
    "TableRows",
    "UnflushedDataError",
    "fold_lake",
    "restore_hlc",
    "restored_head",
    "table_rows",
]

CONFIG_KINDS: Mapping[str, str] = {
    "rules": "sync rules",
    "schema#": "table schemas",
    "dest#": "materialisation destinations",
    "conn#": "connectors",
    "cpos#": "connector positions",
    "cposd#": "connector positions",
}
"""The gateway's configuration a restore takes from the old config table, by sort key (prefix), and what it is."""


class RestoreTargetNotEmptyError(ConflictError):
    """The tables a restore writes into already hold something of the gateway."""

    code = "RESTORE_TARGET_NOT_EMPTY"


class UnflushedDataError(ConflictError):
    """The buffer a restore would replace still holds deltas the lake does not: flush first, or accept their loss."""

    code = "RESTORE_WOULD_LOSE_DATA"


@dataclass(frozen=True, slots=True)
class LakeEntry:
    """One entry of the delta log: its buffer position, commit HLC, effective delta and stored bytes."""

    shard: ShardId
    seq: int
    commit_hlc: int
    delta: RowDelta
    size: int


@dataclass(frozen=True, slots=True)
class LakeShard:
    """What the lake holds of one shard: its highest flushed position, entries, bytes and last commit HLC."""

    shard: ShardId
    seq: int
    deltas: int
    bytes: int
    last_commit_hlc: int


@dataclass(slots=True)
class LakeFold:
    """The fold of a gateway's delta log: the row index it implies and its shards (:func:`fold_lake`)."""

    rows: dict[tuple[str, str], StoredRow] = field(default_factory=dict)
    shards: dict[ShardId, LakeShard] = field(default_factory=dict)

    @property
    def max_commit_hlc(self) -> int:
        """The greatest commit HLC in the lake (0 when it holds nothing)."""
        return max((s.last_commit_hlc for s in self.shards.values()), default=0)


def fold_lake(entries: Iterable[LakeEntry], watermarks: Mapping[str, int] | None = None) -> LakeFold:
    """Fold delta-log entries (in any order) into the row index and the shards they imply.

    A row holds the per-column LWW merge of its entries, its version is the greatest position among them, and its
    recent dedup keys are those of its last :data:`~lakesync.core.log.ROW_RECENT_KEYS` entries by position. A
    shard's position is the greater of its flush watermark (``watermarks``: the delta log's snapshot property) and
    its highest entry.
    """
    fold = LakeFold()
    recent: dict[tuple[str, str], list[tuple[int, str]]] = {}
    totals: dict[ShardId, list[int]] = {}
    for entry in entries:
        delta = entry.delta
        key = (delta.table, delta.row_id)
        row = fold.rows.get(key)
        state = merge(row.state if row is not None else None, delta).state
        keys = recent.setdefault(key, [])
        keys.append((entry.seq, recent_key(dedup_key(delta.client_id, delta.delta_id))))
        if len(keys) > 4 * ROW_RECENT_KEYS:
            keys.sort()
            del keys[:-ROW_RECENT_KEYS]
        fold.rows[key] = StoredRow(state, max(entry.seq, row.version if row is not None else 0))
        tally = totals.setdefault(entry.shard, [0, 0, 0, 0])
        tally[0] = max(tally[0], entry.seq)
        tally[1] += 1
        tally[2] += entry.size
        tally[3] = max(tally[3], entry.commit_hlc)
    for key, row in fold.rows.items():
        kept = sorted(recent[key])[-ROW_RECENT_KEYS:]
        fold.rows[key] = StoredRow(row.state, row.version, tuple(k for _, k in kept))
    for shard, (seq, deltas, size, last) in totals.items():
        seq = max(seq, (watermarks or {}).get(shard.key, 0))
        fold.shards[shard] = LakeShard(shard, seq, deltas, size, last)
    return fold


def restore_hlc(now: int, fold: LakeFold, old_heads: Iterable[ShardHead] = ()) -> int:
    """The restore's HLC: after ``now`` (the server clock, which stamped every ``serverHlc`` handed out), every commit
    in the lake and every commit the old buffer's heads recorded."""
    return max(now, fold.max_commit_hlc + 1, *(h.last_commit_hlc + 1 for h in old_heads))


def restored_head(shard: LakeShard, at_hlc: int) -> ShardHead:
    """The head of a restored shard: at the lake's position, everything flushed and released there, its last commit
    and release HLCs at ``at_hlc`` (the restore's), nothing published past the release."""
    return ShardHead(
        shard=shard.shard,
        seq=shard.seq,
        bytes_total=shard.bytes,
        deltas_total=shard.deltas,
        flushed_seq=shard.seq,
        flushed_bytes=shard.bytes,
        flushed_deltas=shard.deltas,
        last_commit_hlc=at_hlc,
        released_seq=shard.seq,
        released_hlc=at_hlc,
    )


@dataclass(frozen=True, slots=True)
class ShardAtRisk:
    """Entries the old buffer committed past the lake in one shard (lost by the restore)."""

    shard: str
    deltas: int
    first_seq: int
    last_seq: int
    oldest_commit_ms: int | None
    """When the first of them was committed (``None``: its log item could not be read)."""

    def to_json(self) -> dict[str, Any]:
        """The shard's figures as JSON."""
        return {
            "shard": self.shard,
            "deltas": self.deltas,
            "firstSeq": self.first_seq,
            "lastSeq": self.last_seq,
            "oldestCommitMs": self.oldest_commit_ms,
        }


@dataclass(frozen=True, slots=True)
class AtRisk:
    """What was committed but not flushed: known when the old buffer could be read, else ``reason`` says why not."""

    known: bool
    shards: tuple[ShardAtRisk, ...] = ()
    reason: str = ""

    @property
    def deltas(self) -> int | None:
        """How many committed entries the lake does not hold (``None``: unknown)."""
        return sum(s.deltas for s in self.shards) if self.known else None

    @property
    def oldest_commit_ms(self) -> int | None:
        """When the oldest of them was committed (``None``: none, or unknown)."""
        return min((s.oldest_commit_ms for s in self.shards if s.oldest_commit_ms is not None), default=None)

    @classmethod
    def of(cls, heads: Iterable[ShardHead], lake: Mapping[str, int], first_hlcs: Mapping[str, int | None]) -> AtRisk:
        """The entries past the lake's positions ``lake`` on the old buffer's ``heads``; ``first_hlcs``: the commit
        HLC of the first of them per shard, where it could be read."""
        shards = []
        for head in sorted(heads, key=lambda h: h.shard):
            flushed = lake.get(head.shard.key, 0)
            if head.seq > flushed:
                first = first_hlcs.get(head.shard.key)
                oldest = decode(first)[0] if first else None
                shards.append(ShardAtRisk(head.shard.key, head.seq - flushed, flushed + 1, head.seq, oldest))
        return cls(True, tuple(shards))

    def to_json(self) -> dict[str, Any]:
        """The figures as JSON (``deltas`` null when unknown)."""
        return {
            "known": self.known,
            "deltas": self.deltas,
            "oldestCommitMs": self.oldest_commit_ms,
            "shards": [s.to_json() for s in self.shards],
            **({"reason": self.reason} if self.reason else {}),
        }


@dataclass(frozen=True, slots=True)
class SavedConfig:
    """The gateway's configuration read from the old config table: its storage items (opaque here) and how many of
    each kind (:data:`CONFIG_KINDS`); ``reason`` says why nothing could be read."""

    items: tuple[Any, ...] = ()
    kinds: Mapping[str, int] = field(default_factory=dict)
    reason: str = ""

    def missing(self) -> list[str]:
        """The kinds of configuration a restore could not bring back: all of them when nothing could be read."""
        return list(dict.fromkeys(CONFIG_KINDS.values())) if self.reason else []


@dataclass(frozen=True, slots=True)
class TableRows:
    """Rows a restore wrote for one table: live, and deleted (kept as tombstones)."""

    live: int = 0
    deleted: int = 0


def table_rows(states: Iterable[RowState]) -> dict[str, TableRows]:
    """Live and deleted rows per table."""
    counts: dict[str, list[int]] = {}
    for state in states:
        count = counts.setdefault(state.table, [0, 0])
        count[0 if state.exists else 1] += 1
    return {table: TableRows(live, deleted) for table, (live, deleted) in sorted(counts.items())}


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """What a restore did: rows per table, shards and their positions, the configuration brought back, the
    checkpoint cut at the restored positions, and the data at risk (committed, never flushed: lost)."""

    gateway: str
    restore_hlc: int
    tables: Mapping[str, TableRows]
    shards: Mapping[str, int]
    at_risk: AtRisk
    config: SavedConfig
    checkpoint_id: str | None
    seconds: float

    @property
    def rows(self) -> int:
        """Rows written (deleted ones included)."""
        return sum(t.live + t.deleted for t in self.tables.values())

    def to_json(self) -> dict[str, Any]:
        """The report as JSON, for tools."""
        return {
            "gateway": self.gateway,
            "restoreHlc": str(self.restore_hlc),
            "rows": self.rows,
            "tables": {t: {"live": r.live, "deleted": r.deleted} for t, r in self.tables.items()},
            "shards": dict(self.shards),
            "checkpointId": self.checkpoint_id,
            "config": {
                "restored": dict(self.config.kinds),
                "notRestored": self.config.missing(),
                **({"reason": self.config.reason} if self.config.reason else {}),
            },
            "atRisk": self.at_risk.to_json(),
            "seconds": round(self.seconds, 3),
            "rowsPerSecond": round(self.rows / self.seconds) if self.seconds > 0 else None,
        }

    def lines(self) -> list[str]:
        """The report in plain text, for people."""
        rate = f", {self.rows / self.seconds:,.0f} rows/s" if self.seconds > 0 else ""
        out = [f"gateway {self.gateway!r}: {self.rows:,} rows restored in {self.seconds:.1f} s{rate}"]
        out += [f"  {t}: {r.live:,} live, {r.deleted:,} deleted" for t, r in self.tables.items()]
        out += [f"  shard {s} at {seq}" for s, seq in self.shards.items()]
        out.append(
            f"  checkpoint {self.checkpoint_id} at the restored positions: clients reload it (old cursors get 410)"
            if self.checkpoint_id
            else "  NO checkpoint written: clients get 410 until a checkpoint covers the restored positions"
        )
        if not self.config.reason:
            kinds = ", ".join(f"{kind} {n}" for kind, n in self.config.kinds.items()) or "none there"
            out.append(f"  config from the old config table: {kinds}")
        else:
            out.append(
                f"  config NOT restored ({self.config.reason}; the lake holds none): "
                + ", ".join(self.config.missing())
                + ". Without sync rules any valid token reads every row: apply them again"
            )
        out.append(_at_risk_line(self.at_risk))
        out += [
            f"    {s.shard}: {s.deltas} deltas, seq {s.first_seq}..{s.last_seq}"
            + (f", oldest committed at {s.oldest_commit_ms} ms" if s.oldest_commit_ms is not None else "")
            for s in self.at_risk.shards
        ]
        return out


def _at_risk_line(risk: AtRisk) -> str:
    if not risk.known:
        return f"  committed but never flushed: UNKNOWN ({risk.reason})"
    if not risk.shards:
        return "  committed but never flushed: nothing (the lake held every committed delta)"
    since = f", the oldest committed at {risk.oldest_commit_ms} ms" if risk.oldest_commit_ms is not None else ""
    return f"  committed but never flushed, LOST: {risk.deltas} deltas in {len(risk.shards)} shards{since}"
