"""The cursor pull follows the client's scope (issue 43, item 2): subscribing and unsubscribing (or a subscription
running out) are served as a difference -- the rows entering with their state, the rows leaving as drops (``DELETE``
at HLC 0) -- and then the cursor continues, exactly once, without a resync; rules without streams and clients
without subscriptions are served as before."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Mapping
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakesync.core.canonical import JsonValue
from lakesync.core.delta import DeltaOp, RowDelta
from lakesync.core.errors import CursorExpiredError
from lakesync.core.filters import InMemoryMemberships
from lakesync.core.hlc import HLC
from lakesync.core.merge import RowState, fold, merge_all
from lakesync.core.messages import SyncPush
from lakesync.core.rules import parse_sync_rules
from lakesync.core.scope import resolve_scope
from lakesync.gateway import checkpoint, scope_change
from lakesync.gateway import subscriptions as subs
from lakesync.gateway.checkpoint import encode_row, write_checkpoint
from lakesync.gateway.cursor import CursorScope, cursor_scope, decode_cursor, encode_cursor
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.memory import (
    InMemoryActionStore,
    InMemoryBufferStore,
    InMemoryConfigStore,
    InMemoryMembershipReader,
    InMemorySubscriptions,
)
from lakesync.gateway.pull import PullResult, pull
from lakesync.gateway.push import push
from lakesync.wire.framing import iter_checkpoint_responses
from tests.factories import T0, at, delete, insert, update

GW = "gw"
ME = "ann"
CLAIMS = {"sub": ME}
PROJECTS = ("p0", "p1", "p2", "p3")
RULES = {
    "version": 1,
    "buckets": [
        {"name": "lobby", "tables": ["tasks"], "filters": [{"column": "project_id", "op": "eq", "value": "p0"}]}
    ],
    "streams": [
        {
            "name": "project",
            "table": "tasks",
            "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
            "params": {"project": {"subscription": {"allowed": list(PROJECTS)}}},
        }
    ],
}
MEMBER_OF = {"table": "memberships", "column": "project", "where": [{"column": "user", "op": "eq", "value": "jwt:sub"}]}
VERSIONS: tuple[dict[str, Any], ...] = (
    RULES,
    # the lobby moved to p1
    {
        **RULES,
        "version": 2,
        "buckets": [{**RULES["buckets"][0], "filters": [{**RULES["buckets"][0]["filters"][0], "value": "p1"}]}],
    },
    # the projects the client is a member of, read from the memberships table
    {
        **RULES,
        "version": 3,
        "buckets": [
            {
                "name": "mine",
                "tables": ["tasks"],
                "filters": [{"column": "project_id", "op": "in", "membership": MEMBER_OF}],
            }
        ],
    },
    # subscriptions only
    {**RULES, "version": 4, "buckets": []},
    # buckets only
    {"version": 5, "buckets": RULES["buckets"]},
    # rules that do not confine: every row
    {"version": 6, "buckets": []},
)


class MemoryObjects:
    """A dict as the ObjectStore."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        self.objects[key] = bytes(data)

    def get(self, key: str) -> bytes | None:
        return self.objects.get(key)

    def list_keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))


