"""The destination contract, run against SQLite, PostgreSQL and MariaDB: rows equal the per-column LWW fold."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import pytest

from lakesync.core.delta import RowDelta
from lakesync.core.errors import DestinationError
from lakesync.core.schema import ColumnSpec, ColumnType, TableSchema
from lakesync.sql import SqlDestination
from lakesync.sql.dialect import META_TABLE, STATE_TABLE, Statement
from tests import factories
from tests.factories import delete, insert, update
from tests.sql.conftest import Db

pytestmark = pytest.mark.integration

COLUMNS = {"title": "string", "done": "boolean", "n": "number", "meta": "json"}
"""The contract table's columns, one of every type but null."""

schema_of = functools.partial(factories.schema_of, columns=COLUMNS)


def H(ms: int, counter: int = 0) -> int:
    return (ms << 16) | counter


def ins(table: str, row: str, hlc: int, client: str = "a", **cols: Any) -> RowDelta:
    return insert(row, hlc=hlc, table=table, client=client, **cols)


def upd(table: str, row: str, hlc: int, client: str = "a", **cols: Any) -> RowDelta:
    return update(row, hlc=hlc, table=table, client=client, **cols)


def dele(table: str, row: str, hlc: int, client: str = "a") -> RowDelta:
    return delete(row, hlc=hlc, table=table, client=client)


EMPTY = {"title": None, "done": None, "n": None, "meta": None}


def test_create_and_upsert_writes_typed_columns(dest: SqlDestination, db: Db, table: str) -> None:
    schema = schema_of(table)
    stats = dest.apply(schema, [ins(table, "r1", H(1), title="hello", done=False, n=1.5, meta={"a": [1, None]})])
    assert (stats.deltas, stats.upserted, stats.deleted, stats.unchanged) == (1, 1, 0, 0)
    assert dest.rows(schema) == {"r1": {"title": "hello", "done": False, "n": 1.5, "meta": {"a": [1, None]}}}
    assert db.columns(table) == ["row_id", "title", "done", "n", "meta", "props", "deleted_at", "synced_at"]
    synced, deleted, props = db.query(f"SELECT synced_at, deleted_at, props FROM {db.q(table)}")[0]
    assert synced is not None and deleted is None
    assert (json.loads(props) if isinstance(props, str) else props) == {}


def test_sparse_updates_by_different_clients_merge_per_column(dest: SqlDestination, table: str) -> None:
    schema = schema_of(table)
    dest.apply(schema, [ins(table, "r", H(1), "a", title="t0", done=False, n=0)])
    dest.apply(schema, [upd(table, "r", H(3), "b", title="t-b")])
    # An older write of another column still wins its own column (true per-column LWW).
    dest.apply(schema, [upd(table, "r", H(2), "c", done=True, title="t-c-older")])
    # Same HLC: the greater client id wins the tie.
    dest.apply(schema, [upd(table, "r", H(4), "x", n=7), upd(table, "r", H(4), "y", n=8)])
    assert dest.rows(schema) == {"r": {"title": "t-b", "done": True, "n": 8.0, "meta": None}}


def test_duplicates_and_redeliveries_change_nothing(dest: SqlDestination, table: str) -> None:
    schema = schema_of(table)
    batch = [ins(table, "r1", H(1), title="a"), ins(table, "r2", H(1), title="b"), upd(table, "r1", H(2), n=2)]
    first = dest.apply(schema, batch + batch)
    assert (first.upserted, first.unchanged) == (2, 0)
    again = dest.apply(schema, list(reversed(batch)))
    assert (again.upserted, again.deleted, again.unchanged) == (0, 0, 2)
    assert dest.rows(schema) == {"r1": {**EMPTY, "title": "a", "n": 2.0}, "r2": {**EMPTY, "title": "b"}}


def test_soft_delete_hides_the_row_and_keeps_it(dest: SqlDestination, db: Db, table: str) -> None:
    schema = schema_of(table)
    dest.apply(schema, [ins(table, "r1", H(1), title="x"), ins(table, "r2", H(1), title="y")])
    stats = dest.apply(schema, [dele(table, "r1", H(2))])
    assert (stats.deleted, stats.upserted) == (1, 0)
    assert set(dest.rows(schema)) == {"r2"}
    raw = db.query(f"SELECT row_id, title, deleted_at FROM {db.q(table)} ORDER BY row_id")
    assert [(r[0], r[1], r[2] is not None) for r in raw] == [("r1", "x", True), ("r2", "y", False)]


