"""The original client's model (tests/original_client.py) over real HTTP against ``lakesync local`` (the real handlers,
DynamoDB on the moto server, since sessions included): several original clients and cursor clients write and sync
concurrently on threads, then settle; every original client converges to the server's rows and none ever failed to
apply a page."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.client.http import ApiError, SyncClient
from lakesync.core.delta import RowDelta, make_delta
from lakesync.core.hlc import HLC, system_clock
from lakesync.core.merge import fold
from lakesync.local.runner import LocalStack
from tests.original_client import OriginalClient

pytestmark = pytest.mark.integration

TABLES = {"todos": ["title", "done"]}
ROWS = [f"r{i}" for i in range(6)]


class HttpTransport:
    """The original client's transport: JSON push, ``since`` pull, the checkpoint route."""

    def __init__(self, api: SyncClient) -> None:
        self.api = api

    def push(self, client_id: str, deltas: list[RowDelta], last_seen: int) -> dict[str, Any] | None:
        try:
            return self.api.push(deltas, last_seen)  # type: ignore[no-any-return]
        except ApiError:
            return None

    def pull(self, client_id: str, since: int, limit: int) -> dict[str, Any] | None:
        try:
            return self.api.pull(since=since, limit=limit)  # type: ignore[no-any-return]
        except ApiError:
            return None

    def checkpoint(self) -> tuple[list[RowDelta], int] | None:
        deltas, _cursor = self.api.checkpoint()
        return None if not deltas else (deltas, 0)


def api(stack: LocalStack, name: str) -> SyncClient:
    return SyncClient(stack.url, "default", mint_token(name, "default", stack.secret), name)


def server_rows(stack: LocalStack) -> dict[str, dict[str, Any]]:
    deltas, _ = api(stack, "observer").pull_all()
    by_row: dict[str, list[RowDelta]] = {}
    for delta in deltas:
        by_row.setdefault(delta.row_id, []).append(delta)
    out = {}
    for row_id, row in by_row.items():
        state = fold(row)
        values = None if state is None else state.values()
        if values is not None:
            out[row_id] = {k: v for k, v in values.items() if v is not None}
    return out


def _run_original(client: OriginalClient, seed: int, errors: list[BaseException]) -> None:
    """25 random writes of an original client, syncing now and then."""
    rnd = random.Random(seed)
    try:
        for _ in range(25):
            row = rnd.choice(ROWS)
            if client.holds("todos", row):
                if rnd.random() < 0.2:
                    client.delete("todos", row)
                else:
                    client.update("todos", row, {rnd.choice(["title", "done"]): rnd.randrange(100)})
            else:
                client.insert("todos", row, {"title": rnd.randrange(100)})
            if rnd.random() < 0.5:
                client.sync_once()
    except BaseException as exc:  # surfaced below
        errors.append(exc)


def _run_cursor(client: SyncClient, seed: int, errors: list[BaseException]) -> None:
    """15 random pushes of a cursor client, each followed by a pull."""
    rnd, clock, cursor = random.Random(seed), HLC(), None
    try:
        for _ in range(15):
            row = rnd.choice(ROWS)
            op = "DELETE" if rnd.random() < 0.15 else "UPDATE"
            cols = {} if op == "DELETE" else {rnd.choice(["title", "done"]): rnd.randrange(100)}
            client.push(
                [make_delta(op, table="todos", row_id=row, client_id=client.client_id, hlc=clock.now(), columns=cols)]
            )
            _, cursor = client.pull_all(cursor)
    except BaseException as exc:
        errors.append(exc)


def test_original_clients_beside_cursor_clients_converge_over_http(tmp_path: Path) -> None:
    with LocalStack(tmp_path, port=0, persist=False) as stack:
        originals = [
            OriginalClient(f"orig{i}", HttpTransport(api(stack, f"orig{i}")), TABLES, lambda s=skew: system_clock() + s)
            for i, skew in enumerate([-700, 0, 700])
        ]
        cursors = [api(stack, f"cur{i}") for i in range(2)]
        for client in originals:
            client.sync_once()
        errors: list[BaseException] = []

        threads = [threading.Thread(target=_run_original, args=(c, i, errors)) for i, c in enumerate(originals)]
        threads += [threading.Thread(target=_run_cursor, args=(c, 10 + i, errors)) for i, c in enumerate(cursors)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []

        # When everyone settles: syncs until nothing is left to push, then pulls once more
        for _ in range(6):
            for client in originals:
                client.sync_once()
            if not any(c.queue for c in originals):
                break
        for client in originals:
            client.sync_once()

        # Then every original client holds the server's rows, and none ever failed to apply a page
        server = server_rows(stack)
        for client in originals:
            assert client.rows("todos") == server, client.client_id
            assert client.apply_failures == 0, client.client_id
            assert client.queue == []
