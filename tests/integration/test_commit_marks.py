"""Commit marks (``lakesync.aws.buffer.log_chunks.is_commit_mark``): only the log items holding a multiple of the mark
interval carry ``chlc``, so only they are in the sparse ``by_commit`` index (on the moto server), and the positions
found by commit HLC -- ``DynamoDBBufferStore.read_log_by_commit_hlc`` and ``FlushStore.release_target`` -- are what a
scan of every entry gives, whichever items carry ``chlc``: marks, every item (logs written before marks), any subset,
with the oldest items deleted (TTL) or a hole in the log."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakesync.aws.buffer.items import chunk_span
from lakesync.aws.buffer.log_chunks import COMMIT_MARK_EVERY, chunk_key, encode_entries, is_commit_mark
from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.flush_store import FlushStore
from lakesync.aws.tables import COMMIT_INDEX, TableNames
from lakesync.core.delta import make_delta
from lakesync.core.hlc import encode
from lakesync.core.log import Commit, LogEntry, ShardHead, ShardId

BASE_HLC = encode(1_763_000_000_000, 0)
Chunk = list[LogEntry]
Position = tuple[int, int]


@pytest.fixture
def shard(gw: str) -> ShardId:
    return ShardId(gw, "todos", 0)


def _entry(shard: ShardId, seq: int, commit_hlc: int) -> LogEntry:
    delta = make_delta(
        "UPDATE", table=shard.table, row_id=f"r{seq % 7}", client_id="c1", hlc=commit_hlc, columns={"v": seq}
    )
    return LogEntry(shard, seq, commit_hlc, delta, None, {"v": seq}, 50 + seq % 3)


def plan_chunks(
    shard: ShardId, sizes: Sequence[int], *, gaps: Sequence[int] = (0, 1, 1000), after: LogEntry | None = None
) -> list[Chunk]:
    """Chunks of ``sizes`` entries continuing ``after``: consecutive commit HLCs within a chunk, and the next chunk's
    first commit HLC ``gaps[i % len(gaps)]`` past the one after the previous chunk's last (0: no gap at all)."""
    seq = after.seq if after is not None else 0
    hlc = after.commit_hlc + 1 if after is not None else BASE_HLC
    chunks = []
    for i, size in enumerate(sizes):
        hlc += gaps[i % len(gaps)]
        chunks.append([_entry(shard, seq + 1 + j, hlc + j) for j in range(size)])
        seq, hlc = seq + size, hlc + size
    return chunks


def commit_chunks(store: DynamoDBBufferStore, shard: ShardId, chunks: Sequence[Chunk]) -> None:
    """Commit each chunk as a push does (one put each), continuing the shard's head."""
    head = store.get_heads([shard]).get(shard)
    for chunk in chunks:
        base = head or ShardHead(shard)
        new_head = ShardHead(
            shard,
            seq=chunk[-1].seq,
            bytes_total=base.bytes_total + sum(e.size for e in chunk),
            deltas_total=base.deltas_total + len(chunk),
            last_commit_hlc=chunk[-1].commit_hlc,
        )
        commit = Commit(shard, base.seq if head else -1, new_head, tuple(chunk), (), new_shard=head is None)
        store.commit(replace(commit, previous_commit_hlc=base.last_commit_hlc))
        head = new_head


def put_chunks(client: Any, names: TableNames, shard: ShardId, chunks: Sequence[Chunk], marks: Sequence[bool]) -> None:
    """Write the chunks' log items directly, with ``chlc`` exactly on those flagged in ``marks``."""
    items = []
    for chunk, mark in zip(chunks, marks, strict=True):
        item = {
            "shard": {"S": shard.key},
            "seq": {"N": str(chunk_key(chunk[0].seq))},
            "n": {"N": str(len(chunk))},
            "c": {"N": str(chunk[0].commit_hlc)},
            "z": {"B": encode_entries(chunk)},
            "exp": {"N": "9999999999"},
        }
        if mark:
            item["chlc"] = {"N": str(chunk[-1].commit_hlc)}
        items.append({"PutRequest": {"Item": item}})
    for start in range(0, len(items), 25):
        out = client.batch_write_item(RequestItems={names.deltas: items[start : start + 25]})
        assert not out.get("UnprocessedItems")


