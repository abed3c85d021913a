"""One row's committed history, gathered from the lake and the live buffer (what ``lakesync explain`` reads).

Every committed delta is in the buffer's log until the flush releases it, and in the Iceberg delta log once flushed
(exactly once, under its shard and sequence number). A row's history is the union of the two, keyed by
``(shard, seq, deltaId)`` (a buffer rebased behind the lake re-uses sequence numbers for other deltas, docs/lake.md):
the lake's copy is preferred, as it says when it was flushed. The deltas are the *effective* ones
the log holds (the columns that won when committed): a write that lost at push time was never committed, so it is in
neither store.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from lakesync.core import hlc as hlc_mod
from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta
from lakesync.core.merge import RowState, state_from_json

__all__ = ["FlushSnapshot", "HistoryDelta", "LakeRow", "combine", "flush_snapshot", "flushed_at", "lake_row"]


@dataclass(frozen=True, slots=True)
class HistoryDelta:
    """One committed delta of a row: the delta the log holds, its log position and commit HLC, and when the flush
    put it in the lake (epoch ms; ``None``: still only in the buffer)."""

    delta: RowDelta
    shard: str
    seq: int
    commit_hlc: int
    flushed_ms: int | None = None

    @property
    def committed_ms(self) -> int:
        """When it was committed (epoch ms): the wall clock of its commit HLC."""
        return hlc_mod.decode(self.commit_hlc)[0]

    @property
    def key(self) -> tuple[str, int, str]:
        """``(shard, seq, deltaId)``: the entry, wherever it is read."""
        return self.shard, self.seq, self.delta.delta_id


@dataclass(frozen=True, slots=True)
class FlushSnapshot:
    """A delta-log snapshot as the flush wrote it: when it was committed (epoch ms) and its watermarks (per shard,
    the last sequence number the table holds)."""

    committed_ms: int
    watermarks: Mapping[str, int]


def flushed_at(shard: str, seq: int, snapshots: Iterable[FlushSnapshot]) -> int | None:
    """When entry ``seq`` of ``shard`` reached the lake: the earliest snapshot whose watermark covers it, or ``None``
    when none does."""
    times = [s.committed_ms for s in snapshots if s.watermarks.get(shard, 0) >= seq]
    return min(times) if times else None


@dataclass(frozen=True, slots=True)
class LakeRow:
    """What the lake holds of one row.

    Attributes:
        deltas: Its deltas in the delta log, each with when it was flushed.
        state: Its row in the state table (the compacted fold), or ``None`` when the table has none.
        state_updated_ms: When that state row was last written (epoch ms).
        notes: What the reader could not read, for people.
    """

    deltas: tuple[HistoryDelta, ...] = ()
    state: RowState | None = None
    state_updated_ms: int | None = None
    notes: tuple[str, ...] = field(default=())


def combine(lake: Sequence[HistoryDelta], buffer: Sequence[HistoryDelta]) -> tuple[HistoryDelta, ...]:
    """The row's history: each entry once (the lake's copy preferred), in commit order."""
    entries = {d.key: d for d in buffer}
    entries.update((d.key, d) for d in lake)
    return tuple(sorted(entries.values(), key=lambda d: (d.commit_hlc, d.shard, d.seq)))


def _history_delta(table: str, row_id: str, record: Mapping[str, object]) -> HistoryDelta:
    """A delta-log record as a lake query returns it: ``op``, ``client_id``, ``hlc``, ``delta_id``, ``shard``,
    ``seq``, ``commit_hlc`` (numbers as numbers or decimal text) and ``columns``, the JSON text
    ``[[name, canonical value text], ...]``."""
    columns = tuple(ColumnDelta(name, json.loads(text)) for name, text in json.loads(str(record["columns"])))
    delta = RowDelta(
        DeltaOp(str(record["op"])),
        table,
        row_id,
        str(record["client_id"]),
        columns,
        int(str(record["hlc"])),
        str(record["delta_id"]),
    )
    return HistoryDelta(delta, str(record["shard"]), int(str(record["seq"])), int(str(record["commit_hlc"])))


def flush_snapshot(committed_ms: int, watermarks: str) -> FlushSnapshot:
    """A delta-log snapshot from its commit time and its ``lakesync.flush.watermarks`` property (JSON text)."""
    return FlushSnapshot(committed_ms, {str(k): int(v) for k, v in json.loads(watermarks).items()})


def lake_row(
    table: str,
    row_id: str,
    records: Iterable[Mapping[str, object]],
    snapshots: Iterable[FlushSnapshot],
    state: tuple[str, int] | None,
    notes: Sequence[str] = (),
) -> LakeRow:
    """The :class:`LakeRow` of a lake reader's three answers: the row's delta-log records, the flush snapshots, and
    its state-table row as ``(_state text, _updated_at epoch ms)`` (``None``: no row)."""
    taken = list(snapshots)
    deltas = []
    for record in records:
        entry = _history_delta(table, row_id, record)
        deltas.append(
            HistoryDelta(
                entry.delta, entry.shard, entry.seq, entry.commit_hlc, flushed_at(entry.shard, entry.seq, taken)
            )
        )
    row_state = None if state is None else state_from_json(table, row_id, json.loads(state[0]))
    updated = None if state is None else state[1]
    return LakeRow(
        tuple(sorted(deltas, key=lambda d: (d.commit_hlc, d.shard, d.seq))), row_state, updated, tuple(notes)
    )
