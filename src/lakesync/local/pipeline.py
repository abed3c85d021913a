"""The lake half of the embedded default: flush → compact → checkpoint against the local stack.

The same job code AWS runs: the flush on pyiceberg as the flush function runs it, or on Spark as the Glue flush job,
chosen as the lake tick chooses (:func:`lakesync.core.lake_work.choose_flush_engine`: the function up to
``LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG`` unflushed entries, Spark beyond), compaction and the checkpoint on local
Spark. Here the buffer is DynamoDB on the local moto server, the lake a
sqlite-catalog Iceberg warehouse in the data directory shared by Spark and pyiceberg, checkpoints go to the local moto
S3 bucket.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakesync.local.runner import CHECKPOINT_BUCKET, TABLE_PREFIX, LocalStack

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from lakesync.aws.flush_store import DynamoConfig
    from lakesync.lake.flush import DeltaLog

SparkSession = Any
"""A ``pyspark.sql.SparkSession`` (pyspark is imported only under lakesync.spark)."""


def lake_paths(data_dir: Path) -> tuple[Path, Path]:
    """The local lake of a data directory: (sqlite catalog file, warehouse directory)."""
    return data_dir / "lake" / "catalog.db", data_dir / "lake" / "warehouse"


def lake_session(data_dir: Path) -> SparkSession:
    """The local Spark session on the data directory's lake (the one session of this process)."""
    from lakesync.spark.session import build_session

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    catalog_db, warehouse = lake_paths(data_dir)
    # Errors only: Spark's warnings (a plan string truncated, a cached block already there) are not for the terminal
    # of `lakesync local` or the demo.
    return build_session(
        app_name="lakesync-local",
        catalog="local",
        warehouse=str(warehouse),
        catalog_uri=str(catalog_db),
        log_level="ERROR",
    )


def lake_has_work(stack: LocalStack, gateways: tuple[str, ...]) -> Callable[[], bool]:
    """Whether the local lake has work (the lake tick's rule, :meth:`lakesync.aws.lake_tick.LakeTick.has_work`), read
    from the local stack's buffer and checkpoint bucket; the local flush publishes, as :func:`run_pipeline` runs it."""
    from lakesync.aws.config_store import DynamoDBConfigStore
    from lakesync.aws.flush_store import FlushStore
    from lakesync.aws.lake_tick import LakeReader, LakeTick
    from lakesync.aws.objects import S3ObjectStore, s3_client
    from lakesync.aws.tables import TableNames

    client = stack.dynamodb_client()
    names = TableNames.with_prefix(TABLE_PREFIX)
    reader = LakeReader(
        FlushStore(client, names),
        DynamoDBConfigStore(client, names),
        gateways,
        S3ObjectStore(CHECKPOINT_BUCKET, s3_client(**stack.aws_kwargs())),
    )
    return LakeTick(reader, {}, publishing=True).has_work


@dataclass(frozen=True, slots=True)
class PipelineReport:
    """What one pipeline run did (``flush_engine``: the engine the flush ran on, ``function`` or ``glue``)."""

    flushed: int
    compacted: int
    checkpoint_rows: int
    checkpoint_id: str | None
    seconds: dict[str, float]
    flush_engine: str = "function"


def flush_function_max_backlog(environ: Mapping[str, str]) -> int:
    """The function's backlog limit: ``LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG`` as the lake tick reads it, else the
    default.

    Raises:
        SettingsError: the variable is not a whole number of at least 0.
    """
    from lakesync.aws.settings.env import SettingsError
    from lakesync.aws.settings.variables import FLUSH_FUNCTION_MAX_BACKLOG
    from lakesync.core.lake_work import DEFAULT_FUNCTION_MAX_BACKLOG

    raw = environ.get(FLUSH_FUNCTION_MAX_BACKLOG, "").strip()
    if not raw:
        return DEFAULT_FUNCTION_MAX_BACKLOG
    if not raw.isdigit():
        raise SettingsError(f"Invalid LakeSync configuration: {FLUSH_FUNCTION_MAX_BACKLOG} must be a whole number")
    return int(raw)


def stack_dynamo_config(stack: LocalStack) -> DynamoConfig:
    """The lake jobs' DynamoDB settings for the stack's buffer tables on its moto server."""
    from lakesync.aws.flush_store import DynamoConfig as Config
    from lakesync.aws.tables import TableNames

    aws = stack.aws_kwargs()
    return Config(
        tables=TableNames.with_prefix(TABLE_PREFIX),
        endpoint_url=aws["endpoint_url"],
        region=aws["region_name"],
        access_key_id=aws["aws_access_key_id"],
        secret_access_key=aws["aws_secret_access_key"],
    )


