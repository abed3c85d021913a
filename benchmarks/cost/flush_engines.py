"""The flush's two engines on both sides of the lake tick's switch (``make bench-cost``; docs/deployment.md, "Which
engine flushes").

The lake tick gives a flush run to the flush function while the backlog (unflushed entries, read from the shard
heads) is at most ``flushFunctionMaxBacklog``, and to the Glue flush job above it
(:func:`lakesync.core.lake_work.choose_flush_engine`). This benchmark measures what that default rests on and prices
both sides:

1. **The function's throughput.** Buffers of ``--deltas`` entries (rows of 250 and 2,048 bytes of client JSON,
   spread over ``--shards`` shards) are pushed through the push service into DynamoDB on a moto server in its own
   process, then flushed by :class:`lakesync.aws.flush_function.FlushFunction` as one invocation runs it -- pyiceberg
   on the local sqlite catalog and a file warehouse, publishing configured (moto S3 and SQS) but no destination
   registered, so the publish step only looks for destinations -- timed end to end, after a first (cold) invocation
   on a few entries that imports, opens the catalog and creates the table. The run appends at most
   ``LAKESYNC_FLUSH_MAX_DELTAS`` (200,000) entries per pass and repeats while it has time, so its seconds grow
   linearly with the backlog: the rate measured on ``--deltas`` holds for the limit it sets.
   ``deltas / seconds`` is the rate; the default backlog is what the function flushes at the slower row size's rate
   in half its timeout less the cold start (a 50 % margin for a slower network and larger rows), rounded down to a
   thousand.
2. **The price of a run on each side.** A function run: its measured seconds (scaled to the backlog), billed in
   GB-seconds at its memory on x86_64, plus the request. A Glue run: billed per second with a 1-minute minimum at
   the job's DPUs (2 G.1X workers) and the Flex price the stack deploys; its seconds come from the Glue flush job's
   measured rate on local Spark (``benchmarks/results/lake.json``, the flush job end to end), not from a run here:
   a Spark session on this 2-CPU machine would take longer than the point needs, and the 1-minute minimum dominates
   below the threshold anyway.

Lambda's and Glue's list prices and the billing rules are :mod:`benchmarks.cost.prices` and
:mod:`benchmarks.cost.model`: AWS Glue pricing (https://aws.amazon.com/glue/pricing/) bills Spark jobs of Glue 2.0 and
later -- the stack's are Glue 5.1 -- per second with a 1-minute minimum, at $0.44 a DPU-hour ($0.29 on Flex); AWS
Lambda pricing (https://aws.amazon.com/lambda/pricing/) bills by the millisecond at the memory configured, plus the
request.
Run ``python -m benchmarks.cost.flush_engines``; results in ``benchmarks/results/cost-flush-engines.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks._common import ROOT
from benchmarks._moto import MotoProcess
from benchmarks.cost.model import glue_dpu_hours, glue_dpus, lambda_gb_seconds
from benchmarks.cost.prices import price
from benchmarks.report import RESULTS, table, write

REGION = "us-east-1"
GATEWAY = "bench"
PUSH_BATCH = 500
WARM_UP = 200
"""Entries the first (cold) invocation flushes before the measured one."""
MARGIN = 0.5
"""Share of the function's timeout the default backlog may take at the measured rate."""
GLUE_WORKERS = ("G.1X", 2)
"""The stack's Glue jobs: ``glueWorkerType`` and ``glueWorkers`` defaults."""
GLUE_FLUSH_DELTAS_PER_S_FALLBACK = 1393.0
"""The Glue flush job's rate on local Spark when ``results/lake.json`` is missing (its run of 2026-11-21)."""


def _function_limits() -> tuple[int, int]:
    """The flush function's timeout (s) and memory (MB), as the stack deploys them."""
    if str(ROOT / "infra") not in sys.path:
        sys.path.insert(0, str(ROOT / "infra"))
    from lakesync_infra.function_access import FLUSH_MEMORY_MB, FLUSH_TIMEOUT_S

    return FLUSH_TIMEOUT_S, FLUSH_MEMORY_MB


