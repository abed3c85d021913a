"""The buffer on DynamoDB as the gateway's :class:`lakesync.ports.BufferStore` (docs/buffer.md).

Every read the push and pull paths depend on is strongly consistent. A push chunk reads its basis (shard head, rows,
and the log between the rows written and the head) and commits by one conditional ``PutItem`` of its log item
(:mod:`lakesync.aws.buffer.commit`); its rows and the head follow. The chunk's dedup keys (opaque to the store:
``gw#{key}``, see :func:`lakesync.core.log.dedup_key`) are then recorded with ``BatchWriteItem`` (a record is live
while ``exp > now``, as everywhere else). The log is read by :mod:`lakesync.aws.buffer.log_reader`, the rows by
:mod:`lakesync.aws.buffer.rows`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import replace

from lakesync.aws.buffer.commit import BufferCommits
from lakesync.aws.buffer.items import (
    RegistryAttr,
    dedup_item,
    dedup_record_key,
    head_doubts,
    head_from_item,
    head_key,
    live_delta_ids,
    rows_applied,
)
from lakesync.aws.buffer.rows import fold
from lakesync.aws.items import (
    REGISTRY_PREFIX,
    Item,
    batch_get_all,
    batch_write_all,
    config_items,
    registry_shard,
)
from lakesync.core.hlc import decode
from lakesync.core.log import CommitBasis, LogEntry, ShardHead, ShardId, StoredRow
from lakesync.io_pool import awaited, results_of, submit
from lakesync.ports import read_from_entry

__all__ = ["DynamoDBBufferStore"]


class DynamoDBBufferStore(BufferCommits):
    """The buffer on DynamoDB (deltas, rows, heads, dedup and the shard registry in config): the commit protocol of
    :class:`BufferCommits` (whose constructor it takes), and the reads of heads, commit bases, rows, dedup records and
    the log.

    ``commit_mark_every`` is how many entries apart the commit marks it writes are; reads by commit HLC are correct
    whichever chunks are marks, it only sizes their first request. ``turn_wait_s`` is how long a writer waits for the
    writer before it, ``clock_ms`` the wall clock it judges the writers' deadlines by.
    """

    # -- heads -----------------------------------------------------------------------------------------------------
    def get_heads(
        self, shards: Sequence[ShardId], *, reaching: Mapping[ShardId, int] | None = None
    ) -> dict[ShardId, ShardHead]:
        # The log may hold chunks past its head (committed by a put whose writer has not moved the head
        # yet, or stopped): the head as the log has it is the stored one plus them. A stored head at or past the
        # position `reaching` gives is enough for the caller: the Query for chunks past it is left out.
        return {head.shard: _extended(head, past) for head, past in self._heads_and_past(shards, reaching)}

    def settle_heads(self, shards: Sequence[ShardId], committed_before_ms: int) -> dict[ShardId, ShardHead]:
        """The heads of ``shards``, as :meth:`get_heads`; first, the stored head of a log whose chunks past it were
        all committed before ``committed_before_ms`` is moved over them (``seq`` and the totals; their rows stay
        pending, ``ra`` where it is).

        A writer that stopped between its put and its head update leaves such chunks, and only the next commit to the
        shard would move the head over them: the flush settles them, so a quiet shard's stored head never stays
        behind its log until TTL deletes the chunks (the next put would then claim their sequences again). A live
        writer moves the head within milliseconds of its put; settling its chunk would be safe, but would make the
        next writer wait for ``ra`` and roll forward, hence the age."""
        heads: dict[ShardId, ShardHead] = {}
        for head, past in self._heads_and_past(shards):
            if past and decode(past[-1].commit_hlc)[0] < committed_before_ms:
                self._set_head(head.shard, head.seq, None, past)
            heads[head.shard] = _extended(head, past)
        return heads

    def _heads_and_past(
        self, shards: Sequence[ShardId], reaching: Mapping[ShardId, int] | None = None
    ) -> list[tuple[ShardHead, list[LogEntry]]]:
        """Each stored head, with the entries of the chunks past it (not read for a head at or past its position in
        ``reaching``)."""
        if not shards:
            return []
        items = batch_get_all(self._db, self._t.heads, [head_key(s) for s in dict.fromkeys(shards)])
        found: list[tuple[ShardHead, Future[list[LogEntry]] | None]] = []
        for item in items:
            head = head_from_item(item)
            reached = head.seq >= (reaching or {}).get(head.shard, head.seq + 1)
            found.append((head, submit(self._log.past_head, head) if not reached else None))
        past = iter(results_of(read for _, read in found if read is not None))
        return [(head, next(past) if read is not None else []) for head, read in found]

    def list_shards(self, gateway: str) -> list[ShardId]:
        shards = []
        for item in config_items(self._db, self._t.config, gateway, REGISTRY_PREFIX):
            shards.append(registry_shard(item[RegistryAttr.SORT_KEY]["S"]))
        return sorted(shards)

    # -- a commit's basis, rows and dedup records ------------------------------------------------------------------
    def read_commit_basis(self, shard: ShardId, rows: Sequence[tuple[str, str]]) -> CommitBasis:
        # The head first: every chunk up to its `ra` has its rows written, so the rows read after it hold them; the
        # chunks after `ra` are read from the log and folded in (the row index is a cache of the log).
        head_item = self._head_item(shard)
        head = head_from_item(head_item) if head_item is not None else None
        if head is not None:
            self._headed.add(shard.key)
        applied = rows_applied(head_item)
        tail_read = None
        if head is not None and applied < head.seq:
            tail_read = submit(self._log.tail, shard, applied, head.seq)
        doubts = head_doubts(head_item)
        self._bases[shard.key] = (head.seq, applied, doubts) if head is not None else (0, 0, ())
        with awaited(tail_read):
            stored = self._rows.read_rows(shard.gateway, rows, doubts)
        if tail_read is not None:
            fold(stored, tail_read.result(), wanted=set(rows))
        return CommitBasis(head, stored)

    def get_rows(self, gateway: str, rows: Sequence[tuple[str, str]]) -> dict[tuple[str, str], StoredRow]:
        return self._rows.get_rows(gateway, rows)

    def seen_delta_ids(self, gateway: str, delta_ids: Sequence[str], now_s: int) -> set[str]:
        ids = list(dict.fromkeys(delta_ids))
        if not ids:
            return set()
        items = batch_get_all(self._db, self._t.dedup, [dedup_record_key(gateway, d) for d in ids])
        return live_delta_ids(gateway, items, now_s)

    def record_delta_ids(self, gateway: str, delta_ids: Sequence[str], expires_at: int) -> None:
        items = [dedup_item(gateway, d, expires_at) for d in dict.fromkeys(delta_ids)]
        batch_write_all(self._db, self._t.dedup, items)

    # -- the log ---------------------------------------------------------------------------------------------------
    def read_log(self, shard: ShardId, after_seq: int, limit: int, *, images: bool = True) -> list[LogEntry]:
        return self._log.read_log(shard, after_seq, limit, images=images)

    def read_log_at(
        self, shard: ShardId, seq: int, limit: int, *, images: bool = True
    ) -> tuple[int | None, list[LogEntry]]:
        found = self._log.read_at_chunk_end(shard, seq, limit, images)
        if found is not None:
            return found
        # Position 0, a position inside a chunk, or a chunk after it without `pv`: read from the entry itself.
        return read_from_entry(self, shard, seq, limit, images=images)

    def read_log_by_commit_hlc(
        self, shard: ShardId, after_commit_hlc: int, limit: int, *, images: bool = True
    ) -> list[LogEntry]:
        return self._log.read_log_by_commit_hlc(shard, after_commit_hlc, limit, images=images)

    def last_commit_mark(self, shard: ShardId, at_or_below_hlc: int) -> Item | None:
        """The log item of the last commit mark whose ``chlc`` is at or below ``at_or_below_hlc``
        (:meth:`LogReader.last_commit_mark`)."""
        return self._log.last_commit_mark(shard, at_or_below_hlc)

    def chunk_items(
        self,
        shard: ShardId,
        after_seq: int,
        request_size: Callable[[], int],
        *,
        projection: str | None = None,
        inside: bool = False,
        through: int | None = None,
    ) -> Iterator[Item]:
        """The shard's log items after ``after_seq`` in sequence order (:meth:`LogReader.chunk_items`)."""
        return self._log.chunk_items(
            shard, after_seq, request_size, projection=projection, inside=inside, through=through
        )


def _extended(head: ShardHead, past: Sequence[LogEntry]) -> ShardHead:
    """``head`` moved over the entries ``past`` that follow it."""
    if not past:
        return head
    return replace(
        head,
        seq=past[-1].seq,
        last_commit_hlc=past[-1].commit_hlc,
        bytes_total=head.bytes_total + sum(e.size for e in past),
        deltas_total=head.deltas_total + len(past),
    )
