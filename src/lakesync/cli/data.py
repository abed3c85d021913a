"""``lakesync query`` (SQL over the local lake) and ``lakesync migrate`` (between SQL destinations)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lakesync.cli.common import DEFAULT_DATA_DIR


def _cmd_query(args: argparse.Namespace) -> int:
    import json

    from lakesync.local.pipeline import lake_paths, lake_session
    from lakesync.spark.query import run_query, snapshots

    catalog_db, _warehouse = lake_paths(Path(args.data_dir))
    if not catalog_db.exists():
        print(f"no lake in {args.data_dir}: run the pipeline first (make demo)", file=sys.stderr)
        return 2
    spark = lake_session(Path(args.data_dir))

    def progress(line: str) -> None:
        print(f"\r{line}", end="", file=sys.stderr, flush=True)

    if args.snapshots:
        result = snapshots(spark, args.snapshots)
    else:
        result = run_query(spark, args.sql, limit=args.limit, progress=None if args.json else progress)
    if args.json:
        print(json.dumps({"columns": result.columns, "rows": result.rows}, default=str))
    else:
        print("\r", end="", file=sys.stderr)
        print("\t".join(result.columns))
        for row in result.rows:
            print(
                "\t".join("" if v is None else json.dumps(v, default=str) if not isinstance(v, str) else v for v in row)
            )
        print(f"({len(result.rows)} rows, {result.seconds:.2f}s)", file=sys.stderr)
    return 0


def _cmd_migrate(args: argparse.Namespace) -> int:
    from lakesync.adapters.migrate import MigrateProgress, migrate_sql
    from lakesync.core.errors import LakeSyncError
    from lakesync.core.schema import parse_table_schema
    from lakesync.sql import mask_url

    schemas = None
    if args.schemas:
        docs = json.loads(Path(args.schemas).read_text(encoding="utf-8"))
        schemas = [parse_table_schema(doc) for doc in (docs if isinstance(docs, list) else [docs])]
    checkpoint = Path(args.checkpoint) if args.checkpoint else None

    def report(p: MigrateProgress) -> None:
        print(f"{p.table}: {p.copied} rows copied{' (done)' if p.done else ''}", file=sys.stderr, flush=True)

    print(f"migrating {mask_url(args.from_url)} -> {mask_url(args.to_url)}", file=sys.stderr, flush=True)
    try:
        result = migrate_sql(
            args.from_url,
            args.to_url,
            tables=args.tables,
            schemas=schemas,
            checkpoint_path=checkpoint,
            restart=args.restart,
            batch=args.batch,
            on_progress=report,
        )
    except LakeSyncError as exc:
        resume = f"; run it again to resume from {checkpoint}" if checkpoint else ""
        print(f"migrate failed: {exc.message}{resume}", file=sys.stderr)
        return 1
    state = "resumed" if result.resumed else "started"
    tables = ", ".join(f"{t} ({p.rows} rows)" for t, p in sorted(result.tables.items())) or "no tables"
    print(f"migrated ({state}; {result.pages} pages this run): {tables}")
    return 0


def add_parsers(sub: Any) -> None:
    """``lakesync query`` and ``lakesync migrate``."""
    query = sub.add_parser(
        "query",
        help="run SQL over the local lake (tables: deltas, state_<table>; VERSION/TIMESTAMP AS OF for time travel)",
    )
    query.add_argument("sql", nargs="?", default="SHOW TABLES", help="one SQL statement")
    query.add_argument("--snapshots", metavar="TABLE", help="list a table's snapshots instead")
    query.add_argument("--limit", type=int, default=1000, help="most rows to print")
    query.add_argument("--json", action="store_true", help="machine-readable output (for agents)")
    query.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    query.set_defaults(func=_cmd_query)

    mig = sub.add_parser(
        "migrate",
        help="copy a SQL destination's rows (with their LWW state) into another; resumable and idempotent",
    )
    mig.add_argument(
        "--from", dest="from_url", required=True, metavar="URL", help="postgresql://, mysql://, sqlite:///"
    )
    mig.add_argument("--to", dest="to_url", required=True, metavar="URL", help="postgresql://, mysql://, sqlite:///")
    mig.add_argument("--tables", nargs="+", metavar="TABLE", help="only these tables (default: every one)")
    mig.add_argument(
        "--checkpoint",
        metavar="FILE",
        default="lakesync-migrate.json",
        help="position file: a re-run resumes from it (default lakesync-migrate.json; '' keeps it in memory)",
    )
    mig.add_argument("--restart", action="store_true", help="ignore an existing checkpoint and start over")
    mig.add_argument("--batch", type=int, default=500, metavar="N", help="rows per page (default 500)")
    mig.add_argument("--schemas", metavar="FILE", help="JSON table schema(s) (default: rebuilt from the source)")
    mig.set_defaults(func=_cmd_migrate)
