"""``python -m benchmarks.cost``: what a workload costs on AWS, counted from the requests the code really issues.

Writes ``benchmarks/results/cost.json`` and ``cost.md`` (``--out`` elsewhere; ``--quick`` writes to a temporary
directory unless ``--out`` is given). The method, in short (docs/cost.md has the long form):

* **Counting.** :class:`benchmarks.cost_meter.Meter` hooks every boto3 client the code makes and prices each call in
  its service's units (DynamoDB WRU/RRU from item sizes, including index copies; SQS 64 KB chunks; S3 request tiers);
  items a write replaces and items a filtered or projected read evaluates are read on a separate, uncounted client.
  moto's own capacity figures are not used.
* **Lambda and API Gateway.** The handlers are called as functions (``lambda_handler(event, context)``) on a moto
  server in its own process, as :mod:`benchmarks.push` does. Durations come from a second pass of the same
  workload with the meter off (the meter's lookups would otherwise be timed); GB-seconds use each function's memory
  and architecture from the synthesized stack. These durations are this machine's, standing in for Lambda's.
* **Workloads.** For rows of 250 B and 2 KB (the JSON of one INSERT delta as the client sends it) and pushes of 1,
  10 and 100 deltas: a JWT-authenticated JSON push, then each of 10 clients pulls with its cursor (each delta is
  pulled by 1 client -- the first -- and by all 10). Per row size, a lake workload pushes more deltas and runs the real
  Glue job scripts (``glue_jobs/*.py``) on local Spark against the same moto: flush (which publishes claim-check jobs
  to S3 and SQS), the materialise function on those messages (polled as Lambda's event source would), compaction
  with maintenance, a checkpoint, a flush that releases the log, and idle runs of each job.
* **The API's authorizer.** API Gateway runs ``functions.authorizer`` before every sync route and caches its answer
  per token for 300 s, so how often it runs depends on how often a client calls within that time, which a compressed
  workload cannot show. Every API call here runs the real authorizer (timed like the handlers) and is charged
  :data:`AUTHORIZER_MISS_RATIO` of an invocation: the assumption of a client calling ten times a token and cache
  period (a pull every 30 s). The per-caller rate limits' counters (one conditional ``UpdateItem`` per slice of a
  client's allowance, :mod:`lakesync.gateway.limits`) are issued by the handlers, so the meter counts them.
* **Idle month.** From the synthesized CloudFormation template: schedules and the Glue runs they start (idle runs
  measured, billed at least a minute), SQS long polls of the event source mappings, alarms, dashboards; KMS keys and
  the secret apart.

Options: ``--quick`` (tiny workloads, no Spark, no synth: a smoke run), ``--no-spark``, ``--no-synth``,
``--template FILE`` (a synthesized template instead of synthesizing), ``--out DIR``, ``--label TEXT``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import gzip
import importlib.util
import io
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks._common import ROOT, machine_info, progress
from benchmarks._moto import MotoProcess
from benchmarks.cost_meter import Meter
from benchmarks.cost_model import http_api_requests, lambda_gb_seconds
from benchmarks.cost_plot import load_baseline, plot
from benchmarks.cost_report import (
    SERVICES,
    Invocations,
    Usage,
    add,
    add_invocations,
    capacity_units,
    comparisons,
    fit_line,
    functions_of,
    glue_per_million,
    idle_month,
    merge_dollars,
    price_invocations,
    price_usage,
    scale_invocations,
    subtract,
    usage_key,
)
from benchmarks.prices import CHECKED, REGION, price, table_rows

RESULTS = ROOT / "benchmarks" / "results"
TABLE = "todos"
PUSH_GATEWAY = "default"
WRITER = "writer"
CLAIM_CHECK_BUCKET = "cost-claim-check"
CHECKPOINT_BUCKET = "cost-checkpoints"
QUEUE = "cost-materialise"
LAKE_PUSH_BATCH = 500
AUTHORIZER = "authorizer"
AUTHORIZER_MISS_RATIO = 0.1
"""Authorizer invocations per API request (an assumption: API Gateway caches an answer per token for 300 s, and a
syncing client calls about ten times in that time; a client calling once every 5 minutes or less misses every
time)."""
RUN_SIZES = (1_000, 10_000, 100_000, 1_000_000)
PRICE_STORAGE = price("dynamodb.storage") + price("dynamodb.pitr")
"""Dollars per GB-month a DynamoDB item costs kept (storage and point-in-time recovery, as the stack enables)."""
HEADLINE_RUN = 10_000
"""Deltas one flush run carries in the headline figures (at a 15-minute schedule: ~29 million deltas a month)."""
SCHEMA_COLUMNS = (("title", "string"), ("done", "boolean"), ("priority", "number"), ("body", "string"))


@dataclass(frozen=True, slots=True)
class Sizes:
    """Workload sizes of one run."""

    row_sizes: tuple[int, ...]
    batches: tuple[int, ...]
    push_deltas: Mapping[int, int]
    readers: int
    lake_rounds: tuple[int, ...]


FULL = Sizes(
    row_sizes=(250, 2048),
    batches=(1, 10, 100),
    push_deltas={1: 150, 10: 300, 100: 1000},
    readers=10,
    lake_rounds=(500, 2000, 5000),
)
QUICK = Sizes(
    row_sizes=(250, 2048),
    batches=(1, 10, 100),
    push_deltas={1: 6, 10: 20, 100: 100},
    readers=10,
    lake_rounds=(100, 300),
)


# -- deltas and events ------------------------------------------------------------------------------------------------
def make_deltas(count: int, *, row_bytes: int, prefix: str, client_id: str = WRITER) -> list[Any]:
    """``count`` INSERTs of distinct rows whose client JSON is ``row_bytes`` long (a padded ``body`` column)."""
    from lakesync.core.delta import make_delta
    from lakesync.core.hlc import encode

    now_ms = int(time.time() * 1000)
    out = []
    for i in range(count):
        row_id = f"{prefix}-{i:06d}"
        hlc = encode(now_ms + i // 65536, i % 65536)
        columns: dict[str, Any] = {"title": f"task {i}", "done": i % 3 == 0, "priority": i % 5, "body": ""}
        base = len(
            _wire(make_delta("INSERT", table=TABLE, row_id=row_id, client_id=client_id, hlc=hlc, columns=columns))
        )
        columns["body"] = "x" * max(0, row_bytes - base)
        out.append(make_delta("INSERT", table=TABLE, row_id=row_id, client_id=client_id, hlc=hlc, columns=columns))
    return out


def _wire(delta: Any) -> str:
    return json.dumps(delta.to_json(), separators=(",", ":"))


GZIP = "gzip, deflate"
"""The ``Accept-Encoding`` the clients send (browsers' ``fetch``, the Python SDK, requests): answers over a kilobyte
come back gzipped."""


def push_event(gateway: str, token: str, deltas: Sequence[Any]) -> dict[str, Any]:
    """``POST /v1/sync/{gw}/push`` with a JSON body, as the client sends it."""
    from lakesync.local.events import http_event

    body = json.dumps(
        {"clientId": WRITER, "deltas": [d.to_json() for d in deltas], "lastSeenHlc": "0"}, separators=(",", ":")
    )
    return http_event(
        "POST",
        f"/v1/sync/{gateway}/push",
        headers={"authorization": f"Bearer {token}", "content-type": "application/json", "accept-encoding": GZIP},
        body=body,
        route_key="POST /v1/sync/{gw}/push",
    )


def pull_event(gateway: str, token: str, client_id: str, cursor: str) -> dict[str, Any]:
    """``GET /v1/sync/{gw}/pull?clientId=..&limit=1000&cursor=..`` (the client's default page)."""
    from lakesync.local.events import http_event

    return http_event(
        "GET",
        f"/v1/sync/{gateway}/pull",
        query={"clientId": client_id, "limit": "1000", "cursor": cursor},
        headers={"authorization": f"Bearer {token}", "accept": "application/json", "accept-encoding": GZIP},
        route_key="GET /v1/sync/{gw}/pull",
    )


# -- the environment --------------------------------------------------------------------------------------------------
@dataclass
class Recorded:
    """Invocations of one phase of one pass, per function."""

    by_function: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, function: str, **figures: float) -> None:
        self.add_share(function, 1.0, **figures)

    def add_share(self, function: str, share: float, **figures: float) -> None:
        """``share`` of one invocation with these figures (an invocation that happens that often)."""
        into = self.by_function.setdefault(function, {})
        into["count"] = into.get("count", 0.0) + share
        for key, value in figures.items():
            into[key] = into.get(key, 0.0) + share * value


class CostEnv:
    """moto in its own process, the handlers' environment, the buckets and queue, the meter, and what was invoked."""

    def __init__(self, meter: Meter, work: Path, functions: Mapping[str, Mapping[str, Any]]) -> None:
        self.meter = meter
        self.work = work
        self.functions = functions
        self.moto = MotoProcess(fast_transactions=True, fast_json=True)
        self.secret = secrets.token_urlsafe(32)
        self.queue_url = ""
        self.queue_arn = ""
        self.recorded: dict[tuple[str, str], Recorded] = {}
        self.phase: tuple[str, str] | None = None
        self.emf_metrics: set[str] = set()
        self._saved: dict[str, str | None] = {}
        self._sink = io.StringIO()
        self._context: Any = None

    @property
    def endpoint(self) -> str:
        return self.moto.endpoint_url

    def raw(self, service: str) -> Any:
        """An uncounted client (the meter's)."""
        return self.meter.raw(service, self.endpoint, REGION)

    def __enter__(self) -> CostEnv:
        self.moto.start()
        env = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
            "LAKESYNC_JWT_SECRET": self.secret,
            "LAKESYNC_GATEWAY_IDS": PUSH_GATEWAY,
            "LAKESYNC_CLAIM_CHECK_BUCKET": CLAIM_CHECK_BUCKET,
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_SERVICE_NAME": "lakesync",
            "POWERTOOLS_METRICS_NAMESPACE": "LakeSync",
            # The deployed default (infra config logLevel): what the functions log is CloudWatch Logs ingestion.
            "POWERTOOLS_LOG_LEVEL": "INFO",
        }
        for key, value in env.items():
            self._saved.setdefault(key, os.environ.get(key))
            os.environ[key] = value
        from lakesync.local.front import LambdaContext

        self._context = LambdaContext(
            function_name="lakesync-cost",
            aws_request_id=str(uuid.uuid4()),
            invoked_function_arn=f"arn:aws:lambda:{REGION}:123456789012:function:lakesync-cost",
        )
        s3 = self.raw("s3")
        for bucket in (CLAIM_CHECK_BUCKET, CHECKPOINT_BUCKET):
            s3.create_bucket(Bucket=bucket)
        sqs = self.raw("sqs")
        self.queue_url = sqs.create_queue(QueueName=QUEUE, Attributes={"VisibilityTimeout": "720"})["QueueUrl"]
        self.queue_arn = sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(ImportError):
            from functions._runtime import reset_runtime

            reset_runtime()
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self.moto.stop()

    def gateways(self, *ids: str) -> None:
        """Serve these gateways (``LAKESYNC_GATEWAY_IDS``)."""
        os.environ["LAKESYNC_GATEWAY_IDS"] = ",".join(ids)
        from functions._runtime import reset_runtime

        reset_runtime()

    def new_tables(self) -> Any:
        """Fresh tables under a unique prefix, registered with the meter, used by the handlers from now on."""
        from functions._runtime import reset_runtime
        from lakesync.aws.dynamodb import create_tables
        from lakesync.aws.tables import TableNames

        prefix = f"cost{uuid.uuid4().hex[:10]}"
        names = TableNames.with_prefix(prefix)
        create_tables(self.raw("dynamodb"), names)
        self.meter.register_tables(names.as_dict())
        self._saved.setdefault("LAKESYNC_TABLE_PREFIX", os.environ.get("LAKESYNC_TABLE_PREFIX"))
        os.environ["LAKESYNC_TABLE_PREFIX"] = prefix
        reset_runtime()
        return names

    def drop_tables(self, names: Any) -> None:
        for name in names.as_dict().values():
            with contextlib.suppress(Exception):
                self.raw("dynamodb").delete_table(TableName=name)

    def configure(self, names: Any, gateway: str, *, destination: Path | None = None) -> None:
        """The table schema (and a SQLite destination) of ``gateway``, written uncounted."""
        from lakesync.aws.dynamodb import DynamoDBConfigStore
        from lakesync.core.destinations import parse_destination
        from lakesync.core.schema import parse_table_schema

        store = DynamoDBConfigStore(self.raw("dynamodb"), names)
        schema = parse_table_schema({"table": TABLE, "columns": [{"name": n, "type": t} for n, t in SCHEMA_COLUMNS]})
        store.put_schema(gateway, schema, 1, 0)
        if destination is not None:
            doc = {"name": "bench", "type": "sqlite", "url": f"sqlite:///{destination}"}
            store.add_destination(gateway, parse_destination(doc))

    def token(self, client_id: str, gateway: str) -> str:
        from lakesync.auth import mint_token

        return mint_token(client_id, gateway, self.secret, ttl_s=24 * 3600)

    @contextlib.contextmanager
    def measuring(self, mode: str, phase: str) -> Iterator[None]:
        """Inside the block: invocations are recorded under ``(mode, phase)``; when ``mode`` is ``count`` the meter
        counts AWS requests into ``phase`` too."""
        previous, self.phase = self.phase, (mode, phase)
        try:
            if mode == "count":
                with self.meter.measuring(phase):
                    yield
            else:
                yield
        finally:
            self.phase = previous

    def invoke(self, module: ModuleType, event: dict[str, Any], *, api: bool = True) -> dict[str, Any]:
        """Call ``module.lambda_handler`` as Lambda would, timing it and measuring what it prints (its logs)."""
        function = module.__name__.rsplit(".", 1)[-1]
        lookups = self.meter.lookup_seconds
        self._sink.seek(0)
        self._sink.truncate()
        with contextlib.redirect_stdout(self._sink), _logs_into(self._sink):
            start = time.perf_counter()
            result: dict[str, Any] = module.lambda_handler(event, self._context)
            seconds = time.perf_counter() - start
        printed = self._sink.getvalue()
        self._note_emf(printed)
        seconds = max(0.0, seconds - (self.meter.lookup_seconds - lookups))
        if self.phase is not None:
            memory = int(self.functions.get(function, {}).get("memory_mb", 1024))
            figures = {
                "seconds": seconds,
                "gb_s": lambda_gb_seconds(seconds, memory),
                "log_bytes": float(len(printed.encode("utf-8"))),
            }
            if api:
                request = len(str(event.get("body") or "").encode("utf-8"))
                response = len(_wire_bytes(result))
                figures.update(
                    api_requests=float(http_api_requests(request, response)),
                    request_bytes=float(request),
                    response_bytes=float(response),
                )
            recorded = self.recorded.setdefault(self.phase, Recorded())
            recorded.add(function, **figures)
            if api:
                recorded.add_share(AUTHORIZER, AUTHORIZER_MISS_RATIO, **self._authorize(event))
        return result

    def _authorize(self, event: Mapping[str, Any]) -> dict[str, float]:
        """Run the API's authorizer on ``event``'s token as API Gateway would on a cache miss: its figures."""
        import functions.authorizer as authorizer

        headers = event.get("headers") or {}
        call = {**event, "type": "REQUEST", "identitySource": [headers.get("authorization", "")]}
        lookups = self.meter.lookup_seconds
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            answer = authorizer.lambda_handler(call, self._context)
        seconds = max(0.0, time.perf_counter() - start - (self.meter.lookup_seconds - lookups))
        if answer != {"isAuthorized": True}:
            raise RuntimeError(f"the authorizer refused a workload token: {answer}")
        memory = int(self.functions.get(AUTHORIZER, {}).get("memory_mb", 512))
        return {
            "seconds": seconds,
            "gb_s": lambda_gb_seconds(seconds, memory),
            "log_bytes": float(len(printed.getvalue().encode("utf-8"))),
        }

    def _note_emf(self, printed: str) -> None:
        for line in printed.splitlines():
            if '"_aws"' not in line:
                continue
            with contextlib.suppress(ValueError, KeyError, TypeError):
                doc = json.loads(line)
                for directive in doc["_aws"]["CloudWatchMetrics"]:
                    for dims in directive.get("Dimensions", [[]]):
                        values = ",".join(f"{d}={doc.get(d)}" for d in dims)
                        for metric in directive["Metrics"]:
                            self.emf_metrics.add(f"{directive['Namespace']}/{metric['Name']}[{values}]")

    def invocations(self, mode: str, phase: str) -> Invocations:
        recorded = self.recorded.get((mode, phase))
        return {k: dict(v) for k, v in recorded.by_function.items()} if recorded else {}


