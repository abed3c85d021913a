"""Local real-time freshness: from a push acknowledged over HTTP to the change received on other clients' sockets.

``python -m benchmarks.realtime [--samples N] [--listeners 1,25]`` starts the embedded default (``LocalStack``: moto,
the HTTP front with its socket hub, the broadcaster function on the deltas table's stream, sending through the
front's management API exactly as on AWS), opens the listener sockets (base64 text frames, as clients use on AWS),
and pushes one delta at a time over HTTP from another client. For each push and listener it records the time from
the push's HTTP response to the broadcast frame carrying it. A negative figure means the frame arrived before the
pusher had read its own response. Results: ``benchmarks/results/realtime.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks._common import machine_info, progress

RESULTS = Path(__file__).resolve().parent / "results"
GOAL_P99_MS = 100.0


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def measure(samples: int, listeners: int, seed: int = 7) -> dict[str, Any]:
    """Push ``samples`` deltas one at a time; milliseconds from each acknowledgement to each listener's receive."""
    from lakesync.auth import mint_token
    from lakesync.client.http import SyncClient
    from lakesync.core.delta import make_delta
    from lakesync.core.hlc import HLC
    from lakesync.local.demo import SocketWatcher
    from lakesync.local.runner import LocalStack

    rng = random.Random(seed)
    latencies: list[float] = []
    missing = 0
    with (
        tempfile.TemporaryDirectory(prefix="lakesync-rt-") as tmp,
        LocalStack(Path(tmp), port=0, persist=False, materialise=False) as stack,
    ):
        sockets = [SocketWatcher(stack, f"listener-{i}", "any") for i in range(listeners)]
        writer = SyncClient(stack.url, "default", mint_token("writer", "default", stack.secret), "writer")
        clock = HLC()
        acked: dict[str, float] = {}
        try:
            for i in range(samples):
                row_id = f"rt-{i}"
                delta = make_delta(
                    "INSERT", table="todos", row_id=row_id, client_id="writer", hlc=clock.now(), columns={"n": i}
                )
                writer.push([delta])
                acked[row_id] = time.perf_counter()
                if (i + 1) % 50 == 0:
                    progress(f"{listeners} listener(s): {i + 1}/{samples} pushes")
                time.sleep(rng.uniform(0.0, 0.02))
            time.sleep(1.0)
        finally:
            for socket in sockets:
                socket.close()
        for socket in sockets:
            arrived: dict[str, float] = {}
            for at, delta in socket.received:
                arrived.setdefault(delta.row_id, at)
            for row_id, acked_at in acked.items():
                if row_id in arrived:
                    latencies.append((arrived[row_id] - acked_at) * 1000)
                else:
                    missing += 1
    return {
        "listeners": listeners,
        "samples": samples,
        "received": len(latencies),
        "missing": missing,
        "p50_ms": round(_percentile(latencies, 0.50), 1),
        "p90_ms": round(_percentile(latencies, 0.90), 1),
        "p99_ms": round(_percentile(latencies, 0.99), 1),
        "max_ms": round(max(latencies), 1),
        "mean_ms": round(statistics.fmean(latencies), 1),
        "histogram": _histogram(latencies),
    }


def _histogram(values: list[float], width_ms: float = 5.0) -> list[tuple[str, int]]:
    buckets: dict[int, int] = {}
    for v in values:
        buckets[int(max(v, 0.0) // width_ms)] = buckets.get(int(max(v, 0.0) // width_ms), 0) + 1
    top = max(buckets)
    return [(f"{b * width_ms:g}–{(b + 1) * width_ms:g} ms", buckets.get(b, 0)) for b in range(top + 1)]


def write(runs: list[dict[str, Any]], out: Path) -> None:
    """Write ``realtime.json`` and ``realtime.md`` into ``out``."""
    doc = {"when": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine_info(), "runs": runs}
    report.write(doc, out, stem="realtime", render=markdown, ensure_ascii=True)


def markdown(doc: dict[str, Any]) -> str:
    """The results for people."""
    rows = [
        (
            r["listeners"],
            r["samples"],
            r["received"],
            r["missing"],
            *(f"{r[key]:.1f} ms" for key in ("p50_ms", "p90_ms", "p99_ms", "max_ms")),
            "yes" if r["p99_ms"] <= GOAL_P99_MS and r["missing"] == 0 else "no",
        )
        for r in doc["runs"]
    ]
    lines = [
        "# Local real-time freshness: push acknowledged → broadcast received on another client's socket",
        "",
        f"Measured {doc['when']} with `python -m benchmarks.realtime` (`make bench`): the embedded default; the push "
        "is a single-delta HTTP push; the path is the one AWS runs: commit → the deltas table's stream → the "
        "broadcaster function (here called by the local stream source, which polls every 10 ms) → sync rules and "
        "sessions → the management API (`POST /@connections/{id}`) → the socket. Listeners use base64 text frames. "
        f"Goal: p99 ≤ {GOAL_P99_MS:g} ms.",
        "",
        *report.table(("listeners", "pushes", "received", "missing", "p50", "p90", "p99", "max", "goal met"), rows),
    ]
    for r in doc["runs"]:
        peak = max(count for _, count in r["histogram"])
        lines += ["", f"Distribution, {r['listeners']} listener(s) (each █ ≈ {max(1, peak // 40)} receives):", "```"]
        for label, count in r["histogram"]:
            lines.append(f"{label:>12} {'█' * (count * 40 // peak)} {count}")
        lines.append("```")
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--listeners", default="1,25", help="comma-separated listener counts, one run each")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    runs = [measure(args.samples, int(n)) for n in args.listeners.split(",")]
    write(runs, args.out)
    for r in runs:
        progress(f"{r['listeners']} listener(s): p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, missing {r['missing']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
