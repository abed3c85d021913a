"""The lake as a second source of truth: ``lakesync restore`` (rebuild a buffer from the lake), ``lakesync rules test``
(backtest a rules change) and ``lakesync explain`` (why a client has a row)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from lakesync.cli.common import DEFAULT_DATA_DIR


def _cmd_restore(args: argparse.Namespace) -> int:
    from lakesync.aws.settings.env import SettingsError
    from lakesync.core.errors import LakeSyncError
    from lakesync.local.restore import restore_deployed, restore_local

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    replace, lose = args.replace, args.lose_unflushed
    try:
        if args.env:
            old = args.old_table_prefix
            reports = restore_deployed(
                os.environ, args.gw, old_prefix=old, replace=replace, lose_unflushed=lose, progress=progress
            )
        else:
            data_dir = Path(args.data_dir)
            reports = restore_local(data_dir, args.gw, replace=replace, lose_unflushed=lose, progress=progress)
    except SettingsError as exc:
        print(f"cannot restore: the flush function's environment is incomplete: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"cannot restore: {exc} (start `lakesync local --data-dir {args.data_dir}` first)", file=sys.stderr)
        return 2
    except LakeSyncError as exc:
        again = "" if args.replace else "; --replace reads what is at risk, then empties the tables"
        hints = {
            "RESTORE_TARGET_NOT_EMPTY": again,
            "RESTORE_WOULD_LOSE_DATA": " (POST /v1/admin/flush/{gw} and wait for the flush; --lose-unflushed goes on)",
        }
        print(f"cannot restore: {exc.message}{hints.get(exc.code, '')}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([r.to_json() for r in reports]))
    else:
        for report in reports:
            print("\n".join(report.lines()))
        if not args.env:
            print("restart `lakesync local` if its tables were gone: its real-time feed reads the stream it started on")
    return 0


def _add_restore_parser(sub: Any) -> None:
    restore = sub.add_parser(
        "restore", help="rebuild gateways' buffers from the lake (the `lakesync local` on --data-dir must be running)"
    )
    restore.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    restore.add_argument("--gw", action="append", required=True, metavar="GATEWAY", help="gateway (repeatable)")
    restore.add_argument(
        "--replace",
        action="store_true",
        help="read the current buffer (what was never flushed, the configuration), then delete every item of its"
        " tables; refused while they hold a gateway not named",
    )
    restore.add_argument(
        "--lose-unflushed",
        action="store_true",
        help="with --replace, go on when the buffer holds deltas never flushed (they are lost; the report names them)",
    )
    restore.add_argument(
        "--env",
        action="store_true",
        help="restore a deployed stack instead: its tables, lake and checkpoint bucket from the flush function's"
        " variables in this environment (LAKESYNC_TABLE_*, LAKESYNC_LAKE_*, LAKESYNC_CHECKPOINT_BUCKET, AWS_REGION)",
    )
    restore.add_argument("--old-table-prefix", metavar="PREFIX", help="with --env: the old buffer's tables, read first")
    restore.add_argument("--json", action="store_true", help="the report as JSON")
    restore.set_defaults(func=_cmd_restore)


def _cmd_rules_test(args: argparse.Namespace) -> int:
    """Backtest candidate rules over ``POST /v1/admin/sync-rules/{gw}/test``: the gateway at ``--url`` with
    ``--token``, or the local one with an admin token minted from ``--data-dir``."""
    from lakesync.client.http import ApiError, SyncClient
    from lakesync.core.backtest import render_text

    try:
        body: dict[str, Any] = {"rules": json.loads(Path(args.rules).read_text()), "sample": args.sample}
        if args.claims:
            body["claimSets"] = json.loads(Path(args.claims).read_text())
    except (OSError, ValueError) as exc:
        print(f"cannot read the input: {exc}", file=sys.stderr)
        return 2
    token = args.token
    if token is None:
        from lakesync.auth import mint_token
        from lakesync.local.runner import SECRET_FILE, load_or_create_secret

        data_dir = Path(args.data_dir)
        if not (data_dir / SECRET_FILE).exists():
            print(f"no token: give --token, or run `lakesync local` once in {data_dir}", file=sys.stderr)
            return 2
        token = mint_token("lakesync-cli", args.gw, load_or_create_secret(data_dir), role="admin", ttl_s=300)
    client = SyncClient(args.url, args.gw, token, "lakesync-cli", timeout=args.timeout)
    try:
        report = client.request("POST", f"/v1/admin/sync-rules/{args.gw}/test", body=body)
    except ApiError as exc:
        print(f"backtest refused: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"cannot reach {args.url}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2, sort_keys=True) if args.json else render_text(report))
    return 0


def _add_rules_parser(sub: Any) -> None:
    rules = sub.add_parser("rules", help="sync rules: backtest a candidate version before saving it")
    rules_sub = rules.add_subparsers(dest="rules_command", required=True)
    test = rules_sub.add_parser(
        "test",
        help="what a candidate rules version would change for each client (rows entering and leaving, bytes,"
        " filters matching nothing or everything), judged on the current rows; read-only",
    )
    test.add_argument("rules", metavar="NEW.json", help="the candidate rules document")
    test.add_argument("--gw", default="default", help="gateway id")
    test.add_argument("--url", default="http://127.0.0.1:8787", help="the gateway (default: the local one)")
    test.add_argument("--token", help="an admin token (default: minted from --data-dir for the local gateway)")
    test.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    test.add_argument(
        "--claims",
        metavar="FILE",
        help='claim sets to judge: [{"claims": {...}, "client"?, "subscriptions"?}] (default: the gateway\'s'
        " WebSocket sessions)",
    )
    test.add_argument("--sample", type=int, default=5, metavar="N", help="sample rows per table and direction")
    test.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the report")
    test.add_argument("--json", action="store_true", help="machine-readable output (for tools)")
    test.set_defaults(func=_cmd_rules_test)


def _cmd_explain(args: argparse.Namespace) -> int:
    """Why a client has (or has not) a row, from the local lake and buffer (:mod:`lakesync.local.explain`)."""
    from lakesync.core.errors import LakeSyncError
    from lakesync.core.explain_text import render
    from lakesync.core.rules import parse_sync_rules
    from lakesync.gateway.explain import ExplainQuery, parse_time
    from lakesync.local.explain import explain_local

    try:
        claims: dict[str, str] = {}
        for pair in args.claim:
            key, eq, value = pair.partition("=")
            if not eq:
                raise ValueError(f"--claim {pair!r} is not KEY=VALUE")
            claims[key] = value
        other = parse_sync_rules(json.loads(Path(args.rules).read_text(encoding="utf-8"))) if args.rules else None
        at = parse_time(args.at) if args.at else None
        query = ExplainQuery(args.client, args.table, args.row, claims, at, args.cursor, other)
        answer = explain_local(Path(args.data_dir), args.gw, query, lake=not args.no_lake)
    except (OSError, ValueError, LakeSyncError) as exc:
        print(f"cannot explain: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(answer.to_json(), indent=2) if args.json else render(answer))
    return 0


def _add_explain_parser(sub: Any) -> None:
    explain = sub.add_parser(
        "explain",
        help="why a client has (or has not) a row: its scope, each column's winning write, deletes, delivery, flush"
        " and materialisation, from the local lake (Spark SQL) and the running local gateway's buffer",
    )
    explain.add_argument("--gw", default="default", help="gateway id")
    explain.add_argument("--client", required=True, help="the client (its token's sub)")
    explain.add_argument("--table", required=True)
    explain.add_argument("--row", required=True, help="the row id")
    explain.add_argument("--at", metavar="TIME", help="also judge the row as it was then (epoch ms or ISO-8601)")
    explain.add_argument(
        "--claim", action="append", default=[], metavar="KEY=VALUE", help="the client's claims (default sub=CLIENT)"
    )
    explain.add_argument("--cursor", help="the client's pull cursor, to say whether the row reached it")
    explain.add_argument("--rules", metavar="FILE", help="also judge the row under this rules version")
    explain.add_argument("--no-lake", action="store_true", help="the buffer only (no Spark)")
    explain.add_argument("--json", action="store_true", help="machine-readable output (for tools)")
    explain.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    explain.set_defaults(func=_cmd_explain)


def add_parsers(sub: Any) -> None:
    """``lakesync restore``, ``lakesync rules test`` and ``lakesync explain``."""
    _add_restore_parser(sub)
    _add_rules_parser(sub)
    _add_explain_parser(sub)
