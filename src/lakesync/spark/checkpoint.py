"""The checkpoint job: the current-state tables -> a checkpoint in S3 per gateway (docs/lake.md, Checkpoints).

One run:

1. finds the state tables (``state_*`` in the lake namespace) and, for each, the nearest snapshot carrying
   ``lakesync.compact.watermarks`` (walking back from the current one). Rows are read *as of that snapshot*, so the
   rows and the positions they cover always belong together, even while a compaction commits meanwhile;
2. per gateway: positions = the union of the tables' watermarks restricted to the gateway's shards of that table
   (each shard belongs to one table, so the union is exact; a minimum across tables would be wrong);
3. turns each row's ``_state`` into exact-version deltas on the executors (``mapPartitions``), in ``(table, row id)``
   order, and streams them to the driver, which packs them into chunks at row boundaries and writes chunks, manifest
   and ``latest.json`` (:func:`lakesync.gateway.checkpoint.write_checkpoint`);
4. ``serverHlc`` (the ``since`` HLC for clients without cursors) is the smallest commit HLC among the last covered
   entry of each shard, read from the delta log; a client pulling ``since`` it re-receives some covered entries
   (harmless under LWW) and misses none of the covered shards. If any of them cannot be found, it is 0. The buffer
   may release an entry only below both bounds (:meth:`~lakesync.core.checkpoint.Manifest.releasable`).

**Deleted rows are kept, as their DELETE (``include_deleted``, the default).** A client starting from a checkpoint
never held a deleted row, so for it a tombstone only matters if the tail pulled from the cursor could carry a write
older than that tombstone. It cannot: the tail of a shard is the entries committed after the covered ones, every row
lives in one shard, and an entry is logged only if it changed the row index -- whose state already included the
tombstone -- so a tail write of that row is newer than the tombstone. (The one exception is a change of a table's
sub-shard count, which moves rows between shards: an older write still unflushed in the old shard could then follow a
covered delete in the new one; the tombstone settles it.) The tombstones are there for the clients that *did* hold
the row: an original (``since``) client behind a release is resynced from the checkpoint
(:mod:`lakesync.gateway.resync`), and a row deleted while it was behind reaches it only as the checkpoint's DELETE.
Rows that exist keep their DELETE either way: ``row_deltas`` always reproduces the whole state.

**Their cost.** Compaction never drops a tombstone (a deleted row stays in its state table with ``_exists`` false, so
older deltas cannot resurrect it), so every row ever deleted is one DELETE in every checkpoint (a row id, clientId,
deltaId and HLC: ~100-150 bytes): a table with heavy churn of row ids grows its checkpoints without bound.
``deleted_within_hours`` bounds that: only tombstones at most that old (by their HLC, against the run's clock) are
kept, so an original client behind a release by more than that keeps the rows deleted earlier (docs/since.md,
"What cannot converge"); ``include_deleted=False`` omits them all (enough for our SDK's clients, which replace
everything they hold with the checkpoint). Around a change of a table's sub-shard count, run with neither.

A gateway with no compacted shards gets no checkpoint; one whose positions equal its latest checkpoint's is skipped
(``skip_unchanged``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from lakesync.core.checkpoint import (
    DEFAULT_CHUNK_BYTES,
    Manifest,
    checkpoint_id,
    load_manifest,
    merge_positions,
    positions_of_gateway,
)
from lakesync.core.errors import StorageError
from lakesync.core.hlc import encode as encode_hlc
from lakesync.core.hlc import system_clock
from lakesync.core.log import ShardId
from lakesync.core.merge import state_from_json
from lakesync.gateway.checkpoint import EncodedRow, encode_row, write_checkpoint
from lakesync.lake.tables import (
    COMPACT_WATERMARKS,
    DELTA_LOG,
    NAMESPACE,
    STATE_PREFIX,
    STATE_SYSTEM_COLUMNS,
    qualified,
    state_table,
)
from lakesync.ports import ObjectStore
from lakesync.spark.snapshots import ancestry, newest_with

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row, SparkSession

# The state tables' key, existence and state columns, by position in the DDL's system columns.
_GATEWAY, _ROW_ID, _EXISTS, _STATE, _HLC, _VALUES, _UPDATED_AT = STATE_SYSTEM_COLUMNS

__all__ = [
    "CheckpointConfig",
    "CheckpointReport",
    "GatewayCheckpoint",
    "StateSnapshot",
    "deleted_since_hlc",
    "encode_rows",
    "run",
]


@dataclass(frozen=True, slots=True)
class CheckpointConfig:
    """What one checkpoint run does.

    Attributes:
        bucket: The S3 bucket of the checkpoints (used when ``run`` is given no object store).
        gateways: The gateways to checkpoint.
        catalog: The Spark catalog holding the lake.
        namespace: The lake namespace (``lakesync``; tests use their own).
        chunk_bytes: Byte budget of one chunk object.
        include_deleted: Also write deleted rows (as their DELETE); see the module docstring.
        deleted_within_hours: With ``include_deleted``, only the deleted rows whose delete is at most this many hours
            old (``None``: all of them); see the module docstring.
        skip_unchanged: Write nothing for a gateway whose positions equal its latest checkpoint's.
    """

    bucket: str
    gateways: tuple[str, ...]
    catalog: str = "lake"
    namespace: str = NAMESPACE
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    include_deleted: bool = True
    deleted_within_hours: float | None = None
    skip_unchanged: bool = True


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    """A state table at the snapshot whose compaction watermarks it was read with."""

    table: str
    snapshot_id: int
    watermarks: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class GatewayCheckpoint:
    """One gateway's outcome: the manifest written, or why none was (``"nothing compacted"``, ``"unchanged"``)."""

    gateway: str
    manifest: Manifest | None
    skipped: str | None = None


