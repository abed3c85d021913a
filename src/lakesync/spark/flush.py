"""The flush job: DynamoDB buffer -> the Iceberg delta log, exactly once (docs/lake.md).

One run:

1. takes the flush lease (refuses to run while another run holds it);
2. ensures the delta-log table, reads the committed watermarks (walking back from the current snapshot through the
   ancestors carrying ``lakesync.flush.watermarks``, greatest per shard) and the shard heads;
3. plans, per shard, the entries ``(max(watermark, flushedSeq), head.seq]`` (capped by ``max_deltas_per_run``);
4. reads those ranges in parallel on the executors and appends them in ONE Iceberg commit whose snapshot carries the
   watermarks of every shard (unchanged shards carried forward): one Spark job in which every task reads its ranges,
   turns them into Arrow batches and writes its Parquet files;
5. then advances the heads' flushed counters, publishes materialisation jobs for every committed range not yet
   published (:mod:`lakesync.aws.publish`; a failure there never fails the run), clears the flush requests recorded
   before the run started, and releases buffer items (flushed, published, covered by the latest checkpoints'
   positions and ``serverHlc``, and older than the retention).

Invariants: the delta log holds each buffer entry at most once, because a run only appends entries above the
watermarks of the snapshot it read, and only one run appends at a time (the lease, renewed right before the write
and during it -- a write whose lease could not be renewed is cancelled -- plus a check that no other flush snapshot
landed in between). A commit holds every planned entry: the ranges cover the
plan (checked before the write), a task fails unless each of its ranges was read whole, and Iceberg commits the
files of exactly one successful attempt per task. The log holds every flushed entry at least once, because the heads
(and with them release) only advance after the append committed. The heads' byte counters come from a tally of the
reads that merges by set union per range, so a retried or speculative task cannot count a range twice. A crash
anywhere is repaired by the next run: before the commit nothing was written; after it, the snapshot's watermarks are
ahead of the heads and the next run advances the heads without re-appending. No new entries -> no snapshot.

The transforms (:func:`plan_flush`, :func:`range_figures`, :func:`record_batches`, :func:`delta_log_frame`) do no I/O;
:func:`run` composes them with the reads and writes.
"""

from __future__ import annotations

import gc
import json
import logging
import re
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from itertools import pairwise
from typing import TYPE_CHECKING, Literal, NamedTuple

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
from lakesync.aws.flush_store import DynamoConfig, FlushStore, LogRecord, ShardRange
from lakesync.aws.publish import ClaimCheckSink, JobSink, PublishConfig, PublishReport, publish_flushed
from lakesync.aws.tables import TableNames
from lakesync.core.errors import FlushError
from lakesync.core.hlc import system_clock
from lakesync.gateway.model import ShardHead, ShardId
from lakesync.lake.tables import DELTA_LOG, FLUSH_WATERMARKS, NAMESPACE, delta_log_ddl, qualified

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

