"""The flush job: DynamoDB buffer -> the Iceberg delta log, exactly once (docs/lake.md).

One run:

1. takes the flush lease (refuses to run while another run holds it);
2. ensures the delta-log table, reads the committed watermarks (walking back from the current snapshot through the
   ancestors carrying ``lakesync.flush.watermarks``, greatest per shard) and the shard heads;
3. plans, per shard, the entries ``(max(watermark, flushedSeq), head.seq]`` (capped by ``max_deltas_per_run``);
4. reads those ranges in parallel on the executors and appends them in ONE Iceberg commit whose snapshot carries the
   watermarks of every shard (unchanged shards carried forward);
5. then advances the heads' flushed counters, clears the flush requests recorded before the run started, and
   releases buffer items (flushed, covered by the latest checkpoints' positions and ``serverHlc``, and older than the
   retention).

Invariants: the delta log holds each buffer entry at most once, because a run only appends entries above the
watermarks of the snapshot it read, and only one run appends at a time (the lease, renewed right before the append,
plus a check that no other flush snapshot landed in between). It holds every flushed entry at least once, because the
heads (and with them release) only advance after the append committed. A crash anywhere is repaired by the next run:
before the append nothing was written; after it, the snapshot's watermarks are ahead of the heads and the next run
advances the heads without re-appending. No new entries -> no snapshot.

The transforms (:func:`delta_log_frame`, :func:`shard_figures`, :func:`plan_flush`) do no I/O; :func:`run` composes
them with the reads and writes.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Literal

from pyspark import StorageLevel
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lakesync.aws.checkpoints import ReleaseBounds, read_release_bounds
from lakesync.aws.flush_store import DynamoConfig, FlushStore, LogRecord, ShardRange
from lakesync.aws.tables import TableNames
from lakesync.core.errors import FlushError
from lakesync.core.hlc import system_clock
from lakesync.gateway.model import ShardHead, ShardId
from lakesync.lake.tables import DELTA_LOG, FLUSH_WATERMARKS, NAMESPACE, delta_log_ddl, qualified

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "DELTA_LOG_SCHEMA",
    "FAIL_POINTS",
    "FLUSH_RUN",
    "JOB_OPTIONS",
    "RECORD_SCHEMA",
    "FlushConfig",
    "FlushJobArgs",
    "FlushPlan",
    "FlushReport",
    "InjectedFailure",
    "ShardPlan",
    "append_records",
    "delta_log_frame",
    "plan_flush",
    "read_records",
    "read_watermarks",
    "records_frame",
    "run",
    "shard_figures",
]

FLUSH_RUN = "lakesync.flush.run"
"""Snapshot summary property naming the flush run that wrote the snapshot."""

FAIL_POINTS = ("after_read", "after_append", "after_heads", "during_release")
"""Where ``run(fail_at=...)`` can simulate a crash."""

DAY_MS = 24 * 3600 * 1000
_TASK_ENTRIES = 1000

DELTA_LOG_SCHEMA = StructType(
    [
        StructField("gateway", StringType(), False),
        StructField("tbl", StringType(), False),
        StructField("row_id", StringType(), False),
        StructField("op", StringType(), False),
        StructField("client_id", StringType(), False),
        StructField("hlc", LongType(), False),
        StructField("delta_id", StringType(), False),
        StructField(
            "columns",
            ArrayType(
                StructType([StructField("name", StringType(), True), StructField("value", StringType(), True)]),
                True,
            ),
            False,
        ),
        StructField("shard", StringType(), False),
        StructField("seq", LongType(), False),
        StructField("commit_hlc", LongType(), False),
        StructField("commit_ts", TimestampType(), False),
    ]
)
"""The delta log's columns, as :func:`lakesync.lake.tables.delta_log_ddl` declares them."""

