"""Writes judged by the client's whole scope: a subscriber writes the rows of its subscription within the stream's
write policy, a member writes its projects' rows through a membership-filtered bucket, and the push reads the
subscriptions and memberships only when a delta needs them.

The push service on the in-memory stores (the rules without streams are tests/unit/test_write_rules.py's, unchanged;
the property that the guard is the scope's own judgement is tests/unit/test_write_guard_properties.py's).
"""

from __future__ import annotations

from typing import Any

from lakesync.core.filters import InMemoryMemberships, MembershipQuery
from lakesync.core.hlc import HLC, encode
from lakesync.core.messages import SyncPush
from lakesync.core.rules import OPERATION_NOT_ALLOWED, OUT_OF_SCOPE, Claims, parse_sync_rules
from lakesync.core.streams import MAX_CLIENT_SUBSCRIPTIONS, Subscription
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.memory import (
    InMemoryActionStore,
    InMemoryBufferStore,
    InMemoryConfigStore,
    InMemoryMembershipReader,
    InMemorySubscriptions,
)
from lakesync.gateway.push import PushResult, push
from tests import factories
from tests.factories import T0
from tests.stream_docs import member_bucket, own_bucket, project_stream

GW = "default"
ANN: Claims = {"sub": "ann", "projects": ["1", "2"]}
WRITE = {"ops": ["insert", "update"]}
STREAM_RULES: dict[str, Any] = {
    "version": 1,
    "buckets": [own_bucket("todos")],
    "streams": [project_stream(write=WRITE, ttlSeconds={"default": 60, "max": 600})],
}
MEMBER_RULES: dict[str, Any] = {"version": 1, "buckets": [member_bucket("member_tasks", "tasks"), own_bucket("todos")]}


class CountingSubscriptions(InMemorySubscriptions):
    """The in-memory subscriptions, counting the reads of each client's."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get(self, gateway: str, client_id: str, now_ms: int) -> list[Subscription]:
        self.reads += 1
        return super().get(gateway, client_id, now_ms)


class CountingMemberships(InMemoryMemberships):
    """In-memory membership rows, counting the queries asked."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        super().__init__({"memberships": rows})
        self.queries = 0

    def member_values(self, query: MembershipQuery) -> frozenset[str]:
        self.queries += 1
        return super().member_values(query)


class CountingReader(InMemoryMembershipReader):
    """The in-memory membership reader, counting the sources taken (one per push that needs one)."""

    def __init__(self, memberships: InMemoryMemberships) -> None:
        super().__init__(memberships)
        self.sources = 0

    def source(self, gateway: str) -> InMemoryMemberships:
        self.sources += 1
        return super().source(gateway)


class Gateway:
    """A gateway on in-memory stores with subscriptions, memberships and a controllable wall clock."""

    def __init__(self, rules: dict[str, Any], memberships: list[dict[str, Any]] | None = None) -> None:
        self.wall = T0
        self.buffer = InMemoryBufferStore()
        self.config = InMemoryConfigStore()
        self.config.put_sync_rules(GW, parse_sync_rules(rules))
        self.subscriptions = CountingSubscriptions()
        self.memberships = CountingMemberships(memberships) if memberships is not None else None
        self.reader = CountingReader(self.memberships) if self.memberships is not None else None
        self.deps = GatewayDeps(
            buffer=self.buffer,
            config=self.config,
            actions=InMemoryActionStore(),
            clock=HLC(lambda: self.wall),
            wall_ms=lambda: self.wall,
            sleep=lambda _s: None,
            subscriptions=self.subscriptions,
            memberships=self.reader,
        )

    def push(self, client: str, claims: Claims, *deltas: Any, trusted: bool = False) -> PushResult:
        return push(self.deps, GW, SyncPush(client, deltas), client_id=client, claims=claims, trusted=trusted)

    def write(self, client: str, op: str, row: str, table: str = "tasks", **values: Any) -> Any:
        self.wall += 1
        return factories.delta(op, row, hlc=encode(self.wall, 0), table=table, client=client, columns=values)

    def seed(self, row: str, table: str = "tasks", **values: Any) -> None:
        assert self.push("admin", {}, self.write("admin", "INSERT", row, table, **values), trusted=True).accepted == 1

    def row(self, row: str, table: str = "tasks") -> dict[str, Any] | None:
        stored = self.buffer.get_rows(GW, [(table, row)]).get((table, row))
        return stored.state.values() if stored is not None else None


def _verdicts(result: PushResult) -> list[str | None]:
    return [r.rejected.code if r.rejected is not None else None for r in result.receipts]


