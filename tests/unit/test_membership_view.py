"""The gateway's membership reader (issue 43, item 3): a membership table read as the covering checkpoint's rows
folded with the log after it, kept per process and caught up incrementally, answers every query as
``InMemoryMemberships`` over the fold of the same history does."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakesync.core.delta import RowDelta
from lakesync.core.errors import CursorExpiredError, StorageError
from lakesync.core.filters import Clause, FilterOp, InMemoryMemberships, MembershipQuery
from lakesync.core.hlc import HLC
from lakesync.core.log import LogEntry, ShardId
from lakesync.core.merge import fold
from lakesync.core.messages import SyncPush
from lakesync.core.rules import parse_sync_rules
from lakesync.gateway import subscriptions as subs
from lakesync.gateway.checkpoint import encode_row, write_checkpoint
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.membership_view import GatewayMemberships, MembershipTableTooLargeError
from lakesync.gateway.memory import (
    InMemoryActionStore,
    InMemoryBufferStore,
    InMemoryConfigStore,
    InMemoryObjectStore,
    InMemorySubscriptions,
)
from lakesync.gateway.push import push
from tests.factories import T0, at, delete, insert, update

GW = "gw"
TABLE = "memberships"
MEMBER_OF = {"table": TABLE, "column": "project", "where": [{"column": "user", "op": "eq", "value": "jwt:sub"}]}
RULES: dict[str, Any] = {
    "version": 1,
    "buckets": [
        {
            "name": "mine",
            "tables": ["tasks"],
            "filters": [{"column": "project_id", "op": "in", "membership": MEMBER_OF}],
        }
    ],
    "streams": [
        {
            "name": "member_tasks",
            "table": "tasks",
            "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
            "params": {"project": {"subscription": {"membership": MEMBER_OF}}},
        }
    ],
}
USERS = ("u1", "u2", "u3")
PROJECTS = ("p1", "p2", "p3", "p4")
QUERIES = (
    *(MembershipQuery(TABLE, "project", (Clause("user", FilterOp.IN, (u,)),)) for u in USERS),
    MembershipQuery(TABLE, "project", (Clause("user", FilterOp.IN, ("u1", "u2")),)),
    MembershipQuery(TABLE, "user", (Clause("project", FilterOp.IN, ("p1",)), Clause("user", FilterOp.NEQ, ("u3",)))),
    MembershipQuery(TABLE, "project"),  # no eq/in clause: the whole table
    MembershipQuery(TABLE, "role", (Clause("user", FilterOp.IN, ("u1",)),)),  # a column some rows lack
)


class CountingBuffer(InMemoryBufferStore):
    """The in-memory buffer, counting log reads (entries returned) and head reads."""

    def __init__(self) -> None:
        super().__init__()
        self.entries_read = 0
        self.log_reads = 0
        self.head_reads = 0

    def read_log(self, shard: ShardId, after_seq: int, limit: int, *, images: bool = True) -> list[LogEntry]:
        got = super().read_log(shard, after_seq, limit, images=images)
        self.log_reads += 1
        self.entries_read += len(got)
        return got

    def get_heads(self, shards: Any, *, reaching: Any = None) -> Any:
        self.head_reads += 1
        return super().get_heads(shards, reaching=reaching)


class World:
    """A gateway on the in-memory stores whose writers change membership rows (and a task), with the fold of every
    row's deltas as the model."""

    def __init__(self, *, sub_shards: int = 2, max_rows: int = 1000) -> None:
        self.wall = T0 + 10_000_000
        self.buffer = CountingBuffer()
        self.objects = InMemoryObjectStore()
        self.deps = GatewayDeps(
            self.buffer,
            InMemoryConfigStore(),
            InMemoryActionStore(),
            settings=GatewaySettings(sub_shards={TABLE: sub_shards}),
            clock=HLC(lambda: self.wall),
            wall_ms=lambda: self.wall,
            sleep=lambda _: None,
            objects=self.objects,
            subscriptions=InMemorySubscriptions(),
        )
        self.deps.config.put_sync_rules(GW, parse_sync_rules(RULES))
        self.reader = GatewayMemberships(self.deps, max_rows=max_rows)
        self.deps.memberships = self.reader
        self.history: dict[tuple[str, str], list[RowDelta]] = {}
        self.ticks = 0

    def write(self, *deltas: RowDelta, client: str = "w") -> None:
        self.wall += 1
        push(self.deps, GW, SyncPush(client, deltas), client_id=client, trusted=True)
        for d in deltas:
            self.history.setdefault((d.table, d.row_id), []).append(d)

    def member(self, row: str, user: str, project: str, *, hlc: int, client: str = "w", **more: Any) -> None:
        self.write(
            insert(row, hlc=at(hlc), table=TABLE, client=client, user=user, project=project, **more), client=client
        )

    def checkpoint_and_release(self) -> None:
        """A checkpoint of every table at the heads (tiny chunks), then the log released through it."""
        self.ticks += 1
        shards = self.buffer.list_shards(GW)
        heads = self.buffer.get_heads(shards)
        states = [fold(ds) for ds in self.history.values()]
        write_checkpoint(
            self.objects,
            gateway=GW,
            checkpoint_id=f"{self.wall:013d}-{self.ticks:08x}",
            created_at_ms=self.wall,
            positions={s.key: h.seq for s, h in heads.items()},
            server_hlc=at(),
            tables=sorted({t for t, _ in self.history}),
            rows=(encode_row(s) for s in states if s is not None),
            chunk_bytes=200,
        )
        for shard, head in heads.items():
            self.buffer.release_log(shard, head.seq)

    def model(self) -> InMemoryMemberships:
        """The live membership rows, folded from every delta written."""
        states = (fold(ds) for (table, _), ds in self.history.items() if table == TABLE)
        return InMemoryMemberships({TABLE: [v for s in states if s is not None and (v := s.values()) is not None]})

    def answers(self, reader: GatewayMemberships | None = None) -> list[frozenset[str]]:
        source = (reader or self.reader).source(GW)
        return [frozenset(source.member_values(q)) for q in QUERIES]


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(0, 5), st.sampled_from(USERS), st.sampled_from(PROJECTS)),
        st.tuples(st.just("update"), st.integers(0, 5), st.sampled_from(("user", "project")), st.integers(0, 3)),
        st.tuples(st.just("delete"), st.integers(0, 5)),
        st.tuples(st.just("task"), st.integers(0, 2), st.sampled_from(PROJECTS)),
        st.tuples(st.just("release")),
        st.tuples(st.just("check")),
    ),
    max_size=30,
)