def test_hard_delete_removes_the_row(dest: SqlDestination, db: Db, table: str) -> None:
    schema = schema_of(table, softDelete=False)
    dest.apply(schema, [ins(table, "r1", H(1), title="x"), ins(table, "r2", H(1), title="y")])
    dest.apply(schema, [dele(table, "r1", H(2))])
    assert "deleted_at" not in db.columns(table)
    assert [r[0] for r in db.query(f"SELECT row_id FROM {db.q(table)}")] == ["r2"]
    assert set(dest.rows(schema)) == {"r2"}


@pytest.mark.parametrize("soft", [True, False])
def test_late_older_write_does_not_resurrect_and_newer_write_does(
    dest: SqlDestination, db: Db, table: str, soft: bool
) -> None:
    schema = schema_of(table, softDelete=soft)
    dest.apply(schema, [ins(table, "r", H(1), title="x", n=1)])
    dest.apply(schema, [dele(table, "r", H(5))])
    late = dest.apply(schema, [upd(table, "r", H(3), "z", title="late")])
    assert late.upserted == 0 and dest.rows(schema) == {}
    # A newer write resurrects the row with only the columns it carries; the rest are NULL.
    dest.apply(schema, [upd(table, "r", H(6), done=True)])
    assert dest.rows(schema) == {"r": {**EMPTY, "done": True}}
    if soft:
        assert db.query(f"SELECT deleted_at FROM {db.q(table)}") == [(None,)]


def test_delete_arriving_before_the_insert_it_follows(dest: SqlDestination, table: str) -> None:
    schema = schema_of(table)
    stats = dest.apply(schema, [dele(table, "r", H(5))])
    assert stats.upserted == stats.deleted == 0
    dest.apply(schema, [ins(table, "r", H(1), title="old")])
    assert dest.rows(schema) == {}


def test_props_are_never_written_by_the_materialiser(dest: SqlDestination, db: Db, table: str) -> None:
    schema = schema_of(table)
    dest.apply(schema, [ins(table, "r", H(1), title="x")])
    db.execute(f"UPDATE {db.q(table)} SET props = %s WHERE row_id = %s", '{"owner": "me"}', "r")
    dest.apply(schema, [upd(table, "r", H(2), title="y")])
    dest.apply(schema, [dele(table, "r", H(3))])
    dest.apply(schema, [upd(table, "r", H(4), title="z")])
    props = db.query(f"SELECT props FROM {db.q(table)} WHERE row_id = %s", "r")[0][0]
    assert (json.loads(props) if isinstance(props, str) else props) == {"owner": "me"}
    assert dest.rows(schema) == {"r": {**EMPTY, "title": "z"}}


def test_synced_at_moves_on_each_write(dest: SqlDestination, db: Db, table: str) -> None:
    schema = schema_of(table)
    dest.apply(schema, [ins(table, "r", H(1), title="x")])
    db.execute(f"UPDATE {db.q(table)} SET synced_at = %s", "2001-01-01 00:00:00")
    dest.apply(schema, [upd(table, "r", H(2), title="y")])
    synced = db.query(f"SELECT synced_at FROM {db.q(table)}")[0][0]
    assert "2001" not in str(synced)


def test_schema_evolution_adds_and_backfills_columns(
    make_dest: Callable[[], SqlDestination], db: Db, table: str
) -> None:
    v1 = schema_of(table, columns={"title": "string"})
    dest = make_dest()
    # Deltas may carry columns the destination's schema does not have yet: the state keeps them.
    dest.apply(v1, [ins(table, "r1", H(1), title="a", prio=3, tags=["x"]), ins(table, "r2", H(1), title="b")])
    dest.apply(v1, [ins(table, "r3", H(1), prio=9), dele(table, "r3", H(2))])
    assert dest.rows(v1) == {"r1": {"title": "a"}, "r2": {"title": "b"}}
    v2 = schema_of(table, columns={"title": "string", "prio": "number", "tags": "json"})
    # Another process (fresh cache) with the new schema: the columns are added and back-filled.
    other = make_dest()
    stats = other.apply(v2, [upd(table, "r2", H(3), prio=1)])
    assert stats.upserted == 1
    assert other.rows(v2) == {
        "r1": {"title": "a", "prio": 3.0, "tags": ["x"]},
        "r2": {"title": "b", "prio": 1.0, "tags": None},
    }
    assert {"prio", "tags"} <= set(db.columns(table))
    # The first process still runs schema v1: it writes every materialised column, so rows stay the fold.
    dest.apply(v1, [upd(table, "r1", H(4), prio=4, title="a2")])
    assert other.rows(v2)["r1"] == {"title": "a2", "prio": 4.0, "tags": ["x"]}
    meta = db.query(f"SELECT columns FROM {META_TABLE} WHERE tbl = %s", table)[0][0]
    assert [c[0] for c in json.loads(meta)] == ["title", "prio", "tags"]


