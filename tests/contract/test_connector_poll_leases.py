"""The poller's lease against the in-memory and the DynamoDB (moto server) position stores, on an injected clock: a
poller killed mid-poll holds its connector for a short lease only, not 15 minutes; a live long poll keeps its lease by
renewing it; a poller that lost its lease pushes and stores nothing; the lease never outlives the poll's budget (a
Lambda's remaining time); leases left by a dead run are dropped, each only if its token is still on record; a
connector registered or unregistered by another process (the management API) is polled, or not, at its next tick,
and its schedule is not removed."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from lakesync.connectors import registry
from lakesync.connectors.base import ChangedRow, Connector, PollBatch, Position
from lakesync.connectors.runtime import ConnectorRuntime
from lakesync.connectors.secrets import InMemorySecretStore
from lakesync.core.connectors import ConnectorConfig, validate_connector_config
from lakesync.core.delta import apply_delta
from lakesync.core.hlc import HLC
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.memory import (
    InMemoryActionStore,
    InMemoryBufferStore,
    InMemoryConfigStore,
    RecordingScheduler,
)
from lakesync.gateway.poller import DEFAULT_LEASE_MS, drop_leases, poll_connector, poll_registered
from lakesync.local.connector_scheduler import LocalConnectorScheduler
from lakesync.ports import ConnectorPositionStore, StoredPosition
from tests.connector_types import descriptor, pull_all

MINUTE = 60_000


class Clock:
    """Wall-clock milliseconds that move only when the test says."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


class Feed:
    """An ingest source whose rows the test sets; ``during`` runs inside each poll (a slow source, a rival)."""

    name = "feed"

    def __init__(
        self, rows: Mapping[str, str], during: Callable[[], None] | None = None, *, more: bool = False
    ) -> None:
        self.rows = dict(rows)
        self.during = during
        self.more = more
        self.polls = 0

    def poll(self, position: Position, limit: int) -> PollBatch:
        self.polls += 1
        if self.during is not None:
            self.during()
        changed = [ChangedRow("items", k, {"v": v}, v) for k, v in sorted(self.rows.items())]
        return PollBatch(changed, {"seen": len(changed)}, self.more)

    def close(self) -> None:
        pass


class Killed(BaseException):
    """The process died here (``kill -9``, a Lambda timeout): nothing after it runs."""


class NoCleanup:
    """A position store as a killed poller leaves it: its ``release`` never reaches the store."""

    def __init__(self, inner: ConnectorPositionStore) -> None:
        self.inner = inner

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def release(self, gateway: str, name: str, token: str) -> None:
        pass


class Heartbeats:
    """A position store that tells who waits on it about each renewal that held."""

    def __init__(self, inner: ConnectorPositionStore) -> None:
        self.inner = inner
        self.renewed_until = 0
        self.changed = threading.Condition()

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def renew(self, gateway: str, name: str, token: str, until_ms: int) -> bool:
        done = self.inner.renew(gateway, name, token, until_ms)
        if done:
            with self.changed:
                self.renewed_until = max(self.renewed_until, until_ms)
                self.changed.notify_all()
        return done

    def wait_renewed(self, until_ms: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.renewed_until >= until_ms, timeout=30), "no renewal came"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def deps(clock: Clock) -> GatewayDeps:
    return GatewayDeps(
        buffer=InMemoryBufferStore(),
        config=InMemoryConfigStore(),
        actions=InMemoryActionStore(),
        clock=HLC(),
        wall_ms=clock,
        settings=GatewaySettings(max_deltas_per_push=2),
    )


def _items(deps: GatewayDeps, gw: str) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for d in pull_all(deps, gw):
        if d.table == "items":
            after = apply_delta(rows.get(d.row_id), d)
            rows[d.row_id] = after["v"] if after else None
    return rows


def test_a_poller_killed_mid_poll_blocks_the_next_poll_only_for_a_short_lease(
    deps: GatewayDeps, clock: Clock, positions: ConnectorPositionStore, gw: str
) -> None:
    # Given a poll killed while it reads the source (its lease stays on record: nothing released it)
    def die() -> None:
        raise Killed

    with pytest.raises(Killed):
        poll_connector(deps, gw, "feed", Feed({"a": "1"}, during=die), NoCleanup(positions))
    assert positions.read_position(gw, "feed").lease is not None
    # When a poll comes a second later, the lease still guards the connector (that poller might be alive)
    clock.now += 1000
    assert poll_connector(deps, gw, "feed", Feed({"a": "1"}), positions).status == "busy"
    # Then the poll of the next one-minute schedule tick proceeds, and brings every row once
    clock.now += MINUTE
    resumed = poll_connector(deps, gw, "feed", Feed({"a": "1", "b": "2"}), positions)
    assert (resumed.status, resumed.rows, resumed.applied, resumed.version) == ("polled", 2, 2, 1)
    assert _items(deps, gw) == {"a": "1", "b": "2"}