def run(world: World, op: tuple[Any, ...], hlc: int) -> None:
    kind = op[0]
    client = ("w1", "w2")[hlc % 2]  # two writers, HLCs that go back and forth: some writes lose
    if kind == "insert":
        world.member(f"m{op[1]}", op[2], op[3], hlc=hlc, client=client, role="admin" if op[1] % 2 else None)
    elif kind == "update":
        value = (USERS if op[2] == "user" else PROJECTS)[op[3] % 3]
        world.write(update(f"m{op[1]}", hlc=at(hlc), table=TABLE, client=client, **{op[2]: value}), client=client)
    elif kind == "delete":
        world.write(delete(f"m{op[1]}", hlc=at(hlc), table=TABLE, client=client), client=client)
    elif kind == "task":
        world.write(insert(f"t{op[1]}", hlc=at(hlc), table="tasks", client=client, project_id=op[2]), client=client)
    elif kind == "release":
        world.checkpoint_and_release()
    else:
        model = world.model()
        assert world.answers() == [frozenset(model.member_values(q)) for q in QUERIES]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, jitter=st.lists(st.integers(-3, 3), min_size=30, max_size=30))
def test_the_reader_equals_the_fold_of_the_same_history(ops: list[tuple[Any, ...]], jitter: list[int]) -> None:
    # Given a history of membership inserts, updates and deletes (by two writers, some losing), tasks, and releases
    # behind checkpoints, the reader asked along the way (caught up incrementally, started over after a release)
    world = World()
    for i, op in enumerate(ops):
        run(world, op, 100 + 10 * i + jitter[i])
    # Then it answers every query as the fold of the whole history does, and so does a reader started cold
    model = world.model()
    expected = [frozenset(model.member_values(q)) for q in QUERIES]
    assert world.answers() == expected
    assert world.answers(GatewayMemberships(world.deps)) == expected