def delete_chunk(client: Any, names: TableNames, shard: ShardId, chunk: Chunk) -> None:
    """What DynamoDB's TTL does to an expired log item."""
    client.delete_item(
        TableName=names.deltas, Key={"shard": {"S": shard.key}, "seq": {"N": str(chunk_key(chunk[0].seq))}}
    )


def last_seq(item: dict[str, Any]) -> int:
    """The last sequence of a log item's chunk."""
    first, count, _ = chunk_span(item)
    return first + count - 1


def index_seqs(client: Any, names: TableNames, shard: ShardId) -> list[int]:
    """The last sequences of the log items in the ``by_commit`` index, by a raw Query of the index."""
    items = client.query(
        TableName=names.deltas,
        IndexName=COMMIT_INDEX,
        KeyConditionExpression="#sh = :s",
        ExpressionAttributeNames={"#sh": "shard"},
        ExpressionAttributeValues={":s": {"S": shard.key}},
        ConsistentRead=True,
    )["Items"]
    return [last_seq(item) for item in items]


# -- what a scan of every entry the buffer holds gives -----------------------------------------------------------------
def since_by_scan(held: Sequence[LogEntry], after_hlc: int, limit: int) -> list[Position]:
    """The entries past ``after_hlc``, from the first one held, up to the first gap, at most ``limit``."""
    run: list[LogEntry] = []
    for entry in held:
        if entry.commit_hlc <= after_hlc:
            continue
        if run and entry.seq != run[-1].seq + 1:
            break
        run.append(entry)
    return [(e.seq, e.commit_hlc) for e in run[:limit]]


def release_by_scan(held: Sequence[LogEntry], up_to_seq: int, cutoff_hlc: int) -> Position | None:
    """``release_target``'s documented answer: the last entry at or below ``up_to_seq`` whose commit HLC is at or
    below ``cutoff_hlc``; None when the buffer holds none, or holds one past ``up_to_seq`` but not ``up_to_seq``."""
    if up_to_seq <= 0:
        return None
    below = [e for e in held if e.commit_hlc <= cutoff_hlc]
    if not below:
        return None
    if below[-1].seq <= up_to_seq:
        return below[-1].seq, below[-1].commit_hlc
    at = [e.commit_hlc for e in held if e.seq == up_to_seq]
    return (up_to_seq, at[0]) if at else None


def hlc_probes(entries: Sequence[LogEntry], count: int, *, seed: int = 0) -> list[int]:
    """``count`` commit HLCs to find positions at (the moto server takes milliseconds a request): before the first
    entry and after the last, and a sample of the entries' commit HLCs and the values next to them (between two
    entries where chunks leave a gap); the first and last few always."""
    values = sorted({e.commit_hlc + d for e in entries for d in (-1, 0, 1)})
    edges = [0, entries[0].commit_hlc - 5000, entries[-1].commit_hlc + 5000, *values[:4], *values[-4:]]
    rest = [v for v in values if v not in edges]
    return sorted(set(edges) | set(random.Random(seed).sample(rest, max(0, min(len(rest), count - len(edges))))))


def check_positions(
    buffer: DynamoDBBufferStore, flush: FlushStore, shard: ShardId, held: Sequence[LogEntry], probes: Sequence[int]
) -> None:
    """Reads by commit HLC (at limit 1, as a ``since`` pull's positions, and a larger one) and release targets (up
    to the head and past it, up to just before the answer, and up to some other sequence) agree with the scan."""
    head = max((e.seq for e in held), default=0)
    limits = (2, 17, 70, 1000)
    for i, hlc in enumerate(probes):
        for limit in (1, limits[i % len(limits)]):
            got = [(e.seq, e.commit_hlc) for e in buffer.read_log_by_commit_hlc(shard, hlc, limit, images=False)]
            assert got == since_by_scan(held, hlc, limit), (hlc, limit)
        last = release_by_scan(held, head, hlc)
        ups = {head + i % 2, (hlc * 7919 + i) % (head + 2)} | ({last[0] - 1} if last and i % 2 else set())
        for up_to in sorted(ups):
            assert flush.release_target(shard, up_to, hlc) == release_by_scan(held, up_to, hlc), (up_to, hlc)


