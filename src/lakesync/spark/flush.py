"""The flush on Spark, the Glue job's engine: DynamoDB buffer -> the Iceberg delta log, exactly once (docs/lake.md).

The run itself -- lease, plan, heads, publish, release, and the invariants -- is :func:`lakesync.lake.flush.run_flush`;
this module is its Spark engine (:class:`SparkDeltaLog`) and the Glue job's arguments. The write is one Spark job in
which every task reads its ranges on an executor (each whole, or the task fails), turns them into Arrow batches and
writes its Parquet files; Iceberg commits the files of exactly one successful attempt per task, so the commit holds
every planned entry once or, if any task failed, nothing is committed. The heads' byte counters come from a tally of
the reads that merges by set union per range, so a retried or speculative task cannot count a range twice. The lease
is renewed during the write, and the write's jobs are cancelled once it is lost (:func:`keep_lease`).

The transforms (:func:`plan_flush`, :func:`range_figures`, :func:`record_batches`, :func:`delta_log_frame`) do no I/O;
:func:`run` composes them with the reads and writes.
"""

from __future__ import annotations

import gc
import logging
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Literal

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.accumulators import Accumulator, AccumulatorParam
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
from lakesync.aws.flush_store import DynamoConfig, FlushStore, ShardRange
from lakesync.aws.publish import JobSink, PublishConfig
from lakesync.core.errors import FlushError
from lakesync.core.hlc import system_clock
from lakesync.lake.flush import (
    _ARROW_BATCH,
    DAY_MS,
    FAIL_POINTS,
    FLUSH_RUN,
    RECORD_ARROW_SCHEMA,
    FlushConfig,
    FlushPlan,
    FlushReport,
    InjectedFailure,
    LeaseGuard,
    RangeFigures,
    RangeReader,
    ShardPlan,
    SnapshotInfo,
    check_ranges,
    flush_when_free,
    fold_watermarks,
    our_snapshot,
    plan_flush,
    range_figures,
    record_batches,
    run_flush,
    watermarks_property,
)
from lakesync.lake.tables import DELTA_LOG, FLUSH_WATERMARKS, NAMESPACE, delta_log_ddl, qualified
from lakesync.spark.glue import buffer_tables, catalog_kind
from lakesync.spark.snapshots import table_snapshots

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_LEASE_WAIT_S",
    "DELTA_LOG_SCHEMA",
    "FAIL_POINTS",
    "FLUSH_RUN",
    "JOB_OPTIONS",
    "RECORD_ARROW_SCHEMA",
    "RECORD_SCHEMA",
    "FlushConfig",
    "FlushJobArgs",
    "FlushPlan",
    "FlushReport",
    "InjectedFailure",
    "RangeFigures",
    "RangeFrame",
    "RangeReader",
    "ReaderFactory",
    "ShardPlan",
    "SparkDeltaLog",
    "append_records",
    "delta_log_frame",
    "keep_lease",
    "plan_flush",
    "range_figures",
    "read_records",
    "read_watermarks",
    "record_batches",
    "records_frame",
    "run",
]

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


JOB_OPTIONS = (
    "tables",
    "table_prefix",
    "warehouse",
    "catalog",
    "catalog_name",
    "catalog_uri",
    "namespace",
    "gateways",
    "retention_ms",
    "max_deltas_per_run",
    "dynamodb_endpoint",
    "region",
    "checkpoint_bucket",
    "s3_endpoint",
    "rebase_shards",
    "claim_check_bucket",
    "materialise_queue_url",
    "lease_wait_s",
)
"""Options of the flush job script (``--name value``); only ``warehouse`` and one of ``tables``/``table_prefix`` are
required. Without ``checkpoint_bucket`` nothing is released from the buffer; without ``claim_check_bucket`` and
``materialise_queue_url`` nothing is published for materialisation."""