@dataclass(frozen=True, slots=True)
class CheckpointReport:
    """What a run did: the state tables read, one outcome per gateway, and milliseconds per step."""

    tables: tuple[StateSnapshot, ...]
    gateways: tuple[GatewayCheckpoint, ...]
    durations_ms: Mapping[str, int] = field(default_factory=dict)


def run(
    spark: SparkSession,
    config: CheckpointConfig,
    *,
    objects: ObjectStore | None = None,
    now_ms: Callable[[], int] = system_clock,
) -> CheckpointReport:
    """Cut a checkpoint of each configured gateway from the state tables.

    Args:
        spark: The session (its default catalog need not be the lake's).
        config: What to do.
        objects: Where to write; defaults to the S3 bucket ``config.bucket``.
        now_ms: Wall clock for ``createdAtMs`` and the checkpoint ids.

    Raises:
        StorageError: the object store failed (that gateway's checkpoint is not published).
        ValueError: two state tables claim the same shard with different positions.
    """
    if objects is None:
        from lakesync.aws.objects import S3ObjectStore

        objects = S3ObjectStore(config.bucket)
    started = time.perf_counter()
    snapshots = tuple(state_snapshots(spark, config.catalog, config.namespace))
    durations = {"tables": _ms(started)}
    outcomes = []
    for gateway in config.gateways:
        step = time.perf_counter()
        outcomes.append(_checkpoint_gateway(spark, config, objects, snapshots, gateway, now_ms))
        durations[f"gateway:{gateway}"] = _ms(step)
    durations["total"] = _ms(started)
    return CheckpointReport(snapshots, tuple(outcomes), durations)


def state_snapshots(spark: SparkSession, catalog: str, namespace: str) -> Iterator[StateSnapshot]:
    """Every state table with its latest compaction snapshot, by table name (tables never compacted are left out)."""
    if not spark.catalog.databaseExists(f"{catalog}.{namespace}"):
        return
    names = sorted(r.tableName for r in spark.sql(f"SHOW TABLES IN {catalog}.{namespace}").collect())
    for name in names:
        if not name.startswith(STATE_PREFIX):
            continue
        found = _latest_compaction(spark, qualified(catalog, name, namespace))
        if found is None:
            continue
        snapshot_id, watermarks = found
        # The synced table is the one whose shards this table's compaction covered and that maps to this name
        # (names are Glue-safe, so a table with capitals has a hashed name: the name alone does not say it).
        tables = {_shard_table(s) for s in watermarks} - {None}
        table = next((t for t in sorted(t for t in tables if t is not None) if state_table(t) == name), None)
        if table is not None:
            # Keep only this table's shards: the positions of the rows this table holds.
            own = {s: seq for s, seq in watermarks.items() if _shard_table(s) == table}
            yield StateSnapshot(table, snapshot_id, own)


def _latest_compaction(spark: SparkSession, table: str) -> tuple[int, dict[str, int]] | None:
    snapshot, _ = newest_with(ancestry(spark, table), COMPACT_WATERMARKS)
    if snapshot is None:
        return None
    parsed = json.loads(snapshot.summary[COMPACT_WATERMARKS])
    return snapshot.snapshot_id, {str(k): int(v) for k, v in parsed.items()}


def _shard_table(shard: str) -> str | None:
    try:
        return ShardId.parse(shard).table
    except ValueError:
        return None