def test_a_source_catches_up_by_reading_only_the_log_after_its_positions() -> None:
    world = World(sub_shards=1)
    for i in range(5):
        world.member(f"m{i}", "u1", f"p{i}", hlc=10 + i)
    world.write(insert("t1", hlc=at(20), table="tasks", project_id="p1"))
    # The first source reads the table's log once (not the tasks)
    assert world.answers()[0] == {"p0", "p1", "p2", "p3", "p4"}
    assert (world.buffer.head_reads, world.buffer.entries_read) == (1, 5)
    # A source when nothing moved reads the heads, and nothing else
    world.buffer.log_reads = 0
    assert world.answers()[0] == {"p0", "p1", "p2", "p3", "p4"}
    assert (world.buffer.head_reads, world.buffer.log_reads) == (2, 0)
    # A change of a task moves no head of the membership table
    world.write(update("t1", hlc=at(21), table="tasks", project_id="p2"))
    world.answers()
    assert (world.buffer.head_reads, world.buffer.log_reads) == (3, 0)
    # A change of a membership row is read alone
    world.write(delete("m0", hlc=at(30), table=TABLE))
    world.buffer.entries_read = 0
    assert world.answers()[0] == {"p1", "p2", "p3", "p4"}
    assert (world.buffer.head_reads, world.buffer.entries_read) == (4, 1)


def test_a_source_reads_a_table_once_and_answers_a_query_once() -> None:
    world = World()
    world.member("m1", "u1", "p1", hlc=10)
    source = world.reader.source(GW)
    first = source.member_values(QUERIES[0])
    world.member("m2", "u1", "p2", hlc=11)
    # Within one request the answers stay those of its first read (one get_heads per table)
    assert source.member_values(QUERIES[0]) == first == {"p1"}
    assert source.member_values(QUERIES[4]) == {"u1"}
    assert world.buffer.head_reads == 1
    # The next request sees the new row
    assert world.reader.source(GW).member_values(QUERIES[0]) == {"p1", "p2"}


def test_a_release_starts_the_fold_over_from_the_covering_checkpoint() -> None:
    world = World()
    world.member("m1", "u1", "p1", hlc=10)
    world.member("m2", "u1", "p2", hlc=11)
    assert world.answers()[0] == {"p1", "p2"}
    world.write(delete("m1", hlc=at(12), table=TABLE))
    world.checkpoint_and_release()  # the log the fold was at is gone
    world.write(update("m2", hlc=at(13), table=TABLE, project="p3"))
    world.buffer.entries_read = 0
    assert world.answers()[0] == {"p3"}
    assert world.buffer.entries_read == 1  # the log after the checkpoint only