RECORD_SCHEMA = StructType(
    [
        *(f for f in DELTA_LOG_SCHEMA.fields if f.name != "commit_ts"),
        StructField("commit_ms", LongType(), False),
        StructField("size", LongType(), False),
    ]
)
"""Records as read from the buffer (:data:`lakesync.aws.flush_store.LogRecord`)."""


class InjectedFailure(RuntimeError):
    """A crash simulated by ``run(fail_at=...)``."""


@dataclass(frozen=True, slots=True)
class FlushConfig:
    """What one flush run does.

    Attributes:
        dynamodb: How to reach the buffer (picklable; executors build their own clients from it).
        catalog: The Spark catalog holding the lake.
        namespace: The namespace of the delta log (``lakesync``; tests use their own).
        gateways: Flush only these gateways; None means every gateway.
        retention_ms: Flushed items younger than this stay in the buffer (cursors and ``since`` pulls keep working).
        max_deltas_per_run: Cap on the entries one run appends (spread evenly over the shards); None = no cap.
        lease_ttl_ms: How long the lease outlives its last renewal (must exceed the longest append).
        range_size: Most entries one executor task reads.
    """

    dynamodb: DynamoConfig
    catalog: str = "lake"
    namespace: str = NAMESPACE
    gateways: tuple[str, ...] | None = None
    retention_ms: int = DAY_MS
    max_deltas_per_run: int | None = None
    lease_ttl_ms: int = 30 * 60 * 1000
    range_size: int = 5000

    @property
    def table(self) -> str:
        """The delta log's qualified name."""
        return f"{self.catalog}.{self.namespace}.{DELTA_LOG}"


JOB_OPTIONS = (
    "tables",
    "table_prefix",
    "warehouse",
    "catalog",
    "catalog_name",
    "catalog_uri",
    "gateways",
    "retention_ms",
    "max_deltas_per_run",
    "dynamodb_endpoint",
    "region",
    "checkpoint_bucket",
    "s3_endpoint",
)
"""Options of the flush job script (``--name value``); only ``warehouse`` and one of ``tables``/``table_prefix`` are
required. Without ``checkpoint_bucket`` nothing is released from the buffer."""


@dataclass(frozen=True, slots=True)
class FlushJobArgs:
    """The flush job's arguments: where the lake is and what to flush.

    Attributes:
        config: The run's configuration.
        warehouse: ``s3://`` URI (Glue catalog) or a local directory.
        catalog_kind: ``glue`` (the Glue Data Catalog) or ``local`` (a sqlite catalog, ``catalog_uri``).
        catalog_uri: The local catalog's sqlite file.
        checkpoint_bucket: The S3 bucket of the checkpoints, whose latest manifests bound the release; ``None``
            releases nothing.
        s3_endpoint: S3 endpoint override (locally, the moto server); the region is ``config.dynamodb.region``.
    """

    config: FlushConfig
    warehouse: str
    catalog_kind: Literal["local", "glue"] = "glue"
    catalog_uri: str | None = None
    checkpoint_bucket: str | None = None
    s3_endpoint: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> FlushJobArgs:
        """Build from job options (names of :data:`JOB_OPTIONS`; absent options take their defaults).

        ``tables`` is JSON ``{"deltas": name, ...}`` with every logical table; ``table_prefix`` names them
        ``{prefix}-deltas`` etc. instead. ``gateways`` is comma-separated (absent: every gateway).

        Raises:
            ValueError: a required option is missing or a value is malformed.
        """
        if "warehouse" not in options:
            raise ValueError("--warehouse is required")
        if "tables" in options:
            tables = TableNames(**json.loads(options["tables"]))
        elif "table_prefix" in options:
            tables = TableNames.with_prefix(options["table_prefix"])
        else:
            raise ValueError("--tables (JSON) or --table_prefix is required")
        kind = options.get("catalog", "glue")
        if kind not in ("local", "glue"):
            raise ValueError(f"--catalog must be local or glue, got {kind!r}")
        gateways = options.get("gateways")
        config = FlushConfig(
            dynamodb=DynamoConfig(tables, endpoint_url=options.get("dynamodb_endpoint"), region=options.get("region")),
            catalog=options.get("catalog_name", "lake"),
            gateways=tuple(g for g in gateways.split(",") if g) if gateways else None,
            retention_ms=int(options.get("retention_ms", DAY_MS)),
            max_deltas_per_run=int(options["max_deltas_per_run"]) if "max_deltas_per_run" in options else None,
        )
        return cls(
            config,
            options["warehouse"],
            "local" if kind == "local" else "glue",
            options.get("catalog_uri"),
            checkpoint_bucket=options.get("checkpoint_bucket"),
            s3_endpoint=options.get("s3_endpoint"),
        )

    def release_bounds(self) -> ReleaseBounds:
        """What the latest checkpoints in ``checkpoint_bucket`` let this run release (of its gateways, or of every
        gateway with checkpoints); empty bounds without a bucket."""
        return read_release_bounds(
            self.checkpoint_bucket,
            self.config.gateways,
            endpoint_url=self.s3_endpoint,
            region_name=self.config.dynamodb.region,
        )


