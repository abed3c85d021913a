"""Fixtures of the client SDK tests: the embedded default (one per module), stores on it, schemas."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.client import LocalStore, connect
from lakesync.client.http import SyncClient
from lakesync.core.merge import RowState, merge
from lakesync.local.runner import LocalStack
from tests.factories import todo_schema

_counter = itertools.count()


def unique_table(prefix: str = "todos") -> str:
    """A table name no other test of the module uses (the stack is shared)."""
    return f"{prefix}_{next(_counter)}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(Path(tmp_path_factory.mktemp("local")), port=0, persist=False) as running:
        yield running


def admin(stack: LocalStack) -> SyncClient:
    return SyncClient(stack.url, "default", mint_token("ops", "default", stack.secret, role="admin"), "ops")


@pytest.fixture
def open_store(stack: LocalStack, tmp_path: Path) -> Iterator[Callable[..., LocalStore]]:
    """``open_store(name, table)`` → a store of client ``name`` on ``tmp_path/name.db``; all closed at the end."""
    opened: list[LocalStore] = []

    def make(name: str, *tables: str, **options: Any) -> LocalStore:
        options.setdefault("realtime", False)
        store = connect(
            options.pop("path", tmp_path / f"{name}.db"),
            url=options.pop("url", stack.url),
            gateway="default",
            token=options.pop("token", None)
            or (None if "get_token" in options else mint_token(name, "default", stack.secret)),
            schemas=options.pop("schemas", None) or [todo_schema(t) for t in tables],
            **options,
        )
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def gateway_rows(stack: LocalStack, table: str) -> dict[str, dict[str, Any]]:
    """The table as a fresh cursor pull from scratch, folded with core.merge: the gateway's truth."""
    deltas, _ = admin(stack).pull_all()
    states: dict[str, RowState] = {}
    for delta in deltas:
        if delta.table == table:
            states[delta.row_id] = merge(states.get(delta.row_id), delta).state
    return {row_id: values for row_id, state in states.items() if (values := state.values()) is not None}


def full_rows(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Rows with every schema column present (absent = NULL), as the local user tables hold them."""
    columns = ("title", "done", "priority", "tags")
    return {row_id: {c: values.get(c) for c in columns} for row_id, values in rows.items()}
