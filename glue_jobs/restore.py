"""Glue job: rebuild gateways' buffers from the lake (lakesync.lake.restore_job.restore_buffer does the work, reading
the delta log through lakesync.spark.restore_reader). Started by hand only, never by the lake tick
(docs/lake.md, "Rebuild the gateway from the lake")::

    aws glue start-job-run --job-name <restore job> --arguments '{"--gateways":"default","--replace":"true"}'

Job parameters (``lakesync.spark.restore_reader.JOB_OPTIONS``; Glue's own, such as ``--JOB_NAME``, are ignored;
``--a-b`` is ``--a_b``)::

    --gateways a,b --warehouse W (--tables JSON | --table_prefix P) [--catalog glue|local] [--catalog_name lake]
    [--catalog_uri U] [--namespace N] [--checkpoint_bucket B] [--region R] [--replace true|false]
    [--lose_unflushed true|false] [--old_table_prefix P] [--create_tables true|false] [--dynamodb_endpoint URL]
    [--s3_endpoint URL]

``--replace true`` reads the tables first (the data at risk, the configuration), then empties them; it is refused
while they hold deltas the lake does not, unless ``--lose_unflushed true``. ``--old_table_prefix P`` reads old tables
``P-deltas`` ... first instead. The tables must exist (``--create_tables true`` creates missing ones: locally; a
stack's tables are CloudFormation's). A refusal prints one JSON line naming it and fails the run with its message.

On Glue: ``--catalog glue --warehouse s3://... --region R``. Locally: ``--catalog local --warehouse DIR
--catalog_uri FILE.db`` and ``--dynamodb_endpoint`` / ``--s3_endpoint`` (e.g. the moto server).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from lakesync.aws.flush_store import DynamoConfig
from lakesync.aws.objects import S3ObjectStore, s3_client
from lakesync.core.restore import RestoreTargetNotEmptyError, UnflushedDataError
from lakesync.lake.restore_job import restore_buffer
from lakesync.spark.glue import resolved_options
from lakesync.spark.restore_reader import JOB_OPTIONS, RestoreJobArgs, SparkLakeReader
from lakesync.spark.session import build_session


def main(argv: Sequence[str] | None = None) -> int:
    """Run the restore; prints one JSON line per gateway restored, or one naming the refusal (then raises it)."""
    args = RestoreJobArgs.parse(resolved_options(JOB_OPTIONS, argv))
    dynamodb = DynamoConfig(args.tables, endpoint_url=args.dynamodb_endpoint, region=args.region).client()
    client = {"region_name": args.region, "endpoint_url": args.s3_endpoint}
    objects = None
    if args.checkpoint_bucket is not None:
        objects = S3ObjectStore(args.checkpoint_bucket, s3_client(**{k: v for k, v in client.items() if v}))
    spark = build_session(
        app_name="lakesync-restore",
        warehouse=args.warehouse,
        catalog_name=args.catalog_name,
        catalog=args.catalog_kind,
        catalog_uri=args.catalog_uri,
    )
    try:
        reports = restore_buffer(
            dynamodb,
            args.tables,
            SparkLakeReader(spark, args.catalog_name, args.namespace),
            args.gateways,
            objects=objects,
            old=args.old_tables,
            replace=args.replace,
            lose_unflushed=args.lose_unflushed,
            create_missing=args.create_tables,
            progress=lambda line: print(line, file=sys.stderr),
        )
    except (RestoreTargetNotEmptyError, UnflushedDataError) as exc:
        # The run fails with the refusal's message (Glue shows it as the run's error); the line says it first.
        print(json.dumps({"refused": type(exc).__name__, "message": str(exc), "gateways": list(args.gateways)}))
        raise
    for report in reports:
        print(json.dumps(report.to_json(), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
