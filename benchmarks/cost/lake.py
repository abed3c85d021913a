"""The lake workload: the Glue job scripts on local Spark (or the flush function) against the same moto, the
materialise function on the queue, and idle runs of each job."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks._common import ROOT, progress
from benchmarks.cost.environment import CHECKPOINT_BUCKET, CLAIM_CHECK_BUCKET, CostEnv, environ, expect_ok
from benchmarks.cost.prices import REGION
from benchmarks.cost.workloads import PUSH_GATEWAY, TABLE, WRITER, make_deltas, push_event

LAKE_PUSH_BATCH = 500
"""Deltas per push when the lake workload fills the buffer (not measured)."""
JOBS = ("flush", "compact", "checkpoint")
"""The lake's jobs, each run as its Glue script (the flush also as the flush function)."""


class Lake:
    """The local Spark session on one lake (sqlite catalog, file warehouse) and the Glue job scripts; the flush is
    the flush function (``functions.flush`` on the same catalog, invoked as Lambda would) when ``flush_engine`` is
    ``function``, as the stack deploys it by default."""

    def __init__(self, env: CostEnv, work: Path, code_root: Path, flush_engine: str = "function") -> None:
        self.env = env
        self.flush_engine = flush_engine
        self.catalog = work / "lake" / "catalog.db"
        self.warehouse = work / "lake" / "warehouse"
        self.code_root = code_root
        self.spark: Any = None
        self.start_seconds = 0.0
        self._modules: dict[str, ModuleType] = {}

    def start(self, cost_dir: Path) -> None:
        """Start Spark with the meter in its Python workers (``spark.python.daemon.module``)."""
        from lakesync.spark.session import build_session

        self.catalog.parent.mkdir(parents=True, exist_ok=True)
        os.environ["LAKESYNC_COST_DIR"] = str(cost_dir)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        path = os.environ.get("PYTHONPATH", "")
        if str(ROOT) not in path.split(os.pathsep):
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [path, str(ROOT)]))
        started = time.perf_counter()
        self.spark = build_session(
            app_name="lakesync-cost",
            warehouse=str(self.warehouse),
            catalog_name="lake",
            catalog="local",
            catalog_uri=str(self.catalog),
            master="local[2]",
            extra_conf={"spark.python.daemon.module": "benchmarks.cost.daemon"},
            log_level="ERROR",
        )
        self.spark.sql("SELECT 1").collect()
        self.start_seconds = time.perf_counter() - started

    def stop(self) -> None:
        if self.spark is not None:
            self.spark.stop()
            self.spark = None

    def _module(self, kind: str) -> ModuleType:
        if kind not in self._modules:
            path = self.code_root / "glue_jobs" / f"{kind}.py"
            spec = importlib.util.spec_from_file_location(f"cost_glue_{kind}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            self._modules[kind] = module
        return self._modules[kind]

    def run(self, kind: str, names: Any, gateway: str, **extra: str) -> tuple[float, list[Any]]:
        """Run ``glue_jobs/<kind>.py``'s ``main`` as Glue would (or the flush function); returns (seconds, the JSON
        lines it printed: for the function, its report as the Glue script prints it)."""
        if kind == "flush" and self.flush_engine == "function":
            return self._flush_function(gateway, **extra)
        prefix = names.deltas.rsplit("-", 1)[0]
        dynamo = {"table_prefix": prefix, "gateways": gateway, "region": REGION, "dynamodb_endpoint": self.env.endpoint}
        options: dict[str, str] = {
            "flush": {
                **dynamo,
                "s3_endpoint": self.env.endpoint,
                "checkpoint_bucket": CHECKPOINT_BUCKET,
                "claim_check_bucket": CLAIM_CHECK_BUCKET,
                "materialise_queue_url": self.env.queue_url,
            },
            "compact": {**dynamo, "maintain": "true"},
            "checkpoint": {"bucket": CHECKPOINT_BUCKET, "gateways": gateway},
        }[kind]
        options = {"catalog": "local", "catalog_uri": str(self.catalog), "warehouse": str(self.warehouse), **options}
        options.update(extra)
        argv = [part for key, value in options.items() for part in (f"--{key}", value)]
        module = self._module(kind)
        sink = io.StringIO()
        lookups = self.env.meter.lookup_seconds
        start = time.perf_counter()
        with contextlib.redirect_stdout(sink):
            code = module.main(argv)
        seconds = time.perf_counter() - start - (self.env.meter.lookup_seconds - lookups)
        if code != 0:
            raise RuntimeError(f"glue job {kind} exited with {code}: {sink.getvalue()[:500]}")
        lines = [json.loads(line) for line in sink.getvalue().splitlines() if line.startswith("{")]
        return seconds, lines

    def _flush_function(self, gateway: str, retention_ms: str | None = None) -> tuple[float, list[Any]]:
        import functions.flush as flush_module

        variables = {
            "LAKESYNC_GATEWAY_IDS": gateway,
            "LAKESYNC_LAKE_CATALOG": "local",
            "LAKESYNC_LAKE_CATALOG_URI": str(self.catalog),
            "LAKESYNC_LAKE_WAREHOUSE": str(self.warehouse),
            "LAKESYNC_CHECKPOINT_BUCKET": CHECKPOINT_BUCKET,
            "LAKESYNC_CLAIM_CHECK_BUCKET": CLAIM_CHECK_BUCKET,
            "LAKESYNC_MATERIALISE_QUEUE_URL": self.env.queue_url,
        }
        if retention_ms is not None:
            variables["LAKESYNC_FLUSH_RETENTION_MS"] = retention_ms
        with environ(variables, ()):
            flush_module.get_flush.cache_clear()
            lookups = self.env.meter.lookup_seconds
            start = time.perf_counter()
            report = self.env.invoke(flush_module, {}, api=False)
            seconds = time.perf_counter() - start - (self.env.meter.lookup_seconds - lookups)
            flush_module.get_flush.cache_clear()
        return seconds, [{"flush": report}]


def materialise_queue(env: CostEnv, batch_size: int) -> int:
    """Deliver the queue's jobs to the materialise function as Lambda's SQS event source does: receive a batch,
    invoke, delete what succeeded. Returns the jobs applied."""
    import boto3

    import functions.materialise as materialise_module
    from lakesync.local.materialiser import sqs_event

    sqs = boto3.client("sqs")  # counted: on AWS these are the event source mapping's requests
    applied = 0
    while True:
        out = sqs.receive_message(
            QueueUrl=env.queue_url,
            MaxNumberOfMessages=batch_size,
            WaitTimeSeconds=0,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages: list[dict[str, Any]] = list(out.get("Messages", []))  # type: ignore[arg-type]
        if not messages:
            return applied
        result = env.invoke(materialise_module, sqs_event(messages, env.queue_arn, REGION), api=False)
        failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
        if failed:
            raise RuntimeError(f"materialise failed for {len(failed)} job(s)")
        sqs.delete_message_batch(
            QueueUrl=env.queue_url,
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)],
        )
        applied += len(messages)


