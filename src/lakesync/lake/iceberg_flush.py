"""The flush on pyiceberg: one process, no JVM (the engine of :func:`lakesync.lake.flush.run_flush` for a function).

:class:`IcebergDeltaLog` reads the planned ranges from the buffer with a few threads, turns them into one Arrow table
and appends it in one pyiceberg transaction whose snapshot carries the watermarks and the run id. The data files are
written first; the lease is renewed; only then is the transaction committed, so a write that outlived its lease
commits nothing (its files are left unreferenced, as a failed Spark task's are). A table that moved since the write
loaded it (a maintenance rewrite) gets the append on top of its new snapshot (pyiceberg retries the commit, as
Iceberg's Java commit does), and :func:`~lakesync.lake.flush.our_snapshot` then checks that no other flush appended
since the snapshot the plan was made from, as on Spark.

The table is the one the Spark job writes (:func:`lakesync.lake.tables.delta_log_ddl`): the same columns, types and
partitioning, created here when this engine comes first. Either engine may write a deployment's delta log, one run at
a time (the lease).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from lakesync.aws.flush_store import FlushStore, ShardRange
from lakesync.core.errors import FlushError
from lakesync.lake.flush import (
    FLUSH_RUN,
    RECORD_ARROW_SCHEMA,
    FlushConfig,
    FlushPlan,
    LeaseGuard,
    RangeFigures,
    RangeReader,
    SnapshotInfo,
    check_ranges,
    fold_watermarks,
    our_snapshot,
    range_figures,
    record_batches,
    watermarks_property,
)
from lakesync.lake.tables import DELTA_LOG, FLUSH_WATERMARKS

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

__all__ = ["DELTA_LOG_ARROW_SCHEMA", "IcebergDeltaLog", "column_equals", "delta_log_partition_spec", "delta_log_schema"]

DELTA_LOG_ARROW_SCHEMA = pa.schema(
    [
        *(f for f in RECORD_ARROW_SCHEMA if f.name not in ("commit_ms", "size")),
        pa.field("commit_ts", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
"""The delta log's columns in Arrow, in the table's order (:func:`lakesync.lake.tables.delta_log_ddl`)."""

TABLE_PROPERTIES = {"format-version": "2", "write.parquet.compression-codec": "zstd"}
"""The delta log's table properties, as the Spark DDL sets them."""


def delta_log_schema() -> Schema:
    """The delta log's Iceberg schema, as Spark creates it from :func:`lakesync.lake.tables.delta_log_ddl`."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        ListType,
        LongType,
        NestedField,
        StringType,
        StructType,
        TimestamptzType,
    )

    strings = ("gateway", "tbl", "row_id", "op", "client_id")
    fields = [NestedField(i + 1, name, StringType(), required=True) for i, name in enumerate(strings)]
    fields += [
        NestedField(6, "hlc", LongType(), required=True),
        NestedField(7, "delta_id", StringType(), required=True),
        NestedField(
            8,
            "columns",
            ListType(
                13,
                StructType(
                    NestedField(14, "name", StringType(), required=False),
                    NestedField(15, "value", StringType(), required=False),
                ),
                element_required=False,
            ),
            required=True,
        ),
        NestedField(9, "shard", StringType(), required=True),
        NestedField(10, "seq", LongType(), required=True),
        NestedField(11, "commit_hlc", LongType(), required=True),
        NestedField(12, "commit_ts", TimestamptzType(), required=True),
    ]
    return Schema(*fields)


def delta_log_partition_spec() -> PartitionSpec:
    """``PARTITIONED BY (gateway, tbl, days(commit_ts))`` over :func:`delta_log_schema`, with Spark's field names."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform, IdentityTransform

    return PartitionSpec(
        PartitionField(1, 1000, IdentityTransform(), "gateway"),
        PartitionField(2, 1001, IdentityTransform(), "tbl"),
        PartitionField(12, 1002, DayTransform(), "commit_ts_day"),
    )


def delta_log_rows(batches: Sequence[pa.RecordBatch]) -> pa.Table:
    """Buffer records (:data:`~lakesync.lake.flush.RECORD_ARROW_SCHEMA` batches) as delta-log rows (pure):
    ``commit_ms`` becomes ``commit_ts``, ``size`` is dropped."""
    records = pa.Table.from_batches(batches, RECORD_ARROW_SCHEMA)
    commit_ts = pc.cast(pc.multiply(records.column("commit_ms"), 1000), pa.timestamp("us", tz="UTC"))
    columns = [commit_ts if f.name == "commit_ts" else records.column(f.name) for f in DELTA_LOG_ARROW_SCHEMA]
    return pa.Table.from_arrays(columns, schema=DELTA_LOG_ARROW_SCHEMA)


