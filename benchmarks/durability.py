"""What durability and concurrent serving cost and buy in the embedded default (``lakesync local``).

``python -m benchmarks.durability [--pushes N] [--rounds R] [--clients C] [--requests K] [--workers W]`` runs the
embedded default in this process (:class:`lakesync.local.runner.LocalStack`, real HTTP) and measures, in one run:

1. **Durability cost.** Sequential pushes of 48 deltas (one commit chunk each) and of 1 delta, over HTTP, with the
   journal off (``persist=False``: moto's memory only, what ``kill -9`` used to lose), the journal without fsync
   (survives ``kill -9``, not a power cut) and the journal with fsync before every acknowledgement (the default).
   Configurations are interleaved round by round; medians over rounds; the figure is the throughput ratio.
2. **Concurrent serving.** ``clients`` threads, each sending ``requests`` requests (alternately a 10-delta push and a
   cursor pull) on its own connection: latency p50/p99 with handlers in this process one at a time (``workers=0``,
   as before) and in ``workers`` handler processes; plus /health latency while a 4,000-delta push commits.

Results: ``benchmarks/results/durability.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import plots
from benchmarks._common import machine_info, progress
from lakesync.auth import mint_token
from lakesync.client.http import SyncClient
from lakesync.core.delta import RowDelta, make_delta
from lakesync.core.hlc import HLC
from lakesync.local.runner import LocalStack

RESULTS = Path(__file__).resolve().parent / "results"
CONFIGS = {
    "journal off": {"persist": False},
    "journal, no fsync": {"persist": True, "fsync": False},
    "journal + fsync (default)": {"persist": True, "fsync": True},
}


def _deltas(prefix: str, count: int, hlc: HLC, client: str = "w", table: str = "todos") -> list[RowDelta]:
    return [
        make_delta("INSERT", table=table, row_id=f"{prefix}-{i}", client_id=client, hlc=hlc.now(), columns={"v": i})
        for i in range(count)
    ]


def _push_rate(config: dict[str, Any], pushes: int, size: int) -> float:
    """Deltas per second of ``pushes`` sequential pushes of ``size`` deltas."""
    with tempfile.TemporaryDirectory() as tmp, LocalStack(Path(tmp), port=0, materialise=False, **config) as stack:
        writer = SyncClient(stack.url, "default", mint_token("w", "default", stack.secret), "w")
        hlc = HLC()
        batches = [_deltas(f"p{n}", size, hlc) for n in range(pushes + 3)]
        for batch in batches[:3]:  # warm-up: imports, connections
            writer.push(batch)
        started = time.perf_counter()
        for batch in batches[3:]:
            writer.push(batch)
        return pushes * size / (time.perf_counter() - started)


def durability_cost(pushes: int, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for size in (48, 1):
        rates: dict[str, list[float]] = {name: [] for name in CONFIGS}
        for r in range(rounds):
            for name, config in CONFIGS.items():
                rate = _push_rate(config, pushes if size > 1 else pushes * 2, size)
                rates[name].append(rate)
                progress(f"size {size} round {r + 1}: {name}: {rate:,.0f} deltas/s")
        medians = {name: statistics.median(values) for name, values in rates.items()}
        base = medians["journal off"]
        out[f"push_{size}"] = {
            name: {
                "deltas_per_s": round(medians[name]),
                "pushes_per_s": round(medians[name] / size, 1),
                "ratio_to_off": round(medians[name] / base, 3),
                "rounds": [round(v) for v in rates[name]],
            }
            for name in CONFIGS
        }
    return out


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _concurrent(workers: int, clients: int, requests: int, *, one_table: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        with LocalStack(Path(tmp), port=0, persist=True, materialise=False, workers=workers) as stack:
            latencies: list[float] = []
            lock = threading.Lock()
            errors: list[str] = []

            def client(c: int) -> None:
                me = f"c{c}"
                sync = SyncClient(stack.url, "default", mint_token(me, "default", stack.secret), me)
                hlc = HLC()
                mine: list[float] = []
                cursor = None
                for k in range(requests):
                    started = time.perf_counter()
                    try:
                        if k % 2 == 0:
                            sync.push(_deltas(f"{me}-{k}", 10, hlc, me, "todos" if one_table else f"todos_{c}"))
                        else:
                            page = sync.request(
                                "GET", "/v1/sync/default/pull", query={"clientId": me, "limit": 100, "cursor": cursor}
                            )
                            cursor = page.get("cursor")
                    except Exception as e:  # recorded, and the figure is not reported as clean
                        errors.append(repr(e))
                        continue
                    mine.append(time.perf_counter() - started)
                with lock:
                    latencies.extend(mine)

            threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
            started = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - started

            # /health while a 4,000-delta push commits
            writer = SyncClient(stack.url, "default", mint_token("w", "default", stack.secret), "w", timeout=300)
            big = _deltas("big", 4000, HLC())
            done = threading.Event()

            def push() -> None:
                writer.push(big)
                done.set()

            pusher = threading.Thread(target=push)
            pusher.start()
            time.sleep(0.5)
            health: list[float] = []
            while not done.is_set() and len(health) < 20:
                t0 = time.perf_counter()
                with urllib.request.urlopen(f"{stack.url}/health", timeout=300) as resp:
                    resp.read()
                health.append(time.perf_counter() - t0)
            pusher.join()
    return {
        "workers": workers,
        "requests": len(latencies),
        "errors": len(errors),
        "throughput_rps": round(len(latencies) / wall, 1),
        "p50_ms": round(1000 * _percentile(latencies, 50), 1),
        "p99_ms": round(1000 * _percentile(latencies, 99), 1),
        "max_ms": round(1000 * max(latencies), 1),
        "health_during_big_push_ms": {
            "n": len(health),
            "median": round(1000 * statistics.median(health), 1) if health else None,
            "max": round(1000 * max(health), 1) if health else None,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pushes", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--only", choices=["concurrency"], help="keep the durability figures of the last run")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "parameters": vars(args),
    }
    previous = RESULTS / "durability.json"
    if args.only == "concurrency" and previous.exists():
        results["durability"] = json.loads(previous.read_text())["durability"]
        results["durability_measured"] = json.loads(previous.read_text()).get("when")
    else:
        results["durability"] = durability_cost(args.pushes, args.rounds)
    results["concurrency"] = {}
    for one_table in (False, True):
        where = "one table (one hot shard)" if one_table else "a table per client"
        for workers in (0, args.workers):
            name = f"{where}, {'before: in-process' if workers == 0 else 'after'} (workers={workers})"
            results["concurrency"][name] = _concurrent(workers, args.clients, args.requests, one_table=one_table)
            progress(f"{name}: {results['concurrency'][name]}")
    progress(json.dumps(results["concurrency"]))
    errors = sum(row["errors"] for row in results["concurrency"].values())
    if errors:
        raise SystemExit(f"{errors} requests failed: the latency figures would not be comparable")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "durability.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / "durability.md").write_text(_markdown(results))
    plot(results, RESULTS / "durability.png")
    print(_markdown(results))


def plot(results: Mapping[str, Any], path: Path) -> Path:
    """``durability.png``: each configuration's push rate relative to the journal off (every round a dot), and the
    concurrent clients' latencies before and after the handler processes."""
    fig, (cost_ax, lat_ax) = plots.figure(2, width=6, height=4.4)
    configs = list(next(iter(results["durability"].values())))
    width = 0.8 / len(configs)
    colours = [plots.FLOOR, plots.OTHER, plots.OURS]
    sizes = list(results["durability"])
    for i, config in enumerate(configs):
        xs = [j + (i - (len(configs) - 1) / 2) * width for j in range(len(sizes))]
        heights = [results["durability"][size][config]["ratio_to_off"] for size in sizes]
        cost_ax.bar(xs, heights, width, color=colours[i % len(colours)], label=config)
        for x, size in zip(xs, sizes, strict=True):
            off = results["durability"][size][configs[0]]["deltas_per_s"]
            rounds = [v / off for v in results["durability"][size][config]["rounds"]]
            cost_ax.plot([x] * len(rounds), rounds, "o", color="black", markersize=3)
    counts = [size.split("_")[1] for size in sizes]
    cost_ax.set_xticks(range(len(sizes)), [f"pushes of {n} delta{'' if n == '1' else 's'}" for n in counts])
    cost_ax.set_ylim(0, 1.6)
    cost_ax.set_ylabel("deltas/s relative to the journal off")
    cost_ax.set_title("the journal's cost per push (dots: rounds)", fontsize="medium")
    cost_ax.legend(loc="upper center", ncol=len(configs), fontsize="x-small")
    rows = results["concurrency"]
    short = {"a table per client": "a table a client", "one table (one hot shard)": "one hot shard"}
    labels = [f"{short.get(n := name.split(',')[0], n)}\nworkers={row['workers']}" for name, row in rows.items()]
    xs = list(range(len(labels)))
    for offset, key, colour in ((-0.2, "p50_ms", plots.OURS), (0.2, "p99_ms", plots.OTHER)):
        lat_ax.bar([x + offset for x in xs], [row[key] for row in rows.values()], 0.4, color=colour, label=key[:3])
    lat_ax.plot(
        [x + 0.2 for x in xs], [row["max_ms"] for row in rows.values()], "_", color="black", markersize=18, label="max"
    )
    lat_ax.set_xticks(xs, labels, fontsize="small")
    lat_ax.set_yscale("log")
    lat_ax.set_ylabel("request latency, ms, log scale")
    clients = results["parameters"]["clients"]
    lat_ax.set_title(f"{clients} concurrent clients, before and after handler processes", fontsize="medium")
    lat_ax.legend(loc="upper right", fontsize="small")
    return plots.save(fig, path, title=f"Durability and concurrent serving of lakesync local, {results['when'][:10]}")