def _deltas(count: int, row_bytes: int, prefix: str, tables: Sequence[str]) -> dict[str, list[Any]]:
    from lakesync.core.delta import make_delta
    from lakesync.core.hlc import encode

    now_ms = int(time.time() * 1000)
    out: dict[str, list[Any]] = {t: [] for t in tables}
    for i in range(count):
        table = tables[i % len(tables)]
        columns: dict[str, Any] = {"title": f"task {i}", "done": i % 3 == 0, "priority": i % 5}
        columns["body"] = "x" * max(0, row_bytes - 120)
        hlc = encode(now_ms + i // 65536, i % 65536)
        out[table].append(
            make_delta("INSERT", table=table, row_id=f"{prefix}-{i:07d}", client_id="w", hlc=hlc, columns=columns)
        )
    return out


def measure_function(endpoint: str, work: Path, *, deltas: int, row_bytes: int, shards: int) -> dict[str, Any]:
    """Push ``deltas`` entries over ``shards`` shards, flush them with one flush function invocation; timings."""
    import boto3

    from lakesync.aws.action_store import DynamoDBActionStore
    from lakesync.aws.buffer.store import DynamoDBBufferStore
    from lakesync.aws.config_store import DynamoDBConfigStore
    from lakesync.aws.flush_function import FlushFunction
    from lakesync.aws.settings.lake import FlushFunctionSettings
    from lakesync.aws.table_setup import create_tables
    from lakesync.aws.tables import TableNames
    from lakesync.core.hlc import HLC
    from lakesync.core.messages import SyncPush
    from lakesync.gateway.deps import GatewayDeps, GatewaySettings
    from lakesync.gateway.push import push

    prefix = f"fl{uuid.uuid4().hex[:8]}"
    names = TableNames.with_prefix(prefix)
    client = boto3.client("dynamodb", endpoint_url=endpoint, region_name=REGION)
    create_tables(client, names)
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION)
    bucket = f"{prefix}-claims"
    s3.create_bucket(Bucket=bucket)
    queue = boto3.client("sqs", endpoint_url=endpoint, region_name=REGION).create_queue(QueueName=prefix)["QueueUrl"]
    deps = GatewayDeps(
        buffer=DynamoDBBufferStore(client, names),
        config=DynamoDBConfigStore(client, names),
        actions=DynamoDBActionStore(client, names),
        # the benchmark's buffer may exceed the default backpressure limit: it measures the flush, not the pushes
        settings=GatewaySettings(gateway_ids=frozenset({GATEWAY}), backpressure_bytes=1 << 40),
        clock=HLC(),
    )
    tables = [f"t{i}" for i in range(shards)]
    for batch in _deltas(WARM_UP, row_bytes, prefix, tables).values():
        push(deps, GATEWAY, SyncPush("w", tuple(batch)), client_id="w")
    lake = work / prefix
    settings = FlushFunctionSettings(
        gateway_ids=(GATEWAY,),
        tables=names,
        warehouse=str(lake / "warehouse"),
        catalog="local",
        catalog_uri=str(lake / "catalog.db"),
        claim_check_bucket=bucket,
        materialise_queue_url=queue,
        region=REGION,
    )
    lake.mkdir(parents=True)
    function = FlushFunction(settings)
    # A cold start's first run: imports, the catalog, the delta-log table created; WARM_UP entries flushed.
    started = time.perf_counter()
    function.flush(None, lambda: 900_000)
    cold_s = time.perf_counter() - started
    for batch in _deltas(deltas, row_bytes, prefix + "b", tables).values():
        for i in range(0, len(batch), PUSH_BATCH):
            push(deps, GATEWAY, SyncPush("w", tuple(batch[i : i + PUSH_BATCH])), client_id="w")
    started = time.perf_counter()
    report = function.flush(None, lambda: 900_000)
    seconds = time.perf_counter() - started
    if report["deltas"] != deltas:
        raise RuntimeError(f"flushed {report['deltas']} of {deltas} deltas")
    return {
        "deltas": deltas,
        "row_bytes": row_bytes,
        "shards": shards,
        "cold_seconds": round(cold_s, 2),
        "flush_seconds": round(seconds, 2),
        "deltas_per_s": round(deltas / seconds, 1),
        "published_jobs": report["published_jobs"],
        "steps_ms": report["durations_ms"],
    }


def glue_rate() -> tuple[float, str]:
    """The Glue flush job's deltas per second on local Spark, and where the figure comes from."""
    path = RESULTS / "lake.json"
    try:
        doc = json.loads(path.read_text())
        return float(doc["flush"]["deltas_per_s_total"]), f"{path.relative_to(ROOT)}, the flush job end to end"
    except (OSError, KeyError, TypeError, ValueError):
        return GLUE_FLUSH_DELTAS_PER_S_FALLBACK, "benchmarks/results/lake.md, section 2 (1,393 deltas/s)"


