"""Local freshness: from a push acknowledged over HTTP to the row visible in the materialised SQLite database.

``python -m benchmarks.freshness [--samples N] [--interval S]`` starts the embedded default (``LocalStack``: moto,
the HTTP front, the local SQS poller running the materialise function) with the lake jobs on a short interval (the
local scheduler, as ``lakesync local --lake-interval S`` runs them), pushes one row at a time and polls the default
SQLite destination until the row is there. The push times are spread over the schedule's phase, so the figures
include the wait for the next run: expect about half the interval plus one flush (local Spark) plus the consumer.
Results: ``benchmarks/results/freshness.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import plots
from benchmarks._common import machine_info, progress

RESULTS = Path(__file__).resolve().parent / "results"
SCHEMA = {"table": "todos", "columns": [{"name": "title", "type": "string"}]}


def _visible(db_path: Path, row_id: str) -> bool:
    if not db_path.exists():
        return False
    try:
        with sqlite3.connect(db_path, timeout=1) as db:
            found = db.execute("SELECT 1 FROM todos WHERE row_id = ? AND deleted_at IS NULL", (row_id,)).fetchone()
    except sqlite3.OperationalError:  # the table is not created yet
        return False
    return found is not None


def measure(samples: int, interval_s: float, timeout_s: float) -> dict[str, Any]:
    """Push ``samples`` rows one at a time; seconds from each acknowledgement to the row in SQLite."""
    from lakesync.auth import mint_token
    from lakesync.client.http import SyncClient
    from lakesync.core.delta import make_delta
    from lakesync.core.hlc import HLC
    from lakesync.local.pipeline import lake_session, run_pipeline
    from lakesync.local.runner import LocalStack
    from lakesync.local.scheduler import LakeScheduler

    latencies: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="lakesync-fresh-") as tmp,
        LocalStack(Path(tmp), port=0, persist=False) as stack,
    ):
        ops = SyncClient(stack.url, "default", mint_token("ops", "default", stack.secret, role="admin"), "ops")
        ops.admin("POST", "schema", SCHEMA)
        writer = SyncClient(stack.url, "default", mint_token("w", "default", stack.secret), "w")
        progress("starting local Spark for the lake jobs")
        spark = lake_session(Path(tmp))
        scheduler = LakeScheduler(
            stack,
            lambda: run_pipeline(stack, spark, say=lambda _line: None),
            interval_s=interval_s,
            poll_s=0.25,
            say=lambda _line: None,
        ).start()
        db_path = Path(stack.materialise_target.removeprefix("sqlite:///"))
        clock = HLC()
        rng = random.Random(7)
        try:
            for i in range(samples):
                row_id = f"fresh-{i}"
                delta = make_delta(
                    "INSERT", table="todos", row_id=row_id, client_id="w", hlc=clock.now(), columns={"title": row_id}
                )
                writer.push([delta])
                acked = time.perf_counter()
                while not _visible(db_path, row_id):
                    if time.perf_counter() - acked > timeout_s:
                        raise TimeoutError(f"{row_id} not materialised within {timeout_s} s")
                    time.sleep(0.05)
                latencies.append(time.perf_counter() - acked)
                progress(f"sample {i + 1}/{samples}: {latencies[-1]:.2f} s from push ack to row in SQLite")
                time.sleep(rng.uniform(0, interval_s))
        finally:
            scheduler.stop()
            spark.stop()
    return {
        "samples": samples,
        "lake_interval_s": interval_s,
        "seconds": [round(x, 3) for x in latencies],
        "median_s": round(statistics.median(latencies), 3),
        "min_s": round(min(latencies), 3),
        "max_s": round(max(latencies), 3),
    }


def write(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    doc = {"when": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine_info(), **result}
    (out / "freshness.json").write_text(json.dumps(doc, indent=2) + "\n")
    lines = [
        "# Local freshness: push acknowledged → row in the materialised SQLite database",
        "",
        f"Measured {doc['when']} with `python -m benchmarks.freshness`: the embedded default with the lake jobs every "
        f"{result['lake_interval_s']:g} s (flush → compact → checkpoint on local Spark; the flush publishes, the local "
        "poller runs the materialise function). Pushes are spread over the schedule's phase, so the figures include "
        "the wait for the next run.",
        "",
        "| samples | median | min | max |",
        "|---|---|---|---|",
        f"| {result['samples']} | {result['median_s']:.2f} s | {result['min_s']:.2f} s | {result['max_s']:.2f} s |",
        "",
        f"Each sample (s): {', '.join(f'{x:.2f}' for x in result['seconds'])}",
        "",
        "![Each sample against the lake jobs' interval](freshness.png)",
        "",
    ]
    (out / "freshness.md").write_text("\n".join(lines))
    plot(doc, out / "freshness.png")


def plot(doc: Mapping[str, Any], path: Path) -> Path:
    """``freshness.png``: every sample's push → row time, with the lake jobs' interval it waits on."""
    fig, (ax,) = plots.figure(width=6.4, height=3.2)
    seconds = doc["seconds"]
    ax.plot(seconds, [0] * len(seconds), "o", color=plots.OURS, alpha=0.7, markersize=9, label="a sample")
    ax.axvline(doc["median_s"], color=plots.OURS, linewidth=2, label=f"median {doc['median_s']:.1f} s")
    interval = doc["lake_interval_s"]
    plots.goal_line(ax, interval, f"lake jobs every {interval:g} s", vertical=True)
    ax.set_yticks([])
    ax.set_xlim(0, max(max(seconds), interval) * 1.1)
    ax.set_xlabel("push acknowledged → row in the materialised SQLite database (s)")
    ax.legend(loc="upper left", fontsize="small")
    return plots.save(fig, path, title=f"Local freshness, {len(seconds)} samples, {doc['when'][:10]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--interval", type=float, default=5.0, help="lake job interval, seconds")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = measure(args.samples, args.interval, args.timeout)
    write(result, args.out)
    progress(f"median {result['median_s']:.2f} s (min {result['min_s']:.2f}, max {result['max_s']:.2f}); {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