__all__ = [
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

FLUSH_RUN = "lakesync.flush.run"
"""Snapshot summary property naming the flush run that wrote the snapshot."""

FAIL_POINTS = ("before_append", "after_append", "after_heads", "during_publish", "during_release")
"""Where ``run(fail_at=...)`` can simulate a crash."""

DAY_MS = 24 * 3600 * 1000
_TASK_ENTRIES = 1000
_ARROW_BATCH = 5000

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

_STRING = pa.string()
RECORD_ARROW_SCHEMA = pa.schema(
    [
        *(pa.field(name, _STRING, nullable=False) for name in ("gateway", "tbl", "row_id", "op", "client_id")),
        pa.field("hlc", pa.int64(), nullable=False),
        pa.field("delta_id", _STRING, nullable=False),
        pa.field(
            "columns",
            pa.list_(pa.struct([pa.field("name", _STRING), pa.field("value", _STRING)])),
            nullable=False,
        ),
        pa.field("shard", _STRING, nullable=False),
        *(pa.field(name, pa.int64(), nullable=False) for name in ("seq", "commit_hlc", "commit_ms", "size")),
    ]
)
""":data:`RECORD_SCHEMA` in Arrow: what the read tasks hand to Spark."""


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
        lease_ttl_ms: How long the lease outlives its last renewal (must exceed the longest write: read + append).
        range_size: Most entries in one range (one read, one Arrow batch); a task reads several neighbouring ranges.
        rebase_shards: Shards whose buffer regressed behind the lake, to append again from their release mark
            (:func:`plan_flush`; docs/lake.md, "A buffer behind the lake").
        publish: Where to publish materialisation jobs after the commit (:mod:`lakesync.aws.publish`); None
            publishes nothing.
        publish_range_size: Most entries in one materialisation job.
    """

    dynamodb: DynamoConfig
    catalog: str = "lake"
    namespace: str = NAMESPACE
    gateways: tuple[str, ...] | None = None
    retention_ms: int = DAY_MS
    max_deltas_per_run: int | None = None
    lease_ttl_ms: int = 30 * 60 * 1000
    range_size: int = 5000
    rebase_shards: tuple[str, ...] = ()
    publish: PublishConfig | None = None
    publish_range_size: int = 5000

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
)
"""Options of the flush job script (``--name value``); only ``warehouse`` and one of ``tables``/``table_prefix`` are
required. Without ``checkpoint_bucket`` nothing is released from the buffer; without ``claim_check_bucket`` and
``materialise_queue_url`` nothing is published for materialisation."""


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
        released: Log entries newly marked released (pulls behind them get 410; the items expire by TTL).
        watermarks: The committed watermarks after the run.
        published_jobs: Materialisation jobs published (ranges of this run and any left by earlier runs).
        publish_failures: Ranges that could not be published (left for the next run; alarmed).
        durations_ms: Milliseconds per step (lease, plan, write: read + append + commit, heads, requests, release,
            total).
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
    published_jobs: int = 0
    publish_failures: int = 0
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
    watermarks: Mapping[str, int],
    heads: Mapping[ShardId, ShardHead],
    max_deltas: int | None = None,
    rebase: Iterable[str] = (),
) -> FlushPlan:
    """Plan a run from the last committed watermarks and the shard heads (pure).

    Each shard is read from ``max(watermark, flushedSeq)`` to its head. With ``max_deltas`` the entries are shared
    out evenly (a shard with fewer pending entries leaves its share to the others), so no shard starves. A shard in
    ``rebase`` (the repair of a buffer that regressed behind the lake) is read from its release mark instead: all the
    buffer holds is appended again, and the watermark moves to its head.

    Raises:
        FlushError: a watermark is ahead of its head (a rebased shard's head must first pass it).
    """
    rebased = set(rebase)
    for shard, head in heads.items():
        if watermarks.get(shard.key, 0) > head.seq:
            raise FlushError(
                f"the delta log holds shard {shard.key!r} up to {watermarks[shard.key]} but its head is at {head.seq}:"
                " was the buffer recreated under a lake that already holds its shards? (docs/lake.md, 'A buffer"
                " behind the lake')"
            )
    starts = {
        s: h.released_seq if s.key in rebased else max(watermarks.get(s.key, 0), h.flushed_seq)
        for s, h in heads.items()
    }
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


class RangeFigures(NamedTuple):
    """What one read of a range held: its entries, their stored bytes, and the first and last sequence."""

    entries: int
    bytes: int
    first_seq: int
    last_seq: int


def range_figures(shard_range: ShardRange, records: Sequence[LogRecord]) -> RangeFigures:
    """The figures of a range read whole (pure).

    Raises:
        FlushError: the records are not exactly the range's entries ``lo+1 .. hi`` of its shard, in order.
    """
    seqs = [r["seq"] for r in records]
    if seqs != list(range(shard_range.lo + 1, shard_range.hi + 1)) or any(
        r["shard"] != shard_range.shard for r in records
    ):
        got = f"{len(seqs)} entries, seq {seqs[0]}..{seqs[-1]}" if seqs else "no entries"
        raise FlushError(f"the read of {shard_range.shard!r} ({shard_range.lo}, {shard_range.hi}] is not whole: {got}")
    return RangeFigures(len(seqs), sum(r["size"] for r in records), shard_range.lo + 1, shard_range.hi)


def record_batches(records: Sequence[LogRecord], batch_size: int = _ARROW_BATCH) -> Iterator[pa.RecordBatch]:
    """Records as Arrow batches of :data:`RECORD_ARROW_SCHEMA`, at most ``batch_size`` rows each (pure)."""
    for start in range(0, len(records), batch_size):
        yield pa.RecordBatch.from_pylist(records[start : start + batch_size], schema=RECORD_ARROW_SCHEMA)


RangeReader = Callable[[ShardRange], Sequence[LogRecord]]
"""Reads one range whole, in sequence order (e.g. :meth:`FlushStore.read_records`)."""
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
        # Records arrive grouped by shard (one gateway and table) in commit order: each task writes its own
        # partitions' files (fanout: one open file per partition it meets) instead of a hash shuffle by partition.
        .option("distribution-mode", "none")
        .option("fanout-enabled", "true")
        .option(f"snapshot-property.{FLUSH_WATERMARKS}", json.dumps(dict(watermarks), separators=(",", ":")))
        .option(f"snapshot-property.{FLUSH_RUN}", run_id)
        .append()
    )


_WORKER_FLUSH_ERROR = re.compile(r"^(?:\S+\.)?FlushError: (.+)$", re.MULTILINE)


def _check_ranges(plan: FlushPlan, ranges: Sequence[ShardRange]) -> None:
    """The ranges cover exactly the planned entries: per shard, contiguous from its start to its end."""
    by_shard: dict[str, list[ShardRange]] = {}
    for shard_range in sorted(ranges):
        by_shard.setdefault(shard_range.shard, []).append(shard_range)
    want = {p.shard.key: (p.start, p.end) for p in plan.shards if p.deltas}
    got: dict[str, tuple[int, int] | None] = {}
    for shard, parts in by_shard.items():
        whole = all(r.lo < r.hi for r in parts) and all(a.hi == b.lo for a, b in pairwise(parts))
        got[shard] = (parts[0].lo, parts[-1].hi) if whole else None
    if got != want:
        raise FlushError(f"the ranges to read {got} do not cover the plan {want}")


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
    _check_ranges(plan, records.ranges)
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
    sink: JobSink | None = None,
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
        sink: Where materialisation jobs go (defaults to S3 + SQS from ``config.publish``).

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
        plan = plan_flush(watermarks, heads, config.max_deltas_per_run, config.rebase_shards)
        _check_not_regressed(spark, config.table, store, plan, watermarks, config.rebase_shards)
        steps.done("plan")

        snapshot_id: int | None = None
        appended: dict[str, tuple[int, int]] = {}
        if plan.deltas:

            def before_append() -> None:
                steps.point("before_append")
                if not store.renew_lease(run_id, now_ms(), config.lease_ttl_ms):
                    raise FlushError(f"flush run {run_id} lost its lease before the append; nothing was written")

            def around_append() -> AbstractContextManager[None]:
                renew = partial(_renew_lease, store, run_id, now_ms, config.lease_ttl_ms)
                return keep_lease(spark, run_id, renew, config.lease_ttl_ms / 3000)

            records = read_records(spark, config.dynamodb, plan.ranges(config.range_size))
            snapshot_id, appended = append_records(
                spark,
                records,
                plan,
                config.table,
                run_id,
                base_snapshot,
                before_append=before_append,
                around_append=around_append,
            )
            steps.done("write")
            steps.point("after_append")

        advanced = _advance_heads(store, plan, appended)
        steps.done("heads")
        steps.point("after_heads")

        committed = plan.watermarks if snapshot_id is not None else watermarks
        publish_report, published = _publish(config, store, sink, heads, committed, run_id, steps)
        steps.done("publish")

        cleared = store.clear_flush_requests(gateways, started_ms)
        steps.done("requests")

        released = _release(
            store, config, plan, checkpoint_positions or {}, checkpoint_hlcs, published, now_ms(), steps
        )
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
            watermarks=committed,
            published_jobs=publish_report.jobs,
            publish_failures=publish_report.failed,
            durations_ms=steps.total(),
        )
    finally:
        store.release_lease(run_id)


def _publish(
    config: FlushConfig,
    store: FlushStore,
    sink: JobSink | None,
    heads: Mapping[ShardId, ShardHead],
    committed: Mapping[str, int],
    run_id: str,
    steps: _Steps,
) -> tuple[PublishReport, Mapping[str, int] | None]:
    """Publish what the delta log holds and was not yet published; never fails the flush (but a simulated crash).

    Returns:
        The report and the published positions that bound the release (None: publishing is off, no bound).
    """
    if config.publish is None:
        return PublishReport(), None
    before = {s.key: h.published_seq if h.published_seq is not None else h.released_seq for s, h in heads.items()}
    try:
        sink = sink or ClaimCheckSink(config.publish)
        report = publish_flushed(
            store,
            sink,
            heads,
            committed,
            run_id=run_id,
            bucket=config.publish.bucket,
            publish_all=config.publish.publish_all,
            range_size=config.publish_range_size,
            attempts=config.publish.attempts,
            threads=config.publish.threads,
            after_first_send=lambda: steps.point("during_publish"),
        )
    except InjectedFailure:
        raise
    except Exception:
        log.exception("publishing materialisation jobs failed; the next flush publishes what is missing")
        if sink is not None:
            sink.report_failures(1)
        return PublishReport(failed=1, published=before), before
    return report, {**before, **report.published}


def _check_not_regressed(
    spark: SparkSession,
    table: str,
    store: FlushStore,
    plan: FlushPlan,
    watermarks: Mapping[str, int],
    rebased: Sequence[str] = (),
) -> None:
    """Refuse to append when a shard's log is not the log the lake left: the entry at its committed watermark, still
    in the buffer, has another commit HLC than the lake's (the buffer was restored or recreated behind the lake and
    re-used those sequence numbers). Appending above the watermark would skip the re-used ones for ever.

    Raises:
        FlushError: naming the shard, with what to do.
    """
    checks = {
        p.shard.key: watermarks[p.shard.key]
        for p in plan.shards
        if p.deltas
        and p.shard.key not in rebased
        and p.head.released_seq < watermarks.get(p.shard.key, 0) <= p.head.seq
    }
    if not checks:
        return
    where = " OR ".join(
        f"(shard = '{key.replace(chr(39), chr(39) * 2)}' AND seq = {seq})" for key, seq in checks.items()
    )
    lake = {r[0]: int(r[1]) for r in spark.sql(f"SELECT shard, commit_hlc FROM {table} WHERE {where}").collect()}
    for key, seq in checks.items():
        buffered = store.commit_hlc_at(ShardId.parse(key), seq)
        if key in lake and buffered is not None and buffered != lake[key]:
            raise FlushError(
                f"the buffer of shard {key!r} does not match the delta log at its watermark {seq} (commit HLC"
                f" {buffered} in the buffer, {lake[key]} in the lake): the buffer was restored or recreated behind the"
                " lake, and its new entries re-use sequence numbers the lake already holds. Nothing was appended."
                " Repair: see docs/lake.md, 'A buffer behind the lake'"
            )


def _renew_lease(store: FlushStore, run_id: str, now_ms: Callable[[], int], ttl_ms: int) -> bool:
    return store.renew_lease(run_id, now_ms(), ttl_ms)


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
    published: Mapping[str, int] | None,
    now: int,
    steps: _Steps,
) -> int:
    """Mark the entries released that are flushed, covered by the checkpoint (position and HLC), older than the
    retention and, when publishing is on, published (so a range can always be read again to publish it); returns
    how many entries were newly marked. The items themselves are deleted by their TTL (free, unlike a delete)."""
    retention_hlc = ((now - config.retention_ms) << 16) | 0xFFFF
    marked = 0
    for shard_plan in plan.shards:
        head = shard_plan.head
        released = head.released_seq
        limit = min(max(head.flushed_seq, shard_plan.end), positions.get(head.shard.key, 0))
        if published is not None:
            limit = min(limit, published.get(head.shard.key, 0))
        cutoff_hlc = retention_hlc if hlcs is None else min(retention_hlc, hlcs.get(head.shard.key, 0))
        if limit > released:
            target = store.release_target(head.shard, limit, cutoff_hlc)
            if target is not None and target[0] > released:
                store.mark_released(head.shard, *target)
                marked += target[0] - released
                steps.point("during_release")
    return marked