class World:
    """A gateway with streams on the in-memory stores, its writer, and one subscribing client's replica."""

    def __init__(self, rules: Mapping[str, Any] = RULES, **settings: Any) -> None:
        self.wall = T0
        self.members = InMemoryMemberships()
        self.projects: set[str] = set()
        self.objects = MemoryObjects()
        self.deps = GatewayDeps(
            InMemoryBufferStore(),
            InMemoryConfigStore(),
            InMemoryActionStore(),
            settings=GatewaySettings(**settings),
            clock=HLC(lambda: self.wall),
            wall_ms=lambda: self.wall,
            sleep=lambda _: None,
            objects=self.objects,
            subscriptions=InMemorySubscriptions(),
            memberships=InMemoryMembershipReader(self.members),
        )
        self.deps.config.put_sync_rules(GW, parse_sync_rules(dict(rules)))
        self.server: dict[tuple[str, str], list[RowDelta]] = {}
        self.replica: dict[tuple[str, str], RowState] = {}
        self.cursor: str | None = None
        self.tick = 0
        self.received = 0

    # -- the writer -------------------------------------------------------------------------------------------------

    def write(self, row: str, project: str | None = None, title: str = "t", *, remove: bool = False) -> None:
        self.tick += 1
        self.wall += 1
        hlc = at(self.wall - T0)
        key = ("tasks", row)
        held = fold(self.server.get(key, [])) if key in self.server else None
        if remove:
            d = delete(row, hlc=hlc, table="tasks", client="w")
        elif held is None or held.values() is None:
            d = insert(row, hlc=hlc, table="tasks", client="w", project_id=project or "p0", title=title)
        else:
            d = update(row, hlc=hlc, table="tasks", client="w", title=title)  # a row never changes project
        push(self.deps, GW, SyncPush("w", (d,)), client_id="w", trusted=True)
        self.server.setdefault(key, []).append(d)

    def checkpoint_and_release(self, chunk_bytes: int = 256, *, release: bool = True) -> None:
        """A checkpoint at the heads (tiny chunks by default: a difference spans several), then the log released
        through it (as the flush job does) unless ``release`` is false."""
        buffer = self.deps.buffer
        shards = buffer.list_shards(GW)
        heads = buffer.get_heads(shards)
        positions = {s.key: h.seq for s, h in heads.items()}
        states = [fold(ds) for ds in self.server.values()]
        write_checkpoint(
            self.objects,
            gateway=GW,
            checkpoint_id=f"{self.wall:013d}-{self.tick:08x}",
            created_at_ms=self.wall,
            positions=positions,
            server_hlc=at(self.wall - T0),
            tables=["tasks"],
            rows=(encode_row(s) for s in states if s is not None),
            chunk_bytes=chunk_bytes,
        )
        for shard, head in heads.items():
            if release:
                buffer.release_log(shard, head.seq)

    def save_rules(self, doc: Mapping[str, Any]) -> None:
        """An admin saves a new rules version."""
        self.deps.config.put_sync_rules(GW, parse_sync_rules(dict(doc)))

    def join(self, project: str, *, leave: bool = False) -> None:
        """The client's membership row of ``project`` inserted (or deleted)."""
        (self.projects.discard if leave else self.projects.add)(project)
        self.members.put("memberships", [{"user": ME, "project": p} for p in sorted(self.projects)])

    # -- the client -------------------------------------------------------------------------------------------------

    def subscribe(self, project: str, ttl: int | None = None) -> None:
        doc: dict[str, Any] = {"stream": "project", "params": {"project": project}}
        if ttl is not None:
            doc["ttlSeconds"] = ttl
        rules = self.deps.config.get_sync_rules(GW)
        if rules is not None and rules.stream("project") is not None:
            subs.subscribe(self.deps, GW, ME, CLAIMS, doc)

    def unsubscribe(self, project: str) -> None:
        held = {h.subscription.param_map["project"]: h.id for h in subs.list_subscriptions(self.deps, GW, ME)}
        if project in held:
            subs.unsubscribe(self.deps, GW, ME, held[project])

    def pull(self, limit: int = 100) -> PullResult:
        page = pull(self.deps, GW, limit=limit, claims=CLAIMS, cursor=self.cursor, subscriber=ME)
        for d in page.deltas:
            self.apply(d)
        self.received += len(page.deltas)
        self.cursor = page.cursor
        return page

    def apply(self, d: RowDelta) -> None:
        key = (d.table, d.row_id)
        if d.op is DeltaOp.DELETE and d.hlc == 0:
            self.replica.pop(key, None)  # a row that left the scope: dropped, not a tombstone
            return
        self.replica[key] = merge_all(self.replica.get(key), [d])[0]  # type: ignore[assignment]

    def catch_up(self, limit: int = 100) -> None:
        for _ in range(1000):
            if not self.pull(limit).has_more:
                return
        raise AssertionError("the pull never caught up")

    def caught_up(self) -> bool:
        return self.cursor is not None and decode_cursor(self.cursor, GW) == self.heads()

    def heads(self) -> dict[str, int]:
        buffer = self.deps.buffer
        return {s.key: h.seq for s, h in buffer.get_heads(buffer.list_shards(GW)).items()}

    # -- what it should hold ----------------------------------------------------------------------------------------

    def expected(self) -> dict[tuple[str, str], dict[str, JsonValue]]:
        rules = self.deps.config.get_sync_rules(GW)
        live = self.deps.subscriptions.get(GW, ME, self.wall) if self.deps.subscriptions else []
        scope = resolve_scope(rules, CLAIMS, live, self.members, self.wall)
        out = {}
        for key, deltas in self.server.items():
            values = fold(deltas).values()  # type: ignore[union-attr]
            if values is not None and scope.covers(key[0], values):
                out[key] = values
        return out

    def held(self) -> dict[tuple[str, str], dict[str, JsonValue]]:
        return {k: v for k, s in self.replica.items() if (v := s.values()) is not None}


