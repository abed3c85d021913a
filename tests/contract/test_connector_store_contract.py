"""The connector ports' contracts, one suite for the in-memory and the DynamoDB adapters (moto server): connector
configs in the ConfigStore (unique names, race-safe adds, sorted listing, removal), and the ConnectorPositionStore
(a lease taken only at the stored version and when no other is live, a commit only by the lease holder at the version
it started from, release, takeover after expiry, renewal only by the holder and never both it and a racing takeover,
the leases on record per gateway, positions larger than one DynamoDB item)."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from lakesync.core.connectors import validate_connector_config
from lakesync.core.errors import AlreadyExistsError
from lakesync.gateway.memory import InMemoryConfigStore
from lakesync.ports import ConfigStore, ConnectorPositionStore


@pytest.fixture(params=["memory", "dynamodb"])
def store(request: pytest.FixtureRequest) -> ConfigStore:
    if request.param == "memory":
        return InMemoryConfigStore()
    from lakesync.aws.config_store import DynamoDBConfigStore

    return DynamoDBConfigStore(*request.getfixturevalue("module_dynamodb"))


def _config(name: str, **extra: Any) -> Any:
    return validate_connector_config(
        {"name": name, "type": "postgres", "postgres": {"connectionString": "secret://db-credentials"}, **extra}
    )


def test_connectors_are_unique_sorted_and_removable(store: ConfigStore, gw: str) -> None:
    # Given two connectors added out of order, and a clash
    store.add_connector(gw, _config("zeta"))
    store.add_connector(
        gw, _config("alpha", ingest={"tables": [{"table": "t", "query": "q", "strategy": {"type": "diff"}}]})
    )
    with pytest.raises(AlreadyExistsError, match='Connector "zeta" already exists'):
        store.add_connector(gw, _config("zeta", extra=1))
    # Then they list by name, round-trip whole, and stay per gateway
    assert [c.name for c in store.list_connectors(gw)] == ["alpha", "zeta"]
    assert store.get_connector(gw, "alpha") == _config(
        "alpha", ingest={"tables": [{"table": "t", "query": "q", "strategy": {"type": "diff"}}]}
    )
    assert store.get_connector(gw, "zeta") == _config("zeta")
    assert store.list_connectors(gw + "-other") == [] and store.get_connector(gw, "nope") is None
    # And removal says whether there was one
    assert store.remove_connector(gw, "zeta") is True
    assert store.remove_connector(gw, "zeta") is False
    assert [c.name for c in store.list_connectors(gw)] == ["alpha"]


def test_concurrent_adds_of_one_name_exactly_one_wins(store: ConfigStore, gw: str) -> None:
    barrier = threading.Barrier(6)

    def add(i: int) -> bool:
        barrier.wait()
        try:
            store.add_connector(gw, _config("same", attempt=i))
        except AlreadyExistsError:
            return False
        return True

    with ThreadPoolExecutor(6) as pool:
        won = list(pool.map(add, range(6)))
    assert won.count(True) == 1
    assert len(store.list_connectors(gw)) == 1


def test_position_lease_and_commit(positions: ConnectorPositionStore, gw: str) -> None:
    name = f"c{uuid.uuid4().hex[:6]}"
    # Given a connector never polled
    assert positions.read_position(gw, name).version == 0
    # When a poller takes the lease, a second cannot, nor at a stale version
    assert positions.acquire(gw, name, 0, "a", until_ms=2000, now_ms=1000)
    assert not positions.acquire(gw, name, 0, "b", until_ms=2000, now_ms=1500)
    held = positions.read_position(gw, name)
    assert (held.lease, held.lease_until_ms, held.version) == ("a", 2000, 0)
    # Then only the holder commits, at the version it started from, and the lease is gone after
    assert not positions.commit(gw, name, "b", 0, {"x": 1})
    assert not positions.commit(gw, name, "a", 1, {"x": 1})
    assert positions.commit(gw, name, "a", 0, {"tables": {"t": {"cursor": 5}}})
    stored = positions.read_position(gw, name)
    assert (stored.position, stored.version, stored.lease) == ({"tables": {"t": {"cursor": 5}}}, 1, None)
    # And a second commit with the same (spent) lease fails
    assert not positions.commit(gw, name, "a", 0, {"x": 2})
    # And an acquire at the old version fails, at the new one succeeds; release frees it at once
    assert not positions.acquire(gw, name, 0, "c", until_ms=9000, now_ms=3000)
    assert positions.acquire(gw, name, 1, "c", until_ms=9000, now_ms=3000)
    positions.release(gw, name, "someone-else")
    assert positions.read_position(gw, name).lease == "c"
    positions.release(gw, name, "c")
    assert positions.acquire(gw, name, 1, "d", until_ms=9000, now_ms=3000)


def test_an_expired_lease_is_taken_over_and_its_holder_cannot_commit(
    positions: ConnectorPositionStore, gw: str
) -> None:
    name = "slow"
    assert positions.acquire(gw, name, 0, "slow", until_ms=1000, now_ms=0)
    assert positions.acquire(gw, name, 0, "fast", until_ms=5000, now_ms=1000)  # expired at 1000
    assert positions.commit(gw, name, "fast", 0, {"n": 1})
    assert not positions.commit(gw, name, "slow", 0, {"n": 0})
    assert positions.read_position(gw, name).position == {"n": 1}


def test_racing_pollers_only_one_commits(positions: ConnectorPositionStore, gw: str) -> None:
    barrier = threading.Barrier(5)

    def poll(i: int) -> bool:
        barrier.wait()
        token = f"p{i}"
        if not positions.acquire(gw, "race", 0, token, until_ms=10_000, now_ms=0):
            return False
        return positions.commit(gw, "race", token, 0, {"by": i})

    with ThreadPoolExecutor(5) as pool:
        results = list(pool.map(poll, range(5)))
    assert results.count(True) == 1
    assert positions.read_position(gw, "race").version == 1


def test_large_positions_round_trip_and_are_replaced(positions: ConnectorPositionStore, gw: str) -> None:
    # Given a diff snapshot of 60,000 rows (megabytes of JSON, incompressible hashes)
    import base64
    import os

    big = {
        "tables": {
            "t": {"rows": {str(i): base64.urlsafe_b64encode(os.urandom(8)).decode()[:10] for i in range(60_000)}}
        }
    }
    assert positions.acquire(gw, "big", 0, "a", until_ms=10, now_ms=0)
    assert positions.commit(gw, "big", "a", 0, big)
    assert positions.read_position(gw, "big").position == big
    # When a smaller one replaces it, and then the connector is forgotten
    assert positions.acquire(gw, "big", 1, "b", until_ms=10, now_ms=0)
    assert positions.commit(gw, "big", "b", 1, {"small": True})
    assert positions.read_position(gw, "big").position == {"small": True}
    positions.delete_position(gw, "big")
    assert positions.read_position(gw, "big").version == 0


def test_renewal_extends_only_the_holders_live_lease(positions: ConnectorPositionStore, gw: str) -> None:
    # Given a lease taken for 30 s
    assert positions.acquire(gw, "feed", 0, "a", until_ms=30_000, now_ms=0)
    # When its holder renews it, the expiry moves; another token's renewal changes nothing
    assert positions.renew(gw, "feed", "a", 50_000)
    assert not positions.renew(gw, "feed", "b", 90_000)
    held = positions.read_position(gw, "feed")
    assert (held.lease, held.lease_until_ms) == ("a", 50_000)
    # Then a second poller is kept out past the first expiry, and the holder commits
    assert not positions.acquire(gw, "feed", 0, "b", until_ms=70_000, now_ms=40_000)
    assert positions.commit(gw, "feed", "a", 0, {"n": 1})
    # And a renewal after the commit (a late heartbeat) neither fails loudly nor brings the lease back
    assert not positions.renew(gw, "feed", "a", 99_000)
    assert positions.read_position(gw, "feed").lease is None
    assert not positions.renew(gw, "never-polled", "a", 99_000)


def test_a_renewal_racing_a_takeover_loses_once_the_token_is_replaced(
    positions: ConnectorPositionStore, gw: str
) -> None:
    # Given a lease that expired at 1000 (its holder stalled) and a second poller taking it over
    assert positions.acquire(gw, "feed", 0, "stalled", until_ms=1000, now_ms=0)
    assert positions.acquire(gw, "feed", 0, "fresh", until_ms=31_000, now_ms=1000)
    # When the stalled holder's heartbeat arrives, it is refused and the new lease is untouched
    assert not positions.renew(gw, "feed", "stalled", 61_000)
    held = positions.read_position(gw, "feed")
    assert (held.lease, held.lease_until_ms) == ("fresh", 31_000)
    assert not positions.commit(gw, "feed", "stalled", 0, {"n": 0})


def test_racing_renewal_and_takeover_never_both_win(positions: ConnectorPositionStore, gw: str) -> None:
    # Given leases that expired at 1000, each raced by its holder's heartbeat and a taker
    names = [f"r{i}" for i in range(8)]
    for name in names:
        assert positions.acquire(gw, name, 0, "old", until_ms=1000, now_ms=0)
    barrier = threading.Barrier(2)

    def renew(name: str) -> bool:
        barrier.wait()
        return positions.renew(gw, name, "old", 61_000)

    def take(name: str) -> bool:
        barrier.wait()
        return positions.acquire(gw, name, 0, "new", until_ms=31_000, now_ms=1000)

    for name in names:
        with ThreadPoolExecutor(2) as pool:
            renewed, taken = pool.submit(renew, name), pool.submit(take, name)
            won = (renewed.result(), taken.result())
        # Then exactly one of them holds the connector, and the record says which
        assert won in {(True, False), (False, True)}
        held = positions.read_position(gw, name)
        assert (held.lease, held.lease_until_ms) == (("old", 61_000) if won[0] else ("new", 31_000))


def test_leases_on_record_are_listed_per_gateway(positions: ConnectorPositionStore, gw: str) -> None:
    # Given a live lease, an expired one, a committed poll and a released one, and a lease on another gateway
    assert positions.acquire(gw, "live", 0, "t1", until_ms=10**13, now_ms=0)
    assert positions.acquire(gw, "expired", 0, "t2", until_ms=1, now_ms=0)
    assert positions.acquire(gw, "done", 0, "t3", until_ms=10**13, now_ms=0)
    assert positions.commit(gw, "done", "t3", 0, {"n": 1})
    assert positions.acquire(gw, "freed", 0, "t4", until_ms=10**13, now_ms=0)
    positions.release(gw, "freed", "t4")
    assert positions.acquire(gw + "-other", "elsewhere", 0, "t5", until_ms=10**13, now_ms=0)
    # Then the leases on record are the live and the expired one, with their tokens
    assert positions.leases(gw) == {"live": "t1", "expired": "t2"}
    assert positions.leases(gw + "-empty") == {}
