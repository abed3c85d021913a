"""Glue job: fold the Iceberg delta log into the state tables (lakesync.spark.compact.run does the work).

On Glue: ``--datalake-formats iceberg``, max concurrent runs 1, and job parameters named as in
``lakesync.spark.compact.JOB_OPTIONS`` (``--warehouse``, ``--table_prefix`` to read table schemas from DynamoDB,
``--maintain true`` to run Iceberg maintenance afterwards, ...). Locally:
``python glue_jobs/compact.py --catalog local --catalog_uri lake/catalog.db --warehouse lake/warehouse``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from lakesync.lake.tables import DELTA_LOG, state_table
from lakesync.spark import maintenance
from lakesync.spark.compact import JOB_OPTIONS, CompactJobArgs, log_gateways, merge_schemas, run
from lakesync.spark.glue import resolved_options
from lakesync.spark.session import build_session


def _schemas(spark: Any, args: CompactJobArgs) -> dict[str, Any] | None:
    """The table schemas from the DynamoDB config table, by delta-log table name (``None``: not configured)."""
    if args.dynamo_tables is None:
        return None
    from lakesync.aws.config_store import DynamoDBConfigStore
    from lakesync.aws.flush_store import DynamoConfig

    dynamo = DynamoConfig(args.dynamo_tables, endpoint_url=args.dynamodb_endpoint, region=args.region)
    store = DynamoDBConfigStore(dynamo.client(), args.dynamo_tables)
    gateways = sorted(args.gateways or log_gateways(spark, args.config))
    per_gateway = ({s.delta_table: s for s, _ in store.get_schemas(g).values()} for g in gateways)
    return merge_schemas(per_gateway)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options, start the session, compact (then maintain), print the report as JSON."""
    args = CompactJobArgs.parse(resolved_options(JOB_OPTIONS, argv))
    spark = build_session(
        app_name="lakesync-compact",
        warehouse=args.warehouse,
        catalog_name=args.config.catalog,
        catalog=args.catalog_kind,
        catalog_uri=args.catalog_uri,
    )
    report = run(spark, args.config, _schemas(spark, args))
    out: dict[str, Any] = {"compact": dataclasses.asdict(report)}
    if args.maintain:
        ns = args.config.namespace
        tables = [f"{ns}.{state_table(t.table)}" for t in report.tables]
        if report.delta_snapshot_id is not None:
            tables.append(f"{ns}.{DELTA_LOG}")
        older_than_ms = int(time.time() * 1000 - args.expire_after_hours * 3600 * 1000)
        maintained = maintenance.run(
            spark, args.config.catalog, tables, older_than_ms=older_than_ms, retain_last=args.retain_last
        )
        out["maintenance"] = dataclasses.asdict(maintained)
    print(json.dumps(out, default=dict, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