LAKE_STEPS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("flush", "flush", ()),
    ("materialise", "", ()),
    ("compact", "compact", ()),
    ("checkpoint", "checkpoint", ()),
    ("release", "flush", (("retention_ms", "0"),)),
)
"""One round of the lake: (step, Glue job or "" for the materialise function, extra job options)."""
IDLE_STEPS = (("flush-idle", "flush"), ("compact-idle", "compact"), ("checkpoint-idle", "checkpoint"))


def _push_lake(env: CostEnv, gateway: str, row_bytes: int, deltas: int, prefix: str) -> None:
    import functions.push as push_module

    writer = env.token(WRITER, gateway)
    for start in range(0, deltas, LAKE_PUSH_BATCH):
        chunk = make_deltas(min(LAKE_PUSH_BATCH, deltas - start), row_bytes=row_bytes, prefix=f"{prefix}-{start}")
        expect_ok(env.invoke(push_module, push_event(gateway, writer, chunk)), "lake push")


def _lake_round(
    env: CostEnv, lake: Lake, names: Any, gateway: str, tag: str | None, batch_size: int
) -> tuple[dict[str, float], dict[str, Any]]:
    """Flush, materialise, compact, checkpoint and release once; measured into ``{tag}:{step}`` unless ``tag`` is
    None (a warm-up)."""
    seconds: dict[str, float] = {}
    reports: dict[str, Any] = {}
    for step, kind, extra in LAKE_STEPS:
        scope = env.measuring("count", f"{tag}:{step}") if tag else contextlib.nullcontext()
        with scope:
            if kind:
                seconds[step], reports[step] = lake.run(kind, names, gateway, **dict(extra))
            else:
                started = time.perf_counter()
                reports[step] = [{"jobs": materialise_queue(env, batch_size)}]
                seconds[step] = time.perf_counter() - started
    return seconds, reports