STREAMED = st.sampled_from(("p1", "p2", "p0", "p3"))  # p0, the lobby's, is not where hypothesis starts
OPS = st.one_of(
    st.tuples(st.just("write"), st.integers(0, 7), STREAMED, st.text("ab", max_size=2)),
    st.tuples(st.just("delete"), st.integers(0, 7)),
    st.tuples(st.just("subscribe"), STREAMED, st.sampled_from([None, 1, 3])),
    st.tuples(st.just("unsubscribe"), st.integers(0, 3)),
    st.tuples(st.just("time"), st.integers(500, 4000)),
    st.tuples(st.just("pull"), st.integers(1, 4)),
    st.tuples(st.just("catch_up"), st.integers(1, 4)),
    st.tuples(st.just("release")),
    st.tuples(st.just("rules"), st.integers(0, len(VERSIONS) - 1)),
    st.tuples(st.just("member"), STREAMED, st.booleans()),
)


def run(world: World, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "write":
        world.write(f"r{op[1]}", op[2], op[3])
    elif kind == "delete" and ("tasks", f"r{op[1]}") in world.server:
        world.write(f"r{op[1]}", remove=True)
    elif kind == "subscribe":
        world.subscribe(op[1], op[2])
    elif kind == "unsubscribe":
        held = sorted(h.subscription.param_map["project"] for h in subs.list_subscriptions(world.deps, GW, ME))
        if held:
            world.unsubscribe(held[op[1] % len(held)])
    elif kind == "time":
        world.wall += op[1]
    elif kind == "pull":
        world.pull(op[1])
    elif kind == "catch_up":
        world.catch_up(op[1])
    elif kind == "rules":
        world.save_rules(VERSIONS[op[1]])
    elif kind == "member":
        world.join(op[1], leave=op[2])
    elif kind == "release" and world.caught_up() and world.heads():
        # Only a caught-up client's log is released: a client behind a release reloads (not what is tested here).
        world.checkpoint_and_release()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=12, max_size=50), st.integers(1, 4), st.integers(200, 2000))
def test_the_replica_is_exactly_the_current_scope_once_caught_up(
    ops: list[tuple[Any, ...]], limit: int, page_bytes: int
) -> None:
    # Given a client following its cursor while it subscribes, unsubscribes, subscriptions run out, rows are written
    # and the log is released behind checkpoints (tiny pages: the differences span several)
    world = World(max_page_bytes=page_bytes)
    for op in ops:
        run(world, op)
        # Then every time it catches up it holds exactly the rows its scope covers now, and never had to resync
        if op[0] == "catch_up":
            assert world.held() == world.expected()
    world.catch_up(limit)
    assert world.held() == world.expected()


def test_subscribe_backfills_then_follows_then_unsubscribe_drops() -> None:
    world = World()
    world.write("a", "p1", "one")
    world.write("b", "p2", "two")
    world.write("c", "p0", "lobby")
    world.catch_up()
    assert set(world.held()) == {("tasks", "c")}
    # Subscribing: the rows of p1 as of the cursor, once
    world.subscribe("p1")
    page = world.pull()
    assert [(d.row_id, d.op) for d in page.deltas] == [("a", DeltaOp.INSERT)]
    world.catch_up()
    assert set(world.held()) == {("tasks", "a"), ("tasks", "c")}
    # Following: later changes of p1 arrive by the log, once
    world.write("a", title="uno")
    world.write("d", "p1", "four")
    before = world.received
    world.catch_up()
    assert world.received - before == 2
    assert world.held()[("tasks", "a")]["title"] == "uno"
    # Unsubscribing: the rows of p1 dropped, the lobby kept
    world.unsubscribe("p1")
    world.catch_up()
    assert set(world.held()) == {("tasks", "c")}
    assert world.held() == world.expected()


