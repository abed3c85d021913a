"""The ``lakesync`` command: run the embedded default, mint dev tokens, run the demo."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

DEFAULT_DATA_DIR = Path(".lakesync")


def _cmd_local(args: argparse.Namespace) -> int:
    from lakesync.aws.buffer.store import DynamoDBBufferStore
    from lakesync.aws.tables import TableNames
    from lakesync.core.hlc import system_clock
    from lakesync.gateway.flush_lag import FlushLagWatch
    from lakesync.local.runner import (
        AWS_CONFIG_FILE,
        AWS_PROFILE,
        SECRET_FILE,
        TABLE_PREFIX,
        LocalKeyError,
        LocalStack,
        exposure_warning,
        load_or_create_secret,
        load_previous_secret,
    )

    # Every file of the data directory (snapshot, journal, lake, SQLite) is private to the user: 0600 / 0700.
    os.umask(0o077)
    stop = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    # Set explicitly: a shell starts background jobs with SIGINT ignored, and SIGHUP's default kills without saving.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    data_dir = Path(args.data_dir)
    try:
        if (data_dir / SECRET_FILE).exists():
            load_or_create_secret(data_dir)
        load_previous_secret(data_dir)
    except LocalKeyError as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        return 2
    warning = exposure_warning(args.host, data_dir)
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)
    stack_options = {"host": args.host, "port": args.port, "moto_port": args.moto_port, "aws_parity": args.aws_parity}
    with LocalStack(
        data_dir, materialise_url=args.materialise, workers=args.workers, fsync=not args.no_fsync, **stack_options
    ) as stack:
        print(f"LakeSync local gateway 'default' at {stack.url}  (AWS/moto at {stack.aws_endpoint})", flush=True)
        print(
            "AWS/moto listens on 127.0.0.1 only and answers only this run's random credential: AWS_CONFIG_FILE="
            f"{data_dir.resolve() / AWS_CONFIG_FILE} AWS_PROFILE={AWS_PROFILE} aws dynamodb list-tables",
            flush=True,
        )
        socket_url = stack.url.replace("http://", "ws://") + "/v1/sync/default/ws"
        print(f"real-time socket: {socket_url}{'  (AWS parity)' if args.aws_parity else ''}", flush=True)
        if stack.recovery is not None and (stack.recovery.snapshot_items or stack.recovery.replayed):
            print(
                f"recovered {stack.recovery.snapshot_items} items from the snapshot and"
                f" {stack.recovery.replayed} writes from the journal",
                flush=True,
            )
        print(f"materialising flushed rows into {_masked(stack.materialise_target)}", flush=True)
        print(f"data directory: {data_dir.resolve()}   mint a token: lakesync token --sub me", flush=True)
        for gateway in stack.open_gateways():
            print(
                f"gateway {gateway!r} has no sync rules: any valid token reads and writes every row of it"
                f" (POST /v1/admin/sync-rules/{gateway} confines clients; docs/security.md)",
                flush=True,
            )
        scheduler = _lake_scheduler(stack, data_dir, args.lake_interval)
        # What a restore from the lake would lose, said as it changes: the admin metrics' flushLag, one code path.
        at_risk = FlushLagWatch(
            DynamoDBBufferStore(stack.dynamodb_client(), TableNames.with_prefix(TABLE_PREFIX)),
            stack.gateway_ids,
            system_clock,
        )

        def say_at_risk() -> None:
            try:
                lines = at_risk.lines()
            except Exception:  # the local AWS may be stopping: the next look reads again
                logging.getLogger(__name__).debug("could not read the flush lag", exc_info=True)
                return
            for line in lines:
                print(line, flush=True)

        say_at_risk()
        print("Ctrl-C to stop", flush=True)
        while not stop.wait(0.5):
            say_at_risk()
        # Further signals while stopping are noted, not fatal: the final snapshot is written either way.
        print(f"stopping ({received[0]})", flush=True)
        if scheduler is not None:
            print("stopping: letting a lake run in progress finish", flush=True)
            scheduler.stop()
        print("stopping: writing a snapshot to the data directory", flush=True)
    print("stopped", flush=True)
    return 0


def _masked(url: str) -> str:
    """A URL without its password, for printing."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _lake_scheduler(stack: Any, data_dir: Path, interval_s: float) -> Any:
    """Start the background lake jobs unless disabled or the ``spark`` extra is missing."""
    import importlib.util

    if interval_s <= 0:
        print("lake jobs: off (--lake-interval 0)", flush=True)
        return None
    if importlib.util.find_spec("pyspark") is None:
        print("lake jobs: off (install the spark extra: pip install 'lakesync[spark]')", flush=True)
        return None
    from lakesync.local.pipeline import lake_has_work, lake_session, run_pipeline
    from lakesync.local.scheduler import LakeScheduler

    session: list[Any] = []

    def run() -> object:
        if not session:
            session.append(lake_session(data_dir))
        return run_pipeline(stack, session[0], gateways=stack.gateway_ids, say=lambda line: print(line, flush=True))

    print(
        f"lake jobs: flush → compact → checkpoint every {interval_s:g} s when the lake has work, and on flush"
        " requests (POST /v1/admin/flush/{gw}); lakesync query reads the lake",
        flush=True,
    )
    return LakeScheduler(
        stack,
        run,
        interval_s=interval_s,
        say=lambda line: print(line, flush=True),
        has_work=lake_has_work(stack, stack.gateway_ids),
    ).start()


