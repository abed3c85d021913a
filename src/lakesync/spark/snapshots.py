"""The snapshots of an Iceberg table as its current metadata holds them, read without running a Spark job.

The ``snapshots`` and ``refs`` metadata tables are read from the table's current metadata, but each query of them is a
Spark job: a quarter of a second to most of a second in local mode, for a few kilobytes. The jobs read the same
metadata through the Iceberg API instead: the session's catalog loads the table (no table cache, so the latest
commit, whoever made it) and Iceberg's own parser writes the metadata as JSON in one call.

As the metadata tables show them: a snapshot's ``summary`` leaves out its ``operation``, and the current snapshot is
the one the ``main`` branch points at.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

__all__ = ["Snapshot", "TableSnapshots", "ancestry", "newest_with", "table_snapshots"]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One snapshot of an Iceberg table, as its ``snapshots`` metadata table lists it."""

    snapshot_id: int
    parent_id: int | None
    operation: str
    summary: Mapping[str, str]
    committed_ms: int
    """When it was committed (epoch ms: the metadata's ``timestamp-ms``, the table's ``committed_at``)."""


@dataclass(frozen=True, slots=True)
class TableSnapshots:
    """Every snapshot of a table's current metadata, and the one ``main`` points at (``None``: no snapshot yet)."""

    current: int | None
    by_id: Mapping[int, Snapshot]

    def ancestry(self) -> list[Snapshot]:
        """From the current snapshot back through the parents still in the metadata, newest first."""
        chain: list[Snapshot] = []
        current = self.current
        while current is not None and current in self.by_id:
            chain.append(self.by_id[current])
            current = self.by_id[current].parent_id
        return chain


def _snapshot(entry: Mapping[str, Any]) -> Snapshot:
    summary = {str(k): str(v) for k, v in entry.get("summary", {}).items()}
    parent = entry.get("parent-snapshot-id")
    return Snapshot(
        snapshot_id=int(entry["snapshot-id"]),
        parent_id=None if parent is None else int(parent),
        operation=summary.pop("operation", "None"),
        summary=summary,
        committed_ms=int(entry["timestamp-ms"]),
    )


def table_snapshots(spark: SparkSession, table: str) -> TableSnapshots:
    """The snapshots of ``table`` (``catalog.namespace.name``, an existing Iceberg table).

    Raises:
        py4j.protocol.Py4JJavaError: the table does not exist or is not an Iceberg table.
    """
    jvm: Any = spark.sparkContext._jvm
    session: Any = spark._jsparkSession
    loaded = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(session, table)
    metadata = json.loads(jvm.org.apache.iceberg.TableMetadataParser.toJson(loaded.operations().current()))
    by_id = {s.snapshot_id: s for s in map(_snapshot, metadata.get("snapshots", []))}
    main = metadata.get("refs", {}).get("main")
    if main is not None:
        current: int | None = int(main["snapshot-id"])
    else:  # metadata written before branches: the current snapshot id, -1 for none
        legacy = metadata.get("current-snapshot-id")
        current = None if legacy is None or int(legacy) < 0 else int(legacy)
    return TableSnapshots(current, by_id)


def ancestry(spark: SparkSession, table: str) -> list[Snapshot]:
    """The snapshots from the current one (``main``) back through the parents still in the metadata, newest first.

    Args:
        spark: The session.
        table: ``catalog.namespace.name``.
    """
    return table_snapshots(spark, table).ancestry()


def newest_with(chain: Sequence[Snapshot], key: str) -> tuple[Snapshot | None, int]:
    """The first snapshot of ``chain`` (newest first) whose summary has ``key``, and its depth (1 for the first);
    ``(None, 0)`` when none has it."""
    for depth, snapshot in enumerate(chain, start=1):
        if key in snapshot.summary:
            return snapshot, depth
    return None, 0
