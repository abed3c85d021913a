"""``python -m benchmarks.connectors``: the database connector's polls against a raw SELECT of the same rows, on a
throwaway PostgreSQL server. Writes ``benchmarks/results/connectors.{json,md}``.

Workloads (best of ``repetitions`` runs each, same server, same run):

* **diff poll of a 100k-row table**: ``SqlIngestSource.poll`` from an empty position (read, convert to JSON, hash,
  diff: every row new), then a steady-state diff poll with 1% of the rows changed (the same full read, 1,000
  changes out). Reference: the raw SELECT of the same 100k rows (psycopg ``fetchall``).
* **cursor poll of 10k changes**: 10,000 rows updated after the stored cursor; one cursor poll (limit 10,000) reads
  exactly them. Reference: the raw ``SELECT ... WHERE updated_at > %s ORDER BY updated_at`` of the same rows.
* **end to end**: ``poll_connector`` of the same two workloads into an in-memory gateway (deltas + provenance rows
  through the push service, position stored): the source read plus the gateway's validation and merge.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import plots, report

RESULTS = Path(__file__).resolve().parent / "results"
_STARTED = time.monotonic()
T0 = dt.datetime(2025, 1, 1)


def progress(message: str) -> None:
    """One progress line on stderr."""
    print(f"[connectors +{time.monotonic() - _STARTED:5.1f}s] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class Sizes:
    """Workload sizes."""

    rows: int
    changes: int
    repetitions: int


FULL = Sizes(rows=100_000, changes=10_000, repetitions=3)
QUICK = Sizes(rows=2_000, changes=500, repetitions=1)


def _best(fn: Callable[[], Any], repetitions: int) -> tuple[float, Any]:
    best, value = float("inf"), None
    for _ in range(repetitions):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def _deps() -> Any:
    from lakesync.core.hlc import HLC
    from lakesync.gateway.deps import GatewayDeps, GatewaySettings
    from lakesync.gateway.memory import (
        InMemoryActionStore,
        InMemoryBufferStore,
        InMemoryConfigStore,
        InMemoryPositionStore,
    )

    # No flush job runs here: the buffer may hold the whole initial load (200k deltas) without backpressure.
    return GatewayDeps(
        InMemoryBufferStore(),
        InMemoryConfigStore(),
        InMemoryActionStore(),
        settings=GatewaySettings(flush_threshold_bytes=1 << 40),
        clock=HLC(),
        positions=InMemoryPositionStore(),
    )


def run(sizes: Sizes, out: Path | None) -> dict[str, Any]:
    """Run the workloads; write the results to ``out`` (when given) and return them."""
    import psycopg

    from lakesync.connectors.sql.ingest import SqlIngestSource
    from lakesync.connectors.sql.postgres import PostgresRunner
    from lakesync.connectors.sql.query import IngestTable
    from lakesync.gateway.poller import poll_connector
    from tests.sql.servers import running_postgres

    load_start = os.getloadavg()
    with running_postgres() as server:
        url = server.url("bench")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE items (id INT PRIMARY KEY, name TEXT, qty INT, price NUMERIC(10,2), note TEXT,"
                " updated_at TIMESTAMP(3))"
            )
            with conn.cursor().copy("COPY items FROM STDIN") as copy:
                for i in range(sizes.rows):
                    copy.write_row(
                        (
                            i,
                            f"item {i}",
                            i % 97,
                            f"{i % 1000}.{i % 100:02d}",
                            "x" * 20,
                            T0 + dt.timedelta(milliseconds=i),
                        )
                    )
            conn.execute("CREATE INDEX ON items (updated_at)")
            conn.execute("ANALYZE items")
        progress(f"{sizes.rows:,} rows loaded")
        query = "SELECT id, name, qty, price, note, updated_at FROM items"
        diff = IngestTable("items", query, "id", "diff")
        cursor = IngestTable("items", query, "id", "cursor", "updated_at", 0)

        raw = psycopg.connect(url)

        def raw_select() -> int:
            with raw.cursor() as cur:
                cur.execute(query)
                return len(cur.fetchall())

        raw_full_s, _ = _best(raw_select, sizes.repetitions)
        source = SqlIngestSource("bench", PostgresRunner(url, name="bench"), [diff])
        diff_s, first = _best(lambda: source.poll({}, sizes.rows), sizes.repetitions)
        assert len(first.rows) == sizes.rows
        # steady state: 1% changed since the snapshot
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE items SET qty = qty + 1 WHERE id % 100 = 0")
        steady_s, steady = _best(lambda: source.poll(first.position, sizes.rows), sizes.repetitions)
        assert len(steady.rows) == sizes.rows // 100
        progress(f"diff: raw {raw_full_s:.2f}s, poll {diff_s:.2f}s, steady {steady_s:.2f}s")

        # cursor: the last `changes` rows moved past the cursor
        mark = T0 + dt.timedelta(days=1)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "UPDATE items SET updated_at = %s + (id * interval '1 millisecond') WHERE id >= %s",
                (mark, sizes.rows - sizes.changes),
            )
        position = {"tables": {"items": {"cursor": {"$datetime": mark.isoformat()}, "paging": False, "recent": {}}}}

        def raw_cursor() -> int:
            with raw.cursor() as cur:
                cur.execute(f"SELECT * FROM ({query}) AS s WHERE updated_at > %s ORDER BY updated_at", (mark,))
                return len(cur.fetchall())

        raw_cursor_s, n = _best(raw_cursor, sizes.repetitions)
        assert n == sizes.changes
        cursor_source = SqlIngestSource("bench", PostgresRunner(url, name="bench"), [cursor])
        cursor_s, batch = _best(lambda: cursor_source.poll(position, sizes.changes), sizes.repetitions)
        assert len(batch.rows) == sizes.changes, len(batch.rows)
        progress(f"cursor: raw {raw_cursor_s:.3f}s, poll {cursor_s:.3f}s")

        # end to end into an in-memory gateway (fresh each run)
        def e2e(src: SqlIngestSource, start: dict[str, Any]) -> int:
            deps = _deps()
            if start:
                assert deps.positions.acquire("default", "bench", 0, "seed", 1, 0)
                assert deps.positions.commit("default", "bench", "seed", 0, start)
            result = poll_connector(deps, "default", "bench", src, deps.positions, limit=sizes.rows, max_rounds=1)
            return result.applied

        e2e_diff_s, applied = _best(lambda: e2e(source, {}), sizes.repetitions)
        assert applied == sizes.rows
        e2e_cursor_s, applied = _best(lambda: e2e(cursor_source, position), sizes.repetitions)
        assert applied == sizes.changes
        progress(f"end to end: diff {e2e_diff_s:.2f}s, cursor {e2e_cursor_s:.3f}s")
        raw.close()
        source.close()
        cursor_source.close()

    def rate(n: int, s: float) -> int:
        return round(n / s)

    results: dict[str, Any] = {
        "generated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "sizes": {"rows": sizes.rows, "changes": sizes.changes, "repetitions": sizes.repetitions},
        "seconds": {
            "raw_select_all": round(raw_full_s, 4),
            "diff_poll_all_new": round(diff_s, 4),
            "diff_poll_1pct_changed": round(steady_s, 4),
            "raw_select_changes": round(raw_cursor_s, 4),
            "cursor_poll_changes": round(cursor_s, 4),
            "end_to_end_diff": round(e2e_diff_s, 4),
            "end_to_end_cursor": round(e2e_cursor_s, 4),
        },
        "rows_per_s": {
            "raw_select_all": rate(sizes.rows, raw_full_s),
            "diff_poll_all_new": rate(sizes.rows, diff_s),
            "diff_poll_1pct_changed": rate(sizes.rows, steady_s),
            "raw_select_changes": rate(sizes.changes, raw_cursor_s),
            "cursor_poll_changes": rate(sizes.changes, cursor_s),
            "end_to_end_diff": rate(sizes.rows, e2e_diff_s),
            "end_to_end_cursor": rate(sizes.changes, e2e_cursor_s),
        },
        "ratios_vs_raw_select": {
            "diff_poll_all_new": round(raw_full_s / diff_s, 3),
            "diff_poll_1pct_changed": round(raw_full_s / steady_s, 3),
            "cursor_poll_changes": round(raw_cursor_s / cursor_s, 3),
            "end_to_end_diff": round(raw_full_s / e2e_diff_s, 3),
            "end_to_end_cursor": round(raw_cursor_s / e2e_cursor_s, 3),
        },
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_start": [round(x, 2) for x in load_start],
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
        },
    }
    if out is not None:
        report.write(results, out, stem="connectors", render=_markdown, ensure_ascii=True)
        plot(results, out / "connectors.png")
    return results


def plot(r: Mapping[str, Any], path: Path) -> Path:
    """``connectors.png``: rows/s of each poll beside the raw SELECT of the same rows, on a log scale."""
    rows, sizes = r["rows_per_s"], r["sizes"]
    whole, changes = f"{sizes['rows']:,} rows", f"{sizes['changes']:,} changes"
    sides = {
        f"raw SELECT, {whole}": ("raw_select_all", plots.FLOOR),
        f"diff poll, {whole} all new": ("diff_poll_all_new", plots.OURS),
        f"diff poll, {whole}, 1% changed": ("diff_poll_1pct_changed", plots.OURS),
        "diff poll end to end (push, provenance)": ("end_to_end_diff", plots.OTHER),
        f"raw SELECT, {changes}": ("raw_select_changes", plots.FLOOR),
        f"cursor poll, {changes}": ("cursor_poll_changes", plots.OURS),
        "cursor poll end to end": ("end_to_end_cursor", plots.OTHER),
    }
    fig, (ax,) = plots.figure(width=8.5, height=4.2)
    plots.bars(
        ax, {label: rows[key] for label, (key, _) in sides.items()}, colours=[c for _, c in sides.values()], log=True
    )
    ax.set_xlabel("rows/s, log scale (grey: raw SELECT of the same rows; orange: into the buffer)")
    return plots.save(fig, path, title=f"Database connector on PostgreSQL, {r['generated_at'][:10]}")


def _markdown(r: dict[str, Any]) -> str:
    rows, ratios, sizes = r["rows_per_s"], r["ratios_vs_raw_select"], r["sizes"]
    lines = [
        "# Connector benchmark (PostgreSQL)",
        "",
        f"Generated {r['generated_at']} by `make bench-connectors`; best of {sizes['repetitions']} runs.",
        "",
        "| workload | rows/s | × raw SELECT of the same rows |",
        "|---|---:|---:|",
        f"| raw SELECT of {sizes['rows']:,} rows | {rows['raw_select_all']:,} | 1 |",
        f"| diff poll, {sizes['rows']:,} rows all new | {rows['diff_poll_all_new']:,} "
        f"| {ratios['diff_poll_all_new']} |",
        f"| diff poll, {sizes['rows']:,} rows, 1% changed | {rows['diff_poll_1pct_changed']:,} "
        f"| {ratios['diff_poll_1pct_changed']} |",
        f"| end to end diff poll (push + provenance + position) | {rows['end_to_end_diff']:,} "
        f"| {ratios['end_to_end_diff']} |",
        f"| raw SELECT of {sizes['changes']:,} changed rows | {rows['raw_select_changes']:,} | 1 |",
        f"| cursor poll of {sizes['changes']:,} changes | {rows['cursor_poll_changes']:,} "
        f"| {ratios['cursor_poll_changes']} |",
        f"| end to end cursor poll | {rows['end_to_end_cursor']:,} | {ratios['end_to_end_cursor']} |",
        "",
        "![Rows/s of each poll beside the raw SELECT of the same rows](connectors.png)",
        "",
        f"Machine: {r['machine']['cpus']} CPUs, load average {r['machine']['load_average_start']} → "
        f"{r['machine']['load_average_end']} (a shared machine). The end-to-end figures push into the in-memory "
        "gateway (two deltas per change: the row and its provenance record); on AWS the push's DynamoDB commits "
        "dominate instead.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.connectors", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny workload (smoke check), results not written")
    parser.add_argument("--out", type=Path, help="results directory (default benchmarks/results)")
    args = parser.parse_args(argv)
    out = args.out if args.out else (None if args.quick else RESULTS)
    r = run(QUICK if args.quick else FULL, out)
    print(
        f"connectors: diff poll {r['rows_per_s']['diff_poll_all_new']:,} rows/s "
        f"({r['ratios_vs_raw_select']['diff_poll_all_new']}x raw SELECT), cursor poll "
        f"{r['rows_per_s']['cursor_poll_changes']:,} rows/s ({r['ratios_vs_raw_select']['cursor_poll_changes']}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
