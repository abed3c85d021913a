"""Snapshots read from the table metadata (:mod:`lakesync.spark.snapshots`) are what Iceberg's metadata tables list.

The jobs find their watermarks by walking the ``main`` branch back through snapshot parents; the walk must see the
same snapshots, parents, operations and summaries as the ``snapshots`` and ``refs`` metadata tables, whatever wrote
them: appends with properties, a MERGE, a rewrite, a rollback that leaves a snapshot off the branch, expired history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from lakesync.spark.snapshots import Snapshot, ancestry, newest_with, table_snapshots

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

CATALOG = "lake"


def listed(spark: SparkSession, table: str) -> tuple[int | None, dict[int, Snapshot]]:
    """The ``main`` ref and every snapshot, as the metadata tables list them."""
    refs = spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'main'").collect()
    columns = "snapshot_id, parent_id, operation, summary, CAST(unix_millis(committed_at) AS BIGINT) AS committed_ms"
    rows = spark.sql(f"SELECT {columns} FROM {table}.snapshots").collect()
    by_id = {
        int(r.snapshot_id): Snapshot(
            int(r.snapshot_id),
            None if r.parent_id is None else int(r.parent_id),
            str(r.operation),
            dict(r.summary or {}),
            int(r.committed_ms),
        )
        for r in rows
    }
    return (int(refs[0].snapshot_id) if refs else None), by_id


def assert_same_as_metadata_tables(spark: SparkSession, table: str) -> Any:
    found = table_snapshots(spark, table)
    current, by_id = listed(spark, table)
    assert found.current == current
    assert dict(found.by_id) == by_id
    return found


def test_snapshots_of_a_table_without_any_are_empty(spark: SparkSession, lake_namespace: str) -> None:
    table = f"{CATALOG}.{lake_namespace}.empty"
    spark.sql(f"CREATE TABLE {table} (k string, v bigint) USING iceberg")

    found = assert_same_as_metadata_tables(spark, table)

    assert found.current is None
    assert ancestry(spark, table) == []


def test_snapshots_match_the_metadata_tables_through_appends_merge_rewrite_and_rollback(
    spark: SparkSession, lake_namespace: str
) -> None:
    # Given a table with appends carrying properties, a MERGE, a bin-pack rewrite and a rollback
    table = f"{CATALOG}.{lake_namespace}.t"
    spark.sql(f"CREATE TABLE {table} (k string, v bigint) USING iceberg")
    for i in range(3):
        frame = spark.createDataFrame([(f"k{i}", i)], "k string, v bigint")
        frame.writeTo(table).option("snapshot-property.lakesync.test", f'{{"s0": {i}}}').append()
    spark.createDataFrame([("k0", 10), ("k9", 9)], "k string, v bigint").createOrReplaceTempView("src")
    spark.sql(
        f"MERGE INTO {table} t USING src s ON t.k = s.k WHEN MATCHED THEN UPDATE SET t.v = s.v "
        "WHEN NOT MATCHED THEN INSERT *"
    )
    spark.sql(f"CALL {CATALOG}.system.rewrite_data_files(table => '{table}', options => map('min-input-files', '2'))")
    before_rollback = assert_same_as_metadata_tables(spark, table)
    chain = before_rollback.ancestry()
    spark.sql(f"CALL {CATALOG}.system.rollback_to_snapshot('{table}', {chain[2].snapshot_id})")

    # Then the snapshots, parents, operations, summaries and the branch head equal the metadata tables'
    found = assert_same_as_metadata_tables(spark, table)
    operations = sorted(s.operation for s in found.by_id.values())
    assert operations == ["append", "append", "append", "overwrite", "replace"]
    # and the walk follows main: the rolled-back snapshots stay in the metadata but leave the chain
    walked = ancestry(spark, table)
    assert [s.snapshot_id for s in walked] == [s.snapshot_id for s in chain[2:]]
    assert len(found.by_id) == len(walked) + 2
    # and the properties are found by depth, newest first
    newest, depth = newest_with(walked, "lakesync.test")
    assert newest is not None and newest.summary["lakesync.test"] == '{"s0": 2}'
    assert depth == 1
    assert newest_with(walked, "absent") == (None, 0)


def test_snapshot_walk_stops_where_expired_history_begins(spark: SparkSession, lake_namespace: str) -> None:
    # Given four appends of which the oldest two were expired
    table = f"{CATALOG}.{lake_namespace}.t"
    spark.sql(f"CREATE TABLE {table} (k string) USING iceberg")
    for i in range(4):
        spark.createDataFrame([(f"k{i}",)], "k string").writeTo(table).append()
    chain = ancestry(spark, table)
    spark.sql(
        f"CALL {CATALOG}.system.expire_snapshots(table => '{table}', older_than => TIMESTAMP '9999-01-01 00:00:00', "
        "retain_last => 2)"
    )

    # Then the walk ends at the oldest snapshot left, whose parent is gone
    found = assert_same_as_metadata_tables(spark, table)
    walked = found.ancestry()
    assert [s.snapshot_id for s in walked] == [s.snapshot_id for s in chain[:2]]
    assert walked[-1].parent_id == chain[2].snapshot_id