def _cmd_token(args: argparse.Namespace) -> int:
    from lakesync.auth import check_signing_key, mint_token
    from lakesync.local.runner import SECRET_FILE, load_or_create_secret

    max_lifetime = _max_token_lifetime()
    if max_lifetime is None:
        return 2
    if args.ttl <= 0 or args.ttl > max_lifetime:
        print(
            f"--ttl {args.ttl} is outside 1..{max_lifetime} s: the gateway refuses tokens that live longer than"
            f" {max_lifetime} s ({MAX_TOKEN_LIFETIME_VAR}; default 86400, at most 2592000)",
            file=sys.stderr,
        )
        return 2
    secret = os.environ.get("LAKESYNC_JWT_SECRET")
    try:
        if secret:
            check_signing_key(secret, "LAKESYNC_JWT_SECRET")
        else:
            data_dir = Path(args.data_dir)
            if not (data_dir / SECRET_FILE).exists():
                print(
                    f"no JWT secret: set LAKESYNC_JWT_SECRET or run `lakesync local` once in {data_dir}",
                    file=sys.stderr,
                )
                return 2
            secret = load_or_create_secret(data_dir)
    except ValueError as exc:
        print(f"cannot mint: {exc}", file=sys.stderr)
        return 2
    claims = dict(pair.split("=", 1) for pair in args.claim)
    print(mint_token(args.sub, args.gw, secret, role=args.role, ttl_s=args.ttl, claims=claims))
    return 0


MAX_TOKEN_LIFETIME_VAR = "LAKESYNC_MAX_TOKEN_LIFETIME_S"


def _max_token_lifetime() -> int | None:
    """The gateway's maximum token lifetime as the functions read it (``None``, with a message, when invalid)."""
    from lakesync.auth import DEFAULT_MAX_LIFETIME_S
    from lakesync.aws.settings.variables import MAX_TOKEN_LIFETIME_LIMIT_S, MIN_TOKEN_LIFETIME_LIMIT_S

    raw = os.environ.get(MAX_TOKEN_LIFETIME_VAR, "").strip()
    if not raw:
        return DEFAULT_MAX_LIFETIME_S
    if raw.isascii() and raw.isdigit() and MIN_TOKEN_LIFETIME_LIMIT_S <= int(raw) <= MAX_TOKEN_LIFETIME_LIMIT_S:
        return int(raw)
    print(
        f"{MAX_TOKEN_LIFETIME_VAR} must be an integer from {MIN_TOKEN_LIFETIME_LIMIT_S} to"
        f" {MAX_TOKEN_LIFETIME_LIMIT_S}, got {raw!r}",
        file=sys.stderr,
    )
    return None


def _cmd_rotate_key(args: argparse.Namespace) -> int:
    if args.secret_id:
        return _rotate_aws_key(args.secret_id, emergency=args.emergency)
    from lakesync.local.runner import rotate_local_key

    data_dir = Path(args.data_dir)
    if rotate_local_key(data_dir, emergency=args.emergency):
        kept = "the previous key still verifies until the next rotation (--emergency drops it)"
    else:
        kept = "no previous key is kept: every token signed before now is refused"
    print(f"rotated the JWT key in {data_dir.resolve()}; {kept}.")
    print("restart `lakesync local` to apply it, then mint new tokens with `lakesync token`.")
    return 0


