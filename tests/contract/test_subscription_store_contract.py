"""One behaviour suite for the subscription stores: in memory and on DynamoDB (moto server)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lakesync.aws.subscription_store import DynamoDBSubscriptionStore, subscriptions_key
from lakesync.core.filters import Clause, Condition, FilterOp
from lakesync.core.scope import Scope, held_scope
from lakesync.core.streams import MAX_CLIENT_SUBSCRIPTIONS, Subscription
from lakesync.gateway.memory import InMemorySubscriptions
from lakesync.ports import MAX_SERVED_SCOPES, SubscriptionStore

NOW = 1_700_000_000_000
LATER = NOW + 3_600_000


@pytest.fixture(params=["memory", "dynamodb"])
def store(request: pytest.FixtureRequest) -> SubscriptionStore:
    if request.param == "memory":
        return InMemorySubscriptions()
    client, names = request.getfixturevalue("dynamodb_client"), request.getfixturevalue("dynamodb_tables")
    return DynamoDBSubscriptionStore(client, names)


def sub(stream: str = "tasks", expires_at: int = LATER, **params: str) -> Subscription:
    return Subscription.of(stream, params, expires_at)


def test_a_client_without_subscriptions_has_none(store: SubscriptionStore) -> None:
    assert store.get("gw", "c1", NOW) == []


def test_put_subscriptions_are_listed_sorted_with_their_expiry_per_gateway_and_client(store: SubscriptionStore) -> None:
    assert store.put("gw", "c1", sub("tasks", project="b"), NOW, 64)
    assert store.put("gw", "c1", sub("notes", expires_at=LATER + 1), NOW, 64)
    assert store.put("gw", "c1", sub("tasks", project="a", kind="é😀"), NOW, 64)
    got = store.get("gw", "c1", NOW)
    assert got == [sub("notes"), sub("tasks", kind="é😀", project="a"), sub("tasks", project="b")]
    assert [s.expires_at for s in got] == [LATER + 1, LATER, LATER]
    assert got[1].param_map == {"kind": "é😀", "project": "a"}
    # And subscriptions are per gateway and client
    assert store.get("gw", "c2", NOW) == [] and store.get("other", "c1", NOW) == []


def test_putting_the_same_stream_and_params_again_refreshes_its_expiry(store: SubscriptionStore) -> None:
    assert store.put("gw", "c1", sub(project="a"), NOW, 64)
    assert store.put("gw", "c1", sub(project="a", expires_at=LATER + 5_000), NOW + 1, 64)
    (got,) = store.get("gw", "c1", NOW + 1)
    assert got == sub(project="a") and got.expires_at == LATER + 5_000


def test_expired_subscriptions_are_not_listed_do_not_count_and_are_dropped(store: SubscriptionStore) -> None:
    assert store.put("gw", "c1", sub("soon", expires_at=NOW + 10), NOW, 2)
    assert store.put("gw", "c1", sub("late"), NOW, 2)
    assert [s.stream for s in store.get("gw", "c1", NOW + 9)] == ["late", "soon"]
    # Once run out (expiry <= now) it is gone from the list and from the bound
    assert [s.stream for s in store.get("gw", "c1", NOW + 10)] == ["late"]
    assert store.put("gw", "c1", sub("third"), NOW + 10, 2)
    assert [s.stream for s in store.get("gw", "c1", NOW + 10)] == ["late", "third"]
    # and it was dropped by that write: even read as of before its expiry, it is not there any more
    assert [s.stream for s in store.get("gw", "c1", NOW)] == ["late", "third"]
    # An expired one cannot be removed either
    assert store.put("gw", "c2", sub("soon", expires_at=NOW + 10), NOW, 2)
    assert not store.remove("gw", "c2", sub("soon"), NOW + 10)


def test_the_bound_refuses_one_more_but_admits_a_refresh_and_a_put_after_a_remove(store: SubscriptionStore) -> None:
    for i in range(3):
        assert store.put("gw", "c1", sub(project=str(i)), NOW, 3)
    assert not store.put("gw", "c1", sub(project="3"), NOW, 3)
    assert len(store.get("gw", "c1", NOW)) == 3
    # refreshing one held is not one more
    assert store.put("gw", "c1", sub(project="1", expires_at=LATER + 1), NOW, 3)
    assert store.remove("gw", "c1", sub(project="0"), NOW)
    assert store.put("gw", "c1", sub(project="3"), NOW, 3)
    assert [s.param_map["project"] for s in store.get("gw", "c1", NOW)] == ["1", "2", "3"]
    # other clients have their own bound
    assert store.put("gw", "c2", sub(project="9"), NOW, 3)


def test_the_engines_bound_holds(store: SubscriptionStore) -> None:
    for i in range(MAX_CLIENT_SUBSCRIPTIONS):
        assert store.put("gw", "c1", sub(project=f"{i:03d}" + "x" * 250), NOW, MAX_CLIENT_SUBSCRIPTIONS)
    assert not store.put("gw", "c1", sub(project="one more"), NOW, MAX_CLIENT_SUBSCRIPTIONS)
    assert len(store.get("gw", "c1", NOW)) == MAX_CLIENT_SUBSCRIPTIONS


def test_remove_takes_only_the_equal_subscription_and_says_whether_there_was_one(store: SubscriptionStore) -> None:
    assert store.put("gw", "c1", sub(project="a"), NOW, 64)
    assert store.put("gw", "c1", sub(project="b"), NOW, 64)
    assert not store.remove("gw", "c1", sub(project="c"), NOW)
    assert not store.remove("gw", "c2", sub(project="a"), NOW)  # another client's is not mine
    assert store.remove("gw", "c1", sub(project="a", expires_at=1), NOW)  # the expiry does not identify it
    assert store.get("gw", "c1", NOW) == [sub(project="b")]
    assert not store.remove("gw", "c1", sub(project="a"), NOW)
    assert store.remove("gw", "c1", sub(project="b"), NOW)
    assert store.get("gw", "c1", NOW) == []


def test_concurrent_puts_at_the_bound_store_exactly_one(store: SubscriptionStore) -> None:
    # Given a client one below its bound
    for i in range(3):
        assert store.put("gw", "c1", sub(project=str(i)), NOW, 4)
    # When eight requests each put a different subscription at once
    results: dict[int, bool] = {}
    barrier = threading.Barrier(8)

    def put(i: int) -> None:
        barrier.wait()
        results[i] = store.put("gw", "c1", sub(project=f"new{i}"), NOW, 4)

    threads = [threading.Thread(target=put, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then exactly one was stored, and the client holds exactly its bound
    assert sorted(results.values()) == [False] * 7 + [True]
    held = store.get("gw", "c1", NOW)
    (winner,) = [i for i, ok in results.items() if ok]
    assert len(held) == 4 and sub(project=f"new{winner}") in held


def test_dynamodb_subscriptions_live_under_a_key_no_delta_id_record_can_take_with_the_items_ttl(
    dynamodb_client: Any, dynamodb_tables: Any
) -> None:
    store = DynamoDBSubscriptionStore(dynamodb_client, dynamodb_tables)
    assert store.put("gw", "c1", sub("a", expires_at=NOW + 1_500), NOW, 64)
    assert store.put("gw", "c1", sub("b", expires_at=NOW + 900), NOW, 64)
    key = {"pk": {"S": subscriptions_key("gw", "c1")}}
    item = dynamodb_client.get_item(TableName=dynamodb_tables.dedup, Key=key)["Item"]
    # the TTL is the last expiry, in seconds rounded up: the item goes once every subscription has run out
    assert item["pk"]["S"].startswith("~") and item["exp"]["N"] == str(-(-(NOW + 1_500) // 1000))
    assert store.remove("gw", "c1", sub("a"), NOW)
    item = dynamodb_client.get_item(TableName=dynamodb_tables.dedup, Key=key)["Item"]
    assert item["exp"]["N"] == str(-(-(NOW + 900) // 1000))


def scope_of(*projects: str, hidden: tuple[str, ...] = ()) -> Scope:
    """A scope covering the tasks of ``projects`` (as the rules resolve it: canonical conditions)."""
    condition = Condition(("tasks",), (Clause("project_id", FilterOp.IN, tuple(sorted(projects))),))
    conditions = frozenset({condition.canonical()}) if projects else frozenset()
    return held_scope(Scope(conditions, frozenset(hidden)).to_json())


def test_served_scopes_are_kept_latest_last_and_told_as_they_covered(store: SubscriptionStore) -> None:
    assert store.get_served("gw", "c1") == {}
    assert store.put("gw", "c1", sub(project="a"), NOW, 64)
    a, ab = scope_of("a"), scope_of("b", "a é😀", hidden=("secrets",))
    store.put_served("gw", "c1", a)
    store.put_served("gw", "c1", ab)
    served = store.get_served("gw", "c1")
    assert list(served) == [a.fingerprint, ab.fingerprint]
    # Told as it covered: the same rows, the same hidden tables, the same fingerprint
    assert served[ab.fingerprint] == ab and served[ab.fingerprint].hidden == frozenset({"secrets"})
    assert served[ab.fingerprint].covers("tasks", {"project_id": "a é😀"})
    assert not served[a.fingerprint].covers("tasks", {"project_id": "b"})
    # The subscriptions themselves are untouched, and a subscribe does not drop the served scopes
    assert store.get("gw", "c1", NOW) == [sub(project="a")]
    assert store.put("gw", "c1", sub(project="b"), NOW, 64)
    assert list(store.get_served("gw", "c1")) == [a.fingerprint, ab.fingerprint]
    # Serving one again makes it the latest; past MAX_SERVED_SCOPES the oldest go
    store.put_served("gw", "c1", a)
    assert list(store.get_served("gw", "c1")) == [ab.fingerprint, a.fingerprint]
    many = [scope_of(f"p{i}") for i in range(MAX_SERVED_SCOPES)]
    for scope in many:
        store.put_served("gw", "c1", scope)
    assert list(store.get_served("gw", "c1")) == [s.fingerprint for s in many]
    assert store.get_served("gw", "c2") == {} and store.get_served("other", "c1") == {}


def test_a_put_of_a_served_scope_builds_on_the_kept_scopes_the_caller_read(store: SubscriptionStore) -> None:
    a, b = scope_of("a"), scope_of("b")
    store.put_served("gw", "c3", a)
    held = store.get_served("gw", "c3")
    store.put_served("gw", "c3", b, held)  # the caller's read, not a second one
    assert list(store.get_served("gw", "c3")) == [a.fingerprint, b.fingerprint]
    store.put_served("gw", "c3", a, {})  # what the caller read is what the put builds on
    assert list(store.get_served("gw", "c3")) == [a.fingerprint]