@contextlib.contextmanager
def _logs_into(sink: io.StringIO) -> Iterator[None]:
    """Point the functions' log handlers (Powertools' logger ``lakesync``, which holds the stdout it was made with) at
    ``sink`` while inside the block: what a function logs is what Lambda sends to CloudWatch Logs."""
    import logging

    handlers = [h for h in logging.getLogger("lakesync").handlers if isinstance(h, logging.StreamHandler)]
    previous = [h.setStream(sink) for h in handlers]
    try:
        yield
    finally:
        for handler, stream in zip(handlers, previous, strict=True):
            if stream is not None:
                handler.setStream(stream)


def usage_of(meter: Meter, phase: str) -> Usage:
    """The meter's figures of a phase as :data:`Usage` (resources by logical name)."""
    return {usage_key(*key): value for key, value in meter.snapshot(phase).items()}


# -- push and pull ----------------------------------------------------------------------------------------------------
def push_pull(env: CostEnv, mode: str, *, row_bytes: int, batch: int, deltas: int, readers: int) -> dict[str, Any]:
    """One push/pull workload (see the module docstring) in ``mode`` (``count`` or ``time``)."""
    import functions.pull as pull_module
    import functions.push as push_module

    tag = f"b{batch}-r{row_bytes}"
    names = env.new_tables()
    env.configure(names, PUSH_GATEWAY)
    writer = env.token(WRITER, PUSH_GATEWAY)
    clients = [f"reader-{i}" for i in range(readers)]
    tokens = {c: env.token(c, PUSH_GATEWAY) for c in clients}
    cursors = {}
    # Warm-up, not measured: the shard exists, the handlers are loaded, every reader is at the head.
    warm = env.invoke(push_module, push_event(PUSH_GATEWAY, writer, make_deltas(1, row_bytes=row_bytes, prefix="warm")))
    _ok(warm, "warm-up push")
    for client in clients:
        doc = _ok(env.invoke(pull_module, pull_event(PUSH_GATEWAY, tokens[client], client, "")), "warm-up pull")
        cursors[client] = doc.get("cursor", "")
    pulled = 0
    for start in range(0, deltas, batch):
        chunk = make_deltas(min(batch, deltas - start), row_bytes=row_bytes, prefix=f"{mode}-{tag}-{start}")
        with env.measuring(mode, f"{tag}:push"):
            _ok(env.invoke(push_module, push_event(PUSH_GATEWAY, writer, chunk)), "push")
        for i, client in enumerate(clients):
            with env.measuring(mode, f"{tag}:pull{i}"):
                doc = _ok(
                    env.invoke(pull_module, pull_event(PUSH_GATEWAY, tokens[client], client, cursors[client])), "pull"
                )
            got = len(doc.get("deltas", []))
            if got != len(chunk) or doc.get("hasMore"):
                raise RuntimeError(
                    f"{client} pulled {got} deltas (hasMore={doc.get('hasMore')}), expected {len(chunk)}"
                )
            cursors[client] = doc.get("cursor", cursors[client])
            pulled += got
    stored = _stored_bytes(env, names) if mode == "count" else {}
    env.drop_tables(names)
    return {"tag": tag, "pulled": pulled, "stored_bytes": stored}


