"""The BufferStore contract (lakesync.ports.BufferStore), one suite for the in-memory and the DynamoDB adapter (on
the moto server): commits are all-or-nothing under head and row-version guards, a chunk's basis (head, rows, live
deltaIds) reads back exactly, recorded deltaIds count until they expire, logs page and order by sequence and by
commit HLC, and the row index round-trips every RowState exactly."""

from __future__ import annotations

import math
import os
from dataclasses import replace
from typing import Any

import pytest

from lakesync.core.canonical import JsonValue
from lakesync.core.delta import make_delta
from lakesync.core.hlc import encode
from lakesync.core.log import (
    ROW_RECENT_KEYS,
    Commit,
    CommitBasis,
    CommitConflict,
    LogEntry,
    RowWrite,
    ShardHead,
    ShardId,
    StoredRow,
    dedup_key,
    recent_key,
)
from lakesync.core.merge import ColumnState, RowState, Version
from lakesync.gateway.memory import InMemoryBufferStore
from lakesync.ports import BufferStore

NOW = 1_700_000_000


@pytest.fixture(params=["memory", "dynamodb"])
def store(request: pytest.FixtureRequest) -> BufferStore:
    """The in-memory store, and the DynamoDB store."""
    if request.param == "memory":
        return InMemoryBufferStore()
    from lakesync.aws.buffer.store import DynamoDBBufferStore

    return DynamoDBBufferStore(*request.getfixturevalue("module_dynamodb"))


@pytest.fixture
def shard(gw: str) -> ShardId:
    return ShardId(gw, "todos", 0)


def hlc(i: int) -> int:
    return encode(NOW * 1000 + i, 0)


def state(row_id: str, value: JsonValue, at: int = 1, client: str = "c1", table: str = "todos") -> RowState:
    return RowState(table, row_id, {"v": ColumnState(value, hlc(at), client)}, None, Version(hlc(at), client))


class Writer:
    """Builds commits against a store the way the push service does, tracking heads and row versions."""

    def __init__(self, store: BufferStore, shard: ShardId) -> None:
        self.store = store
        self.shard = shard

    def plan(self, rows: dict[str, JsonValue], *, commit_hlc: int | None = None) -> Commit:
        head = self.store.get_heads([self.shard]).get(self.shard)
        base = head or ShardHead(self.shard)
        stored = self.store.get_rows(self.shard.gateway, [(self.shard.table, r) for r in rows])
        chlc = commit_hlc if commit_hlc is not None else max(base.last_commit_hlc + 1, hlc(base.seq + 1))
        entries, writes = [], []
        for i, (row_id, value) in enumerate(rows.items(), start=1):
            seq = base.seq + i
            delta = make_delta(
                "UPDATE", table=self.shard.table, row_id=row_id, client_id="c1", hlc=hlc(seq), columns={"v": value}
            )
            previous = stored.get((self.shard.table, row_id))
            before = previous.state.values() if previous else None
            new_state = state(row_id, value, at=seq, table=self.shard.table)
            # As the push service does: a commit's entries carry consecutive commit HLCs.
            entries.append(LogEntry(self.shard, seq, chlc + i - 1, delta, before, new_state.values(), 100 + i))
            version = previous.version if previous else 0
            writes.append(RowWrite(StoredRow(new_state, seq), version))
        new_head = replace(
            base,
            seq=base.seq + len(entries),
            bytes_total=base.bytes_total + sum(e.size for e in entries),
            deltas_total=base.deltas_total + len(entries),
            last_commit_hlc=chlc + len(entries) - 1 if entries else base.last_commit_hlc,
        )
        return Commit(
            shard=self.shard,
            expected_seq=base.seq if head else -1,
            head=new_head,
            entries=tuple(entries),
            rows=tuple(writes),
            new_shard=head is None,
            previous_commit_hlc=base.last_commit_hlc,
        )

    def commit(
        self,
        rows: dict[str, JsonValue],
        *,
        commit_hlc: int | None = None,
        delta_ids: tuple[str, ...] | None = None,
        expires_at: int = NOW + 3600,
    ) -> Commit:
        """Commit ``rows``, then record ``delta_ids`` (default: the entries' deltaIds) as the push service does."""
        commit = self.plan(rows, commit_hlc=commit_hlc)
        self.store.commit(commit)
        ids = delta_ids if delta_ids is not None else ids_of(commit)
        self.store.record_delta_ids(self.shard.gateway, list(ids), expires_at)
        return commit


