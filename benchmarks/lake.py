"""Lake benchmarks (issue 4): the flush job's write side against a plain pyiceberg append, the flush job end to end,
and delta-log scans before and after maintenance. Local Spark (``local[2]``) with the Iceberg runtime, one sqlite
catalog and ``file://`` warehouse shared with pyiceberg, all in a temporary directory.

Three parts, each saying exactly what it times:

* **write side at 1M deltas** (the goal: pyiceberg time / ours >= 0.5, i.e. ours at most 2x slower). Both sides start
  from the same entries as read from the buffer: ``LogRecord`` dicts (what ``FlushStore.read_records`` returns),
  made deterministically by :meth:`Workload.record`, and both pay for making them, timed. Both sides write into an
  identically partitioned table (``delta_log_ddl``: gateway, tbl, days(commit_ts); zstd) created fresh in the same
  catalog for every repetition.

  * **ours**: :func:`lakesync.spark.flush.records_frame` + :func:`lakesync.spark.flush.append_records`, the job's own
    path from the planned ranges (:func:`~lakesync.spark.flush.plan_flush`, ranges of 5,000 entries) to the commit,
    with the benchmark's reader in place of the DynamoDB one: one Spark job whose read tasks make their ranges' dicts,
    check each range whole, convert it to Arrow (``mapInArrow``) and write their Parquet files (no shuffle); one
    commit carrying the watermarks and the run id; the snapshot check; the tally of the reads checked against the
    ranges. Timed whole. Making the dicts is then measured apart, on the same tasks: a pass that only makes them
    minus a pass that makes nothing (so the job's other costs can be compared without it).
  * **pyiceberg**: the dicts made in chunks of 100k (timed apart), *convert*: ``pyarrow.Table.from_pylist`` of each
    chunk, ``commit_ts`` computed from ``commit_ms`` with ``pyarrow.compute``, columns put in table order; *append*:
    ``table.append(arrow_table)``, pyiceberg's plain append (no snapshot properties).

  The headline ratio is pyiceberg's total over ours, both including the making of the dicts (ours makes them in
  parallel read tasks, as the job reads DynamoDB; pyiceberg in its one process). Also given: both without making the
  dicts (pyiceberg convert + append over ours minus its measured making), and pyiceberg's append alone over that.
  Both tables are then checked to hold the same rows (count and an order-independent ``xxhash64`` digest of every
  column) and partitions. A warm-up of both sides at a small size runs first; the order of the sides alternates
  between repetitions. Starting the JVM and the SparkSession is timed on its own.

* **flush end to end on moto**: the buffer is seeded through the real push service over in-memory stores whose
  commits are rendered into DynamoDB items by the real DynamoDB store (as the pull benchmark does), then written into
  a moto server in its own process (``Query`` responses on the fast JSON path, see ``_moto.py``); then
  :func:`lakesync.spark.flush.run` flushes it all into a fresh delta log and reports its own step timings. moto
  serves roughly a thousand items a second, so the write step (read + append) says nothing about Glue on DynamoDB;
  the other steps are the job's own. A second run with nothing new shows the fixed cost of a run.

* **scan before/after maintenance**: a delta log built by ``appends`` flush appends (``records_frame`` +
  ``append_records``, each with its watermarks, like a flush every few minutes), so every append writes small files.
  Timed, median of several runs after an unmeasured warm-up: a full scan (every column, Spark's ``noop`` sink), the
  compaction job's first-run read (per synced table, the frame ``compact_table`` caches, written to ``noop``), and a
  whole compaction run into fresh state tables. Then :func:`lakesync.spark.maintenance.run` (rewrite data files,
  expire snapshots, remove orphans) and the same measurements again; rows are checked unchanged.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib.util
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks import plots, report
from benchmarks._common import batch_write, machine_info, progress, summarize, timed

CATALOG = "lake"
GOAL_RATIO = 0.5
DRIVER_MEMORY = "4g"
_CHUNK = 100_000
RANGE_SIZE = 5000  # FlushConfig.range_size's default


@dataclass(frozen=True, slots=True)
class LakeSizes:
    """Workload sizes of one run."""

    write_deltas: int
    write_repetitions: int
    write_warmup: int
    flush_deltas: int
    scan_appends: int
    scan_rows: int
    scan_runs: int
    compact_runs: int


FULL = LakeSizes(
    write_deltas=1_000_000,
    write_repetitions=3,
    write_warmup=20_000,
    flush_deltas=100_000,
    scan_appends=300,
    scan_rows=100_000,
    scan_runs=5,
    compact_runs=3,
)
QUICK = LakeSizes(
    write_deltas=20_000,
    write_repetitions=2,
    write_warmup=2_000,
    flush_deltas=2_000,
    scan_appends=12,
    scan_rows=2_400,
    scan_runs=2,
    compact_runs=1,
)


# -- the workload ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Workload:
    """Deterministic buffer entries: entry ``i`` goes to shard ``i % shards`` with seq ``i // shards + 1``.

    Entries are committed ``step_ms`` apart from ``start_ms`` (so a long run spans several day partitions); 10% are
    DELETEs, 30% sparse UPDATEs (one or two columns), 60% INSERTs of four columns (string, boolean, number, a JSON
    object); rows are revisited (250,000 row ids), 97 clients; delta ids are SHA-256 hex like the real ones.
    """

    gateways: tuple[str, ...]
    tables: tuple[str, ...]
    sub_shards: int
    start_ms: int
    step_ms: float

    @property
    def shards(self) -> list[str]:
        """Shard keys in entry order (``gateway#table#n``)."""
        return [f"{g}#{t}#{n}" for g in self.gateways for t in self.tables for n in range(self.sub_shards)]

    def counts(self, lo: int, hi: int) -> dict[str, tuple[int, int]]:
        """Per shard, the ``(first seq - 1, last seq)`` of entries ``lo <= i < hi`` (shards without any omitted)."""
        shards = self.shards
        out: dict[str, tuple[int, int]] = {}
        for offset in range(min(len(shards), hi - lo)):
            i = lo + offset
            last = i + ((hi - 1 - i) // len(shards)) * len(shards)
            out[shards[i % len(shards)]] = (i // len(shards), last // len(shards) + 1)
        return out

    def record(self, i: int) -> dict[str, Any]:
        """Entry ``i`` as a ``LogRecord`` (the delta log's columns with ``commit_ms`` and ``size``)."""
        per_gateway = len(self.tables) * self.sub_shards
        s = i % (len(self.gateways) * per_gateway)
        gateway = self.gateways[s // per_gateway]
        table = self.tables[(s // self.sub_shards) % len(self.tables)]
        shard = f"{gateway}#{table}#{s % self.sub_shards}"
        commit_ms = self.start_ms + int(i * self.step_ms)
        client = f"client-{i % 97:02d}"
        hlc = ((commit_ms - 200 - i % 1000) << 16) | (i % 7)
        row_id = f"row-{(i * 7919) % 250_000:06d}"
        kind = i % 10
        if kind == 0:
            op, columns = "DELETE", []
        elif kind < 4:
            op = "UPDATE"
            columns = [{"name": "done", "value": "true" if i % 2 else "false"}]
            if i % 3:
                columns.append({"name": "priority", "value": str(i % 5)})
        else:
            op = "INSERT"
            columns = [
                {"name": "title", "value": json.dumps(f"tâche {i}", ensure_ascii=False)},
                {"name": "done", "value": "false"},
                {"name": "priority", "value": str(i % 5)},
                {"name": "meta", "value": f'{{"tags":["t{i % 13}"],"v":{i % 1000}}}'},
            ]
        delta_id = hashlib.sha256(f"{client}|{hlc}|{table}|{row_id}|{i}".encode()).hexdigest()
        return {
            "gateway": gateway,
            "tbl": table,
            "row_id": row_id,
            "op": op,
            "client_id": client,
            "hlc": hlc,
            "delta_id": delta_id,
            "columns": columns,
            "shard": shard,
            "seq": i // (len(self.gateways) * per_gateway) + 1,
            "commit_hlc": (commit_ms << 16) | (i % 65536),
            "commit_ms": commit_ms,
            "size": 160 + sum(len(c["name"]) + len(c["value"]) for c in columns),
        }


# 1M entries over ~36 hours: three day partitions per (gateway, table), 30 partitions, 20 shards.
WRITE_WORKLOAD = Workload(
    gateways=("gw1", "gw2"),
    tables=("todos", "notes", "tags", "projects", "comments"),
    sub_shards=2,
    start_ms=1_767_268_800_000,  # 2026-01-01T12:00:00Z
    step_ms=130,
)
# Flushes every few minutes within one day (100k entries over ~14 h): 4 partitions, 8 shards.
SCAN_WORKLOAD = Workload(
    gateways=("gw1", "gw2"),
    tables=("todos", "notes"),
    sub_shards=2,
    start_ms=1_767_225_600_000,  # 2026-01-01T00:00:00Z
    step_ms=500,
)


# -- Spark and the catalog ------------------------------------------------------------------------------------------
class Lake:
    """A local SparkSession and a pyiceberg catalog over one temporary sqlite catalog and warehouse."""

    def __init__(self, root: Path) -> None:
        """Start nothing yet; :meth:`start` times the JVM and session start."""
        self.root = root
        self.spark: Any = None
        self.catalog: Any = None
        self.namespace = f"bench_{uuid.uuid4().hex[:10]}"

    def start(self) -> dict[str, Any]:
        """Start the SparkSession; returns the start-up timings."""
        import_s, _ = timed(lambda: __import__("pyspark.sql"))
        from lakesync.lake.catalog import local_catalog
        from lakesync.spark.session import build_session

        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        session_s, self.spark = timed(
            lambda: build_session(
                app_name="lakesync-bench-lake",
                warehouse=str(self.root / "warehouse"),
                catalog_name=CATALOG,
                catalog="local",
                catalog_uri=str(self.root / "catalog.db"),
                master="local[2]",
                extra_conf={"spark.driver.memory": DRIVER_MEMORY},
                log_level="ERROR",
            )
        )
        first_s, _ = timed(lambda: self.spark.sql(f"CREATE NAMESPACE {CATALOG}.{self.namespace}").collect())
        self.catalog = local_catalog(self.root / "catalog.db", self.root / "warehouse", name=CATALOG)
        return {
            "pyspark_import_s": round(import_s, 3),
            "jvm_and_session_start_s": round(session_s, 3),
            "first_catalog_statement_s": round(first_s, 3),
            "master": "local[2]",
            "driver_memory": DRIVER_MEMORY,
            "note": "JVM launch + SparkContext + SparkSession (build_session), then the first statement that loads "
            "the Iceberg catalog (CREATE NAMESPACE); not part of any figure below.",
        }

    def stop(self) -> None:
        """Stop the session."""
        if self.spark is not None:
            self.spark.stop()
            self.spark = None

    def name(self, table: str) -> str:
        """``lake.<namespace>.<table>``."""
        return f"{CATALOG}.{self.namespace}.{table}"

    def create_log(self, table: str) -> str:
        """A fresh table with the delta log's DDL (columns, partitioning, properties); returns its name."""
        from lakesync.lake.tables import DELTA_LOG, delta_log_ddl, qualified

        name = self.name(table)
        ddl = delta_log_ddl(CATALOG, self.namespace)
        self.spark.sql(ddl.replace(qualified(CATALOG, DELTA_LOG, self.namespace), name, 1))
        return name

    def drop(self, table: str) -> None:
        """``DROP TABLE ... PURGE`` (data files too)."""
        self.spark.sql(f"DROP TABLE IF EXISTS {self.name(table)} PURGE")

    def digest(self, name: str) -> tuple[int, int]:
        """``(rows, xor of xxhash64 of every column)``: order-independent, equal for equal row multisets."""
        row = self.spark.sql(
            "SELECT count(*) AS n, bit_xor(xxhash64(gateway, tbl, row_id, op, client_id, hlc, delta_id, columns, "
            f"shard, seq, commit_hlc, commit_ts)) AS h FROM {name}"
        ).collect()[0]
        return int(row["n"]), int(row["h"] or 0)

    def partitions(self, name: str) -> list[tuple[str, int]]:
        """``(partition, rows)`` of the current snapshot, sorted."""
        rows = self.spark.sql(f"SELECT to_json(partition) AS p, record_count AS n FROM {name}.partitions").collect()
        return sorted((str(r["p"]), int(r["n"])) for r in rows)

    def files(self, name: str) -> dict[str, Any]:
        """Data files, their total size and the manifests of the current snapshot."""
        data = self.spark.sql(f"SELECT count(*) AS n, sum(file_size_in_bytes) AS b FROM {name}.files").collect()[0]
        manifests = self.spark.sql(f"SELECT count(*) AS n FROM {name}.manifests").collect()[0]
        n = int(data["n"])
        return {
            "data_files": n,
            "data_mib": round(int(data["b"] or 0) / 2**20, 2),
            "mean_file_kib": round(int(data["b"] or 0) / 1024 / n, 1) if n else 0.0,
            "manifests": int(manifests["n"]),
        }

    def noop(self, frame: Any) -> None:
        """Read every row and column of ``frame`` and discard them (Spark's ``noop`` sink)."""
        frame.write.format("noop").mode("overwrite").save()


def _plan(workload: Workload, lo: int, hi: int, watermarks: dict[str, int]) -> Any:
    """The real flush plan for entries ``lo <= i < hi`` on top of ``watermarks``."""
    from lakesync.core.log import ShardHead, ShardId
    from lakesync.spark.flush import plan_flush

    heads = {}
    for key, (_, last) in workload.counts(lo, hi).items():
        shard = ShardId.parse(key)
        heads[shard] = ShardHead(shard, seq=last)
    return plan_flush(watermarks, heads)


# -- part 1: the write side -----------------------------------------------------------------------------------------
def _workload_reader(workload: Workload) -> Callable[[Any], list[dict[str, Any]]]:
    """The benchmark's reader factory (:data:`lakesync.spark.flush.ReaderFactory`): in each executor task, a reader
    that makes a range's entries with :meth:`Workload.record`, as ``FlushStore.read_records`` reads them in the job."""
    shards = workload.shards
    index = {shard: k for k, shard in enumerate(shards)}

    def read(shard_range: Any) -> list[dict[str, Any]]:
        k = index[shard_range.shard]
        return [workload.record((seq - 1) * len(shards) + k) for seq in range(shard_range.lo + 1, shard_range.hi + 1)]

    return read


def _generation_pass(lake: Lake, workload: Workload, ranges: list[Any], *, make: bool = True) -> None:
    """Only make the dicts (``make``) or not even that: the same reader over the same ranges in as many tasks as the
    job uses, nothing converted or written. The difference of the two is what making the dicts costs in the tasks."""
    from lakesync.spark import flush

    sc = lake.spark.sparkContext
    factory = partial(_workload_reader, workload)

    def run(part: Iterator[Any]) -> Iterator[int]:
        read = factory()
        yield sum(len(read(shard_range)) if make else shard_range.size for shard_range in part)

    done = sc.parallelize(ranges, flush._read_tasks(sc.defaultParallelism, ranges)).mapPartitions(run).sum()
    if done != sum(r.size for r in ranges):
        raise RuntimeError(f"the generation pass made {done} entries")


def _generation_s(lake: Lake, workload: Workload, ranges: list[Any]) -> float:
    """What making the dicts costs in the read tasks: a generation pass minus an empty pass over the same tasks."""
    made_s, _ = timed(lambda: _generation_pass(lake, workload, ranges))
    empty_s, _ = timed(lambda: _generation_pass(lake, workload, ranges, make=False))
    return max(0.0, made_s - empty_s)


def _ours(lake: Lake, workload: Workload, count: int, table: str) -> dict[str, float]:
    """The job's write path from the ranges to the commit, the dicts made in the read tasks; then the generation
    alone. Returns seconds."""
    from lakesync.spark.flush import append_records, records_frame

    plan = _plan(workload, 0, count, {})
    ranges = plan.ranges(RANGE_SIZE)
    start = time.perf_counter()
    records = records_frame(lake.spark, ranges, partial(_workload_reader, workload))
    _, figures = append_records(lake.spark, records, plan, lake.name(table), uuid.uuid4().hex, None)
    total_s = time.perf_counter() - start
    if sum(entries for entries, _ in figures.values()) != count:
        raise RuntimeError(f"append_records reports {figures}")
    generation_s = _generation_s(lake, workload, ranges)
    return {"total_s": total_s, "generation_s": generation_s, "without_generation_s": total_s - generation_s}


def _arrow_schemas(iceberg_table: Any) -> tuple[Any, Any]:
    """The table's Arrow schema and the records' (``commit_ms``, ``size`` in place of ``commit_ts``)."""
    import pyarrow as pa

    target = iceberg_table.schema().as_arrow()
    fields = [f for f in target if f.name != "commit_ts"]
    fields += [pa.field("commit_ms", pa.int64(), nullable=False), pa.field("size", pa.int64(), nullable=False)]
    return target, pa.schema(fields)


@contextlib.contextmanager
def day_transform() -> Iterator[str]:
    """Make pyiceberg's vectorised ``day`` transform work without the optional ``pyiceberg-core`` package.

    pyiceberg 0.12 computes partition values for writes with ``pyiceberg_core`` (Rust). Where that is not installed,
    the transform is replaced, inside this block only, by Arrow's own cast (timestamp -> date32 -> int32: days since
    the epoch, floored, as the Iceberg spec and pyiceberg's scalar transform have it). Yields what computes it.
    """
    if importlib.util.find_spec("pyiceberg_core") is not None:
        yield "pyiceberg-core"
        return
    import pyarrow as pa
    from pyiceberg.transforms import DayTransform

    def pyarrow_transform(self: Any, source: Any) -> Callable[[Any], Any]:
        return lambda values: values.cast(pa.date32()).cast(pa.int32())

    original = DayTransform.pyarrow_transform
    DayTransform.pyarrow_transform = pyarrow_transform  # type: ignore[method-assign]
    try:
        yield "pyarrow cast (pyiceberg-core not installed)"
    finally:
        DayTransform.pyarrow_transform = original  # type: ignore[method-assign]


def _pyiceberg(lake: Lake, workload: Workload, count: int, table: str) -> dict[str, float]:
    """Plain pyiceberg: records made and converted to Arrow chunk by chunk (both timed, apart), then
    ``table.append``."""
    import pyarrow as pa
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    iceberg_table = lake.catalog.load_table(f"{lake.namespace}.{table}")
    target, record_schema = _arrow_schemas(iceberg_table)
    generation_s = convert_s = 0.0
    chunks = []
    for lo in range(0, count, _CHUNK):
        start = time.perf_counter()
        records = [workload.record(i) for i in range(lo, min(lo + _CHUNK, count))]
        made = time.perf_counter()
        chunks.append(pa.Table.from_pylist(records, schema=record_schema))
        generation_s += made - start
        convert_s += time.perf_counter() - made
        del records
    start = time.perf_counter()
    records_table = pa.concat_tables(chunks)
    commit_ts = pc.multiply(records_table.column("commit_ms"), 1000).cast(target.field("commit_ts").type)
    arrow = pa.Table.from_arrays(
        [commit_ts if f.name == "commit_ts" else records_table.column(f.name) for f in target], schema=target
    )
    convert_s += time.perf_counter() - start
    del chunks, records_table
    with day_transform():
        append_s, _ = timed(lambda: iceberg_table.append(arrow))
    return {
        "generation_s": generation_s,
        "convert_s": convert_s,
        "append_s": append_s,
        "total_s": generation_s + convert_s + append_s,
        "without_generation_s": convert_s + append_s,
    }


def _write_pair(lake: Lake, workload: Workload, count: int, ours_first: bool, label: str) -> dict[str, Any]:
    """One repetition: both sides into fresh tables, checked equal, then dropped."""
    tag = uuid.uuid4().hex[:6]
    ours_table, theirs_table = f"w_ours_{tag}", f"w_pyiceberg_{tag}"
    lake.create_log(ours_table)
    lake.create_log(theirs_table)
    sides: dict[str, Callable[[], dict[str, float]]] = {
        "ours": lambda: _ours(lake, workload, count, ours_table),
        "pyiceberg": lambda: _pyiceberg(lake, workload, count, theirs_table),
    }
    result: dict[str, Any] = {}
    for side in ("ours", "pyiceberg") if ours_first else ("pyiceberg", "ours"):
        gc.collect()
        result[side] = sides[side]()
        progress(f"lake/write {label}: {side} {result[side]['total_s']:.1f}s")
    ours_digest, theirs_digest = lake.digest(lake.name(ours_table)), lake.digest(lake.name(theirs_table))
    if ours_digest != theirs_digest or ours_digest[0] != count:
        raise RuntimeError(f"the two tables differ: ours {ours_digest}, pyiceberg {theirs_digest}, expected {count}")
    if lake.partitions(lake.name(ours_table)) != lake.partitions(lake.name(theirs_table)):
        raise RuntimeError("the two tables are partitioned differently")
    result["files"] = {"ours": lake.files(lake.name(ours_table)), "pyiceberg": lake.files(lake.name(theirs_table))}
    result["partitions"] = len(lake.partitions(lake.name(ours_table)))
    from lakesync.spark.flush import _read_tasks

    ranges = _plan(workload, 0, count, {}).ranges(RANGE_SIZE)
    result["read_tasks"] = _read_tasks(lake.spark.sparkContext.defaultParallelism, ranges)
    lake.drop(ours_table)
    lake.drop(theirs_table)
    return result


def _breakdown(lake: Lake, workload: Workload, count: int) -> dict[str, float]:
    """Where our time goes: the path cut into cumulative prefixes, each one Spark job over the same ranges.

    Returns seconds per prefix (each includes the ones before it): ``tasks`` (the read tasks alone, an empty
    :func:`_generation_pass`), ``generate`` (+ the dicts made in them), ``arrow`` (+ each range checked whole and
    turned into Arrow batches, into the JVM: the frame of ``records_frame`` into the ``noop`` sink), ``rows`` (+ the
    delta-log rows, into ``noop``) and ``append`` (``append_records``: + Parquet files, the commit, the snapshot check
    and the tally).
    """
    from lakesync.spark import flush

    plan = _plan(workload, 0, count, {})
    ranges = plan.ranges(RANGE_SIZE)
    factory = partial(_workload_reader, workload)
    table = lake.create_log(f"w_breakdown_{uuid.uuid4().hex[:6]}")
    out: dict[str, float] = {}
    try:
        out["tasks"], _ = timed(lambda: _generation_pass(lake, workload, ranges, make=False))
        out["generate"], _ = timed(lambda: _generation_pass(lake, workload, ranges))
        out["arrow"], _ = timed(lambda: lake.noop(flush.records_frame(lake.spark, ranges, factory).frame))
        out["rows"], _ = timed(
            lambda: lake.noop(flush.delta_log_frame(flush.records_frame(lake.spark, ranges, factory).frame))
        )
        out["append"], _ = timed(
            lambda: flush.append_records(
                lake.spark, flush.records_frame(lake.spark, ranges, factory), plan, table, uuid.uuid4().hex, None
            )
        )
    finally:
        lake.spark.sql(f"DROP TABLE IF EXISTS {table} PURGE")
    return {k: round(v, 3) for k, v in out.items()}


def run_write(lake: Lake, sizes: LakeSizes) -> dict[str, Any]:
    """Part 1 (see the module docstring)."""
    workload = WRITE_WORKLOAD
    progress(f"lake/write: warm-up, {sizes.write_warmup} deltas each side")
    warmup = _write_pair(lake, workload, sizes.write_warmup, True, "warm-up")
    reps = []
    for rep in range(sizes.write_repetitions):
        progress(f"lake/write: repetition {rep + 1}/{sizes.write_repetitions}, {sizes.write_deltas} deltas each side")
        reps.append(_write_pair(lake, workload, sizes.write_deltas, rep % 2 == 0, f"rep {rep + 1}"))

    progress(f"lake/write: where our time goes (one pass, {sizes.write_deltas} deltas)")
    breakdown = _breakdown(lake, workload, sizes.write_deltas)

    def series(side: str, key: str) -> dict[str, Any]:
        return summarize([r[side][key] for r in reps], digits=3)

    def ratio(theirs: str, ours: str) -> dict[str, Any]:
        return summarize([r["pyiceberg"][theirs] / r["ours"][ours] for r in reps], digits=3)

    headline = [r["pyiceberg"]["total_s"] / r["ours"]["total_s"] for r in reps]
    n = sizes.write_deltas
    with day_transform() as transform:
        pass
    return {
        "workload": {
            "deltas": n,
            "shards": len(workload.shards),
            "partitions": reps[-1]["partitions"],
            "repetitions": sizes.write_repetitions,
            "warmup_deltas": sizes.write_warmup,
            "range_size": RANGE_SIZE,
            "read_tasks": reps[-1]["read_tasks"],
        },
        **{f"ours_{key}": series("ours", key) for key in ("total_s", "generation_s", "without_generation_s")},
        **{
            f"pyiceberg_{key}": series("pyiceberg", key)
            for key in ("generation_s", "convert_s", "append_s", "total_s", "without_generation_s")
        },
        "ours_deltas_per_s": summarize([n / r["ours"]["total_s"] for r in reps], digits=0),
        "pyiceberg_deltas_per_s": summarize([n / r["pyiceberg"]["total_s"] for r in reps], digits=0),
        "ratio_pyiceberg_over_ours": summarize(headline, digits=3),
        "ratio_without_generation": ratio("without_generation_s", "without_generation_s"),
        "ratio_append_over_ours_without_generation": ratio("append_s", "without_generation_s"),
        "goal": {"ratio_at_least": GOAL_RATIO, "met": statistics.median(headline) >= GOAL_RATIO},
        "files": reps[-1]["files"],
        "same_rows_checked": True,
        "pyiceberg_day_transform": transform,
        "ours_breakdown_s": breakdown,
        "warmup": {side: {k: round(v, 3) for k, v in warmup[side].items()} for side in ("ours", "pyiceberg")},
        "repetitions": [
            {side: {k: round(v, 3) for k, v in r[side].items()} for side in ("ours", "pyiceberg")} for r in reps
        ],
    }


# -- part 2: the flush end to end -----------------------------------------------------------------------------------
def _seed_buffer(client: Any, count: int) -> tuple[Any, int, dict[str, float]]:
    """Fresh DynamoDB tables holding ``count`` pending deltas over 8 shards; returns (names, shards, timings)."""
    from benchmarks.pull import _RenderingBuffer
    from lakesync.aws.table_setup import create_tables
    from lakesync.aws.tables import TableNames
    from lakesync.core.delta import make_delta
    from lakesync.core.hlc import HLC
    from lakesync.core.messages import SyncPush
    from lakesync.gateway.deps import GatewayDeps, GatewaySettings
    from lakesync.gateway.memory import InMemoryActionStore, InMemoryConfigStore
    from lakesync.gateway.push import push

    workload = SCAN_WORKLOAD
    names = TableNames.with_prefix(f"lakebench{uuid.uuid4().hex[:8]}")
    create_tables(client, names)
    buffer = _RenderingBuffer(names)
    deps = GatewayDeps(
        buffer=buffer,
        config=InMemoryConfigStore(),
        actions=InMemoryActionStore(),
        settings=GatewaySettings(
            gateway_ids=frozenset(workload.gateways),
            sub_shards=dict.fromkeys(workload.tables, workload.sub_shards),
            flush_threshold_bytes=2**40,
        ),
    )
    clock = HLC()
    started = time.perf_counter()
    batch = 1000
    for lo in range(0, count, batch):
        gateway = workload.gateways[(lo // batch) % len(workload.gateways)]
        deltas = []
        for i in range(lo, min(lo + batch, count)):
            record = workload.record(i)
            values = {"title": f"tâche {i}", "done": i % 2 == 0, "priority": i % 5, "meta": {"v": i % 1000}}
            op = "INSERT" if i % 3 else "UPDATE"
            columns = dict(list(values.items())[: 1 + i % 4])
            deltas.append(
                make_delta(
                    op,
                    table=record["tbl"],
                    row_id=record["row_id"],
                    client_id="bench-client",
                    hlc=clock.now(),
                    columns=columns,
                )
            )
        push(deps, gateway, SyncPush("bench-client", tuple(deltas)), client_id="bench-client")
    rendered = time.perf_counter()
    shards = [s for g in workload.gateways for s in buffer.memory.list_shards(g)]
    batch_write(client, names.deltas, buffer.log_items)
    for shard in shards:
        for table, item in buffer.shard_items(shard):
            client.put_item(TableName=table, Item=item)
    return (
        names,
        len(shards),
        {"push_service_s": round(rendered - started, 1), "write_to_moto_s": round(time.perf_counter() - rendered, 1)},
    )


def run_flush(lake: Lake, sizes: LakeSizes) -> dict[str, Any]:
    """Part 2 (see the module docstring)."""
    import boto3
    from botocore.config import Config

    from benchmarks._moto import MotoProcess
    from lakesync.aws.flush_store import DynamoConfig
    from lakesync.spark import flush

    count = sizes.flush_deltas
    with MotoProcess(fast_transactions=False, fast_json=True) as moto:
        client = boto3.client(
            "dynamodb",
            endpoint_url=moto.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(read_timeout=300, retries={"max_attempts": 3, "mode": "standard"}),
        )
        progress(f"lake/flush: seeding {count} deltas (push service, rendered, BatchWriteItem into moto)")
        names, shards, seeding = _seed_buffer(client, count)
        progress(f"lake/flush: seeded in {sum(seeding.values()):.0f}s; flushing")
        namespace = f"flush_{uuid.uuid4().hex[:8]}"
        lake.spark.sql(f"CREATE NAMESPACE {CATALOG}.{namespace}")
        config = flush.FlushConfig(
            dynamodb=DynamoConfig(
                names,
                endpoint_url=moto.endpoint_url,
                region="us-east-1",
                access_key_id="testing",
                secret_access_key="testing",
            ),
            catalog=CATALOG,
            namespace=namespace,
        )
        wall_s, report = timed(lambda: flush.run(lake.spark, config))
        progress(f"lake/flush: {report.deltas} deltas in {wall_s:.1f}s {dict(report.durations_ms)}")
        idle_s, idle = timed(lambda: flush.run(lake.spark, config))
        in_lake = lake.digest(config.table)[0]
        if report.deltas != count or in_lake != count or idle.deltas != 0:
            raise RuntimeError(f"flushed {report.deltas}, lake holds {in_lake}, idle run {idle.deltas}; want {count}")
        files = lake.files(config.table)
        lake.spark.sql(f"DROP TABLE {config.table} PURGE")
    ms = dict(report.durations_ms)
    return {
        "workload": {"deltas": count, "shards": shards, "gateways": 2, "tables": 2, "range_size": config.range_size},
        "seeding_s": seeding,
        "wall_s": round(wall_s, 2),
        "durations_ms": ms,
        "deltas_per_s_total": round(count / (ms["total"] / 1000)),
        "deltas_per_s_write": round(count / (ms["write"] / 1000)) if ms.get("write") else None,
        "bytes": report.bytes,
        "heads_advanced": report.heads_advanced,
        "files": files,
        "idle_run": {"wall_s": round(idle_s, 2), "durations_ms": dict(idle.durations_ms)},
    }


# -- part 3: scans before and after maintenance ---------------------------------------------------------------------
def _build_small_files(lake: Lake, workload: Workload, appends: int, rows: int, table: str) -> dict[str, Any]:
    """``appends`` flush appends (the job's append path) of ``rows / appends`` entries each."""
    from lakesync.spark.flush import append_records, read_watermarks, records_frame

    name = lake.create_log(table)
    per = max(1, rows // appends)
    watermarks: dict[str, int] = {}
    base: int | None = None
    started = time.perf_counter()
    for k in range(appends):
        lo, hi = k * per, (k + 1) * per
        plan = _plan(workload, lo, hi, watermarks)
        records = records_frame(lake.spark, plan.ranges(RANGE_SIZE), partial(_workload_reader, workload))
        append_records(lake.spark, records, plan, name, uuid.uuid4().hex, base)
        watermarks, base = read_watermarks(lake.spark, name)
        if (k + 1) % max(1, appends // 10) == 0:
            progress(f"lake/scan: {k + 1}/{appends} appends")
    return {"appends": appends, "rows": per * appends, "rows_per_append": per, "build_s": time.perf_counter() - started}


def _measure_scans(lake: Lake, name: str, runs: int, compact_runs: int, label: str) -> dict[str, Any]:
    """Full scan, the compaction's first-run read, and whole compaction runs; median of ``runs``."""
    from pyspark.sql import functions as F

    from lakesync.spark import compact, lww, snapshots

    config = compact.CompactConfig(catalog=CATALOG, namespace=lake.namespace, now_ms=1_767_400_000_000)
    tables = sorted(SCAN_WORKLOAD.tables)

    def full_scan() -> None:
        lake.noop(lake.spark.table(name))

    def compaction_read() -> None:
        # compact_table's first run: the pinned snapshot, whole (no earlier log snapshot), one frame per table.
        chain = snapshots.ancestry(lake.spark, name)
        log, _ = compact._log_since(lake.spark, name, chain, None)
        for table in tables:
            lake.noop(log.where(F.col("tbl") == F.lit(table)).select(*lww.DELTA_COLUMNS, "shard", "seq"))

    def compaction_run() -> None:
        compact.run(lake.spark, config)
        for table in tables:
            lake.drop(f"state_{table}")

    full_scan()  # warm-up, not measured
    compaction_read()
    scan_s = [timed(full_scan)[0] for _ in range(runs)]
    read_s = [timed(compaction_read)[0] for _ in range(runs)]
    progress(f"lake/scan {label}: full scan {statistics.median(scan_s):.2f}s, read {statistics.median(read_s):.2f}s")
    run_s = [timed(compaction_run)[0] for _ in range(compact_runs)]
    progress(f"lake/scan {label}: compaction run {statistics.median(run_s):.2f}s")
    return {
        **lake.files(name),
        "full_scan_s": summarize(scan_s, digits=3),
        "compaction_read_s": summarize(read_s, digits=3),
        "compaction_run_s": summarize(run_s, digits=3),
        "digest": lake.digest(name),
    }


def run_scan(lake: Lake, sizes: LakeSizes) -> dict[str, Any]:
    """Part 3 (see the module docstring)."""
    from lakesync.spark import maintenance

    # compact.run and maintenance work on the namespace's delta log, named like the real one.
    table = "deltas"
    name = lake.name(table)
    progress(f"lake/scan: building the delta log: {sizes.scan_appends} appends, {sizes.scan_rows} rows")
    built = _build_small_files(lake, SCAN_WORKLOAD, sizes.scan_appends, sizes.scan_rows, table)
    progress(f"lake/scan: built in {built['build_s']:.0f}s; measuring before maintenance")
    before = _measure_scans(lake, name, sizes.scan_runs, sizes.compact_runs, "before")
    now_ms = int(time.time() * 1000)
    maintenance_s, report = timed(
        lambda: maintenance.run(lake.spark, CATALOG, [f"{lake.namespace}.{table}"], older_than_ms=now_ms, now_ms=now_ms)
    )
    progress(f"lake/scan: maintenance in {maintenance_s:.1f}s {report.tables[0]}")
    after = _measure_scans(lake, name, sizes.scan_runs, sizes.compact_runs, "after")
    if before.pop("digest") != after.pop("digest"):
        raise RuntimeError("maintenance changed the rows of the delta log")
    lake.drop(table)

    def speedup(key: str) -> float:
        return round(float(before[key]["median"]) / float(after[key]["median"]), 2)

    return {
        "workload": {**{k: v for k, v in built.items() if k != "build_s"}, "shards": len(SCAN_WORKLOAD.shards)},
        "build_s": round(built["build_s"], 1),
        "before": before,
        "maintenance": {"seconds": round(maintenance_s, 2), **asdict(report.tables[0])},
        "after": after,
        "speedup": {key: speedup(key) for key in ("full_scan_s", "compaction_read_s", "compaction_run_s")},
        "same_rows_checked": True,
    }


# -- the run --------------------------------------------------------------------------------------------------------
def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    from lakesync.spark.runtime import iceberg_jars

    out: dict[str, str | None] = {}
    for name in ("pyspark", "pyiceberg", "pyarrow"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    with contextlib.suppress(Exception):
        out["iceberg_jars"] = ", ".join(p.name for p in iceberg_jars())
    return out


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


@contextlib.contextmanager
def _lake() -> Iterator[tuple[Lake, dict[str, Any]]]:
    root = Path(tempfile.mkdtemp(prefix="lakesync-lakebench-"))
    lake = Lake(root)
    try:
        yield lake, lake.start()
    finally:
        lake.stop()
        shutil.rmtree(root, ignore_errors=True)


def run(sizes: LakeSizes, out: Path, *, quick: bool = False) -> dict[str, Any]:
    """Run the three parts and write ``lake.json`` and ``lake.md`` into ``out``; returns the results."""
    started = time.monotonic()
    load_start = _load()
    results: dict[str, Any] = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "sizes": asdict(sizes),
    }
    progress(f"lake: starting Spark (local[2], driver memory {DRIVER_MEMORY}); results -> {out}")
    with _lake() as (lake, startup):
        results["spark_startup"] = startup
        progress(f"lake: JVM + session {startup['jvm_and_session_start_s']:.1f}s")
        results["write"] = run_write(lake, sizes)
        progress(summary_write(results["write"]))
        results["flush"] = run_flush(lake, sizes)
        results["scan"] = run_scan(lake, sizes)
    machine = machine_info()
    machine["packages"].update(_versions())
    results["machine"] = {**machine, "load_average_start": load_start, "load_average_end": _load()}
    results["duration_s"] = round(time.monotonic() - started, 1)
    json_path, md_path = write(results, out)
    progress(f"lake: wrote {json_path} and {md_path} ({results['duration_s']:.0f}s)")
    return results


def summary_write(write: dict[str, Any]) -> str:
    """One console line for part 1."""
    return (
        f"lake/write: {write['workload']['deltas']} deltas: ours {write['ours_total_s']['median']:.1f}s, pyiceberg "
        f"{write['pyiceberg_total_s']['median']:.1f}s: {write['ratio_pyiceberg_over_ours']['median']:.2f}x "
        f"(goal >= {GOAL_RATIO})"
    )


def quick_summary(results: dict[str, Any]) -> str:
    """One console line for the whole run."""
    scan = results["scan"]["speedup"]
    return (
        f"{summary_write(results['write'])}; flush e2e {results['flush']['workload']['deltas']} deltas in "
        f"{results['flush']['durations_ms']['total'] / 1000:.1f}s; scan after maintenance {scan['full_scan_s']}x, "
        f"compaction read {scan['compaction_read_s']}x faster"
    )


# -- the results files ----------------------------------------------------------------------------------------------
def write(results: dict[str, Any], directory: Path) -> tuple[Path, Path]:
    """Write ``lake.json``, ``lake.md`` and ``lake.png`` into ``directory``; returns the first two's paths."""
    paths = report.write(results, directory, stem="lake", render=markdown)
    plot(results, directory / "lake.png")
    return paths


def plot(r: Mapping[str, Any], path: Path) -> Path:
    """``lake.png``: the write side's repetitions, ours against pyiceberg with the goal line; and the delta log's
    scans before and after maintenance (small files compacted)."""
    w, sc = r["write"], r["scan"]
    fig, (write_ax, scan_ax) = plots.figure(2, width=5.6, height=4.2)
    pyiceberg = w["pyiceberg_deltas_per_s"]
    plots.spread(
        write_ax,
        {"ours\n(Spark job)": w["ours_deltas_per_s"]["values"], "pyiceberg\nappend": pyiceberg["values"]},
        colours=[plots.OURS, plots.FLOOR],
    )
    at_least = w["goal"]["ratio_at_least"]
    plots.goal_line(write_ax, at_least * pyiceberg["median"], f"goal: ≥ {at_least:g}× pyiceberg")
    write_ax.set_ylim(bottom=0)
    write_ax.set_ylabel("deltas/s, from making the dicts (higher is better)")
    write_ax.set_title(f"write {w['workload']['deltas']:,} deltas to the delta log", fontsize="medium")
    write_ax.legend(loc="lower right", fontsize="small")
    keys = {"full_scan_s": "full scan", "compaction_read_s": "compaction's read", "compaction_run_s": "compaction"}
    xs = range(len(keys))
    for offset, name, colour in ((-0.2, "before", plots.FLOOR), (0.2, "after", plots.OURS)):
        label = f"{name}: {sc[name]['data_files']:,} files" + (" (after maintenance)" if name == "after" else "")
        scan_ax.bar([x + offset for x in xs], [sc[name][k]["median"] for k in keys], 0.4, color=colour, label=label)
    for x, k in zip(xs, keys, strict=True):
        scan_ax.annotate(
            f"{sc['speedup'][k]:g}× faster", (x, sc["before"][k]["median"]), ha="center", va="bottom", fontsize="small"
        )
    scan_ax.set_xticks(list(xs), list(keys.values()))
    scan_ax.set_yscale("log")
    scan_ax.set_ylabel("seconds, median, log scale (lower is better)")
    scan_ax.set_title(f"{sc['workload']['rows']:,} rows in {sc['workload']['appends']} appends", fontsize="medium")
    scan_ax.legend(loc="upper left", fontsize="small")
    return plots.save(fig, path, title=f"Lake benchmarks, {r['timestamp'][:10]} (local Spark and Iceberg)")


def _range(stats: dict[str, Any], fmt: str = "{:.2f}") -> str:
    return report.stat_range(stats, fmt)


def _files(files: dict[str, Any]) -> str:
    return (
        f"{files['data_files']} data files, {files['data_mib']} MiB (mean {files['mean_file_kib']} KiB), "
        f"{files['manifests']} manifests"
    )


_BREAKDOWN_STEPS = {
    "tasks": "the read tasks alone (Python workers, no entries)",
    "generate": "+ the dicts made in them (`Workload.record`, standing in for `FlushStore.read_records`)",
    "arrow": "+ each range checked whole, converted to Arrow, into the JVM (`records_frame` into `noop`)",
    "rows": "+ the delta-log rows (`delta_log_frame` into `noop`)",
    "append": "+ Parquet files, the commit, the snapshot check and the tally (`append_records`)",
}


def _breakdown_rows(breakdown: dict[str, float]) -> list[str]:
    rows, previous = [], 0.0
    for key, label in _BREAKDOWN_STEPS.items():
        rows.append(f"| {label} | {breakdown[key]:.1f} | {breakdown[key] - previous:+.1f} |")
        previous = breakdown[key]
    return rows


def markdown(r: dict[str, Any]) -> str:
    """The human-readable results."""
    m, s, w, f, sc = r["machine"], r["spark_startup"], r["write"], r["flush"], r["scan"]
    doc = [line.strip() for line in (__doc__ or "").split("\n\n")[0].splitlines()]
    lines = [
        "# Lake benchmarks — latest results",
        "",
        f"Measured {r['timestamp']} in {r['duration_s']:.0f} s by `python -m benchmarks --only lake`"
        + (" (**quick sizes**)." if r["quick"] else "."),
        *report.machine_lines(m),
        f"Spark: `{s['master']}`, driver memory {s['driver_memory']}.",
        "",
        " ".join(doc),
        "",
        "## Goal",
        "",
        "| figure | goal | measured (median) | verdict |",
        "|---|---|---|---|",
        f"| write side, {w['workload']['deltas']:,} deltas: pyiceberg time / ours, both from making the dicts | "
        f"≥ {w['goal']['ratio_at_least']} | {w['ratio_pyiceberg_over_ours']['median']:.2f}× | "
        f"{'met' if w['goal']['met'] else '**missed**'} |",
        f"| the same without making the dicts on either side | ≥ {w['goal']['ratio_at_least']} | "
        f"{w['ratio_without_generation']['median']:.2f}× | "
        f"{'met' if w['ratio_without_generation']['median'] >= w['goal']['ratio_at_least'] else '**missed**'} |",
        "",
        "![The write side against pyiceberg, and the scans before and after maintenance](lake.png)",
        "",
        "## JVM and SparkSession start (not in any figure below)",
        "",
        f"* `import pyspark.sql`: {s['pyspark_import_s']:.2f} s",
        f"* JVM launch + SparkContext + SparkSession (`build_session`, Iceberg runtime jars): "
        f"{s['jvm_and_session_start_s']:.2f} s",
        f"* first statement loading the Iceberg catalog (`CREATE NAMESPACE`): {s['first_catalog_statement_s']:.2f} s",
        "",
        "## 1. Write side: the flush's write path vs a plain pyiceberg append",
        "",
        f"Workload: {w['workload']['deltas']:,} deltas over {w['workload']['shards']} shards, "
        f"{w['workload']['partitions']} partitions (gateway × tbl × day); {w['workload']['repetitions']} repetitions "
        f"after a warm-up of {w['workload']['warmup_deltas']:,} deltas each side; fresh tables per repetition. Both "
        "sides start from the same `LogRecord` dicts, made by the same function and timed on both sides. Both tables "
        "checked to hold the same rows.",
        "",
        "* **ours**: `records_frame` + `append_records` (lakesync.spark.flush), the job's path from the planned "
        f"ranges to the commit: one Spark job of {w['workload']['read_tasks']} read tasks (ranges of "
        f"{w['workload']['range_size']:,} entries in contiguous slices) in which each task makes its ranges' dicts "
        "(the benchmark's reader in place of `FlushStore.read_records`), checks each range whole, converts it to "
        "Arrow (`mapInArrow`), and writes its Parquet files without a shuffle (fanout); then one commit with the "
        "watermarks and run id, the snapshot check and the tally of the reads checked against the ranges. "
        "*making the dicts*: measured apart in every repetition, as a pass of the same tasks that only makes them "
        "minus a pass that makes nothing.",
        "* **pyiceberg**: *making the dicts* in chunks of 100k (timed), *convert*: `pa.Table.from_pylist` of each "
        "chunk, `commit_ts` via `pyarrow.compute`, columns in table order; *append*: `table.append(arrow_table)`; "
        f"its `day` partition values computed by {w['pyiceberg_day_transform']} (checked: both tables have the same "
        "partitions with the same row counts).",
        "",
        "| side | step | seconds: median (min–max, spread, n) |",
        "|---|---|---|",
        f"| ours | **total** (one job: dicts, Arrow, Parquet, commit) | {_range(w['ours_total_s'])} |",
        f"| ours | of which making the dicts (measured apart) | {_range(w['ours_generation_s'])} |",
        f"| ours | total without making the dicts | {_range(w['ours_without_generation_s'])} |",
        f"| pyiceberg | making the dicts | {_range(w['pyiceberg_generation_s'])} |",
        f"| pyiceberg | convert | {_range(w['pyiceberg_convert_s'])} |",
        f"| pyiceberg | append | {_range(w['pyiceberg_append_s'])} |",
        f"| pyiceberg | **total** | {_range(w['pyiceberg_total_s'])} |",
        "",
        f"Rates: ours {_range(w['ours_deltas_per_s'], '{:,.0f}')} deltas/s, pyiceberg "
        f"{_range(w['pyiceberg_deltas_per_s'], '{:,.0f}')} deltas/s (both from the dicts' making).",
        "",
        "Ratios (per repetition, then median):",
        "",
        f"* pyiceberg total / ours total, both from making the dicts (**the goal's figure**): "
        f"{_range(w['ratio_pyiceberg_over_ours'], '{:.3f}')}. Ours makes its dicts in parallel read tasks, as the "
        "job reads DynamoDB; pyiceberg in one process.",
        f"* without making the dicts on either side, pyiceberg convert + append / ours: "
        f"{_range(w['ratio_without_generation'], '{:.3f}')}",
        f"* pyiceberg append alone / ours without making the dicts (stricter: Arrow input for free): "
        f"{_range(w['ratio_append_over_ours_without_generation'], '{:.3f}')}",
        "",
        f"Files written (last repetition): ours {_files(w['files']['ours'])}; pyiceberg "
        f"{_files(w['files']['pyiceberg'])}. Without a shuffle each read task writes one file per partition it "
        "meets (its ranges are neighbours, mostly of one or two shards).",
        "",
        "Where our time goes (one pass after the repetitions; each Spark job repeats the steps before it, so the "
        "differences are the step costs, approximately):",
        "",
        "| step | cumulative s | step s |",
        "|---|---|---|",
        *_breakdown_rows(w["ours_breakdown_s"]),
        "",
        "Warm-up (first writes in this JVM, seconds): "
        + "; ".join(
            f"{side} " + ", ".join(f"{k.removesuffix('_s')} {v:.2f}" for k, v in w["warmup"][side].items())
            for side in ("ours", "pyiceberg")
        )
        + ".",
        "",
        "## 2. The flush job end to end (moto)",
        "",
        f"Workload: {f['workload']['deltas']:,} pending deltas in {f['workload']['shards']} shards "
        f"({f['workload']['gateways']} gateways × {f['workload']['tables']} tables × 2 sub-shards), "
        f"{f['bytes']:,} bytes; ranges of {f['workload']['range_size']} entries. Seeding (not timed): push service "
        f"{f['seeding_s']['push_service_s']} s, writing the items into moto {f['seeding_s']['write_to_moto_s']} s.",
        "",
        "The write step (read + append in one Spark job) is bound by moto serving `Query` pages (an emulator, ~1k "
        "items/s): it says nothing about Glue on DynamoDB. The other steps are the job's own.",
        "",
        "| step | ms |",
        "|---|---|",
        *(f"| {step} | {ms:,} |" for step, ms in f["durations_ms"].items()),
        "",
        f"Rates: {f['deltas_per_s_total']:,} deltas/s overall, {f['deltas_per_s_write']:,} through the write step "
        f"(read + append, one Spark job); wall time of `flush.run` {f['wall_s']:.1f} s; "
        f"{f['heads_advanced']} heads advanced; {_files(f['files'])}.",
        "",
        f"A second run with nothing new (no snapshot): {f['idle_run']['wall_s']:.2f} s "
        f"({', '.join(f'{k} {v}' for k, v in f['idle_run']['durations_ms'].items())} ms).",
        "",
        "## 3. Delta-log scans before and after maintenance",
        "",
        f"Workload: {sc['workload']['appends']} flush appends of {sc['workload']['rows_per_append']} entries "
        f"({sc['workload']['rows']:,} rows, {sc['workload']['shards']} shards, 4 partitions) built in "
        f"{sc['build_s']:.0f} s by `append_records`. Full scan: every column into Spark's `noop` sink. Compaction "
        "read: per synced table the frame a first `compact_table` run caches, into `noop`. Compaction run: "
        "`lakesync.spark.compact.run` into fresh state tables (read, fold, MERGE).",
        "",
        "| | before maintenance | after maintenance | speed-up |",
        "|---|---|---|---|",
        f"| files | {_files(sc['before'])} | {_files(sc['after'])} | |",
        *(
            f"| {label} (s) | {_range(sc['before'][key])} | {_range(sc['after'][key])} | {sc['speedup'][key]}× |"
            for label, key in (
                ("full scan", "full_scan_s"),
                ("compaction read", "compaction_read_s"),
                ("compaction run", "compaction_run_s"),
            )
        ),
        "",
        f"Maintenance (`lakesync.spark.maintenance.run`: rewrite data files, expire snapshots, remove orphans) took "
        f"{sc['maintenance']['seconds']:.1f} s: {sc['maintenance']['rewritten_files']} files rewritten into "
        f"{sc['maintenance']['added_files']}, {sc['maintenance']['deleted_files']} files deleted by snapshot expiry, "
        f"{sc['maintenance']['orphans_removed']} orphans removed. Rows checked unchanged.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks --only lake`` is the usual entry; this runs the lake benchmark alone."""
    from benchmarks.__main__ import main as bench_main

    return bench_main(["--only", "lake", *(argv or [])])