def test_a_long_poll_keeps_its_lease_by_renewing_it(
    deps: GatewayDeps, clock: Clock, positions: ConnectorPositionStore, gw: str
) -> None:
    beats = Heartbeats(positions)
    rival: list[str] = []

    def slow_source() -> None:
        # A source that reads for 20 minutes of the clock (longer than the 15-minute lease of old), 10 s at a time,
        # while the poller's heartbeat renews the lease; a second poller tries halfway through
        for step in range(120):
            clock.now += 10_000
            beats.wait_renewed(clock.now + DEFAULT_LEASE_MS)
            if step == 60:
                rival.append(poll_connector(deps, gw, "feed", Feed({"a": "other"}), positions).status)

    # When the long poll runs (its lease renewed every few real milliseconds here)
    long = poll_connector(deps, gw, "feed", Feed({"a": "1"}, during=slow_source), beats, renew_every_ms=2)
    # Then the rival found it busy, and the long poll stored its position and rows
    assert rival == ["busy"]
    assert (long.status, long.applied, long.version) == ("polled", 1, 1)
    assert positions.read_position(gw, "feed") == StoredPosition({"seen": 1}, 1)
    assert _items(deps, gw) == {"a": "1"}


def test_a_poller_that_lost_its_lease_pushes_and_stores_nothing(
    deps: GatewayDeps, clock: Clock, positions: ConnectorPositionStore, gw: str
) -> None:
    taken: list[Any] = []

    def stall() -> None:
        # The poller stalls past its lease (no heartbeat ran: a frozen host); another poller takes the connector
        # over, reads the row's newer state, pushes it and stores its position
        clock.now += 31_000
        taken.append(poll_connector(deps, gw, "feed", Feed({"a": "new"}), positions))

    # When the stalled poller resumes with the older state it read
    stalled = poll_connector(
        deps, gw, "feed", Feed({"a": "old"}, during=stall), positions, lease_ms=30_000, renew_every_ms=MINUTE
    )
    # Then it pushed nothing (its older row would have overwritten the newer one) and stored nothing
    assert taken[0].status == "polled" and taken[0].version == 1
    assert (stalled.status, stalled.applied) == ("superseded", 0)
    assert _items(deps, gw) == {"a": "new"}
    assert positions.read_position(gw, "feed") == StoredPosition({"seen": 1}, 1)


def test_a_failing_renewal_stops_the_pushes_and_frees_the_connector(
    deps: GatewayDeps, clock: Clock, positions: ConnectorPositionStore, gw: str
) -> None:
    # Given a store that cannot be written while the poll reads (the renewals fail), for longer than the lease
    failing = threading.Event()

    class Unwritable(Heartbeats):
        def renew(self, gateway: str, name: str, token: str, until_ms: int) -> bool:
            if failing.is_set():
                with self.changed:
                    self.renewed_until = -1
                    self.changed.notify_all()
                raise OSError("store unreachable")
            return super().renew(gateway, name, token, until_ms)

    store = Unwritable(positions)

    def outage() -> None:
        failing.set()
        clock.now += 29_000
        with store.changed:
            assert store.changed.wait_for(lambda: store.renewed_until == -1, timeout=30)

    result = poll_connector(deps, gw, "feed", Feed({"a": "1"}, during=outage), store, renew_every_ms=2)
    # Then the poller stopped before pushing (its lease ran out by its own clock) and left the connector free
    assert (result.status, result.applied) == ("superseded", 0)
    assert _items(deps, gw) == {}
    assert positions.read_position(gw, "feed") == StoredPosition({}, 0)


def test_the_lease_never_outlives_the_polls_budget(
    deps: GatewayDeps, clock: Clock, positions: ConnectorPositionStore, gw: str
) -> None:
    seen: list[int] = []

    def read_for_10s() -> None:
        seen.append(positions.read_position(gw, "feed").lease_until_ms)
        clock.now += 10_000

    # Given a Lambda invocation with 20 s left, and a source that always has more
    end = clock.now + 20_000
    feed = Feed({"a": "1"}, during=read_for_10s, more=True)
    result = poll_connector(deps, gw, "feed", feed, positions, end_ms=end, max_rounds=10)
    # Then its lease ended when the invocation would (not 30 s on), and no second round started with 10 s left
    assert seen == [end]
    assert (result.status, result.rounds, result.version) == ("polled", 1, 1)