def ids_of(commit: Commit) -> tuple[str, ...]:
    """The dedup keys of the commit's deltas, as the push service records them."""
    return tuple(dedup_key(e.delta.client_id, e.delta.delta_id) for e in commit.entries)


def everything(store: BufferStore, shard: ShardId, delta_ids: list[str]) -> tuple[Any, ...]:
    """All observable state of the shard's gateway and the given deltaIds."""
    gw = shard.gateway
    rows = [(shard.table, f"r{i}") for i in range(40)]
    return (
        store.list_shards(gw),
        store.get_heads([shard]),
        store.read_log(shard, 0, 1000),
        store.read_log_by_commit_hlc(shard, 0, 1000),
        store.get_rows(gw, rows),
        store.seen_delta_ids(gw, delta_ids, NOW),
    )


# -- commits -----------------------------------------------------------------------------------------------------


def test_buffer_commit_creates_the_shard_and_reads_back_exactly(store: BufferStore, shard: ShardId) -> None:
    commit = Writer(store, shard).commit({"r1": "a", "r2": {"nested": [1, None]}})

    assert store.list_shards(shard.gateway) == [shard]
    assert store.get_heads([shard]) == {shard: commit.head}
    assert store.read_log(shard, 0, 100) == list(commit.entries)
    assert store.get_rows(shard.gateway, [("todos", "r1"), ("todos", "r2")]) == {
        ("todos", "r1"): commit.rows[0].row,
        ("todos", "r2"): commit.rows[1].row,
    }
    assert store.seen_delta_ids(shard.gateway, [*ids_of(commit), "unknown"], NOW) == set(ids_of(commit))


def test_buffer_later_commits_advance_the_head_and_row_versions(store: BufferStore, shard: ShardId) -> None:
    writer = Writer(store, shard)
    writer.commit({"r1": "a"})
    second = writer.commit({"r1": "b", "r2": "c"})

    head = store.get_heads([shard])[shard]
    assert head == second.head
    assert (head.seq, head.deltas_total) == (3, 3)
    rows = store.get_rows(shard.gateway, [("todos", "r1"), ("todos", "r2")])
    # (a row's version is the position of the last entry it holds)
    assert rows[("todos", "r1")].version == 2 and rows[("todos", "r1")].state.values() == {"v": "b"}
    assert rows[("todos", "r2")].version == 3
    assert [e.seq for e in store.read_log(shard, 0, 100)] == [1, 2, 3]
    assert store.read_log(shard, 0, 100)[1].before == {"v": "a"}


def test_buffer_recording_delta_ids_alone_keeps_the_head(store: BufferStore, shard: ShardId) -> None:
    writer = Writer(store, shard)
    writer.commit({"r1": "a"})
    head = store.get_heads([shard])[shard]
    store.record_delta_ids(shard.gateway, ["noop-1", "noop-2", "noop-1"], NOW + 60)
    assert store.get_heads([shard])[shard] == head
    assert store.seen_delta_ids(shard.gateway, ["noop-1", "noop-2", "noop-3"], NOW) == {"noop-1", "noop-2"}


def test_buffer_full_chunk_of_48_deltas_commits_and_records_at_once(store: BufferStore, shard: ShardId) -> None:
    # 48 entries + 48 rows + head + shard registry: the largest commit the push makes by default
    commit = Writer(store, shard).commit({f"r{i}": i for i in range(48)})
    assert len(store.read_log(shard, 0, 100)) == 48
    assert store.get_heads([shard])[shard] == commit.head
    assert len(store.seen_delta_ids(shard.gateway, list(ids_of(commit)), NOW)) == 48


def test_buffer_commit_basis_reads_head_and_rows_together(store: BufferStore, shard: ShardId) -> None:
    # Given a shard with 48 rows
    Writer(store, shard).commit({f"r{i}": i for i in range(48)})
    rows = [("todos", f"r{i}") for i in range(40, 50)] + [("todos", "r41")]

    # When a chunk reads its basis: 11 row keys (two missing, one repeated) in one call
    basis = store.read_commit_basis(shard, rows)

    # Then it equals what the separate reads give
    assert basis == CommitBasis(head=store.get_heads([shard])[shard], rows=store.get_rows(shard.gateway, rows))
    assert set(basis.rows) == {("todos", f"r{i}") for i in range(40, 48)}