def price_function_run(backlog: int, deltas_per_s: float, memory_mb: int) -> dict[str, float]:
    """One flush function run of ``backlog`` entries at ``deltas_per_s``: seconds and dollars."""
    seconds = backlog / deltas_per_s
    usd = lambda_gb_seconds(seconds, memory_mb) * price("lambda.gb_s.x86_64") + price("lambda.request")
    return {"seconds": round(seconds, 2), "usd": usd}


def price_glue_run(backlog: int, deltas_per_s: float, *, flex: bool = True) -> dict[str, float]:
    """One Glue flush run of ``backlog`` entries at ``deltas_per_s`` (billed per second, at least a minute)."""
    seconds = backlog / deltas_per_s
    dpus = glue_dpus(*GLUE_WORKERS)
    hours = glue_dpu_hours(seconds, dpus)
    return {"seconds": round(seconds, 2), "dpu_hours": hours, "usd": hours * price(_glue_key(flex))}


def _glue_key(flex: bool) -> str:
    return "glue.dpu_hour.flex" if flex else "glue.dpu_hour"


def default_backlog(deltas_per_s: float, timeout_s: int, cold_s: float = 0.0) -> int:
    """The largest backlog the function flushes in ``MARGIN`` of its timeout at ``deltas_per_s`` after a cold
    start of ``cold_s`` seconds, rounded down to the thousand."""
    return int(deltas_per_s * max(0.0, timeout_s * MARGIN - cold_s)) // 1000 * 1000


