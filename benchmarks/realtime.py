"""Local real-time freshness: from a push acknowledged over HTTP to the change received on other clients' sockets.

``python -m benchmarks.realtime [--samples N] [--listeners 1,25,100] [--processes P]`` starts the embedded default
(``LocalStack``: moto, the HTTP front with its socket hub, the broadcaster function on the deltas table's stream,
sending through the management API, here the socket hub's in process). The listeners are real clients in their own
processes, as clients are: ``P`` listener processes (``python -m benchmarks.realtime --listen``), each holding its
share of the WebSocket connections (base64 text frames, as clients use on AWS), each with its own token. One pusher
in this process pushes one delta at a time over HTTP. For each push and listener the benchmark records the time from
the push's HTTP response to the broadcast frame carrying it (the machine's monotonic clock, which every process on it
shares). A negative figure means the frame arrived before the pusher had read its own response.

The stack runs its handlers in worker processes, as ``lakesync local`` does by default. The benchmark also records the
CPU the server process (front, socket hub, broadcaster, and moto, which runs in it) spent per change, and the
broadcaster function's own time per invocation. Results: ``benchmarks/results/realtime.json``,
``.md`` and ``.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks._common import machine_info, progress, yardstick_ms
from benchmarks.cost import idle_clients

RESULTS = Path(__file__).resolve().parent / "results"
GOAL_P99_MS = 100.0
WORKERS = min(4, os.cpu_count() or 1)
"""Handler processes, as `lakesync local` runs by default (its `--workers`)."""
WARM_UP_PUSHES = 3
"""Pushes before the measured ones, left out of the figures."""
ROOT = Path(__file__).resolve().parent.parent
BEFORE_LABEL = (
    "the code before issue 43's item 6: the broadcaster evaluating every session and posting to each through the "
    "HTTP management API, signed, from the I/O pool"
)
"""What the "before" figures measured, unless ``--before-label`` says otherwise."""


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# --- the listener processes ------------------------------------------------------------------------------------------


async def _listen(url: str, tokens: list[str]) -> dict[str, list[float]]:
    """Hold one socket per token until stdin says ``stop``; each row id with the monotonic times it arrived."""
    from websockets.asyncio.client import connect

    from lakesync.wire.framing import decode_broadcast_frame

    arrivals: dict[str, list[float]] = {}

    async def receive(ws: Any) -> None:
        async for message in ws:
            at = time.monotonic()
            frame = base64.b64decode(message) if isinstance(message, str) else message
            for delta in decode_broadcast_frame(frame).deltas:
                arrivals.setdefault(delta.row_id, []).append(at)

    sockets = []
    for token in tokens:
        sockets.append(await connect(url, additional_headers={"Authorization": f"Bearer {token}"}, max_queue=None))
    tasks = [asyncio.create_task(receive(ws)) for ws in sockets]
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    for ws in sockets:
        await ws.close()
    await asyncio.gather(*tasks, return_exceptions=True)
    return arrivals


def listen_main() -> int:
    """The ``--listen`` process: reads ``{"url", "tokens"}`` from stdin, prints ``ready``, then, on a line of stdin,
    the arrivals as one JSON line."""
    spec = json.loads(sys.stdin.readline())
    arrivals = asyncio.run(_listen(spec["url"], spec["tokens"]))
    print(json.dumps(arrivals), flush=True)
    return 0


class ListenerPool:
    """``processes`` listener processes sharing ``tokens`` (one socket each) on ``url``."""

    def __init__(self, url: str, tokens: list[str], processes: int) -> None:
        shares = [tokens[i::processes] for i in range(processes)]
        self._procs = []
        for share in (s for s in shares if s):
            proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.realtime", "--listen"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=ROOT,
            )
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({"url": url, "tokens": share}) + "\n")
            proc.stdin.flush()
            self._procs.append(proc)
        for proc in self._procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("a listener process failed to connect")

    def stop(self) -> list[dict[str, list[float]]]:
        """Close every socket; the arrivals of each process."""
        results = []
        for proc in self._procs:
            assert proc.stdin is not None
            proc.stdin.write("stop\n")
            proc.stdin.flush()
        for proc in self._procs:
            out, _ = proc.communicate(timeout=60)
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results


# --- the measurement -------------------------------------------------------------------------------------------------


@contextmanager
def _timed_broadcaster(invocations: list[float]) -> Iterator[None]:
    """The broadcaster function, timed per invocation (wall seconds) while the block runs."""
    import functions.ws_broadcast as module

    original = module.lambda_handler

    def timed(event: dict[str, Any], context: Any) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            return original(event, context)
        finally:
            invocations.append(time.perf_counter() - start)

    module.lambda_handler = timed  # type: ignore[assignment]
    try:
        yield
    finally:
        module.lambda_handler = original  # type: ignore[assignment]


def measure(samples: int, listeners: int, processes: int, seed: int = 7) -> dict[str, Any]:
    """Push ``samples`` deltas one at a time; milliseconds from each acknowledgement to each listener's receive."""
    from lakesync.auth import mint_token
    from lakesync.client.http import SyncClient
    from lakesync.core.delta import make_delta
    from lakesync.core.hlc import HLC
    from lakesync.local.runner import LocalStack

    rng = random.Random(seed)
    yardstick = yardstick_ms()
    invocations: list[float] = []
    acked: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory(prefix="lakesync-rt-") as tmp,
        _timed_broadcaster(invocations),
        LocalStack(Path(tmp), port=0, persist=False, materialise=False, workers=WORKERS) as stack,
    ):
        url = stack.url.replace("http://", "ws://") + "/v1/sync/default/ws?encoding=base64"
        tokens = [
            mint_token(f"listener-{i}", "default", stack.secret, claims={"team": "any"}) for i in range(listeners)
        ]
        pool = ListenerPool(url, tokens, min(processes, listeners))
        writer = SyncClient(stack.url, "default", mint_token("writer", "default", stack.secret), "writer")
        clock = HLC()
        for i in range(WARM_UP_PUSHES):  # the first broadcast builds its clients: not a steady-state figure
            writer.push([_delta(make_delta, clock, f"warm-{i}", i)])
            time.sleep(0.2)
        time.sleep(0.5)
        invocations.clear()
        cpu_start = time.process_time()
        try:
            for i in range(samples):
                row_id = f"rt-{i}"
                writer.push([_delta(make_delta, clock, row_id, i)])
                acked[row_id] = time.monotonic()
                if (i + 1) % 50 == 0:
                    progress(f"{listeners} listener(s): {i + 1}/{samples} pushes")
                time.sleep(rng.uniform(0.0, 0.02))
            time.sleep(1.0)
            cpu_s = time.process_time() - cpu_start
        finally:
            arrivals = pool.stop()
    return {
        **_summary(listeners, samples, acked, arrivals, cpu_s, invocations),
        "load_average": report.load_average(),
        "yardstick_ms": yardstick,
    }


