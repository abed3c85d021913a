"""Iceberg maintenance of the lake tables: compact small files, expire old snapshots, remove orphan files.

Per table, in this order:

1. Rewrite data files (bin-pack): fewer, larger files; the data is unchanged. The rewrite snapshot carries the job
   watermarks (``lakesync.compact.watermarks`` with ``lakesync.compact.log-snapshot``, ``lakesync.flush.watermarks``)
   of the newest snapshot that has them, so the current snapshot still tells the next job where it stopped. This
   step uses Iceberg's action API (``SparkActions.rewriteDataFiles(...).snapshotProperty(...)``): the
   ``rewrite_data_files`` procedure cannot set snapshot properties.
2. ``CALL <catalog>.system.expire_snapshots`` older than the cutoff, keeping at least ``retain_last`` snapshots **and**
   every snapshot from the current one back to the newest one with job watermarks (the next flush or compaction
   walks back to it). After step 1 that is normally the current snapshot itself.
3. ``CALL <catalog>.system.remove_orphan_files`` older than the cutoff, but never younger than 24 hours (Iceberg
   refuses shorter intervals: a file a running job is writing would look orphaned).

Invariant: the rows of every table read the same before and after; only files and old snapshots go away. Run it
when no flush or compaction is writing the same table (e.g. at the end of the compaction job): a job committing
between step 1's read of the watermarks and its commit makes the rewrite carry older watermarks, which only makes
the next run redo work (folding is idempotent; the flush resumes from the buffer heads).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession

from lakesync.lake.tables import COMPACT_WATERMARKS, FLUSH_WATERMARKS
from lakesync.spark.compact import LOG_SNAPSHOT
from lakesync.spark.snapshots import ancestry, newest_with

_WATERMARK_KEYS = (COMPACT_WATERMARKS, FLUSH_WATERMARKS)
_COMPANIONS = {COMPACT_WATERMARKS: (LOG_SNAPSHOT,)}
"""Properties written in the same commit as a watermark key, carried along with it."""


__all__ = [
    "MIN_ORPHAN_AGE_MS",
    "MaintenanceReport",
    "TableMaintenance",
    "rewrite_data_files",
    "run",
    "snapshots_to_keep",
]

MIN_ORPHAN_AGE_MS = 24 * 3600 * 1000
"""Orphan files younger than this are never removed."""


@dataclass(frozen=True, slots=True)
class TableMaintenance:
    """What maintenance did to one table.

    Attributes:
        table: The table (``namespace.name``).
        rewritten_files: Data files replaced by ``rewrite_data_files``.
        added_files: Data files it wrote.
        retained_snapshots: The ``retain_last`` passed to ``expire_snapshots`` (at least the watermark depth).
        deleted_files: Data, delete, manifest and manifest-list files ``expire_snapshots`` deleted.
        orphans_removed: Files ``remove_orphan_files`` deleted.
    """

    table: str
    rewritten_files: int
    added_files: int
    retained_snapshots: int
    deleted_files: int
    orphans_removed: int


@dataclass(frozen=True, slots=True)
class MaintenanceReport:
    """The outcome of :func:`run`, one entry per table in the order given."""

    tables: tuple[TableMaintenance, ...] = field(default_factory=tuple)


def _timestamp(ms: int) -> str:
    """A Spark SQL timestamp literal with an explicit UTC offset (independent of the session time zone)."""
    instant = datetime.fromtimestamp(ms / 1000, UTC)
    return f"TIMESTAMP '{instant.strftime('%Y-%m-%d %H:%M:%S.%f')}+00:00'"


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def snapshots_to_keep(spark: SparkSession, table: str, retain_last: int) -> int:
    """``retain_last`` raised to cover the current snapshot back to the newest one with job watermarks.

    Args:
        spark: The session.
        table: ``catalog.namespace.name``.
        retain_last: The wanted minimum.
    """
    chain = ancestry(spark, table)
    return max(retain_last, *(newest_with(chain, key)[1] for key in _WATERMARK_KEYS))


def rewrite_data_files(spark: SparkSession, table: str, *, min_input_files: int = 2) -> tuple[int, int]:
    """Bin-pack the data files of ``table`` (``catalog.namespace.name``), carrying the job watermarks forward.

    Returns:
        ``(rewritten files, added files)``; ``(0, 0)`` and no commit when no partition has enough files.
    """
    chain = ancestry(spark, table)
    carried = {}
    for key in _WATERMARK_KEYS:
        snapshot, _ = newest_with(chain, key)
        if snapshot is not None:
            for name in (key, *_COMPANIONS.get(key, ())):
                if name in snapshot.summary:
                    carried[name] = snapshot.summary[name]
    jvm: Any = spark.sparkContext._jvm
    jspark = spark._jsparkSession
    iceberg_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(jspark, table)
    action = jvm.org.apache.iceberg.spark.actions.SparkActions.get(jspark).rewriteDataFiles(iceberg_table)
    action = action.option("min-input-files", str(min_input_files))
    for key, value in carried.items():
        action = action.snapshotProperty(key, value)
    result = action.execute()
    return int(result.rewrittenDataFilesCount()), int(result.addedDataFilesCount())


def run(
    spark: SparkSession,
    catalog: str,
    tables: Sequence[str],
    *,
    older_than_ms: int,
    retain_last: int = 1,
    now_ms: int | None = None,
    min_input_files: int = 2,
) -> MaintenanceReport:
    """Rewrite small files, expire snapshots and remove orphan files of each table.

    Args:
        spark: The session (with the Iceberg SQL extensions, which provide ``CALL``).
        catalog: The Spark catalog name of the lake.
        tables: Tables as ``namespace.name``.
        older_than_ms: Epoch ms; snapshots committed before it may expire, files written before it (and at least
            24 hours before ``now_ms``) may be removed as orphans.
        retain_last: Snapshots always kept (at least 1; raised to keep the watermark snapshot, see module docstring).
        now_ms: The current time in epoch ms (``None``: the wall clock); bounds the orphan cutoff.
        min_input_files: ``rewrite_data_files`` rewrites a partition's files once it has at least this many.

    Returns:
        Per-table counts.

    Raises:
        ValueError: ``retain_last`` below 1 or ``min_input_files`` below 1.
    """
    if retain_last < 1:
        raise ValueError("retain_last must be at least 1: the current snapshot is always kept")
    if min_input_files < 1:
        raise ValueError("min_input_files must be at least 1")
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    orphan_cutoff = min(older_than_ms, now - MIN_ORPHAN_AGE_MS)
    system = f"{catalog}.system"
    results = []
    for table in tables:
        name = _quote(table)
        rewritten, added = rewrite_data_files(spark, f"{catalog}.{table}", min_input_files=min_input_files)
        keep = snapshots_to_keep(spark, f"{catalog}.{table}", retain_last)
        expired = spark.sql(
            f"CALL {system}.expire_snapshots(table => {name}, older_than => {_timestamp(older_than_ms)}, "
            f"retain_last => {keep})"
        ).collect()[0]
        orphans = spark.sql(
            f"CALL {system}.remove_orphan_files(table => {name}, older_than => {_timestamp(orphan_cutoff)})"
        ).collect()
        deleted = sum(int(v) for k, v in expired.asDict().items() if k.startswith("deleted_") and v is not None)
        results.append(
            TableMaintenance(
                table=table,
                rewritten_files=rewritten,
                added_files=added,
                retained_snapshots=keep,
                deleted_files=deleted,
                orphans_removed=len(orphans),
            )
        )
    return MaintenanceReport(tuple(results))