def _subscribed() -> tuple[Gateway, Subscription]:
    """A gateway with rows of projects 1 and 2, and ann subscribed to project 1 for the stream's default lifetime."""
    gw = Gateway(STREAM_RULES)
    gw.seed("t1", project_id="1", title="one")
    gw.seed("t2", project_id="2", title="two")
    rules = gw.config.get_sync_rules(GW)
    stream = rules.stream("project_tasks") if rules is not None else None
    assert stream is not None
    held = Subscription.of(stream.name, {"project": "1"}, stream.expires_at(gw.wall))
    assert gw.subscriptions.put(GW, "ann", held, gw.wall, MAX_CLIENT_SUBSCRIPTIONS)
    return gw, held


def test_a_subscriber_updates_and_inserts_rows_of_its_subscription() -> None:
    gw, _ = _subscribed()
    # When ann updates a row of project 1 and inserts another, in one push
    result = gw.push(
        "ann",
        ANN,
        gw.write("ann", "UPDATE", "t1", title="one, edited"),
        gw.write("ann", "INSERT", "t3", project_id="1", title="three"),
    )
    # Then both are applied
    assert _verdicts(result) == [None, None] and result.accepted == 2
    assert gw.row("t1") == {"project_id": "1", "title": "one, edited"}
    assert gw.row("t3") == {"project_id": "1", "title": "three"}


def test_a_subscriber_is_refused_a_delete_and_rows_outside_its_subscription_per_delta() -> None:
    gw, _ = _subscribed()
    # When ann deletes a row of its subscription, updates and inserts rows of project 2, moves t1 to project 2, and
    # makes one allowed update, all in one push
    result = gw.push(
        "ann",
        ANN,
        gw.write("ann", "DELETE", "t1"),
        gw.write("ann", "UPDATE", "t2", title="defaced"),
        gw.write("ann", "INSERT", "t4", project_id="2", title="planted"),
        gw.write("ann", "UPDATE", "t1", project_id="2"),
        gw.write("ann", "UPDATE", "t1", title="kept"),
    )
    # Then the stream's policy refuses the delete, the scope refuses the rest, each in its receipt
    assert _verdicts(result) == [OPERATION_NOT_ALLOWED, OUT_OF_SCOPE, OUT_OF_SCOPE, OUT_OF_SCOPE, None]
    assert result.accepted == 1
    receipts = [r.to_json() for r in result.receipts]
    assert 'Stream "project_tasks" (project=1)' in receipts[0]["reason"]
    # the row ann may read (through its subscription) comes back to roll back to; the one it may not is not revealed
    assert receipts[0]["row"] is not None and set(receipts[0]["row"]["c"]) == {"project_id", "title"}
    assert receipts[1]["row"] is None and receipts[2]["row"] is None and receipts[3]["row"] is not None
    # and nothing refused was written
    assert gw.row("t1") == {"project_id": "1", "title": "kept"}
    assert gw.row("t2") == {"project_id": "2", "title": "two"}
    assert gw.row("t4") is None


def test_after_unsubscribing_the_rows_are_refused() -> None:
    gw, held = _subscribed()
    assert gw.push("ann", ANN, gw.write("ann", "UPDATE", "t1", title="before")).accepted == 1
    # When ann unsubscribes, then writes the row again
    assert gw.subscriptions.remove(GW, "ann", held, gw.wall)
    result = gw.push("ann", ANN, gw.write("ann", "UPDATE", "t1", title="after"))
    # Then it is out of its scope, and not revealed
    assert _verdicts(result) == [OUT_OF_SCOPE] and result.receipts[0].row is None
    assert gw.row("t1") == {"project_id": "1", "title": "before"}


def test_after_the_subscription_runs_out_the_rows_are_refused() -> None:
    gw, _ = _subscribed()
    gw.wall += 59_000  # the stream's default lifetime is 60 s
    assert gw.push("ann", ANN, gw.write("ann", "UPDATE", "t1", title="in time")).accepted == 1
    # When the lifetime has run out
    gw.wall += 1_000
    result = gw.push("ann", ANN, gw.write("ann", "UPDATE", "t1", title="too late"))
    # Then the subscription no longer counts
    assert _verdicts(result) == [OUT_OF_SCOPE]
    assert gw.row("t1") == {"project_id": "1", "title": "in time"}


def test_another_client_holds_no_subscription_of_ann() -> None:
    gw, _ = _subscribed()
    bob: Claims = {"sub": "bob", "projects": ["1"]}
    result = gw.push("bob", bob, gw.write("bob", "UPDATE", "t1", title="bob's"))
    assert _verdicts(result) == [OUT_OF_SCOPE]


