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
from lakesync.client import LocalStore, connect
from lakesync.client.http import ApiError
from tests.client.conftest import todo_schema
from tests.client.hostile import Answer, ScriptedGateway, empty_pull, json_answer

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