def sides(threshold: int, function_rate: float, glue_deltas_per_s: float, memory_mb: int) -> list[dict[str, Any]]:
    """Both engines priced at backlogs below and above ``threshold``; ``engine`` is the one the tick chooses."""
    from lakesync.core.lake_work import choose_flush_engine

    out = []
    for backlog in sorted({1_000, threshold // 10, threshold, threshold * 2, threshold * 10}):
        function = price_function_run(backlog, function_rate, memory_mb)
        glue = price_glue_run(backlog, glue_deltas_per_s)
        chosen = choose_flush_engine(backlog, max_backlog=threshold)
        out.append({"backlog": backlog, "engine": chosen, "function": function, "glue": glue})
    return out


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(deltas: int, shards: int) -> dict[str, Any]:
    """Measure the function at two row sizes and price both sides of the switch."""
    from lakesync.core.lake_work import DEFAULT_FUNCTION_MAX_BACKLOG

    timeout_s, memory_mb = _function_limits()
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        os.environ.setdefault(key, value)
    load = os.getloadavg()
    measured = []
    with tempfile.TemporaryDirectory(prefix="lakesync-flush-") as tmp:
        moto = MotoProcess(fast_transactions=True, fast_json=True).start()
        os.environ["AWS_ENDPOINT_URL"] = moto.endpoint_url  # the function's clients, as the handlers' tests do
        try:
            for row_bytes in (250, 2048):
                measured.append(
                    measure_function(moto.endpoint_url, Path(tmp), deltas=deltas, row_bytes=row_bytes, shards=shards)
                )
        finally:
            moto.stop()
    slowest = min(m["deltas_per_s"] for m in measured)
    cold_s = max(m["cold_seconds"] for m in measured)
    glue_deltas_per_s, glue_source = glue_rate()
    return {
        "run_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_average": load},
        "function": {"timeout_s": timeout_s, "memory_mb": memory_mb, "runs": measured},
        "slowest_deltas_per_s": slowest,
        "margin": MARGIN,
        "cold_seconds": cold_s,
        "measured_default": default_backlog(slowest, timeout_s, cold_s),
        "deployed_default": DEFAULT_FUNCTION_MAX_BACKLOG,
        "glue": {"deltas_per_s": glue_deltas_per_s, "source": glue_source, "workers": list(GLUE_WORKERS)},
        "sides": sides(DEFAULT_FUNCTION_MAX_BACKLOG, slowest, glue_deltas_per_s, memory_mb),
    }


def reprice(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A measured run priced again at the current default and prices (its measurements and their date kept)."""
    from lakesync.core.lake_work import DEFAULT_FUNCTION_MAX_BACKLOG

    rate, memory = doc["slowest_deltas_per_s"], doc["function"]["memory_mb"]
    return {
        **doc,
        "deployed_default": DEFAULT_FUNCTION_MAX_BACKLOG,
        "sides": sides(DEFAULT_FUNCTION_MAX_BACKLOG, rate, doc["glue"]["deltas_per_s"], memory),
    }


def _usd(value: float) -> str:
    return f"{value:.5f}" if value < 0.01 else f"{value:.4f}"


def _side_row(side: Mapping[str, Any]) -> tuple[object, ...]:
    f, g = side["function"], side["glue"]
    return (
        f"{side['backlog']:,}",
        side["engine"],
        f["seconds"],
        _usd(f["usd"]),
        g["seconds"],
        f"{g['dpu_hours']:.4f}",
        _usd(g["usd"]),
    )


def render(doc: Mapping[str, Any]) -> str:
    """The results as Markdown."""
    fn = doc["function"]
    lines = [
        "# The flush engines on both sides of the lake tick's switch",
        "",
        f"Run {doc['run_at']}, commit `{doc['commit']}`, {doc['machine']['cpus']} CPUs (load average"
        f" {', '.join(f'{x:.2f}' for x in doc['machine']['load_average'])} at the start). Method:"
        " `benchmarks/cost/flush_engines.py` (its docstring).",
        "",
        "## The flush function's throughput (pyiceberg, one warm invocation, moto server in its own process)",
        "",
        *table(
            ("rows", "deltas", "shards", "flush s", "deltas/s"),
            [
                (
                    f"{m['row_bytes']} B",
                    f"{m['deltas']:,}",
                    m["shards"],
                    m["flush_seconds"],
                    f"{m['deltas_per_s']:,.0f}",
                )
                for m in fn["runs"]
            ],
            align="lrrrr",
        ),
        "",
        f"The slowest rate, {doc['slowest_deltas_per_s']:,.0f} deltas/s, over {int(doc['margin'] * 100)} % of the"
        f" function's {fn['timeout_s']} s timeout: **{doc['measured_default']:,} deltas**"
        f" (the deployed default `flushFunctionMaxBacklog`: {doc['deployed_default']:,}).",
        "",
        "## One run on each side (us-east-1 list prices)",
        "",
        f"Function: {fn['memory_mb']} MB on x86_64, billed per millisecond. Glue: {doc['glue']['workers'][1]}"
        f" {doc['glue']['workers'][0]} workers on Flex, billed per second with a 1-minute minimum, at"
        f" {doc['glue']['deltas_per_s']:,.0f} deltas/s (local Spark; {doc['glue']['source']}): computed from that"
        " measured rate, not run here.",
        "",
        *table(
            ("backlog (deltas)", "the tick chooses", "function s", "function $", "Glue s", "Glue DPU-hours", "Glue $"),
            [_side_row(side) for side in doc["sides"]],
            align="rlrrrrr",
        ),
        "",
        "Below the threshold the function is cheaper by one to three orders of magnitude (Glue's minute of two"
        " DPUs is the floor). Above it the function would not finish with margin inside its 15 minutes (a run the"
        " timeout stops leaves the rest to the next tick), while the Glue job's workers read and write in parallel"
        " and its run has no such limit: the switch is about finishing, not price.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Measure, price, write ``benchmarks/results/cost-flush-engines.{json,md}``."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cost.flush_engines", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--deltas", type=int, default=40_000, help="entries per measured flush (default 40,000)")
    parser.add_argument("--shards", type=int, default=4, help="shards they are spread over (default 4)")
    parser.add_argument("--out", type=Path, default=RESULTS / "cost-flush-engines")
    parser.add_argument(
        "--reprice", type=Path, help="price a measured run's JSON again at the current default (no measurement)"
    )
    args = parser.parse_args(argv)
    doc = reprice(json.loads(args.reprice.read_text())) if args.reprice else run(args.deltas, args.shards)
    stem = args.out.with_suffix("")
    write(doc, stem.parent, stem=stem.name, render=render, ensure_ascii=True)
    print(render(doc))
    if not math.isclose(doc["measured_default"], doc["deployed_default"], rel_tol=0.5):
        print(
            f"note: the measured default ({doc['measured_default']:,}) is not within 50 % of the deployed one"
            f" ({doc['deployed_default']:,})"
        )


if __name__ == "__main__":
    main()
