"""A model test of the store: random local operations on three stores, interleaved with random syncs; then every
store syncs to quiescence and all equal each other, the gateway's rows (a pull from scratch folded with core.merge)
and the model of what survives."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakesync.auth import mint_token
from lakesync.client import LocalStore, connect
from lakesync.core.merge import RowState, merge
from lakesync.local.runner import LocalStack
from tests.client.conftest import admin, full_rows
from tests.factories import todo_schema

pytestmark = pytest.mark.integration

CLIENTS = ("m0", "m1", "m2")
ROWS = ("a", "b", "c")

values = st.fixed_dictionaries(
    {},
    optional={
        "title": st.text(max_size=4),
        "done": st.booleans(),
        "priority": st.integers(-3, 3) | st.floats(-2, 2, allow_nan=False),
        "tags": st.none() | st.lists(st.integers(0, 3), max_size=2),
    },
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 2), st.sampled_from(ROWS), values),
        st.tuples(st.just("delete"), st.integers(0, 2), st.sampled_from(ROWS), st.none()),
        st.tuples(st.just("sync"), st.integers(0, 2), st.none(), st.none()),
    ),
    min_size=1,
    max_size=14,
)


TABLE = "model"


class _Gateway:
    """The gateway's rows: a cursor pull folded with core.merge, kept across examples (each pulls only the new)."""

    def __init__(self, stack: LocalStack) -> None:
        self.api = admin(stack)
        self.cursor: str | None = None
        self.states: dict[str, RowState] = {}

    def rows(self, prefix: str) -> dict[str, dict[str, Any]]:
        deltas, self.cursor = self.api.pull_all(self.cursor)
        for delta in deltas:
            if delta.table == TABLE:
                self.states[delta.row_id] = merge(self.states.get(delta.row_id), delta).state
        return {
            row_id: values
            for row_id, state in self.states.items()
            if row_id.startswith(prefix) and (values := state.values()) is not None
        }


@pytest.fixture(scope="module")
def world(stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[LocalStore], _Gateway]]:
    """Three stores and the gateway mirror, shared by the examples (each example uses rows of its own)."""
    tmp = tmp_path_factory.mktemp("model")
    stores = [
        connect(
            tmp / f"{name}.db",
            url=stack.url,
            gateway="default",
            token=mint_token(name, "default", stack.secret),
            schemas=[todo_schema(TABLE)],
            realtime=False,
        )
        for name in CLIENTS
    ]
    yield stores, _Gateway(stack)
    for store in stores:
        store.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=steps)
def test_random_operations_and_syncs_converge_everywhere(
    world: tuple[list[LocalStore], _Gateway], script: list[tuple[Any, ...]]
) -> None:
    stores, gateway = world
    prefix = f"{next(_examples)}-"
    for action, who, row, vals in script:
        store = stores[who]
        row_id = None if row is None else prefix + row
        live = row_id is not None and store.get(TABLE, row_id) is not None
        if action == "write" and live:
            store.update(TABLE, row_id, vals)
        elif action == "write":
            store.insert(TABLE, row_id, vals)
        elif action == "delete" and live:
            store.delete(TABLE, row_id)
        elif action == "sync":
            store.sync()
    _quiesce(stores)
    expected = full_rows(gateway.rows(prefix))
    for store in stores:
        assert {k: v for k, v in store.rows(TABLE).items() if k.startswith(prefix)} == expected
        assert store.pending() == 0


_examples = itertools.count()


def _quiesce(stores: list[LocalStore]) -> None:
    """Sync every store until a whole round pushes and pulls nothing new (two rounds suffice: push all, pull all)."""
    for _ in range(3):
        reports = [store.sync() for store in stores]
        if all(r.pushed == 0 and not r.changed for r in reports):
            return
    raise AssertionError("the stores did not quiesce")
