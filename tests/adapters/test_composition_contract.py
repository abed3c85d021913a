"""The destination contract of tests/sql, run against Composite, FanOut and Lifecycle over SQLite, PostgreSQL and
MariaDB: a composed destination's rows equal the per-column LWW fold, like a SQL destination's.

Every composition wraps the database the contract inspects (``db``) plus a second database of the same kind:

* ``composite``: the test's table routed to ``db``, another table to the second database, the default ``db``;
* ``fanout``: primary ``db``, the second database a secondary;
* ``lifecycle``: hot ``db``, cold the second database, nothing old yet (rows stay hot);
* ``lifecycle_swept``: hot the second database, cold ``db``, and every apply followed by a sweep that moves
  everything to cold -- each row crosses tiers on every write, so the contract checks promotion and the move.

The SQL-only tests (dialect quoting) are not repeated. The external-id clash is not run swept: a unique constraint
holds per tier (docs/adapters.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from lakesync.adapters import (
    CompositeDestination,
    FanOutDestination,
    LifecycleDestination,
    SqlStateDestination,
)
from lakesync.core.delta import RowDelta
from lakesync.core.errors import DestinationError
from lakesync.core.schema import TableSchema
from lakesync.ports import ApplyStats, Destination
from lakesync.sql import SqlDestination, connect
from lakesync.sql.dialect import STATE_TABLE, Statement
from tests.sql import test_destination_contract as contract
from tests.sql.conftest import Db

pytestmark = pytest.mark.integration

COMPOSITIONS = ("composite", "fanout", "lifecycle", "lifecycle_swept")
FAR_FUTURE_MS = 1 << 46


class SweptLifecycle:
    """A Lifecycle whose every apply is followed by a sweep of everything to cold."""

    def __init__(self, lifecycle: LifecycleDestination) -> None:
        self.lifecycle = lifecycle
        self.name = lifecycle.name

    def apply(self, schema: TableSchema, deltas: Sequence[RowDelta]) -> ApplyStats:
        stats = self.lifecycle.apply(schema, deltas)
        swept = self.lifecycle.sweep(schema, now_ms=FAR_FUTURE_MS)
        assert swept.moved == swept.examined  # nothing is left hot
        return stats

    def rows(self, schema: TableSchema) -> dict[str, dict[str, Any]]:
        return self.lifecycle.rows(schema)

    def close(self) -> None:
        self.lifecycle.close()


@pytest.fixture(params=contract.__dict__.get("KINDS", ("sqlite", "postgres", "mariadb")))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=COMPOSITIONS)
def composition(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db(kind: str, composition: str, url_of: Callable[[str, str], str]) -> Db:
    # One database per composition: the contract reuses a few fixed table names (hostile identifiers).
    return Db(kind, url_of(kind, f"adapters_{composition}"))


@pytest.fixture
def batch_sql() -> list[SqlDestination]:
    """The SQL destinations that take a batch's transaction, one per composed destination opened."""
    return []


@pytest.fixture
def make_dest(
    composition: str, kind: str, db: Db, url_of: Callable[[str, str], str], table: str, batch_sql: list[SqlDestination]
) -> Iterator[Callable[[], Destination]]:
    opened: list[Destination] = []

    def make() -> Destination:
        inner = connect(db.url, name="db")
        aux = connect(url_of(kind, f"adapters_{composition}_aux"), name="aux")
        dest: Destination
        if composition == "composite":
            dest = CompositeDestination("composite", {table: inner, "elsewhere": aux}, default=inner)
            batch_sql.append(inner)
        elif composition == "fanout":
            dest = FanOutDestination("fanout", inner, [aux])
            batch_sql.append(inner)
        elif composition == "lifecycle":
            hot, cold = SqlStateDestination(inner), SqlStateDestination(aux)
            dest = LifecycleDestination("lifecycle", hot, cold, max_age_ms=1 << 45, clock=lambda: 1_000)
            batch_sql.append(inner)
        else:
            hot, cold = SqlStateDestination(aux), SqlStateDestination(inner)
            dest = SweptLifecycle(LifecycleDestination("swept", hot, cold, max_age_ms=0))
            batch_sql.append(aux)
        opened.append(dest)
        return dest

    yield make
    for dest in opened:
        dest.close()


@pytest.fixture
def dest(make_dest: Callable[[], Destination]) -> Destination:
    return make_dest()


def _reexport(name: str, compositions: Sequence[str]) -> Callable[..., Any]:
    original = getattr(contract, name)

    @functools.wraps(original)
    def run(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    return pytest.mark.parametrize("composition", compositions, indirect=True)(run)


_SQL_ONLY = {"test_identifiers_are_quoted_anyway", "test_a_failing_batch_writes_nothing"}
_PER_TIER = {"test_external_id_column_is_the_conflict_target"}

CONTRACT_TESTS = sorted(n for n in vars(contract) if n.startswith("test_") and n not in _SQL_ONLY)
for _name in CONTRACT_TESTS:
    _comps = [c for c in COMPOSITIONS if not (c == "lifecycle_swept" and _name in _PER_TIER)]
    globals()[_name] = _reexport(_name, _comps)


def test_the_contract_is_all_here() -> None:
    # A test added to the SQL contract runs here too (or is listed above as SQL-only, with a reason).
    assert len(CONTRACT_TESTS) + len(_SQL_ONLY) == len([n for n in vars(contract) if n.startswith("test_")])
    assert len(CONTRACT_TESTS) >= 18


def test_a_failing_batch_writes_nothing(
    dest: Destination, db: Db, table: str, batch_sql: list[SqlDestination], monkeypatch: pytest.MonkeyPatch
) -> None:
    ins, upd, dele, H = contract.ins, contract.upd, contract.dele, contract.H
    schema = contract.schema_of(table)
    empty = contract.EMPTY
    dest.apply(schema, [ins(table, "r1", H(1), title="keep"), ins(table, "r2", H(1), title="doomed")])
    states_before = db.query(f"SELECT row_id, state FROM {STATE_TABLE} WHERE tbl = %s ORDER BY row_id", table)

    def broken_delete(layout: Any, row_ids: Any) -> list[Statement]:
        return [Statement("SELECT no_such_column FROM no_such_table")]

    monkeypatch.setattr(batch_sql[-1].dialect, "delete_rows", broken_delete)
    with pytest.raises(DestinationError) as err:
        dest.apply(
            schema,
            [upd(table, "r1", H(2), title="changed"), ins(table, "r3", H(2), title="new"), dele(table, "r2", H(2))],
        )
    assert err.value.retryable is False
    monkeypatch.undo()
    assert dest.rows(schema) == {"r1": {**empty, "title": "keep"}, "r2": {**empty, "title": "doomed"}}
    assert db.query(f"SELECT row_id, state FROM {STATE_TABLE} WHERE tbl = %s ORDER BY row_id", table) == states_before
    dest.apply(schema, [upd(table, "r1", H(2), title="changed"), dele(table, "r2", H(2))])
    assert dest.rows(schema) == {"r1": {**empty, "title": "changed"}}