def run_pipeline(
    stack: LocalStack,
    spark: SparkSession,
    *,
    gateways: tuple[str, ...] = ("default",),
    say: Callable[[str], None] = print,
    flush_engine: str = "auto",
    max_backlog: int | None = None,
) -> PipelineReport:
    """Flush the buffer into the lake, fold it into current state and cut a checkpoint per gateway.

    ``flush_engine`` is the flush's engine setting, as on AWS: ``auto`` (the default: the engine chosen for the
    backlog, read from the shard heads, against ``max_backlog`` -- default :func:`flush_function_max_backlog` of the
    environment), ``function`` (pyiceberg in this process, on the catalog and warehouse the Spark session uses) or
    ``glue`` (Spark).
    """
    from lakesync.aws.checkpoints import read_release_bounds
    from lakesync.aws.config_store import DynamoDBConfigStore
    from lakesync.aws.flush_store import FlushStore
    from lakesync.aws.objects import S3ObjectStore, s3_client
    from lakesync.aws.tables import TableNames
    from lakesync.core.lake_work import FLUSH_ENGINES, choose_flush_engine, flush_backlog
    from lakesync.lake.flush import run_flush
    from lakesync.lake.iceberg_flush import IcebergDeltaLog
    from lakesync.spark import checkpoint, compact, flush

    aws = stack.aws_kwargs()
    names = TableNames.with_prefix(TABLE_PREFIX)
    objects = S3ObjectStore(CHECKPOINT_BUCKET, s3_client(**aws))
    seconds: dict[str, float] = {}
    bounds = read_release_bounds(CHECKPOINT_BUCKET, gateways, objects=objects)

    started = time.perf_counter()
    dynamo = stack_dynamo_config(stack)
    flush_config = flush.FlushConfig(dynamodb=dynamo, gateways=gateways, publish=stack.publish_config())
    engines = [e for e in FLUSH_ENGINES if flush_engine in ("auto", e)]
    if not engines:
        raise ValueError(f"flush_engine must be auto, function or glue, got {flush_engine!r}")
    _, heads = FlushStore(dynamo.client(), names).shards(gateways)
    backlog = flush_backlog(heads.values())
    limit = flush_function_max_backlog(os.environ) if max_backlog is None else max_backlog
    chosen = choose_flush_engine(backlog, max_backlog=limit, engines=engines)
    engine: DeltaLog = flush.SparkDeltaLog(spark, flush_config)
    if chosen == "function":
        engine = IcebergDeltaLog(_session_catalog(spark, flush_config.catalog), flush_config)
    flushed = run_flush(engine, flush_config, checkpoint_positions=bounds.positions, checkpoint_hlcs=bounds.hlcs)
    seconds["flush"] = time.perf_counter() - started
    on = "pyiceberg, as the flush function" if chosen == "function" else "Spark, as the Glue flush job"
    say(
        f"   flush ({on}; backlog {backlog:,}): {flushed.deltas} deltas from {flushed.shards} shard(s) into the"
        f" Iceberg delta log; {flushed.published_jobs} materialisation job(s) published"
    )

    started = time.perf_counter()
    config_store = DynamoDBConfigStore(dynamo.client(), names)
    schemas = {}
    for gateway in gateways:
        schemas.update({table: schema for table, (schema, _version) in config_store.get_schemas(gateway).items()})
    compacted = compact.run(spark, compact.CompactConfig(), schemas)
    seconds["compact"] = time.perf_counter() - started
    folded = sum(t.deltas for t in compacted.tables)
    say(f"   compact: {folded} deltas folded into {len(compacted.tables)} state table(s)")

    started = time.perf_counter()
    cut = checkpoint.run(
        spark, checkpoint.CheckpointConfig(bucket=CHECKPOINT_BUCKET, gateways=gateways), objects=objects
    )
    seconds["checkpoint"] = time.perf_counter() - started
    rows = 0
    checkpoint_id = None
    for made in cut.gateways:
        if made.manifest is not None:
            rows += made.manifest.rows
            checkpoint_id = made.manifest.checkpoint_id
    say(f"   checkpoint: {rows} row(s) in checkpoint {checkpoint_id}")
    return PipelineReport(flushed.deltas, folded, rows, checkpoint_id, seconds, chosen)


def _session_catalog(spark: SparkSession, name: str) -> Catalog:
    """pyiceberg on the sqlite catalog and warehouse of the session's catalog ``name``."""
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    from lakesync.lake.catalog import local_catalog

    prefix = f"spark.sql.catalog.{name}"
    warehouse = spark.conf.get(f"{prefix}.warehouse")
    uri = spark.conf.get(f"{prefix}.uri")
    assert warehouse is not None and uri is not None
    return local_catalog(uri, url2pathname(urlparse(warehouse).path))
