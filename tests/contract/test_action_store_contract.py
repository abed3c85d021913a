"""The ActionStore contract (lakesync.ports.ActionStore), one suite for the in-memory and the DynamoDB adapter (on
the moto server): claims are exclusive until released, finalised or expired; final records are stored under every
key and read back exactly; expiry is ``expires_at <= now``; records are per gateway and per client, and no client id
can reach another client's keys."""

from __future__ import annotations

from typing import Any

import pytest

from lakesync.gateway.memory import InMemoryActionStore
from lakesync.ports import ActionStore

NOW = 1_700_000_000
C1 = "client-1"


@pytest.fixture(params=["memory", "dynamodb"])
def store(request: pytest.FixtureRequest) -> ActionStore:
    if request.param == "memory":
        return InMemoryActionStore()
    from lakesync.aws.action_store import DynamoDBActionStore

    return DynamoDBActionStore(*request.getfixturevalue("module_dynamodb"))


RECORD: dict[str, Any] = {
    "status": "done",
    "result": {
        "actionId": "a1",
        "data": {"id": 2**63, "ratio": 0.1, "name": "ü😀\ud800", "tags": [], "nested": {"x": [None, True]}},
        "serverHlc": "111411200000000000",
    },
}


def test_action_claim_is_exclusive_until_released(store: ActionStore, gw: str) -> None:
    assert store.get(gw, C1, ["a1"], NOW) == {}
    assert store.claim(gw, C1, "a1", NOW + 60, NOW)
    assert not store.claim(gw, C1, "a1", NOW + 60, NOW)
    assert store.get(gw, C1, ["a1", "a2"], NOW) == {"a1": {"status": "pending"}}

    store.release(gw, C1, "a1")

    assert store.get(gw, C1, ["a1"], NOW) == {}
    assert store.claim(gw, C1, "a1", NOW + 60, NOW)


def test_action_put_stores_the_record_under_every_key_exactly(store: ActionStore, gw: str) -> None:
    assert store.claim(gw, C1, "a1", NOW + 60, NOW)
    store.put(gw, C1, ["a1", "idem:k"], RECORD, NOW + 60)
    assert store.get(gw, C1, ["a1", "idem:k", "other"], NOW) == {"a1": RECORD, "idem:k": RECORD}
    # A finished action cannot be claimed again while its record lives
    assert not store.claim(gw, C1, "a1", NOW + 120, NOW + 30)
    assert not store.claim(gw, C1, "idem:k", NOW + 120, NOW + 30)


def test_action_records_expire_at_their_expiry_time(store: ActionStore, gw: str) -> None:
    store.put(gw, C1, ["done"], RECORD, NOW + 10)
    assert store.claim(gw, C1, "pending", NOW + 10, NOW)

    assert store.get(gw, C1, ["done", "pending"], NOW + 9) == {"done": RECORD, "pending": {"status": "pending"}}
    assert not store.claim(gw, C1, "pending", NOW + 20, NOW + 9)

    assert store.get(gw, C1, ["done", "pending"], NOW + 10) == {}
    assert store.claim(gw, C1, "pending", NOW + 20, NOW + 10)
    assert store.claim(gw, C1, "done", NOW + 20, NOW + 11)
    assert store.get(gw, C1, ["done", "pending"], NOW + 11) == {
        "done": {"status": "pending"},
        "pending": {"status": "pending"},
    }


def test_action_release_of_an_unknown_key_is_harmless(store: ActionStore, gw: str) -> None:
    store.release(gw, C1, "never-claimed")
    assert store.get(gw, C1, ["never-claimed"], NOW) == {}


def test_action_records_are_per_gateway(store: ActionStore, gw: str) -> None:
    store.put(gw, C1, ["a1"], RECORD, NOW + 60)
    assert store.get(gw + "-other", C1, ["a1"], NOW) == {}
    assert store.claim(gw + "-other", C1, "a1", NOW + 60, NOW)
    assert store.get(gw, C1, ["a1"], NOW) == {"a1": RECORD}


def test_action_get_with_repeated_and_no_keys(store: ActionStore, gw: str) -> None:
    store.put(gw, C1, ["a1"], RECORD, NOW + 60)
    assert store.get(gw, C1, [], NOW) == {}
    assert store.get(gw, C1, ["a1", "a1"], NOW) == {"a1": RECORD}


def test_action_records_are_per_client(store: ActionStore, gw: str) -> None:
    # Given client-1's finished action and its in-progress idempotency key
    store.put(gw, C1, ["a1"], RECORD, NOW + 60)
    assert store.claim(gw, C1, "idem:k", NOW + 60, NOW)
    # Then another client sees neither, may claim both keys for itself, and its release frees nothing of client-1's
    assert store.get(gw, "client-2", ["a1", "idem:k"], NOW) == {}
    assert store.claim(gw, "client-2", "a1", NOW + 60, NOW)
    assert store.claim(gw, "client-2", "idem:k", NOW + 60, NOW)
    store.release(gw, "client-2", "idem:k")
    assert store.get(gw, C1, ["a1", "idem:k"], NOW) == {"a1": RECORD, "idem:k": {"status": "pending"}}
    assert not store.claim(gw, C1, "idem:k", NOW + 60, NOW)


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        # a "#" in a client id must not let one (client, key) pair spell another's stored key
        (("a#b", "c"), ("a", "b#c")),
        (("a%23b", "c"), ("a#b", "c")),
        (("a%", "25#x"), ("a%25", "x")),
    ],
)
def test_action_client_ids_with_separators_do_not_collide(
    store: ActionStore, gw: str, ours: tuple[str, str], theirs: tuple[str, str]
) -> None:
    store.put(gw, ours[0], [ours[1]], RECORD, NOW + 60)
    assert store.get(gw, theirs[0], [theirs[1]], NOW) == {}
    assert store.claim(gw, theirs[0], theirs[1], NOW + 60, NOW)
    assert store.get(gw, ours[0], [ours[1]], NOW) == {ours[1]: RECORD}