def _backpressure_bytes() -> int:
    """Unflushed bytes per shard at which pushes are refused (the gateway's default settings)."""
    from lakesync.gateway.deps import GatewaySettings

    return int(GatewaySettings().backpressure_limit)


def lake_warm_up(env: CostEnv, lake: Lake, batch_size: int) -> None:
    """One unmeasured round on its own gateway and tables: the delta log and state tables exist, Spark's Python
    workers and the materialise function are loaded."""
    gateway = "cwarm"
    env.gateways(PUSH_GATEWAY, gateway)
    names = env.new_tables()
    env.configure(names, gateway, destination=env.work / "materialised-warm.db")
    _push_lake(env, gateway, 250, 100, "warm")
    _lake_round(env, lake, names, gateway, None, batch_size)
    env.drop_tables(names)


def lake_workload(
    env: CostEnv, lake: Lake, *, row_bytes: int, rounds: Sequence[int], batch_size: int
) -> dict[str, Any]:
    """Rounds of the lake on ``rounds[i]`` new deltas each (pushed, not measured), then idle runs of each job."""
    gateway = f"c{row_bytes}"
    env.gateways(PUSH_GATEWAY, gateway)
    names = env.new_tables()
    destination = env.work / f"materialised-{row_bytes}.db"
    env.configure(names, gateway, destination=destination)
    tag = f"lake-r{row_bytes}"
    measured: list[dict[str, Any]] = []
    pushed = 0
    # A round stays under the buffer's backpressure limit (pushes beyond it are refused until a flush).
    cap = int(0.8 * _backpressure_bytes() / (row_bytes + 100))
    for i, deltas in enumerate(min(n, cap) for n in rounds):
        _push_lake(env, gateway, row_bytes, deltas, f"lake{row_bytes}-{i}")
        pushed += deltas
        workers = env.meter.worker_lines
        seconds, reports = _lake_round(env, lake, names, gateway, f"{tag}:{i}", batch_size)
        flushed = reports["flush"][0]["flush"]["deltas"]
        released = reports["release"][0]["flush"]["released"]
        spark_flush = lake.flush_engine == "glue"
        if flushed != deltas or (spark_flush and env.meter.worker_lines == workers):
            raise RuntimeError(
                f"lake round {i}: flushed {flushed} of {deltas}; "
                f"{env.meter.worker_lines - workers} calls counted in Spark's workers"
            )
        jobs = reports["materialise"][0]["jobs"]
        measured.append({"deltas": deltas, "seconds": seconds, "jobs": jobs, "released_items": released})
        progress(
            f"cost: lake {row_bytes} B rows, round of {deltas} deltas: "
            + ", ".join(f"{step} {t:.1f} s" for step, t in seconds.items())
        )
    idle: dict[str, float] = {}
    for step, kind in IDLE_STEPS:
        with env.measuring("count", f"{tag}:{step}"):
            idle[step], _ = lake.run(kind, names, gateway)
    progress(f"cost: lake {row_bytes} B rows, idle runs: " + ", ".join(f"{s} {t:.1f} s" for s, t in idle.items()))
    rows = _materialised_rows(destination)
    left = sum(1 for _ in _scan(env, names.deltas))
    if rows != pushed:
        raise RuntimeError(f"lake check: {rows} rows materialised, {pushed} pushed")
    env.drop_tables(names)
    return {
        "tag": tag,
        "gateway": gateway,
        "flush_engine": lake.flush_engine,
        "rounds": measured,
        "idle_seconds": idle,
        "log_items_left": left,
    }


def _scan(env: CostEnv, table: str) -> Iterator[Any]:
    for page in env.raw("dynamodb").get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        yield from page.get("Items", [])


def _materialised_rows(path: Path) -> int:
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as db:
        (count,) = db.execute(f"SELECT COUNT(*) FROM {TABLE} WHERE deleted_at IS NULL").fetchone()
    return int(count)