def test_a_log_released_while_read_starts_over(monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(sub_shards=1)
    world.member("m1", "u1", "p1", hlc=10)
    world.member("m2", "u2", "p2", hlc=11)
    real = world.buffer.read_log
    released: list[bool] = []

    def releasing(shard: ShardId, after_seq: int, limit: int, *, images: bool = True) -> list[LogEntry]:
        if not released:  # the flush releases the log between the heads read and the log read
            released.append(True)
            world.checkpoint_and_release()
        return real(shard, after_seq, limit, images=images)

    monkeypatch.setattr(world.buffer, "read_log", releasing)
    assert world.answers()[0] == {"p1"}


def test_a_released_log_without_a_checkpoint_is_a_storage_error() -> None:
    world = World(sub_shards=1)
    world.member("m1", "u1", "p1", hlc=10)
    world.buffer.release_log(ShardId(GW, TABLE, 0), 1)
    with pytest.raises(StorageError) as failed:
        world.answers()
    assert "released past every readable checkpoint" in failed.value.message
    assert not isinstance(failed.value, CursorExpiredError)


def test_a_table_over_the_limit_answers_503_until_it_shrinks() -> None:
    world = World(max_rows=2)
    for i in range(3):
        world.member(f"m{i}", "u1", f"p{i}", hlc=10 + i)
    with pytest.raises(MembershipTableTooLargeError) as failed:
        world.answers()
    assert failed.value.status == 503 and failed.value.api_code == "INTERNAL_ERROR"
    assert "'memberships' holds more than 2 live rows" in failed.value.message
    # The same heads answer at once, without reading the log again
    world.buffer.log_reads = 0
    with pytest.raises(MembershipTableTooLargeError):
        world.answers()
    assert world.buffer.log_reads == 0
    world.write(delete("m0", hlc=at(20), table=TABLE))
    assert world.answers()[0] == {"p1", "p2"}


def test_only_tables_named_by_a_membership_of_the_rules_are_read() -> None:
    world = World()
    world.write(insert("t1", hlc=at(10), table="tasks", project_id="p1"))
    assert world.reader.source(GW).member_values(MembershipQuery("tasks", "project_id")) == frozenset()
    assert world.buffer.head_reads == 0
    # A table the rules stop naming is forgotten; one they start naming is read at once
    world.member("m1", "u1", "p1", hlc=11)
    assert world.answers()[0] == {"p1"}
    renamed = {**RULES, "version": 2, "streams": [], "buckets": [{**RULES["buckets"][0], "filters": [
        {"column": "project_id", "op": "in", "membership": {**MEMBER_OF, "table": "tasks", "column": "project_id"}}
    ]}]}  # fmt: skip
    world.deps.config.put_sync_rules(GW, parse_sync_rules(renamed))
    assert world.reader.source(GW).member_values(MembershipQuery("tasks", "project_id")) == {"p1"}
    assert world.reader.source(GW).member_values(QUERIES[0]) == frozenset()


def test_a_new_sub_shard_is_read_before_the_registry_knows_it() -> None:
    world = World(sub_shards=4)
    for i in range(8):
        world.member(f"m{i}", "u1", f"p{i}", hlc=10 + i)
    registry = world.buffer.list_shards
    world.buffer.list_shards = lambda gateway: []  # type: ignore[method-assign]  # a registry read before them
    try:
        assert world.answers()[0] == {f"p{i}" for i in range(8)}
    finally:
        world.buffer.list_shards = registry  # type: ignore[method-assign]


def test_subscribing_follows_the_membership_rows() -> None:
    world = World()
    doc = {"stream": "member_tasks", "params": {"project": "p1"}}
    with pytest.raises(subs.SubscriptionRefusedError) as refused:
        subs.subscribe(world.deps, GW, "u1", {"sub": "u1"}, doc)
    assert refused.value.status == 403 and refused.value.refusal == "NOT_ALLOWED"
    world.member("m1", "u1", "p1", hlc=10)
    assert subs.subscribe(world.deps, GW, "u1", {"sub": "u1"}, doc).subscription.stream == "member_tasks"


def test_concurrent_requests_see_every_committed_row() -> None:
    world = World()
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def ask() -> None:
        barrier.wait()
        try:
            for _ in range(30):
                world.answers()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for t in threads:
        t.start()
    barrier.wait()
    for i in range(30):
        world.member(f"m{i}", USERS[i % 3], PROJECTS[i % 4], hlc=10 + i)
    for t in threads:
        t.join()
    assert errors == []
    model = world.model()
    assert world.answers() == [frozenset(model.member_values(q)) for q in QUERIES]


def test_a_query_looks_its_candidates_up_in_the_index_instead_of_scanning() -> None:
    from lakesync.gateway.membership_view import _TableRows

    rows = _TableRows()
    for i in range(1000):
        rows.put(f"m{i}", fold([insert(f"m{i}", table=TABLE, user=f"u{i % 100}", project=f"p{i}")]))
    by_user = MembershipQuery(TABLE, "project", (Clause("user", FilterOp.IN, ("u7",)),))
    by_both = MembershipQuery(
        TABLE, "project", (Clause("user", FilterOp.IN, ("u7", "u8")), Clause("project", FilterOp.IN, ("p7",)))
    )
    assert len(list(rows._candidates(by_user))) == 10
    assert len(list(rows._candidates(by_both))) == 1  # the most selective clause's candidates
    assert rows.answer(by_user) == {f"p{i}" for i in range(7, 1000, 100)}
    # An update moving a row to another user moves it in the index; a delete removes it
    rows.put("m7", fold([insert("m7", table=TABLE, user="u9", project="p7")]))
    rows.put("m107", None)
    assert rows.answer(by_user) == {f"p{i}" for i in range(207, 1000, 100)}
    assert len(list(rows._candidates(by_user))) == 8
    assert len(list(rows._candidates(MembershipQuery(TABLE, "project")))) == 999  # no eq/in clause: every row
