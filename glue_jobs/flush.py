"""Glue job: flush the DynamoDB buffer into the Iceberg delta log (lakesync.spark.flush.run does the work).

On Glue: ``--datalake-formats iceberg``, max concurrent runs 1, and job parameters named as in
``lakesync.spark.flush.JOB_OPTIONS`` (``--table_prefix``/``--tables``, ``--warehouse``, ``--checkpoint_bucket``, ...).
Without ``--checkpoint_bucket`` nothing is released from the buffer (the report says so). Locally:
``python glue_jobs/flush.py --catalog local --catalog_uri lake/catalog.db --warehouse lake/warehouse
--table_prefix lakesync --dynamodb_endpoint http://127.0.0.1:4566 --region us-east-1
--checkpoint_bucket lakesync-checkpoints --s3_endpoint http://127.0.0.1:4566``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence

from lakesync.spark.flush import JOB_OPTIONS, FlushJobArgs, run
from lakesync.spark.glue import resolved_options
from lakesync.spark.session import build_session


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options, read the release bounds, start the session, run one flush, print the report as JSON."""
    args = FlushJobArgs.parse(resolved_options(JOB_OPTIONS, argv))
    bounds = args.release_bounds()
    spark = build_session(
        app_name="lakesync-flush",
        warehouse=args.warehouse,
        catalog_name=args.config.catalog,
        catalog=args.catalog_kind,
        catalog_uri=args.catalog_uri,
    )
    report = run(
        spark,
        args.config,
        checkpoint_positions=bounds.positions,
        checkpoint_hlcs=bounds.hlcs,
        lease_wait_s=args.lease_wait_s,
    )
    out = {"flush": dataclasses.asdict(report), "release": bounds.report()}
    print(json.dumps(out, default=dict, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
