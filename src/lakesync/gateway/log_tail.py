"""The log of some shards between two positions, read whole and grouped by row: what a fold of a table's rows at a
position reads after its base (a checkpoint's positions, or the start of the log).

Used by the scope difference (:mod:`lakesync.gateway.scope_change`) and the membership view
(:mod:`lakesync.gateway.membership_view`). The difference serves many pages over the same range of the log (its cursor
keeps its positions until it is done): a :class:`~lakesync.gateway.tail_cache.TailCache` keeps the shards' ranges it
read, so each page reads only what none before it did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lakesync.core.log import LogEntry, ShardId
from lakesync.gateway.log_pages import PAGE_MAX, expired_any_error
from lakesync.gateway.tail_cache import TailCache
from lakesync.io_pool import results_of, submit
from lakesync.ports import BufferStore

__all__ = ["RowKey", "read_tail"]

RowKey = tuple[str, str]
"""A row as ``(table, row_id)``."""


def read_tail(
    buffer: BufferStore,
    gateway: str,
    shards: Sequence[ShardId],
    base: Mapping[str, int],
    end: Mapping[str, int],
    *,
    cache: TailCache | None = None,
    end_marks: Mapping[str, int] | None = None,
) -> dict[RowKey, list[LogEntry]]:
    """The entries of ``shards`` after ``base`` up to ``end`` (by shard key; absent: 0), with their row images, by
    row in commit order; the shards are read at once. With a ``cache`` and ``end_marks`` (the commit HLC of the
    entry at each ``end``, as a cursor carries it), a shard's range is read once and then served from the cache.

    Raises:
        CursorExpiredError: the log was released past ``base`` meanwhile (a read stopped at a gap).
    """

    def read(shard: ShardId) -> list[LogEntry]:
        after, stop = base.get(shard.key, 0), end.get(shard.key, 0)
        key = (gateway, shard.key, after, stop, end_marks.get(shard.key, 0)) if end_marks is not None else None
        kept = cache.get(key) if cache is not None and key is not None else None
        if kept is not None:
            return kept
        out = _read_range(shard, after, stop)
        if cache is not None and key is not None:
            cache.put(key, out)
        return out

    def _read_range(shard: ShardId, after: int, stop: int) -> list[LogEntry]:
        out: list[LogEntry] = []
        while after < stop:
            fetched = buffer.read_log(shard, after, min(PAGE_MAX, stop - after), images=True)
            if not fetched:
                raise expired_any_error(gateway)  # released meanwhile: the caller starts over
            out.extend(e for e in fetched if e.seq <= stop)
            after = fetched[-1].seq
        return out

    rows: dict[RowKey, list[LogEntry]] = {}
    for entries in results_of([submit(read, s) for s in shards]):
        for entry in entries:
            rows.setdefault((entry.shard.table, entry.delta.row_id), []).append(entry)
    return rows