def stores(client: Any, names: TableNames, every: int) -> tuple[DynamoDBBufferStore, FlushStore]:
    return DynamoDBBufferStore(client, names, commit_mark_every=every), FlushStore(
        client, names, commit_mark_every=every
    )


# -- the rule ------------------------------------------------------------------------------------------------------
def test_a_chunk_is_a_mark_when_it_holds_a_multiple_of_the_interval() -> None:
    for every in (1, 2, 3, 8, 64):
        for first in range(1, 140):
            for last in range(first, min(first + 101, 200)):
                holds = any(seq % every == 0 for seq in range(first, last + 1))
                assert is_commit_mark(first, last, every) == holds, (first, last, every)
    assert COMMIT_MARK_EVERY == 64 and is_commit_mark(60, 70) and not is_commit_mark(1, 63)


# -- the writer: a sparse index ------------------------------------------------------------------------------------
SIZES = {
    "ones": ([1] * 40, 8),
    "tens": ([10] * 20, COMMIT_MARK_EVERY),
    "push-chunks": ([48] * 5, COMMIT_MARK_EVERY),
    "mixed": ([3, 1, 10, 48, 2, 7, 1, 1, 20, 5, 100, 4, 1, 16, 2], 16),
}


@pytest.mark.parametrize(("sizes", "every"), SIZES.values(), ids=SIZES.keys())
def test_the_index_holds_only_the_marks(module_dynamodb: Any, shard: ShardId, sizes: list[int], every: int) -> None:
    # Given pushes of these sizes, committed with marks every `every` entries
    client, names = module_dynamodb
    chunks = plan_chunks(shard, sizes)
    commit_chunks(DynamoDBBufferStore(client, names, commit_mark_every=every), shard, chunks)

    # Then only the chunks holding a multiple of `every` carry chlc (their last commit HLC), all carry n and c, and
    # the index holds exactly those chunks
    marks = [c[-1].seq for c in chunks if any(e.seq % every == 0 for e in c)]
    assert marks and len(marks) < len(chunks)
    items = client.query(
        TableName=names.deltas,
        KeyConditionExpression="#sh = :s",
        ExpressionAttributeNames={"#sh": "shard"},
        ExpressionAttributeValues={":s": {"S": shard.key}},
        ConsistentRead=True,
    )["Items"]
    assert len(items) == len(chunks) and all("n" in item and "c" in item for item in items)
    by_seq = {last_seq(item): item for item in items}
    assert sorted(seq for seq, item in by_seq.items() if "chlc" in item) == marks
    for chunk in chunks:
        if chunk[-1].seq in marks:
            assert by_seq[chunk[-1].seq]["chlc"] == {"N": str(chunk[-1].commit_hlc)}
    assert index_seqs(client, names, shard) == marks


