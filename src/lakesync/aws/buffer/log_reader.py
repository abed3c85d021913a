"""Reads of the buffer's log on DynamoDB: by position (a cursor's page, a range, the tail a commit basis folds in)
and by commit HLC (from the last commit mark at or below it, :mod:`lakesync.aws.buffer.log_chunks`).

Every read is strongly consistent and returns entries in sequence order, up to the first gap (TTL deletes chunks in no
set order). Requests are sized from the entries per chunk seen so far, so that one request usually fills a page. The
last chunk a read decoded is remembered per shard for a short while: a client paging through a backlog asks for its
next page at once, and it starts in that chunk or right after it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from lakesync.aws.buffer.items import ChunkAttr, chunk_span, decode_chunk_part
from lakesync.aws.buffer.log_chunks import FIRST_KEYED, decode_entries
from lakesync.aws.items import Item, num_attr, query_all, storage_error, str_attr
from lakesync.aws.tables import COMMIT_INDEX, TableNames
from lakesync.core.errors import StorageError
from lakesync.core.log import LOG_CHUNK_MAX_ENTRIES, LogEntry, ShardHead, ShardId
from lakesync.io_pool import awaited, on_pool_thread, submit

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["REMEMBERED_CHUNK_MS", "LogReader", "contiguous"]

_REMEMBERED_CHUNKS = 32
"""Shards whose last chunk read a store keeps (a chunk is at most an item: 400 KB)."""
REMEMBERED_CHUNK_MS = 5_000
"""How long a chunk read is used again (a client paging through a backlog asks for its next page at once; a restore
from the lake holds the gateway this long at least, so that no chunk of the old log is used again)."""

_PER_CHUNK = 48
"""Entries per log item to expect before a read has seen any: a full push chunk."""


class LogReader:
    """The log of the buffer's shards, read from the deltas table.

    ``mark_every`` is how many entries apart the commit marks are (it sizes the first request of a read by commit
    HLC); ``clock_ms`` is the wall clock the remembered chunks age by.
    """

    def __init__(
        self, client: DynamoDBClient, names: TableNames, *, mark_every: int, clock_ms: Callable[[], int]
    ) -> None:
        self._db = client
        self._t = names
        self._mark_every = mark_every
        self._clock_ms = clock_ms
        # The last chunk a read of each shard decoded, and when it was read (`clock_ms`).
        self._last_chunks: dict[str, tuple[int, Item]] = {}
        self._last_chunks_lock = threading.Lock()

    def read_log(self, shard: ShardId, after_seq: int, limit: int, *, images: bool = True) -> list[LogEntry]:
        """Up to ``limit`` entries after ``after_seq``, in order, up to the first gap."""
        # `chunk_items` starts with the chunk holding entry `after_seq + 1`. Sequences are contiguous, so stop at the
        # first gap (TTL deletes chunks in no set order). (`inside`: reads by
        # position other than a cursor's check at a chunk end start inside a chunk, mostly: a page that ended inside
        # one, or a read from an entry.)
        return contiguous(self._read_chunks(shard, after_seq, limit, images, inside=True), after_seq + 1)

    def read_at_chunk_end(
        self, shard: ShardId, seq: int, limit: int, images: bool
    ) -> tuple[int | None, list[LogEntry]] | None:
        """A cursor's read from entry ``seq`` (as :meth:`lakesync.ports.BufferStore.read_log_at`) when the remembered
        chunk or one forward Query after ``seq`` settles it; ``None`` otherwise (position 0, a position inside a
        chunk, or a chunk after it without ``pv``: the caller reads from the entry itself)."""
        remembered = self._remembered_chunk(shard, seq)
        if remembered is not None:
            found = self._read_from_remembered(shard, remembered, seq, limit, images)
            if found is not None:
                return found
        if seq > 0:
            return self._read_after_chunk_end(shard, seq, limit, images)
        return None

    # -- the last chunk read: a cursor's next page starts in it, or right after it ---------------------------------
    def _remember_chunk(self, shard: ShardId, item: Item) -> None:
        """Keep the last chunk a read decoded (items are never changed once put: the same key always holds the same
        entries)."""
        if ChunkAttr.ENTRIES not in item:
            return
        with self._last_chunks_lock:
            self._last_chunks.pop(shard.key, None)
            self._last_chunks[shard.key] = (self._clock_ms(), item)
            while len(self._last_chunks) > _REMEMBERED_CHUNKS:
                del self._last_chunks[next(iter(self._last_chunks))]

    def _remembered_chunk(self, shard: ShardId, seq: int) -> Item | None:
        """The chunk remembered for ``shard`` if it holds entry ``seq`` or starts right after it (where a page that
        ended inside it, or opened it to see whether more follows, leaves the next one), read in the last
        :data:`REMEMBERED_CHUNK_MS`."""
        with self._last_chunks_lock:
            remembered = self._last_chunks.get(shard.key)
        if remembered is None or not 0 <= self._clock_ms() - remembered[0] <= REMEMBERED_CHUNK_MS:
            return None
        item = remembered[1]
        first, count, _ = chunk_span(item)
        if first <= seq <= first + count - 1 or (first == seq + 1 and ChunkAttr.PREVIOUS_HLC in item):
            return item
        return None

    def _read_from_remembered(
        self, shard: ShardId, item: Item, seq: int, limit: int, images: bool
    ) -> tuple[int | None, list[LogEntry]] | None:
        """A cursor read from the remembered chunk: the commit HLC of entry ``seq`` and the entries after it, the
        chunk's own first, then by one Query the chunks after it. ``None`` when the log after it does not continue
        from it (the caller then reads as if nothing were remembered)."""
        first, count, first_hlc = chunk_span(item)
        last = first + count - 1
        at_hlc = first_hlc + (seq - first) if seq >= first else int(item[ChunkAttr.PREVIOUS_HLC]["N"])
        entries = decode_chunk_part(shard, item, seq + 1 - first, limit, images)
        if len(entries) >= limit:
            return at_hlc, entries
        after = self._read_after_chunk_end(shard, last, limit - len(entries), images)
        if after is None or (after[0] is not None and after[0] != first_hlc + count - 1):
            return None
        return at_hlc, entries + after[1]

    def _read_after_chunk_end(
        self, shard: ShardId, seq: int, limit: int, images: bool
    ) -> tuple[int | None, list[LogEntry]] | None:
        """The log read after ``seq`` by one forward Query, when that settles it: the chunk right after
        ``seq`` records the commit HLC of entry ``seq`` (``pv``), and no chunk after ``seq`` means nothing to read
        (``None`` for the HLC: the caller checks the position against the head). ``None`` otherwise (a position
        inside a chunk, a gap, a chunk without ``pv``)."""
        first_items: list[Item] = []
        # The chunks holding entries `seq + 1 .. seq + limit` start in that range: the key bounds the read. It spans a
        # chunk's most entries at least, so that nothing in it still shows `seq` is in the log's last chunk, or past it.
        bounds = {":a": FIRST_KEYED + seq + 1, ":b": FIRST_KEYED + seq + max(limit, LOG_CHUNK_MAX_ENTRIES)}

        def after_it(request_size: Callable[[], int]) -> Iterator[Item]:
            for item in self._chunk_pages(shard, f"{ChunkAttr.SEQ} BETWEEN :a AND :b", bounds, request_size, None):
                if not first_items:
                    first_items.append(item)
                    if chunk_span(item)[0] != seq + 1 or ChunkAttr.PREVIOUS_HLC not in item:
                        return
                yield item

        entries = self._read_chunks(shard, seq, limit, images, source=after_it)
        if not first_items:
            return None, []
        if not entries:
            return None
        return int(first_items[0][ChunkAttr.PREVIOUS_HLC]["N"]), contiguous(entries, seq + 1)

    # -- by commit HLC ---------------------------------------------------------------------------------------------
    def read_log_by_commit_hlc(
        self, shard: ShardId, after_commit_hlc: int, limit: int, *, images: bool = True
    ) -> list[LogEntry]:
        """Up to ``limit`` entries whose commit HLC is past ``after_commit_hlc``, in order, up to the first gap."""
        # Commit HLCs grow with the sequence, so a commit mark (an entry of the sparse index) whose last commit HLC is
        # at or below `after_commit_hlc` shows that every entry up to its sequence is too. Read the table after the
        # last such mark (from the start when there is none: the log is young, or TTL deleted it) and drop the entries
        # at or below the position: about a mark interval and a chunk of them, which the first request asks for too.
        if limit <= 0:
            return []
        mark = self.last_commit_mark(shard, after_commit_hlc)
        mark_first, mark_count, _ = chunk_span(mark) if mark is not None else (1, 0, 0)
        entries = self._read_chunks(
            shard,
            mark_first + mark_count - 1,
            limit,
            images,
            after_hlc=after_commit_hlc,
            skip=self._mark_every,
            per_chunk=int(mark[ChunkAttr.COUNT]["N"]) if mark is not None else _PER_CHUNK,
        )
        # From the first entry past the position (the entries before it may be gone: TTL deletes in no set order),
        # up to the first gap, as `read_log`.
        return contiguous(entries, entries[0].seq if entries else 0)

    def last_commit_mark(self, shard: ShardId, at_or_below_hlc: int) -> Item | None:
        """The log item of the last commit mark whose ``chlc`` is at or below ``at_or_below_hlc`` (its keys, ``chlc``,
        ``n`` and ``c``: what the ``by_commit`` index projects), or ``None`` when the index holds none."""
        try:
            out = self._db.query(
                TableName=self._t.deltas,
                IndexName=COMMIT_INDEX,
                KeyConditionExpression=f"#sh = :s AND {ChunkAttr.MARK_HLC} <= :h",
                ExpressionAttributeNames={"#sh": ChunkAttr.SHARD},
                ExpressionAttributeValues={":s": str_attr(shard.key), ":h": num_attr(at_or_below_hlc)},
                ConsistentRead=True,
                ScanIndexForward=False,
                Limit=1,
            )
        except ClientError as exc:
            raise storage_error(exc, "Query") from exc
        found = out.get("Items", [])
        return found[0] if found else None

    # -- the items ------------------------------------------------------------------------------------------------
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
        """The shard's log items after ``after_seq`` in sequence order, starting with the one holding entry
        ``after_seq + 1`` when the log has it; requests are made as the items are consumed, each asking for
        ``request_size()`` items. ``projection``: a ProjectionExpression (it must name ``seq``, ``n`` and ``c``).
        ``inside``: the position is likely inside a chunk (a cursor pull reads from the entry it stands on, the last
        of a chunk), so the chunk holding it is asked for at once, beside the items after it. ``through``: the last
        entry wanted; the log is then read no further than the chunk holding it."""
        # Sequences start at 1: no chunk starts at or before position 0.
        look_back = after_seq > 0
        # The chunk holding the position is asked for beside the items after it. On a pool thread it would run first
        # and alone (submit runs work there at once), so there it is read only once the items after it show it is
        # needed.
        early = (
            submit(self._chunk_at_or_before, shard, after_seq, projection)
            if inside and look_back and not on_pool_thread()
            else None
        )
        later = (
            self._chunk_pages(shard, f"{ChunkAttr.SEQ} > :a", {":a": FIRST_KEYED + after_seq}, request_size, projection)
            if through is None
            else self._chunk_pages(
                shard,
                f"{ChunkAttr.SEQ} BETWEEN :a AND :b",
                {":a": FIRST_KEYED + after_seq + 1, ":b": FIRST_KEYED + max(through, after_seq + 1)},
                request_size,
                projection,
            )
        )
        # Waited for even when not needed, or when the forward Query fails: no request outlives the read (Lambda
        # freezes a function's threads between invocations).
        with awaited(early):
            following = next(later, None)
        if following is None or chunk_span(following)[0] != after_seq + 1:
            # Entry `after_seq + 1` is inside a chunk that starts at or before `after_seq` (a position inside a
            # chunk), or not in the log (yet, or any more).
            if early is not None:
                holding = early.result()
            else:
                holding = self._chunk_at_or_before(shard, after_seq, projection) if look_back else None
            if holding is not None:
                first, count, _ = chunk_span(holding)
                if first + count - 1 > after_seq:
                    yield holding
        if following is not None:
            yield following
            yield from later

    def _chunk_pages(
        self,
        shard: ShardId,
        condition: str,
        bounds: Mapping[str, int],
        request_size: Callable[[], int],
        projection: str | None,
        *,
        forward: bool = True,
    ) -> Iterator[Item]:
        kwargs: dict[str, Any] = {
            "TableName": self._t.deltas,
            "KeyConditionExpression": f"#sh = :s AND {condition}",
            "ExpressionAttributeNames": {"#sh": ChunkAttr.SHARD},
            "ExpressionAttributeValues": {
                ":s": str_attr(shard.key),
                **{name: num_attr(v) for name, v in bounds.items()},
            },
            "ConsistentRead": True,
            "ScanIndexForward": forward,
        }
        if projection is not None:
            kwargs["ProjectionExpression"] = projection
        return query_all(self._db, page_size=request_size, **kwargs)

    def _chunk_at_or_before(self, shard: ShardId, seq: int, projection: str | None) -> Item | None:
        """The last chunk that starts at or before ``seq``, if any."""
        bounds = {":lo": FIRST_KEYED, ":hi": FIRST_KEYED + seq}
        pages = self._chunk_pages(
            shard, f"{ChunkAttr.SEQ} BETWEEN :lo AND :hi", bounds, lambda: 1, projection, forward=False
        )
        return next(pages, None)

    def _read_chunks(
        self,
        shard: ShardId,
        after_seq: int,
        limit: int,
        images: bool,
        *,
        after_hlc: int | None = None,
        skip: int = 0,
        per_chunk: float = _PER_CHUNK,
        inside: bool = False,
        source: Callable[[Callable[[], int]], Iterator[Item]] | None = None,
    ) -> list[LogEntry]:
        """Up to ``limit`` entries ``seq > after_seq`` (and ``commit_hlc > after_hlc``), in order, from the chunks that
        hold them. ``skip`` (entries read before the first one kept) and ``per_chunk`` (entries per chunk) are what to
        expect, to size the requests; ``inside`` as for :meth:`chunk_items`; ``source``: the items to read instead
        of :meth:`chunk_items`' (given the request size)."""
        floor = -1 if after_hlc is None else after_hlc
        entries: list[LogEntry] = []
        items_read = entries_read = skipped = 0

        def request_size() -> int:
            # A chunk holds 1 to LOG_CHUNK_MAX_ENTRIES entries: ask for as many chunks as the page (and the entries
            # still expected before it) needs at the entries per chunk seen so far (`per_chunk`, else a push's chunk,
            # 48, before the first answer), a tenth more (chunks vary: a push's last chunk is smaller), and two more
            # (the first chunk holds entries before the position), so that one request usually fills the page; a few
            # surplus chunks cost less than a second round trip.
            per_item = entries_read / items_read if items_read else per_chunk
            ahead = 0 if entries else max(0, skip - skipped)
            return min(1000, 2 + math.ceil(1.1 * (limit - len(entries) + ahead) / per_item))

        items = (
            source(request_size)
            if source is not None
            else self.chunk_items(
                shard,
                after_seq,
                request_size,
                inside=inside,
                # By sequence alone, the entries wanted end at `after_seq + limit`.
                through=after_seq + limit if after_hlc is None and not skip else None,
            )
        )
        last_item: Item | None = None
        for item in items:
            last_item = item
            first, count, first_hlc = chunk_span(item)
            items_read += 1
            entries_read += count
            # The entries past the position (and the commit HLC) that the read still wants, decoded alone.
            start = max(0, after_seq + 1 - first, floor + 1 - first_hlc)
            kept = decode_chunk_part(shard, item, start, limit - len(entries), images)
            skipped += min(start, count)
            entries.extend(kept)
            if len(entries) >= limit:
                break
        if last_item is not None:
            self._remember_chunk(shard, last_item)
        return entries

    # -- what a commit basis and the head read fold in -------------------------------------------------------------
    def past_head(self, head: ShardHead) -> list[LogEntry]:
        """The entries of the chunks that follow ``head`` (one Query, usually empty)."""
        pages = self._chunk_pages(head.shard, f"{ChunkAttr.SEQ} > :a", {":a": FIRST_KEYED + head.seq}, lambda: 25, None)
        entries: list[LogEntry] = []
        for item in pages:
            first, _, first_hlc = chunk_span(item)
            if first != head.seq + len(entries) + 1:
                break
            entries.extend(decode_entries(head.shard, first, first_hlc, item[ChunkAttr.ENTRIES]["B"], images=False))
        return entries

    def tail(self, shard: ShardId, after_seq: int, through_seq: int) -> list[LogEntry]:
        """Entries ``after_seq + 1 .. through_seq``, all of them (committed before the head was read)."""
        for attempt in range(8):
            entries = self._read_chunks(shard, after_seq, through_seq - after_seq, images=False)
            entries = contiguous(entries, after_seq + 1)
            if len(entries) == through_seq - after_seq:
                return entries
            time.sleep(0.005 * 2**attempt)  # a gap: a chunk not visible to the Query yet
        raise StorageError(f"the log of shard {shard.key!r} is missing entries in ({after_seq}, {through_seq}]")


def contiguous(entries: list[LogEntry], first_seq: int) -> list[LogEntry]:
    """The entries from ``first_seq`` on, up to the first gap."""
    expected = first_seq
    for i, entry in enumerate(entries):
        if entry.seq != expected:
            return entries[:i]
        expected += 1
    return entries
