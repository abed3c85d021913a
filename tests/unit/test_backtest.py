"""Backtest a rules change (issue 44, item 3): on random rules and data, the rows a backtest predicts entering and
leaving each client's scope -- and the bytes of that difference -- are what the client is actually served once the
candidate is saved (the cursor pull's scope difference, on the in-memory gateway); the report names the rules version
it compared against, reads the log or the covering checkpoint, flags filters that match nothing or everything, takes
claim sets from the WebSocket sessions, refuses what saving would refuse, and writes nothing."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakesync.core.backtest import ClaimSet, parse_claim_sets, render_text
from lakesync.core.delta import DeltaOp, RowDelta
from lakesync.core.errors import SyncRuleError, ValidationError
from lakesync.core.hlc import HLC
from lakesync.core.log import LogEntry
from lakesync.core.merge import fold
from lakesync.core.messages import SyncPush
from lakesync.core.realtime import Connection, Encoding
from lakesync.core.rules import parse_sync_rules
from lakesync.gateway import admin
from lakesync.gateway import subscriptions as subs
from lakesync.gateway.backtest import backtest, backtest_request
from lakesync.gateway.checkpoint import encode_row, write_checkpoint
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.membership_view import GatewayMemberships
from lakesync.gateway.memory import (
    InMemoryActionStore,
    InMemoryBufferStore,
    InMemoryConfigStore,
    InMemoryConnectionStore,
    InMemoryObjectStore,
    InMemorySubscriptions,
)
from lakesync.gateway.pull import pull
from lakesync.gateway.push import push
from lakesync.gateway.state_rows import item_bytes
from tests.factories import T0, at, delete, insert

GW = "gw"
USERS = ("u0", "u1", "u2")
PROJECTS = ("p0", "p1", "p2", "p3")
MEMBER_OF = {"table": "memberships", "column": "project", "where": [{"column": "user", "op": "eq", "value": "jwt:sub"}]}
STREAM = {
    "name": "project",
    "table": "tasks",
    "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
    "params": {"project": {"subscription": {"allowed": list(PROJECTS)}}},
}
TASK_FILTERS = st.sampled_from(
    [
        *({"column": "project_id", "op": "eq", "value": p} for p in PROJECTS),
        {"column": "project_id", "op": "in", "value": "jwt:team"},
        {"column": "owner", "op": "eq", "value": "jwt:sub"},
        {"column": "owner", "op": "neq", "value": "u1"},
        {"column": "n", "op": "gt", "value": "4"},
        {"column": "n", "op": "lte", "value": "2"},
        {"column": "absent", "op": "eq", "value": "x"},
    ]
) | st.just({"column": "project_id", "op": "in", "membership": MEMBER_OF})


@st.composite
def rules_docs(draw: st.DrawFn, version: int) -> dict[str, Any]:
    """A random rules document over ``tasks`` and ``memberships``."""
    buckets = []
    for i in range(draw(st.integers(0, 3))):
        tables = draw(st.sampled_from([["tasks"], [], ["memberships"]]))
        filters = (
            [{"column": "user", "op": "eq", "value": "jwt:sub"}]
            if tables == ["memberships"]
            else draw(st.lists(TASK_FILTERS, max_size=2))
        )
        buckets.append({"name": f"b{i}", "tables": tables, "filters": filters})
    doc: dict[str, Any] = {"version": version, "buckets": buckets}
    if draw(st.booleans()):
        doc["streams"] = [copy.deepcopy(STREAM)]
    if draw(st.integers(0, 4)) == 0:
        doc["tables"] = {"memberships": {"adminOnly": True}}
        try:
            parse_sync_rules(doc)
        except SyncRuleError:  # a bucket may not name an admin-only table
            doc["buckets"] = [b for b in buckets if b["tables"] != ["memberships"]]
    parse_sync_rules(doc)
    return doc


@st.composite
def candidates(draw: st.DrawFn, old: Mapping[str, Any]) -> dict[str, Any]:
    """A candidate: random, or ``old`` with one change (a stream or a bucket added or dropped, a filter replaced),
    which is how rules usually change and where a wrong prediction would hide."""
    change = draw(st.sampled_from(["random", "streams", "drop-bucket", "add-bucket", "filter"]))
    if change == "random":
        return draw(rules_docs(2))
    new = copy.deepcopy(dict(old))
    new["version"] = 2
    buckets = new["buckets"]
    if change == "streams":
        if new.pop("streams", None) is None:
            new["streams"] = [copy.deepcopy(STREAM)]
    elif change == "drop-bucket" and buckets:
        buckets.pop(draw(st.integers(0, len(buckets) - 1)))
    elif change == "filter" and any(b["tables"] != ["memberships"] for b in buckets):
        bucket = draw(st.sampled_from([b for b in buckets if b["tables"] != ["memberships"]]))
        bucket["filters"] = [*bucket["filters"][:1], draw(TASK_FILTERS)]
    else:
        buckets.append({"name": f"b{len(buckets) + 9}", "tables": ["tasks"], "filters": [draw(TASK_FILTERS)]})
    parse_sync_rules(new)
    return new


class World:
    """A gateway on the in-memory stores (memberships read from its own tables), its writer, and clients that
    follow their cursors."""

    def __init__(self, rules: Mapping[str, Any]) -> None:
        self.wall = T0
        self.objects = InMemoryObjectStore()
        self.deps = GatewayDeps(
            InMemoryBufferStore(),
            InMemoryConfigStore(),
            InMemoryActionStore(),
            settings=GatewaySettings(max_page_bytes=1500),
            clock=HLC(lambda: self.wall),
            wall_ms=lambda: self.wall,
            sleep=lambda _: None,
            objects=self.objects,
            subscriptions=InMemorySubscriptions(),
        )
        self.deps.memberships = GatewayMemberships(self.deps)
        admin.save_sync_rules(self.deps, GW, rules)
        self.cursors: dict[str, str | None] = {}
        self.server: dict[tuple[str, str], list[RowDelta]] = {}

    def write(self, d: RowDelta) -> None:
        push(self.deps, GW, SyncPush("w", (d,)), client_id="w", trusted=True)
        self.server.setdefault((d.table, d.row_id), []).append(d)

    def claims(self, user: str, team: Sequence[str]) -> dict[str, Any]:
        return {"sub": user, "team": tuple(team)}

    def follow(self, user: str, claims: Mapping[str, Any]) -> list[LogEntry | RowDelta]:
        """Pull from the client's cursor until it is caught up; the items served."""
        served: list[LogEntry | RowDelta] = []
        for _ in range(500):
            page = pull(self.deps, GW, limit=7, claims=claims, cursor=self.cursors.get(user), subscriber=user)
            served.extend(page.items)
            self.cursors[user] = page.cursor
            if not page.has_more:
                return served
        raise AssertionError("the pull never caught up")

    def checkpoint_and_release(self) -> None:
        buffer = self.deps.buffer
        heads = buffer.get_heads(buffer.list_shards(GW))
        states = [fold(ds) for ds in self.server.values()]
        write_checkpoint(
            self.objects,
            gateway=GW,
            checkpoint_id=f"{self.wall:013d}-00000001",
            created_at_ms=self.wall,
            positions={s.key: h.seq for s, h in heads.items()},
            server_hlc=at(self.wall - T0),
            tables=sorted({t for t, _ in self.server}),
            rows=(encode_row(s) for s in states if s is not None),
            chunk_bytes=300,
        )
        for shard, head in heads.items():
            buffer.release_log(shard, head.seq)