# -- the readers ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("sizes", "every"), SIZES.values(), ids=SIZES.keys())
def test_positions_by_commit_hlc_are_those_of_a_scan(
    module_dynamodb: Any, shard: ShardId, sizes: list[int], every: int
) -> None:
    # Given a log committed with sparse marks
    client, names = module_dynamodb
    chunks = plan_chunks(shard, sizes)
    buffer, flush = stores(client, names, every)
    commit_chunks(buffer, shard, chunks)
    entries = [e for chunk in chunks for e in chunk]

    # Then every read by commit HLC and every release target is the scan's (probes before the first mark included)
    check_positions(buffer, flush, shard, entries, hlc_probes(entries, 40))
    # And so they are for a reader that expects another mark interval (it only sizes the reads)
    check_positions(*stores(client, names, 5), shard, entries, hlc_probes(entries, 12, seed=1))
    # And a read returns the entries themselves, images and all
    middle = entries[len(entries) // 2]
    assert buffer.read_log_by_commit_hlc(shard, middle.commit_hlc - 1, 30) == entries[middle.seq - 1 : middle.seq + 29]


def test_the_oldest_items_deleted_one_by_one(module_dynamodb: Any, shard: ShardId) -> None:
    # Given a log with sparse marks
    client, names = module_dynamodb
    chunks = plan_chunks(shard, [3, 1, 10, 5, 2, 7, 1, 1, 20, 5, 4, 1, 16, 2, 9, 3])
    buffer, flush = stores(client, names, 8)
    commit_chunks(buffer, shard, chunks)
    # When TTL deletes its oldest items, marks among them, one by one
    for gone in range(1, len(chunks) - 1):
        delete_chunk(client, names, shard, chunks[gone - 1])
        held = [e for chunk in chunks[gone:] for e in chunk]
        # Then the positions are those of a scan of what is left (no mark at or below an early probe any more)
        check_positions(buffer, flush, shard, held, hlc_probes(held, 12, seed=gone))


def test_a_log_written_before_marks_then_with_them(module_dynamodb: Any, shard: ShardId) -> None:
    # Given a log written with chlc on every item (before marks), then with sparse marks
    client, names = module_dynamodb
    old = plan_chunks(shard, [2, 10, 1, 1, 7, 3, 10, 4])
    new = plan_chunks(shard, [10, 1, 3, 10, 10, 2, 1, 1, 5, 10, 10, 3], after=old[-1][-1])
    commit_chunks(DynamoDBBufferStore(client, names, commit_mark_every=1), shard, old)
    buffer, flush = stores(client, names, 16)
    commit_chunks(buffer, shard, new)
    assert index_seqs(client, names, shard) == [c[-1].seq for c in old] + [
        c[-1].seq for c in new if is_commit_mark(c[0].seq, c[-1].seq, 16)
    ]
    entries = [e for chunk in old + new for e in chunk]

    # Then positions are those of a scan, at the default interval too, and with the oldest items gone
    check_positions(buffer, flush, shard, entries, hlc_probes(entries, 40))
    check_positions(*stores(client, names, COMMIT_MARK_EVERY), shard, entries, hlc_probes(entries, 12, seed=1))
    for chunk in old[:5]:
        delete_chunk(client, names, shard, chunk)
    held = [e for chunk in old[5:] + new for e in chunk]
    check_positions(buffer, flush, shard, held, hlc_probes(held, 20, seed=2))


def test_a_hole_in_the_log(module_dynamodb: Any, shard: ShardId) -> None:
    # Given a log with sparse marks, and an item gone from its middle (a lost write, a restore)
    client, names = module_dynamodb
    chunks = plan_chunks(shard, [4, 4, 4, 4, 4, 4, 4, 4, 4, 4])
    buffer, flush = stores(client, names, 8)
    commit_chunks(buffer, shard, chunks)
    delete_chunk(client, names, shard, chunks[4])  # entries 17..20, not a mark
    held = [e for i, chunk in enumerate(chunks) if i != 4 for e in chunk]

    # Then reads by commit HLC stop at the hole, and the release target is None when it would be in the hole
    check_positions(buffer, flush, shard, held, hlc_probes(held, 30))
    for up_to in range(43):  # every sequence, before, in and after the hole
        for cutoff in (chunks[3][-1].commit_hlc, chunks[5][1].commit_hlc, chunks[-1][-1].commit_hlc):
            assert flush.release_target(shard, up_to, cutoff) == release_by_scan(held, up_to, cutoff), (up_to, cutoff)
    assert flush.release_target(shard, 18, chunks[-1][-1].commit_hlc) is None
    assert flush.release_target(shard, 18, chunks[3][-1].commit_hlc) == (16, chunks[3][-1].commit_hlc)
    assert [e.seq for e in buffer.read_log_by_commit_hlc(shard, chunks[3][0].commit_hlc, 100)] == [14, 15, 16]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(1, 100) | st.integers(1, 12), min_size=1, max_size=14),
    gaps=st.lists(st.integers(0, 3), min_size=1, max_size=4),
    seed=st.integers(0, 2**32),
    gone=st.integers(0, 3),
)
def test_any_items_may_carry_chlc(
    module_dynamodb: Any, sizes: list[int], gaps: list[int], seed: int, gone: int
) -> None:
    # Given any chunks, any subset of them carrying chlc, and perhaps the oldest ones deleted
    client, names = module_dynamodb
    shard = ShardId(f"gw-{uuid.uuid4().hex[:12]}", "todos", 0)
    rng = random.Random(seed)
    chunks = plan_chunks(shard, sizes, gaps=gaps)
    gone = min(gone, len(chunks) - 1)
    put_chunks(client, names, shard, chunks[gone:], [rng.random() < 0.3 for _ in chunks[gone:]])
    held = [e for chunk in chunks[gone:] for e in chunk]
    probes = hlc_probes(held, 12, seed=seed)
    buffer, flush = stores(client, names, rng.choice([1, 4, 16, 64]))

    # Then the positions are those of a scan
    for hlc in probes:
        limit = rng.choice([1, 2, 10, 200])
        got = [(e.seq, e.commit_hlc) for e in buffer.read_log_by_commit_hlc(shard, hlc, limit, images=False)]
        assert got == since_by_scan(held, hlc, limit), (hlc, limit)
        up_to = rng.randint(0, held[-1].seq + 2)
        assert flush.release_target(shard, up_to, hlc) == release_by_scan(held, up_to, hlc), (up_to, hlc)