def test_a_subscription_running_out_drops_its_rows() -> None:
    world = World()
    world.write("a", "p1")
    world.subscribe("p1", ttl=5)
    world.catch_up()
    assert set(world.held()) == {("tasks", "a")}
    world.wall += 6000
    world.catch_up()
    assert world.held() == {}


def test_the_difference_reads_the_checkpoint_once_the_log_is_released() -> None:
    world = World()
    for i in range(20):
        world.write(f"r{i}", PROJECTS[i % 4], f"t{i}")
    world.catch_up()
    world.checkpoint_and_release()
    world.write("r1", title="later")  # after the checkpoint: folded into r1's state
    world.write("x", "p1", "new")
    world.catch_up()
    world.subscribe("p1")
    world.catch_up(limit=2)
    assert world.held() == world.expected()
    assert world.held()[("tasks", "r1")]["title"] == "later"
    assert ("tasks", "x") in world.held()


def test_a_cursor_behind_a_checkpoint_past_a_release_gets_410_on_a_scope_change() -> None:
    world = World()
    world.write("a", "p1")
    world.catch_up()
    world.write("b", "p1")
    world.checkpoint_and_release()  # past the client's cursor
    world.subscribe("p1")
    with pytest.raises(CursorExpiredError):
        world.pull()


def test_a_rules_change_serves_the_difference_not_a_resync() -> None:
    # Given a client caught up under buckets alone (rules without streams): its cursor records its scope
    world = World(VERSIONS[4])
    for i in range(8):
        world.write(f"r{i}", PROJECTS[i % 4], f"t{i}")
    world.catch_up()
    assert world.cursor is not None and cursor_scope(world.cursor) is not None
    assert set(world.held()) == {("tasks", "r0"), ("tasks", "r4")}
    # When an admin moves the lobby from p0 to p1
    world.save_rules(VERSIONS[1])
    received = world.received
    world.catch_up()
    # Then the next pull sends the rows of p1 with their state and drops those of p0: four rows, not a reload
    assert world.held() == world.expected() and set(world.held()) == {("tasks", "r1"), ("tasks", "r5")}
    assert world.received - received == 4
    # And the cursor goes on under the new rules, exactly once
    world.write("r1", title="later")
    world.write("r0", title="unseen")
    received = world.received
    world.catch_up()
    assert world.received - received == 1 and world.held()[("tasks", "r1")]["title"] == "later"


def test_a_rules_change_to_rules_that_do_not_confine_and_back() -> None:
    world = World(VERSIONS[4])
    for i in range(4):
        world.write(f"r{i}", PROJECTS[i])
    world.catch_up()
    world.save_rules(VERSIONS[5])  # every row
    world.catch_up()
    assert len(world.held()) == 4 and world.held() == world.expected()
    world.save_rules(VERSIONS[4])
    world.catch_up()
    assert set(world.held()) == {("tasks", "r0")} and world.held() == world.expected()


def test_a_membership_change_moves_rows_in_and_out_without_a_resync() -> None:
    world = World(VERSIONS[2])
    for i in range(8):
        world.write(f"r{i}", PROJECTS[i % 4], f"t{i}")
    world.catch_up()
    assert world.held() == {}
    # When the client's membership of p2 is inserted, the rows of p2 enter
    world.join("p2")
    received = world.received
    world.catch_up()
    assert set(world.held()) == {("tasks", "r2"), ("tasks", "r6")} and world.received - received == 2
    # And later changes of p2 arrive on the cursor
    world.write("r2", title="new")
    world.catch_up()
    assert world.held()[("tasks", "r2")]["title"] == "new"
    # When it is deleted, they leave; when another is inserted, its rows enter
    world.join("p2", leave=True)
    world.join("p3")
    world.catch_up()
    assert set(world.held()) == {("tasks", "r3"), ("tasks", "r7")} and world.held() == world.expected()


def test_a_rules_change_during_a_difference_ends_in_the_newest_scope() -> None:
    world = World(max_page_bytes=150)
    for i in range(12):
        world.write(f"r{i}", PROJECTS[i % 4], f"t{i}")
    world.catch_up()
    world.subscribe("p2")
    world.pull(limit=1)  # the difference is under way
    world.save_rules(VERSIONS[1])
    world.pull(limit=1)
    world.join("p3")
    world.save_rules(VERSIONS[2])
    world.catch_up(limit=2)
    assert world.held() == world.expected()
    assert set(world.held()) == {("tasks", f"r{i}") for i in (2, 6, 10, 3, 7, 11)}