def _delta(make_delta: Callable[..., Any], clock: Any, row_id: str, n: int) -> Any:
    return make_delta("INSERT", table="todos", row_id=row_id, client_id="writer", hlc=clock.now(), columns={"n": n})


def _summary(
    listeners: int,
    samples: int,
    acked: dict[str, float],
    arrivals: list[dict[str, list[float]]],
    cpu_s: float,
    invocations: list[float],
) -> dict[str, Any]:
    latencies: list[float] = []
    for row_id, acked_at in acked.items():
        for share in arrivals:
            latencies.extend((at - acked_at) * 1000 for at in share.get(row_id, ()))
    expected = samples * listeners
    return {
        "listeners": listeners,
        "processes": len(arrivals),
        "samples": samples,
        "received": len(latencies),
        "missing": expected - len(latencies),
        "p50_ms": round(_percentile(latencies, 0.50), 1),
        "p90_ms": round(_percentile(latencies, 0.90), 1),
        "p99_ms": round(_percentile(latencies, 0.99), 1),
        "max_ms": round(max(latencies), 1),
        "mean_ms": round(statistics.fmean(latencies), 1),
        "server_cpu_ms_per_change": round(cpu_s * 1000 / samples, 2),
        "broadcaster_invocations": len(invocations),
        "broadcaster_ms_per_invocation": round(statistics.fmean(invocations) * 1000, 2) if invocations else None,
        "histogram": _histogram(latencies),
    }