def test_buffer_commit_basis_of_an_unknown_shard_is_empty(store: BufferStore, shard: ShardId) -> None:
    assert store.read_commit_basis(shard, [("todos", "r1")]) == CommitBasis(head=None, rows={})
    assert store.read_commit_basis(shard, []) == CommitBasis(head=None, rows={})


STALE = {
    "stale_head": lambda c: replace(c, expected_seq=c.expected_seq - 1),
    "head_ahead": lambda c: replace(c, expected_seq=c.expected_seq + 1),
    "new_shard_exists": lambda c: replace(c, new_shard=True, expected_seq=-1),
}


@pytest.mark.parametrize("corrupt", list(STALE.values()), ids=list(STALE))
def test_buffer_stale_commit_writes_nothing_at_all(store: BufferStore, shard: ShardId, corrupt: Any) -> None:
    # Given a shard with two rows
    writer = Writer(store, shard)
    writer.commit({"r1": "a", "r2": "b"})
    good = writer.plan({"r1": "x", "r2": "y", "r3": "z"})
    bad = corrupt(good)
    before = everything(store, shard, list(ids_of(good)))

    # When a commit guarded by a stale head is applied
    with pytest.raises(CommitConflict):
        store.commit(bad)

    # Then the log, the head, every row and the dedup records are unchanged
    assert everything(store, shard, list(ids_of(good))) == before
    # And the correct commit still goes through
    store.commit(good)
    assert store.get_heads([shard])[shard].seq == 5


def test_buffer_new_shard_guard_on_an_empty_store(store: BufferStore, shard: ShardId) -> None:
    writer = Writer(store, shard)
    commit = writer.plan({"r1": "a"})
    with pytest.raises(CommitConflict):
        store.commit(replace(commit, new_shard=False, expected_seq=0))
    assert everything(store, shard, list(ids_of(commit))) == ([], {}, [], [], {}, set())


@pytest.mark.parametrize("later_s", [0, 1, 100])
def test_buffer_expired_dedup_records_do_not_count(store: BufferStore, shard: ShardId, later_s: int) -> None:
    # Given a deltaId recorded until NOW + 10
    writer = Writer(store, shard)
    writer.commit({"r1": "a"}, delta_ids=("id-a",), expires_at=NOW + 10)
    assert store.seen_delta_ids(shard.gateway, ["id-a"], NOW + 9) == {"id-a"}

    # When the clock reaches the expiry (or passes it)
    now = NOW + 10 + later_s

    # Then it is not seen any more and may be recorded again
    assert store.seen_delta_ids(shard.gateway, ["id-a"], now) == set()
    writer.commit({"r2": "b"}, delta_ids=("id-a",), expires_at=now + 10)
    assert store.seen_delta_ids(shard.gateway, ["id-a"], now + 9) == {"id-a"}


def test_buffer_recording_a_delta_id_again_moves_its_expiry(store: BufferStore, shard: ShardId) -> None:
    store.record_delta_ids(shard.gateway, ["id-a"], NOW + 10)
    store.record_delta_ids(shard.gateway, ["id-a"], NOW + 100)
    assert store.seen_delta_ids(shard.gateway, ["id-a"], NOW + 50) == {"id-a"}
    assert store.seen_delta_ids(shard.gateway, ["id-a"], NOW + 100) == set()


def test_buffer_records_more_delta_ids_than_one_write_request_holds(store: BufferStore, shard: ShardId) -> None:
    ids = [f"id-{i}" for i in range(130)]
    store.record_delta_ids(shard.gateway, ids, NOW + 10)
    assert store.seen_delta_ids(shard.gateway, [*ids, "id-x"], NOW) == set(ids)


def test_buffer_dedup_and_rows_are_per_gateway(store: BufferStore, shard: ShardId) -> None:
    writer = Writer(store, shard)
    commit = writer.commit({"r1": "a"})
    other = ShardId(shard.gateway + "-other", "todos", 0)
    assert store.seen_delta_ids(other.gateway, list(ids_of(commit)), NOW) == set()
    assert store.get_rows(other.gateway, [("todos", "r1")]) == {}
    assert store.list_shards(other.gateway) == []
    Writer(store, other).commit({"r1": "a"})
    assert store.list_shards(other.gateway) == [other]
    assert store.list_shards(shard.gateway) == [shard]