class IcebergDeltaLog:
    """The delta log of ``config`` in a pyiceberg catalog, appended in this process.

    Args:
        catalog: The lake's catalog (Glue on AWS, the local sqlite catalog in ``lakesync local`` and the tests).
        config: The run's configuration (``namespace``, ``dynamodb``).
        reader: Reads one range whole (defaults to a :class:`~lakesync.aws.flush_store.FlushStore` on
            ``config.dynamodb``; boto3 clients are thread-safe, so one serves every thread).
        threads: Ranges read at once.
    """

    def __init__(
        self, catalog: Catalog, config: FlushConfig, *, reader: RangeReader | None = None, threads: int = 4
    ) -> None:
        self._catalog = catalog
        self._config = config
        self._reader = reader
        self._threads = max(1, threads)
        self.identifier = (config.namespace, DELTA_LOG)
        self.name = ".".join(self.identifier)
        self._ensured = False

    def _read(self) -> RangeReader:
        if self._reader is None:
            self._reader = FlushStore.from_config(self._config.dynamodb).read_records
        return self._reader

    def _table(self) -> Table:
        return self._catalog.load_table(self.identifier)

    def ensure_table(self) -> None:
        # Looked up first: pyiceberg's create-if-not-exists writes a metadata file before the catalog refuses it.
        if self._ensured or self._catalog.table_exists(self.identifier):
            self._ensured = True
            return
        self._catalog.create_namespace_if_not_exists(self._config.namespace)
        self._catalog.create_table_if_not_exists(
            self.identifier,
            schema=delta_log_schema(),
            partition_spec=delta_log_partition_spec(),
            properties=TABLE_PROPERTIES,
        )
        self._ensured = True

    def _snapshots(self, table: Table) -> dict[int, SnapshotInfo]:
        out = {}
        for snap in table.metadata.snapshots:
            summary = snap.summary
            operation = summary.operation.value if summary is not None else ""
            props = summary.additional_properties if summary is not None else {}
            out[snap.snapshot_id] = SnapshotInfo(
                snap.parent_snapshot_id, operation, props.get(FLUSH_WATERMARKS), props.get(FLUSH_RUN)
            )
        return out

    def read_watermarks(self) -> tuple[dict[str, int], int | None]:
        table = self._table()
        main = table.metadata.refs.get("main")
        if main is None:
            return {}, None
        return fold_watermarks(self._snapshots(table), main.snapshot_id), main.snapshot_id

    def commit_hlcs(self, positions: Mapping[str, int]) -> dict[str, int]:
        from pyiceberg.expressions import And, Or

        if not positions:
            return {}
        terms: list[BooleanExpression] = [
            And(column_equals("shard", key), column_equals("seq", int(seq))) for key, seq in positions.items()
        ]
        where = functools.reduce(Or, terms)
        rows = self._table().scan(row_filter=where, selected_fields=("shard", "seq", "commit_hlc")).to_arrow()
        return {
            shard: int(hlc)
            for shard, seq, hlc in zip(
                rows.column("shard").to_pylist(),
                rows.column("seq").to_pylist(),
                rows.column("commit_hlc").to_pylist(),
                strict=True,
            )
            if positions.get(shard) == seq
        }

    def _read_ranges(self, ranges: Sequence[ShardRange]) -> tuple[list[pa.RecordBatch], list[RangeFigures]]:
        read = self._read()

        def one(shard_range: ShardRange) -> tuple[list[pa.RecordBatch], RangeFigures]:
            records = read(shard_range)
            return list(record_batches(records)), range_figures(shard_range, records)

        with ThreadPoolExecutor(min(self._threads, max(1, len(ranges)))) as pool:
            done = list(pool.map(one, ranges))
        return [b for batches, _ in done for b in batches], [figures for _, figures in done]

    def append(
        self, plan: FlushPlan, ranges: Sequence[ShardRange], run_id: str, base_snapshot: int | None, lease: LeaseGuard
    ) -> tuple[int, dict[str, tuple[int, int]]]:
        check_ranges(plan, ranges)
        lease.before_append()
        try:
            batches, figures = self._read_ranges(ranges)
        except FlushError as exc:
            raise FlushError(f"a read failed, nothing was committed: {exc}") from exc
        rows = delta_log_rows(batches)
        del batches
        transaction = self._table().transaction()
        transaction.append(
            rows,
            snapshot_properties={FLUSH_WATERMARKS: watermarks_property(plan.watermarks), FLUSH_RUN: run_id},
        )
        _commit(transaction.commit_transaction, lease.renew, run_id, self.name)
        snapshot_id = our_snapshot(self._snapshots(self._table()), self.name, run_id, base_snapshot)
        totals: dict[str, tuple[int, int]] = {}
        for shard_range, range_figs in zip(ranges, figures, strict=True):
            entries, size = totals.get(shard_range.shard, (0, 0))
            totals[shard_range.shard] = (entries + range_figs.entries, size + range_figs.bytes)
        return snapshot_id, totals


def _commit(commit: Callable[[], object], renew: Callable[[], bool], run_id: str, table: str) -> None:
    """Commit the written files, unless the lease was lost meanwhile; a commit the catalog still refuses after
    pyiceberg's retries is a :class:`FlushError`, and the next run plans again."""
    from pyiceberg.exceptions import CommitFailedException

    if not renew():
        raise FlushError(f"flush run {run_id} lost its lease during the write; nothing was committed")
    try:
        commit()
    except CommitFailedException as exc:
        raise FlushError(
            f"the commit of flush run {run_id} to {table} was refused, nothing was committed: {exc}"
        ) from exc


def column_equals(column: str, value: object) -> BooleanExpression:
    """pyiceberg's ``column = value`` row filter."""
    from pyiceberg.expressions import EqualTo

    # pyiceberg's predicates are pydantic models whose constructors take (term, literal); the signatures mypy derives
    # from their fields do not.
    return EqualTo(column, value)  # type: ignore[call-arg, arg-type]