def _received(items: Sequence[LogEntry | RowDelta], user: str) -> dict[str, Any]:
    """What a difference served: rows entering (any delta but a drop) and leaving (drops), by table; its bytes."""
    entering: dict[str, set[str]] = {}
    leaving: dict[str, set[str]] = {}
    for item in items:
        d = item.delta if isinstance(item, LogEntry) else item
        assert isinstance(d, RowDelta)
        drop = d.op is DeltaOp.DELETE and d.hlc == 0 and d.client_id == user
        (leaving if drop else entering).setdefault(d.table, set()).add(d.row_id)
    return {"entering": entering, "leaving": leaving, "bytes": sum(item_bytes(i) for i in items)}


def _predicted(result: Mapping[str, Any]) -> dict[str, Any]:
    def rows(moves: Mapping[str, Any]) -> dict[str, set[str]]:
        for m in moves.values():
            assert m["rows"] == len(m["sample"])  # the sample holds every row here
        return {t: {s["rowId"] for s in m["sample"]} for t, m in moves.items()}

    return {"entering": rows(result["entering"]), "leaving": rows(result["leaving"]), "bytes": result["bytes"]}


WRITES = st.lists(
    st.one_of(
        st.tuples(
            st.just("task"),
            st.integers(0, 6),
            st.sampled_from(PROJECTS),
            st.sampled_from(USERS),
            st.integers(0, 9),
        ),
        st.tuples(st.just("member"), st.sampled_from(USERS), st.sampled_from(PROJECTS)),
        st.tuples(st.just("delete"), st.integers(0, 6)),
    ),
    max_size=14,
)
CLIENTS = st.lists(
    st.tuples(
        st.sampled_from(USERS),
        st.lists(st.sampled_from(PROJECTS), max_size=2),  # its team claim
        st.lists(st.sampled_from(PROJECTS), min_size=1, max_size=2, unique=True),  # its subscriptions, its memberships
    ),
    min_size=1,
    max_size=3,
    unique_by=lambda c: c[0],
)


