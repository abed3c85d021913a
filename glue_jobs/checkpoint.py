"""Glue job: cut a checkpoint of each gateway from the state tables (lakesync.spark.checkpoint.run does the work).

Job parameters (``JOB_OPTIONS``; Glue's own, such as ``--JOB_NAME``, are ignored; ``--catalog-uri`` is the same as
``--catalog_uri``)::

    --bucket B --gateways a,b --warehouse W [--catalog glue|local] [--catalog_name lake] [--catalog_uri U]
    [--namespace N] [--chunk_bytes N] [--include_deleted true|false] [--deleted_within_hours H] [--region R]
    [--s3_endpoint URL]

Deleted rows are kept (as their DELETE) unless ``--include_deleted false``; ``--deleted_within_hours H`` keeps only
those deleted in the last ``H`` hours (lakesync.spark.checkpoint: what they are for and what they cost).

On Glue: ``--catalog glue --warehouse s3://... --region R`` (the default catalog is ``glue``; without ``--region`` the
S3 client takes the environment's). Locally: ``--catalog local --warehouse DIR --catalog_uri FILE.db`` and
``--s3_endpoint`` (or ``AWS_ENDPOINT_URL``), e.g. the moto server.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Literal

from lakesync.aws.objects import S3ObjectStore, s3_client
from lakesync.core.checkpoint import DEFAULT_CHUNK_BYTES
from lakesync.lake.tables import NAMESPACE
from lakesync.spark.checkpoint import CheckpointConfig, run
from lakesync.spark.glue import catalog_kind, flag, resolved_options
from lakesync.spark.session import build_session

JOB_OPTIONS = (
    "bucket",
    "gateways",
    "warehouse",
    "catalog",
    "catalog_name",
    "catalog_uri",
    "namespace",
    "chunk_bytes",
    "include_deleted",
    "deleted_within_hours",
    "region",
    "s3_endpoint",
)
"""The job's options; ``bucket``, ``gateways`` and ``warehouse`` are required."""


def parse(options: Mapping[str, str]) -> tuple[CheckpointConfig, str, Literal["local", "glue"], str | None]:
    """``(config, warehouse, catalog kind, catalog uri)`` from the job options.

    Raises:
        ValueError: a required option is missing or a value is malformed.
    """
    missing = [f"--{name}" for name in ("bucket", "gateways", "warehouse") if name not in options]
    if missing:
        raise ValueError(f"{', '.join(missing)} required")
    kind = catalog_kind(options)
    include_deleted = flag(options, "include_deleted", default=True)
    within = options.get("deleted_within_hours")
    deleted_within_hours = None if within is None else _hours(within)
    config = CheckpointConfig(
        bucket=options["bucket"],
        gateways=tuple(g.strip() for g in options["gateways"].split(",") if g.strip()),
        catalog=options.get("catalog_name", "lake"),
        namespace=options.get("namespace", NAMESPACE),
        chunk_bytes=int(options.get("chunk_bytes", DEFAULT_CHUNK_BYTES)),
        include_deleted=include_deleted,
        deleted_within_hours=deleted_within_hours,
    )
    return config, options["warehouse"], kind, options.get("catalog_uri")


def _hours(text: str) -> float:
    try:
        hours = float(text)
    except ValueError:
        hours = -1.0
    if not 0 <= hours < float("inf"):
        raise ValueError(f"--deleted_within_hours must be a number of hours >= 0, got {text!r}")
    return hours


def main(argv: Sequence[str] | None = None) -> int:
    """Run the job; prints one JSON line per gateway."""
    options = resolved_options(JOB_OPTIONS, argv)
    config, warehouse, kind, catalog_uri = parse(options)
    client = {"region": "region_name", "s3_endpoint": "endpoint_url"}
    objects = S3ObjectStore(config.bucket, s3_client(**{client[k]: v for k, v in options.items() if k in client}))
    spark = build_session(
        app_name="lakesync-checkpoint",
        warehouse=warehouse,
        catalog_name=config.catalog,
        catalog=kind,
        catalog_uri=catalog_uri,
    )
    report = run(spark, config, objects=objects)
    for outcome in report.gateways:
        manifest = outcome.manifest
        line: dict[str, object] = {"gateway": outcome.gateway, "skipped": outcome.skipped}
        if manifest is not None:
            line |= {"checkpointId": manifest.checkpoint_id, "rows": manifest.rows, "chunks": len(manifest.chunks)}
        print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
