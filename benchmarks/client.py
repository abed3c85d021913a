"""The local-first client SDK: initial sync from a checkpoint, and local write throughput.

``python -m benchmarks.client [--rows N] [--repetitions R] [--quick]``. Results: ``benchmarks/results/client.json``
and ``.md``.

1. **Initial sync.** ``rows`` rows (three columns: a string, a boolean, a number), each written once, are cut into a
   checkpoint by the real checkpoint writer (:func:`lakesync.gateway.checkpoint.write_checkpoint`, 1 MiB chunks).
   A small HTTP server in this process serves the bytes as the gateway's routes do (the whole checkpoint → 413 above
   4 MiB, then ``?chunk=i&checkpoint=id`` with the ``X-Checkpoint-*`` headers; pull pages of 1,000 deltas as the
   gateway's JSON answers), prepared beforehand, so the figures are the SDK's own cost: HTTP, decoding, SQLite.

   * **checkpoint**: ``store.sync()`` on a new file with the checkpoint served as the SDK asks for it
     (``?format=columns``: each chunk as the gateway's columnar JSON document, rendered beforehand by the gateway's
     own encoder): fetch the chunks, decode, write user rows and base records of compact states in bulk in one
     transaction (no merge into an empty store), then one empty pull page.
   * **replay** (the reference): the same rows as deltas through pull: ``store.sync()`` on a new file with no
     checkpoint (404), pulling every page from the start, each page merged (``core.merge``) and applied with its
     cursor in one transaction.

   Goals: checkpoint ≥ 100,000 rows/s, and ≥ 10× the replay.
2. **Local writes.** ``store.insert_many(table, rows)`` of ``rows`` new rows (one transaction: checks, user rows, LWW
   states, one durable outbox entry holding the rows; the deltas' wire JSON and deltaIds are derived from that entry at
   push time, deterministically, so they are not in this figure) against raw ``sqlite3`` ``executemany`` of the same
   rows into a plain table of the same columns in a file with the same settings (WAL, ``synchronous=NORMAL``).
   Goal ≥ 0.3×. Also: single ``store.insert`` calls (one transaction each) per second, for scale.

Sides alternate within each repetition; medians over repetitions.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from benchmarks import plots, report
from benchmarks._common import machine_info, progress, summarize
from lakesync.auth import mint_token
from lakesync.client import connect
from lakesync.core.checkpoint import checkpoint_id
from lakesync.core.delta import make_delta
from lakesync.core.hlc import encode
from lakesync.core.merge import merge
from lakesync.gateway.checkpoint import (
    COLUMNS_EXPANSION,
    CONTENT_TYPE,
    MAX_SERVE_BYTES,
    encode_row,
    write_checkpoint,
)
from lakesync.gateway.memory import InMemoryObjectStore
from lakesync.wire.checkpoint_columns import MEDIA_TYPE as COLUMNS_MEDIA_TYPE
from lakesync.wire.checkpoint_columns import encode_columns
from lakesync.wire.fast_checkpoint import decode_checkpoint

RESULTS = Path(__file__).resolve().parent / "results"
GATEWAY = "default"
TABLE = "todos"
SECRET = "benchmark-secret-benchmark-secret-0123"
SCHEMA = {
    "table": TABLE,
    "columns": [
        {"name": "title", "type": "string"},
        {"name": "done", "type": "boolean"},
        {"name": "priority", "type": "number"},
    ],
}
T0 = 1_700_000_000_000
PAGE = 1000
GOAL_ROWS_PER_S = 100_000
GOAL_VS_REPLAY = 10.0
GOAL_WRITE_RATIO = 0.3


class Fixture:
    """The served bytes: checkpoint chunks and pull pages of the same rows."""

    def __init__(self, rows: int) -> None:
        deltas = [
            make_delta(
                "INSERT",
                table=TABLE,
                row_id=f"row-{i:07d}",
                client_id="writer",
                hlc=encode(T0 + i // 1000, i % 1000),
                columns={"title": f"task {i}", "done": i % 3 == 0, "priority": i % 5},
            )
            for i in range(rows)
        ]
        objects = InMemoryObjectStore()
        self.manifest = write_checkpoint(
            objects,
            gateway=GATEWAY,
            checkpoint_id=checkpoint_id(T0, "00000001"),
            created_at_ms=T0,
            positions={f"{GATEWAY}#{TABLE}#0": rows},
            server_hlc=encode(T0 + rows, 0),
            tables=[TABLE],
            rows=(encode_row(merge(None, d).state) for d in deltas),
        )
        self.chunks = [objects.objects[c.key] for c in self.manifest.chunks]
        # What ?format=columns serves for each chunk (no sync rules: every row), rendered as the gateway renders it.
        self.column_chunks = [
            encode_columns(decode_checkpoint((chunk,)), self.manifest.server_hlc).encode("ascii")
            for chunk in self.chunks
        ]
        self.pages: list[bytes] = []
        for start in range(0, rows, PAGE):
            body = {
                "deltas": [d.to_json() for d in deltas[start : start + PAGE]],
                "serverHlc": str(encode(T0 + rows, 0)),
                "hasMore": start + PAGE < rows,
                "cursor": f"p{start // PAGE + 1}",
            }
            self.pages.append(json.dumps(body, separators=(",", ":")).encode())
        self.end_page = json.dumps(
            {"deltas": [], "serverHlc": str(encode(T0 + rows, 0)), "hasMore": False, "cursor": self.manifest.cursor}
        ).encode()
        self.serve_checkpoint = True


def _handler(fixture: Fixture) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: Any) -> None:
            return

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            parts = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
            if parts.path.endswith("/checkpoint"):
                if not fixture.serve_checkpoint:
                    self._send(404, b'{"error":"No checkpoint available","code":"NOT_FOUND"}')
                    return
                manifest = fixture.manifest
                headers = {
                    "X-Checkpoint-Id": manifest.checkpoint_id,
                    "X-Checkpoint-Cursor": manifest.cursor,
                    "X-Checkpoint-Hlc": str(manifest.server_hlc),
                    "X-Checkpoint-Chunks": str(len(manifest.chunks)),
                    "Content-Type": CONTENT_TYPE,
                }
                columns = query.get("format") == "columns"
                if columns:
                    headers["Content-Type"] = COLUMNS_MEDIA_TYPE
                chunks = fixture.column_chunks if columns else fixture.chunks
                if "chunk" in query:
                    self._send(200, chunks[int(query["chunk"])], headers)
                elif manifest.bytes > MAX_SERVE_BYTES // (COLUMNS_EXPANSION if columns else 1):
                    self._send(413, b'{"error":"Checkpoint too large to serve whole","code":"VALIDATION_ERROR"}')
                elif columns:
                    body = encode_columns(decode_checkpoint(fixture.chunks), manifest.server_hlc).encode("ascii")
                    self._send(200, body, headers)
                else:
                    self._send(200, b"".join(chunks), headers)
                return
            if parts.path.endswith("/pull"):
                cursor = query.get("cursor", "")
                if cursor.startswith("p"):
                    index = int(cursor[1:])
                    body = fixture.pages[index] if index < len(fixture.pages) else fixture.end_page
                elif cursor == "":
                    body = fixture.pages[0]
                else:
                    body = fixture.end_page  # the checkpoint's cursor: nothing after it
                self._send(200, body, {"Content-Type": "application/json"})
                return
            self._send(404, b'{"error":"Not found","code":"NOT_FOUND"}')

    return Handler


def _initial_sync(url: str, path: Path) -> tuple[float, int]:
    token = mint_token("reader", GATEWAY, SECRET)
    with connect(path, url=url, gateway=GATEWAY, token=token, schemas=[SCHEMA], realtime=False) as store:
        start = time.perf_counter()
        store.sync()
        seconds = time.perf_counter() - start
        count = store.query(f"SELECT count(*) FROM {TABLE}")[0][0]
    return seconds, int(count)


def run_initial_sync(rows: int, repetitions: int) -> dict[str, Any]:
    """Checkpoint bootstrap against replay through pull (see the module docstring)."""
    progress(f"client: building a checkpoint and pull pages of {rows:,} rows")
    fixture = Fixture(rows)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fixture))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    checkpoint_s: list[float] = []
    replay_s: list[float] = []
    ratios: list[float] = []
    try:
        with tempfile.TemporaryDirectory(prefix="lakesync-bench-client-") as tmp:
            for rep in range(repetitions):
                order = ("checkpoint", "replay") if rep % 2 == 0 else ("replay", "checkpoint")
                got: dict[str, float] = {}
                for side in order:
                    fixture.serve_checkpoint = side == "checkpoint"
                    seconds, count = _initial_sync(url, Path(tmp) / f"{side}-{rep}.db")
                    if count != rows:
                        raise RuntimeError(f"{side}: {count} rows synced, expected {rows}")
                    got[side] = seconds
                    progress(f"client: initial sync rep {rep + 1}/{repetitions} {side}: {seconds:.2f}s")
                checkpoint_s.append(got["checkpoint"])
                replay_s.append(got["replay"])
                ratios.append(got["replay"] / got["checkpoint"])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    checkpoint = summarize(checkpoint_s)
    rate = rows / checkpoint["median"]
    ratio = summarize(ratios, digits=2)
    return {
        "rows": rows,
        "checkpoint_bytes": fixture.manifest.bytes,
        "columns_bytes": sum(map(len, fixture.column_chunks)),
        "checkpoint_chunks": len(fixture.manifest.chunks),
        "checkpoint_s": checkpoint,
        "replay_s": summarize(replay_s),
        "checkpoint_rows_per_s": round(rate),
        "replay_rows_per_s": round(rows / summarize(replay_s)["median"]),
        "speedup_vs_replay": ratio,
        "goal": {
            "rows_per_s": GOAL_ROWS_PER_S,
            "vs_replay": GOAL_VS_REPLAY,
            "met_rows_per_s": rate >= GOAL_ROWS_PER_S,
            "met_vs_replay": ratio["median"] >= GOAL_VS_REPLAY,
        },
    }


def _raw_insert(path: Path, rows: list[tuple[str, str, bool, int]]) -> float:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(
            f'CREATE TABLE {TABLE} ("_rowId" TEXT PRIMARY KEY NOT NULL, title TEXT, done INTEGER, priority NUMERIC)'
        )
        start = time.perf_counter()
        db.execute("BEGIN IMMEDIATE")
        db.executemany(f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?)", rows)
        db.execute("COMMIT")
        return time.perf_counter() - start
    finally:
        db.close()


def _store_insert(path: Path, rows: list[tuple[str, str, bool, int]]) -> float:
    token = mint_token("writer", GATEWAY, SECRET)
    values = {r[0]: {"title": r[1], "done": r[2], "priority": r[3]} for r in rows}
    with connect(path, url="http://127.0.0.1:9", gateway=GATEWAY, token=token, schemas=[SCHEMA], realtime=False) as s:
        start = time.perf_counter()
        s.insert_many(TABLE, values)
        seconds = time.perf_counter() - start
        if s.query(f"SELECT count(*) FROM {TABLE}")[0][0] != len(rows) or s.pending() != len(rows):
            raise RuntimeError("insert_many wrote the wrong number of rows")
    return seconds


def _single_inserts(path: Path, count: int) -> float:
    token = mint_token("writer", GATEWAY, SECRET)
    with connect(path, url="http://127.0.0.1:9", gateway=GATEWAY, token=token, schemas=[SCHEMA], realtime=False) as s:
        start = time.perf_counter()
        for i in range(count):
            s.insert(TABLE, f"one-{i}", {"title": f"task {i}", "done": False, "priority": i % 5})
        return time.perf_counter() - start


def run_local_writes(rows: int, repetitions: int, singles: int) -> dict[str, Any]:
    """insert_many against raw executemany, and single inserts (see the module docstring)."""
    data = [(f"row-{i:07d}", f"task {i}", i % 3 == 0, i % 5) for i in range(rows)]
    raw_s: list[float] = []
    sdk_s: list[float] = []
    ratios: list[float] = []
    single_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="lakesync-bench-client-") as tmp:
        for rep in range(repetitions):
            order = ("raw", "sdk") if rep % 2 == 0 else ("sdk", "raw")
            got: dict[str, float] = {}
            for side in order:
                path = Path(tmp) / f"{side}-{rep}.db"
                got[side] = _raw_insert(path, data) if side == "raw" else _store_insert(path, data)
                progress(f"client: local writes rep {rep + 1}/{repetitions} {side}: {got[side]:.2f}s")
            raw_s.append(got["raw"])
            sdk_s.append(got["sdk"])
            ratios.append(got["raw"] / got["sdk"])
            single_s.append(_single_inserts(Path(tmp) / f"single-{rep}.db", singles))
    ratio = summarize(ratios, digits=3)
    single = summarize(single_s)
    return {
        "rows": rows,
        "raw_executemany_s": summarize(raw_s),
        "insert_many_s": summarize(sdk_s),
        "raw_rows_per_s": round(rows / summarize(raw_s)["median"]),
        "insert_many_rows_per_s": round(rows / summarize(sdk_s)["median"]),
        "ratio_vs_raw": ratio,
        "single_inserts": {"count": singles, "seconds": single, "per_s": round(singles / single["median"])},
        "goal": {"ratio": GOAL_WRITE_RATIO, "met": ratio["median"] >= GOAL_WRITE_RATIO},
    }


def plot(results: Mapping[str, Any], path: Path) -> Path:
    """``client.png``: each repetition's rows/s, the initial sync from a checkpoint against replay through pull,
    and ``insert_many`` against raw sqlite3, with their goal lines."""
    sync, writes = results["initial_sync"], results["local_writes"]
    fig, (sync_ax, write_ax) = plots.figure(2, width=5.2, height=4.2)
    replay = [sync["rows"] / s for s in sync["replay_s"]["values"]]
    plots.spread(
        sync_ax,
        {"checkpoint": [sync["rows"] / s for s in sync["checkpoint_s"]["values"]], "replay\nthrough pull": replay},
        colours=[plots.OURS, plots.FLOOR],
    )
    plots.goal_line(sync_ax, sync["goal"]["rows_per_s"], f"goal: ≥ {sync['goal']['rows_per_s']:,} rows/s")
    times = sync["goal"]["vs_replay"]
    plots.goal_line(sync_ax, times * statistics.median(replay), f"goal: ≥ {times:g}× replay", linestyle=":")
    plots.plain_log(sync_ax)
    sync_ax.set_ylabel("rows/s, log scale (higher is better)")
    sync_ax.set_title(f"initial sync of {sync['rows']:,} rows", fontsize="medium")
    sync_ax.legend(loc="lower left", fontsize="small")
    raw = [writes["rows"] / s for s in writes["raw_executemany_s"]["values"]]
    plots.spread(
        write_ax,
        {
            "insert_many": [writes["rows"] / s for s in writes["insert_many_s"]["values"]],
            "raw sqlite3\nexecutemany": raw,
        },
        colours=[plots.OURS, plots.FLOOR],
    )
    ratio = writes["goal"]["ratio"]
    plots.goal_line(write_ax, ratio * statistics.median(raw), f"goal: ≥ {ratio:g}× raw")
    write_ax.set_ylim(bottom=0)
    write_ax.set_ylabel("rows/s (higher is better)")
    write_ax.set_title(f"local writes of {writes['rows']:,} rows", fontsize="medium")
    write_ax.legend(loc="upper left", fontsize="small")
    return plots.save(fig, path, title=f"Client SDK, {results['timestamp'][:10]}")


def render(results: dict[str, Any]) -> str:
    """The Markdown report."""
    sync, writes = results["initial_sync"], results["local_writes"]
    ok = {True: "met", False: "**missed**"}
    lines = [
        "# Client SDK benchmark",
        "",
        f"Run {results['timestamp']}{' (quick)' if results['quick'] else ''}, {results['duration_s']:.0f} s. "
        "Method: `benchmarks/client.py` (module docstring).",
        "",
        "![Each repetition against its goals: initial sync, and local writes](client.png)",
        "",
        "## Initial sync of a new store",
        "",
        f"{sync['rows']:,} rows; checkpoint of {sync['checkpoint_bytes']:,} bytes (framed stream) in "
        f"{sync['checkpoint_chunks']} chunks, served from memory by a local HTTP server as the gateway serves it: "
        f"to the SDK, which asks for `format=columns`, as {sync['columns_bytes']:,} bytes of columnar JSON.",
        "",
        "| path | median s | min | max | rows/s |",
        "|---|---|---|---|---|",
        f"| checkpoint (bulk, no merge) | {sync['checkpoint_s']['median']} | {sync['checkpoint_s']['min']} | "
        f"{sync['checkpoint_s']['max']} | {sync['checkpoint_rows_per_s']:,} |",
        f"| replay through pull (merge per delta) | {sync['replay_s']['median']} | {sync['replay_s']['min']} | "
        f"{sync['replay_s']['max']} | {sync['replay_rows_per_s']:,} |",
        "",
        f"* checkpoint: {sync['checkpoint_rows_per_s']:,} rows/s against a goal of {GOAL_ROWS_PER_S:,}: "
        f"{ok[sync['goal']['met_rows_per_s']]}.",
        f"* speed-up over the replay: {sync['speedup_vs_replay']['median']}× (per repetition: "
        f"{sync['speedup_vs_replay']['values']}) against a goal of {GOAL_VS_REPLAY:g}×: "
        f"{ok[sync['goal']['met_vs_replay']]}.",
        "",
        "## Local writes",
        "",
        "| side | median s | rows/s |",
        "|---|---|---|",
        f"| raw sqlite3 executemany, plain table | {writes['raw_executemany_s']['median']} | "
        f"{writes['raw_rows_per_s']:,} |",
        f"| `store.insert_many` (checks + user rows + LWW states + outbox entry; wire JSON and deltaIds at push) | "
        f"{writes['insert_many_s']['median']} | "
        f"{writes['insert_many_rows_per_s']:,} |",
        "",
        f"* ratio {writes['ratio_vs_raw']['median']}× (per repetition: {writes['ratio_vs_raw']['values']}) against a "
        f"goal of {GOAL_WRITE_RATIO}×: {ok[writes['goal']['met']]}.",
        f"* single `store.insert` calls (one transaction each): {writes['single_inserts']['per_s']:,}/s.",
        "",
        "## Machine",
        "",
        "```json",
        json.dumps(results["machine"], indent=2),
        "```",
        "",
    ]
    return "\n".join(lines)


def quick_summary(results: dict[str, Any]) -> str:
    """One line for the console."""
    sync, writes = results["initial_sync"], results["local_writes"]
    return (
        f"client: checkpoint {sync['checkpoint_rows_per_s']:,} rows/s ({sync['speedup_vs_replay']['median']}x replay); "
        f"insert_many {writes['insert_many_rows_per_s']:,} rows/s ({writes['ratio_vs_raw']['median']}x raw)"
    )


def main(argv: list[str] | None = None) -> int:
    """Run and write the results."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.client", description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--singles", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="10,000 rows, 2 repetitions; results to a temp dir")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rows, repetitions, singles = (10_000, 2, 200) if args.quick else (args.rows, args.repetitions, args.singles)
    out = args.out or (Path(tempfile.mkdtemp(prefix="lakesync-bench-")) if args.quick else RESULTS)
    started = time.monotonic()
    results: dict[str, Any] = {"timestamp": datetime.now(UTC).isoformat(timespec="seconds"), "quick": args.quick}
    results["initial_sync"] = run_initial_sync(rows, repetitions)
    results["local_writes"] = run_local_writes(rows, repetitions, singles)
    results["machine"] = machine_info()
    results["duration_s"] = round(time.monotonic() - started, 1)
    json_path, md_path = report.write(results, out, stem="client", render=render, ensure_ascii=True)
    png_path = plot(results, out / "client.png")
    progress(f"wrote {json_path}, {md_path} and {png_path}")
    print(quick_summary(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