def _rotate_aws_key(secret_id: str, *, emergency: bool) -> int:
    from lakesync.aws.rotation import emergency_rotate, start_rotation
    from lakesync.aws.secrets import secretsmanager_client
    from lakesync.core.errors import LakeSyncError

    client = secretsmanager_client()
    try:
        if not emergency:
            start_rotation(client, secret_id)
            print(
                f"rotation of {secret_id} started (its rotation function runs the four steps); tokens signed with"
                " the replaced key stay valid until the next rotation"
            )
            return 0
        done = emergency_rotate(client, secret_id)
    except LakeSyncError as exc:
        print(f"rotate-key failed: {exc.message}", file=sys.stderr)
        return 1
    dropped = ", ".join(done.dropped_versions) or "none"
    print(
        f"new AWSCURRENT version {done.current_version} of {secret_id}; versions taken out of verification: {dropped}"
    )
    print(
        "warm functions refuse tokens signed with the old keys within 60 s, new ones at once;"
        " mint new tokens with the new key"
    )
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from lakesync.local.demo import run

    tables = run()
    red = [tables[n] for n in ("alice", "bob", "carol")]
    converged = red[0] == red[1] == red[2] and tables.get("erin") == tables.get("replay")
    return 0 if converged else 1


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


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``lakesync`` console script."""
    parser = argparse.ArgumentParser(prog="lakesync", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    local = sub.add_parser("local", help="run the embedded default: moto + the real handlers over HTTP")
    local.add_argument("--host", default="127.0.0.1")
    local.add_argument("--port", type=int, default=8787)
    local.add_argument("--moto-port", type=int, default=0, help="port of the moto server (0 = any free port)")
    local.add_argument(
        "--data-dir", default=str(DEFAULT_DATA_DIR), help="JWT secret, snapshot and journal live here (0700)"
    )
    local.add_argument(
        "--workers",
        type=int,
        default=min(4, os.cpu_count() or 1),
        metavar="N",
        help="handler processes serving requests at once, like concurrent Lambda environments (0 = in this process,"
        " one request at a time; default min(4, CPUs))",
    )
    local.add_argument(
        "--no-fsync",
        action="store_true",
        help="journal writes without fsync: an acknowledged push survives kill -9 but not a power cut (faster)",
    )
    local.add_argument(
        "--lake-interval",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="run the lake jobs (flush, compact, checkpoint) on local Spark this often and on flush requests;"
        " 0 turns them off (default 300)",
    )
    local.add_argument(
        "--materialise",
        metavar="URL",
        default=None,
        help="database the flushed rows are materialised into: postgresql://..., mysql://..., sqlite:///FILE"
        " (default: sqlite:///<data-dir>/materialised.db); destinations added with the admin routes get them too",
    )
    local.add_argument(
        "--aws-parity",
        action="store_true",
        help="serve the real-time socket with API Gateway's limits (text frames only, 128 KB messages, 10 min idle,"
        " 2 h sessions) instead of the original's, so what works locally works on AWS",
    )
    local.set_defaults(func=_cmd_local)

    _add_restore_parser(sub)

    token = sub.add_parser("token", help="mint a JWT for the local gateway")
    token.add_argument("--sub", required=True, help="client id")
    token.add_argument("--gw", default="default", help="gateway id")
    token.add_argument("--role", default="client", choices=["client", "admin"])
    token.add_argument(
        "--ttl",
        type=int,
        default=3600,
        help="seconds until expiry (at most LAKESYNC_MAX_TOKEN_LIFETIME_S, default 86400; longer is refused)",
    )
    token.add_argument("--claim", action="append", default=[], metavar="KEY=VALUE", help="custom claim (repeatable)")
    token.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    token.set_defaults(func=_cmd_token)

    rotate = sub.add_parser(
        "rotate-key",
        help="replace the JWT signing key: the local data directory's, or a deployed stack's (--secret-id)",
    )
    rotate.add_argument(
        "--emergency",
        action="store_true",
        help="drop the previous key at once (a leaked key): every token signed before now is refused",
    )
    rotate.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    rotate.add_argument(
        "--secret-id",
        metavar="ARN",
        help="the stack's JWT secret in Secrets Manager (output JwtSecretArn); AWS credentials from the environment",
    )
    rotate.set_defaults(func=_cmd_rotate_key)

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

    _add_rules_parser(sub)

    _add_explain_parser(sub)

    demo = sub.add_parser("demo", help="run the end-to-end demo over HTTP")
    demo.set_defaults(func=_cmd_demo)

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