def test_a_scope_kept_is_read_only_when_the_scope_changes() -> None:
    world = World(VERSIONS[4])
    world.write("a", "p0")
    world.catch_up()
    store = world.deps.subscriptions
    assert store is not None
    reads = 0
    get_served = store.get_served

    def counting(gateway: str, client_id: str) -> Any:
        nonlocal reads
        reads += 1
        return get_served(gateway, client_id)

    store.get_served = counting  # type: ignore[method-assign]
    world.write("b", "p0")
    world.catch_up()
    assert reads == 0
    world.save_rules(VERSIONS[1])
    world.catch_up()
    assert reads >= 1


def test_an_old_cursor_without_a_scope_is_the_buckets_scope() -> None:
    world = World()
    world.write("a", "p1")
    world.write("b", "p0")
    world.subscribe("p1")
    heads = world.heads()
    world.cursor = encode_cursor(heads)  # served before the rules had streams: it holds the lobby
    world.replica = {("tasks", "b"): fold(world.server[("tasks", "b")])}  # type: ignore[dict-item]
    world.catch_up()
    assert world.held() == world.expected() and set(world.held()) == {("tasks", "a"), ("tasks", "b")}


def test_a_cursor_without_a_scope_serves_a_difference_of_many_pages() -> None:
    # Given a checkpoint's cursor (no scope: it holds the buckets') and a subscription whose rows span pages
    world = World()
    for i in range(12):
        world.write(f"r{i}", PROJECTS[i % 2], f"t{i}")
    world.subscribe("p1")
    world.cursor = encode_cursor(world.heads())
    world.replica = {k: fold(ds) for k, ds in world.server.items() if k[1] in {f"r{i}" for i in range(0, 12, 2)}}  # type: ignore[misc]
    # When it pulls a page at a time, the difference's later pages still tell the scope the cursor held
    world.catch_up(limit=1)
    assert world.held() == world.expected() and len(world.held()) == 12


def test_an_unknown_served_scope_is_410() -> None:
    world = World()
    world.write("a", "p1")
    world.catch_up()
    assert world.cursor is not None
    world.cursor = encode_cursor(decode_cursor(world.cursor, GW), None, CursorScope("f" * 32))
    world.subscribe("p1")
    with pytest.raises(CursorExpiredError):
        world.pull()


def test_a_cursor_scope_is_validated() -> None:
    raw = {"v": 1, "p": {}, "s": {"f": "x", "t": "y", "m": [], "k": "", "c": -1, "r": 0, "i": 0}}
    cursor = base64.urlsafe_b64encode(json.dumps(raw).encode()).decode()
    with pytest.raises(Exception, match="Invalid 'cursor'"):
        cursor_scope(cursor)
    scope = CursorScope("a", "b", ("c",), "k", 1, 2, 3)
    assert cursor_scope(encode_cursor({}, None, scope)) == scope


WEIGHTED = (
    ("write", 30),
    ("delete", 6),
    ("subscribe", 12),
    ("unsubscribe", 8),
    ("time", 5),
    ("pull", 20),
    ("catch_up", 8),
    ("release", 8),
    ("rules", 5),
    ("member", 6),
)


def random_op(rng: random.Random) -> tuple[Any, ...]:
    kind = rng.choices([k for k, _ in WEIGHTED], [w for _, w in WEIGHTED])[0]
    if kind == "write":
        return (kind, rng.randrange(10), rng.choice(PROJECTS), rng.choice("abc"))
    if kind == "delete":
        return (kind, rng.randrange(10))
    if kind == "subscribe":
        return (kind, rng.choice(PROJECTS), rng.choice([None, 1, 3]))
    if kind in ("unsubscribe", "pull", "catch_up"):
        return (kind, rng.randrange(1, 4))
    if kind == "time":
        return (kind, rng.randrange(500, 4000))
    if kind == "rules":
        return (kind, rng.randrange(len(VERSIONS)))
    if kind == "member":
        return (kind, rng.choice(PROJECTS), rng.random() < 0.4)
    return (kind,)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.integers(150, 1500))
