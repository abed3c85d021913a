"""The log of some shards between two positions, read whole and grouped by row: what a fold of a table's rows at a
position reads after its base (a checkpoint's positions, or the start of the log).

Used by the scope difference (:mod:`lakesync.gateway.scope_change`) and the membership view
(:mod:`lakesync.gateway.membership_view`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lakesync.core.log import LogEntry, ShardId
from lakesync.gateway.log_pages import PAGE_MAX, expired_any_error
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
) -> dict[RowKey, list[LogEntry]]:
    """The entries of ``shards`` after ``base`` up to ``end`` (by shard key; absent: 0), with their row images, by
    row in commit order; the shards are read at once.

    Raises:
        CursorExpiredError: the log was released past ``base`` meanwhile (a read stopped at a gap).
    """

    def read(shard: ShardId) -> list[LogEntry]:
        after, stop = base.get(shard.key, 0), end.get(shard.key, 0)
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
