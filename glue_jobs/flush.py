"""Glue job: flush the DynamoDB buffer into the Iceberg delta log (lakesync.spark.flush.run does the work).

On Glue: ``--datalake-formats iceberg``, max concurrent runs 1, and job parameters named as in
``lakesync.spark.flush.JOB_OPTIONS`` (``--table_prefix``/``--tables``, ``--warehouse``, ...). Locally:
``python glue_jobs/flush.py --catalog local --catalog_uri lake/catalog.db --warehouse lake/warehouse
--table_prefix lakesync --dynamodb_endpoint http://127.0.0.1:4566 --region us-east-1``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from lakesync.spark.flush import JOB_OPTIONS, FlushJobArgs, run
from lakesync.spark.session import build_session


def _options() -> dict[str, str]:
    try:
        from awsglue.utils import getResolvedOptions  # type: ignore[import-not-found]  # only on Glue
    except ImportError:
        parser = argparse.ArgumentParser(description=__doc__)
        for name in JOB_OPTIONS:
            parser.add_argument(f"--{name}")
        return {k: v for k, v in vars(parser.parse_args()).items() if v is not None}
    present = [name for name in JOB_OPTIONS if f"--{name}" in sys.argv]
    return dict(getResolvedOptions(sys.argv, present))


def main() -> None:
    """Parse the options, start the session, run one flush, print its report as JSON."""
    args = FlushJobArgs.parse(_options())
    spark = build_session(
        app_name="lakesync-flush",
        warehouse=args.warehouse,
        catalog_name=args.config.catalog,
        catalog=args.catalog_kind,
        catalog_uri=args.catalog_uri,
    )
    report = run(spark, args.config)
    print(json.dumps(dataclasses.asdict(report), default=dict, sort_keys=True))


if __name__ == "__main__":
    main()
