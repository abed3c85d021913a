"""The compaction job: the delta log folded into one current-state Iceberg table per synced table (docs/lake.md).

For each synced table: read the delta-log entries beyond the state table's last ``lakesync.compact.watermarks`` (per
shard ``seq``, at one pinned delta-log snapshot), fold them with the stored states of the rows they touch
(:mod:`lakesync.spark.lww`, the core per-column LWW), and ``MERGE INTO`` the changed rows in **one** commit whose
snapshot summary carries the new watermarks.

Invariants:

* Exactly the entries up to the watermarks are in the state. A crash before the commit leaves the table and its
  watermarks as they were; the next run folds the same entries again. Folding is a semilattice join, so even folding
  an entry twice (say, after the watermark snapshot was expired) cannot change a state.
* Rerunning with nothing new in the delta log commits nothing. Entries that change no row still advance the
  watermarks (an empty commit carrying them).
* The watermarks are read walking back from the current snapshot to the last one that has them, so maintenance
  snapshots (``rewrite_data_files``) in between do not lose them.
* The same commit records the delta-log snapshot read (``lakesync.compact.log-snapshot``). The next run scans only
  the files appended after it (an Iceberg incremental append scan) when the delta log's history since has only
  appends and rewrites, else the whole log; either way it keeps just the entries beyond the watermarks, so the
  shortcut cannot change the result, only the cost (the log grows forever, a run's new entries do not).
* Only rows whose ``_state`` changed are written; ``_updated_at`` is the run's time. Deleted rows stay with
  ``_exists = false`` and ``_values`` null, so older deltas cannot resurrect them.
* Typed columns come from the table schema (kept in the table property ``lakesync.schema``); schemas only add columns
  (:func:`lakesync.core.schema.check_column_evolution`), and adding one refills every row's typed columns once.
* One compaction runs at a time (Glue max concurrent runs 1).

The snapshot property is attached to the ``MERGE INTO`` commit through Iceberg's per-thread commit properties
(``org.apache.iceberg.spark.CommitMetadata``); SQL ``MERGE`` has no write options in Spark 3.5. If a runtime ever
fails to carry them, the job adds an empty commit with the watermarks instead (safe by the second invariant).
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import reduce
from typing import Any, Literal

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakesync.aws.tables import TableNames
from lakesync.core.schema import ColumnSpec, ColumnType, TableSchema, check_column_evolution, parse_table_schema
from lakesync.lake.tables import (
    COMPACT_WATERMARKS,
    DELTA_LOG,
    NAMESPACE,
    ROW_KEY,
    SPARK_TYPES,
    STATE_SYSTEM_COLUMNS,
    state_table,
    state_table_ddl,
)
from lakesync.spark import lww
from lakesync.spark.glue import buffer_tables, catalog_kind, flag
from lakesync.spark.snapshots import Snapshot, ancestry, newest_with

__all__ = [
    "JOB_OPTIONS",
    "LOG_SNAPSHOT",
    "SCHEMA_PROPERTY",
    "CompactConfig",
    "CompactJobArgs",
    "CompactReport",
    "TableCompaction",
    "commit_properties",
    "compact_table",
    "last_watermarks",
    "log_gateways",
    "merge_schemas",
    "run",
]

SCHEMA_PROPERTY = "lakesync.schema"
"""State-table property: the JSON table schema its typed columns were made from."""

_MAP_PREDICATE_ABOVE = 256  # shards; beyond this the "beyond the watermarks" filter is a map lookup, not an OR


@dataclass(frozen=True, slots=True)
class CompactConfig:
    """Where the lake is and what to compact.

    Attributes:
        catalog: The Spark catalog name of the lake.
        namespace: The namespace holding the delta log and the state tables.
        tables: Synced tables to compact; ``None`` means every table present in the delta log.
        now_ms: The ``_updated_at`` stamp in epoch ms; ``None`` means the wall clock at the start of the run.
    """

    catalog: str = "lake"
    namespace: str = NAMESPACE
    tables: tuple[str, ...] | None = None
    now_ms: int | None = None

    def name(self, table: str) -> str:
        """``catalog.namespace.table``."""
        return f"{self.catalog}.{self.namespace}.{table}"


@dataclass(frozen=True, slots=True)
class TableCompaction:
    """What one run did to one state table.

    Attributes:
        table: The synced table.
        deltas: Delta-log entries folded in.
        rows_written: State rows inserted or updated.
        watermarks: The state's watermarks after the run (``{shard: seq}``).
        snapshot_id: The state snapshot committed, or ``None`` when there was nothing new.
        seconds: Wall time spent on the table.
        incremental: Whether only the delta-log files appended since the last run were scanned.
    """

    table: str
    deltas: int
    rows_written: int
    watermarks: Mapping[str, int]
    snapshot_id: int | None
    seconds: float
    incremental: bool = False


@dataclass(frozen=True, slots=True)
class CompactReport:
    """The outcome of :func:`run`.

    Attributes:
        delta_snapshot_id: The delta-log snapshot read (``None``: no delta log or an empty one).
        tables: One entry per table considered, in name order.
    """

    delta_snapshot_id: int | None
    tables: tuple[TableCompaction, ...] = field(default_factory=tuple)


JOB_OPTIONS = (
    "warehouse",
    "catalog",
    "catalog_name",
    "catalog_uri",
    "namespace",
    "synced_tables",
    "tables",
    "table_prefix",
    "gateways",
    "dynamodb_endpoint",
    "region",
    "maintain",
    "expire_after_hours",
    "retain_last",
)
"""Options of the compaction job script (``--name value``); only ``warehouse`` is required. ``tables`` /
``table_prefix`` name the DynamoDB tables (as for the flush job) to read the table schemas from."""


@dataclass(frozen=True, slots=True)
class CompactJobArgs:
    """The compaction job's arguments.

    Attributes:
        config: The run's configuration.
        warehouse: ``s3://`` URI (Glue catalog) or a local directory.
        catalog_kind: ``glue`` or ``local`` (a sqlite catalog, ``catalog_uri``).
        catalog_uri: The local catalog's sqlite file.
        dynamo_tables: The DynamoDB tables to read the table schemas from; ``None``: no schemas are loaded (state
            tables keep the typed columns they have).
        gateways: Gateways whose schemas are loaded (``None``: those present in the delta log).
        dynamodb_endpoint: DynamoDB endpoint override (locally, the moto server).
        region: AWS region override.
        maintain: Whether to run maintenance on the delta log and the state tables after compacting.
        expire_after_hours: Maintenance expires snapshots (and removes orphans) older than this.
        retain_last: Snapshots maintenance always keeps.
    """

    config: CompactConfig
    warehouse: str
    catalog_kind: Literal["local", "glue"] = "glue"
    catalog_uri: str | None = None
    dynamo_tables: TableNames | None = None
    gateways: tuple[str, ...] | None = None
    dynamodb_endpoint: str | None = None
    region: str | None = None
    maintain: bool = False
    expire_after_hours: float = 24.0
    retain_last: int = 1

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> CompactJobArgs:
        """Build from job options (names of :data:`JOB_OPTIONS`; absent options take their defaults).

        ``synced_tables`` and ``gateways`` are comma-separated; ``maintain`` is ``true``/``false``.

        Raises:
            ValueError: a required option is missing or a value is malformed.
        """
        if "warehouse" not in options:
            raise ValueError("--warehouse is required")
        kind = catalog_kind(options)
        maintain = flag(options, "maintain", default=False)
        synced = _csv(options.get("synced_tables"))
        dynamo = buffer_tables(options)
        config = CompactConfig(
            catalog=options.get("catalog_name", "lake"), namespace=options.get("namespace", NAMESPACE), tables=synced
        )
        return cls(
            config=config,
            warehouse=options["warehouse"],
            catalog_kind=kind,
            catalog_uri=options.get("catalog_uri"),
            dynamo_tables=dynamo,
            gateways=_csv(options.get("gateways")),
            dynamodb_endpoint=options.get("dynamodb_endpoint"),
            region=options.get("region"),
            maintain=maintain,
            expire_after_hours=float(options.get("expire_after_hours", "24")),
            retain_last=int(options.get("retain_last", "1")),
        )


def _csv(text: str | None) -> tuple[str, ...] | None:
    return tuple(t for t in text.split(",") if t) if text else None


def merge_schemas(per_gateway: Iterable[Mapping[str, TableSchema]]) -> dict[str, TableSchema]:
    """One schema per synced table from the schemas of several gateways (a state table holds every gateway's rows).

    Columns are unioned in order of appearance; a column declared by several gateways keeps the first declaration's
    type (pass the gateways in a fixed order).
    """
    merged: dict[str, TableSchema] = {}
    for schemas in per_gateway:
        for table, schema in schemas.items():
            known = merged.get(table)
            if known is None:
                merged[table] = _dedupe_columns(schema)
                continue
            names = set(known.column_types)
            extra = tuple(ColumnSpec(n, k) for n, k in schema.column_types.items() if n not in names)
            merged[table] = dataclasses.replace(known, columns=known.columns + extra)
    return merged


# --- snapshots and watermarks ----------------------------------------------------------------------------------------


LOG_SNAPSHOT = "lakesync.compact.log-snapshot"
"""State-table snapshot property: the delta-log snapshot the compaction read; the next run reads only the files
appended after it (Iceberg incremental append scan), when that snapshot is still in the delta log's history."""


def _parse_marks(text: str) -> dict[str, int]:
    return {str(k): int(v) for k, v in json.loads(text).items()}


def last_watermarks(spark: SparkSession, table: str, key: str) -> tuple[dict[str, int], int]:
    """The watermarks ``{shard: seq}`` of the newest snapshot in the current ancestry that has property ``key``.

    Returns:
        ``(watermarks, depth)``: ``depth`` counts the snapshots from the current one back to (and including) that
        snapshot; ``({}, 0)`` when no snapshot in the chain has the property.
    """
    snapshot, depth = newest_with(ancestry(spark, table), key)
    return ({}, 0) if snapshot is None else (_parse_marks(snapshot.summary[key]), depth)


@contextmanager
def commit_properties(spark: SparkSession, properties: Mapping[str, str]) -> Iterator[None]:
    """Attach snapshot-summary properties to the Iceberg commits Spark SQL makes on this thread (e.g. ``MERGE``).

    Sets Iceberg's per-thread ``CommitMetadata`` properties, which ``CommitMetadata.withCommitProperties`` would set
    around a Java callable: PySpark pins each Python thread to one JVM thread, so statements run from this thread
    commit with them.
    """
    jvm: Any = spark.sparkContext._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    holder = jvm.java.lang.Class.forName("org.apache.iceberg.spark.CommitMetadata", True, loader)
    slot = holder.getDeclaredField("COMMIT_PROPERTIES")
    slot.setAccessible(True)
    local = slot.get(None)
    values = jvm.java.util.HashMap()
    for k, v in properties.items():
        values.put(k, v)
    local.set(values)
    try:
        yield
    finally:
        local.remove()


# --- state tables ----------------------------------------------------------------------------------------------------


def _dedupe_columns(schema: TableSchema) -> TableSchema:
    """One column per name (the last declaration's type, at the first one's position), as ``column_types`` reads it."""
    columns = tuple(ColumnSpec(name, kind) for name, kind in schema.column_types.items())
    return dataclasses.replace(schema, columns=columns)


def _typed(schema: TableSchema | None) -> list[tuple[str, ColumnType]]:
    if schema is None:
        return []
    return [(n, k) for n, k in schema.column_types.items() if n not in STATE_SYSTEM_COLUMNS]


def _stored_schema(spark: SparkSession, name: str) -> TableSchema | None:
    properties = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES {name}").collect()}
    text = properties.get(SCHEMA_PROPERTY)
    return None if text is None else parse_table_schema(json.loads(text))


def _set_schema_property(spark: SparkSession, name: str, schema: TableSchema) -> None:
    text = json.dumps(schema.to_json(), separators=(",", ":")).replace("\\", "\\\\").replace("'", "\\'")
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('{SCHEMA_PROPERTY}' = '{text}')")


def ensure_state_table(
    spark: SparkSession, config: CompactConfig, table: str, schema: TableSchema | None
) -> tuple[list[tuple[str, ColumnType]], bool]:
    """Create or evolve ``state_<table>``.

    Returns:
        ``(typed columns, refill)``: ``refill`` is true when typed columns were just added to existing rows.

    Raises:
        SchemaDefinitionError: ``schema`` removes or retypes a column the state table was made with.
    """
    name = config.name(state_table(table))
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {config.catalog}.{config.namespace}")
    if not spark.catalog.tableExists(name):
        wanted = None if schema is None else _dedupe_columns(schema)
        spark.sql(state_table_ddl(config.catalog, table, wanted, config.namespace))
        if wanted is not None:
            _set_schema_property(spark, name, wanted)
        return _typed(wanted), False
    stored = _stored_schema(spark, name)
    if schema is None or stored == _dedupe_columns(schema):
        return _typed(stored), False
    wanted = _dedupe_columns(schema)
    if stored is not None:
        check_column_evolution(stored, wanted)
    existing = {f.name.lower() for f in spark.table(name).schema.fields}
    added = [(n, k) for n, k in _typed(wanted) if n.lower() not in existing]
    if added:
        columns = ", ".join(f"`{n}` {SPARK_TYPES[k]}" for n, k in added)
        spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({columns})")
    _set_schema_property(spark, name, wanted)
    return _typed(wanted), bool(added)


# --- reading the delta log -------------------------------------------------------------------------------------------


def _beyond(watermarks: Mapping[str, int]) -> Column:
    """Entries after the watermarks: any seq of an unknown shard, ``seq > watermark`` of a known one."""
    if not watermarks:
        return F.lit(True)
    shard, seq = F.col("shard"), F.col("seq")
    unknown = ~shard.isin(list(watermarks))
    if len(watermarks) > _MAP_PREDICATE_ABOVE:
        marks = F.create_map(*(x for k, v in watermarks.items() for x in (F.lit(k), F.lit(v))))
        return unknown | (seq > F.element_at(marks, shard))
    terms = [(shard == F.lit(k)) & (seq > F.lit(v)) for k, v in sorted(watermarks.items())]
    while len(terms) > 1:  # a balanced OR keeps the expression shallow
        terms = [reduce(lambda a, b: a | b, terms[i : i + 2]) for i in range(0, len(terms), 2)]
    return unknown | terms[0]


def _log_tables(spark: SparkSession, log: str) -> list[str]:
    rows = spark.sql(f"SELECT DISTINCT partition.tbl AS tbl FROM {log}.partitions").collect()
    return sorted(str(r.tbl) for r in rows)


def log_gateways(spark: SparkSession, config: CompactConfig) -> list[str]:
    """The gateways with entries in the delta log (from its partition metadata); empty without a delta log."""
    log = config.name(DELTA_LOG)
    if not spark.catalog.tableExists(log):
        return []
    rows = spark.sql(f"SELECT DISTINCT partition.gateway AS gateway FROM {log}.partitions").collect()
    return sorted(str(r.gateway) for r in rows)


# --- the job ---------------------------------------------------------------------------------------------------------


def _log_since(
    spark: SparkSession, log: str, chain: Sequence[Snapshot], previous: str | None
) -> tuple[DataFrame, bool]:
    """The delta log at the pinned snapshot (``chain[0]``), reduced to the files appended after snapshot ``previous``
    when the history since holds nothing but appends and rewrites; ``(rows, incremental)``."""
    pinned = chain[0].snapshot_id
    if previous is not None:
        since = int(previous)
        ids = [s.snapshot_id for s in chain]
        if since == pinned:
            return spark.read.option("snapshot-id", str(pinned)).table(log).limit(0), True
        if since in ids and all(s.operation in ("append", "replace") for s in chain[: ids.index(since)]):
            reader = spark.read.format("iceberg").option("start-snapshot-id", str(since))
            return reader.option("end-snapshot-id", str(pinned)).load(log), True
    return spark.read.option("snapshot-id", str(pinned)).table(log), False


def compact_table(
    spark: SparkSession,
    config: CompactConfig,
    table: str,
    log_chain: Sequence[Snapshot],
    schema: TableSchema | None,
    updated_at: datetime,
) -> TableCompaction:
    """Fold the delta-log entries of ``table`` beyond its watermarks into ``state_<table>`` (one commit).

    Args:
        spark: The session.
        config: The job configuration.
        table: The synced table.
        log_chain: The delta log's :func:`ancestry`; its first snapshot is the one read.
        schema: The table's schema, or ``None`` to keep the one the state table was made with.
        updated_at: The ``_updated_at`` stamp.
    """
    started = time.monotonic()
    name = config.name(state_table(table))
    typed, refill = ensure_state_table(spark, config, table, schema)
    last, _ = newest_with(ancestry(spark, name), COMPACT_WATERMARKS)
    watermarks = {} if last is None else _parse_marks(last.summary[COMPACT_WATERMARKS])
    previous = None if last is None else last.summary.get(LOG_SNAPSHOT)
    log, incremental = _log_since(spark, config.name(DELTA_LOG), log_chain, previous)
    # Read once: the new entries feed the positions, the affected keys and the fold; the affected states feed the
    # fold and the change check.
    new = log.where((F.col("tbl") == F.lit(table)) & _beyond(watermarks)).select(*lww.DELTA_COLUMNS, "shard", "seq")
    new = new.persist(StorageLevel.MEMORY_AND_DISK)
    cached = [new]
    try:
        positions = new.groupBy("shard").agg(F.max("seq").alias("seq"), F.count(F.lit(1)).alias("n")).collect()
        entries = sum(int(r.n) for r in positions)
        advanced = {**watermarks, **{str(r.shard): int(r.seq) for r in positions}}
        if entries == 0 and not refill:
            return TableCompaction(table, 0, 0, watermarks, None, time.monotonic() - started, incremental)

        stored = spark.table(name).select("_gateway", ROW_KEY, "_state")
        if not refill:
            keys = new.select(F.col("gateway").alias("_gateway"), F.col("row_id").alias(ROW_KEY)).distinct()
            stored = stored.join(keys, ["_gateway", ROW_KEY], "left_semi")
        stored = stored.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(stored)
        pseudo = lww.state_deltas(
            stored.select(
                F.col("_gateway").alias("gateway"),
                F.lit(table).alias("tbl"),
                F.col(ROW_KEY).alias("row_id"),
                F.col("_state").alias("state"),
            )
        )
        folded = lww.fold(new.select(*lww.DELTA_COLUMNS).unionByName(pseudo))
        rendered = lww.render(folded, typed, F.lit(updated_at)).drop("tbl")
        previous_states = stored.select("_gateway", ROW_KEY, F.col("_state").alias("_previous"))
        changed = rendered.join(previous_states, ["_gateway", ROW_KEY], "left")
        if not refill:
            changed = changed.where(F.col("_previous").isNull() | (F.col("_previous") != F.col("_state")))
        changed = changed.drop("_previous").persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(changed)
        written = changed.count()
        properties = {
            COMPACT_WATERMARKS: json.dumps(advanced, sort_keys=True, separators=(",", ":")),
            LOG_SNAPSHOT: str(log_chain[0].snapshot_id),
        }
        snapshot_id = _commit(spark, name, changed, written, [n for n, _ in typed], properties)
    finally:
        for frame in cached:
            frame.unpersist()
    return TableCompaction(table, entries, written, advanced, snapshot_id, time.monotonic() - started, incremental)


def _commit(
    spark: SparkSession, name: str, changed: DataFrame, rows: int, typed: Sequence[str], properties: Mapping[str, str]
) -> int:
    """MERGE the changed rows with ``properties`` in the snapshot summary; returns the new snapshot id."""
    if rows:
        view = f"lakesync_compact_{uuid.uuid4().hex}"
        changed.createOrReplaceTempView(view)
        columns = [c for c in STATE_SYSTEM_COLUMNS if c not in ("_gateway", ROW_KEY)] + list(typed)
        updates = ", ".join(f"t.`{c}` = s.`{c}`" for c in columns)
        inserted = ", ".join(f"`{c}`" for c in ("_gateway", ROW_KEY, *columns))
        try:
            with commit_properties(spark, properties):
                spark.sql(
                    f"MERGE INTO {name} t USING {view} s ON t._gateway = s._gateway AND t.{ROW_KEY} = s.{ROW_KEY} "
                    f"WHEN MATCHED THEN UPDATE SET {updates} "
                    f"WHEN NOT MATCHED THEN INSERT ({inserted}) VALUES ({inserted})"
                )
        finally:
            spark.catalog.dropTempView(view)
        head = ancestry(spark, name)[0]
        if all(head.summary.get(k) == v for k, v in properties.items()):
            return head.snapshot_id
    # Nothing changed (or the runtime dropped the commit properties): an empty commit carries the watermarks.
    writer = spark.table(name).limit(0).writeTo(name)
    for key, value in properties.items():
        writer = writer.option(f"snapshot-property.{key}", value)
    writer.append()
    return ancestry(spark, name)[0].snapshot_id


def run(spark: SparkSession, config: CompactConfig, schemas: Mapping[str, TableSchema] | None = None) -> CompactReport:
    """Compact every table of ``config`` (or every table in the delta log) into its state table.

    Args:
        spark: The session (with the lake catalog configured).
        config: Where and what.
        schemas: Table schemas by synced-table name; a table without one keeps the typed columns it has.

    Returns:
        What was folded and committed, per table.

    Raises:
        SchemaDefinitionError: a schema would remove or retype a state table's column.
    """
    schemas = schemas or {}
    log_name = config.name(DELTA_LOG)
    if not spark.catalog.tableExists(log_name):
        return CompactReport(None)
    log_chain = ancestry(spark, log_name)
    if not log_chain:
        return CompactReport(None)
    tables = sorted(config.tables) if config.tables is not None else _log_tables(spark, log_name)
    now_ms = config.now_ms if config.now_ms is not None else int(time.time() * 1000)
    updated_at = datetime.fromtimestamp(now_ms / 1000, UTC)
    results = tuple(compact_table(spark, config, t, log_chain, schemas.get(t), updated_at) for t in tables)
    return CompactReport(log_chain[0].snapshot_id, results)