def _ok(result: Mapping[str, Any], what: str) -> dict[str, Any]:
    if result.get("statusCode") != 200:
        raise RuntimeError(f"{what} failed: {result.get('statusCode')} {str(result.get('body', ''))[:300]}")
    doc: dict[str, Any] = json.loads(_sent_bytes(result) or b"{}")
    return doc


def _sent_bytes(result: Mapping[str, Any]) -> bytes:
    """The body an invocation's answer puts on the wire (base64 decoded), as the client reads it (un-gzipped)."""
    sent = _wire_bytes(result)
    return gzip.decompress(sent) if (result.get("headers") or {}).get("Content-Encoding") == "gzip" else sent


def _wire_bytes(result: Mapping[str, Any]) -> bytes:
    text = str(result.get("body") or "")
    return base64.b64decode(text) if result.get("isBase64Encoded") else text.encode("utf-8")


def _stored_bytes(env: CostEnv, names: Any) -> dict[str, dict[str, float]]:
    """Items and bytes stored per table (item sizes plus DynamoDB's 100 bytes of overhead per item), uncounted."""
    from benchmarks.cost_model import item_size

    db = env.raw("dynamodb")
    out = {}
    for logical, table in names.as_dict().items():
        items = 0
        size = 0
        for page in db.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
            for item in page.get("Items", []):
                items += 1
                size += item_size(item) + 100
        out[logical] = {"items": float(items), "bytes": float(size)}
    return out


# -- the lake ---------------------------------------------------------------------------------------------------------
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
            extra_conf={"spark.python.daemon.module": "benchmarks._cost_daemon"},
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
        with _environment(variables, ()):
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
        _ok(env.invoke(push_module, push_event(gateway, writer, chunk)), "lake push")


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


