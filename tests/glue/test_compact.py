"""The compaction job and lake maintenance on the real local Spark + Iceberg runtime.

Focus: the delta log folds into ``state_<table>`` with the core LWW (deletes, resurrection, typed columns), run after
run (only entries beyond the watermarks, only changed rows rewritten, nothing committed when nothing is new, nothing
lost when a run dies before its commit); the state table is readable from pyiceberg; maintenance keeps every row
while it removes files and never expires the snapshot whose watermarks the next run needs.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pytest

from lakesync.core.canonical import stable_stringify
from lakesync.core.delta import DeltaOp, RowDelta, make_delta
from lakesync.core.errors import SchemaDefinitionError
from lakesync.core.hlc import encode
from lakesync.core.merge import RowState, fold, state_from_json
from lakesync.core.schema import parse_table_schema
from lakesync.lake.tables import COMPACT_WATERMARKS, DELTA_LOG, FLUSH_WATERMARKS, delta_log_ddl
from lakesync.spark import compact, maintenance
from lakesync.spark.compact import CompactConfig
from tests.factories import T0, table_schema

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

CATALOG = "lake"
DELTA_LOG_SCHEMA = (
    "gateway string, tbl string, row_id string, op string, client_id string, hlc bigint, delta_id string, "
    "columns array<struct<name:string,value:string>>, shard string, seq bigint, commit_hlc bigint, "
    "commit_ts timestamp"
)
SCHEMA = table_schema("todos", title="string", points="number", done="boolean", meta="json", extra="null")


def delta_log_rows(entries: Sequence[tuple[str, RowDelta]], shard: str, first_seq: int) -> list[tuple[Any, ...]]:
    """Delta-log rows (docs/lake.md) of ``(gateway, delta)`` entries: canonical value texts, consecutive seqs."""
    rows = []
    for seq, (gateway, delta) in enumerate(entries, start=first_seq):
        columns = [(c.column, stable_stringify(c.value)) for c in delta.columns]
        commit = (encode(T0 + seq, 0), datetime.fromtimestamp((T0 + seq) / 1000, UTC))
        what = (delta.op.value, delta.client_id, delta.hlc, delta.delta_id, columns)
        rows.append((gateway, delta.table, delta.row_id, *what, shard, seq, *commit))
    return rows


def canonical(state: RowState | None) -> Any:
    """A row state with values as canonical JSON text: equal iff the lake cannot tell the states apart."""
    if state is None:
        return None
    versions = [None if v is None else (v.hlc, v.client_id) for v in (state.tombstone, state.written)]
    return versions, {name: (stable_stringify(c.value), c.hlc, c.client_id) for name, c in state.columns.items()}


@dataclass
class Lake:
    """A test lake in its own namespace: appends delta-log entries as a flush would, runs compaction."""

    spark: SparkSession
    namespace: str
    seqs: dict[str, int] = field(default_factory=dict)
    history: list[tuple[str, RowDelta]] = field(default_factory=list)

    @property
    def log(self) -> str:
        return f"{CATALOG}.{self.namespace}.{DELTA_LOG}"

    def state(self, table: str = "todos") -> str:
        return f"{CATALOG}.{self.namespace}.state_{table}"

    def append(self, entries: Sequence[tuple[str, RowDelta]], shard: str = "s0") -> None:
        """One flush: the entries as consecutive seqs of ``shard``, the flush watermarks in the snapshot summary."""
        self.spark.sql(delta_log_ddl(CATALOG, self.namespace))
        first = self.seqs.get(shard, 0) + 1
        rows = delta_log_rows(entries, shard, first)
        self.seqs[shard] = first + len(entries) - 1
        frame = self.spark.createDataFrame(rows, DELTA_LOG_SCHEMA)
        frame.writeTo(self.log).option(f"snapshot-property.{FLUSH_WATERMARKS}", json.dumps(self.seqs)).append()
        self.history.extend(entries)

    def compact(self, now_ms: int = T0, **kwargs: Any) -> compact.CompactReport:
        config = CompactConfig(catalog=CATALOG, namespace=self.namespace, now_ms=now_ms)
        return compact.run(self.spark, config, **kwargs)

    def rows(self, table: str = "todos") -> dict[tuple[str, str], dict[str, Any]]:
        """State rows by (gateway, row id); ``_updated_at`` as epoch ms."""
        rows = {}
        for r in self.spark.table(self.state(table)).collect():
            row = r.asDict()
            row["_updated_at"] = round(row["_updated_at"].timestamp() * 1000)  # PySpark gives naive local time
            rows[(r._gateway, r._row_key)] = row
        return rows

    def expected(self, table: str = "todos") -> dict[tuple[str, str], RowState]:
        by_row: dict[tuple[str, str], list[RowDelta]] = {}
        for gateway, delta in self.history:
            if delta.table == table:
                by_row.setdefault((gateway, delta.row_id), []).append(delta)
        return {key: state for key, deltas in by_row.items() if (state := fold(deltas)) is not None}

    def snapshots(self, table: str = "todos") -> list[Any]:
        return self.spark.sql(f"SELECT * FROM {self.state(table)}.snapshots ORDER BY committed_at").collect()

    def assert_matches_core(self, table: str = "todos") -> None:
        rows = self.rows(table)
        expected = self.expected(table)
        assert set(rows) == set(expected)
        for (gateway, row_id), state in expected.items():
            row = rows[(gateway, row_id)]
            assert canonical(state_from_json(table, row_id, json.loads(row["_state"]))) == canonical(state)
            assert row["_exists"] is state.exists
            values = state.values()
            got = None if row["_values"] is None else json.loads(row["_values"])
            assert got == (None if values is None else json.loads(stable_stringify(values)))


@pytest.fixture
def lake(spark: SparkSession, lake_namespace: str) -> Lake:
    return Lake(spark, lake_namespace)


def w(row_id: str, hlc: int, columns: dict[str, Any], *, client: str = "c1", table: str = "todos") -> RowDelta:
    return make_delta(DeltaOp.UPDATE, table=table, row_id=row_id, client_id=client, hlc=hlc, columns=columns)


def d(row_id: str, hlc: int, *, client: str = "c1", table: str = "todos") -> RowDelta:
    return make_delta(DeltaOp.DELETE, table=table, row_id=row_id, client_id=client, hlc=hlc)


def on(gateway: str, deltas: Iterable[RowDelta]) -> list[tuple[str, RowDelta]]:
    return [(gateway, delta) for delta in deltas]


# --- folding ---------------------------------------------------------------------------------------------------------


def test_compact_folds_the_delta_log_into_per_column_lww_state(lake: Lake) -> None:
    # Given writes to rows of two gateways, with a column conflict at one HLC decided by clientId
    lake.append(
        on("gw1", [w("r1", 10, {"title": "a", "done": False}), w("r1", 12, {"done": True}), w("r2", 11, {"n": 1})])
        + on("gw2", [w("r1", 10, {"title": "x"}, client="c0"), w("r1", 10, {"title": "y"}, client="c2")])
    )

    # When compaction runs
    report = lake.compact()

    # Then each (gateway, row) holds the core's fold, and the snapshot carries the folded positions
    lake.assert_matches_core()
    rows = lake.rows()
    assert json.loads(rows[("gw1", "r1")]["_values"]) == {"title": "a", "done": True}
    assert json.loads(rows[("gw2", "r1")]["_values"]) == {"title": "y"}
    assert rows[("gw1", "r1")]["_hlc"] == 12
    assert rows[("gw1", "r1")]["_updated_at"] == T0
    (result,) = report.tables
    assert (result.table, result.deltas, result.rows_written) == ("todos", 5, 3)
    last = lake.snapshots()[-1]
    assert json.loads(last.summary[COMPACT_WATERMARKS]) == {"s0": 5}
    assert result.snapshot_id == last.snapshot_id
    assert len(lake.snapshots()) == 1  # the MERGE itself carries the watermarks: one commit


def test_compact_keeps_deleted_rows_as_tombstones_that_older_writes_cannot_resurrect(lake: Lake) -> None:
    # Given a row written then deleted
    lake.append(on("gw", [w("r1", 10, {"a": 1, "b": 2}), d("r1", 20)]))
    lake.compact()

    # When a write older than the delete arrives in a later run
    lake.append(on("gw", [w("r1", 15, {"a": 3}, client="late")]))
    lake.compact(now_ms=T0 + 1000)

    # Then the row stays deleted: no values, the tombstone in its state, untouched by the second run
    row = lake.rows()[("gw", "r1")]
    assert row["_exists"] is False
    assert row["_values"] is None
    assert row["_hlc"] == 20
    assert json.loads(row["_state"])["t"] == ["20", "c1"]
    assert row["_updated_at"] == T0
    lake.assert_matches_core()


def test_compact_resurrects_a_deleted_row_with_only_the_newer_columns(lake: Lake) -> None:
    # Given a deleted row
    lake.append(on("gw", [w("r1", 10, {"a": 1, "b": 2}), d("r1", 20)]))
    lake.compact()

    # When a newer write sets one column, and a delete ties with another row's write at its very version
    lake.append(on("gw", [w("r1", 30, {"b": 5}), w("r2", 40, {"x": 1}), d("r2", 40)]))
    lake.compact(now_ms=T0 + 1000)

    # Then r1 is back with only b; r2 is deleted (a delete wins a tie with a write of equal version)
    rows = lake.rows()
    assert rows[("gw", "r1")]["_exists"] is True
    assert json.loads(rows[("gw", "r1")]["_values"]) == {"b": 5}
    assert rows[("gw", "r1")]["_updated_at"] == T0 + 1000
    assert rows[("gw", "r2")]["_exists"] is False
    lake.assert_matches_core()


def test_compact_scenario_concurrent_edits_delete_and_a_late_write(lake: Lake) -> None:
    # Given concurrent column edits on real HLCs, a delete, and the schema's typed columns
    def at(op: str, row: str, client: str, ms: int, **columns: Any) -> tuple[str, RowDelta]:
        delta = make_delta(op, table="todos", row_id=row, client_id=client, hlc=encode(T0 + ms, 0), columns=columns)
        return "gw", delta

    lake.append(
        [
            at("INSERT", "r1", "a", 1, title="milk", done=False, points=1),
            at("UPDATE", "r1", "b", 3, done=True),
            at("UPDATE", "r1", "a", 2, title="oat milk"),
            at("INSERT", "r2", "a", 1, title="call"),
            at("DELETE", "r2", "b", 5),
        ]
    )
    lake.compact(schemas={"todos": SCHEMA})
    rows = lake.rows()
    assert json.loads(rows[("gw", "r1")]["_values"]) == {"title": "oat milk", "done": True, "points": 1}
    assert (rows[("gw", "r1")]["title"], rows[("gw", "r1")]["done"], rows[("gw", "r1")]["points"]) == (
        "oat milk",
        True,
        1.0,
    )

    # When a write older than the delete and a newer edit arrive
    lake.append([at("UPDATE", "r2", "a", 4, title="too old"), at("UPDATE", "r1", "c", 9, points=5)])
    lake.compact(now_ms=T0 + 1000, schemas={"todos": SCHEMA})

    # Then the deleted row stays deleted and the edit lands, exactly as the core folds them
    rows = lake.rows()
    assert rows[("gw", "r2")]["_exists"] is False
    assert rows[("gw", "r1")]["points"] == 5.0
    lake.assert_matches_core()


# --- typed columns ---------------------------------------------------------------------------------------------------


def test_compact_fills_typed_columns_and_nulls_values_that_do_not_fit(lake: Lake) -> None:
    # Given one row whose values fit their types and one whose values do not
    good = {"title": 'say "hi"\t😀', "points": 1e21, "done": True, "meta": {"b": [1, 2.5], "a": None}, "extra": None}
    bad = {"title": 42, "points": "7", "done": "true", "meta": "text", "extra": [1]}
    lake.append(on("gw", [w("good", 1, good), w("bad", 1, bad), w("gone", 1, good), d("gone", 2)]))

    # When compaction runs with the table's schema
    lake.compact(schemas={"todos": SCHEMA})

    # Then typed columns hold the cast values, JSON kinds as canonical JSON text, misfits as null (kept in _values)
    rows = lake.rows()
    typed = ("title", "points", "done", "meta", "extra")
    assert tuple(rows[("gw", "good")][c] for c in typed) == (
        'say "hi"\t😀',
        1e21,
        True,
        '{"a":null,"b":[1,2.5]}',
        "null",
    )
    assert tuple(rows[("gw", "bad")][c] for c in typed) == (None, None, None, '"text"', "[1]")
    assert json.loads(rows[("gw", "bad")]["_values"]) == bad
    assert all(rows[("gw", "gone")][c] is None for c in typed)
    lake.assert_matches_core()


def test_compact_schema_that_adds_columns_refills_existing_rows(lake: Lake) -> None:
    # Given a state table made without a schema, from rows that already carry "points"
    lake.append(on("gw", [w("r1", 1, {"title": "a", "points": 3}), w("r2", 1, {"title": "b"})]))
    lake.compact()
    assert "points" not in lake.spark.table(lake.state()).columns

    # When a run gets a schema declaring the columns, with nothing new in the delta log
    lake.compact(now_ms=T0 + 1000, schemas={"todos": SCHEMA})

    # Then the typed columns exist and every row is refilled from its state
    rows = lake.rows()
    assert (rows[("gw", "r1")]["title"], rows[("gw", "r1")]["points"]) == ("a", 3.0)
    assert (rows[("gw", "r2")]["title"], rows[("gw", "r2")]["points"]) == ("b", None)

    # And a later run without a schema keeps filling them, from the schema the table recorded
    lake.append(on("gw", [w("r2", 2, {"points": 4})]))
    lake.compact(now_ms=T0 + 2000)
    assert lake.rows()[("gw", "r2")]["points"] == 4.0


def test_compact_refuses_a_schema_that_retypes_a_column(lake: Lake) -> None:
    # Given a state table made with the schema
    lake.append(on("gw", [w("r1", 1, {"title": "a"})]))
    lake.compact(schemas={"todos": SCHEMA})
    retyped = parse_table_schema({"table": "todos", "columns": [{"name": "title", "type": "number"}]})
    before = lake.snapshots()

    # When a run gets a schema that changes a column's type, Then it fails before touching anything
    with pytest.raises(SchemaDefinitionError, match="Cannot"):
        lake.compact(schemas={"todos": retyped})
    assert lake.snapshots() == before


# --- runs over time --------------------------------------------------------------------------------------------------


def test_compact_incremental_runs_fold_only_new_entries_and_rewrite_only_changed_rows(lake: Lake) -> None:
    # Given a first run over two shards
    lake.append(on("gw", [w("r1", 10, {"a": 1}), w("r2", 10, {"a": 1})]), shard="s0")
    lake.append(on("gw", [w("r3", 10, {"a": 1})]), shard="s1")
    lake.compact()

    # When new entries arrive on one shard (one changes r1, one loses against r2's stored column) and a run follows
    lake.append(on("gw", [w("r1", 20, {"b": 2}), w("r2", 5, {"a": 0})]), shard="s1")
    report = lake.compact(now_ms=T0 + 1000)

    # Then only the new entries were folded and only r1 was rewritten
    (result,) = report.tables
    assert (result.deltas, result.rows_written) == (2, 1)
    assert result.watermarks == {"s0": 2, "s1": 3}
    rows = lake.rows()
    assert rows[("gw", "r1")]["_updated_at"] == T0 + 1000
    assert rows[("gw", "r2")]["_updated_at"] == rows[("gw", "r3")]["_updated_at"] == T0
    lake.assert_matches_core()


def test_compact_rerun_with_nothing_new_commits_nothing(lake: Lake) -> None:
    # Given a compacted lake
    lake.append(on("gw", [w("r1", 10, {"a": 1}), d("r2", 3)]))
    lake.compact()
    before = lake.snapshots()

    # When compaction runs again
    report = lake.compact(now_ms=T0 + 1000)

    # Then nothing was folded or committed
    assert [(t.deltas, t.rows_written, t.snapshot_id) for t in report.tables] == [(0, 0, None)]
    assert lake.snapshots() == before


def test_compact_entries_that_change_no_row_still_advance_the_watermarks(lake: Lake) -> None:
    # Given a compacted row and then a duplicate of its delta in the log
    delta = w("r1", 10, {"a": 1})
    lake.append(on("gw", [delta]))
    lake.compact()
    lake.append(on("gw", [delta]))

    # When compaction runs
    report = lake.compact(now_ms=T0 + 1000)

    # Then no row is rewritten, but a commit records the new position so the entry is not read again
    (result,) = report.tables
    assert (result.deltas, result.rows_written) == (1, 0)
    assert json.loads(lake.snapshots()[-1].summary[COMPACT_WATERMARKS]) == {"s0": 2}
    assert lake.rows()[("gw", "r1")]["_updated_at"] == T0
    assert lake.compact(now_ms=T0 + 2000).tables[0].deltas == 0


def test_compact_crash_before_the_commit_loses_nothing(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a compacted lake and new entries
    lake.append(on("gw", [w("r1", 10, {"a": 1})]))
    lake.compact()
    lake.append(on("gw", [w("r1", 20, {"a": 2}), w("r2", 20, {"a": 2})]))
    before = (lake.rows(), lake.snapshots())

    # When a run dies just before its commit
    def crash(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("killed")

    with monkeypatch.context() as patch:
        patch.setattr(compact, "_commit", crash)
        with pytest.raises(RuntimeError, match="killed"):
            lake.compact(now_ms=T0 + 1000)

    # Then the state table is as it was, and the next run folds everything
    assert (lake.rows(), lake.snapshots()) == before
    assert lake.compact(now_ms=T0 + 2000).tables[0].deltas == 2
    lake.assert_matches_core()


def test_compact_later_runs_scan_only_the_delta_log_files_appended_since(lake: Lake) -> None:
    # Given a first run, then more appends and a maintenance rewrite of the delta log (a "replace" snapshot)
    lake.append(on("gw", [w("r1", 10, {"a": 1}), w("r2", 10, {"a": 1})]))
    assert lake.compact().tables[0].incremental is False
    lake.append(on("gw", [w("r1", 20, {"a": 2})]))
    lake.append(on("gw", [w("r2", 20, {"a": 2})]))
    now = int(time.time() * 1000)
    log = f"{lake.namespace}.{DELTA_LOG}"
    assert maintenance.run(lake.spark, CATALOG, [log], older_than_ms=0, now_ms=now).tables[0].rewritten_files > 0

    # When the next run compacts, Then it reads only what was appended since the last run, and folds it all
    (second,) = lake.compact(now_ms=T0 + 1000).tables
    assert (second.incremental, second.deltas) == (True, 2)
    lake.assert_matches_core()

    # When the delta log's history has anything but appends and rewrites since (here a delete), the next run
    # scans the whole log, still folding only the entries beyond its watermarks
    lake.spark.sql(f"DELETE FROM {lake.log} WHERE seq = 1")
    lake.append(on("gw", [w("r3", 30, {"a": 3})]))
    (third,) = lake.compact(now_ms=T0 + 2000).tables
    assert (third.incremental, third.deltas) == (False, 1)
    lake.assert_matches_core()


def test_compact_runtime_without_commit_properties_adds_a_commit_with_the_watermarks(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a Spark runtime whose MERGE commits drop Iceberg's per-thread commit properties
    @contextmanager
    def dropped(*args: Any, **kwargs: Any) -> Iterator[None]:
        yield

    monkeypatch.setattr(compact, "commit_properties", dropped)
    lake.append(on("gw", [w("r1", 10, {"a": 1})]))

    # When compaction runs
    lake.compact()

    # Then the MERGE is followed by an empty commit carrying the watermarks, and the state is complete
    merge, marks = lake.snapshots()
    assert COMPACT_WATERMARKS not in merge.summary
    assert json.loads(marks.summary[COMPACT_WATERMARKS]) == {"s0": 1}
    lake.assert_matches_core()


def test_compact_lists_tables_from_the_delta_log(lake: Lake) -> None:
    # Given entries of two tables
    lake.append(on("gw", [w("r1", 1, {"a": 1}), w("n1", 1, {"body": "x"}, table="notes"), d("n2", 1, table="notes")]))

    # When compaction runs without a table list
    report = lake.compact()

    # Then both tables get their state table
    assert [(t.table, t.deltas) for t in report.tables] == [("notes", 2), ("todos", 1)]
    lake.assert_matches_core("notes")
    lake.assert_matches_core("todos")


def test_compact_without_a_delta_log_does_nothing(spark: SparkSession, lake_namespace: str) -> None:
    report = compact.run(spark, CompactConfig(namespace=lake_namespace))
    assert report == compact.CompactReport(None)
    assert not spark.catalog.tableExists(f"{CATALOG}.{lake_namespace}.state_todos")


def test_compact_state_table_is_readable_from_pyiceberg(lake: Lake, lake_catalog: SqlCatalog) -> None:
    # Given a compacted lake with a live and a deleted row
    lake.append(on("gw", [w("r1", 10, {"a": "x"}), w("r2", 10, {"a": 1}), d("r2", 11)]))
    lake.compact(schemas={"todos": SCHEMA})

    # When pyiceberg reads the state table
    table = lake_catalog.load_table(f"{lake.namespace}.state_todos")
    rows = {r["_row_key"]: r for r in table.scan().to_arrow().to_pylist()}

    # Then it sees the same rows and the watermarks of the current snapshot
    assert rows["r1"]["_exists"] is True
    assert json.loads(rows["r1"]["_values"]) == {"a": "x"}
    assert rows["r2"]["_exists"] is False
    assert rows["r2"]["_values"] is None
    got = state_from_json("todos", "r1", json.loads(rows["r1"]["_state"]))
    assert canonical(got) == canonical(lake.expected()[("gw", "r1")])
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert json.loads(snapshot.summary[COMPACT_WATERMARKS]) == {"s0": 3}


# --- maintenance -----------------------------------------------------------------------------------------------------


def _live_files(spark: SparkSession, table: str) -> int:
    return int(spark.sql(f"SELECT count(*) AS n FROM {table}.files").collect()[0].n)


def _data_files_on_disk(spark: SparkSession, table: str) -> set[Path]:
    location = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").where("col_name = 'Location'").collect()[0].data_type
    return set((Path(urlparse(location).path) / "data").rglob("*.parquet"))


def test_maintenance_keeps_the_rows_and_reduces_files(lake: Lake) -> None:
    # Given a state table built by small runs (new files per run and partition, old ones replaced by MERGEs)
    for i in range(5):
        lake.append(
            on("gw", [*(w(f"r{i}-{j}", 10 + i, {"a": i, "b": j}) for j in range(6)), w("hot", 10 + i, {"n": i})])
        )
        lake.compact(now_ms=T0 + i)
    name = lake.state()
    rows_before = sorted(map(tuple, lake.spark.table(name).collect()))
    live_before, disk_before = _live_files(lake.spark, name), _data_files_on_disk(lake.spark, name)
    # and a stray file, two days old, among the table's data files
    stray = next(iter(disk_before)).with_name("stray.parquet")
    stray.write_bytes(b"not referenced")
    two_days_ago = time.time() - 2 * 86400
    os.utime(stray, (two_days_ago, two_days_ago))

    # When maintenance runs with every snapshot old enough to expire
    now = int(time.time() * 1000)
    tables = [f"{lake.namespace}.state_todos"]
    report = maintenance.run(lake.spark, CATALOG, tables, older_than_ms=now + 1, retain_last=1, now_ms=now)

    # Then every row reads the same, from fewer live files and fewer files on disk, and the stray file is gone
    assert sorted(map(tuple, lake.spark.table(name).collect())) == rows_before
    (result,) = report.tables
    assert result.rewritten_files > result.added_files > 0
    assert _live_files(lake.spark, name) < live_before
    assert len(_data_files_on_disk(lake.spark, name)) < len(disk_before)
    assert result.deleted_files > 0
    assert not stray.exists()
    assert result.orphans_removed == 1
    # and the rewrite, now the only snapshot, carries the watermarks of the last compaction
    (snapshot,) = lake.snapshots()
    assert snapshot.operation == "replace"
    assert json.loads(snapshot.summary[COMPACT_WATERMARKS]) == {"s0": 35}


def test_maintenance_never_expires_the_snapshot_holding_the_watermarks(lake: Lake) -> None:
    # Given a state table from three runs of 20 rows (most of the 16 buckets get a file per run)
    for i in range(3):
        lake.append(on("gw", [w(f"r{i}-{j}", 10, {"a": j}) for j in range(20)]))
        lake.compact(now_ms=T0 + i)
    # and a rewrite by another tool, whose snapshot has no watermarks
    table = f"{lake.namespace}.state_todos"
    lake.spark.sql(
        f"CALL {CATALOG}.system.rewrite_data_files(table => '{table}', options => map('min-input-files', '2'))"
    )
    assert "lakesync.compact.watermarks" not in lake.snapshots()[-1].summary

    # When maintenance expires every snapshot it may
    now = int(time.time() * 1000)
    report = maintenance.run(lake.spark, CATALOG, [table], older_than_ms=now + 1, retain_last=1, now_ms=now)

    # Then the watermark snapshot survived (two retained), and the next run folds only what is new
    assert report.tables[0].retained_snapshots == 2
    assert len(lake.snapshots()) == 2
    assert compact.last_watermarks(lake.spark, lake.state(), COMPACT_WATERMARKS) == ({"s0": 60}, 2)
    lake.append(on("gw", [w("r0-0", 30, {"a": 9})]))
    assert lake.compact(now_ms=T0 + 10).tables[0].deltas == 1
    lake.assert_matches_core()


def test_compact_job_args_parse_the_glue_options() -> None:
    # Given the options of a Glue run
    options = {
        "warehouse": "s3://lake/wh",
        "synced_tables": "todos,notes",
        "table_prefix": "ls",
        "gateways": "gw1",
        "maintain": "true",
        "retain_last": "3",
    }

    # When parsed, Then every option lands where the job reads it, with defaults for the rest
    args = compact.CompactJobArgs.parse(options)
    assert args.config == CompactConfig(catalog="lake", namespace="lakesync", tables=("todos", "notes"))
    assert (args.catalog_kind, args.warehouse, args.gateways) == ("glue", "s3://lake/wh", ("gw1",))
    assert args.dynamo_tables is not None and args.dynamo_tables.config == "ls-config"
    assert (args.maintain, args.retain_last, args.expire_after_hours) == (True, 3, 24.0)
    with pytest.raises(ValueError, match="warehouse"):
        compact.CompactJobArgs.parse({})
    with pytest.raises(ValueError, match="maintain"):
        compact.CompactJobArgs.parse({"warehouse": "w", "maintain": "yes"})


def test_compact_merge_schemas_unions_columns_of_all_gateways() -> None:
    # Given one table declared by two gateways, the second with an extra column and a conflicting type
    first = parse_table_schema({"table": "todos", "columns": [{"name": "title", "type": "string"}]})
    second = parse_table_schema(
        {"table": "todos", "columns": [{"name": "title", "type": "number"}, {"name": "done", "type": "boolean"}]}
    )

    # When merged, Then the columns are unioned and the first declaration's type wins
    merged = compact.merge_schemas([{"todos": first}, {"todos": second}])
    assert [(c.name, c.type.value) for c in merged["todos"].columns] == [("title", "string"), ("done", "boolean")]


def test_maintenance_refuses_retain_last_below_one(spark: SparkSession) -> None:
    with pytest.raises(ValueError, match="retain_last"):
        maintenance.run(spark, CATALOG, [], older_than_ms=0, retain_last=0)