def test_composite_primary_key(dest: SqlDestination, db: Db, table: str) -> None:
    schema = schema_of(table, columns={"org": "string", "num": "number", "title": "string"}, primaryKey=["org", "num"])
    dest.apply(
        schema, [ins(table, "r1", H(1), org="acme", num=1, title="a"), ins(table, "r2", H(1), org="acme", num=2)]
    )
    dest.apply(schema, [upd(table, "r1", H(2), title="b")])
    # A row whose key column is missing cannot be stored: skipped and counted, stored once the key is known.
    skipped = dest.apply(schema, [ins(table, "r3", H(1), title="no key")])
    assert skipped.skipped == 1
    assert set(dest.rows(schema)) == {"r1", "r2"}
    dest.apply(schema, [upd(table, "r3", H(2), org="acme", num=3)])
    # A key change moves the row: the old key's row is gone.
    dest.apply(schema, [upd(table, "r2", H(3), num=20)])
    assert dest.rows(schema) == {
        "r1": {"org": "acme", "num": 1.0, "title": "b"},
        "r2": {"org": "acme", "num": 20.0, "title": None},
        "r3": {"org": "acme", "num": 3.0, "title": "no key"},
    }
    assert len(db.query(f"SELECT row_id FROM {db.q(table)}")) == 3


def test_external_id_column_is_the_conflict_target(dest: SqlDestination, db: Db, table: str) -> None:
    schema = schema_of(table, columns={"ext": "string", "title": "string"}, externalIdColumn="ext")
    # A row without its external id yet, then with it, then with another one: always the same destination row.
    dest.apply(schema, [ins(table, "r1", H(1), title="a")])
    dest.apply(schema, [upd(table, "r1", H(2), ext="E1")])
    dest.apply(schema, [upd(table, "r1", H(3), ext="E2", title="b")])
    dest.apply(schema, [ins(table, "r2", H(1), ext="E9", title="c")])
    assert dest.rows(schema) == {"r1": {"ext": "E2", "title": "b"}, "r2": {"ext": "E9", "title": "c"}}
    assert len(db.query(f"SELECT row_id FROM {db.q(table)}")) == 2
    # Two rows claiming one external id violate its UNIQUE: the database refuses, nothing is written.
    with pytest.raises(DestinationError) as err:
        dest.apply(schema, [upd(table, "r1", H(4), ext="E9", title="clash")])
    assert err.value.retryable is False
    assert dest.rows(schema)["r1"] == {"ext": "E2", "title": "b"}


def test_type_coercion_writes_null_and_counts(dest: SqlDestination, kind: str, table: str) -> None:
    schema = schema_of(table)
    stats = dest.apply(
        schema,
        [
            ins(table, "r1", H(1), title=12.5, done="yes", n="12", meta="just a string"),
            ins(table, "r2", H(1), title=True, done=1, n=True, meta=[{"k": None}]),
            ins(table, "r3", H(1), title={"b": 1, "a": [2]}, n=2**70, done=None),
        ],
    )
    assert stats.nulled == 4
    assert dest.rows(schema) == {
        "r1": {"title": "12.5", "done": None, "n": None, "meta": "just a string"},
        "r2": {"title": "true", "done": None, "n": None, "meta": [{"k": None}]},
        "r3": {"title": '{"a":[2],"b":1}', "done": None, "n": float(2**70), "meta": None},
    }