DEFAULT_LEASE_WAIT_S = 900.0
"""How long a flush job run waits for a lease another run holds (``--lease_wait_s``): the flush function's timeout,
the longest a run of the other engine holds it (the lake tick and the flush trigger may start the two engines at the
same instant; the later one then runs after the other instead of failing)."""


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
        lease_wait_s: How long to wait for a lease another run holds before failing.
    """

    config: FlushConfig
    warehouse: str
    catalog_kind: Literal["local", "glue"] = "glue"
    catalog_uri: str | None = None
    checkpoint_bucket: str | None = None
    s3_endpoint: str | None = None
    lease_wait_s: float = DEFAULT_LEASE_WAIT_S

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
        tables = buffer_tables(options)
        if tables is None:
            raise ValueError("--tables (JSON) or --table_prefix is required")
        kind = catalog_kind(options)
        gateways = options.get("gateways")
        bucket, queue_url = options.get("claim_check_bucket"), options.get("materialise_queue_url")
        if (bucket is None) != (queue_url is None):
            raise ValueError("--claim_check_bucket and --materialise_queue_url go together")
        publish = None
        if bucket is not None and queue_url is not None:
            publish = PublishConfig(
                bucket, queue_url, endpoint_url=options.get("s3_endpoint"), region=options.get("region")
            )
        config = FlushConfig(
            dynamodb=DynamoConfig(tables, endpoint_url=options.get("dynamodb_endpoint"), region=options.get("region")),
            catalog=options.get("catalog_name", "lake"),
            namespace=options.get("namespace", NAMESPACE),
            gateways=tuple(g for g in gateways.split(",") if g) if gateways else None,
            retention_ms=int(options.get("retention_ms", DAY_MS)),
            max_deltas_per_run=int(options["max_deltas_per_run"]) if "max_deltas_per_run" in options else None,
            rebase_shards=tuple(k for k in options.get("rebase_shards", "").split(",") if k),
            publish=publish,
        )
        return cls(
            config,
            options["warehouse"],
            kind,
            options.get("catalog_uri"),
            checkpoint_bucket=options.get("checkpoint_bucket"),
            s3_endpoint=options.get("s3_endpoint"),
            lease_wait_s=_non_negative(options.get("lease_wait_s", str(DEFAULT_LEASE_WAIT_S)), "--lease_wait_s"),
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


def delta_log_frame(records: DataFrame) -> DataFrame:
    """Buffer records (:data:`RECORD_SCHEMA`) as delta-log rows (the columns of :data:`DELTA_LOG_SCHEMA`)."""
    columns = [
        F.timestamp_millis("commit_ms").alias(name) if name == "commit_ts" else F.col(name)
        for name in DELTA_LOG_SCHEMA.fieldNames()
    ]
    return records.select(*columns)


ReaderFactory = Callable[[], RangeReader]
"""Builds a :data:`RangeReader` in an executor task (picklable; called once per task that has ranges)."""
Tally = dict[ShardRange, frozenset[RangeFigures]]
"""Per range read, the figures of every read of it: one element unless two reads disagreed."""


class _TallyParam(AccumulatorParam[Tally]):
    """Merges tallies by set union per range: idempotent, so a range read again (a retried or speculative task, a
    recomputed stage) with the same figures is counted once, and a read that disagrees shows as a second element."""

    def zero(self, value: Tally) -> Tally:
        return {}

    def addInPlace(self, value1: Tally, value2: Tally) -> Tally:
        for shard_range, figures in value2.items():
            value1[shard_range] = value1.get(shard_range, frozenset()) | figures
        return value1


def _read_ranges(
    ranges: Sequence[ShardRange],
    open_reader: ReaderFactory,
    tally: Accumulator[Tally],
    batch_size: int,
    batches: Iterable[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Executor side (``mapInArrow`` over the ranges' indexes): each range read whole, as Arrow batches; its figures
    tallied once all its batches were taken."""
    read: RangeReader | None = None
    for batch in batches:
        for index in batch.column(0).to_pylist():
            shard_range = ranges[index]
            read = read or open_reader()
            with _collector_paused():
                records = read(shard_range)
                figures = range_figures(shard_range, records)
                converted = list(record_batches(records, batch_size))
            del records
            yield from converted
            tally.add({shard_range: frozenset((figures,))})


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a range is read and converted: its records are acyclic (freed
    by reference counting), and the collections their allocations trigger would re-scan the worker's whole heap
    (pyspark, pyarrow, pandas, boto3). Any cyclic garbage waits for the next collection after the range."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _read_tasks(parallelism: int, ranges: Sequence[ShardRange]) -> int:
    """Enough tasks to keep every core busy, but none for fewer than ``_TASK_ENTRIES`` entries (each builds a
    client), and no more than needed: every task writes its own file per partition it meets."""
    entries = sum(r.size for r in ranges)
    return max(1, min(len(ranges), 4 * parallelism, -(-entries // _TASK_ENTRIES)))


def _store_reader(config: DynamoConfig) -> RangeReader:
    """One client per task: the job's :data:`ReaderFactory`."""
    return FlushStore.from_config(config).read_records


@dataclass(frozen=True, slots=True)
class RangeFrame:
    """The records of planned ranges as a lazy DataFrame of :data:`RECORD_SCHEMA`, with the tally its tasks fill.

    Nothing is read until the frame is computed (the append); :meth:`figures` reads the tally afterwards.
    """

    frame: DataFrame
    ranges: tuple[ShardRange, ...]
    tally: Accumulator[Tally]

    def figures(self) -> dict[str, tuple[int, int]]:
        """Per shard ``(entries, bytes)`` read, once the frame was computed.

        Raises:
            FlushError: a range was not read, was read with different figures, or was not planned.
        """
        tally = self.tally.value
        totals: dict[str, tuple[int, int]] = {}
        problems = [f"{r} not planned" for r in sorted(set(tally) - set(self.ranges))]
        for shard_range in self.ranges:
            reads = tally.get(shard_range, frozenset())
            if len(reads) != 1:
                problems.append(
                    f"{shard_range} read {len(reads)} different ways" if reads else f"{shard_range} not read"
                )
                continue
            (figures,) = reads
            if (figures.entries, figures.first_seq, figures.last_seq) != (
                shard_range.size,
                shard_range.lo + 1,
                shard_range.hi,
            ):
                problems.append(f"{shard_range} read as {figures}")
                continue
            entries, size = totals.get(shard_range.shard, (0, 0))
            totals[shard_range.shard] = (entries + figures.entries, size + figures.bytes)
        if problems:
            raise FlushError(f"the ranges read differ from the planned ones: {'; '.join(problems[:10])}")
        return totals


def records_frame(
    spark: SparkSession,
    ranges: Sequence[ShardRange],
    open_reader: ReaderFactory,
    *,
    batch_size: int = _ARROW_BATCH,
) -> RangeFrame:
    """The ranges, read on the executors by readers from ``open_reader``, as a lazy frame of :data:`RECORD_SCHEMA`.

    The ranges are cut into contiguous slices (so a task reads neighbouring ranges, mostly of one shard, and writes
    few partitions); each task turns the records it reads straight into Arrow batches (``mapInArrow``: no row
    pickling, no JSON). A range that is not read whole fails its task (:func:`range_figures`).
    """
    sc = spark.sparkContext
    ranges = tuple(ranges)
    tally: Accumulator[Tally] = sc.accumulator({}, _TallyParam())
    # The JVM makes the ranges' indexes in contiguous slices; no Python stage feeds the readers.
    indexes = spark.range(0, len(ranges), 1, _read_tasks(sc.defaultParallelism, ranges))
    with warnings.catch_warnings():
        # PySpark 3.5 checks the pandas version with distutils' deprecated LooseVersion on every mapInArrow.
        warnings.filterwarnings("ignore", "distutils Version classes are deprecated", DeprecationWarning)
        frame = indexes.mapInArrow(partial(_read_ranges, ranges, open_reader, tally, batch_size), RECORD_SCHEMA)
    return RangeFrame(frame, ranges, tally)


def read_records(spark: SparkSession, config: DynamoConfig, ranges: Sequence[ShardRange]) -> RangeFrame:
    """The ranges read from the buffer on the executors (one client per task), as a lazy :class:`RangeFrame`."""
    return records_frame(spark, ranges, partial(_store_reader, config))


def _snapshots(spark: SparkSession, table: str) -> tuple[dict[int, SnapshotInfo], int | None]:
    found = table_snapshots(spark, table)
    infos = {
        sid: SnapshotInfo(s.parent_id, s.operation, s.summary.get(FLUSH_WATERMARKS), s.summary.get(FLUSH_RUN))
        for sid, s in found.by_id.items()
    }
    return infos, found.current


def read_watermarks(spark: SparkSession, table: str) -> tuple[dict[str, int], int | None]:
    """The committed watermarks (:func:`~lakesync.lake.flush.fold_watermarks`) and the current snapshot id."""
    snapshots, current = _snapshots(spark, table)
    if current is None:
        return {}, None
    return fold_watermarks(snapshots, current), current


def _ensure_table(spark: SparkSession, config: FlushConfig) -> None:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {config.catalog}.{config.namespace}")
    ddl = delta_log_ddl(config.catalog).replace(qualified(config.catalog, DELTA_LOG), config.table, 1)
    spark.sql(ddl)


def _append(records: DataFrame, table: str, run_id: str, watermarks: Mapping[str, int]) -> None:
    (
        delta_log_frame(records)
        .writeTo(table)
        # Records arrive grouped by shard (one gateway and table) in commit order: each task writes its own
        # partitions' files (fanout: one open file per partition it meets) instead of a hash shuffle by partition.
        .option("distribution-mode", "none")
        .option("fanout-enabled", "true")
        .option(f"snapshot-property.{FLUSH_WATERMARKS}", watermarks_property(watermarks))
        .option(f"snapshot-property.{FLUSH_RUN}", run_id)
        .append()
    )


_WORKER_FLUSH_ERROR = re.compile(r"^(?:\S+\.)?FlushError: (.+)$", re.MULTILINE)


def append_records(
    spark: SparkSession,
    records: RangeFrame,
    plan: FlushPlan,
    table: str,
    run_id: str,
    base_snapshot: int | None,
    *,
    before_append: Callable[[], None] | None = None,
    around_append: Callable[[], AbstractContextManager[object]] | None = None,
) -> tuple[int, dict[str, tuple[int, int]]]:
    """The flush's write side: read the planned ranges and append them as delta-log rows, in ONE commit.

    Reading and writing are one Spark job: every task reads its ranges (each whole, or the task fails), converts them
    to Arrow and writes its Parquet files; Iceberg commits the files of exactly one successful attempt per task, so
    the commit holds every planned entry once or, if any task failed, nothing is committed. The snapshot carries
    ``plan.watermarks`` and the run id, and is checked to follow ``base_snapshot`` with no other flush in between.
    The per-shard figures come from the tally of the reads, checked against the ranges after the commit.

    Args:
        spark: The session.
        records: The planned ranges as a frame (from :func:`read_records` or :func:`records_frame`).
        plan: The run's plan.
        table: The delta log's qualified name.
        run_id: The run id recorded on the snapshot.
        base_snapshot: The delta-log snapshot the plan was made from.
        before_append: Called after checking the ranges against the plan, right before the Spark job (the job
            renews its lease there).
        around_append: Makes a context entered right before the Spark job and left when it has ended (the job keeps
            its lease renewed in it, :func:`keep_lease`).

    Returns:
        The new snapshot id and, per shard, ``(entries, bytes)`` appended.

    Raises:
        FlushError: the ranges do not cover the plan, a range could not be read whole (nothing was committed),
            another flush committed since ``base_snapshot``, or the tally disagrees with the ranges (after the
            commit: the heads are then not advanced, and the next run advances them from the buffer).
    """
    check_ranges(plan, records.ranges)
    if before_append is not None:
        before_append()
    try:
        with around_append() if around_append is not None else nullcontext():
            _append(records.frame, table, run_id, plan.watermarks)
    except Exception as exc:
        # A read task's FlushError (a range not whole) reaches the driver as a Spark error carrying its traceback.
        found = _WORKER_FLUSH_ERROR.search(str(exc))
        if found is None:
            raise
        raise FlushError(f"a read task failed, nothing was committed: {found.group(1)}") from exc
    snapshot_id = _our_snapshot(spark, table, run_id, base_snapshot)
    return snapshot_id, records.figures()


_JOB_GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


class _LeaseKeeper:
    """Renews the lease every ``every_s`` seconds from a thread until stopped. Once a renewal fails (the lease expired
    or was taken) it stops renewing and calls ``on_lost`` on that tick and every later one (cancelling the jobs
    started since, too); a renewal that raises is retried at the next tick (the lease outlives two missed ticks)."""

    def __init__(self, renew: Callable[[], bool], every_s: float, on_lost: Callable[[], None]) -> None:
        self._renew = renew
        self._every_s = every_s
        self._on_lost = on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name="lakesync-flush-lease", daemon=True)
        self.lost = False

    def _keep(self) -> None:
        while not self._stop.wait(self._every_s):
            if not self.lost:
                try:
                    self.lost = not self._renew()
                except Exception:  # a transient DynamoDB error: the next tick tries again
                    continue
            if self.lost:
                self._on_lost()

    def __enter__(self) -> _LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def keep_lease(spark: SparkSession, run_id: str, renew: Callable[[], bool], every_s: float) -> Iterator[None]:
    """Keep the flush lease while the Spark jobs started in this block run: renew it every ``every_s`` seconds and,
    once a renewal fails, cancel those jobs (on every tick until the block ends), so a write that outlives its lease
    fails before its commit.

    Raises:
        FlushError: the lease was lost: the block's jobs were cancelled, or (a job that ended before a tick could
            cancel it) its append committed anyway; either way the run must not go on to the heads.
    """
    sc = spark.sparkContext
    group = f"lakesync-flush-{run_id}"
    saved = {key: sc.getLocalProperty(key) for key in _JOB_GROUP_PROPERTIES}
    sc.setJobGroup(group, f"lakesync flush {run_id}", interruptOnCancel=False)
    keeper = _LeaseKeeper(renew, every_s, partial(sc.cancelJobGroup, group))
    try:
        with keeper:
            yield
    except Exception as exc:
        if keeper.lost:
            raise FlushError(f"flush run {run_id} lost its lease during the write; the write was cancelled") from exc
        raise
    else:
        if keeper.lost:
            raise FlushError(
                f"flush run {run_id} lost its lease during the write, which committed before it could be cancelled;"
                " the heads were not advanced (the next run does it)"
            )
    finally:
        for key, value in saved.items():  # the caller's job group, if any, again
            sc.setLocalProperty(key, value)  # type: ignore[arg-type]


def _our_snapshot(spark: SparkSession, table: str, run_id: str, base_snapshot: int | None) -> int:
    """Our snapshot's id; fails if another flush appended between the snapshot we planned from and ours."""
    return our_snapshot(_snapshots(spark, table)[0], table, run_id, base_snapshot)


class SparkDeltaLog:
    """The Spark engine of :func:`~lakesync.lake.flush.run_flush`: the delta log in ``config.catalog`` of ``spark``,
    written by one Spark job whose tasks read the buffer (:func:`read_records`, :func:`append_records`)."""

    def __init__(self, spark: SparkSession, config: FlushConfig) -> None:
        self._spark = spark
        self._config = config

    def ensure_table(self) -> None:
        _ensure_table(self._spark, self._config)

    def read_watermarks(self) -> tuple[dict[str, int], int | None]:
        return read_watermarks(self._spark, self._config.table)

    def commit_hlcs(self, positions: Mapping[str, int]) -> dict[str, int]:
        where = " OR ".join(
            f"(shard = '{key.replace(chr(39), chr(39) * 2)}' AND seq = {int(seq)})" for key, seq in positions.items()
        )
        rows = self._spark.sql(f"SELECT shard, commit_hlc FROM {self._config.table} WHERE {where}").collect()
        return {r[0]: int(r[1]) for r in rows}

    def append(
        self, plan: FlushPlan, ranges: Sequence[ShardRange], run_id: str, base_snapshot: int | None, lease: LeaseGuard
    ) -> tuple[int, dict[str, tuple[int, int]]]:
        records = read_records(self._spark, self._config.dynamodb, ranges)
        return append_records(
            self._spark,
            records,
            plan,
            self._config.table,
            run_id,
            base_snapshot,
            before_append=lease.before_append,
            around_append=lambda: keep_lease(self._spark, run_id, lease.renew, lease.every_s),
        )


def run(
    spark: SparkSession,
    config: FlushConfig,
    *,
    checkpoint_positions: Mapping[str, int] | None = None,
    checkpoint_hlcs: Mapping[str, int] | None = None,
    now_ms: Callable[[], int] = system_clock,
    fail_at: str | None = None,
    store: FlushStore | None = None,
    sink: JobSink | None = None,
    lease_wait_s: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
) -> FlushReport:
    """Flush the buffer into the delta log once, on Spark (:func:`~lakesync.lake.flush.run_flush` with
    :class:`SparkDeltaLog`; the arguments are its own), waiting up to ``lease_wait_s`` for a lease another run holds
    (:func:`~lakesync.lake.flush.flush_when_free`)."""
    deadline = time.monotonic() + lease_wait_s
    return flush_when_free(
        lambda: run_flush(
            SparkDeltaLog(spark, config),
            config,
            checkpoint_positions=checkpoint_positions,
            checkpoint_hlcs=checkpoint_hlcs,
            now_ms=now_ms,
            fail_at=fail_at,
            store=store,
            sink=sink,
        ),
        may_wait=lambda wait_s: time.monotonic() + wait_s <= deadline,
        sleep=sleep,
    )


def _non_negative(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {text!r}") from None
    if not value >= 0:
        raise ValueError(f"{name} must be 0 or more, got {text!r}")
    return value