@dataclass(frozen=True, slots=True)
class FlushReport:
    """What a run did.

    Attributes:
        run_id: The run's id (lease owner, snapshot property ``lakesync.flush.run``).
        snapshot_id: The appended snapshot, or None when there was nothing to append.
        deltas: Entries appended.
        bytes: Their stored size in the buffer.
        shards: Shards with entries appended.
        heads_advanced: Heads whose flushed counters moved (including repairs of a crashed run).
        requests_cleared: Flush requests deleted.
        released: Log items deleted from the buffer.
        watermarks: The committed watermarks after the run.
        durations_ms: Milliseconds per step (lease, plan, read, append, heads, requests, release, total).
    """

    run_id: str
    snapshot_id: int | None
    deltas: int
    bytes: int
    shards: int
    heads_advanced: int
    requests_cleared: int
    released: int
    watermarks: Mapping[str, int]
    durations_ms: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ShardPlan:
    """One shard's part of a run: entries ``(start, end]`` are appended; the head moves from ``head.flushed_seq``
    to ``end``."""

    head: ShardHead
    start: int
    end: int

    @property
    def shard(self) -> ShardId:
        """The shard."""
        return self.head.shard

    @property
    def deltas(self) -> int:
        """Entries to append."""
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class FlushPlan:
    """What a run appends and the watermarks its snapshot will carry."""

    shards: tuple[ShardPlan, ...]
    watermarks: Mapping[str, int]

    @property
    def deltas(self) -> int:
        """Entries to append."""
        return sum(p.deltas for p in self.shards)

    def ranges(self, range_size: int) -> list[ShardRange]:
        """The appended entries cut into ranges of at most ``range_size`` (one executor task each)."""
        out = []
        for plan in self.shards:
            for lo in range(plan.start, plan.end, range_size):
                out.append(ShardRange(plan.shard.key, lo, min(lo + range_size, plan.end)))
        return out