def test_buffer_dedup_records_are_per_client(store: BufferStore, shard: ShardId) -> None:
    # Given client b's delta recorded under a deltaId that client a also uses
    store.record_delta_ids(shard.gateway, [dedup_key("b", "delta-1")], NOW + 60)
    # Then only b's delta counts as recorded: a's delta of that deltaId is not, and cannot vanish as a duplicate
    keys = [dedup_key("a", "delta-1"), dedup_key("b", "delta-1")]
    assert store.seen_delta_ids(shard.gateway, keys, NOW) == {dedup_key("b", "delta-1")}


@pytest.mark.parametrize(
    ("client", "delta_id"),
    [("c", "d" * 2_100), ("😀" * 300, "x"), ("a#b", "c"), ("a", "b#c")],
    ids=["long-delta-id", "long-client", "hash-in-client", "hash-in-delta-id"],
)
def test_buffer_dedup_keys_are_short_and_unambiguous(
    store: BufferStore, shard: ShardId, client: str, delta_id: str
) -> None:
    # Given a dedup key of any ids (before: the key was gw#deltaId, beyond DynamoDB's 2,048 bytes for a long one)
    key = dedup_key(client, delta_id)
    assert len(key) == 22 and key.isascii()
    # When it is recorded, Then it reads back, and no other split of the same characters collides with it
    store.record_delta_ids(shard.gateway, [key], NOW + 60)
    assert store.seen_delta_ids(shard.gateway, [key, dedup_key(client + "#", delta_id)], NOW) == {key}
    assert dedup_key("a#b", "c") != dedup_key("a", "b#c")


# -- logs --------------------------------------------------------------------------------------------------------


def _three_commits(store: BufferStore, shard: ShardId) -> list[LogEntry]:
    writer = Writer(store, shard)
    writer.commit({f"r{i}": i for i in range(4)}, commit_hlc=hlc(100))
    writer.commit({f"r{i}": i for i in range(4, 7)}, commit_hlc=hlc(200))
    writer.commit({f"r{i}": i for i in range(7, 12)}, commit_hlc=hlc(300))
    entries = store.read_log(shard, 0, 1000)
    assert [e.seq for e in entries] == list(range(1, 13))
    return entries


def test_buffer_read_log_pages_by_sequence(store: BufferStore, shard: ShardId) -> None:
    entries = _three_commits(store, shard)
    for after in (0, 3, 4, 11, 12, 50):
        for limit in (1, 5, 100):
            assert store.read_log(shard, after, limit) == entries[after : after + limit], (after, limit)


def test_buffer_read_log_at_checks_the_entry_a_cursor_stands_on(store: BufferStore, shard: ShardId) -> None:
    entries = _three_commits(store, shard)
    for seq in range(15):
        for limit in (1, 5, 100):
            held = entries[seq - 1].commit_hlc if 1 <= seq <= len(entries) else None
            read = store.read_log_at(shard, seq, limit)
            # Either the entry's commit HLC and the entries after it, or nothing read: left to the caller's check
            # against the head (which then reads with read_log)
            assert read in ((held, entries[seq : seq + limit]), (None, [])), (seq, limit)
    # The memory store always reads the entry itself
    if isinstance(store, InMemoryBufferStore):
        assert store.read_log_at(shard, 8, 2) == (entries[7].commit_hlc, entries[8:10])


def test_buffer_read_log_by_commit_hlc_orders_by_commit_then_sequence(store: BufferStore, shard: ShardId) -> None:
    entries = _three_commits(store, shard)
    # A commit's entries carry consecutive commit HLCs: hlc(100) + 0..3, hlc(200) + 0..2, hlc(300) + 0..4.
    cases = [
        (0, 100, 0),
        (hlc(100) - 1, 3, 0),
        (hlc(100), 100, 1),
        (hlc(100) + 1, 2, 2),
        (hlc(100) + 3, 100, 4),
        (hlc(150), 2, 4),
        (hlc(200) + 2, 5, 7),
        (hlc(300) + 2, 5, 10),
        (hlc(300) + 4, 5, 12),
    ]
    for after, limit, start in cases:
        assert store.read_log_by_commit_hlc(shard, after, limit) == entries[start : start + limit], (after, limit)