def _markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Durability and concurrent serving of `lakesync local`",
        "",
        f"{results['when']}, {results['machine']}. `python -m benchmarks.durability` ({results['parameters']}).",
        "",
        "## What the journal costs per push (sequential pushes over HTTP, medians of interleaved rounds)",
        "",
        "| push size | configuration | deltas/s | pushes/s | ratio to journal off |",
        "|---|---|---|---|---|",
    ]
    for key, rows in results["durability"].items():
        for name, row in rows.items():
            size = key.split("_")[1]
            lines.append(
                f"| {size} | {name} | {row['deltas_per_s']:,} | {row['pushes_per_s']} | {row['ratio_to_off']:.2f} |"
            )
    lines += [
        "",
        f"## {results['parameters']['clients']} concurrent clients (10-delta pushes and cursor pulls alternately)",
        "",
        "Clients pushing to one table share one shard: their commits can conflict on the head's sequence guard and"
        " retry with backoff, as on DynamoDB; serialised handlers never conflict. With a table per client every"
        " cursor pull reads 16 shards. moto (DynamoDB one request at a time) stays in one process, so on a machine"
        " with few cores the handler processes mostly buy latency for light requests (/health), not throughput.",
        "",
        "![What the journal costs, and the concurrent clients' latencies](durability.png)",
        "",
        "| serving | requests | errors | req/s | p50 ms | p99 ms | max ms"
        " | /health during a 4,000-delta push (median / max ms) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in results["concurrency"].items():
        h = row["health_during_big_push_ms"]
        lines.append(
            f"| {name} | {row['requests']} | {row['errors']} | {row['throughput_rps']} | {row['p50_ms']} |"
            f" {row['p99_ms']} | {row['max_ms']} | {h['median']} / {h['max']} (n={h['n']}) |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
