"""The log of first-keyed chunks (``seq = FIRST_KEYED + first``, :mod:`lakesync.aws.buffer.log_chunks`) on the moto
server: every read by position and by commit HLC, every release target, by a reader that has read the shard before and
by a new one, is what a scan of the entries the buffer holds gives; and how many requests a read takes."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from lakesync.aws.buffer.items import chunk_span
from lakesync.aws.buffer.log_chunks import FIRST_KEYED
from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.flush_store import FlushStore, ShardRange
from lakesync.aws.tables import COMMIT_INDEX, TableNames
from lakesync.core.log import LOG_CHUNK_MAX_ENTRIES, LogEntry, ShardId
from lakesync.io_pool import submit
from lakesync.ports import read_from_entry
from tests.integration.test_commit_marks import (
    Chunk,
    CountingClient,
    check_positions,
    commit_chunks,
    hlc_probes,
    plan_chunks,
)


@pytest.fixture
def shard(gw: str) -> ShardId:
    return ShardId(gw, "todos", 0)


def stores(client: Any, names: TableNames, every: int) -> tuple[DynamoDBBufferStore, FlushStore]:
    return (
        DynamoDBBufferStore(client, names, commit_mark_every=every),
        FlushStore(client, names, commit_mark_every=every),
    )


class NewReader:
    """A reader that has never read the shard, at every read: a new store for each call, which remembers nothing of
    the shard's log."""

    def __init__(self, client: Any, names: TableNames, every: int) -> None:
        self._client, self._names, self._every = client, names, every

    def __getattr__(self, name: str) -> Any:
        store = DynamoDBBufferStore(self._client, self._names, commit_mark_every=self._every)
        return getattr(store, name)


def reader(client: Any, names: TableNames, every: int, kind: str) -> tuple[Any, FlushStore]:
    """The reader ``kind`` names (``store``: one store for every read; ``new``: :class:`NewReader`)."""
    if kind == "new":  # the flush store as the flush job and function make it
        return NewReader(client, names, every), FlushStore(client, names, commit_mark_every=every)
    return stores(client, names, every)


READERS = pytest.mark.parametrize("kind", ["store", "new"], ids=["one-reader", "new-reader"])


def log_items(client: Any, names: TableNames, shard: ShardId) -> list[dict[str, Any]]:
    return list(
        client.query(
            TableName=names.deltas,
            KeyConditionExpression="#sh = :s",
            ExpressionAttributeNames={"#sh": "shard"},
            ExpressionAttributeValues={":s": {"S": shard.key}},
            ConsistentRead=True,
        )["Items"]
    )


def delete_chunk(client: Any, names: TableNames, shard: ShardId, chunk: Chunk) -> None:
    """What TTL does to an expired log item, whichever its key."""
    for item in log_items(client, names, shard):
        if chunk_span(item)[0] == chunk[0].seq:
            client.delete_item(TableName=names.deltas, Key={"shard": item["shard"], "seq": item["seq"]})
            return
    raise AssertionError(f"no log item starts at {chunk[0].seq}")


def run_after(held: Sequence[LogEntry], after_seq: int, limit: int) -> list[int]:
    """What ``read_log`` documents: entries ``after_seq + 1, ...`` that the buffer holds, up to the first gap."""
    by_seq = {e.seq for e in held}
    out: list[int] = []
    seq = after_seq + 1
    while seq in by_seq and len(out) < limit:
        out.append(seq)
        seq += 1
    return out


def check_reads(
    buffer: DynamoDBBufferStore,
    shard: ShardId,
    held: Sequence[LogEntry],
    every: int = 1,
    *,
    committed: Sequence[LogEntry] = (),
) -> None:
    """``read_log`` from every ``every``-th position (inside chunks, at their ends), before the log and past it, is
    the scan's; so is ``read_log_at``'s (``committed``: every entry ever committed, some no longer held)."""
    last = max((e.seq for e in held), default=0)
    hlcs = {e.seq: e.commit_hlc for e in held}
    recorded = {e.seq: e.commit_hlc for e in committed or held}
    unread: list[int] = []
    for i, after_seq in enumerate([*range(0, last + 2, every), last, last + 1]):
        for limit in (1, 3 if i % 2 else 1000):
            got = [e.seq for e in buffer.read_log(shard, after_seq, limit, images=False)]
            assert got == run_after(held, after_seq, limit), (after_seq, limit)
        # And a cursor's read from the entry it stands on: the entry's commit HLC (when the buffer holds it, or the
        # chunk after it records it) and the same entries after it; or nothing read (no chunk starts after it: the
        # caller's check against the head follows)
        at_hlc, after = buffer.read_log_at(shard, after_seq, 3, images=False)
        read = (at_hlc, [e.seq for e in after])
        expected = run_after(held, after_seq, 3)
        assert read in ((hlcs.get(after_seq), expected), (recorded.get(after_seq), expected), (None, [])), after_seq
        if read == (None, []) and expected:
            unread.append(after_seq)
    # Nothing read, with entries after it, only from positions in the last chunk (chunks hold at most 20 here)
    assert all(at >= last - 20 for at in unread), unread