def test_buffer_reads_of_unknown_shards_are_empty(store: BufferStore, shard: ShardId) -> None:
    unknown = ShardId(shard.gateway, "nothing", 3)
    assert store.read_log(unknown, 0, 10) == []
    assert store.read_log_by_commit_hlc(unknown, 0, 10) == []
    assert store.get_heads([unknown]) == {}
    assert store.get_rows(shard.gateway, []) == {}
    assert store.seen_delta_ids(shard.gateway, [], NOW) == set()


def test_buffer_list_shards_and_get_heads_cover_sub_shards_sorted(store: BufferStore, shard: ShardId) -> None:
    gw = shard.gateway
    shards = [ShardId(gw, "todos", 2), ShardId(gw, "alpha", 0), ShardId(gw, "todos", 0), ShardId(gw, "todos", 11)]
    for shard in shards:
        Writer(store, shard).commit({"r1": shard.sub})
    assert store.list_shards(shard.gateway) == sorted(shards)
    heads = store.get_heads([*shards, shards[0], ShardId(shard.gateway, "missing", 0)])
    assert set(heads) == set(shards)
    assert all(h.shard == s and h.seq == 1 for s, h in heads.items())


def test_buffer_log_entries_keep_absent_and_empty_rows_apart(store: BufferStore, shard: ShardId) -> None:
    writer = Writer(store, shard)
    commit = writer.plan({"r1": "a", "r2": "b"})
    e1, e2 = commit.entries
    entries = (e1.with_images(None, {}), e2.with_images({}, None))
    store.commit(replace(commit, entries=entries))
    assert tuple(store.read_log(shard, 0, 10)) == entries


# -- the row index round-trips RowState exactly ------------------------------------------------------------------


def _exact(value: Any) -> Any:
    """A structure that tells apart what ``==`` conflates: True/1/1.0, 0.0/-0.0, int/float."""
    if isinstance(value, bool) or value is None:
        return (type(value).__name__, value)
    if isinstance(value, int):
        return ("int", str(value))
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, str):
        return ("str", value.encode("utf-16-le", "surrogatepass").hex())
    if isinstance(value, list):
        return ("list", [_exact(v) for v in value])
    if isinstance(value, dict):
        return ("dict", sorted((_exact(k), _exact(v)) for k, v in value.items()))
    if isinstance(value, RowState):
        return (
            _exact(value.table),
            _exact(value.row_id),
            _exact({k: [c.value, c.hlc, c.client_id] for k, c in value.columns.items()}),
            _exact([value.tombstone.hlc, value.tombstone.client_id] if value.tombstone else None),
            _exact([value.written.hlc, value.written.client_id] if value.written else None),
        )
    raise TypeError(type(value))


TRICKY_VALUES: dict[str, JsonValue] = {
    "lone_high": "\ud800",
    "lone_low_inside": "a\udfffb",
    "pair_and_bmp": "😀 ü \ue000 \u2028 \x00 \"'\\",
    "big_int": 2**64 + 1,
    "neg_big_int": -(2**70),
    "max_safe": 2**53 + 1,
    "float": 0.1,
    "neg_zero": -0.0,
    "tiny": 5e-324,
    "huge": 1.7976931348623157e308,
    "float_integral": 3.0,
    "int_one": 1,
    "true": True,
    "null": None,
    "empty_str": "",
    "empty_list": [],
    "empty_obj": {},
    "nested": {"a": [1, {"b": None, "\ud83d": [True, 2.5, "x"]}], "": {"deep": [[[]]]}},
}


def test_buffer_row_index_round_trips_row_state_exactly(store: BufferStore, shard: ShardId) -> None:
    # Given row states with tricky values, names and versions
    t1, t2 = encode(NOW * 1000, 1), encode(NOW * 1000 + 5, 0xFFFF)
    columns = {name: ColumnState(value, t2, "cl\ud800ient-😀") for name, value in TRICKY_VALUES.items()}
    columns["naïve \udc00 col"] = ColumnState("v", t2 - 1, "a")
    states = [
        RowState("todos", "row/ü#:😀 é", columns, Version(t1, "deleter"), Version(t2, "cl\ud800ient-😀")),
        RowState("todos", "only-tombstone", {}, Version(t2, "x"), None),
        RowState("todos", "empty-live-row", {}, None, Version(t1, "y")),
        RowState(
            "todos", "big-hlc", {"c": ColumnState(math.pi, (1 << 64) - 1, "z")}, None, Version((1 << 64) - 1, "z")
        ),
    ]
    # (committed with the entry of a first row: a commit holds at least one)
    commit = replace(Writer(store, shard).plan({"r0": "a"}), rows=tuple(RowWrite(StoredRow(s, 1), 0) for s in states))

    # When they are committed and read back
    store.commit(commit)
    found = store.get_rows(shard.gateway, [(s.table, s.row_id) for s in states] + [("todos", "missing")])

    # Then every state is exactly the one written
    assert set(found) == {(s.table, s.row_id) for s in states}
    for s in states:
        got = found[(s.table, s.row_id)]
        assert got.version == 1
        assert _exact(got.state) == _exact(s)


