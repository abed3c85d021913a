"""Glue entry script: cut a checkpoint of each gateway from the state tables (lakesync.spark.checkpoint).

Job arguments (Glue passes ``--name value``; unknown ones such as ``--JOB_NAME`` are ignored)::

    --bucket B --gateways a,b [--catalog glue|local] [--warehouse W] [--catalog-uri U] [--namespace N]
    [--chunk-bytes N] [--include-deleted true|false]

On Glue: ``--catalog glue --warehouse s3://...`` (the defaults expect it). Locally: ``--catalog local --warehouse DIR
--catalog-uri FILE.db`` (S3 reached through ``AWS_ENDPOINT_URL``, e.g. the moto server).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from lakesync.core.checkpoint import DEFAULT_CHUNK_BYTES
from lakesync.lake.tables import NAMESPACE
from lakesync.spark.checkpoint import CheckpointConfig, run
from lakesync.spark.session import build_session


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The job's arguments (unknown arguments are ignored)."""
    parser = argparse.ArgumentParser(prog="checkpoint", description=__doc__)
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--gateways", required=True, help="comma-separated gateway ids")
    parser.add_argument("--catalog", choices=("glue", "local"), default="glue")
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--catalog-uri", default=None)
    parser.add_argument("--namespace", default=NAMESPACE)
    parser.add_argument("--chunk-bytes", type=int, default=DEFAULT_CHUNK_BYTES)
    parser.add_argument("--include-deleted", type=_bool, default=False)
    args, _unknown = parser.parse_known_args(argv)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the job; prints one JSON line per gateway."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    spark = build_session(
        app_name="lakesync-checkpoint", warehouse=args.warehouse, catalog=args.catalog, catalog_uri=args.catalog_uri
    )
    config = CheckpointConfig(
        bucket=args.bucket,
        gateways=tuple(g.strip() for g in args.gateways.split(",") if g.strip()),
        namespace=args.namespace,
        chunk_bytes=args.chunk_bytes,
        include_deleted=args.include_deleted,
    )
    report = run(spark, config)
    for outcome in report.gateways:
        manifest = outcome.manifest
        line: dict[str, object] = {"gateway": outcome.gateway, "skipped": outcome.skipped}
        if manifest is not None:
            line |= {"checkpointId": manifest.checkpoint_id, "rows": manifest.rows, "chunks": len(manifest.chunks)}
        print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
