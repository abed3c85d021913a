"""``lakesync restore``: the buffer of the ``lakesync local`` running on a data directory rebuilt from that directory's
lake, or a deployed stack's from its lake, configured as its flush function is (docs/lake.md, "Rebuild the gateway
from the lake")."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from lakesync.core.restore import RestoreReport
from lakesync.local.pipeline import lake_paths
from lakesync.local.runner import CHECKPOINT_BUCKET, TABLE_PREFIX, aws_profile

__all__ = ["restore_deployed", "restore_local"]


def restore_local(
    data_dir: Path,
    gateways: Sequence[str],
    *,
    replace: bool = False,
    lose_unflushed: bool = False,
    progress: Callable[[str], None] | None = None,
) -> list[RestoreReport]:
    """Restore ``gateways`` into the buffer tables of the stack running on ``data_dir``, from its lake, with a
    checkpoint at the restored positions in its checkpoint bucket (:func:`lakesync.lake.restore_job.restore_buffer`;
    ``replace``: read the tables as the old buffer, then delete every item in them; ``lose_unflushed``: even when
    they hold deltas the lake does not).

    Raises:
        FileNotFoundError: no stack ever ran on ``data_dir``, or it has no lake.
        RestoreTargetNotEmptyError: the tables hold a gateway being restored (without ``replace``), or another one.
        UnflushedDataError: with ``replace``, they hold deltas the lake does not (without ``lose_unflushed``).
    """
    import boto3

    from lakesync.aws.objects import S3ObjectStore, s3_client
    from lakesync.aws.tables import TableNames
    from lakesync.lake.catalog import local_catalog
    from lakesync.lake.restore_job import restore_buffer
    from lakesync.lake.restore_reader import IcebergLakeReader

    aws = aws_profile(data_dir)
    catalog_db, warehouse = lake_paths(data_dir)
    if not catalog_db.exists():
        raise FileNotFoundError(f"no lake in {data_dir}: nothing was ever flushed there")
    return restore_buffer(
        boto3.client("dynamodb", **aws),  # type: ignore[call-overload]
        TableNames.with_prefix(TABLE_PREFIX),
        IcebergLakeReader(local_catalog(catalog_db, warehouse)),
        gateways,
        objects=S3ObjectStore(CHECKPOINT_BUCKET, s3_client(**aws)),
        replace=replace,
        lose_unflushed=lose_unflushed,
        progress=progress,
    )


def restore_deployed(
    environ: Mapping[str, str],
    gateways: Sequence[str],
    *,
    old_prefix: str | None = None,
    replace: bool = False,
    lose_unflushed: bool = False,
    progress: Callable[[str], None] | None = None,
) -> list[RestoreReport]:
    """Restore ``gateways`` of a deployed stack, configured by the flush function's environment ``environ`` (its
    tables, lake catalog and namespace, checkpoint bucket and region: ``aws lambda get-function-configuration`` of
    the flush function lists them), with this process's AWS credentials. ``old_prefix``: the old buffer's tables
    (``{prefix}-deltas`` ...), read first; ``replace`` and ``lose_unflushed`` as for :func:`restore_local`.

    Raises:
        SettingsError: the environment is incomplete or invalid.
        RestoreTargetNotEmptyError, UnflushedDataError: as :func:`lakesync.lake.restore_job.restore_buffer`.
    """
    import boto3

    from lakesync.aws.flush_function import lake_catalog
    from lakesync.aws.objects import S3ObjectStore, s3_client
    from lakesync.aws.settings.lake import FlushFunctionSettings
    from lakesync.aws.tables import TableNames
    from lakesync.lake.restore_job import restore_buffer
    from lakesync.lake.restore_reader import IcebergLakeReader

    settings = FlushFunctionSettings.from_env(environ)
    region = {"region_name": settings.region} if settings.region else {}
    bucket = settings.checkpoint_bucket
    return restore_buffer(
        boto3.client("dynamodb", **region),  # type: ignore[call-overload]
        settings.tables,
        IcebergLakeReader(lake_catalog(settings), settings.namespace),
        gateways,
        objects=S3ObjectStore(bucket, s3_client(**region)) if bucket else None,
        old=TableNames.with_prefix(old_prefix) if old_prefix else None,
        replace=replace,
        lose_unflushed=lose_unflushed,
        progress=progress,
    )