def test_leases_of_a_dead_run_are_dropped_but_a_lease_taken_meanwhile_is_kept(
    clock: Clock, positions: ConnectorPositionStore, gw: str
) -> None:
    # Given leases left by polls that died (one 15 minutes long, as an earlier release took them)
    assert positions.acquire(gw, "crm", 0, "dead-1", clock.now + 15 * MINUTE, clock.now)
    assert positions.acquire(gw, "jira", 0, "dead-2", clock.now + 15 * MINUTE, clock.now)

    class Racing:
        """Between the listing and the drop, the jira lease is released and taken anew by a live poller."""

        def __init__(self, inner: ConnectorPositionStore) -> None:
            self.inner = inner

        def __getattr__(self, attr: str) -> Any:
            return getattr(self.inner, attr)

        def leases(self, gateway: str) -> dict[str, str]:
            found = self.inner.leases(gateway)
            self.inner.release(gateway, "jira", "dead-2")
            assert self.inner.acquire(gateway, "jira", 0, "live", clock.now + 30_000, clock.now)
            return found

    # When the leases on record are dropped
    dropped = drop_leases(Racing(positions), gw)
    # Then the dead one is gone and the one taken meanwhile is not
    assert dropped == ["crm"]
    assert positions.read_position(gw, "crm").lease is None
    assert positions.read_position(gw, "jira").lease == "live"
    assert positions.acquire(gw, "crm", 0, "next", clock.now + 30_000, clock.now)


DESCRIPTOR = descriptor("feed-test", "Feed (test)", "An in-memory ingest source")
FEEDS: dict[str, Feed] = {}


@pytest.fixture
def registered(deps: GatewayDeps, positions: ConnectorPositionStore) -> Iterator[GatewayDeps]:
    """``deps`` with a connector runtime whose cached list never expires by itself (a warm Lambda container, or
    ``lakesync local``'s poll loop, within its cache's 30 s) and a recording scheduler."""
    registry.register(DESCRIPTOR, lambda config, _secrets: Connector(config.name, ingest=FEEDS[config.name]))
    deps.connectors = ConnectorRuntime(deps.config, InMemorySecretStore(), clock=lambda: 0.0)
    deps.positions = positions
    deps.connector_scheduler = RecordingScheduler()
    yield deps
    deps.connectors.close()
    registry.unregister(DESCRIPTOR.type)


def _config(name: str) -> ConnectorConfig:
    return validate_connector_config(
        {
            "name": name,
            "type": DESCRIPTOR.type,
            "ingest": {
                "intervalMs": MINUTE,
                "tables": [{"table": "items", "query": "-", "strategy": {"type": "diff"}}],
            },
        }
    )


def test_a_connector_registered_elsewhere_is_polled_at_its_first_tick(registered: GatewayDeps, gw: str) -> None:
    deps = registered
    deps.settings = GatewaySettings(gateway_ids=frozenset({gw}))
    assert deps.connectors is not None and isinstance(deps.connector_scheduler, RecordingScheduler)
    # Given a poller process that has read the gateway's (empty) connector list
    assert deps.connectors.configs(gw) == []
    # When another process (the management API) registers a connector and schedules it
    FEEDS["fresh"] = Feed({"a": "1"})
    deps.config.add_connector(gw, _config("fresh"))
    deps.connector_scheduler.schedule(gw, "fresh", MINUTE)
    # Then the first tick of the poll loop polls it, and its schedule stays
    loop = LocalConnectorScheduler(
        lambda: deps.config, (gw,), lambda e: poll_registered(deps, e["gateway"], e["connector"]), clock=lambda: 0.0
    )
    assert loop.run_due() == 1 and loop.failures == 0
    assert FEEDS["fresh"].polls == 1
    assert deps.positions is not None and deps.positions.read_position(gw, "fresh").version == 1
    assert deps.connector_scheduler.schedules == {(gw, "fresh"): MINUTE}


def test_a_connector_unregistered_elsewhere_is_not_polled_again(registered: GatewayDeps, gw: str) -> None:
    deps = registered
    deps.settings = GatewaySettings(gateway_ids=frozenset({gw}))
    assert deps.connectors is not None
    name = f"old{uuid.uuid4().hex[:6]}"
    FEEDS[name] = Feed({"a": "1"})
    deps.config.add_connector(gw, _config(name))
    assert poll_registered(deps, gw, name).status == "polled"
    # When another process unregisters it (this one's cached list still names it)
    assert deps.config.remove_connector(gw, name)
    # Then the next scheduled invocation finds it gone and does not read the source
    assert poll_registered(deps, gw, name).status == "gone"
    assert FEEDS[name].polls == 1