def test_a_member_writes_its_projects_rows_through_a_membership_bucket_and_no_others() -> None:
    gw = Gateway(MEMBER_RULES, memberships=[{"user": "ann", "project": 1}, {"user": "bob", "project": 2}])
    gw.seed("t1", project_id="1", title="one")
    gw.seed("t2", project_id="2", title="two")
    ann: Claims = {"sub": "ann"}
    # When ann (a member of project 1) writes rows of projects 1 and 2
    result = gw.push(
        "ann",
        ann,
        gw.write("ann", "UPDATE", "t1", title="ann's"),
        gw.write("ann", "INSERT", "t3", project_id="1", title="new"),
        gw.write("ann", "UPDATE", "t2", title="not ann's"),
        gw.write("ann", "UPDATE", "t1", project_id="2"),
    )
    # Then only its project's rows are written, and it may not move one into another project
    assert _verdicts(result) == [None, None, OUT_OF_SCOPE, OUT_OF_SCOPE]
    assert result.receipts[2].row is None and result.receipts[3].row is not None
    assert gw.row("t1") == {"project_id": "1", "title": "ann's"} and gw.row("t2") == {"project_id": "2", "title": "two"}
    # and a client that is a member of nothing writes nothing
    carl = gw.push("carl", {"sub": "carl"}, gw.write("carl", "UPDATE", "t1", title="carl's"))
    assert _verdicts(carl) == [OUT_OF_SCOPE]


def test_a_membership_bucket_without_a_membership_source_holds_no_row_as_before() -> None:
    gw = Gateway(MEMBER_RULES)
    gw.seed("t1", project_id="1", title="one")
    result = gw.push("ann", {"sub": "ann"}, gw.write("ann", "UPDATE", "t1", title="ann's"))
    assert _verdicts(result) == [OUT_OF_SCOPE]


def test_the_push_reads_the_subscriptions_only_for_a_delta_its_buckets_refuse_and_at_most_once() -> None:
    gw, _ = _subscribed()
    ann_todo = {"owner": "ann", "title": "mine"}
    # A push its buckets allow reads no subscription, however many deltas
    allowed = [gw.write("ann", "INSERT", f"d{i}", "todos", **ann_todo) for i in range(5)]
    before = gw.subscriptions.reads
    assert gw.push("ann", ANN, *allowed).accepted == 5
    assert gw.subscriptions.reads == before
    # A push with many deltas its buckets refuse on the stream's table (and on another) reads them once
    deltas = [gw.write("ann", "UPDATE", "t1", title=f"v{i}") for i in range(5)]
    deltas += [gw.write("ann", "INSERT", "x", "todos", owner="bob"), gw.write("ann", "UPDATE", "t2", title="no")]
    result = gw.push("ann", ANN, *deltas)
    assert _verdicts(result) == [None] * 5 + [OUT_OF_SCOPE, OUT_OF_SCOPE]
    assert gw.subscriptions.reads == before + 1
    # A refused delta on a table no stream serves reads none
    gw.push("ann", ANN, gw.write("ann", "INSERT", "y", "todos", owner="bob"))
    assert gw.subscriptions.reads == before + 1


def test_rules_without_streams_read_no_subscription_and_no_membership() -> None:
    gw = Gateway({"version": 1, "buckets": [own_bucket("tasks")]}, memberships=[{"user": "ann", "project": 1}])
    result = gw.push(
        "ann",
        {"sub": "ann"},
        gw.write("ann", "INSERT", "a", owner="ann"),
        gw.write("ann", "INSERT", "b", owner="bob"),
    )
    assert _verdicts(result) == [None, OUT_OF_SCOPE]
    assert gw.subscriptions.reads == 0
    assert gw.reader is not None and gw.reader.sources == 0


def test_a_push_takes_a_membership_source_once_and_only_under_rules_naming_a_membership() -> None:
    gw = Gateway(MEMBER_RULES, memberships=[{"user": "ann", "project": 1}])
    gw.seed("t1", project_id="1", title="one")
    assert gw.reader is not None and gw.memberships is not None
    ann: Claims = {"sub": "ann"}
    # When a push judges several deltas, refused ones among them (whose rows are checked for readability)
    result = gw.push(
        "ann",
        ann,
        *(gw.write("ann", "UPDATE", "t1", title=f"v{i}") for i in range(3)),
        *(gw.write("ann", "INSERT", f"n{i}", project_id="2") for i in range(3)),
    )
    assert _verdicts(result) == [None] * 3 + [OUT_OF_SCOPE] * 3
    # Then it took one membership source
    assert gw.reader.sources == 1
    # and a push of a table whose buckets name no membership asks it nothing
    queries = gw.memberships.queries
    assert gw.push("ann", ann, gw.write("ann", "INSERT", "d1", "todos", owner="ann")).accepted == 1
    assert gw.memberships.queries == queries