def test_hostile_values_are_bound_not_interpolated(dest: SqlDestination, kind: str, table: str) -> None:
    schema = schema_of(table)
    evil = "x'); DROP TABLE _lakesync_state; -- \"`\\ é 日本 😀"
    dest.apply(schema, [ins(table, 'it\'s "r" `1`', H(1), title=evil, meta={evil: [evil]})])
    assert dest.rows(schema) == {'it\'s "r" `1`': {**EMPTY, "title": evil, "meta": {evil: [evil]}}}
    stats = dest.apply(schema, [ins(table, "nul", H(1), title="a\x00b", meta={"k": "a\x00b"})])
    expected = None if kind == "postgres" else "a\x00b"  # PostgreSQL text cannot hold U+0000
    assert stats.nulled == (2 if kind == "postgres" else 0)
    row = dest.rows(schema)["nul"]
    assert row["title"] == expected
    assert row["meta"] == (None if kind == "postgres" else {"k": "a\x00b"})
    lone = dest.apply(schema, [ins(table, "surrogate", H(1), title="\ud800")])
    assert lone.nulled == 1 and dest.rows(schema)["surrogate"]["title"] is None


@pytest.mark.parametrize(
    ("table_name", "columns"),
    [
        ('x"; DROP TABLE y; --', {"a": "string"}),
        ("ok", {"a`b": "string"}),
        ("ok", {"row_id": "string"}),
        ("ok", {"Props": "json"}),
        ("ok", {"name": "string", "NAME": "string"}),
        ("_lakesync_state", {"a": "string"}),
        ("t" * 64, {"a": "string"}),
    ],
)
def test_hostile_identifiers_are_refused(
    dest: SqlDestination, kind: str, table_name: str, columns: dict[str, str]
) -> None:
    # Built directly (bypassing parse_table_schema's checks), as a caller could.
    schema = TableSchema(table_name, tuple(ColumnSpec(n, ColumnType(t)) for n, t in columns.items()))
    if table_name == "t" * 64 and kind != "postgres":
        # 64 characters fit MySQL and SQLite identifiers; PostgreSQL would silently truncate them to 63.
        assert dest.apply(schema, [ins(table_name, "r", H(1), a="v")]).upserted == 1
        return
    with pytest.raises(DestinationError) as err:
        dest.apply(schema, [ins(table_name, "r", H(1), a="v")])
    assert err.value.retryable is False


def test_identifiers_are_quoted_anyway(dest: SqlDestination) -> None:
    q = dest.dialect.quote
    assert q('a"b') in ('"a""b"', '`a"b`')
    assert q("a`b") in ('"a`b"', "`a``b`")


def test_deltas_of_another_table_are_refused(dest: SqlDestination, table: str) -> None:
    with pytest.raises(DestinationError) as err:
        dest.apply(schema_of(table), [ins("other", "r", H(1), title="x")])
    assert err.value.retryable is False