def _checkpoint_gateway(
    spark: SparkSession,
    config: CheckpointConfig,
    objects: ObjectStore,
    snapshots: tuple[StateSnapshot, ...],
    gateway: str,
    now_ms: Callable[[], int],
) -> GatewayCheckpoint:
    per_table = {s.table: positions_of_gateway(s.watermarks, gateway) for s in snapshots}
    covered = [s for s in snapshots if per_table[s.table]]
    positions = merge_positions([per_table[s.table] for s in covered])
    if not positions:
        return GatewayCheckpoint(gateway, None, "nothing compacted")
    if config.skip_unchanged:
        try:
            latest = load_manifest(objects.get, gateway)
        except StorageError:
            latest = None  # a damaged latest checkpoint: the new one replaces it
        if latest is not None and dict(latest.positions) == positions:
            return GatewayCheckpoint(gateway, None, "unchanged")
    created = now_ms()
    rows = _state_rows(spark, config, covered, gateway, deleted_since_hlc(config, created))
    manifest = write_checkpoint(
        objects,
        gateway=gateway,
        checkpoint_id=checkpoint_id(created, uuid.uuid4().hex[:8]),
        created_at_ms=created,
        positions=positions,
        server_hlc=_since_hlc(spark, config, gateway, positions),
        tables=[s.table for s in covered],
        rows=(EncodedRow(table, data, deltas) for table, data, deltas in rows),
        chunk_bytes=config.chunk_bytes,
    )
    return GatewayCheckpoint(gateway, manifest)


def deleted_since_hlc(config: CheckpointConfig, now_ms: int) -> int | None:
    """The oldest HLC of a tombstone the checkpoint keeps: 0 for all of them, ``None`` for none."""
    if not config.include_deleted:
        return None
    if config.deleted_within_hours is None:
        return 0
    return encode_hlc(max(0, now_ms - round(config.deleted_within_hours * 3_600_000)), 0)


def _state_rows(
    spark: SparkSession,
    config: CheckpointConfig,
    snapshots: list[StateSnapshot],
    gateway: str,
    deleted_since: int | None,
) -> Iterator[tuple[str, bytes, int]]:
    frames: list[DataFrame] = []
    for snap in snapshots:
        name = qualified(config.catalog, state_table(snap.table), config.namespace)
        frame = spark.sql(f"SELECT * FROM {name} VERSION AS OF {snap.snapshot_id}").where(F.col(_GATEWAY) == gateway)
        if deleted_since is None:
            frame = frame.where(F.col(_EXISTS))
        elif deleted_since > 0:
            # A deleted row's `_hlc` is its tombstone's.
            frame = frame.where(F.col(_EXISTS) | (F.col(_HLC) >= F.lit(deleted_since)))
        frames.append(frame.select(F.lit(snap.table).alias("tbl"), F.col(_ROW_ID).alias("rid"), F.col(_STATE)))
    combined = reduce(lambda a, b: a.unionByName(b), frames)
    ordered = combined.orderBy("tbl", "rid")
    encoded: Iterator[tuple[str, bytes, int]] = ordered.rdd.mapPartitions(encode_rows).toLocalIterator()
    return encoded


def encode_rows(rows: Iterable[Row]) -> Iterator[tuple[str, bytes, int]]:
    """Executors: ``(table, row id, state JSON)`` rows -> ``(table, encoded deltas, delta count)`` (``encode_row``)."""
    for row in rows:
        table, row_id, state_json = row[0], row[1], row[2]
        encoded = encode_row(state_from_json(table, row_id, json.loads(state_json)))
        yield encoded.table, encoded.data, encoded.deltas


def _since_hlc(spark: SparkSession, config: CheckpointConfig, gateway: str, positions: Mapping[str, int]) -> int:
    """The smallest commit HLC among each shard's last covered entry; 0 if one cannot be found."""
    log = qualified(config.catalog, DELTA_LOG, config.namespace)
    if 0 in positions.values() or not spark.catalog.tableExists(log):
        return 0
    wanted: list[Column] = [
        (F.col("tbl") == ShardId.parse(shard).table) & (F.col("shard") == shard) & (F.col("seq") == seq)
        for shard, seq in positions.items()
    ]
    found: dict[Any, Any] = {
        r[0]: r[1]
        for r in spark.table(log)
        .where(F.col("gateway") == gateway)
        .where(reduce(lambda a, b: a | b, wanted))
        .groupBy("shard")
        .agg(F.max("commit_hlc"))
        .collect()
    }
    if set(found) != set(positions):
        return 0
    return int(min(found.values()))


def _ms(since: float) -> int:
    return round((time.perf_counter() - since) * 1000)