SIZES = [3, 1, 10, 5, 2, 7, 1, 1, 20, 5, 4, 1, 16, 2, 9, 3]


@READERS
def test_the_log_reads_as_a_scan_of_it(module_dynamodb: Any, shard: ShardId, kind: str) -> None:
    # Given a log committed with first keys, sparse marks
    client, names = module_dynamodb
    chunks = plan_chunks(shard, SIZES)
    commit_chunks(stores(client, names, 8)[0], shard, chunks)
    entries = [e for chunk in chunks for e in chunk]
    assert sorted(int(i["seq"]["N"]) for i in log_items(client, names, shard)) == [
        FIRST_KEYED + c[0].seq for c in chunks
    ]

    # Then reads by position, by commit HLC and release targets are a scan's, by a reader new or not
    buffer, flush = reader(client, names, 8, kind)
    check_reads(buffer, shard, entries)
    check_positions(buffer, flush, shard, entries, hlc_probes(entries, 14))
    assert buffer.read_log(shard, 5, 4) == entries[5:9]  # the entries themselves, images and all

    # And so they are as TTL deletes the oldest items
    for gone in (3, 9):
        for chunk in chunks[:gone]:
            if any(chunk_span(i)[0] == chunk[0].seq for i in log_items(client, names, shard)):
                delete_chunk(client, names, shard, chunk)
        held = [e for chunk in chunks[gone:] for e in chunk]
        check_reads(buffer, shard, held, every=3, committed=entries)
        check_positions(buffer, flush, shard, held, hlc_probes(held, 6, seed=gone))


def test_a_hole_in_a_first_keyed_log(module_dynamodb: Any, shard: ShardId) -> None:
    # Given a first-keyed log with an item gone from its middle (a lost write, a restore)
    client, names = module_dynamodb
    chunks = plan_chunks(shard, [4] * 10)
    buffer, flush = stores(client, names, 8)
    commit_chunks(buffer, shard, chunks)
    delete_chunk(client, names, shard, chunks[4])  # entries 17..20
    held = [e for i, chunk in enumerate(chunks) if i != 4 for e in chunk]

    # Then reads stop at the hole, from before it, and start again after it
    check_reads(buffer, shard, held, committed=[e for chunk in chunks for e in chunk])
    check_positions(buffer, flush, shard, held, hlc_probes(held, 12))
    assert [e.seq for e in buffer.read_log(shard, 14, 100)] == [15, 16]
    assert [e.seq for e in buffer.read_log(shard, 20, 3)] == [21, 22, 23]


# -- how many requests -----------------------------------------------------------------------------------------------
def test_requests_of_reads_of_a_first_keyed_log(module_dynamodb: Any, shard: ShardId) -> None:
    # Given pushes of 10, first-keyed
    client, names = module_dynamodb
    chunks = plan_chunks(shard, [10] * 6)
    commit_chunks(stores(client, names, 64)[0], shard, chunks)
    counting = CountingClient(client)
    buffer = DynamoDBBufferStore(counting, names)

    def queries(after_seq: int, limit: int) -> list[dict[str, Any]]:
        counting.queries.clear()
        got = buffer.read_log(shard, after_seq, limit, images=False)
        assert [e.seq for e in got] == list(range(after_seq + 1, min(after_seq + limit, 60) + 1))
        return list(counting.queries)

    def descending(query: dict[str, Any]) -> bool:
        return query.get("ScanIndexForward") is False and query["Limit"] == 1

    # Then a read by position, from inside a chunk or from its end (a cursor pull reads from the entry it stands on,
    # the last of a chunk), takes two Queries sent together: the items after it, and one item descending (the chunk
    # holding it)
    for at in (5, 10, 19, 30, 41, 50, 60):
        sent = queries(at, 25)
        assert len(sent) == 2 and sum(map(descending, sent)) == 1, at
    # And a read from the start takes one: no chunk starts before the first entry
    sent = queries(0, 25)
    assert len(sent) == 1 and not descending(sent[0])
    # And a read by commit HLC (from the end of a chunk: a mark's, or the log's start) asks for no chunk before it
    counting.queries.clear()
    after = buffer.read_log_by_commit_hlc(shard, chunks[3][-1].commit_hlc, 5, images=False)
    assert [e.seq for e in after] == [41, 42, 43, 44, 45]
    assert counting.queries[0].get("IndexName") == COMMIT_INDEX and not any(map(descending, counting.queries[1:]))
    # And a read by position asks for no chunk past those that can hold the entries wanted (starting at 51..55)
    counting.queries.clear()
    assert [e.seq for e in buffer.read_log(shard, 50, 5, images=False)] == [51, 52, 53, 54, 55]
    forward = [q["ExpressionAttributeValues"] for q in counting.queries if not descending(q)]
    assert [values[":a"]["N"] for values in forward] == [str(FIRST_KEYED + 51)]
    assert forward[0][":b"]["N"] == str(FIRST_KEYED + 55)