def _histogram(values: list[float], width_ms: float = 5.0) -> list[tuple[str, int]]:
    buckets: dict[int, int] = {}
    for v in values:
        buckets[int(max(v, 0.0) // width_ms)] = buckets.get(int(max(v, 0.0) // width_ms), 0) + 1
    top = max(buckets)
    return [(f"{b * width_ms:g}–{(b + 1) * width_ms:g} ms", buckets.get(b, 0)) for b in range(top + 1)]


# --- the results -----------------------------------------------------------------------------------------------------


def write(
    runs: list[dict[str, Any]],
    out: Path,
    before: list[dict[str, Any]] | None = None,
    before_load: list[float] | None = None,
    before_label: str | None = None,
) -> None:
    """Write ``realtime.json``, ``realtime.md`` and ``realtime.png`` into ``out``."""
    doc: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "load_average": report.load_average(),
        "workers": WORKERS,
        "runs": runs,
    }
    if before:
        doc["before"] = before
        doc["before_load_average"] = before_load
        doc["before_label"] = before_label or BEFORE_LABEL
    doc["idle_clients"] = idle_clients.idle_month()
    report.write(doc, out, stem="realtime", render=markdown, ensure_ascii=True)
    plot(doc, out / "realtime.png")


def _rows(runs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (
            r["listeners"],
            r.get("processes", 0),
            r["samples"],
            r["received"],
            r["missing"],
            *(f"{r[key]:.1f} ms" for key in ("p50_ms", "p90_ms", "p99_ms", "max_ms")),
            f"{r['server_cpu_ms_per_change']:.1f} ms" if "server_cpu_ms_per_change" in r else "",
            f"{r['load_average'][0]:.1f}" if r.get("load_average") else "",
            f"{r['yardstick_ms']:.1f} ms" if r.get("yardstick_ms") else "",
            "yes" if r["p99_ms"] <= GOAL_P99_MS and r["missing"] == 0 else "no",
        )
        for r in runs
    ]


_HEADERS = (
    "listeners",
    "processes",
    "pushes",
    "received",
    "missing",
    "p50",
    "p90",
    "p99",
    "max",
    "server CPU/change",
    "load (1 min) at end",
    "yardstick",
)


def markdown(doc: dict[str, Any]) -> str:
    """The results for people."""
    lines = [
        "# Local real-time freshness: push acknowledged → broadcast received on another client's socket",
        "",
        f"Measured {doc['when']} with `python -m benchmarks.realtime` (`make bench-realtime`): the embedded default; "
        "the push is a single-delta HTTP push from one pusher; the path is the one AWS runs: commit → the deltas "
        "table's stream → the broadcaster function (here called by the local stream source, woken by each commit "
        "to the table) → sync rules and sessions (the scope index) → the management API (`PostToConnection`, one "
        "recipient per future of the I/O pool; locally the socket hub's, called in process) → the socket. "
        "The listeners are real clients in their own processes (each process holds its share of the sockets, each "
        "socket with its own token), base64 text frames. The stack runs its handlers in worker processes, as "
        f"`lakesync local` does by default ({doc.get('workers', 0)} here). Server CPU per change: the CPU of the "
        "server process (front, socket hub, broadcaster, and moto, which runs in it; not the handler workers') over "
        "the run, divided by the pushes. "
        f"The first {WARM_UP_PUSHES} pushes warm the path up and are left out. Goal: p99 ≤ {GOAL_P99_MS:g} ms. "
        f"Load average at the end (1, 5, 15 min): {doc.get('load_average')}; each run's 1-minute load at its end "
        "and the fixed Python yardstick (`benchmarks._common.yardstick_ms`, a quiet machine's about 25 ms) taken "
        "before it are in the table: the machine is shared, and the tail grows with its load.",
        "",
        *_machine(doc.get("machine") or {}),
        "",
        "![p50 and p99 against listeners, with the goal](realtime.png)",
        "",
        *report.table((*_HEADERS, "goal met"), _rows(doc["runs"])),
    ]
    if doc.get("before"):
        lines += [
            "",
            f"Before (the same benchmark on {doc.get('before_label') or BEFORE_LABEL}; load average at its end "
            f"{doc.get('before_load_average')}):",
            "",
        ]
        lines += report.table((*_HEADERS, "goal met"), _rows(doc["before"]))
    for r in doc["runs"]:
        peak = max(count for _, count in r["histogram"])
        lines += ["", f"Distribution, {r['listeners']} listener(s) (each █ ≈ {max(1, peak // 40)} receives):", "```"]
        for label, count in r["histogram"]:
            if count:
                lines.append(f"{label:>12} {'█' * (count * 40 // peak)} {count}")
        lines.append("```")
    if doc.get("idle_clients"):
        lines += ["", *idle_clients.markdown(doc["idle_clients"])]
    lines.append("")
    return "\n".join(lines)


def _machine(m: dict[str, Any]) -> list[str]:
    if not m:
        return []
    commit = ((m.get("git") or {}).get("commit") or "unknown")[:12]
    return [
        f"Machine: {m.get('cpu')}, {m.get('cpu_count')} CPUs, {m.get('memory_gib')} GiB, Python {m.get('python')}; "
        f"commit `{commit}`"
        + (
            " (the shared working tree had uncommitted changes in src/ or functions/: other work in progress)."
            if (m.get("git") or {}).get("src_or_functions_modified")
            else "."
        )
    ]


def plot(doc: dict[str, Any], path: Path) -> None:
    """p50 and p99 against listeners, after (and before when recorded), with the goal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    series: list[tuple[str, list[dict[str, Any]], str]] = [("now", doc["runs"], "-")]
    if doc.get("before"):
        series.append(("before", doc["before"], "--"))
    for name, runs, style in series:
        xs = [r["listeners"] for r in runs]
        for key, colour in (("p50_ms", "tab:blue"), ("p99_ms", "tab:red")):
            ax.plot(xs, [r[key] for r in runs], style, marker="o", color=colour, label=f"{key[:3]} {name}")
    ax.axhline(GOAL_P99_MS, color="grey", linestyle=":", label=f"goal p99 ≤ {GOAL_P99_MS:g} ms")
    ax.set_xlabel("listeners (sockets, in their own processes)")
    ax.set_ylabel("push acknowledged → received (ms)")
    ax.set_yscale("log")
    ax.set_title("Local real-time freshness")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _before(path: Path | None, out: Path) -> tuple[list[dict[str, Any]] | None, list[float] | None, str | None]:
    """The "before" figures, the load average at their end and what they measured: the runs of ``path`` (a
    realtime.json), else those the last results kept."""
    source = path or out / "realtime.json"
    try:
        doc = json.loads(source.read_text())
    except (OSError, ValueError):
        return None, None, None
    runs, load, label = (
        (doc.get("runs"), doc.get("load_average"), None)
        if path
        else (doc.get("before"), doc.get("before_load_average"), doc.get("before_label"))
    )
    return (
        runs if isinstance(runs, list) else None,
        load if isinstance(load, list) else None,
        label if isinstance(label, str) else None,
    )


def main(argv: list[str] | None = None, run: Callable[..., dict[str, Any]] = measure) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--listeners", default="1,25,100", help="comma-separated listener counts, one run each")
    parser.add_argument("--processes", type=int, default=2, help="listener processes")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--before", type=Path, help="a realtime.json whose runs are the 'before' figures")
    parser.add_argument("--before-label", help="what the 'before' figures measured (the results keep it)")
    parser.add_argument("--listen", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.listen:
        return listen_main()
    runs = [run(args.samples, int(n), args.processes) for n in args.listeners.split(",")]
    before, before_load, before_label = _before(args.before, args.out)
    write(runs, args.out, before, before_load, args.before_label or before_label)
    for r in runs:
        progress(f"{r['listeners']} listener(s): p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, missing {r['missing']}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