def test_a_failing_batch_writes_nothing(
    dest: SqlDestination, db: Db, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = schema_of(table)
    dest.apply(schema, [ins(table, "r1", H(1), title="keep"), ins(table, "r2", H(1), title="doomed")])
    states_before = db.query(f"SELECT row_id, state FROM {STATE_TABLE} WHERE tbl = %s ORDER BY row_id", table)

    # Fail the last statement of the transaction (after states were written and rows upserted).
    def broken_delete(layout: Any, row_ids: Any) -> list[Statement]:
        return [Statement("SELECT no_such_column FROM no_such_table")]

    monkeypatch.setattr(dest.dialect, "delete_rows", broken_delete)
    with pytest.raises(DestinationError) as err:
        dest.apply(
            schema,
            [upd(table, "r1", H(2), title="changed"), ins(table, "r3", H(2), title="new"), dele(table, "r2", H(2))],
        )
    assert err.value.retryable is False
    monkeypatch.undo()
    assert dest.rows(schema) == {"r1": {**EMPTY, "title": "keep"}, "r2": {**EMPTY, "title": "doomed"}}
    assert db.query(f"SELECT row_id, state FROM {STATE_TABLE} WHERE tbl = %s ORDER BY row_id", table) == states_before
    # The same batch applies cleanly afterwards.
    dest.apply(schema, [upd(table, "r1", H(2), title="changed"), dele(table, "r2", H(2))])
    assert dest.rows(schema) == {"r1": {**EMPTY, "title": "changed"}}


def test_state_is_hidden_from_the_user_table(dest: SqlDestination, db: Db, table: str) -> None:
    schema = schema_of(table)
    dest.apply(schema, [ins(table, "r", H(1), title="x", secret_col="kept in state")])
    assert "secret_col" not in db.columns(table)
    (state,) = db.query(f"SELECT state FROM {STATE_TABLE} WHERE tbl = %s AND row_id = %s", table, "r")[0]
    assert json.loads(state)["c"]["secret_col"][0] == "kept in state"


def test_empty_batch_creates_the_table(dest: SqlDestination, db: Db, table: str) -> None:
    stats = dest.apply(schema_of(table), [])
    assert stats.deltas == 0 and "row_id" in db.columns(table)


def test_two_consumers_interleaving_on_the_same_rows_see_each_others_states(
    make_dest: Callable[[], SqlDestination], table: str
) -> None:
    # Each destination keeps the states it committed; a state another consumer changed since must be read again.
    first, second = make_dest(), make_dest()
    schema = schema_of(table)
    first.apply(schema, [ins(table, "r", H(1), "a", title="t1", n=1)])
    second.apply(schema, [upd(table, "r", H(3), "b", title="t3")])
    first.apply(schema, [upd(table, "r", H(2), "c", title="t2-older", done=True)])
    second.apply(schema, [dele(table, "gone", H(1))])
    first.apply(schema, [upd(table, "r", H(4), "a", n=4)])
    assert first.rows(schema) == {"r": {**EMPTY, "title": "t3", "done": True, "n": 4.0}}
    assert second.rows(schema) == first.rows(schema)


def test_numbers_round_trip_exactly(dest: SqlDestination, table: str) -> None:
    schema = schema_of(table)
    numbers = [0.1, -0.0, 5e-324, 1.7976931348623157e308, 2.0**53 + 2, 1e-7, 123456789.123456789, -1.5e300]
    dest.apply(schema, [ins(table, f"r{i}", H(1), n=v, done=i % 2 == 0) for i, v in enumerate(numbers)])
    rows = dest.rows(schema)
    assert [rows[f"r{i}"]["n"] for i in range(len(numbers))] == numbers
    assert [rows[f"r{i}"]["done"] for i in range(len(numbers))] == [i % 2 == 0 for i in range(len(numbers))]


def test_key_values_too_long_for_the_key_column_do_not_fail_the_batch(
    dest: SqlDestination, kind: str, table: str
) -> None:
    # MariaDB's key columns are VARCHAR(255) (LONGTEXT cannot be a key); the other databases take any length.
    fits = kind != "mariadb"
    long_text = "k" * 300
    keyed = schema_of(table, columns={"org": "string", "title": "string"}, primaryKey=["org"])
    stats = dest.apply(
        keyed, [ins(table, "ok", H(1), org="acme", title="a"), ins(table, "long", H(1), org=long_text, title="b")]
    )
    assert (stats.upserted, stats.skipped, stats.nulled) == ((2, 0, 0) if fits else (1, 1, 1))
    assert set(dest.rows(keyed)) == ({"ok", "long"} if fits else {"ok"})
    # The key shortened later: the row is stored then, as for a key that was NULL.
    dest.apply(keyed, [upd(table, "long", H(2), org="short")])
    assert dest.rows(keyed)["long"] == {"org": "short", "title": "b"}

    by_ext = f"{table}_x"
    ext = schema_of(by_ext, columns={"ext": "string", "title": "string"}, externalIdColumn="ext")
    stats = dest.apply(ext, [ins(by_ext, "ok", H(1), ext="E1"), ins(by_ext, "long", H(1), ext=long_text, title="c")])
    assert (stats.upserted, stats.nulled) == (2, 0 if fits else 1)
    assert dest.rows(ext)["long"] == {"ext": long_text if fits else None, "title": "c"}


def test_row_ids_too_long_for_the_database_are_skipped_not_a_failed_batch(
    dest: SqlDestination, kind: str, table: str
) -> None:
    fits = kind != "mariadb"
    schema = schema_of(table, columns={"title": "string"})
    long_id = "r" * 256
    stats = dest.apply(schema, [ins(table, "ok", H(1), title="a"), ins(table, long_id, H(1), title="b")])
    assert (stats.upserted, stats.skipped) == ((2, 0) if fits else (1, 1))
    assert set(dest.rows(schema)) == ({"ok", long_id} if fits else {"ok"})
    # 255 characters (4 bytes each in UTF-8) still fit everywhere.
    edge = "\U0001f600" * 255
    assert dest.apply(schema, [ins(table, edge, H(1), title="c")]).upserted == 1
    assert dest.rows(schema)[edge] == {"title": "c"}
