"""``lakesync local`` (the embedded default) and ``lakesync demo``."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from lakesync.cli.common import DEFAULT_DATA_DIR


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


def _cmd_demo(args: argparse.Namespace) -> int:
    from lakesync.local.demo import run

    tables = run()
    red = [tables[n] for n in ("alice", "bob", "carol")]
    converged = red[0] == red[1] == red[2] and tables.get("erin") == tables.get("replay")
    return 0 if converged else 1


def add_parsers(sub: Any) -> None:
    """``lakesync local`` and ``lakesync demo``."""
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

    demo = sub.add_parser("demo", help="run the end-to-end demo over HTTP")
    demo.set_defaults(func=_cmd_demo)
