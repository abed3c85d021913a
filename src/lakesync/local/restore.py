"""``lakesync restore`` on the embedded default: the buffer of the ``lakesync local`` running on a data directory,
rebuilt from that directory's lake (docs/lake.md, "Rebuild the gateway from the lake")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from lakesync.core.restore import RestoreReport
from lakesync.local.pipeline import lake_paths
from lakesync.local.runner import CHECKPOINT_BUCKET, TABLE_PREFIX, aws_profile

__all__ = ["restore_local"]


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
