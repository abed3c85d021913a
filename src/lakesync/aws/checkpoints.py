"""What the latest checkpoints let the flush job release: one reader for the Glue flush job and the local pipeline.

The checkpoint job publishes, per gateway, ``checkpoints/<gateway>/<id>/manifest.json`` and then the pointer
``checkpoints/<gateway>/latest.json`` (:mod:`lakesync.core.checkpoint`). A buffer entry may be released only when the
gateway's latest checkpoint covers it by position *and* by ``serverHlc``
(:meth:`~lakesync.core.checkpoint.Manifest.releasable`), so :class:`ReleaseBounds` carries both, per shard.

Invariants: bounds only ever come from a complete, well-formed checkpoint of the same gateway (``latest.json`` is
written last and :func:`~lakesync.core.checkpoint.load_manifest` checks the manifest); a gateway without one, or
whose checkpoint cannot be read, contributes nothing, so nothing of it is released -- an unreadable checkpoint never
stops the flush itself. Stale bounds are safe: a checkpoint only covers entries already in the lake.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from lakesync.core.checkpoint import PREFIX, load_manifest
from lakesync.core.errors import StorageError
from lakesync.ports import ObjectStore

if TYPE_CHECKING:
    from lakesync.aws.objects import S3ObjectStore

__all__ = ["ReleaseBounds", "checkpointed_gateways", "read_release_bounds", "release_bounds"]


@dataclass(frozen=True, slots=True)
class ReleaseBounds:
    """Per shard, how far the latest checkpoints let the buffer be released.

    Attributes:
        positions: ``{shard: seq}``: entries up to ``seq`` are in the shard's gateway's latest checkpoint.
        hlcs: ``{shard: serverHlc}`` of that checkpoint: only entries committed at or below it may go.
        checkpoints: ``{gateway: checkpoint id}`` the bounds were read from.
        skipped: ``{gateway: why}`` for gateways that contribute nothing (no checkpoint, unreadable one).
        bucket: Where the checkpoints were read; ``None`` when no bucket was configured.
    """

    positions: Mapping[str, int] = field(default_factory=dict)
    hlcs: Mapping[str, int] = field(default_factory=dict)
    checkpoints: Mapping[str, str] = field(default_factory=dict)
    skipped: Mapping[str, str] = field(default_factory=dict)
    bucket: str | None = None

    def report(self) -> dict[str, Any]:
        """A JSON-ready account for job reports (says so when nothing can be released)."""
        out: dict[str, Any] = {
            "bucket": self.bucket,
            "checkpoints": dict(sorted(self.checkpoints.items())),
            "skipped": dict(sorted(self.skipped.items())),
        }
        if self.bucket is None:
            out["note"] = "no checkpoint bucket configured: nothing is released from the buffer"
        elif not self.checkpoints:
            out["note"] = "no readable checkpoint: nothing is released from the buffer"
        return out


def release_bounds(objects: ObjectStore, gateways: Iterable[str], *, bucket: str | None = None) -> ReleaseBounds:
    """The bounds of the latest checkpoint of each of ``gateways`` in ``objects``.

    Args:
        objects: The checkpoint store.
        gateways: The gateways whose checkpoints to read.
        bucket: Recorded in the result (for reports).

    Returns:
        The positions and HLC bounds of every shard with a readable checkpoint; other gateways in ``skipped``.
    """
    positions: dict[str, int] = {}
    hlcs: dict[str, int] = {}
    found: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for gateway in sorted(set(gateways)):
        try:
            manifest = load_manifest(objects.get, gateway)
        except StorageError as exc:
            skipped[gateway] = f"unreadable checkpoint: {exc.message}"
            continue
        if manifest is None:
            skipped[gateway] = "no checkpoint"
            continue
        found[gateway] = manifest.checkpoint_id
        for shard, seq in manifest.positions.items():
            positions[shard] = seq
            hlcs[shard] = manifest.server_hlc
    return ReleaseBounds(positions, hlcs, found, skipped, bucket)


def checkpointed_gateways(objects: S3ObjectStore) -> list[str]:
    """The gateways with a folder under ``checkpoints/`` in the bucket (one delimited listing, not every chunk).

    Raises:
        StorageError: S3 refused or failed.
    """
    gateways: list[str] = []
    root = f"{PREFIX}/"
    try:
        pages = objects.client.get_paginator("list_objects_v2").paginate(
            Bucket=objects.bucket, Prefix=root, Delimiter="/"
        )
        for page in pages:
            for common in page.get("CommonPrefixes", []):
                gateway = common.get("Prefix", "").removeprefix(root).removesuffix("/")
                if gateway:
                    gateways.append(gateway)
    except (ClientError, BotoCoreError) as exc:
        raise StorageError(f"S3 ListObjectsV2 s3://{objects.bucket}/{root} failed: {type(exc).__name__}") from exc
    return gateways


def read_release_bounds(
    bucket: str | None,
    gateways: Iterable[str] | None,
    *,
    objects: S3ObjectStore | None = None,
    **client_kwargs: str | None,
) -> ReleaseBounds:
    """The release bounds for the flush job: the latest checkpoints in ``bucket`` of ``gateways``.

    Args:
        bucket: The checkpoint bucket; ``None`` releases nothing (the report says so).
        gateways: The gateways to read; ``None`` means every gateway with checkpoints in the bucket.
        objects: The store to read (default: ``bucket`` through a client made from ``client_kwargs``).
        **client_kwargs: boto3 client arguments (``endpoint_url``, ``region_name``, credentials); ``None`` values
            are dropped, so the environment (the job's role and region) fills them in.

    Returns:
        The bounds; a listing failure (``gateways`` None) gives empty bounds that say why.
    """
    if bucket is None:
        return ReleaseBounds()
    if objects is None:
        from lakesync.aws.objects import S3ObjectStore, s3_client

        given = {k: v for k, v in client_kwargs.items() if v is not None}
        objects = S3ObjectStore(bucket, s3_client(**given))
    if gateways is None:
        try:
            gateways = checkpointed_gateways(objects)
        except StorageError as exc:
            return ReleaseBounds(skipped={"*": exc.message}, bucket=bucket)
    return release_bounds(objects, gateways, bucket=bucket)
