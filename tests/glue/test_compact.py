"""Compaction on local Spark + Iceberg: the delta log folds into state_<table> with the core's per-column LWW,
deletes are kept as non-existing rows, typed columns follow the schema, reruns are incremental and idempotent."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from lakesync.core.canonical import stable_stringify
from lakesync.core.delta import make_delta
from lakesync.core.hlc import encode
from lakesync.core.merge import fold, state_from_json
from lakesync.core.schema import parse_table_schema
from lakesync.lake.tables import DELTA_LOG, delta_log_ddl, qualified
from lakesync.spark import compact

pytestmark = pytest.mark.spark

SCHEMA = (
    "gateway string, tbl string, row_id string, op string, client_id string, hlc bigint, delta_id string, "
    "columns array<struct<name:string,value:string>>, shard string, seq bigint, commit_hlc bigint, commit_ts timestamp"
)
T0 = 1_700_000_000_000


def _append(spark, namespace, deltas, first_seq):
    rows = []
    for seq, delta in enumerate(deltas, start=first_seq):
        commit_hlc = encode(T0 + seq, 0)
        rows.append(
            (
                "gw",
                delta.table,
                delta.row_id,
                delta.op.value,
                delta.client_id,
                delta.hlc,
                delta.delta_id,
                [(c.column, stable_stringify(c.value)) for c in delta.columns],
                "gw#todos#0",
                seq,
                commit_hlc,
                datetime.fromtimestamp((T0 + seq) / 1000, UTC),
            )
        )
    spark.createDataFrame(rows, SCHEMA).writeTo(qualified("lake", DELTA_LOG, namespace)).append()


def _d(op, row, client, ms, **columns):
    return make_delta(op, table="todos", row_id=row, client_id=client, hlc=encode(T0 + ms, 0), columns=columns)


def _states(spark, namespace):
    rows = spark.sql(f"SELECT * FROM lake.{namespace}.state_todos").collect()
    return {r["_row_key"]: r for r in rows}


def test_compaction_folds_like_the_core_incrementally_and_idempotently(spark, lake_namespace) -> None:
    # Given a delta log with concurrent column edits, a delete and a resurrection
    spark.sql(delta_log_ddl("lake", lake_namespace))
    first = [
        _d("INSERT", "r1", "a", 1, title="milk", done=False, prio=1),
        _d("UPDATE", "r1", "b", 3, done=True),
        _d("UPDATE", "r1", "a", 2, title="oat milk"),
        _d("INSERT", "r2", "a", 1, title="call"),
        _d("DELETE", "r2", "b", 5),
    ]
    _append(spark, lake_namespace, first, 1)
    schema = parse_table_schema(
        {
            "table": "todos",
            "columns": [
                {"name": "title", "type": "string"},
                {"name": "done", "type": "boolean"},
                {"name": "prio", "type": "number"},
            ],
        }
    )
    config = compact.CompactConfig(namespace=lake_namespace)

    # When compaction runs
    report = compact.run(spark, config, {"todos": schema})
    states = _states(spark, lake_namespace)

    # Then each row's state is exactly the core's fold, deletes are kept as non-existing rows, typed columns are set
    assert sum(t.deltas for t in report.tables) == len(first)
    for row_id in ("r1", "r2"):
        expected = fold(d for d in first if d.row_id == row_id)
        assert state_from_json("todos", row_id, json.loads(states[row_id]["_state"])) == expected
    assert states["r1"]["_exists"] and json.loads(states["r1"]["_values"]) == {
        "title": "oat milk",
        "done": True,
        "prio": 1,
    }
    assert (states["r1"]["title"], states["r1"]["done"], states["r1"]["prio"]) == ("oat milk", True, 1.0)
    assert not states["r2"]["_exists"] and states["r2"]["_values"] is None

    # And a rerun with nothing new writes nothing
    snapshots_before = spark.sql(f"SELECT count(*) FROM lake.{lake_namespace}.state_todos.snapshots").collect()[0][0]
    again = compact.run(spark, config, {"todos": schema})
    snapshots_after = spark.sql(f"SELECT count(*) FROM lake.{lake_namespace}.state_todos.snapshots").collect()[0][0]
    assert sum(t.deltas for t in again.tables) == 0 and snapshots_after == snapshots_before

    # And newer deltas fold into the stored states (an old write cannot resurrect the deleted row)
    later = [_d("UPDATE", "r2", "a", 4, title="too old"), _d("UPDATE", "r1", "c", 9, prio=5)]
    _append(spark, lake_namespace, later, len(first) + 1)
    compact.run(spark, config, {"todos": schema})
    states = _states(spark, lake_namespace)
    for row_id in ("r1", "r2"):
        expected = fold(d for d in first + later if d.row_id == row_id)
        assert state_from_json("todos", row_id, json.loads(states[row_id]["_state"])) == expected
    assert not states["r2"]["_exists"]
    assert states["r1"]["prio"] == 5.0