def _seed(world: World, writes: Sequence[tuple[Any, ...]]) -> None:
    for tick, w in enumerate(writes, start=1):
        world.wall = T0 + tick
        if w[0] == "task":
            world.write(insert(f"t{w[1]}", hlc=at(tick), table="tasks", project_id=w[2], owner=w[3], n=w[4]))
        elif w[0] == "member":
            world.write(insert(f"{w[1]}-{w[2]}", hlc=at(tick), table="memberships", user=w[1], project=w[2]))
        elif ("tasks", f"t{w[1]}") in world.server:
            world.write(delete(f"t{w[1]}", hlc=at(tick), table="tasks"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rules_docs(1), st.data(), WRITES, CLIENTS, st.booleans())
def test_the_predicted_rows_and_bytes_are_what_the_clients_are_served_after_the_change(
    old: dict[str, Any],
    data: st.DataObject,
    writes: list[tuple[Any, ...]],
    clients: list[tuple[str, list[str], list[str]]],
    released: bool,
) -> None:
    # Given a gateway under the old rules, rows and membership rows, and clients (with their subscriptions) caught
    # up on their cursors; the log maybe released behind a checkpoint
    world = World(old)
    members = [("member", user, p) for user, _, projects in clients for p in projects[:1]]
    _seed(world, [*members, *writes])
    claims = {user: world.claims(user, team) for user, team, _ in clients}
    for user, _, projects in clients:
        if "streams" in old:
            for p in projects:
                subs.subscribe(world.deps, GW, user, claims[user], {"stream": "project", "params": {"project": p}})
        world.follow(user, claims[user])
    if released and world.server:
        world.checkpoint_and_release()
    # When a candidate is backtested for each client, then saved, and each client pulls
    new = data.draw(candidates(old))
    sets = [ClaimSet(user, claims[user]) for user, _, _ in clients]
    report = backtest(world.deps, GW, new, sets, sample=100)
    admin.save_sync_rules(world.deps, GW, new)
    served = {user: _received(world.follow(user, claims[user]), user) for user, _, _ in clients}
    # Then what each client was served is what the backtest predicted: rows entering and leaving, by table, and bytes
    assert report["against"]["version"] == 1 and report["candidate"]["version"] == 2
    for result in report["claimSets"]:
        assert _predicted(result) == served[result["client"]], result["client"]


def _tasks_world() -> World:
    world = World({"version": 1, "buckets": [{"name": "mine", "tables": ["tasks"], "filters": [OWNER]}]})
    for i, (owner, n) in enumerate([("u0", 1), ("u0", 7), ("u1", 3), ("u1", 9)], start=1):
        world.wall = T0 + i
        world.write(insert(f"t{i}", hlc=at(i), table="tasks", project_id="p0", owner=owner, n=n))
    return world


OWNER = {"column": "owner", "op": "eq", "value": "jwt:sub"}
CANDIDATE = {
    "version": 2,
    "buckets": [
        {
            "name": "big",
            "tables": ["tasks"],
            "filters": [
                {"column": "n", "op": "gt", "value": "2"},
                {"column": "project_id", "op": "eq", "value": "p0"},
                {"column": "owner", "op": "neq", "value": "nobody"},
            ],
        },
        {"name": "none", "tables": ["tasks"], "filters": [{"column": "project_id", "op": "eq", "value": "p9"}]},
    ],
}


def test_the_report_counts_samples_and_names_the_version_compared_against() -> None:
    # Given u0 reading its own tasks (t1 n=1, t2 n=7) under version 1
    world = _tasks_world()
    # When a candidate reading tasks with n > 2 is tested for u0 with one sample row per direction
    report = backtest(world.deps, GW, CANDIDATE, [ClaimSet("u0", {"sub": "u0"})], sample=1)
    # Then t3 and t4 (others' tasks) enter and t1 leaves; t2 stays
    (result,) = report["claimSets"]
    assert result["entering"]["tasks"]["rows"] == 2 and len(result["entering"]["tasks"]["sample"]) == 1
    assert result["leaving"]["tasks"]["rows"] == 1
    assert result["leaving"]["tasks"]["sample"] == [
        {"rowId": "t1", "values": {"project_id": "p0", "owner": "u0", "n": 1}}
    ]
    assert report["tables"] == {"tasks": {"entering": 2, "leaving": 1, "bytes": result["bytes"]}}
    assert report["against"]["version"] == 1 and report["against"]["digest"]
    assert report["against"]["source"] == "log" and report["rowsRead"] == {"tasks": 4}
    # And the filters that hold for every row or none of their tables are named; the others are not
    flagged = {(f["origin"], f["index"]): f["matches"] for f in report["filters"]}
    assert flagged == {
        ('Bucket "big"', 1): "everything",
        ('Bucket "big"', 2): "everything",
        ('Bucket "none"', 0): "nothing",
    }
    text = render_text(report)
    assert "compared against rules version 1" in text and "matches nothing" in text and "leave tasks: 1 rows" in text


def test_the_backtest_reads_the_covering_checkpoint_once_the_log_is_released() -> None:
    # Given the log released behind a checkpoint, then one more task written
    world = _tasks_world()
    world.checkpoint_and_release()
    world.wall += 10
    world.write(insert("t5", hlc=at(20), table="tasks", project_id="p0", owner="u2", n=5))
    # When backtested
    report = backtest(world.deps, GW, CANDIDATE, [ClaimSet("u0", {"sub": "u0"})])
    # Then the rows come from the checkpoint and the log after it
    assert report["against"]["source"].startswith("checkpoint ") and report["rowsRead"] == {"tasks": 5}
    assert report["claimSets"][0]["entering"]["tasks"]["rows"] == 3


def test_the_backtest_writes_nothing() -> None:
    # Given a client caught up (its scope kept)
    world = _tasks_world()
    world.follow("u0", {"sub": "u0"})

    def state() -> tuple[object, ...]:
        buffer, store = world.deps.buffer, world.deps.subscriptions
        shards = buffer.list_shards(GW)
        log = [e.delta for s in shards for e in buffer.read_log(s, 0, 100)]
        return world.deps.config.get_sync_rules(GW), buffer.get_heads(shards), log, store.get_served(GW, "u0")  # type: ignore[union-attr]

    before = state()
    # When a candidate is backtested
    backtest(world.deps, GW, CANDIDATE, [ClaimSet("u0", {"sub": "u0"})])
    # Then the rules, the heads, the log and the kept scopes are as they were
    assert state() == before and before[3]


def test_claim_sets_come_from_the_gateways_live_websocket_sessions() -> None:
    # Given two sessions of u0 with the same claims, one of u1, and an expired one of u2
    world = _tasks_world()
    sessions = InMemoryConnectionStore()
    now_s = world.wall // 1000
    for cid, user, expires in (("c1", "u0", now_s + 60), ("c2", "u0", now_s + 90), ("c3", "u1", now_s + 60)):
        sessions.put_connection(Connection(cid, GW, user, {"sub": user}, Encoding.BINARY, expires, now_s))
    sessions.put_connection(Connection("c4", GW, "u2", {"sub": "u2"}, Encoding.BINARY, now_s - 1, now_s - 100))
    # When backtested without claim sets
    report = backtest(world.deps, GW, CANDIDATE, sessions=sessions)
    # Then one claim set per live client, from the sessions
    assert [(c["client"], c["origin"]) for c in report["claimSets"]] == [("u0", "session"), ("u1", "session")]
    # And with no session and no claim set, a 400 says to give them
    with pytest.raises(ValidationError, match="claimSets"):
        backtest(world.deps, GW, CANDIDATE, sessions=InMemoryConnectionStore())


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"rules": {"version": 1, "buckets": [{"name": ""}]}}, "name"),
        ({"rules": {"version": 0, "buckets": []}}, "version"),
        ([], "body"),
        ({"rules": CANDIDATE, "extra": 1}, "Unknown fields: extra"),
        ({"rules": CANDIDATE, "sample": 101}, "sample"),
        ({"rules": CANDIDATE, "claimSets": {}}, "claimSets must be an array"),
        ({"rules": CANDIDATE, "claimSets": [{"claims": {"team": 1}}]}, "string"),
        ({"rules": CANDIDATE, "claimSets": [{"claims": {}}]}, "client"),
        ({"rules": CANDIDATE, "claimSets": [{"claims": {"sub": "u"}, "subscriptions": None}]}, "must be an array"),
    ],
)
def test_bad_input_is_refused_as_saving_would_refuse_it(body: object, message: str) -> None:
    world = _tasks_world()
    with pytest.raises(ValidationError, match=message) as caught:
        backtest_request(world.deps, GW, body)
    assert caught.value.status == 400


