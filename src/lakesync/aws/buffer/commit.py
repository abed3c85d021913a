"""The commit protocol of the buffer on DynamoDB (docs/push.md, docs/design/commit-without-transaction.md).

A push chunk commits by one conditional ``PutItem`` of its log item, keyed by its first sequence, where no item is:
the put is the commit, and two writers that read the same head claim the same key, so the log stays one chain
without a transaction. A put refused because the key is taken is :class:`CommitConflict` (the push retries),
throttling ``StorageBusyError`` and any other refusal ``StorageError`` at once.

After its put a chunk waits for its *turn* (the head at ``seq = ra`` = the position before it), writes its rows in
batches while its deadline allows, then moves the head over it (``seq``, ``ra`` and the totals in one update). A turn
that does not come is taken over: the chunks before it are rolled forward from the log, those whose writers may still
write late declared *in doubt* (:mod:`lakesync.aws.buffer.row_doubts`), their rows at alternate keys until then; a
later turn retires the runs whose writers can no longer land anything and forgets their records.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from lakesync.aws.buffer.doubt_records import DoubtRecords, RunRetired
from lakesync.aws.buffer.items import (
    ChunkAttr,
    HeadAttr,
    chunk_item,
    doubts_update,
    head_doubts,
    head_from_item,
    head_key,
    head_last_commit_hlc,
    head_seq,
    new_head_item,
    registry_item,
    rows_applied,
)
from lakesync.aws.buffer.log_chunks import COMMIT_MARK_EVERY
from lakesync.aws.buffer.log_reader import LogReader
from lakesync.aws.buffer.row_doubts import DOUBT_RUN_ENTRIES, Doubt, alt_key, deadline_ms, until_ms
from lakesync.aws.buffer.rows import RowIndex, fold
from lakesync.aws.errors import condition_failed
from lakesync.aws.items import THROTTLED_CODES, Item, encode_row_state, num_attr, storage_error
from lakesync.aws.tables import TableNames
from lakesync.core.errors import BackpressureError, StorageBusyError, StorageError
from lakesync.core.log import ITEM_LIMIT_BYTES, LOG_TTL_S, Commit, CommitConflict, LogEntry, ShardHead, ShardId, row_key

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["BufferCommits", "commit_error"]

logger = logging.getLogger(__name__)

_NEW_CHUNK = f"attribute_not_exists({ChunkAttr.SEQ})"
"""The commit: a put where no chunk is."""
_MOVE_HEAD = (
    f"SET {HeadAttr.SEQ} = :end, {HeadAttr.LAST_COMMIT_HLC} = :lch,"
    f" {HeadAttr.BYTES_TOTAL} = {HeadAttr.BYTES_TOTAL} + :b, {HeadAttr.DELTAS_TOTAL} = {HeadAttr.DELTAS_TOTAL} + :d"
)
"""A head moved over chunks: its position, last commit HLC and totals."""


class BufferCommits:
    """The buffer's writes on DynamoDB: commits, turns, roll forward and in-doubt runs, over the log reader
    (:class:`LogReader`), the row index (:class:`RowIndex`) and the in-doubt runs' records (:class:`DoubtRecords`).

    ``commit_mark_every`` is how many entries apart the commit marks it writes are
    (:func:`lakesync.aws.buffer.log_chunks.is_commit_mark`); ``turn_wait_s`` is how long a writer waits for the
    writer before it, ``clock_ms`` the wall clock it judges the writers' deadlines by.
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
        # The last basis read of each shard: the head's `seq`, `ra` and in-doubt runs.
        self._bases: dict[str, tuple[int, int, tuple[Doubt, ...]]] = {}
        self._log = LogReader(client, names, mark_every=commit_mark_every, clock_ms=self._clock_ms)
        self._records = DoubtRecords(client, names)
        # Every batch of rows is sent through `_batch_of_rows`.
        self._rows = RowIndex(client, names, self._records, clock_ms=self._clock_ms, send_batch=self._batch_of_rows)

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
        check_rows(commit)
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
            raise commit_error(shard, exc) from exc
        try:
            self._apply_put(commit)
        except (ClientError, StorageError) as exc:
            # Committed: the next commit to the shard rolls the head forward (and head reads see past it).
            logger.warning("head of %s not moved past %s yet: %s", shard.key, commit.entries[-1].seq, exc)

    def _chunk_item(self, commit: Commit) -> Item:
        return chunk_item(commit, log_ttl_s=self._log_ttl_s, mark_every=self._mark_every)

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
                raise commit_error(shard, exc) from exc

    def _expect_head(self, shard: ShardId, expected: int) -> None:
        """Before a put to a shard this store has seen no head of: the head exists and is still at ``expected``, so
        the commit was planned on it and none committed since (else :class:`CommitConflict`)."""
        item = self._head_item(shard)
        if item is None or head_seq(item) != expected:
            raise CommitConflict()
        self._headed.add(shard.key)

    def _head_item(self, shard: ShardId) -> Item | None:
        try:
            out = self._db.get_item(TableName=self._t.heads, Key=head_key(shard), ConsistentRead=True)
        except ClientError as exc:
            raise storage_error(exc, "GetItem") from exc
        return out.get("Item")

    # -- the chunk's turn: its rows, then the head ------------------------------------------------------------------
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
        self._rows.write_home(shard, rows, kept, batch_until=deadline_ms(entries[-1].commit_hlc))
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

    def _batch_of_rows(self, items: list[Item], until: int) -> None:
        """Send one batch of a chunk's row items on its turn, none after ``until`` (:meth:`RowIndex.send_batch`):
        every batch of rows goes through here."""
        self._rows.send_batch(items, until)

    # -- a turn that does not come: roll forward, in doubt ------------------------------------------------------------
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
            behind = self._log.tail(shard, applied, head.seq) if applied < head.seq else []
            past = self._log.past_head(head)
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
        except RunRetired:
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

    def _write_rows_of(self, shard: ShardId, entries: Sequence[LogEntry], doubts: Sequence[Doubt]) -> None:
        """Write the rows of ``entries`` (in order) folded into the stored ones, by conditional puts where they live
        (the shard's in-doubt runs ``doubts``)."""
        keys = list(dict.fromkeys((e.delta.table, e.delta.row_id) for e in entries))
        stored = self._rows.read_rows(shard.gateway, keys, doubts)
        changed = fold(stored, entries, wanted=set(keys))
        self._rows.write_home(shard, [stored[key] for key in changed], doubts, batch_until=None)

    def _declare(self, shard: ShardId, entries: Sequence[LogEntry]) -> tuple[Doubt, ...]:
        """Record the chunks of ``entries`` in doubt (a record of their rows' main keys each, written before any head
        lists them), in runs of at most :data:`DOUBT_RUN_ENTRIES`, so that a record stays well within an item."""
        doubts = []
        for start in range(0, len(entries), DOUBT_RUN_ENTRIES):
            run = entries[start : start + DOUBT_RUN_ENTRIES]
            doubt = Doubt(run[0].seq, run[-1].seq, max(until_ms(e.commit_hlc) for e in run))
            pks = list(dict.fromkeys(row_key(shard.gateway, e.delta.table, e.delta.row_id) for e in run))
            self._records.declare(shard, doubt, pks)
            doubts.append(doubt)
        return tuple(doubts)

    def _retire(self, shard: ShardId, doubts: Sequence[Doubt]) -> tuple[Doubt, ...]:
        """Copy the rows of the in-doubt runs whose late writers can no longer land anything back to their main keys
        (never backwards); returns the runs still in doubt."""
        now = self._clock_ms()
        expired = [d for d in doubts if d.until_ms <= now]
        for doubt in expired:
            self._rows.copy_home({alt_key(doubt, pk): pk for pk in self._records.pks(shard, doubt)})
        return tuple(d for d in doubts if d not in expired)

    def _forget(self, shard: ShardId, retired: Sequence[Doubt]) -> None:
        """After the head stopped listing them: the retired runs' records and alternate rows go."""
        for doubt in retired:
            alternates = [alt_key(doubt, pk) for pk in self._records.pks(shard, doubt)]
            for start in range(0, len(alternates), 25):
                try:
                    self._rows.delete(alternates[start : start + 25])
                except StorageError as exc:
                    logger.warning("alternate rows of %s %s not deleted: %s", shard.key, doubt.first, exc)
            self._records.forget(shard, doubt)


def check_rows(commit: Commit) -> None:
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


def commit_error(shard: ShardId, exc: ClientError) -> Exception:
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
