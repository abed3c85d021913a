"""``python -m benchmarks.materialise``: materialise 100k deltas into PostgreSQL through ``SqlDestination.apply``
and compare with raw writes of the same rows in the same run. Writes ``benchmarks/results/materialise.{json,md}``.

Workload: 20,000 rows; each gets an INSERT (4 columns) and on average 4 UPDATEs of 1-2 columns from 3 clients,
about 1% of the rows are deleted; 100,000 deltas in HLC order, published in jobs of 5,000 deltas (the flush's
``publish_range_size``) and consumed as the materialise function consumes them: SQS batches of 10 messages, the jobs
of one table in a batch applied together (``materialise_batch``), so one ``apply`` call per batch, on a throwaway
PostgreSQL server (fsync off, autovacuum off and a ``CHECKPOINT`` before each timed
section, so that no side pays for another's background work).

Figures (best of ``--repetitions`` runs, each on fresh tables; same server, same run):

* **ours**: time of all ``apply`` calls. Rates: deltas/s (input rows) and row writes/s (destination rows upserted
  or deleted, summed over calls). Also, as a second figure, one ``apply`` per message (a consumer invoked with
  single messages, as when jobs trickle in).
* **executemany of the final rows (the goal's reference)**: the rows the destination ends with, written by a plain
  psycopg ``executemany`` ``INSERT`` into a table with a primary key, in transactions of one message size.
  Goal: ours (deltas/s) ≥ 0.5× this (rows/s).
* **COPY of the final rows**: the same rows by ``COPY`` (bulk load of the end result).
* **raw upsert of the same row writes (stricter)**: the very row writes ``apply`` made, per consumer batch, as
  ``executemany`` of ``INSERT ... ON CONFLICT (row_id) DO UPDATE`` (pipeline mode) plus the soft deletes: what any
  materialiser of these messages must write, without merge, state or coercion. **raw COPY of the same row writes**:
  those rows by ``COPY`` into a table without keys.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import plots, report
from lakesync.core.delta import RowDelta, make_delta
from lakesync.core.merge import RowState, fold, merge
from lakesync.core.schema import TableSchema, parse_table_schema
from lakesync.sql import connect
from lakesync.sql.coerce import coerce_value

RESULTS = Path(__file__).resolve().parent / "results"
CONSUMER_BATCH = 10
"""Messages per invocation of the materialise function (its SQS batch size, ``MATERIALISE_BATCH_SIZE`` in infra):
``materialise_batch`` applies the jobs of one table in a batch together."""
_STARTED = time.monotonic()


def progress(message: str) -> None:
    """One progress line on stderr."""
    print(f"[materialise +{time.monotonic() - _STARTED:5.1f}s] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class Sizes:
    """Workload sizes."""

    rows: int
    deltas: int
    batch: int
    repetitions: int
    messages_per_apply: int = CONSUMER_BATCH


FULL = Sizes(rows=20_000, deltas=100_000, batch=5_000, repetitions=3)
QUICK = Sizes(rows=1_000, deltas=5_000, batch=1_000, repetitions=1, messages_per_apply=2)


def schema_for(table: str) -> TableSchema:
    """The benchmark table: text, number, boolean, json."""
    return parse_table_schema(
        {
            "table": table,
            "sourceTable": "bench",
            "columns": [
                {"name": "title", "type": "string"},
                {"name": "amount", "type": "number"},
                {"name": "done", "type": "boolean"},
                {"name": "meta", "type": "json"},
            ],
        }
    )


def workload(sizes: Sizes, seed: int = 1) -> list[RowDelta]:
    """The deltas in HLC order (inserts first per row; updates and a few deletes interleaved across rows)."""
    rng = random.Random(seed)
    events: list[tuple[int, RowDelta]] = []
    clients = ["web", "ios", "android"]
    updates = sizes.deltas - sizes.rows
    for r in range(sizes.rows):
        hlc = (1_000 + r) << 16
        cols = {"title": f"row {r}", "amount": r * 0.5, "done": False, "meta": {"tags": ["a"], "n": r}}
        events.append(
            (hlc, make_delta("INSERT", table="bench", row_id=f"r{r:06d}", client_id="web", hlc=hlc, columns=cols))
        )
    for i in range(updates):
        r = rng.randrange(sizes.rows)
        hlc = (1_000 + rng.randrange(r, sizes.rows + updates // 4)) << 16 | (i & 0xFFFF)
        client = rng.choice(clients)
        if rng.random() < 0.01 * sizes.rows / updates * 4:
            delta = make_delta("DELETE", table="bench", row_id=f"r{r:06d}", client_id=client, hlc=hlc)
        else:
            names = rng.sample(["title", "amount", "done", "meta"], rng.randint(1, 2))
            values: dict[str, Any] = {
                "title": f"t{i}",
                "amount": rng.random() * 100,
                "done": rng.random() < 0.5,
                "meta": {"tags": ["b", str(i)], "n": i},
            }
            delta = make_delta(
                "UPDATE",
                table="bench",
                row_id=f"r{r:06d}",
                client_id=client,
                hlc=hlc,
                columns={n: values[n] for n in names},
            )
        events.append((hlc, delta))
    events.sort(key=lambda e: e[0])
    return [d for _, d in events]


def _project(values: dict[str, Any] | None, row_id: str) -> tuple[Any, ...]:
    values = values or {}
    types = schema_for("x").column_types
    return (row_id, *(coerce_value(values.get(c), t, allow_nul=False).value for c, t in types.items()))


def row_writes(batches: list[list[RowDelta]]) -> list[tuple[list[tuple[Any, ...]], list[str]]]:
    """Per message, the rows ``apply`` writes (upserts with their values after the message, and deleted ids)."""
    states: dict[str, RowState] = {}
    out = []
    for batch in batches:
        touched = sorted({d.row_id for d in batch})
        before = {r: states.get(r) for r in touched}
        for d in batch:
            states[d.row_id] = merge(states.get(d.row_id), d).state
        upserts, deletes = [], []
        for r in touched:
            old, new = before[r], states.get(r)
            if new is None or new == old:
                continue
            if new.exists:
                upserts.append(_project(new.values(), r))
            elif old is not None and old.exists:
                deletes.append(r)
        out.append((upserts, deletes))
    return out


def run(sizes: Sizes, out: Path | None, *, quick: bool) -> dict[str, Any]:
    """Run the benchmark on a throwaway PostgreSQL server; returns (and writes) the results."""
    import psycopg

    from tests.sql.servers import running_postgres

    load_start = report.load_average()
    deltas = workload(sizes)
    batches = [deltas[i : i + sizes.batch] for i in range(0, len(deltas), sizes.batch)]
    group = sizes.messages_per_apply
    applies = [[d for batch in batches[i : i + group] for d in batch] for i in range(0, len(batches), group)]
    progress(
        f"workload: {len(deltas)} deltas, {sizes.rows} rows, {len(batches)} messages of {sizes.batch}, "
        f"{len(applies)} consumer batches of up to {group} messages"
    )
    writes = row_writes(applies)
    n_writes = sum(len(u) + len(d) for u, d in writes)
    final = (
        [
            _project(s.values(), r)
            for r, s in ((r, fold(d for d in deltas if d.row_id == r)) for r in sorted({d.row_id for d in deltas}))
            if s is not None and s.exists
        ]
        if quick
        else None
    )
    ours_s: list[float] = []
    per_message_s: list[float] = []
    raw_upsert_s: list[float] = []
    raw_copy_s: list[float] = []
    copy_final_s: list[float] = []
    insert_final_s: list[float] = []
    stats_total: dict[str, int] = {}
    with running_postgres() as server:
        url = server.url("bench")
        conn = psycopg.connect(url, autocommit=True)
        # No background vacuum: one side's leftover work must not land in another side's timing.
        conn.execute("ALTER SYSTEM SET autovacuum = off")
        conn.execute("SELECT pg_reload_conf()")

        def settle() -> None:
            conn.execute("CHECKPOINT")

        for rep in range(sizes.repetitions):
            table = f"m_{rep}"
            dest = connect(url, name="bench")
            schema = schema_for(table)
            dest.apply(schema, [])  # create the table (once per process in real use)
            totals = {"upserted": 0, "deleted": 0, "unchanged": 0, "nulled": 0, "attempts": 0}
            settle()
            t0 = time.perf_counter()
            for deltas_of_batch in applies:
                s = dest.apply(schema, deltas_of_batch)
                for k in totals:
                    totals[k] += getattr(s, k)
            ours_s.append(time.perf_counter() - t0)
            stats_total = totals
            assert totals["upserted"] + totals["deleted"] == n_writes, (totals, n_writes)
            materialised = dest.rows(schema)
            dest.close()
            progress(f"rep {rep + 1}: ours {ours_s[-1]:.2f}s ({totals}); {len(materialised)} live rows")

            # The same messages one apply each (a consumer that gets one message per invocation).
            single = connect(url, name="bench")
            single_schema = schema_for(f"m1_{rep}")
            single.apply(single_schema, [])
            settle()
            t0 = time.perf_counter()
            for batch in batches:
                single.apply(single_schema, batch)
            per_message_s.append(time.perf_counter() - t0)
            assert single.rows(single_schema) == materialised
            single.close()
            progress(f"rep {rep + 1}: ours, one message per apply {per_message_s[-1]:.2f}s")

            raw = f"raw_{rep}"
            conn.execute(
                f"CREATE TABLE {raw} (row_id TEXT PRIMARY KEY, title TEXT, amount DOUBLE PRECISION, done BOOLEAN, "
                "meta JSONB, props JSONB NOT NULL DEFAULT '{}', deleted_at TIMESTAMPTZ, "
                "synced_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
            upsert = (
                f"INSERT INTO {raw} (row_id, title, amount, done, meta) VALUES (%s, %s, %s, %s, %s::jsonb) "
                "ON CONFLICT (row_id) DO UPDATE SET title = EXCLUDED.title, amount = EXCLUDED.amount, "
                "done = EXCLUDED.done, meta = EXCLUDED.meta, deleted_at = NULL, synced_at = now()"
            )
            settle()
            t0 = time.perf_counter()
            for upserts, deletes in writes:
                with conn.transaction(), conn.cursor() as cur:
                    cur.executemany(upsert, upserts)
                    if deletes:
                        cur.execute(
                            f"UPDATE {raw} SET deleted_at = now() WHERE row_id = ANY(%s) AND deleted_at IS NULL",
                            (deletes,),
                        )
            raw_upsert_s.append(time.perf_counter() - t0)

            plain = f"plain_{rep}"
            conn.execute(
                f"CREATE TABLE {plain} (row_id TEXT, title TEXT, amount DOUBLE PRECISION, done BOOLEAN, meta JSONB)"
            )
            settle()
            t0 = time.perf_counter()
            for upserts, deletes in writes:
                with conn.transaction(), conn.cursor() as cur:
                    with cur.copy(f"COPY {plain} (row_id, title, amount, done, meta) FROM STDIN") as copy:
                        for row in upserts:
                            copy.write_row(row)
                        for rid in deletes:
                            copy.write_row((rid, None, None, None, None))
            raw_copy_s.append(time.perf_counter() - t0)

            final_rows = [
                (rid, v["title"], v["amount"], v["done"], json.dumps(v["meta"]) if v["meta"] is not None else None)
                for rid, v in sorted(materialised.items())
            ]
            if final is not None:
                assert [r[0] for r in final] == [r[0] for r in final_rows]
            final_table = f"final_{rep}"
            conn.execute(
                f"CREATE TABLE {final_table} "
                "(row_id TEXT, title TEXT, amount DOUBLE PRECISION, done BOOLEAN, meta JSONB)"
            )
            settle()
            t0 = time.perf_counter()
            with conn.transaction(), conn.cursor() as cur:
                with cur.copy(f"COPY {final_table} (row_id, title, amount, done, meta) FROM STDIN") as copy:
                    for row in final_rows:
                        copy.write_row(row)
            copy_final_s.append(time.perf_counter() - t0)
            final_pk = f"final_pk_{rep}"
            conn.execute(
                f"CREATE TABLE {final_pk} (row_id TEXT PRIMARY KEY, title TEXT, amount DOUBLE PRECISION, done BOOLEAN, "
                "meta JSONB, props JSONB NOT NULL DEFAULT '{}', synced_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
            settle()
            t0 = time.perf_counter()
            for i in range(0, len(final_rows), sizes.batch):
                with conn.transaction(), conn.cursor() as cur:
                    cur.executemany(
                        f"INSERT INTO {final_pk} (row_id, title, amount, done, meta) "
                        "VALUES (%s, %s, %s, %s, %s::jsonb)",
                        final_rows[i : i + sizes.batch],
                    )
            insert_final_s.append(time.perf_counter() - t0)
            raw_count = conn.execute(f"SELECT count(*) FROM {raw} WHERE deleted_at IS NULL").fetchone()
            assert raw_count is not None and raw_count[0] == len(materialised)
            progress(
                f"rep {rep + 1}: raw upsert {raw_upsert_s[-1]:.2f}s, raw COPY {raw_copy_s[-1]:.2f}s, "
                f"COPY final {copy_final_s[-1]:.3f}s, executemany final {insert_final_s[-1]:.3f}s"
            )
        conn.close()

    best = {k: min(v) for k, v in (("ours", ours_s), ("raw_upsert", raw_upsert_s), ("raw_copy", raw_copy_s))}
    final_count = len(materialised)
    results: dict[str, Any] = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "sizes": {
            "rows": sizes.rows,
            "deltas": sizes.deltas,
            "batch": sizes.batch,
            "messages_per_apply": sizes.messages_per_apply,
            "repetitions": sizes.repetitions,
        },
        "row_writes": n_writes,
        "final_rows": final_count,
        "apply_totals": stats_total,
        "seconds": {
            "ours": [round(x, 3) for x in ours_s],
            "ours_one_message_per_apply": [round(x, 3) for x in per_message_s],
            "raw_upsert": [round(x, 3) for x in raw_upsert_s],
            "raw_copy": [round(x, 3) for x in raw_copy_s],
            "copy_final_rows": [round(x, 4) for x in copy_final_s],
            "executemany_final_rows": [round(x, 4) for x in insert_final_s],
        },
        "rates": {
            "ours_deltas_per_s": round(sizes.deltas / best["ours"]),
            "ours_row_writes_per_s": round(n_writes / best["ours"]),
            "ours_one_message_per_apply_deltas_per_s": round(sizes.deltas / min(per_message_s)),
            "raw_upsert_row_writes_per_s": round(n_writes / best["raw_upsert"]),
            "raw_copy_row_writes_per_s": round(n_writes / best["raw_copy"]),
            "copy_final_rows_per_s": round(final_count / min(copy_final_s)),
            "executemany_final_rows_per_s": round(final_count / min(insert_final_s)),
        },
        "ratios": {
            # The brief's goal: rows/s through apply (each delta is one input row) vs rows/s of a raw executemany of
            # the final rows into a plain table.
            "ours_deltas_vs_executemany_final_rows": round(
                (sizes.deltas / best["ours"]) / (final_count / min(insert_final_s)), 3
            ),
            "ours_one_message_per_apply_vs_executemany_final_rows": round(
                (sizes.deltas / min(per_message_s)) / (final_count / min(insert_final_s)), 3
            ),
            "ours_deltas_vs_copy_final_rows": round(
                (sizes.deltas / best["ours"]) / (final_count / min(copy_final_s)), 3
            ),
            # Stricter: the same row writes, with and without merge, state and coercion.
            "ours_vs_raw_upsert_same_writes": round(best["raw_upsert"] / best["ours"], 3),
            "ours_vs_raw_copy_same_writes": round(best["raw_copy"] / best["ours"], 3),
        },
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": _cpus(),
            "load_average_start": load_start,
            "load_average_end": report.load_average(),
        },
        "method": __doc__,
    }
    goal = results["ratios"]["ours_deltas_vs_executemany_final_rows"]
    results["goal"] = {"ours_deltas_vs_executemany_final_rows_at_least": 0.5, "met": goal >= 0.5}
    if out is not None:
        json_path, md_path = report.write(results, out, stem="materialise", render=_markdown, ensure_ascii=True)
        png_path = plot(results, out / "materialise.png")
        progress(f"wrote {json_path}, {md_path} and {png_path}")
    return results


def _cpus() -> int | None:
    import os

    return os.cpu_count()


def _markdown(r: dict[str, Any]) -> str:
    rates, ratios, sec = r["rates"], r["ratios"], r["seconds"]
    lines = [
        "# Materialise benchmark (PostgreSQL)",
        "",
        f"{r['timestamp']}{' (quick)' if r['quick'] else ''}: "
        f"{r['sizes']['deltas']} deltas on {r['sizes']['rows']} rows, "
        f"messages of {r['sizes']['batch']} applied {r['sizes']['messages_per_apply']} at a time (the consumer's "
        f"batch), best of {r['sizes']['repetitions']}; {r['row_writes']} row writes, "
        f"{r['final_rows']} live rows at the end.",
        "",
        "| side | seconds (runs) | rate |",
        "|---|---|---|",
        f"| ours: `apply` per consumer batch | {', '.join(map(str, sec['ours']))} | "
        f"{rates['ours_deltas_per_s']:,} deltas/s ({rates['ours_row_writes_per_s']:,} row writes/s) |",
        f"| ours: `apply` per message | {', '.join(map(str, sec['ours_one_message_per_apply']))} | "
        f"{rates['ours_one_message_per_apply_deltas_per_s']:,} deltas/s |",
        f"| executemany INSERT of the final rows | {', '.join(map(str, sec['executemany_final_rows']))} | "
        f"{rates['executemany_final_rows_per_s']:,} rows/s |",
        f"| COPY of the final rows | {', '.join(map(str, sec['copy_final_rows']))} | "
        f"{rates['copy_final_rows_per_s']:,} rows/s |",
        f"| raw upsert of the same row writes (executemany, ON CONFLICT) | {', '.join(map(str, sec['raw_upsert']))} | "
        f"{rates['raw_upsert_row_writes_per_s']:,} row writes/s |",
        f"| raw COPY of the same row writes (no keys) | {', '.join(map(str, sec['raw_copy']))} | "
        f"{rates['raw_copy_row_writes_per_s']:,} row writes/s |",
        "",
        f"**Goal: ours (deltas/s) / executemany of the final rows (rows/s) = "
        f"{ratios['ours_deltas_vs_executemany_final_rows']}x** (≥ 0.5x: {'met' if r['goal']['met'] else 'missed'}); "
        f"vs COPY of the final rows {ratios['ours_deltas_vs_copy_final_rows']}x. One message per apply (a consumer "
        f"invoked with single messages): {ratios['ours_one_message_per_apply_vs_executemany_final_rows']}x.",
        "",
        f"Stricter, the same row writes with and without merge/state/coercion: ours / raw upsert = "
        f"{ratios['ours_vs_raw_upsert_same_writes']}x, ours / raw COPY = {ratios['ours_vs_raw_copy_same_writes']}x.",
        "",
        "![Each run's rate, ours against the raw writes, with the goal](materialise.png)",
        "",
        f"`apply` totals: {r['apply_totals']}. Machine: {r['machine']['cpus']} CPUs, load average "
        f"{r['machine']['load_average_start']} → {r['machine']['load_average_end']} (a shared machine: other work "
        "running at the same time slows both sides; compare ratios of runs close in time).",
        "",
        "## Method",
        "",
        r["method"],
    ]
    return "\n".join(lines) + "\n"


def plot(r: Mapping[str, Any], path: Path) -> Path:
    """``materialise.png``: each run's rate, ours (deltas/s) against the raw writes (rows/s), with the goal line."""
    sec, deltas, final, writes = r["seconds"], r["sizes"]["deltas"], r["final_rows"], r["row_writes"]
    sides = {
        "ours, per\nconsumer batch": (sec["ours"], deltas),
        "ours, per\nmessage": (sec["ours_one_message_per_apply"], deltas),
        "executemany\nfinal rows": (sec["executemany_final_rows"], final),
        "COPY\nfinal rows": (sec["copy_final_rows"], final),
        "raw upsert,\nsame writes": (sec["raw_upsert"], writes),
        "raw COPY,\nsame writes": (sec["raw_copy"], writes),
    }
    fig, (ax,) = plots.figure(width=9, height=4.4)
    plots.spread(
        ax,
        {label: [n / s for s in runs] for label, (runs, n) in sides.items()},
        colours=[plots.OURS, plots.OURS, *[plots.FLOOR] * 4],
    )
    at_least = r["goal"]["ours_deltas_vs_executemany_final_rows_at_least"]
    plots.goal_line(ax, at_least * r["rates"]["executemany_final_rows_per_s"], f"goal: ≥ {at_least:g}× executemany")
    plots.plain_log(ax)
    ax.set_ylabel("per second, log scale: deltas (ours), rows (raw)")
    ax.tick_params(axis="x", labelsize="small")
    ax.legend(loc="upper left", fontsize="small")
    return plots.save(
        fig,
        path,
        title=f"Materialise {deltas:,} deltas into PostgreSQL ({final:,} rows at the end), {r['timestamp'][:10]}",
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.materialise", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny workload (smoke check), results not written")
    parser.add_argument("--out", type=Path, help="results directory (default benchmarks/results)")
    args = parser.parse_args(argv)
    out = args.out if args.out else (None if args.quick else RESULTS)
    results = run(QUICK if args.quick else FULL, out, quick=args.quick)
    print(
        f"materialise: {results['rates']['ours_deltas_per_s']:,} deltas/s through apply = "
        f"{results['ratios']['ours_deltas_vs_executemany_final_rows']}x executemany of the final rows (goal 0.5x); "
        f"same row writes: {results['ratios']['ours_vs_raw_upsert_same_writes']}x raw upsert"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
