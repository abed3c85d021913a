"""The local store against a buggy or hostile gateway (a real HTTP server answering what each test scripts): what it
answers never costs an unacknowledged outbox entry, never moves the cursor past what was applied, and surfaces as the
store's documented errors."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.client import LocalStore, SyncStateError, connect
from lakesync.client.http import ApiError
from tests.client.conftest import todo_schema
from tests.client.hostile import Answer, ScriptedGateway, empty_pull, good_push, json_answer, sent_delta_ids

pytestmark = pytest.mark.integration

_names = itertools.count()
TABLE = "todos"


@pytest.fixture
def gateway() -> Iterator[ScriptedGateway]:
    with ScriptedGateway() as running:
        yield running


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., LocalStore]]:
    """``open_store(gateway)`` → a store of client ``c`` on a file of its own, synced with ``gateway``."""
    opened: list[LocalStore] = []

    def make(gateway: ScriptedGateway, **options: Any) -> LocalStore:
        store = connect(
            options.pop("path", tmp_path / f"s{next(_names)}.db"),
            url=gateway.url,
            gateway="default",
            token=mint_token("c", "default", "s" * 32),
            schemas=[todo_schema(TABLE)],
            realtime=False,
            **options,
        )
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def test_a_redirect_is_not_followed_so_the_token_and_the_push_stay_with_the_gateway(
    gateway: ScriptedGateway, open_store: Callable[..., LocalStore]
) -> None:
    with ScriptedGateway() as elsewhere:
        elsewhere.routes["push"] = lambda _seen: json_answer({"serverHlc": "1", "accepted": 0, "receipts": []})
        elsewhere.routes["pull"] = empty_pull
        # Given a gateway that redirects its push and pull routes to another host
        gateway.routes["push"] = lambda _seen: Answer(302, headers={"Location": elsewhere.url + "/v1/sync/x/push"})
        gateway.routes["pull"] = lambda _seen: Answer(301, headers={"Location": elsewhere.url + "/v1/sync/x/pull"})
        store = open_store(gateway)
        store.insert(TABLE, "r1", {"title": "keep me"})

        # When the store syncs
        with pytest.raises(ApiError) as raised:
            store.sync()
        assert raised.value.status == 302
        with pytest.raises(ApiError) as raised:
            store.http.pull(cursor="")

        # Then the other host saw nothing (neither the token nor a body-less re-send of the push) and nothing was lost
        assert raised.value.status == 301
        assert elsewhere.seen == []
        assert store.pending() == 1


def _receipts(ids: list[str], **receipt: Any) -> dict[str, Any]:
    return {"serverHlc": "1", "accepted": len(ids), "receipts": [{"deltaId": i, **receipt} for i in ids]}


PUSH_ANSWERS: dict[str, Callable[[list[str]], Any]] = {
    "an error body with 200": lambda _ids: {"error": "Internal error", "code": "INTERNAL_ERROR"},
    "an empty object": lambda _ids: {},
    "a list": lambda _ids: [],
    "null": lambda _ids: None,
    "receipts for fewer deltas": lambda ids: _receipts(ids[:-1], duplicate=False, columns=[]),
    "receipts for other deltas": lambda ids: _receipts([i[::-1] for i in ids], duplicate=False, columns=[]),
    "receipts out of order": lambda ids: _receipts(ids[::-1], duplicate=False, columns=[]),
    "receipts that are not objects": lambda ids: {"serverHlc": "1", "accepted": len(ids), "receipts": ids},
    "a column receipt without its winner": lambda ids: _receipts(ids, duplicate=False, columns=[{"column": "title"}]),
    "accepted not a count": lambda ids: {**_receipts(ids, duplicate=False, columns=[]), "accepted": "all"},
}


@pytest.mark.parametrize("answer", list(PUSH_ANSWERS), ids=list(PUSH_ANSWERS))
def test_a_push_answer_that_is_not_its_receipts_acknowledges_nothing(
    gateway: ScriptedGateway, open_store: Callable[..., LocalStore], answer: str
) -> None:
    # Given two local writes and a gateway answering their push with something else than their receipts
    gateway.routes["pull"] = empty_pull
    gateway.routes["push"] = lambda seen: json_answer(PUSH_ANSWERS[answer](sent_delta_ids(seen)))
    store = open_store(gateway)
    store.insert(TABLE, "r1", {"title": "one"})
    store.update(TABLE, "r1", {"done": True})

    # When the store syncs, it says so and keeps both writes
    with pytest.raises(SyncStateError):
        store.sync()
    assert store.pending() == 2
    first = sent_delta_ids(gateway.sent("push")[0])

    # Then once the gateway answers properly, the same deltas are pushed and acknowledged
    gateway.routes["push"] = good_push
    report = store.sync()
    assert (report.pushed, store.pending()) == (2, 0)
    assert sent_delta_ids(gateway.sent("push")[-1]) == first