class SlowLookBackClient(CountingClient):
    """A DynamoDB client whose descending one-item Queries (a first-keyed read's look-back) answer late; it records
    each Query when it has answered."""

    def __init__(self, client: Any, delay_s: float) -> None:
        super().__init__(client)
        self._delay_s = delay_s
        self.answered: list[dict[str, Any]] = []

    def query(self, **kwargs: Any) -> Any:
        if kwargs.get("ScanIndexForward") is False:
            time.sleep(self._delay_s)
        out = super().query(**kwargs)
        self.answered.append(kwargs)
        return out


def test_no_request_of_a_read_outlives_it(module_dynamodb: Any, shard: ShardId) -> None:
    # Given pushes of 10, first-keyed, and a client whose look-back for the chunk holding a position answers late
    client, names = module_dynamodb
    commit_chunks(stores(client, names, 64)[0], shard, plan_chunks(shard, [10] * 4))
    slow = SlowLookBackClient(client, delay_s=0.3)
    buffer = DynamoDBBufferStore(slow, names)
    # When reads start at chunk ends, where the look-back sent beside the forward Query turns out not to be needed,
    # and inside chunks, where it is
    for at, expected in ((10, [11, 12, 13]), (20, [21, 22, 23]), (25, [26, 27, 28])):
        slow.queries.clear()
        slow.answered.clear()
        assert [e.seq for e in buffer.read_log(shard, at, 3, images=False)] == expected
        # Then every request the read sent has answered by the time it returns (a Lambda's threads freeze when its
        # invocation ends; one left running would answer into the next)
        assert len(slow.queries) == 2 and len(slow.answered) == 2, at


def test_a_read_on_a_pool_thread_looks_back_only_when_the_items_after_the_position_need_it(
    module_dynamodb: Any, shard: ShardId
) -> None:
    # Given pushes of 10, first-keyed, read from a thread of the I/O pool (as a pull reads its shards)
    client, names = module_dynamodb
    commit_chunks(stores(client, names, 64)[0], shard, plan_chunks(shard, [10] * 4))
    counting = CountingClient(client)
    buffer = DynamoDBBufferStore(counting, names)

    def on_the_pool(at: int) -> tuple[list[int], list[dict[str, Any]]]:
        counting.queries.clear()
        read = submit(buffer.read_log, shard, at, 3, images=False)
        return [e.seq for e in read.result(timeout=30)], list(counting.queries)

    # When it reads from a chunk's end, then from inside a chunk
    at_end, sent_at_end = on_the_pool(20)
    inside, sent_inside = on_the_pool(25)
    # Then the read from the end takes one Query (the chunk after it starts right there), and the one from inside
    # asks for the chunk holding it only after the items after it: no speculative request runs alone before them
    assert at_end == [21, 22, 23] and inside == [26, 27, 28]
    assert len(sent_at_end) == 1 and sent_at_end[0].get("ScanIndexForward") is not False
    assert [q.get("ScanIndexForward") is False for q in sent_inside] == [False, True]


