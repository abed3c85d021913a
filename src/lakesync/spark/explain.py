"""The lake's history of one row in Spark SQL (:class:`~lakesync.ports.LakeRowReader` for ``lakesync explain``).

Two parameterised queries, the row's records in the delta log (pruned to the gateway's and table's partitions) and
its state-table row, and the delta log's flush snapshots since the row's first commit (their
``lakesync.flush.watermarks`` say when each entry was flushed), read from the table's metadata without a Spark job
(:mod:`lakesync.spark.snapshots`). The deltas are folded by :mod:`lakesync.core.merge` in
:mod:`lakesync.core.explain`, not in SQL, so no SQL form of the merge needs a proof. The Athena form is
:mod:`lakesync.lake.athena_explain`.
"""

from __future__ import annotations

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from lakesync.core.row_history import LakeRow, flush_snapshot, lake_row
from lakesync.lake.tables import DELTA_LOG, FLUSH_WATERMARKS, NAMESPACE, qualified, state_table
from lakesync.spark.snapshots import table_snapshots

__all__ = ["SparkLakeRows", "delta_sql", "state_sql"]


def delta_sql(catalog: str, namespace: str = NAMESPACE) -> str:
    """The row's delta-log records (parameters ``:gw``, ``:tbl``, ``:row``), columns as ``[[name, value], ...]``."""
    return f"""
SELECT op, client_id, CAST(hlc AS STRING) AS hlc, delta_id,
       to_json(transform(columns, c -> array(c.name, c.value))) AS columns,
       shard, seq, CAST(commit_hlc AS STRING) AS commit_hlc, CAST(unix_millis(commit_ts) AS BIGINT) AS commit_ms
FROM {qualified(catalog, DELTA_LOG, namespace)}
WHERE gateway = :gw AND tbl = :tbl AND row_id = :row
""".strip()


def state_sql(catalog: str, table: str, namespace: str = NAMESPACE) -> str:
    """The row's state-table row (parameters ``:gw``, ``:row``): its state text and when it was written."""
    return f"""
SELECT _state, CAST(unix_millis(_updated_at) AS BIGINT) AS updated_ms
FROM {qualified(catalog, state_table(table), namespace)}
WHERE _gateway = :gw AND _row_key = :row
""".strip()


class SparkLakeRows:
    """Reads one row's history from the lake through a Spark session with the lake's Iceberg catalog."""

    def __init__(self, spark: SparkSession, *, catalog: str = "lake", namespace: str = NAMESPACE) -> None:
        self._spark = spark
        self._catalog = catalog
        self._namespace = namespace

    def read_row(self, gateway: str, table: str, row_id: str) -> LakeRow:
        """The row's deltas in the delta log, each with when it was flushed, and its state-table row."""
        notes: list[str] = []
        try:
            rows = self._spark.sql(
                delta_sql(self._catalog, self._namespace), args={"gw": gateway, "tbl": table, "row": row_id}
            ).collect()
        except AnalysisException:
            return LakeRow(notes=("the lake has no delta log yet",))
        records = [r.asDict() for r in rows]
        since = min((int(r["commit_ms"]) for r in records), default=0)
        log = table_snapshots(self._spark, qualified(self._catalog, DELTA_LOG, self._namespace))
        snapshots = [
            flush_snapshot(s.committed_ms, s.summary[FLUSH_WATERMARKS])
            for s in log.by_id.values()
            if FLUSH_WATERMARKS in s.summary and s.committed_ms >= since
        ]
        try:
            states = self._spark.sql(
                state_sql(self._catalog, table, self._namespace), args={"gw": gateway, "row": row_id}
            ).collect()
        except AnalysisException:
            states = []
            notes.append(f"the lake has no state table for {table!r} yet")
        state = (states[0]["_state"], int(states[0]["updated_ms"])) if states else None
        return lake_row(table, row_id, records, snapshots, state, notes)