def test_long_random_programs_keep_the_replica_exact(rng: random.Random, page_bytes: int) -> None:
    # Long programs: differences interrupted by new changes of scope and by releases, rows updated after checkpoints
    world = World(max_page_bytes=page_bytes)
    for _ in range(120):
        op = random_op(rng)
        run(world, op)
        if op[0] == "catch_up":
            assert world.held() == world.expected()
    world.catch_up(rng.randrange(1, 5))
    assert world.held() == world.expected()


def test_a_release_during_a_difference_starts_it_over_from_the_checkpoint() -> None:
    world = World()
    for i in range(6):
        world.write(f"r{i}", "p1", f"t{i}")
    world.catch_up()
    world.subscribe("p1")
    world.pull(limit=2)  # the difference, from the log's start, is under way
    assert world.cursor is not None and (cursor_scope(world.cursor) or CursorScope("")).tail == 2
    world.checkpoint_and_release()  # the log it was reading is gone
    world.catch_up(limit=2)
    assert world.held() == world.expected() and len(world.held()) == 6


def test_a_checkpoint_serves_the_rows_of_the_memberships_and_its_cursor_follows_them() -> None:
    # Given rules whose bucket reads the memberships table, and a checkpoint of every row
    world = World(VERSIONS[2])
    for i in range(8):
        world.write(f"r{i}", PROJECTS[i % 4], f"t{i}")
    world.join("p1")
    world.catch_up()
    world.checkpoint_and_release()
    # When a new client bootstraps from it
    payload = checkpoint.serve(world.deps, GW, CLAIMS)
    assert isinstance(payload.body, bytes)
    deltas = [d for response in iter_checkpoint_responses(payload.body) for d in response.deltas]
    # Then it gets the rows of its projects, as a pull would have served them
    assert {d.row_id for d in deltas} == {"r1", "r5"}
    fresh = World(VERSIONS[2])
    fresh.deps, fresh.server, fresh.members, fresh.projects = world.deps, world.server, world.members, world.projects
    for d in deltas:
        fresh.apply(d)
    fresh.cursor = payload.manifest.cursor
    fresh.catch_up()
    assert fresh.received == 0 and fresh.held() == fresh.expected()
    # And a membership inserted after it moves rows in on the checkpoint's cursor
    fresh.join("p3")
    fresh.catch_up()
    assert fresh.held() == fresh.expected() and set(fresh.held()) == {("tasks", f"r{i}") for i in (1, 5, 3, 7)}


# -- the source by cost: a checkpoint under an unreleased log ---------------------------------------------------------


class Counted:
    """Counts the log entries, checkpoint objects and checkpoint chunks a world's gateway reads."""

    def __init__(self, world: World) -> None:
        self.entries = 0
        self.objects = 0
        self.chunks = 0
        read_log, get = world.deps.buffer.read_log, world.objects.get

        def counted_read(*args: Any, **kwargs: Any) -> Any:
            out = read_log(*args, **kwargs)
            self.entries += len(out)
            return out

        def counted_get(key: str) -> bytes | None:
            self.objects += 1
            self.chunks += not key.endswith(("/latest.json", "/manifest.json"))
            return get(key)

        world.deps.buffer.read_log = counted_read  # type: ignore[method-assign]
        world.objects.get = counted_get  # type: ignore[method-assign]


def hot_rows(world: World, rows: int, updates: int) -> None:
    """``rows`` rows over the projects, each then updated ``updates`` times: a long log, few folded rows."""
    for i in range(rows):
        world.write(f"r{i}", PROJECTS[i % 4], "t")
    for u in range(updates):
        for i in range(rows):
            world.write(f"r{i}", title=f"t{u}")


def test_a_small_checkpoint_stands_for_a_long_unreleased_log() -> None:
    # Given 40 rows updated 30 times each (1,240 entries), a checkpoint of them at the heads, nothing released, and
    # a later write folded in after it
    world = World()
    hot_rows(world, 40, 30)
    world.checkpoint_and_release(chunk_bytes=4096, release=False)
    world.write("r1", title="after")
    world.write("x", "p1", "new")
    world.catch_up()
    counted = Counted(world)
    # When the client subscribes to p1
    world.subscribe("p1")
    world.catch_up(limit=5)
    # Then the difference read the checkpoint and the two entries after it (once for all its pages), not the
    # 1,242 entries of the log from its start
    assert counted.chunks > 0 and counted.entries <= 2 * 12
    assert world.held() == world.expected() and len(world.held()) == 10 + 10 + 1  # p0's lobby, p1's rows and x
    assert world.held()[("tasks", "r1")]["title"] == "after"