def test_requests_of_a_cursor_read_of_a_first_keyed_log(module_dynamodb: Any, shard: ShardId) -> None:
    # Given pushes of 10, first-keyed (each chunk records the commit HLC of the entry before it)
    client, names = module_dynamodb
    chunks = plan_chunks(shard, [10] * 6)
    commit_chunks(stores(client, names, 64)[0], shard, chunks)
    entries = [e for chunk in chunks for e in chunk]
    counting = CountingClient(client)
    buffer = DynamoDBBufferStore(counting, names)

    def cursor_read(at: int) -> tuple[int | None, list[int], int]:
        counting.queries.clear()
        at_hlc, after = buffer.read_log_at(shard, at, 15, images=False)
        return at_hlc, [e.seq for e in after], len(counting.queries)

    # Then a cursor at the end of a chunk (where a caught-up pull leaves it) is checked and read in one Query
    for at in (10, 20, 50):
        assert cursor_read(at) == (entries[at - 1].commit_hlc, list(range(at + 1, min(at + 15, 60) + 1)), 1), at
    # And a cursor at the end of the log reads nothing in one Query: a store that read the log's last chunk just now
    # tells its entry's commit HLC from it, one that did not leaves the entry to the head's check
    assert cursor_read(60) == (entries[59].commit_hlc, [], 1)
    buffer = DynamoDBBufferStore(counting, names)
    assert cursor_read(60) == (None, [], 1)
    # And a cursor inside a chunk (a page that ended inside one) is still checked, with the chunk holding it
    at_hlc, after, sent = cursor_read(25)
    assert (at_hlc, after) == (entries[24].commit_hlc, list(range(26, 41))) and sent > 1


