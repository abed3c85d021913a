"""DynamoDB adapters of the gateway ports.

Every read the push and pull paths depend on is strongly consistent. A push chunk reads its basis (shard head, rows,
and the log between the rows written and the head) and commits by one conditional ``PutItem`` of its log item,
keyed by the chunk's first sequence, where no item is (:class:`DynamoDBBufferStore`,
docs/design/commit-without-transaction.md); its rows and the head follow. A put refused because the key is taken is
mapped to :class:`CommitConflict` (retried by the push), throttling to ``StorageBusyError`` and any other refusal to
``StorageError`` at once. The chunk's dedup keys (opaque to the store: ``gw#{key}``, see
:func:`lakesync.core.log.dedup_key`) are then recorded with ``BatchWriteItem`` (a record is live while
``exp > now``, as everywhere else). The chunk's log item carries ``chlc`` -- an entry of the sparse ``by_commit``
index -- only when it is a commit mark (:mod:`lakesync.aws.buffer.log_chunks`); reads by commit HLC start from the
last mark at or below the position and walk the table from there.
Items are built by hand (no TypeSerializer) because this is the hot path.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from lakesync.aws.buffer.items import (
    DOUBT_PREFIX,
    ChunkAttr,
    DoubtAttr,
    HeadAttr,
    RegistryAttr,
    RowAttr,
    chunk_item,
    chunk_span,
    decode_chunk_part,
    dedup_item,
    dedup_record_key,
    doubt_from_record,
    doubt_record_item,
    doubt_record_key,
    doubts_update,
    head_doubts,
    head_from_item,
    head_key,
    head_last_commit_hlc,
    head_seq,
    live_delta_ids,
    new_head_item,
    record_pks,
    registry_item,
    row_from_item,
    row_item,
    row_item_key,
    rows_applied,
)
from lakesync.aws.buffer.log_chunks import (
    COMMIT_MARK_EVERY,
    FIRST_KEYED,
    decode_entries,
)
from lakesync.aws.buffer.row_doubts import (
    DOUBT_RUN_ENTRIES,
    Doubt,
    alt_key,
    deadline_ms,
    until_ms,
)
from lakesync.aws.errors import condition_failed
from lakesync.aws.items import (
    REGISTRY_PREFIX,
    THROTTLED_CODES,
    Item,
    batch_get_all,
    batch_write,
    batch_write_all,
    encode_row_state,
    num_attr,
    query_all,
    registry_shard,
    storage_error,
    str_attr,
)
from lakesync.aws.tables import (
    COMMIT_INDEX,
    TTL_ATTRIBUTE,
    TTL_TABLES,
    TableNames,
    connections_table_spec,
    table_specs,
)
from lakesync.core.errors import (
    BackpressureError,
    StorageBusyError,
    StorageError,
)
from lakesync.core.hlc import decode
from lakesync.core.log import (
    ITEM_LIMIT_BYTES,
    LOG_CHUNK_MAX_ENTRIES,
    LOG_TTL_S,
    ROW_RECENT_KEYS,
    Commit,
    CommitBasis,
    CommitConflict,
    LogEntry,
    ShardHead,
    ShardId,
    StoredRow,
    dedup_key,
    recent_key,
    row_key,
)
from lakesync.core.merge import merge
from lakesync.io_pool import awaited, on_pool_thread, results_of, submit
from lakesync.ports import read_from_entry

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

logger = logging.getLogger(__name__)


_REMEMBERED_CHUNKS = 32
"""Shards whose last chunk read a store keeps (a chunk is at most an item: 400 KB)."""
_REMEMBERED_CHUNK_MS = 30_000
"""How long a chunk read is used again (a client paging through a backlog asks for its next page at once)."""

_PER_CHUNK = 48
"""Entries per log item to expect before a read has seen any: a full push chunk."""

_NEW_CHUNK = f"attribute_not_exists({ChunkAttr.SEQ})"
"""The commit: a put where no chunk is."""
_NEWER_ROW = f"attribute_not_exists({RowAttr.KEY}) OR {RowAttr.VERSION} < :v"
"""A row put that never goes backwards."""
_MOVE_HEAD = (
    f"SET {HeadAttr.SEQ} = :end, {HeadAttr.LAST_COMMIT_HLC} = :lch,"
    f" {HeadAttr.BYTES_TOTAL} = {HeadAttr.BYTES_TOTAL} + :b, {HeadAttr.DELTAS_TOTAL} = {HeadAttr.DELTAS_TOTAL} + :d"
)
"""A head moved over chunks: its position, last commit HLC and totals."""


class DynamoDBBufferStore:
    """The buffer on DynamoDB (deltas, rows, heads, dedup and the shard registry in config).

    ``commit_mark_every`` is how many entries apart the commit marks it writes are (:func:`is_commit_mark`); reads
    by commit HLC are correct whichever chunks are marks, it only sizes their first request.

    A commit is a conditional put of the chunk's log item, keyed by its first sequence
    (:mod:`lakesync.aws.buffer.log_chunks`); its rows are written after it, in batches on the chunk's turn, and a
    writer that takes a turn over declares the chunks it takes over in doubt (:mod:`lakesync.aws.buffer.row_doubts`):
    ``turn_wait_s`` is how long it waits for the writer before it, ``clock_ms`` the wall clock it judges the writers'
    deadlines by.
    """

    def __init__(
        self,
        client: DynamoDBClient,
        names: TableNames,
        *,
        log_ttl_s: int = LOG_TTL_S,
        commit_mark_every: int = COMMIT_MARK_EVERY,
        turn_wait_s: float = 2.0,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        if commit_mark_every < 1:
            raise ValueError(f"commit_mark_every must be at least 1, not {commit_mark_every}")
        self._db = client
        self._t = names
        self._log_ttl_s = log_ttl_s
        self._mark_every = commit_mark_every
        self._turn_wait_s = turn_wait_s
        self._clock_ms: Callable[[], int] = clock_ms or (lambda: int(time.time() * 1000))
        # The shards whose head this store has read: a commit planned on one needs no check that it exists.
        self._headed: set[str] = set()
        # The rows of in-doubt runs, by (shard, first and last position): their main keys.
        self._doubt_rows: dict[tuple[str, int, int], frozenset[str]] = {}
        # The last basis read of each shard: the head's `seq`, `ra` and in-doubt runs.
        self._bases: dict[str, tuple[int, int, tuple[Doubt, ...]]] = {}
        # The last chunk a read of each shard decoded, and when it was read (`clock_ms`).
        self._last_chunks: dict[str, tuple[int, Item]] = {}
        self._last_chunks_lock = threading.Lock()

    # -- reads ---------------------------------------------------------------------------------------------------
    def _batch_get(self, table: str, keys: list[Item]) -> list[Item]:
        return batch_get_all(self._db, table, keys)

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
        items = self._batch_get(self._t.heads, [head_key(s) for s in dict.fromkeys(shards)])
        found: list[tuple[ShardHead, Future[list[LogEntry]] | None]] = []
        for item in items:
            head = head_from_item(item)
            reached = head.seq >= (reaching or {}).get(head.shard, head.seq + 1)
            found.append((head, submit(self._past_head, head) if not reached else None))
        past = iter(results_of(read for _, read in found if read is not None))
        return [(head, next(past) if read is not None else []) for head, read in found]

    def _past_head(self, head: ShardHead) -> list[LogEntry]:
        """The entries of the chunks that follow ``head`` (one Query, usually empty)."""
        pages = self._chunk_pages(head.shard, f"{ChunkAttr.SEQ} > :a", {":a": FIRST_KEYED + head.seq}, lambda: 25, None)
        entries: list[LogEntry] = []
        for item in pages:
            first, _, first_hlc = chunk_span(item)
            if first != head.seq + len(entries) + 1:
                break
            entries.extend(decode_entries(head.shard, first, first_hlc, item[ChunkAttr.ENTRIES]["B"], images=False))
        return entries

    def list_shards(self, gateway: str) -> list[ShardId]:
        shards = []
        for item in self._query(
            TableName=self._t.config,
            KeyConditionExpression=f"{RegistryAttr.GATEWAY} = :gw AND begins_with({RegistryAttr.SORT_KEY}, :p)",
            ExpressionAttributeValues={":gw": str_attr(gateway), ":p": str_attr(REGISTRY_PREFIX)},
            ConsistentRead=True,
        ):
            shards.append(registry_shard(item[RegistryAttr.SORT_KEY]["S"]))
        return sorted(shards)

    def get_rows(self, gateway: str, rows: Sequence[tuple[str, str]]) -> dict[tuple[str, str], StoredRow]:
        by_pk = _row_keys(gateway, rows)
        if not by_pk:
            return {}
        # The gateway's in-doubt chunks first: one retired meanwhile has its rows back at their main keys.
        alternates: dict[str, tuple[str, str]] = {}
        for item in self._query(
            TableName=self._t.config,
            KeyConditionExpression=f"{DoubtAttr.GATEWAY} = :gw AND begins_with({DoubtAttr.SORT_KEY}, :p)",
            ExpressionAttributeValues={":gw": str_attr(gateway), ":p": str_attr(DOUBT_PREFIX)},
            ConsistentRead=True,
        ):
            doubt = doubt_from_record(item)
            alternates.update((alt_key(doubt, pk), by_pk[pk]) for pk in record_pks(item) if pk in by_pk)
        return self._newest_rows({**by_pk, **alternates})

    def _read_rows(
        self, gateway: str, rows: Iterable[tuple[str, str]], doubts: Sequence[Doubt]
    ) -> dict[tuple[str, str], StoredRow]:
        """The rows as a shard whose head lists ``doubts`` holds them: the newest of each row's main key and its
        alternate keys."""
        by_pk = _row_keys(gateway, list(rows))
        keys = dict(by_pk)
        for doubt in doubts:
            keys.update((alt_key(doubt, pk), row) for pk, row in by_pk.items())
        return self._newest_rows(keys)

    def _newest_rows(self, keys: Mapping[str, tuple[str, str]]) -> dict[tuple[str, str], StoredRow]:
        if not keys:
            return {}
        found: dict[tuple[str, str], StoredRow] = {}
        for item in self._batch_get(self._t.rows, [row_item_key(pk) for pk in keys]):
            key = keys[item[RowAttr.KEY]["S"]]
            row = row_from_item(key, item)
            if key not in found or found[key].version < row.version:
                found[key] = row
        return found

    def seen_delta_ids(self, gateway: str, delta_ids: Sequence[str], now_s: int) -> set[str]:
        ids = list(dict.fromkeys(delta_ids))
        if not ids:
            return set()
        items = self._batch_get(self._t.dedup, [dedup_record_key(gateway, d) for d in ids])
        return live_delta_ids(gateway, items, now_s)

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
            tail_read = submit(self._tail, shard, applied, head.seq)
        doubts = head_doubts(head_item)
        self._bases[shard.key] = (head.seq, applied, doubts) if head is not None else (0, 0, ())
        with awaited(tail_read):
            stored = self._read_rows(shard.gateway, rows, doubts)
        if tail_read is not None:
            _fold(stored, tail_read.result(), wanted=set(rows))
        return CommitBasis(head, stored)

    def _head_item(self, shard: ShardId) -> Item | None:
        try:
            out = self._db.get_item(TableName=self._t.heads, Key=head_key(shard), ConsistentRead=True)
        except ClientError as exc:
            raise storage_error(exc, "GetItem") from exc
        return out.get("Item")

    def _tail(self, shard: ShardId, after_seq: int, through_seq: int) -> list[LogEntry]:
        """Entries ``after_seq + 1 .. through_seq``, all of them (committed before the head was read)."""
        for attempt in range(8):
            entries = self._read_chunks(shard, after_seq, through_seq - after_seq, images=False)
            entries = _contiguous(entries, after_seq + 1)
            if len(entries) == through_seq - after_seq:
                return entries
            time.sleep(0.005 * 2**attempt)  # a gap: a chunk not visible to the Query yet
        raise StorageError(f"the log of shard {shard.key!r} is missing entries in ({after_seq}, {through_seq}]")

    def record_delta_ids(self, gateway: str, delta_ids: Sequence[str], expires_at: int) -> None:
        items = [dedup_item(gateway, d, expires_at) for d in dict.fromkeys(delta_ids)]
        batch_write_all(self._db, self._t.dedup, items)

    def _query(self, **kwargs: Any) -> Iterable[Item]:
        return query_all(self._db, **kwargs)

    def read_log(self, shard: ShardId, after_seq: int, limit: int, *, images: bool = True) -> list[LogEntry]:
        # `chunk_items` starts with the chunk holding entry `after_seq + 1`. Sequences are contiguous, so stop at the
        # first gap (TTL deletes chunks in no set order). (`inside`: reads by
        # position other than a cursor's check at a chunk end start inside a chunk, mostly: a page that ended inside
        # one, or a read from an entry.)
        return _contiguous(self._read_chunks(shard, after_seq, limit, images, inside=True), after_seq + 1)

    def read_log_at(
        self, shard: ShardId, seq: int, limit: int, *, images: bool = True
    ) -> tuple[int | None, list[LogEntry]]:
        remembered = self._remembered_chunk(shard, seq)
        if remembered is not None:
            found = self._read_from_remembered(shard, remembered, seq, limit, images)
            if found is not None:
                return found
        if seq > 0:
            found = self._read_after_chunk_end(shard, seq, limit, images)
            if found is not None:
                return found
        # Position 0, a position inside a chunk, or a chunk after it without `pv`: read from the entry itself.
        return read_from_entry(self, shard, seq, limit, images=images)

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
        :data:`_REMEMBERED_CHUNK_MS`."""
        with self._last_chunks_lock:
            remembered = self._last_chunks.get(shard.key)
        if remembered is None or not 0 <= self._clock_ms() - remembered[0] <= _REMEMBERED_CHUNK_MS:
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
        return int(first_items[0][ChunkAttr.PREVIOUS_HLC]["N"]), _contiguous(entries, seq + 1)

    def read_log_by_commit_hlc(
        self, shard: ShardId, after_commit_hlc: int, limit: int, *, images: bool = True
    ) -> list[LogEntry]:
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
        return _contiguous(entries, entries[0].seq if entries else 0)

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

    # -- the commit by a conditional put (docs/design/commit-without-transaction.md) -------------------------------
    def commit(self, commit: Commit) -> None:
        """Commit a chunk by putting its log item where no item is: the put is the commit. Then its rows, then the
        head over it (``seq``, ``ra`` and the totals in one update).

        Every writer's key is the sequence after the head it read, and the head only moves to the end of a chunk
        that exists: two writers that read the same head claim the same key, and a writer that read an older head
        claims a key taken already. So the log stays one chain. A taken key means a chunk is past the head (its
        writer has not moved the head yet, or stopped): its writer is waited for, or the head rolled forward over it,
        and the push retries.
        """
        shard = commit.shard
        _check_rows(commit)
        if not commit.entries:
            raise ValueError("a commit holds at least one log entry")
        expected = max(commit.expected_seq, 0)
        if commit.entries[0].seq != expected + 1:
            raise CommitConflict()  # planned on another head than the one it names
        if commit.new_shard:
            self._create_shard(shard)
        if commit.new_shard or shard.key not in self._headed:
            self._expect_head(shard, expected)
        item = self._chunk_item(commit)
        try:
            self._db.put_item(TableName=self._t.deltas, Item=item, ConditionExpression=_NEW_CHUNK)
        except ClientError as exc:
            if condition_failed(exc):
                self._roll_forward(shard)
                raise CommitConflict() from exc
            raise _commit_error(shard, exc) from exc
        try:
            self._apply_put(commit)
        except (ClientError, StorageError) as exc:
            # Committed: the next commit to the shard rolls the head forward (and head reads see past it).
            logger.warning("head of %s not moved past %s yet: %s", shard.key, commit.entries[-1].seq, exc)

    def _apply_put(self, commit: Commit) -> None:
        """After a chunk's put, on its turn (every chunk before it has its rows written, ``seq = ra``): its rows, in
        batches while its deadline allows, then the head over it (``seq``, ``ra`` and the totals in one update). A
        turn that does not come is taken (:meth:`_roll_forward`), which writes this chunk's rows too; in-doubt chunks
        whose late writers can no longer land anything are retired on the way."""
        shard, entries = commit.shard, commit.entries
        previous, last = entries[0].seq - 1, entries[-1].seq
        # A basis at `seq = ra = previous` showed the turn already: `ra` only moves past the position before this
        # chunk with this chunk (or when a writer takes its turn over, and then this writer's head update fails),
        # and the in-doubt runs change only with `ra`.
        seq, applied, doubts = self._bases.get(shard.key, (-1, -1, ()))
        if not seq == applied == previous:
            head_item = self._await_turn(shard, previous, last)
            if head_item is None:
                return
            doubts = head_doubts(head_item)
        kept = self._retire(shard, doubts)
        rows = [w.row for w in commit.rows]
        self._write_home(shard, rows, kept, batch_until=deadline_ms(entries[-1].commit_hlc))
        self._advance_head(commit, doubts, kept)

    def _await_turn(self, shard: ShardId, previous: int, last: int) -> Item | None:
        """The head item once it is at ``seq = ra = previous`` (this chunk's turn); ``None`` once another writer has
        moved the head over the chunk (its rows written). A turn that does not come within ``turn_wait_s`` is taken:
        the chunks before this one are rolled over (in doubt where their writers may still write), this one's rows
        written with them. It is taken at once when the chunks whose rows are pending are past their deadline (a head
        the flush moved over a stopped writer's chunk): their writers send no batch any more."""
        for _ in range(3):
            for item in self._head_polls(shard, at_once=True):
                if item is None:
                    return None
                seq, applied = head_seq(item), rows_applied(item)
                if seq >= last:
                    return None
                if seq == previous and applied == previous:
                    return item
                if seq == previous and deadline_ms(head_last_commit_hlc(item)) <= self._clock_ms():
                    break  # the chunks whose rows are pending are past their deadline: nobody will batch them
            self._roll_forward(shard, own=(previous + 1, last), wait=False)
        raise StorageError(f"the head of {shard.key!r} did not reach {previous}: the rows after it wait")

    def _create_shard(self, shard: ShardId) -> None:
        """Before the first put to a shard its basis found no head for: the registry entry (the flush finds shards
        there) and the head, either of which may exist already."""
        try:
            self._db.put_item(TableName=self._t.config, Item=registry_item(shard))
            self._db.put_item(
                TableName=self._t.heads,
                Item=new_head_item(ShardHead(shard), applied=0),
                ConditionExpression="attribute_not_exists(#sh)",
                ExpressionAttributeNames={"#sh": HeadAttr.SHARD},
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise _commit_error(shard, exc) from exc

    def _expect_head(self, shard: ShardId, expected: int) -> None:
        """Before a put to a shard this store has seen no head of: the head exists and is still at ``expected``, so
        the commit was planned on it and none committed since (else :class:`CommitConflict`)."""
        item = self._head_item(shard)
        if item is None or head_seq(item) != expected:
            raise CommitConflict()
        self._headed.add(shard.key)

    def _advance_head(self, commit: Commit, doubts: Sequence[Doubt], kept: Sequence[Doubt]) -> None:
        """On the chunk's turn, its rows written: move the head from the chunk's first position - 1 to its last, the
        in-doubt runs from ``doubts`` to ``kept`` (the retired ones' records and alternate rows then go). A head
        that is not there any more was moved over the chunk by a writer that took its turn."""
        entries = commit.entries
        previous = entries[0].seq - 1
        if self._set_head(commit.shard, previous, previous, entries, doubts=kept if kept != doubts else None):
            self._forget(commit.shard, [d for d in doubts if d not in kept])

    def _set_head(
        self,
        shard: ShardId,
        seq: int,
        applied: int | None,
        entries: Sequence[LogEntry],
        *,
        doubts: Sequence[Doubt] | None = None,
    ) -> bool:
        """Move the head from ``seq`` over ``entries`` (those after ``seq``); ``False`` if it was not there. With
        ``applied`` (the head's rows-applied mark), their rows are all written and ``ra`` moves with it; with
        ``None``, their rows stay pending (``ra`` where it is). ``doubts``: the head's in-doubt chunks from now on
        (``None`` leaves them as they are; they change only with ``ra``)."""
        end = entries[-1]
        values = {
            ":end": num_attr(end.seq),
            ":lch": num_attr(end.commit_hlc),
            ":b": num_attr(sum(e.size for e in entries if e.seq > seq)),
            ":d": num_attr(sum(1 for e in entries if e.seq > seq)),
            ":seq": num_attr(seq),
        }
        update = _MOVE_HEAD
        condition = f"{HeadAttr.SEQ} = :seq"
        if applied is not None:
            update += f", {HeadAttr.ROWS_APPLIED} = :end"
            condition += f" AND ({HeadAttr.ROWS_APPLIED} = :ra OR attribute_not_exists({HeadAttr.ROWS_APPLIED}))"
            values[":ra"] = num_attr(applied)
            update += doubts_update(doubts, values)
        try:
            self._db.update_item(
                TableName=self._t.heads,
                Key=head_key(shard),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise storage_error(exc, "UpdateItem") from exc
            return False
        return True

    def _roll_forward(self, shard: ShardId, *, own: tuple[int, int] | None = None, wait: bool = True) -> None:
        """Bring the head over every chunk the log holds past it, and ``ra`` over every chunk whose rows are pending:
        their rows written from the log, then ``seq``, ``ra`` and the totals moved in one update (if the head is
        still where it was read).

        A chunk whose writer may still write a batch of its rows (its last signature not yet expired) is waited for
        first (``wait``: up to ``turn_wait_s``), then taken over *in doubt*: its rows, and every later write of them
        until that writer can no longer land anything, go to alternate keys (:mod:`lakesync.aws.buffer.row_doubts`).
        ``own``: this writer's own chunk, whose rows it writes here and in no batch."""
        for attempt in range(2):
            item = self._head_item(shard)
            if item is None:
                return
            head, applied, doubts = head_from_item(item), rows_applied(item), head_doubts(item)
            behind = self._tail(shard, applied, head.seq) if applied < head.seq else []
            past = self._past_head(head)
            entries = behind + past
            if not entries:
                return
            now = self._clock_ms()
            mine = range(own[0], own[1] + 1) if own is not None else range(0)
            late = [e for e in entries if until_ms(e.commit_hlc) > now and e.seq not in mine]
            if not late or not wait or attempt:
                break
            if self._wait_for_head(shard, entries[-1].seq):
                return  # their writers finished
            # waited in vain: read the head and the log again, and take over
        declared = self._declare(shard, [e for e in entries if e.seq <= late[-1].seq]) if late else ()
        after = (*doubts, *declared)
        try:
            self._write_rows_of(shard, entries, after)
        except _RunRetired:
            return  # a turn retired a run of the head read here: the head has moved on
        changed = after if declared else None
        if past:
            self._set_head(shard, head.seq, applied, entries, doubts=changed)
        else:
            self._set_applied(shard, applied, head.seq, doubts=changed)

    def _wait_for_head(self, shard: ShardId, last: int) -> bool:
        """Wait up to ``turn_wait_s`` for the head to reach ``last`` with every row written (``seq`` and ``ra``);
        whether it did."""
        return any(
            item is not None and head_seq(item) >= last and rows_applied(item) >= last
            for item in self._head_polls(shard, at_once=False)
        )

    def _head_polls(self, shard: ShardId, *, at_once: bool) -> Iterator[Item | None]:
        """The head item, read again and again (``at_once``: first without a pause; then 2 ms apart, doubling up to
        0.1 s) for up to ``turn_wait_s``."""
        waited_until = time.monotonic() + self._turn_wait_s
        if at_once:
            yield self._head_item(shard)
        delay = 0.002
        while time.monotonic() < waited_until:
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
            yield self._head_item(shard)

    def _declare(self, shard: ShardId, entries: Sequence[LogEntry]) -> tuple[Doubt, ...]:
        """Record the chunks of ``entries`` in doubt (a record of their rows' main keys each, written before any head
        lists them), in runs of at most :data:`DOUBT_RUN_ENTRIES`, so that a record stays well within an item."""
        doubts = []
        for start in range(0, len(entries), DOUBT_RUN_ENTRIES):
            run = entries[start : start + DOUBT_RUN_ENTRIES]
            doubt = Doubt(run[0].seq, run[-1].seq, max(until_ms(e.commit_hlc) for e in run))
            pks = list(dict.fromkeys(row_key(shard.gateway, e.delta.table, e.delta.row_id) for e in run))
            try:
                self._db.put_item(TableName=self._t.config, Item=doubt_record_item(shard, doubt, pks))
            except ClientError as exc:
                raise storage_error(exc, "PutItem") from exc
            self._doubt_rows[(shard.key, doubt.first, doubt.last)] = frozenset(pks)
            doubts.append(doubt)
        return tuple(doubts)

    def _doubt_pks(self, shard: ShardId, doubt: Doubt) -> frozenset[str]:
        """The main keys of the rows of an in-doubt run (its record, read once per process)."""
        cached = self._doubt_rows.get((shard.key, doubt.first, doubt.last))
        if cached is not None:
            return cached
        try:
            out = self._db.get_item(TableName=self._t.config, Key=doubt_record_key(shard, doubt), ConsistentRead=True)
        except ClientError as exc:
            raise storage_error(exc, "GetItem") from exc
        if "Item" not in out:
            raise _RunRetired(f"the record of the in-doubt run {doubt.first}..{doubt.last} of {shard.key!r} is gone")
        pks = frozenset(record_pks(out["Item"]))
        self._doubt_rows[(shard.key, doubt.first, doubt.last)] = pks
        return pks

    def _retire(self, shard: ShardId, doubts: Sequence[Doubt]) -> tuple[Doubt, ...]:
        """Copy the rows of the in-doubt runs whose late writers can no longer land anything back to their main keys
        (never backwards); returns the runs still in doubt."""
        now = self._clock_ms()
        expired = [d for d in doubts if d.until_ms <= now]
        for doubt in expired:
            alternates = {alt_key(doubt, pk): pk for pk in self._doubt_pks(shard, doubt)}
            items = self._batch_get(self._t.rows, [row_item_key(key) for key in alternates])
            results_of(
                [
                    submit(self._put_row_item, {**item, **row_item_key(alternates[item[RowAttr.KEY]["S"]])})
                    for item in items
                ]
            )
        return tuple(d for d in doubts if d not in expired)

    def _forget(self, shard: ShardId, retired: Sequence[Doubt]) -> None:
        """After the head stopped listing them: the retired runs' records and alternate rows go."""
        for doubt in retired:
            alternates = [alt_key(doubt, pk) for pk in self._doubt_pks(shard, doubt)]
            deletes = [{"DeleteRequest": {"Key": row_item_key(key)}} for key in alternates]
            for start in range(0, len(deletes), 25):
                try:
                    batch_write(self._db, self._t.rows, deletes[start : start + 25])
                except StorageError as exc:
                    logger.warning("alternate rows of %s %s not deleted: %s", shard.key, doubt.first, exc)
            try:
                self._db.delete_item(TableName=self._t.config, Key=doubt_record_key(shard, doubt))
            except ClientError as exc:
                logger.warning("record of the in-doubt chunks %s of %s not deleted: %s", doubt.first, shard.key, exc)
            self._doubt_rows.pop((shard.key, doubt.first, doubt.last), None)

    def _chunk_item(self, commit: Commit) -> Item:
        return chunk_item(commit, log_ttl_s=self._log_ttl_s, mark_every=self._mark_every)

    # -- the row index: a cache of the log -----------------------------------------------------------------------
    def _put_rows(self, gateway: str, puts: Sequence[StoredRow]) -> None:
        """Write each row unless the stored one is at or past its position (``v``): never backwards."""
        if not puts:
            return
        if len(puts) == 1:
            self._put_row(gateway, puts[0])
            return
        results_of([submit(self._put_row, gateway, row) for row in puts])

    def _write_home(
        self, shard: ShardId, rows: Sequence[StoredRow], doubts: Sequence[Doubt], *, batch_until: int | None
    ) -> None:
        """Write each row where it lives: at its alternate key for the newest in-doubt run holding it (a conditional
        put), else at its main key: in batches while the wall clock is before ``batch_until`` (only on the chunk's
        turn), else by conditional puts."""
        main: list[StoredRow] = []
        alternate: list[Item] = []
        for row in rows:
            pk = row_key(shard.gateway, row.state.table, row.state.row_id)
            home = next((d for d in reversed(doubts) if pk in self._doubt_pks(shard, d)), None)
            if home is None:
                main.append(row)
            else:
                alternate.append({**row_item(shard.gateway, row), **row_item_key(alt_key(home, pk))})
        puts = [submit(self._put_row_item, item) for item in alternate]
        with awaited(*puts):
            if batch_until is not None:
                self._batch_rows(shard.gateway, main, batch_until)
            else:
                self._put_rows(shard.gateway, main)
        results_of(puts)

    def _batch_rows(self, gateway: str, rows: Sequence[StoredRow], until: int) -> None:
        """Unconditional ``BatchWriteItem``s of rows (on their chunk's turn), none sent after ``until`` (the rest by
        conditional puts)."""
        items = [row_item(gateway, row) for row in rows]
        results_of(
            [submit(self._batch_of_rows, items[start : start + 25], until) for start in range(0, len(items), 25)]
        )

    def _batch_of_rows(self, items: list[Item], until: int) -> None:
        requests = [{"PutRequest": {"Item": item}} for item in items]
        unsent = batch_write(self._db, self._t.rows, requests, sending=lambda: self._clock_ms() < until)
        for put in unsent:
            self._put_row_item(put["PutRequest"]["Item"])

    def _put_row(self, gateway: str, row: StoredRow) -> None:
        self._put_row_item(row_item(gateway, row))

    def _put_row_item(self, item: Item) -> None:
        """Put a row item unless the stored one is at or past its position (``v``): never backwards."""
        try:
            self._db.put_item(
                TableName=self._t.rows,
                Item=item,
                ConditionExpression=_NEWER_ROW,
                ExpressionAttributeValues={":v": item[RowAttr.VERSION]},
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise

    def _set_applied(self, shard: ShardId, expected: int, to: int, *, doubts: Sequence[Doubt] | None = None) -> bool:
        """Move the head's ``ra`` from ``expected`` to ``to``; ``False`` if it was not at ``expected``. ``doubts`` as
        for :meth:`_set_head`."""
        values = {":to": num_attr(to), ":expected": num_attr(expected)}
        try:
            self._db.update_item(
                TableName=self._t.heads,
                Key=head_key(shard),
                UpdateExpression=f"SET {HeadAttr.ROWS_APPLIED} = :to" + doubts_update(doubts, values),
                ConditionExpression=f"{HeadAttr.ROWS_APPLIED} = :expected",
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise
            return False
        return True

    def _write_rows_of(self, shard: ShardId, entries: Sequence[LogEntry], doubts: Sequence[Doubt]) -> None:
        """Write the rows of ``entries`` (in order) folded into the stored ones, by conditional puts where they live
        (the shard's in-doubt runs ``doubts``)."""
        keys = list(dict.fromkeys((e.delta.table, e.delta.row_id) for e in entries))
        stored = self._read_rows(shard.gateway, keys, doubts)
        changed = _fold(stored, entries, wanted=set(keys))
        self._write_home(shard, [stored[key] for key in changed], doubts, batch_until=None)


def _check_rows(commit: Commit) -> None:
    """Refuse, before anything is written, a commit whose row items DynamoDB would refuse after it: the rows are
    written once the log holds the commit, so a row that can never be written must stop the commit itself."""
    for write in commit.rows:
        state = write.row.state
        key = row_key(commit.shard.gateway, state.table, state.row_id)
        try:
            size = len(key.encode("utf-8")) + len(encode_row_state(state).encode("utf-8")) + 64
        except UnicodeEncodeError:
            raise StorageError(
                f"DynamoDB would refuse the row item of {state.table}:{state.row_id!r}: not UTF-8"
            ) from None
        if size > ITEM_LIMIT_BYTES:
            raise StorageError(
                f"DynamoDB would refuse the row item of {state.table}:{state.row_id}: {size:,} bytes, over an item"
            )


def _fold(
    stored: dict[tuple[str, str], StoredRow], entries: Iterable[LogEntry], *, wanted: set[tuple[str, str]]
) -> set[tuple[str, str]]:
    """Merge the log entries a stored row does not hold yet (``seq`` past its ``v``) into it, in order, and keep
    their dedup keys; returns the rows that changed. The effective deltas of the log fold to the states their
    commits wrote (per-column LWW is a join)."""
    changed: set[tuple[str, str]] = set()
    for entry in entries:
        delta = entry.delta
        key = (delta.table, delta.row_id)
        if key not in wanted:
            continue
        row = stored.get(key)
        if row is not None and row.version >= entry.seq:
            continue
        state = merge(row.state if row is not None else None, delta).state
        recent = (*(row.recent if row is not None else ()), recent_key(dedup_key(delta.client_id, delta.delta_id)))
        stored[key] = StoredRow(state, entry.seq, recent[-ROW_RECENT_KEYS:])
        changed.add(key)
    return changed


def _commit_error(shard: ShardId, exc: ClientError) -> Exception:
    """What a failed write of a commit (its log item, the shard's registry entry or head) means: a full item
    collection is :class:`BackpressureError` naming the remedy, throttling :class:`StorageBusyError` (503), anything
    else -- an item or key the table refuses, or an error we do not know -- :class:`StorageError` at once."""
    error = exc.response.get("Error", {})
    code = error.get("Code", "Unknown")
    if code == "ItemCollectionSizeLimitExceededException":
        return _collection_full(shard)
    if code in THROTTLED_CODES:
        return StorageBusyError(f"DynamoDB is throttling commits to table {shard.table!r} ({code}); retry later")
    return StorageError(f"DynamoDB commit to table {shard.table!r} failed: {code}: {error.get('Message', '')}")


def _collection_full(shard: ShardId) -> BackpressureError:
    """A shard's log reached DynamoDB's 10 GB per partition key of a table with a local secondary index: its items
    leave only as TTL deletes them, 14 days after their commit, so the shard takes no more until then."""
    return BackpressureError(
        f"Shard {shard.key!r} holds DynamoDB's 10 GB item-collection limit of log written in the last 14 days; "
        f"pushes to it resume as the oldest entries expire. Give table {shard.table!r} more sub-shards "
        "(LAKESYNC_SUB_SHARDS) to spread its writes"
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


def _row_keys(gateway: str, rows: Sequence[tuple[str, str]]) -> dict[str, tuple[str, str]]:
    return {row_key(gateway, table, row_id): (table, row_id) for table, row_id in dict.fromkeys(rows)}


class _RunRetired(StorageError):
    """The record of an in-doubt run the head listed is gone: a turn retired it since the head was read."""


def _contiguous(entries: list[LogEntry], first_seq: int) -> list[LogEntry]:
    expected = first_seq
    for i, entry in enumerate(entries):
        if entry.seq != expected:
            return entries[:i]
        expected += 1
    return entries


def create_tables(client: DynamoDBClient, names: TableNames, *, connections: str | None = None) -> None:
    """Create every LakeSync table (idempotent) and enable TTL where records expire.

    Args:
        client: The DynamoDB client.
        names: The buffer's tables.
        connections: The WebSocket sessions table to create as well
            (:func:`lakesync.aws.tables.connections_table_name`), if any.
    """
    existing = _table_names(client)
    specs = table_specs(names) + ([connections_table_spec(connections)] if connections else [])
    for spec in specs:
        if spec["TableName"] not in existing:
            client.create_table(**spec)
    for spec in specs:
        client.get_waiter("table_exists").wait(TableName=spec["TableName"])
    for name in [names.as_dict()[logical] for logical in TTL_TABLES] + ([connections] if connections else []):
        client.update_time_to_live(
            TableName=name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
        )


def drop_tables(client: DynamoDBClient, names: TableNames, *, connections: str | None = None) -> None:
    """Delete every LakeSync table that exists (for a fresh local start), the sessions table too when named."""
    existing = _table_names(client)
    for name in [*names.as_dict().values(), *([connections] if connections else [])]:
        if name in existing:
            client.delete_table(TableName=name)
            client.get_waiter("table_not_exists").wait(TableName=name)


def _table_names(client: DynamoDBClient) -> set[str]:
    names: set[str] = set()
    for page in client.get_paginator("list_tables").paginate():
        names.update(page.get("TableNames", []))
    return names