def plan_flush(
    watermarks: Mapping[str, int], heads: Mapping[ShardId, ShardHead], max_deltas: int | None = None
) -> FlushPlan:
    """Plan a run from the last committed watermarks and the shard heads (pure).

    Each shard is read from ``max(watermark, flushedSeq)`` to its head. With ``max_deltas`` the entries are shared
    out evenly (a shard with fewer pending entries leaves its share to the others), so no shard starves.
    """
    for shard, head in heads.items():
        if watermarks.get(shard.key, 0) > head.seq:
            raise FlushError(
                f"the delta log holds shard {shard.key!r} up to {watermarks[shard.key]} but its head is at {head.seq}:"
                " was the buffer recreated under a lake that already holds its shards?"
            )
    starts = {s: max(watermarks.get(s.key, 0), h.flushed_seq) for s, h in heads.items()}
    pending = {s: max(0, heads[s].seq - start) for s, start in starts.items()}
    take = dict(pending)
    if max_deltas is not None and sum(pending.values()) > max_deltas:
        remaining = max(0, max_deltas)
        ordered = sorted(pending, key=lambda s: (pending[s], s))
        for i, shard in enumerate(ordered):
            take[shard] = min(pending[shard], remaining // (len(ordered) - i))
            remaining -= take[shard]
    plans = tuple(ShardPlan(heads[s], starts[s], starts[s] + take[s]) for s in sorted(heads))
    new_marks = dict(watermarks)
    for plan in plans:
        if plan.end > 0:
            new_marks[plan.shard.key] = max(new_marks.get(plan.shard.key, 0), plan.end)
    return FlushPlan(plans, dict(sorted(new_marks.items())))


def delta_log_frame(records: DataFrame) -> DataFrame:
    """Buffer records (:data:`RECORD_SCHEMA`) as delta-log rows (the columns of :data:`DELTA_LOG_SCHEMA`)."""
    columns = [
        F.timestamp_millis("commit_ms").alias(name) if name == "commit_ts" else F.col(name)
        for name in DELTA_LOG_SCHEMA.fieldNames()
    ]
    return records.select(*columns)


def shard_figures(records: DataFrame) -> DataFrame:
    """Per shard: ``shard, deltas, bytes, first_seq, last_seq`` of the records."""
    return records.groupBy("shard").agg(
        F.count(F.lit(1)).alias("deltas"),
        F.sum("size").alias("bytes"),
        F.min("seq").alias("first_seq"),
        F.max("seq").alias("last_seq"),
    )


def _read_partition(config: DynamoConfig, ranges: Iterable[ShardRange]) -> Iterator[LogRecord]:
    """Executor side: one client per task; every range is read completely or the task fails."""
    store: FlushStore | None = None
    for shard_range in ranges:
        store = store or FlushStore.from_config(config)
        yield from store.read_records(shard_range)


def _json_line(record: LogRecord) -> str:
    return json.dumps(record, separators=(",", ":"))


def records_frame(spark: SparkSession, records: RDD[LogRecord]) -> DataFrame:
    """Buffer records as a DataFrame of :data:`RECORD_SCHEMA` (lazy). They travel from the Python workers to the JVM
    as JSON lines (far cheaper than pickled rows)."""
    lines = records.map(_json_line)
    return spark.read.schema(RECORD_SCHEMA).option("mode", "FAILFAST").json(lines)


def read_records(spark: SparkSession, config: DynamoConfig, ranges: Sequence[ShardRange]) -> DataFrame:
    """The ranges read from the buffer on the executors, as a DataFrame of :data:`RECORD_SCHEMA` (lazy)."""
    sc = spark.sparkContext
    # Enough tasks to keep every core busy, but none for fewer than _TASK_ENTRIES entries (each builds a client).
    entries = sum(r.size for r in ranges)
    slices = max(1, min(len(ranges), 4 * sc.defaultParallelism, -(-entries // _TASK_ENTRIES)))
    return records_frame(spark, sc.parallelize(list(ranges), slices).mapPartitions(partial(_read_partition, config)))


def _parse_watermarks(text: str) -> dict[str, int]:
    data = json.loads(text)
    if not isinstance(data, dict) or not all(isinstance(k, str) and type(v) is int for k, v in data.items()):
        raise FlushError(f"malformed {FLUSH_WATERMARKS} snapshot property: {text[:200]!r}")
    return data


@dataclass(frozen=True, slots=True)
class _Snapshot:
    parent: int | None
    operation: str
    watermarks: str | None
    run_id: str | None


def _snapshots(spark: SparkSession, table: str) -> dict[int, _Snapshot]:
    rows = spark.sql(
        f"SELECT snapshot_id, parent_id, operation, summary['{FLUSH_WATERMARKS}'], summary['{FLUSH_RUN}']"
        f" FROM {table}.snapshots"
    ).collect()
    return {int(r[0]): _Snapshot(r[1], str(r[2]), r[3], r[4]) for r in rows}


def _ancestry(snapshots: Mapping[int, _Snapshot], start: int | None) -> Iterator[tuple[int, _Snapshot]]:
    while start is not None and start in snapshots:
        yield start, snapshots[start]
        start = snapshots[start].parent


def read_watermarks(spark: SparkSession, table: str) -> tuple[dict[str, int], int | None]:
    """The committed watermarks and the current snapshot id.

    Walks back from the current snapshot through its ancestors that carry ``lakesync.flush.watermarks`` and takes
    each shard's greatest value: normally the nearest such snapshot has them all (flush appends carry every shard,
    maintenance rewrites carry them forward), and a rewrite that carried a copy older than a flush that committed
    meanwhile cannot pull a watermark back.
    """
    refs = spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'main'").collect()
    if not refs:
        return {}, None
    current = int(refs[0][0])
    marks: dict[str, int] = {}
    for _, snapshot in _ancestry(_snapshots(spark, table), current):
        if snapshot.watermarks is not None:
            for shard, seq in _parse_watermarks(snapshot.watermarks).items():
                marks[shard] = max(marks.get(shard, 0), seq)
    return dict(sorted(marks.items())), current


def _ensure_table(spark: SparkSession, config: FlushConfig) -> None:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {config.catalog}.{config.namespace}")
    ddl = delta_log_ddl(config.catalog).replace(qualified(config.catalog, DELTA_LOG), config.table, 1)
    spark.sql(ddl)


def _append(records: DataFrame, table: str, run_id: str, watermarks: Mapping[str, int]) -> None:
    (
        delta_log_frame(records)
        .writeTo(table)
        .option(f"snapshot-property.{FLUSH_WATERMARKS}", json.dumps(dict(watermarks), separators=(",", ":")))
        .option(f"snapshot-property.{FLUSH_RUN}", run_id)
        .append()
    )


def append_records(
    spark: SparkSession,
    records: DataFrame,
    plan: FlushPlan,
    table: str,
    run_id: str,
    base_snapshot: int | None,
    *,
    before_append: Callable[[], None] | None = None,
) -> tuple[int, dict[str, tuple[int, int]]]:
    """The flush's write side: stage the read records, check them against the plan, append them as delta-log rows.

    The records are cached and counted per shard (every planned range must be there whole), then appended in ONE
    commit whose snapshot carries ``plan.watermarks`` and the run id, and that snapshot is checked to follow
    ``base_snapshot`` with no other flush in between.

    Args:
        spark: The session.
        records: The records of the planned ranges (:data:`RECORD_SCHEMA`, e.g. from :func:`read_records`).
        plan: The run's plan.
        table: The delta log's qualified name.
        run_id: The run id recorded on the snapshot.
        base_snapshot: The delta-log snapshot the plan was made from.
        before_append: Called after the check, right before the append (the job renews its lease there).

    Returns:
        The new snapshot id and, per shard, ``(entries, bytes)`` appended.

    Raises:
        FlushError: the records differ from the plan, or another flush committed since ``base_snapshot``.
    """
    records.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        figures = {
            r["shard"]: (r["deltas"], r["bytes"], r["first_seq"], r["last_seq"])
            for r in shard_figures(records).collect()
        }
        _check_figures(plan, figures)
        if before_append is not None:
            before_append()
        _append(records, table, run_id, plan.watermarks)
    finally:
        records.unpersist()
    return _our_snapshot(spark, table, run_id, base_snapshot), {s: (f[0], f[1]) for s, f in figures.items()}


def _our_snapshot(spark: SparkSession, table: str, run_id: str, base_snapshot: int | None) -> int:
    """Our snapshot's id; fails if another flush appended between the snapshot we planned from and ours."""
    snapshots = _snapshots(spark, table)
    ours = next((sid for sid, snap in snapshots.items() if snap.run_id == run_id), None)
    if ours is None:
        raise FlushError(f"the flush snapshot of run {run_id} is not in the history of {table}")
    for sid, snap in _ancestry(snapshots, snapshots[ours].parent):
        if sid == base_snapshot:
            break
        # Maintenance rewrites ("replace") carry watermarks too; only another append is another flush.
        if snap.operation == "append" and snap.watermarks is not None:
            raise FlushError(
                f"another flush (snapshot {sid}) committed to {table} during run {run_id}; "
                "the delta log may hold entries twice: check the flush lease and concurrency settings"
            )
    return ours


class _Steps:
    """Step timings and the crash hook."""

    def __init__(self, fail_at: str | None) -> None:
        if fail_at is not None and fail_at not in FAIL_POINTS:
            raise ValueError(f"fail_at must be one of {FAIL_POINTS}, got {fail_at!r}")
        self.fail_at = fail_at
        self.started = time.perf_counter()
        self.last = self.started
        self.durations: dict[str, int] = {}

    def done(self, step: str) -> None:
        now = time.perf_counter()
        self.durations[step] = self.durations.get(step, 0) + round((now - self.last) * 1000)
        self.last = now

    def point(self, name: str) -> None:
        if self.fail_at == name:
            raise InjectedFailure(f"simulated crash {name}")

    def total(self) -> dict[str, int]:
        return {**self.durations, "total": round((time.perf_counter() - self.started) * 1000)}


def run(
    spark: SparkSession,
    config: FlushConfig,
    *,
    checkpoint_positions: Mapping[str, int] | None = None,
    checkpoint_hlcs: Mapping[str, int] | None = None,
    now_ms: Callable[[], int] = system_clock,
    fail_at: str | None = None,
    store: FlushStore | None = None,
) -> FlushReport:
    """Flush the buffer into the delta log once.

    Args:
        spark: A session whose catalog ``config.catalog`` holds the lake.
        config: What to flush and how.
        checkpoint_positions: ``{shard: seq}`` covered by the latest checkpoints; only entries at or below them are
            released. None releases nothing.
        checkpoint_hlcs: ``{shard: serverHlc}`` of those checkpoints; only entries committed at or below it are
            released, so a client resuming ``since`` a checkpoint's ``serverHlc`` is never behind the release
            (:meth:`~lakesync.core.checkpoint.Manifest.releasable`). None: no such bound (callers with positions
            only); :class:`~lakesync.aws.checkpoints.ReleaseBounds` has both.
        now_ms: The wall clock (epoch ms), for the lease, the flush requests and the retention.
        fail_at: Simulate a crash at one of :data:`FAIL_POINTS` (tests).
        store: The driver's store (defaults to one built from ``config.dynamodb``).

    Returns:
        What the run did.

    Raises:
        FlushError: another run holds the lease, the lease was lost, the log has a gap, or the heads moved.
        InjectedFailure: at ``fail_at``.
    """
    steps = _Steps(fail_at)
    store = store or FlushStore.from_config(config.dynamodb)
    run_id = uuid.uuid4().hex
    started_ms = now_ms()
    if not store.acquire_lease(run_id, started_ms, config.lease_ttl_ms):
        lease = store.lease()
        until = f" until {lease.until_ms}" if lease else ""
        raise FlushError(f"Flush already in progress (lease held by {lease.owner if lease else '?'}{until})")
    steps.done("lease")
    try:
        _ensure_table(spark, config)
        watermarks, base_snapshot = read_watermarks(spark, config.table)
        gateways, heads = store.shards(config.gateways)
        plan = plan_flush(watermarks, heads, config.max_deltas_per_run)
        steps.done("plan")

        snapshot_id: int | None = None
        appended: dict[str, tuple[int, int]] = {}
        if plan.deltas:

            def before_append() -> None:
                steps.done("read")
                steps.point("after_read")
                if not store.renew_lease(run_id, now_ms(), config.lease_ttl_ms):
                    raise FlushError(f"flush run {run_id} lost its lease before the append; nothing was written")

            records = read_records(spark, config.dynamodb, plan.ranges(config.range_size))
            snapshot_id, appended = append_records(
                spark, records, plan, config.table, run_id, base_snapshot, before_append=before_append
            )
            steps.done("append")
            steps.point("after_append")

        advanced = _advance_heads(store, plan, appended)
        steps.done("heads")
        steps.point("after_heads")

        cleared = store.clear_flush_requests(gateways, started_ms)
        steps.done("requests")

        released = _release(store, config, plan, checkpoint_positions or {}, checkpoint_hlcs, now_ms(), steps)
        steps.done("release")
        return FlushReport(
            run_id=run_id,
            snapshot_id=snapshot_id,
            deltas=plan.deltas,
            bytes=sum(b for _, b in appended.values()),
            shards=len(appended),
            heads_advanced=advanced,
            requests_cleared=cleared,
            released=released,
            watermarks=plan.watermarks if snapshot_id is not None else watermarks,
            durations_ms=steps.total(),
        )
    finally:
        store.release_lease(run_id)


def _check_figures(plan: FlushPlan, figures: Mapping[str, tuple[int, int, int, int]]) -> None:
    """Every planned range was read whole: per shard, the count and the first and last sequence match."""
    want = {p.shard.key: (p.deltas, p.start + 1, p.end) for p in plan.shards if p.deltas}
    got = {shard: (f[0], f[2], f[3]) for shard, f in figures.items()}
    if got != want:
        raise FlushError(f"the staged entries (count, first, last seq) per shard {got} differ from the plan {want}")


def _advance_heads(store: FlushStore, plan: FlushPlan, appended: Mapping[str, tuple[int, int]]) -> int:
    """Move each head's flushed counters to what the delta log now holds."""
    advanced = 0
    for shard_plan in plan.shards:
        head = shard_plan.head
        if shard_plan.end <= head.flushed_seq:
            continue
        deltas, size = appended.get(head.shard.key, (0, 0))
        if shard_plan.start > head.flushed_seq:
            # A crashed run appended (flushedSeq, start] but did not advance the head: count those too.
            size += store.range_bytes(ShardRange(head.shard.key, head.flushed_seq, shard_plan.start))
            deltas += shard_plan.start - head.flushed_seq
        if store.advance_flushed(head.shard, head.flushed_seq, shard_plan.end, size, deltas):
            advanced += 1
    return advanced


def _release(
    store: FlushStore,
    config: FlushConfig,
    plan: FlushPlan,
    positions: Mapping[str, int],
    hlcs: Mapping[str, int] | None,
    now: int,
    steps: _Steps,
) -> int:
    """Mark and delete the items that are flushed, covered by the checkpoint (position and HLC) and older than the
    retention."""
    retention_hlc = ((now - config.retention_ms) << 16) | 0xFFFF
    deleted = 0
    for shard_plan in plan.shards:
        head = shard_plan.head
        released = head.released_seq
        limit = min(max(head.flushed_seq, shard_plan.end), positions.get(head.shard.key, 0))
        cutoff_hlc = retention_hlc if hlcs is None else min(retention_hlc, hlcs.get(head.shard.key, 0))
        if limit > released:
            target = store.release_target(head.shard, limit, cutoff_hlc)
            if target is not None and target[0] > released:
                store.mark_released(head.shard, *target)
                released = target[0]
                steps.point("during_release")
        if released:
            # Also deletes what a run that crashed after marking left behind.
            deleted += store.delete_released(head.shard, released)
    return deleted