# -- scheduled functions on an idle stack -----------------------------------------------------------------------------
@contextlib.contextmanager
def _environment(variables: Mapping[str, str], drop: Sequence[str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in [*variables, *drop]}
    for key in drop:
        os.environ.pop(key, None)
    os.environ.update(variables)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _clear_caches(module: ModuleType) -> None:
    """Forget what a handler module built on its first invocation (its ``functools`` caches)."""
    from functions._runtime import reset_runtime

    reset_runtime()
    for value in vars(module).values():
        clear = getattr(value, "cache_clear", None)
        if callable(clear):
            clear()


def measure_scheduled(env: CostEnv, template: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Invoke each function a schedule targets, with the schedule's input, on an idle stack (fresh tables, nothing
    pushed): once to warm it, once counted, once timed. Its environment is the template's, with each ``Ref`` to a
    table, bucket, queue or Glue job resolved to this run's (tables by the logical name in their id)."""
    from benchmarks.cost_report import schedules_of

    resources: Mapping[str, Any] = template.get("Resources", {})
    names = env.new_tables()
    env.configure(names, PUSH_GATEWAY)
    glue = env.raw("glue")
    job_names: dict[str, str] = {}
    for logical, resource in resources.items():
        if resource.get("Type") == "AWS::Glue::Job":
            from benchmarks.cost_report import job_kind

            name = f"cost-{job_kind(resource.get('Properties', {}))}-{uuid.uuid4().hex[:6]}"
            glue.create_job(Name=name, Role="arn:aws:iam::123456789012:role/glue", Command={"Name": "glueetl"})
            job_names[logical] = name

    def resolve(value: Any) -> str | None:
        if isinstance(value, str):
            return value
        ref = value.get("Ref") if isinstance(value, Mapping) else None
        target = resources.get(str(ref), {})
        kind = target.get("Type")
        if kind == "AWS::DynamoDB::Table":
            lowered = str(ref).lower()
            return next((t for k, t in names.as_dict().items() if k in lowered), None)
        if kind == "AWS::S3::Bucket":
            return CHECKPOINT_BUCKET if "checkpoint" in str(ref).lower() else CLAIM_CHECK_BUCKET
        if kind == "AWS::SQS::Queue":
            return env.queue_url
        if kind == "AWS::Glue::Job":
            return job_names.get(str(ref))
        if kind == "AWS::Lambda::Function":  # the flush function the tick would queue (an idle tick queues none)
            return f"cost-{ref}"[:64]
        return None

    out: dict[str, dict[str, Any]] = {}
    for entry in schedules_of(template):
        if "function" not in entry:
            continue
        function = next(
            r
            for r in resources.values()
            if r.get("Type") == "AWS::Lambda::Function"
            and str(r.get("Properties", {}).get("Handler", "")).startswith(f"functions.{entry['function']}.")
        )
        raw_vars = function.get("Properties", {}).get("Environment", {}).get("Variables", {})
        variables = {k: v for k, v in ((k, resolve(v)) for k, v in raw_vars.items()) if v is not None}
        module = importlib.import_module(f"functions.{entry['function']}")
        event = json.loads(entry.get("input") or "{}")
        phase = f"idle:{entry['schedule']}"
        with _environment(variables, drop=["LAKESYNC_TABLE_PREFIX"]):
            _clear_caches(module)
            try:
                env.invoke(module, event, api=False)
                with env.measuring("count", phase):
                    result = env.invoke(module, event, api=False)
                with env.measuring("time", phase):
                    env.invoke(module, event, api=False)
            finally:
                _clear_caches(module)
        usage = usage_of(env.meter, phase)
        starts = sum(v for k, v in usage.items() if k.startswith("glue|") and "|StartJobRun|" in k)
        queued = sum(v for k, v in usage.items() if k.startswith("lambda|") and "|Invoke|" in k)
        if queued:
            raise RuntimeError(f"an idle {entry['function']} tick queued {queued:g} flush function run(s)")
        invocations = _merge_passes(env, phase).get(entry["function"], {})
        out[entry["schedule"]] = {
            "function": entry["function"],
            "input": event,
            "result": result,
            "invocations": invocations,
            "usage": usage,
            "glue_starts": starts,
        }
        progress(
            f"cost: idle {entry['function']} {event}: {1000 * invocations.get('seconds', 0.0):.0f} ms, "
            f"{sum(price_usage(usage).values()) * 1e6:.2f} $ per million invocations in requests, "
            f"{starts:g} Glue run(s) started"
        )
    env.drop_tables(names)
    return out


# -- the stack's template ---------------------------------------------------------------------------------------------
def synthesize(code_root: Path, out: Path) -> dict[str, dict[str, Any]]:
    """Synthesize the CDK app's ``prod`` (the defaults) and ``dev`` stacks offline; returns their templates."""
    env = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20", "CDK_DISABLE_CLI_TELEMETRY": "true"}
    env.pop("CDK_OUTDIR", None)
    if "UV" not in env and (ROOT / ".tools" / "bin" / "uv").exists():
        env["UV"] = str(ROOT / ".tools" / "bin" / "uv")  # the asset builds use the repository's uv
    command = [sys.executable, "infra/app.py", "--outdir", str(out), "-c", "lakesync:environments=prod,dev"]
    done = subprocess.run(command, cwd=code_root, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"synth failed: {done.stderr[-2000:]}")
    return {name: json.loads((out / f"LakeSync-{name}.template.json").read_text()) for name in ("prod", "dev")}


def fallback_functions() -> dict[str, dict[str, Any]]:
    """Memory and architecture of each function from the infra code when no template is synthesized."""
    sys.path.insert(0, str(_code_root() / "infra"))
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    from lakesync_infra.common import LAMBDA_ARCHITECTURE, MATERIALISE_ARCHITECTURE
    from lakesync_infra.config import ALL_FUNCTIONS, LakeSyncConfig
    from lakesync_infra.functions import ACCESS, _memory

    config = LakeSyncConfig(name="prod")
    out = {}
    for name in ALL_FUNCTIONS:
        arch = MATERIALISE_ARCHITECTURE if name in ("materialise", "flush") else LAMBDA_ARCHITECTURE
        out[name] = {
            "memory_mb": _memory(config, name, ACCESS[name]),
            "architecture": arch.name,
            "traced": config.tracing,
        }
    return out


def _code_root() -> Path:
    import functions

    return Path(functions.__file__).resolve().parent.parent


# -- composing the figures --------------------------------------------------------------------------------------------
def _merge_passes(env: CostEnv, phase: str) -> Invocations:
    """Counts and bytes from the counting pass, seconds and GB-seconds from the timing pass."""
    counted = env.invocations("count", phase)
    timed = env.invocations("time", phase)
    out: Invocations = {}
    for function, figures in counted.items():
        merged = dict(figures)
        if function in timed:
            if timed[function].get("count") != figures.get("count"):
                raise RuntimeError(f"{phase}: the timing pass invoked {function} a different number of times")
            merged["seconds"] = timed[function]["seconds"]
            merged["gb_s"] = timed[function]["gb_s"]
        out[function] = merged
    return out


def _line(dollars: Mapping[str, float]) -> dict[str, float]:
    return {s: round(dollars.get(s, 0.0), 6) for s in SERVICES} | {"total": round(sum(dollars.values()), 6)}


JOBS = ("flush", "compact", "checkpoint")


def lake_figures(
    env: CostEnv,
    lake: Mapping[str, Any],
    functions: Mapping[str, Any],
    dpus: Mapping[str, float],
    ratios: Mapping[str, float],
    glue_prices: Mapping[str, str],
) -> dict[str, Any]:
    """Per-delta and per-run figures of one lake workload, and its cost per million deltas at several run sizes.

    Per delta: what the loaded runs did beyond an idle run of the same job (the release is a flush run), divided by
    the deltas; per run: an idle run's requests. Seconds per run: a line fitted through the loaded runs (a flush
    run's work is its own time plus the release run's time beyond an idle flush). A Glue job's run is billed in
    DPU-seconds (at least a minute); the flush function's in GB-seconds at its memory, plus its request and its log
    lines (the idle invocation's).
    """
    meter = env.meter
    tag = lake["tag"]
    rounds = lake["rounds"]
    idle_s = lake["idle_seconds"]
    by_function = lake.get("flush_engine") == "function"
    glue_jobs = tuple(job for job in JOBS if not (by_function and job == "flush"))
    total = sum(r["deltas"] for r in rounds)
    idle_usage = {job: usage_of(meter, f"{tag}:{job}-idle") for job in JOBS}
    base = {"flush": "flush", "release": "flush", "compact": "compact", "checkpoint": "checkpoint"}
    by_step: dict[str, Usage] = {}
    invocations: Invocations = {}
    for i in range(len(rounds)):
        for step, _kind, _extra in LAKE_STEPS:
            usage = usage_of(meter, f"{tag}:{i}:{step}")
            if step in base:
                usage = subtract(usage, idle_usage[base[step]])
            by_step[step] = add(by_step.get(step, {}), usage)
        invocations = add_invocations(invocations, env.invocations("count", f"{tag}:{i}:materialise"))
    variable = add(*by_step.values(), scale=1 / total)
    materialise = scale_invocations(invocations, 1 / total)
    per_delta_usd = merge_dollars(price_usage(variable), price_invocations(materialise, functions))
    fixed_usd = {job: sum(price_usage(idle_usage[job]).values()) for job in JOBS}
    points = {
        "flush": [
            (r["deltas"], r["seconds"]["flush"] + r["seconds"]["release"] - idle_s["flush-idle"]) for r in rounds
        ],
        "compact": [(r["deltas"], r["seconds"]["compact"]) for r in rounds],
        "checkpoint": [(r["deltas"], r["seconds"]["checkpoint"]) for r in rounds],
    }
    lines = {job: fit_line(points[job], floor=idle_s[f"{job}-idle"]) for job in JOBS}
    idle_flush = env.invocations("count", f"{tag}:flush-idle").get("flush", {})
    by_size = {}
    for run_deltas in RUN_SIZES:
        glue = {
            job: glue_per_million(*lines[job], run_deltas * ratios[job], dpus[job], glue_prices[job])
            for job in glue_jobs
        }
        runs = {job: 1e6 / (run_deltas * ratios[job]) for job in JOBS}
        fixed = sum(fixed_usd[job] * runs[job] for job in JOBS)
        glue_usd = sum(g["usd"] for g in glue.values())
        function: dict[str, float] = {}
        if by_function:
            run_seconds = lines["flush"][0] + lines["flush"][1] * run_deltas
            memory = int(functions.get("flush", {}).get("memory_mb", 2048))
            per_run = {
                "count": 1.0,
                "gb_s": lambda_gb_seconds(run_seconds, memory),
                "log_bytes": float(idle_flush.get("log_bytes", 0.0)) / max(1.0, float(idle_flush.get("count", 1.0))),
            }
            usd = merge_dollars(price_invocations({"flush": per_run}, functions), scale=runs["flush"])
            function = {"runs": runs["flush"], "run_seconds": run_seconds, "usd": sum(usd.values())} | {
                f"usd_{k}": v for k, v in usd.items() if v
            }
        by_size[str(run_deltas)] = {
            "glue": glue,
            "flush_runs": runs["flush"],
            "glue_usd": glue_usd,
            "flush_function": function,
            "flush_function_usd": function.get("usd", 0.0),
            "per_run_requests_usd": fixed,
            "total_usd": sum(per_delta_usd.values()) * 1e6 + fixed + glue_usd + function.get("usd", 0.0),
        }
    units: dict[str, dict[str, float]] = {}
    for step, usage in by_step.items():
        units.update(capacity_units(usage, step, total))
    return {
        "deltas": total,
        "usage_per_delta": variable,
        "usd_per_million_variable": _line({k: v * 1e6 for k, v in per_delta_usd.items()}),
        "usd_per_idle_run_requests": fixed_usd,
        "materialise_invocations_per_delta": materialise,
        "glue_seconds_model": {job: {"intercept_s": a, "s_per_delta": b} for job, (a, b) in lines.items()},
        "glue_points": points,
        "by_run_size": by_size,
        "capacity_units_per_delta": units,
        "idle_usage": idle_usage,
    }


def workload_figures(
    env: CostEnv,
    run: Mapping[str, Any],
    *,
    deltas: int,
    batch: int,
    readers: int,
    lake: Mapping[str, Any] | None,
    functions: Mapping[str, Any],
) -> dict[str, Any]:
    """Cost per million deltas and capacity units per delta of one push/pull workload with ``readers`` readers."""
    tag = run["tag"]
    meter = env.meter
    push_usage = usage_of(meter, f"{tag}:push")
    push_inv = _merge_passes(env, f"{tag}:push")
    pull_usage = add(*(usage_of(meter, f"{tag}:pull{i}") for i in range(readers)))
    pull_inv = add_invocations(*(_merge_passes(env, f"{tag}:pull{i}") for i in range(readers)))
    per_delta = 1 / deltas
    sync = merge_dollars(
        price_usage(push_usage),
        price_usage(pull_usage),
        price_invocations(add_invocations(push_inv, pull_inv), functions),
        scale=per_delta * 1e6,
    )
    units = capacity_units(push_usage, "push", deltas)
    units.update(capacity_units(pull_usage, "pull", deltas))
    lake_line: dict[str, float] = {}
    if lake is not None:
        units.update(lake["capacity_units_per_delta"])
        headline = lake["by_run_size"][str(HEADLINE_RUN)]
        lake_line = dict(lake["usd_per_million_variable"])
        lake_line.pop("total", None)
        lake_line["Glue"] = lake_line.get("Glue", 0.0) + headline["glue_usd"]
        for service, usd in headline.get("flush_function", {}).items():
            if service.startswith("usd_"):
                lake_line[service[4:]] = lake_line.get(service[4:], 0.0) + usd
        lake_line["DynamoDB"] = lake_line.get("DynamoDB", 0.0) + headline["per_run_requests_usd"]
    total = merge_dollars(sync, lake_line)
    invocations = add_invocations(push_inv, pull_inv)
    return {
        "workload": {"batch": batch, "readers": readers, "deltas": deltas},
        "usd_per_million": _line(total),
        "usd_per_million_sync_only": _line(sync),
        "usd_per_million_lake": _line(lake_line) if lake is not None else None,
        "wru_per_delta": round(sum(u["WRU"] for u in units.values()), 3),
        "rru_per_delta": round(sum(u["RRU"] for u in units.values()), 3),
        "capacity_units_per_delta": {k: {m: round(v, 4) for m, v in u.items()} for k, u in sorted(units.items())},
        "per_delta": {
            "lambda_invocations": sum(f["count"] for f in invocations.values()) * per_delta,
            "lambda_gb_s": sum(f.get("gb_s", 0.0) for f in invocations.values()) * per_delta,
            "api_requests": sum(f.get("api_requests", 0.0) for f in invocations.values()) * per_delta,
            "response_bytes": sum(f.get("response_bytes", 0.0) for f in invocations.values()) * per_delta,
            "log_bytes": sum(f.get("log_bytes", 0.0) for f in invocations.values()) * per_delta,
            "handler_ms_per_invocation": {
                fn: round(1000 * f.get("seconds", 0.0) / f["count"], 2) for fn, f in invocations.items() if f["count"]
            },
        },
    }


# -- the run ----------------------------------------------------------------------------------------------------------
def run(sizes: Sizes, *, spark: bool, template: dict[str, dict[str, Any]] | None, work: Path) -> dict[str, Any]:
    """Measure everything (see the module docstring); returns the results document."""
    functions = functions_of(template["prod"]) if template else fallback_functions()
    meter = Meter()
    meter.install()
    cost_dir = work / "worker-meter"
    cost_dir.mkdir(parents=True, exist_ok=True)
    os.environ["LAKESYNC_COST_DIR"] = str(cost_dir)
    results: dict[str, Any] = {"push_pull": {}, "lake": {}, "storage": {}}
    with CostEnv(meter, work, functions) as env:
        runs: dict[tuple[int, int], dict[str, Any]] = {}
        for row_bytes in sizes.row_sizes:
            for batch in sizes.batches:
                n = sizes.push_deltas[batch]
                for mode in ("count", "time"):
                    started = time.perf_counter()
                    got = push_pull(env, mode, row_bytes=row_bytes, batch=batch, deltas=n, readers=sizes.readers)
                    if mode == "count":
                        runs[(row_bytes, batch)] = got
                    progress(
                        f"cost: {mode} pass, {n} deltas of {row_bytes} B in pushes of {batch}, "
                        f"{sizes.readers} readers: {time.perf_counter() - started:.1f} s"
                    )
        lakes: dict[int, dict[str, Any]] = {}
        spark_start = None
        if spark:
            lake = Lake(env, work, _code_root(), flush_engine="function" if "flush" in functions else "glue")
            progress("cost: starting local Spark (Iceberg runtime) for the Glue jobs")
            lake.start(cost_dir)
            spark_start = lake.start_seconds
            try:
                batch_size = _sqs_batch_size(template)
                lake_warm_up(env, lake, batch_size)
                for row_bytes in sizes.row_sizes:
                    lakes[row_bytes] = lake_workload(
                        env, lake, row_bytes=row_bytes, rounds=sizes.lake_rounds, batch_size=batch_size
                    )
            finally:
                lake.stop()
        glue = _glue_setup(template)
        for row_bytes, measured in lakes.items():
            results["lake"][str(row_bytes)] = {
                **measured,
                **lake_figures(env, measured, functions, glue["dpus"], glue["ratios"], glue["prices"]),
            }
        for (row_bytes, batch), got in runs.items():
            lake_result = results["lake"].get(str(row_bytes))
            for readers in sorted({1, sizes.readers}):
                name = f"rows {row_bytes} B, pushes of {batch}, pulled by {readers}"
                results["push_pull"][name] = {
                    "row_bytes": row_bytes,
                    **workload_figures(
                        env,
                        got,
                        deltas=sizes.push_deltas[batch],
                        batch=batch,
                        readers=readers,
                        lake=lake_result,
                        functions=functions,
                    ),
                }
            if batch == max(sizes.batches):
                results["storage"][str(row_bytes)] = {
                    table: {
                        "items_per_delta": v["items"] / sizes.push_deltas[batch],
                        "bytes_per_delta": v["bytes"] / sizes.push_deltas[batch],
                    }
                    for table, v in got["stored_bytes"].items()
                }
        scheduled: dict[str, dict[str, Any]] = {}
        if template:
            progress("cost: the scheduled functions on an idle stack")
            scheduled = measure_scheduled(env, template["prod"])
        results["scheduled_idle"] = scheduled
        results["emf_metrics"] = sorted(env.emf_metrics)
        results["fast_json"] = env.moto.fast_json_report
    idle: dict[str, Any] = {}
    if template:
        job_seconds: dict[str, float] = {}
        job_usage: dict[str, Usage] = {}
        if lakes:
            first = results["lake"][str(min(lakes))]
            job_seconds = {j: first["idle_seconds"][f"{j}-idle"] for j in JOBS}
            job_usage = first["idle_usage"]
        idle = {
            name: idle_month(t, job_seconds=job_seconds, job_usage=job_usage, scheduled=scheduled)
            for name, t in template.items()
        }
    results["idle_month"] = idle
    results["spark_start_seconds"] = spark_start
    results["functions"] = functions
    results["glue"] = glue
    results["meter_lookup_seconds"] = meter.lookup_seconds
    return results


def _sqs_batch_size(template: Mapping[str, Mapping[str, Any]] | None) -> int:
    """The materialise event source's batch size (the template's, else Lambda's default of 10)."""
    if template:
        resources = template["prod"].get("Resources", {})
        for resource in resources.values():
            props = resource.get("Properties", {})
            if resource.get("Type") == "AWS::Lambda::EventSourceMapping" and "Queue" in json.dumps(
                props.get("EventSourceArn")
            ):
                return int(props.get("BatchSize", 10))
    return 10


def _glue_setup(template: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """DPUs and DPU-hour price per Glue job, and how many flush runs' worth of deltas a compaction or checkpoint run
    carries at steady traffic: the flush on every flush tick, compaction on the first of its ticks its policy allows
    (the lake tick's environment), the checkpoint on the first of its ticks after a compaction."""
    from benchmarks.cost_report import schedules_of

    if template:
        entries = schedules_of(template["prod"])
        runs: dict[str, float] = {}
        for entry in entries:
            kind = entry.get("job_kind") or _scheduled_job(entry)
            if kind in JOBS:
                runs[kind] = entry["runs"]
        glue = [e for e in entries if "dpus" in e]
        dpus = {e["job_kind"]: e["dpus"] for e in glue}
        prices = {e["job_kind"]: e["glue_price"] for e in glue}
    else:  # the config defaults: flush every 15 minutes, compact hourly, checkpoint every 6 hours, 2 G.1X workers, Flex
        from benchmarks.cost_model import runs_per_month

        runs = {
            "flush": runs_per_month("rate(15 minutes)"),
            "compact": runs_per_month("rate(1 hour)"),
            "checkpoint": runs_per_month("rate(6 hours)"),
        }
        dpus = dict.fromkeys(runs, 2.0)
        prices = dict.fromkeys(runs, "glue.dpu_hour.flex")
    # Compaction waits for its policy's flush runs (the lake tick's environment), the checkpoint for a compaction.
    from benchmarks.cost_model import compaction_wants, flush_runs_per_run

    if template:
        policy = _compact_policy(template["prod"])
    else:
        from lakesync.core.lake_work import DEFAULT_COMPACT_POLICY as default

        policy = (default.min_flush_runs, default.max_wait_ms // 60_000)
    interval_min = 30 * 24 * 60 / runs["flush"]
    ticks = {job: runs["flush"] / runs[job] for job in runs}
    compact = flush_runs_per_run(ticks["compact"], compaction_wants(*policy, interval_min))
    ratios = {"flush": 1.0, "compact": compact, "checkpoint": flush_runs_per_run(ticks["checkpoint"], compact)}
    return {
        "dpus": dpus,
        "prices": prices,
        "runs_per_month": {job: runs["flush"] / ratios[job] for job in runs},
        "schedule_runs_per_month": runs,
        "compact_policy": {"min_flush_runs": policy[0], "max_wait_minutes": policy[1]},
        "ratios": ratios,
    }


def _compact_policy(template: Mapping[str, Any]) -> tuple[int, int]:
    """The lake tick's compaction policy from its environment in the template (min flush runs, max wait minutes)."""
    for resource in template.get("Resources", {}).values():
        props = resource.get("Properties", {})
        if (
            resource.get("Type") == "AWS::Lambda::Function"
            and props.get("Handler") == "functions.lake_tick.lambda_handler"
        ):
            env = props.get("Environment", {}).get("Variables", {})
            return int(env["LAKESYNC_COMPACT_MIN_FLUSH_RUNS"]), int(env["LAKESYNC_COMPACT_MAX_WAIT_MINUTES"])
    raise ValueError("the template has no lake tick function")


def _carried(glue: Mapping[str, Any]) -> str:
    """How many flush runs a compaction and a checkpoint run carry, and why, for people."""
    ratios, policy = glue.get("ratios", {}), glue.get("compact_policy", {})
    if not ratios:
        return "as their schedules imply"
    return (
        f"compaction after {policy.get('min_flush_runs')} flush runs or {policy.get('max_wait_minutes')} minutes "
        f"after the first, on its next tick: {ratios['compact']:.0f} flush runs a compaction; a checkpoint on its "
        f"tick after a compaction: {ratios['checkpoint']:.0f} a checkpoint"
    )


def _scheduled_job(entry: Mapping[str, Any]) -> str | None:
    """The job a schedule's event names (``{"job": ...}`` to the lake tick), if any."""
    with contextlib.suppress(TypeError, ValueError, AttributeError):
        job = json.loads(entry.get("input") or "").get("job")
        return job if isinstance(job, str) else None
    return None


# -- results ----------------------------------------------------------------------------------------------------------
def _fmt(value: float, digits: int = 2) -> str:
    return f"{value:,.{digits}f}"


def _yardstick(machine: Mapping[str, Any]) -> str:
    """The machine's yardstick (``benchmarks._common.yardstick_ms``) for the header, when the run recorded one."""
    ms = machine.get("yardstick_ms")
    if ms is None:
        return ""
    return f"; the fixed Python yardstick took {ms} ms, and the Lambda durations below scale with it"


def render_markdown(doc: Mapping[str, Any]) -> str:
    """The results for people."""
    r = doc["results"]
    out = [
        "# Cost benchmark",
        "",
        f"Run {doc['finished_at']} ({doc['label']}), commit `{(doc['machine']['git'] or {}).get('commit')}`, "
        f"code imported from `{doc['code_root']}`; {doc['seconds']:.0f} s, load average "
        f"{doc['machine'].get('load_average_start')} at the start, {doc['machine'].get('load_average_end')} at the end "
        f"({doc['machine'].get('cpu_count')} CPUs{_yardstick(doc['machine'])}). Prices: us-east-1 list prices checked "
        f"{CHECKED} (`benchmarks/prices.py`, each with its source). Method: `benchmarks/cost.py` and docs/cost.md.",
        "",
        "## Dollars per million deltas",
        "",
        f"Sync (push + pull) and lake (flush, materialise, compaction, checkpoint, release; Glue at "
        f"{HEADLINE_RUN:,} deltas per flush run). Lambda durations are this machine's, standing in for Lambda's.",
        "",
        "| workload | total | DynamoDB | Lambda | API Gateway | SQS | S3 | Glue | Logs | X-Ray | other | sync only |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, w in r["push_pull"].items():
        u = w["usd_per_million"]
        out.append(
            f"| {name} | **{_fmt(u['total'])}** | {_fmt(u['DynamoDB'])} | {_fmt(u['Lambda'])} | "
            f"{_fmt(u['API Gateway'])} | {_fmt(u['SQS'], 3)} | {_fmt(u['S3'], 3)} | {_fmt(u['Glue'])} | "
            f"{_fmt(u['CloudWatch Logs'])} | {_fmt(u['X-Ray'])} | {_fmt(u['Other'])} | "
            f"{_fmt(w['usd_per_million_sync_only']['total'])} |"
        )
    out += [
        "",
        '"other" is data transfer out to the internet (response bodies) and Secrets Manager calls; "Logs" is what '
        "the functions print at the deployed log level, plus ~350 B of Lambda's own lines per invocation where the "
        "function's system log level keeps them (the template's `lambdaSystemLogLevel`); X-Ray assumes "
        "the default sampling (5 % of invocations at sustained traffic). The same figures as a picture, beside the "
        "baseline run and AppSync and Firestore: [`cost.png`](cost.png).",
        "",
        "## DynamoDB units per delta",
        "",
        "WRU and RRU include the lake's stages (the breakdowns below show each); the other columns are the sync "
        "path's (the lake adds one materialise invocation per 10 jobs of up to 5,000 deltas).",
        "",
        "| workload | WRU | RRU | Lambda invocations | Lambda GB-s | API requests |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, w in r["push_pull"].items():
        p = w["per_delta"]
        out.append(
            f"| {name} | {w['wru_per_delta']:.2f} | {w['rru_per_delta']:.2f} | {p['lambda_invocations']:.3f} | "
            f"{p['lambda_gb_s']:.5f} | {p['api_requests']:.3f} |"
        )
    seen = sorted({f for w in r["push_pull"].values() for f in w["per_delta"]["handler_ms_per_invocation"]})
    out += [
        "",
        "Handler milliseconds per invocation on this machine (the timing pass; moto answers over loopback):",
        "",
        "| workload | " + " | ".join(seen) + " |",
        "|---|" + "---:|" * len(seen),
    ]
    for name, w in r["push_pull"].items():
        ms = w["per_delta"]["handler_ms_per_invocation"]
        out.append(f"| {name} | " + " | ".join(f"{ms.get(f, 0.0):.1f}" for f in seen) + " |")
    most = max((int(w["workload"]["readers"]) for w in r["push_pull"].values()), default=0)
    for name, w in r["push_pull"].items():
        if w["workload"]["batch"] != 10 or w["workload"]["readers"] != most:
            continue
        out += ["", f"### Breakdown: {name}", "", "| stage: table op | WRU / delta | RRU / delta |", "|---|---:|---:|"]
        for label, units in w["capacity_units_per_delta"].items():
            if units["WRU"] or units["RRU"]:
                out.append(f"| {label} | {units['WRU']:.3f} | {units['RRU']:.3f} |")
    if r["lake"]:
        out += [
            "",
            "## The lake per million deltas, by flush run size",
            "",
            "Seconds per run: a line fitted through the loaded runs, never below an idle run. The Glue jobs run as "
            "their scripts on local Spark (`local[2]`, this machine; a stand-in for Glue's G.1X workers), each run "
            "billed at least a minute; the flush function (the stack's default flush) runs in this process on the "
            "same lake, billed in GB-seconds at its memory. Compaction and checkpoint runs carry as many flush runs' "
            f"deltas as the lake tick's rules imply at steady traffic ({_carried(r.get('glue', {}))}). "
            '"per-run requests" is what an idle run of each job asks of DynamoDB and S3.',
            "",
            "| rows | deltas per flush run | flush runs | DPU-hours: flush | compact | checkpoint | Glue $ | "
            "flush function $ | per-run requests $ | total lake $ |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row_bytes, lake in r["lake"].items():
            for size, figures in lake["by_run_size"].items():
                glue = figures["glue"]
                dpu = " | ".join(f"{glue[job]['dpu_hours']:.2f}" if job in glue else "–" for job in JOBS)
                function = figures.get("flush_function") or {}
                out.append(
                    f"| {row_bytes} B | {int(size):,} | {figures['flush_runs']:,.0f} | {dpu} | "
                    f"{_fmt(figures['glue_usd'])} | {_fmt(function['usd'], 3) if function else '–'} | "
                    f"{_fmt(figures['per_run_requests_usd'], 3)} | {_fmt(figures['total_usd'])} |"
                )
        out += [
            "",
            "Seconds of each step (on local Spark, or the flush function's; the materialise step is the function's "
            "invocations and the event source's requests), and the fitted seconds per run:",
            "",
            "| rows | deltas | " + " | ".join(step for step, _, _ in LAKE_STEPS) + " |",
            "|---|---:|" + "---:|" * len(LAKE_STEPS),
        ]
        for row_bytes, lake in r["lake"].items():
            for measured in lake["rounds"]:
                cells = " | ".join(f"{measured['seconds'][step]:.1f}" for step, _, _ in LAKE_STEPS)
                out.append(f"| {row_bytes} B | {measured['deltas']:,} | {cells} |")
            idle = ", ".join(f"{step} {t:.1f} s" for step, t in lake["idle_seconds"].items())
            model = "; ".join(
                f"{job} {m['intercept_s']:.1f} s + {1000 * m['s_per_delta']:.2f} ms/delta"
                for job, m in lake["glue_seconds_model"].items()
            )
            out.append(f"| {row_bytes} B | idle | {idle} |" + " |" * (len(LAKE_STEPS) - 1))
            out.append(f"| {row_bytes} B | fitted | {model} |" + " |" * (len(LAKE_STEPS) - 1))
    if r.get("storage"):
        out += [
            "",
            "## Stored per delta (pushes of 100)",
            "",
            "Item bytes plus DynamoDB's 100 bytes per item, after the push workload (before any flush or release). "
            f"A month of it costs ${PRICE_STORAGE:.2f} per GB (storage and point-in-time recovery); the log is "
            "released after the flush, a checkpoint and the retention (1 day), dedup records expire by TTL, rows stay.",
            "",
            "| rows | table | items / delta | bytes / delta | $ / month per million deltas kept |",
            "|---|---|---:|---:|---:|",
        ]
        for row_bytes, tables in r["storage"].items():
            for table, figures in tables.items():
                if figures["items_per_delta"]:
                    usd = figures["bytes_per_delta"] * 1e6 / 1e9 * PRICE_STORAGE
                    out.append(
                        f"| {row_bytes} B | {table} | {figures['items_per_delta']:.2f} | "
                        f"{figures['bytes_per_delta']:,.0f} | {usd:.3f} |"
                    )
    out += ["", "## Idle month (no traffic)", ""]
    for env_name, idle in r["idle_month"].items():
        out += [f"### `{env_name}` stack: ${idle['total_usd']:.2f} a month besides KMS keys and the secret", ""]
        out += ["| item | quantity | $ / month | note |", "|---|---:|---:|---|"]
        for line in idle["lines"]:
            out.append(
                f"| {line['item']} | {line['quantity']:,.1f} {line['unit']} | {line['usd']:.2f} | {line['note']} |"
            )
        for line in idle["kms_and_secrets"]:
            out.append(f"| *besides:* {line['item']} | {line['quantity']} | {line['usd']:.2f} | {line['note']} |")
        out.append("")
    if not r["idle_month"]:
        out += ["Not computed (no template: `--no-synth` or `--quick`).", ""]
    if r.get("emf_metrics"):
        out += [
            f"While traffic flows the functions publish {len(r['emf_metrics'])} custom metrics (EMF): "
            f"${len(r['emf_metrics']) * 0.30:.2f} a month at $0.30 each.",
            "",
        ]
    out += ["## Comparison (sync traffic only, list prices)", "", "| rows, readers | ours (sync only) |"]
    header_done = False
    for name, w in r["push_pull"].items():
        if "pushes of 100," not in name:
            continue
        comps = comparisons(int(w["row_bytes"]), int(w["workload"]["readers"]))
        if not header_done:
            out[-1] += " " + " | ".join(comps) + " |"
            out.append("|---|---:|" + "---:|" * len(comps))
            header_done = True
        cells = " | ".join(_fmt(sum(c.values())) for c in comps.values())
        ours = _fmt(w["usd_per_million_sync_only"]["total"])
        out.append(f"| {w['row_bytes']} B, {w['workload']['readers']} | {ours} | {cells} |")
    out += ["", "## Prices", "", "| key | $ | unit | source | checked |", "|---|---:|---|---|---|"]
    for p in doc["prices"]:
        out.append(f"| {p['key']} | {p['usd']} | {p['unit']} | {p['source']} | {p['checked']} |")
    return "\n".join(out) + "\n"


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and write the results files."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny workloads, no Spark, no synth")
    parser.add_argument("--no-spark", action="store_true", help="skip the lake (Glue jobs on local Spark)")
    parser.add_argument("--no-synth", action="store_true", help="skip the idle month (no CDK synth)")
    parser.add_argument("--spark", action="store_true", help="run the lake even with --quick")
    parser.add_argument("--template", type=Path, action="append", help="a synthesized template (repeatable)")
    parser.add_argument("--out", type=Path, help="results directory (default benchmarks/results; --quick: a temp dir)")
    parser.add_argument("--label", default="", help="a note recorded with the results")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    spark = (not args.quick or args.spark) and not args.no_spark
    out = args.out or (Path(tempfile.mkdtemp(prefix="lakesync-cost-")) if args.quick else RESULTS)
    started = time.perf_counter()
    load_start = _load()
    machine = machine_info()  # before the run: its yardstick is timed on a machine the run has not loaded yet
    code_root = _code_root()
    with tempfile.TemporaryDirectory(prefix="lakesync-cost-") as tmp:
        work = Path(tmp)
        template: dict[str, dict[str, Any]] | None = None
        if args.template:
            template = {
                p.stem.removeprefix("LakeSync-").removesuffix(".template"): json.loads(p.read_text())
                for p in args.template
            }
            template.setdefault("prod", next(iter(template.values())))
        elif not (args.quick or args.no_synth):
            progress("cost: synthesizing the CDK app (prod and dev)")
            template = synthesize(code_root, work / "cdk.out")
        results = run(sizes, spark=spark, template=template, work=work)
    doc = {
        "benchmark": "cost",
        "label": args.label or ("quick" if args.quick else "full"),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - started, 1),
        "machine": {**machine, "load_average_start": load_start, "load_average_end": _load()},
        "code_root": str(code_root),
        "sizes": {**asdict(sizes), "push_deltas": {str(k): v for k, v in sizes.push_deltas.items()}},
        "headline_run_deltas": HEADLINE_RUN,
        "prices": table_rows(),
        "results": results,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "cost.json").write_text(json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")
    (out / "cost.md").write_text(render_markdown(doc))
    png = plot(doc, out / "cost.png", baseline=load_baseline(RESULTS))
    progress(f"cost: wrote {out / 'cost.json'}, {out / 'cost.md'} and {png}")
    with contextlib.suppress(Exception):
        shutil.rmtree(Path(os.environ.get("LAKESYNC_COST_DIR", "/nonexistent")), ignore_errors=True)


if __name__ == "__main__":
    main()