def test_a_checkpoint_larger_than_the_log_it_replaces_is_not_read() -> None:
    # Given 1,100 rows written once each: the checkpoint has as many deltas as the log has entries
    world = World()
    hot_rows(world, 1100, 0)
    world.checkpoint_and_release(chunk_bytes=65536, release=False)
    world.catch_up()
    counted = Counted(world)
    world.subscribe("p1")
    world.catch_up(limit=500)
    # Then the difference read the log from its start (the manifest only, to weigh it) and no chunk
    assert counted.entries >= 1100 and counted.chunks == 0 and counted.objects == 2  # the latest pointer, the manifest
    assert world.held() == world.expected() and len(world.held()) == 550


def test_a_difference_of_many_pages_reads_its_log_once() -> None:
    # Given 60 rows, each updated 4 times (300 entries), nothing checkpointed, and the client caught up
    world = World()
    hot_rows(world, 60, 4)
    world.catch_up()
    counted = Counted(world)
    # When it subscribes to p1 and takes the difference 5 rows a page (about 15 pages)
    world.subscribe("p1")
    pages = 0
    pull = world.pull

    def counted_pull(limit: int) -> Any:
        nonlocal pages
        pages += 1
        return pull(limit)

    world.pull = counted_pull  # type: ignore[method-assign]
    world.catch_up(limit=5)
    # Then the log up to the cursor was read once for all its pages, not once a page
    assert pages >= 3
    assert 300 <= counted.entries < 2 * 300
    assert world.held() == world.expected()
    # And a new difference over a log grown since reads the new range, not the cached one
    world.write("late", "p2", "t")
    world.catch_up()
    world.subscribe("p2")
    world.catch_up(limit=5)
    assert world.held() == world.expected() and ("tasks", "late") in world.held()


def test_a_short_log_is_read_without_looking_for_a_checkpoint() -> None:
    world = World()
    hot_rows(world, 4, 3)
    world.checkpoint_and_release(release=False)
    world.catch_up()
    counted = Counted(world)
    world.subscribe("p1")
    world.catch_up()
    assert counted.objects == 0 and world.held() == world.expected()


def test_a_checkpoint_ahead_of_the_cursor_is_not_read() -> None:
    world = World()
    hot_rows(world, 40, 30)
    world.catch_up()
    world.write("r1", title="unseen yet")
    world.checkpoint_and_release(release=False)  # past the client's cursor
    counted = Counted(world)
    world.subscribe("p1")
    world.pull(limit=500)
    assert counted.entries >= 1240
    world.catch_up()
    assert world.held() == world.expected()


UNRELEASED = st.one_of(
    OPS.filter(lambda op: op[0] != "release"),
    st.tuples(st.just("checkpoint")),
    st.tuples(st.just("update_all"), st.text("ab")),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(UNRELEASED, min_size=12, max_size=50), st.integers(1, 4), st.integers(200, 2000))
def test_the_replica_is_exact_with_checkpoints_under_an_unreleased_log(
    ops: list[tuple[Any, ...]], limit: int, page_bytes: int
) -> None:
    # Given the same programs with checkpoints written and the log never released, and rows updated over and over (so
    # the checkpoint is sometimes cheaper, sometimes not, sometimes ahead of the cursor), any log length weighed
    with mock.patch.object(scope_change, "MIN_LOG_FOR_A_CHECKPOINT", 0):
        world = World(max_page_bytes=page_bytes)
        for op in ops:
            if op[0] == "checkpoint" and world.heads():
                world.checkpoint_and_release(release=False)
            elif op[0] == "update_all":
                for key in sorted(k for k, ds in world.server.items() if fold(ds).values() is not None):  # type: ignore[union-attr]
                    world.write(key[1], title=op[1])
            elif op[0] not in ("checkpoint", "update_all"):
                run(world, op)
            if op[0] == "catch_up":
                assert world.held() == world.expected()
        world.catch_up(limit)
        assert world.held() == world.expected()
