"""SQL over the lake for a person or an agent: current state, or as of a snapshot or a time (Iceberg time travel).

Tables resolve in the ``lakesync`` namespace of the lake catalog, so ``SELECT * FROM state_todos`` works; Spark's
``VERSION AS OF <snapshot id>`` and ``TIMESTAMP AS OF '<time>'`` clauses travel in time. Long scans report their
progress (tasks done per running stage) through a callback.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from lakesync.lake.tables import NAMESPACE


@dataclass(frozen=True, slots=True)
class QueryResult:
    """Column names, rows (JSON-friendly values) and how long the query took."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    seconds: float


def _watch(spark: SparkSession, report: Callable[[str], None], done: threading.Event, every_s: float) -> None:
    tracker = spark.sparkContext.statusTracker()
    while not done.wait(every_s):
        parts = []
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                parts.append(f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks")
        if parts:
            report("scanning... " + ", ".join(parts))


def run_query(
    spark: SparkSession,
    sql: str,
    *,
    catalog: str = "lake",
    namespace: str = NAMESPACE,
    limit: int | None = 1000,
    progress: Callable[[str], None] | None = None,
    progress_every_s: float = 1.0,
) -> QueryResult:
    """Run one SQL statement against the lake and collect at most ``limit`` rows."""
    spark.sql(f"USE {catalog}.{namespace}")
    started = time.perf_counter()
    done = threading.Event()
    watcher = None
    if progress is not None:
        watcher = threading.Thread(target=_watch, args=(spark, progress, done, progress_every_s), daemon=True)
        watcher.start()
    try:
        frame = spark.sql(sql)
        if limit is not None:
            frame = frame.limit(limit)
        rows = frame.collect()
    finally:
        done.set()
        if watcher is not None:
            watcher.join()
    return QueryResult(
        tuple(frame.columns),
        tuple(tuple(_plain(v) for v in row) for row in rows),
        time.perf_counter() - started,
    )


def snapshots(spark: SparkSession, table: str, *, catalog: str = "lake", namespace: str = NAMESPACE) -> QueryResult:
    """The snapshots of a lake table (id, time, operation, summary), oldest first: the points to travel to."""
    return run_query(
        spark,
        f"SELECT snapshot_id, committed_at, operation, summary FROM {catalog}.{namespace}.{table}.snapshots "
        "ORDER BY committed_at",
        catalog=catalog,
        namespace=namespace,
        limit=None,
    )


def _plain(value: Any) -> Any:
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value