def test_buffer_log_entries_round_trip_tricky_values_exactly(store: BufferStore, shard: ShardId) -> None:
    writer = Writer(store, shard)
    commit = writer.plan({"r1": TRICKY_VALUES})
    store.commit(commit)
    (entry,) = store.read_log(shard, 0, 10)
    assert _exact(entry.delta.values()) == _exact(commit.entries[0].delta.values())
    assert _exact(entry.after) == _exact(commit.entries[0].after)
    assert entry.delta.delta_id == commit.entries[0].delta.delta_id


# -- item sizes --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("char", ["a", "é", "漢", "😀"], ids=["ascii", "latin", "cjk", "astral"])
def test_buffer_stores_the_largest_row_the_push_service_admits(
    store: BufferStore, shard: ShardId, char: str, request: pytest.FixtureRequest
) -> None:
    from lakesync.core.canonical import utf8_size
    from lakesync.core.hlc import HLC
    from lakesync.core.messages import SyncPush
    from lakesync.gateway.deps import GatewayDeps, GatewaySettings
    from lakesync.gateway.memory import InMemoryActionStore, InMemoryConfigStore
    from lakesync.gateway.push import push

    # Given a row just under the push's row size limit, in the given alphabet
    settings = GatewaySettings()
    overhead = utf8_size([{"column": "body", "value": ""}])
    text = char * ((settings.max_row_bytes - overhead) // len(char.encode()))
    assert settings.max_row_bytes - 4 < utf8_size([{"column": "body", "value": text}]) <= settings.max_row_bytes
    deps = GatewayDeps(store, InMemoryConfigStore(), InMemoryActionStore(), settings, HLC(lambda: NOW * 1000))
    delta = make_delta("INSERT", table="todos", row_id="big", client_id="c", hlc=hlc(1), columns={"body": text})

    # When it is pushed
    push(deps, shard.gateway, SyncPush("c", (delta,)), client_id="c")

    # Then it is stored
    assert store.get_rows(shard.gateway, [("todos", "big")])[("todos", "big")].state.values() == {"body": text}


def test_buffer_log_reads_without_images_leave_out_only_the_row_images(store: BufferStore, shard: ShardId) -> None:
    # Given inserts and then updates (entries with a before and an after image)
    writer = Writer(store, shard)
    writer.commit({f"r{i}": i for i in range(4)}, commit_hlc=hlc(100))
    writer.commit({"r0": "x", "r1": "y", "r9": "z"}, commit_hlc=hlc(200))
    entries = store.read_log(shard, 0, 1000)
    assert [e.before is not None for e in entries] == [False] * 4 + [True, True, False]

    # When the log is read without images, every entry is the same but for its images
    bare = [e.with_images(None, None) for e in entries]
    assert store.read_log(shard, 0, 1000, images=False) == bare
    assert store.read_log(shard, 3, 2, images=False) == bare[3:5]
    assert store.read_log_by_commit_hlc(shard, hlc(100) + 3, 5, images=False) == bare[4:]


def _pushed(store: BufferStore, gw: str, *deltas: Any, client: str = "c") -> Any:
    from lakesync.core.hlc import HLC
    from lakesync.core.messages import SyncPush
    from lakesync.gateway.deps import GatewayDeps, GatewaySettings
    from lakesync.gateway.memory import InMemoryActionStore, InMemoryConfigStore
    from lakesync.gateway.push import push

    deps = GatewayDeps(store, InMemoryConfigStore(), InMemoryActionStore(), GatewaySettings(), HLC(lambda: NOW * 1000))
    return push(deps, gw, SyncPush(client, tuple(deltas)), client_id=client, trusted=True)


def _wide(columns: int, client: str, row: str = "wide") -> Any:
    return make_delta(
        "INSERT",
        table="todos",
        row_id=row,
        client_id=client,
        hlc=hlc(1),
        columns={f"c{i:04d}": 0 for i in range(columns)},
    )


def test_buffer_stores_the_widest_row_state_the_push_service_admits(store: BufferStore, shard: ShardId) -> None:
    from lakesync.core.errors import SchemaError

    # Given the most columns (each with a 200-character clientId in the row's state) the push admits in one row
    client = "k" * 200
    low, high = 1, 3000
    while low < high:  # on a scratch store: the service's check, not the store under test, decides
        mid = (low + high + 1) // 2
        try:
            _pushed(InMemoryBufferStore(), shard.gateway, _wide(mid, client), client=client)
            low = mid
        except SchemaError:
            high = mid - 1
    assert 1000 < low < 3000

    # When that row is pushed to the store under test, Then it is stored (on DynamoDB: within the 400 KB item)
    _pushed(store, shard.gateway, _wide(low, client), client=client)
    stored = store.get_rows(shard.gateway, [("todos", "wide")])[("todos", "wide")]
    assert len(stored.state.columns) == low
    # And one column more is refused before anything is written
    with pytest.raises(SchemaError, match="columns with their versions"):
        _pushed(store, shard.gateway, _wide(low + 1, client, row="wider"), client=client)
    assert store.get_rows(shard.gateway, [("todos", "wider")]) == {}
    assert len(store.read_log(shard, 0, 10)) == 1


def test_dynamodb_commit_refused_for_an_item_is_an_error_at_once_not_a_conflict(module_dynamodb: Any, gw: str) -> None:
    from lakesync.aws.buffer.store import DynamoDBBufferStore
    from lakesync.core.errors import StorageError

    # Given commits DynamoDB refuses for what they hold, not because of a concurrent writer: a key with a lone
    # surrogate (a cancellation reason other than a conflict), an item over 400 KB (a ValidationException)
    store = DynamoDBBufferStore(*module_dynamodb)
    shard = ShardId(gw, "todos", 0)
    bad_key = Writer(store, shard).plan({"r\ud800": "a"})
    too_big = Writer(store, shard).plan({"r1": "x" * 420_000})
    for commit in (bad_key, too_big):
        # When committed, Then a StorageError names the refusal (before: CommitConflict, retried 60 times)
        with pytest.raises(StorageError) as info:
            store.commit(commit)
        assert not isinstance(info.value, CommitConflict)
        assert "would refuse the row item" in info.value.message
    # And a log item DynamoDB refuses (over 400 KB even compressed) is refused by its put itself: nothing is logged
    # (the new shard's registry entry and empty head, written before its first put, stay)
    random_text = os.urandom(300_000).hex()
    log_too_big = Writer(store, shard).plan({"r1": random_text})
    with pytest.raises(StorageError) as info:
        store.commit(replace(log_too_big, rows=()))
    assert "commit to table 'todos' failed: ValidationException" in info.value.message
    assert [head.seq for head in store.get_heads([shard]).values()] in ([], [0])
    assert store.read_log(shard, 0, 10) == []
    # And a real conflict is still a CommitConflict
    good = Writer(store, shard).plan({"r1": "a"})
    store.commit(good)
    with pytest.raises(CommitConflict):
        store.commit(good)


def test_buffer_rows_keep_the_recent_dedup_keys_they_were_written_with(store: BufferStore, shard: ShardId) -> None:
    # Given a commit whose row write carries the dedup keys of its row's recent deltas
    commit = Writer(store, shard).plan({"r1": "a"})
    keys = tuple(recent_key(dedup_key("c1", f"delta-{i}")) for i in range(ROW_RECENT_KEYS))
    (write,) = commit.rows
    store.commit(replace(commit, rows=(RowWrite(replace(write.row, recent=keys), write.expected_version),)))

    # When the row is read back, alone and as a chunk's basis, it has them in order
    assert store.get_rows(shard.gateway, [("todos", "r1")])[("todos", "r1")].recent == keys
    basis = store.read_commit_basis(shard, [("todos", "r1")])
    assert basis.rows[("todos", "r1")].recent == keys
