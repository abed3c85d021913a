"""The lake's history of one row in Spark SQL (lakesync.spark.explain): the row's records in the delta log with the
time of the flush snapshot that brought each, its state-table row, and the explanation they give with the buffer's
unflushed tail (one Spark test; the judgement itself is tested without Spark in tests/unit/test_explain.py)."""

from __future__ import annotations

import datetime
import json

import pytest

from lakesync.aws.flush_store import log_record
from lakesync.core import hlc
from lakesync.core.delta import make_delta
from lakesync.core.explain import explain
from lakesync.core.explanation import ClientView, RowEvidence
from lakesync.core.log import LogEntry, ShardId
from lakesync.core.merge import fold, state_to_json
from lakesync.core.row_history import HistoryDelta, combine
from lakesync.lake.tables import DELTA_LOG, FLUSH_WATERMARKS, delta_log_ddl, qualified, state_table, state_table_ddl
from lakesync.spark.explain import SparkLakeRows

pytestmark = pytest.mark.spark

GW = "default"
SHARD = ShardId(GW, "todos").key
T0 = 1_765_000_000_000


def _record(delta, seq: int) -> dict[str, object]:
    """The delta-log row the flush writes for the delta committed at entry ``seq`` (the flush's own record)."""
    record = dict(log_record(LogEntry(ShardId(GW, "todos"), seq, hlc.encode(T0 + seq, 0), delta, None, None, 0)))
    record["commit_ts"] = datetime.datetime.fromtimestamp(int(record.pop("commit_ms")) / 1000, tz=datetime.UTC)
    del record["size"]
    return record


def test_spark_reads_the_rows_history_with_flush_times_and_its_state(spark, lake_namespace):
    # Given a delta log flushed in two snapshots (the row's insert, then another row's and the row's update) and the
    # state table holding the compaction of the first snapshot only
    spark.sql(delta_log_ddl("lake", lake_namespace))
    spark.sql(state_table_ddl("lake", "todos", None, lake_namespace))
    mk = lambda op, row, client, at, cols: make_delta(  # noqa: E731
        op, table="todos", row_id=row, client_id=client, hlc=hlc.encode(T0 + at, 0), columns=cols
    )
    insert = mk("INSERT", "t1", "bob", 1, {"title": "plan", "n": 1.5})
    other = mk("INSERT", "t2", "bob", 2, {"title": "other"})
    update = mk("UPDATE", "t1", "carol", 3, {"title": "plan v2"})
    log = qualified("lake", DELTA_LOG, lake_namespace)
    schema = spark.table(log).schema
    for batch, mark in (([(insert, 1)], 1), ([(other, 2), (update, 3)], 3)):
        frame = spark.createDataFrame([_record(d, seq) for d, seq in batch], schema)
        frame.writeTo(log).option(f"snapshot-property.{FLUSH_WATERMARKS}", json.dumps({SHARD: mark})).append()
    committed = [
        int(r["ms"]) for r in spark.sql(f"SELECT unix_millis(committed_at) AS ms FROM {log}.snapshots").collect()
    ]
    state = fold([insert])
    assert state is not None
    states = qualified("lake", state_table("todos"), lake_namespace)
    updated = datetime.datetime.fromtimestamp(T0 / 1000, tz=datetime.UTC)
    row = (GW, "t1", True, json.dumps(state_to_json(state)), insert.hlc, None, updated)
    spark.createDataFrame([row], spark.table(states).schema).writeTo(states).append()
    # When the row is read from the lake
    lake = SparkLakeRows(spark, catalog="lake", namespace=lake_namespace).read_row(GW, "todos", "t1")
    # Then it has the row's two deltas, as written, each flushed by the snapshot whose watermark covers it
    assert [(d.delta, d.seq) for d in lake.deltas] == [(insert, 1), (update, 3)]
    assert [d.flushed_ms for d in lake.deltas] == sorted(committed)
    assert lake.state == state and lake.state_updated_ms == T0 and lake.notes == ()
    # And with an unflushed buffer entry, the explanation's fold, storage and losers follow
    late = mk("UPDATE", "t1", "bob", 9, {"n": 2})
    buffer = [HistoryDelta(late, SHARD, 4, hlc.encode(T0 + 4, 0))]
    history = combine(lake.deltas, buffer)
    evidence = RowEvidence("todos", "t1", history, lake_state=lake.state, lake_read=True, flushed_seq=3)
    answer = explain(GW, ClientView("alice", {"sub": "alice"}, None), evidence, now_ms=T0 + 10)
    assert answer.values == {"title": "plan v2", "n": 2}
    assert answer.storage.unflushed == 1 and answer.storage.lake_state_agrees is False
    assert answer.storage.lake_state_current_to_flush is False  # compaction has not folded the update yet
    assert {c.column: [w.write.client_id for w in c.lost] for c in answer.columns} == {"n": ["bob"], "title": ["bob"]}