def test_given_claim_sets_default_the_client_to_the_sub_claim_and_keep_subscriptions() -> None:
    (first, second) = parse_claim_sets(
        [
            {"claims": {"sub": "u0", "team": ["p1", "p2"]}},
            {"client": "dev", "claims": {}, "subscriptions": [{"stream": "project", "params": {"project": "p1"}}]},
        ]
    )
    assert (first.client, dict(first.claims), first.subscriptions) == ("u0", {"sub": "u0", "team": ("p1", "p2")}, None)
    assert second.client == "dev" and second.claims == {"sub": "dev"}
    assert [s.param_map for s in second.subscriptions or ()] == [{"project": "p1"}]


def test_the_cli_sends_the_candidate_and_prints_the_report(tmp_path, monkeypatch, capsys) -> None:
    # Given a candidate and claim sets in files, and a gateway answering with a report
    from lakesync import cli
    from lakesync.client.http import SyncClient

    report = backtest(_tasks_world().deps, GW, CANDIDATE, [ClaimSet("u0", {"sub": "u0"})])
    sent: list[tuple[str, str, object]] = []

    def answer(self: SyncClient, method: str, path: str, *, body: object = None, query: object = None) -> object:
        sent.append((method, path, body))
        return report

    monkeypatch.setattr(SyncClient, "request", answer)
    (tmp_path / "new.json").write_text(json.dumps(CANDIDATE))
    (tmp_path / "claims.json").write_text(json.dumps([{"claims": {"sub": "u0"}}]))
    args = [
        "rules",
        "test",
        str(tmp_path / "new.json"),
        "--gw",
        GW,
        "--token",
        "t",
        "--claims",
        str(tmp_path / "claims.json"),
    ]
    # When run for people, then for tools
    assert cli.main(args) == 0
    text = capsys.readouterr().out
    assert cli.main([*args, "--json", "--sample", "2"]) == 0
    # Then it posted the body to the gateway's test route and printed the report in each form
    assert sent[0] == (
        "POST",
        f"/v1/admin/sync-rules/{GW}/test",
        {"rules": CANDIDATE, "sample": 5, "claimSets": [{"claims": {"sub": "u0"}}]},
    )
    assert sent[1][2]["sample"] == 2  # type: ignore[index]
    assert text.strip() == render_text(report)
    assert json.loads(capsys.readouterr().out) == report
    # And a file it cannot read is exit 2, before any request
    assert cli.main(["rules", "test", str(tmp_path / "missing.json"), "--token", "t"]) == 2 and len(sent) == 2
