"""The delta log as a restore reads it, on Spark (:class:`lakesync.gateway.restore.LakeReader`): what the restore job
reads on Glue, where pyiceberg is not installed (docs/lake.md, "Rebuild the gateway from the lake").

It gives what :class:`lakesync.lake.restore_reader.IcebergLakeReader` gives: the flush watermarks as the Spark flush
reads them (:func:`lakesync.spark.flush.read_watermarks`, from the snapshot properties the flush writes), and a
gateway's entries as :func:`lakesync.lake.restore_reader.lake_entry` makes them from the delta log's records,
streamed to the driver one partition at a time. The restore job's options (:data:`JOB_OPTIONS`,
:class:`RestoreJobArgs`) are parsed here too, as the other jobs' are in their modules.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pyspark.sql import functions as F

from lakesync.aws.tables import TableNames
from lakesync.core.restore import LakeEntry
from lakesync.lake.restore_reader import FIELDS, lake_entry
from lakesync.lake.tables import DELTA_LOG, NAMESPACE, qualified
from lakesync.spark.flush import read_watermarks
from lakesync.spark.glue import buffer_tables, catalog_kind, flag

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["JOB_OPTIONS", "RestoreJobArgs", "SparkLakeReader"]


class SparkLakeReader:
    """The delta log ``<catalog>.<namespace>.deltas`` of ``spark`` (read only)."""

    def __init__(self, spark: SparkSession, catalog: str = "lake", namespace: str = NAMESPACE) -> None:
        self._spark = spark
        self._table = qualified(catalog, DELTA_LOG, namespace)

    def _exists(self) -> bool:
        return bool(self._spark.catalog.tableExists(self._table))

    def watermarks(self) -> dict[str, int]:
        """``{shard: seq}`` of every shard flushed (empty when there is no delta log)."""
        return read_watermarks(self._spark, self._table)[0] if self._exists() else {}

    def entries(self, gateway: str) -> Iterator[LakeEntry]:
        """Every entry of ``gateway``, streamed partition by partition."""
        if not self._exists():
            return
        frame = self._spark.table(self._table).where(F.col("gateway") == gateway).select(*FIELDS)
        for row in frame.toLocalIterator(prefetchPartitions=True):
            yield lake_entry(row.asDict(recursive=True))


JOB_OPTIONS = (
    "gateways",
    "tables",
    "table_prefix",
    "warehouse",
    "catalog",
    "catalog_name",
    "catalog_uri",
    "namespace",
    "checkpoint_bucket",
    "region",
    "replace",
    "lose_unflushed",
    "old_table_prefix",
    "create_tables",
    "dynamodb_endpoint",
    "s3_endpoint",
)
"""The job's options; ``gateways``, ``warehouse`` and one of ``tables``/``table_prefix`` are required."""


@dataclass(frozen=True, slots=True)
class RestoreJobArgs:
    """The restore job's arguments (``glue_jobs/restore.py``: what each option means)."""

    gateways: tuple[str, ...]
    tables: TableNames
    warehouse: str
    catalog_kind: Literal["local", "glue"] = "glue"
    catalog_name: str = "lake"
    catalog_uri: str | None = None
    namespace: str = NAMESPACE
    checkpoint_bucket: str | None = None
    region: str | None = None
    replace: bool = False
    lose_unflushed: bool = False
    old_tables: TableNames | None = None
    create_tables: bool = False
    dynamodb_endpoint: str | None = None
    s3_endpoint: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> RestoreJobArgs:
        """Build from job options (names of :data:`JOB_OPTIONS`).

        Raises:
            ValueError: a required option is missing or a value is malformed.
        """
        missing = [f"--{name}" for name in ("gateways", "warehouse") if name not in options]
        if missing:
            raise ValueError(f"{', '.join(missing)} required")
        gateways = tuple(g.strip() for g in options["gateways"].split(",") if g.strip())
        if not gateways:
            raise ValueError("--gateways names no gateway")
        tables = buffer_tables(options)
        if tables is None:
            raise ValueError("--tables (JSON) or --table_prefix is required")
        old = options.get("old_table_prefix")
        return cls(
            gateways=gateways,
            tables=tables,
            warehouse=options["warehouse"],
            catalog_kind=catalog_kind(options),
            catalog_name=options.get("catalog_name", "lake"),
            catalog_uri=options.get("catalog_uri"),
            namespace=options.get("namespace", NAMESPACE),
            checkpoint_bucket=options.get("checkpoint_bucket"),
            region=options.get("region"),
            replace=flag(options, "replace", default=False),
            lose_unflushed=flag(options, "lose_unflushed", default=False),
            old_tables=TableNames.with_prefix(old) if old else None,
            create_tables=flag(options, "create_tables", default=False),
            dynamodb_endpoint=options.get("dynamodb_endpoint"),
            s3_endpoint=options.get("s3_endpoint"),
        )