class ItemCountingClient(CountingClient):
    """The client, with the log items its Query answers held recorded (their first and last sequences)."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.spans: list[tuple[int, int]] = []

    def query(self, **kwargs: Any) -> Any:
        out = super().query(**kwargs)
        for item in out.get("Items", []):
            first, count, _ = chunk_span(item)
            self.spans.append((first, first + count - 1))
        return out


def test_reads_by_position_stop_at_the_chunk_holding_the_last_entry_wanted(
    module_dynamodb: Any, shard: ShardId
) -> None:
    # Given pushes of 48, first-keyed (chunks starting at 1, 49, ..., 433)
    client, names = module_dynamodb
    size, total = 48, 480
    commit_chunks(stores(client, names, 64)[0], shard, plan_chunks(shard, [size] * 10))
    counting = ItemCountingClient(client)
    buffer = DynamoDBBufferStore(counting, names)
    for after_seq, limit in ((0, 25), (48, 101), (96, 200), (100, 101), (144, 1001), (480, 5)):
        wanted = list(range(after_seq + 1, min(after_seq + limit, total) + 1))
        # The chunks holding them: from the one holding the first to the one holding the last
        holding = len({(seq - 1) // size for seq in wanted})
        # (a cursor stands on an entry, mostly the last of a chunk, where a page of whole chunks ended; one inside a
        # chunk is read as read_log reads after the entry before it)
        for read in ("read_log", "read_log_at") if after_seq and after_seq % size == 0 else ("read_log",):
            counting.spans.clear()
            if read == "read_log":
                got = buffer.read_log(shard, after_seq, limit, images=False)
            else:
                _, got = buffer.read_log_at(shard, after_seq, limit, images=False)
            # When the entries after a position are read, by a page or by a cursor
            # Then they are all there, and no chunk past the one holding the last is read (a read from inside a chunk
            # reads the chunk holding the position once more). A cursor's read after a chunk end spans a chunk's
            # most entries at least (so that an empty answer says "caught up"): for fewer, the two chunks its
            # request asks for beyond the estimate may lie past the last one wanted.
            spare = 2 if read == "read_log_at" and limit < LOG_CHUNK_MAX_ENTRIES else 0
            where = (read, after_seq, limit, counting.spans)
            assert [e.seq for e in got] == wanted, where
            assert all(first <= (wanted or [after_seq])[-1] + spare * size for first, _ in counting.spans), where
            assert holding <= len(counting.spans) <= holding + 1 + spare, where


def test_a_new_process_reads_a_long_first_keyed_log_from_its_position(module_dynamodb: Any, shard: ShardId) -> None:
    # Given a long first-keyed log (30 pushes of 10)
    client, names = module_dynamodb
    chunks = plan_chunks(shard, [10] * 30)
    commit_chunks(stores(client, names, 64)[0], shard, chunks)
    entries = [e for chunk in chunks for e in chunk]
    counting = ItemCountingClient(client)

    # When processes new to the shard serve cursors (at the end of the log, where a caught-up client stands; at the
    # end of a chunk in its middle; inside a chunk)
    for at in (300, 150, 155):
        counting.queries.clear()
        counting.spans.clear()
        store = DynamoDBBufferStore(counting, names)
        at_hlc, after = store.read_log_at(shard, at, 5, images=False)
        # Then the cursor's entry is checked (for one at the end of the log, by the head later) and the entries
        # after it read
        assert at_hlc in ((entries[at - 1].commit_hlc, None) if at == 300 else (entries[at - 1].commit_hlc,))
        assert [e.seq for e in after] == list(range(at + 1, min(at + 5, 300) + 1)), at
        # And no chunk before the one holding the position is read
        assert all(last >= at for _, last in counting.spans), (at, counting.spans)
        # And a caught-up cursor is checked next in one Query (no chunk after it: its entry is left to the head's
        # check)
        counting.queries.clear()
        assert store.read_log_at(shard, 300, 5, images=False) == (None, [])
        assert len(counting.queries) == 1


def test_a_new_flush_store_reads_a_range_of_a_long_first_keyed_log_from_its_start(
    module_dynamodb: Any, shard: ShardId
) -> None:
    # Given a long first-keyed log (30 pushes of 10)
    client, names = module_dynamodb
    chunks = plan_chunks(shard, [10] * 30)
    commit_chunks(stores(client, names, 64)[0], shard, chunks)
    entries = [e for chunk in chunks for e in chunk]
    counting = ItemCountingClient(client)

    # When a flush store new to the shard (as each Spark task makes one) reads ranges in the middle of the log
    for lo, hi in ((150, 200), (155, 170)):
        counting.spans.clear()
        records = FlushStore(counting, names).read_records(ShardRange(shard.key, lo, hi))
        # Then it reads the range's entries, and no chunk before the one holding the range's start
        assert [r["seq"] for r in records] == [e.seq for e in entries[lo:hi]]
        assert all(last >= lo for _, last in counting.spans), (lo, counting.spans)


@pytest.mark.parametrize(("sizes", "limit"), [([48] * 10, 101), ([10] * 30, 25), ([250, 3, 250, 1, 100], 101)])
def test_a_cursor_paging_through_the_log_reads_each_page_in_one_query_from_the_chunk_it_read_last(
    module_dynamodb: Any, shard: ShardId, sizes: list[int], limit: int
) -> None:
    # Given a first-keyed log of chunks of several sizes
    client, names = module_dynamodb
    commit_chunks(stores(client, names, 64)[0], shard, plan_chunks(shard, sizes))
    total = sum(sizes)
    counting = ItemCountingClient(client)
    wall = [1_800_000_000_000]
    warm = DynamoDBBufferStore(counting, names, clock_ms=lambda: wall[0])

    # When a cursor pages through it as a pull does (each page ending inside a chunk, or at a chunk's end)
    position, pages = 0, 0
    while position < total:
        counting.queries.clear()
        if position == 0:
            at_hlc, got = None, warm.read_log(shard, 0, limit, images=False)
        else:
            at_hlc, got = warm.read_log_at(shard, position, limit, images=False)
            sent = len(counting.queries)
            # Then each page is what a store that remembers nothing reads, the cursor's entry checked the same (where
            # that store finds nothing after a position inside the log's last chunk, the pull reads from the entry)
            cold_hlc, cold = _cold_read_at(client, names, shard, position, limit)
            assert [(e.seq, e.commit_hlc, e.wire_json) for e in got] == [
                (e.seq, e.commit_hlc, e.wire_json) for e in cold
            ], position
            assert at_hlc == cold_hlc, position
            # And it takes one Query at most: the chunk holding the position (or opening after it) is the one read last
            assert sent <= 1, (position, counting.queries)
        assert [e.seq for e in got] == list(range(position + 1, min(position + limit, total) + 1))
        position, pages = got[-1].seq, pages + 1
        wall[0] += 1000
    assert pages == -(-total // limit)

    # And a chunk read longer ago than a client pages is not used again: a cursor at the log's end (standing in the
    # chunk read last) reads as a cold store's, its entry left to the head's check
    wall[0] += 31_000
    assert warm.read_log_at(shard, total, limit, images=False) == (None, [])


def _cold_read_at(client: Any, names: TableNames, shard: ShardId, position: int, limit: int) -> tuple[Any, Any]:
    cold = DynamoDBBufferStore(client, names)
    at_hlc, got = cold.read_log_at(shard, position, limit, images=False)
    if at_hlc is None and not got:
        return read_from_entry(cold, shard, position, limit, images=False)
    return at_hlc, got