# -- how many requests -----------------------------------------------------------------------------------------------
class CountingClient:
    """A DynamoDB client that records its Query requests."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.queries: list[dict[str, Any]] = []

    def query(self, **kwargs: Any) -> Any:
        self.queries.append(kwargs)
        return self._client.query(**kwargs)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return getattr(self._client, name)


@pytest.mark.parametrize("size", [1, 10, 48])
def test_a_position_by_commit_hlc_takes_an_index_query_and_a_table_query(
    module_dynamodb: Any, shard: ShardId, size: int
) -> None:
    # Given pushes of `size` entries, marks at the default interval
    client, names = module_dynamodb
    chunks = plan_chunks(shard, [size] * (3 * COMMIT_MARK_EVERY // size + 2))
    commit_chunks(DynamoDBBufferStore(client, names), shard, chunks)
    entries = [e for chunk in chunks for e in chunk]
    counting = CountingClient(client)
    buffer, flush = DynamoDBBufferStore(counting, names), FlushStore(counting, names)
    flush.heads([shard])  # as a flush run reads them before it releases: the head says the log is last-keyed

    # When positions past the first mark are found by commit HLC
    first_mark = next(c[-1] for c in chunks if is_commit_mark(c[0].seq, c[-1].seq))
    for entry in entries[first_mark.seq - 1 :: 7]:
        for limit in (1, 100):
            counting.queries.clear()
            got = buffer.read_log_by_commit_hlc(shard, entry.commit_hlc, limit, images=False)
            # Then a read takes one Query of the index and one of the table
            assert [e.seq for e in got] == [e.seq for e in entries[entry.seq : entry.seq + limit]]
            assert [q.get("IndexName") for q in counting.queries] == [COMMIT_INDEX, None], (entry.seq, limit)
        counting.queries.clear()
        assert flush.release_target(shard, entries[-1].seq, entry.commit_hlc) == (entry.seq, entry.commit_hlc)
        # And a release target one of the index and at most one of the table, reading keys and counts only
        assert [q.get("IndexName") for q in counting.queries][:1] == [COMMIT_INDEX] and len(counting.queries) <= 2
        assert all(q["ProjectionExpression"] == "seq, n, c" for q in counting.queries[1:])
