"""Shared harness: the handlers' environment on a moto server, workloads, call recording, statistics, progress.

The handlers run exactly as the local runner runs them (:class:`lakesync.local.runner.LocalStack`): the process
environment names the tables (``LAKESYNC_TABLE_PREFIX``), the JWT secret and the AWS endpoint, and
:func:`functions._runtime.reset_runtime` makes the next invocation rebuild settings, client and stores from it. Each
measured run gets fresh tables under a unique prefix; the tables are deleted afterwards.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import platform
import secrets
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks._moto import MotoProcess

GATEWAY = "default"
CLIENT_ID = "bench-client"
TABLE = "todos"
ROOT = Path(__file__).resolve().parent.parent

_STARTED = time.monotonic()


def progress(message: str) -> None:
    """One progress line on stderr: ``[bench +12.3s] message``."""
    print(f"[bench +{time.monotonic() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


# -- statistics -----------------------------------------------------------------------------------------------------
def summarize(values: Sequence[float], *, digits: int = 4) -> dict[str, Any]:
    """Median and spread of repeated measurements.

    Returns:
        ``{"median", "min", "max", "spread_pct", "n", "values"}``; ``spread_pct`` is ``(max - min) / median`` in %.
    """
    median = statistics.median(values)
    low, high = min(values), max(values)
    return {
        "median": round(median, digits),
        "min": round(low, digits),
        "max": round(high, digits),
        "spread_pct": round(100 * (high - low) / median, 1) if median else 0.0,
        "n": len(values),
        "values": [round(v, digits) for v in values],
    }


# -- workloads ------------------------------------------------------------------------------------------------------
def make_deltas(count: int, *, row_prefix: str, client_id: str = CLIENT_ID) -> list[Any]:
    """``count`` INSERTs of distinct rows of one table, three columns each, stamped with the current wall clock."""
    from lakesync.core.delta import make_delta
    from lakesync.core.hlc import encode

    now_ms = int(time.time() * 1000)
    return [
        make_delta(
            "INSERT",
            table=TABLE,
            row_id=f"{row_prefix}-{i:06d}",
            client_id=client_id,
            hlc=encode(now_ms, i % 65536) if i < 65536 else encode(now_ms + i // 65536, i % 65536),
            columns={"title": f"task {i}", "done": i % 3 == 0, "priority": i % 5},
        )
        for i in range(count)
    ]


def push_events(deltas: Sequence[Any], batch: int, token: str) -> list[dict[str, Any]]:
    """API Gateway v2 events of ``POST /v1/sync/default/push`` with JSON bodies of ``batch`` deltas each."""
    from lakesync.local.events import http_event

    events = []
    for start in range(0, len(deltas), batch):
        body = json.dumps(
            {
                "clientId": CLIENT_ID,
                "deltas": [d.to_json() for d in deltas[start : start + batch]],
                "lastSeenHlc": "0",
            },
            separators=(",", ":"),
        )
        events.append(
            http_event(
                "POST",
                f"/v1/sync/{GATEWAY}/push",
                headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
                body=body,
                route_key="POST /v1/sync/{gw}/push",
            )
        )
    return events


def pull_event(token: str, *, limit: int, cursor: str) -> dict[str, Any]:
    """The API Gateway v2 event of ``GET /v1/sync/default/pull?clientId=..&limit=..&cursor=..``."""
    from lakesync.local.events import http_event

    return http_event(
        "GET",
        f"/v1/sync/{GATEWAY}/pull",
        query={"clientId": CLIENT_ID, "limit": str(limit), "cursor": cursor},
        headers={"authorization": f"Bearer {token}", "accept": "application/json"},
        route_key="GET /v1/sync/{gw}/pull",
    )


# -- the handlers' environment ---------------------------------------------------------------------------------------
def handler_environment(
    *, endpoint_url: str, region: str, secret: str, gateways: str, log_level: str
) -> dict[str, str]:
    """The variables the handlers read, as the local runner sets them: the AWS endpoint, region and test credentials,
    the JWT secret, the gateways served, Powertools with tracing off and ``log_level``."""
    return {
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
        "LAKESYNC_JWT_SECRET": secret,
        "LAKESYNC_GATEWAY_IDS": gateways,
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_SERVICE_NAME": "lakesync",
        "POWERTOOLS_METRICS_NAMESPACE": "LakeSync",
        "POWERTOOLS_LOG_LEVEL": log_level,
    }


def set_environ(variables: Mapping[str, str], saved: dict[str, str | None]) -> None:
    """Set ``variables`` in the process environment, keeping in ``saved`` the value each had first (``None``: unset)."""
    for key, value in variables.items():
        saved.setdefault(key, os.environ.get(key))
        os.environ[key] = value


def restore_environ(saved: dict[str, str | None]) -> None:
    """Put back the values ``saved`` holds (unsetting those that were unset) and empty it."""
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    saved.clear()


def lambda_context(function_name: str, region: str) -> Any:
    """The context object a handler is called with, for a function of that name."""
    from lakesync.local.front import LambdaContext

    return LambdaContext(
        function_name=function_name,
        aws_request_id=str(uuid.uuid4()),
        invoked_function_arn=f"arn:aws:lambda:{region}:123456789012:function:{function_name}",
    )


class HandlerEnv:
    """A moto server (separate process) plus the environment variables the Lambda handlers read.

    ``with HandlerEnv() as env: names = env.new_tables(); env.invoke(module, event)``.
    The process environment is restored on exit.
    """

    def __init__(self, *, fast_json: bool = True, profile: Path | None = None) -> None:
        """Configure; nothing starts until ``__enter__`` (the flags are :mod:`benchmarks._moto`'s)."""
        self.moto = MotoProcess(fast_transactions=True, fast_json=fast_json, profile=profile)
        self.secret = secrets.token_urlsafe(32)
        self._saved: dict[str, str | None] = {}
        self._sink = io.StringIO()
        self._context: Any = None
        self._raw: Any = None

    def __enter__(self) -> HandlerEnv:
        self.moto.start()
        variables = handler_environment(
            endpoint_url=self.moto.endpoint_url,
            region="us-east-1",
            secret=self.secret,
            gateways=GATEWAY,
            log_level="WARNING",
        )
        set_environ(variables, self._saved)
        self._context = lambda_context("lakesync-bench", "us-east-1")
        return self

    def __exit__(self, *exc: object) -> None:
        restore_environ(self._saved)
        with contextlib.suppress(ImportError):
            from functions._runtime import reset_runtime

            reset_runtime()
        self.moto.stop()

    def token(self) -> str:
        """A client token for the benchmark client on the benchmark gateway."""
        from lakesync.auth import mint_token

        return mint_token(CLIENT_ID, GATEWAY, self.secret, ttl_s=3600)

    def raw_client(self) -> Any:
        """The floors' boto3 client: default SDK settings, generous timeouts, no retries (a retry would hide cost)."""
        if self._raw is None:
            import boto3
            from botocore.config import Config

            self._raw = boto3.client(
                "dynamodb",
                endpoint_url=self.moto.endpoint_url,
                region_name="us-east-1",
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
                config=Config(read_timeout=300, retries={"max_attempts": 1, "mode": "standard"}),
            )
        return self._raw

    def new_tables(self, *, use_for_handlers: bool = True) -> Any:
        """Create fresh LakeSync tables under a unique prefix; optionally point the handlers at them.

        Returns:
            The :class:`lakesync.aws.tables.TableNames`.
        """
        from lakesync.aws.table_setup import create_tables
        from lakesync.aws.tables import TableNames

        prefix = f"bench{uuid.uuid4().hex[:10]}"
        names = TableNames.with_prefix(prefix)
        create_tables(self.raw_client(), names)
        if use_for_handlers:
            from functions._runtime import reset_runtime

            os.environ["LAKESYNC_TABLE_PREFIX"] = prefix
            self._saved.setdefault("LAKESYNC_TABLE_PREFIX", None)
            reset_runtime()
        return names

    def drop_tables(self, names: Any) -> None:
        """Delete the tables (keeps the moto server lean between runs)."""
        client = self.raw_client()
        for name in names.as_dict().values():
            with contextlib.suppress(Exception):
                client.delete_table(TableName=name)

    def invoke(self, module: ModuleType, event: dict[str, Any]) -> dict[str, Any]:
        """Call ``module.lambda_handler`` as Lambda would; what it prints (EMF metrics, logs) goes to a sink."""
        with contextlib.redirect_stdout(self._sink):
            result: dict[str, Any] = module.lambda_handler(event, self._context)
        self._sink.seek(0)
        self._sink.truncate()
        return result

    def handler_client(self) -> Any:
        """The boto3 client the handlers use (built on first use by ``functions._runtime.get_deps``)."""
        from functions._runtime import get_deps

        return get_deps().buffer._db  # type: ignore[attr-defined]


# -- recording the DynamoDB calls of a client ------------------------------------------------------------------------
@dataclass
class CallRecorder:
    """Counts a boto3 client's API calls by operation and keeps the requests of the operations in ``record``.

    ``sends`` counts HTTP requests: more sends than calls means the SDK retried (e.g. after a read timeout).
    """

    record: frozenset[str] = frozenset({"BatchWriteItem"})
    calls: Counter[str] = field(default_factory=Counter)
    recorded: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    sends: int = 0

    def _on_call(self, params: Mapping[str, Any], model: Any, **_: Any) -> None:
        self.calls[model.name] += 1
        if model.name in self.record:
            # A reference, not a copy: the stores build every request afresh and botocore does not change it.
            self.recorded.append((model.name, dict(params)))

    def _on_send(self, **_: Any) -> None:
        self.sends += 1

    @property
    def retries(self) -> int:
        """HTTP requests beyond one per API call."""
        return self.sends - sum(self.calls.values())

    @contextlib.contextmanager
    def attached(self, client: Any) -> Iterator[CallRecorder]:
        """Record while inside the block."""
        hooks = (("provide-client-params.dynamodb", self._on_call), ("before-send.dynamodb", self._on_send))
        for event, hook in hooks:
            client.meta.events.register(event, hook, unique_id=f"bench-{event}-{id(self)}")
        try:
            yield self
        finally:
            for event, _hook in hooks:
                client.meta.events.unregister(event, unique_id=f"bench-{event}-{id(self)}")


def retarget_request(operation: str, params: dict[str, Any], old: Any, new: Any) -> dict[str, Any]:
    """A recorded write request (``BatchWriteItem``, ``PutItem``, ``UpdateItem``) with its tables moved from the
    ``old`` TableNames to the ``new`` ones."""
    mapping = {old_name: new.as_dict()[kind] for kind, old_name in old.as_dict().items()}
    if operation in ("PutItem", "UpdateItem"):
        return {**params, "TableName": mapping[params["TableName"]]}
    return {**params, "RequestItems": {mapping[t]: writes for t, writes in params["RequestItems"].items()}}


def scan_all(client: Any, table: str) -> list[dict[str, Any]]:
    """Every item of ``table`` (consistent, paginated ``Scan``)."""
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    items: list[dict[str, Any]] = []
    while True:
        out = client.scan(**kwargs)
        items.extend(out.get("Items", []))
        if not out.get("LastEvaluatedKey"):
            return items
        kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def replay(client: Any, recorded: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Send recorded requests again, in order, through ``client``."""
    from botocore import xform_name

    for operation, params in recorded:
        getattr(client, xform_name(operation))(**params)


def batch_write(client: Any, table: str, items: Sequence[dict[str, Any]]) -> int:
    """``BatchWriteItem`` of ``items`` in requests of 25, resending unprocessed items. Returns the request count."""
    calls = 0
    for start in range(0, len(items), 25):
        request: dict[str, Any] = {table: [{"PutRequest": {"Item": item}} for item in items[start : start + 25]]}
        while request:
            out = client.batch_write_item(RequestItems=request)
            calls += 1
            request = out.get("UnprocessedItems") or {}
    return calls


def one_item_per_delta(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The log as issue 15 measured it (its floor A): the entries of stored chunk items as one item per delta, each
    with its delta and its row images -- the reference push and pull goals are set against, whatever the layout."""
    from lakesync.aws.buffer.items import chunk_span
    from lakesync.aws.buffer.log_chunks import decode_entries
    from lakesync.core.log import ShardId

    items = []
    for chunk in chunks:
        shard = ShardId.parse(chunk["shard"]["S"])
        first, _, first_hlc = chunk_span(chunk)
        for entry in decode_entries(shard, first, first_hlc, chunk["z"]["B"]):
            item = {
                "shard": chunk["shard"],
                "seq": {"N": str(entry.seq)},
                "chlc": {"N": str(entry.commit_hlc)},
                "d": {"S": entry.wire_json or ""},
                "sz": {"N": str(entry.size)},
            }
            if entry.after is not None:
                item["a"] = {"S": json.dumps(entry.after, separators=(",", ":"))}
            if entry.before is not None:
                item["b"] = {"S": json.dumps(entry.before, separators=(",", ":"))}
            items.append(item)
    return items


def query_page(client: Any, table: str, shard: str, *, page: int, start: Any = None) -> dict[str, Any]:
    """One consistent ``Query`` of up to ``page`` log items of ``shard`` (after ``start``, a ``LastEvaluatedKey``)."""
    kwargs: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": "#sh = :s",
        "ExpressionAttributeNames": {"#sh": "shard"},
        "ExpressionAttributeValues": {":s": {"S": shard}},
        "ConsistentRead": True,
        "Limit": page,
    }
    if start:
        kwargs["ExclusiveStartKey"] = start
    out: dict[str, Any] = client.query(**kwargs)
    return out


def query_all(client: Any, table: str, shard: str, *, page: int) -> tuple[list[dict[str, Any]], int]:
    """Every log item of ``shard`` by a paginated consistent ``Query`` of ``page`` items. Returns (items, requests)."""
    items: list[dict[str, Any]] = []
    calls = 0
    last = None
    while True:
        out = query_page(client, table, shard, page=page, start=last)
        calls += 1
        items.extend(out.get("Items", []))
        last = out.get("LastEvaluatedKey")
        if not last:
            return items, calls


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    """``(seconds, result)`` of one call, by the monotonic high-resolution clock."""
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


# -- machine ---------------------------------------------------------------------------------------------------------
def yardstick_ms(rounds: int = 5, records: int = 20_000) -> float:
    """Milliseconds this machine takes for a fixed Python workload like a handler's (a JSON round trip and a sort of
    ``records`` small records; the best of ``rounds``): the scale for comparing timings taken on different machines."""
    data = [{"id": f"r{i}", "v": (i * 7919) % 10007, "s": "x" * (i % 17)} for i in range(records)]
    best = math.inf
    for _ in range(rounds):
        start = time.perf_counter()
        sorted(json.loads(json.dumps(data)), key=lambda r: (r["v"], r["id"]))
        best = min(best, time.perf_counter() - start)
    return round(best * 1000, 1)


def machine_info() -> dict[str, Any]:
    """What ran the benchmarks: CPU, memory, OS, interpreter, key package versions, git commit."""
    from importlib.metadata import PackageNotFoundError, version

    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory_gib = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    packages: dict[str, str | None] = {}
    for name in ("boto3", "botocore", "moto", "aws-lambda-powertools", "werkzeug"):
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = None
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "yardstick_ms": yardstick_ms(),
        "memory_gib": memory_gib,
        "os": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "packages": packages,
        "git": _git_state(),
    }


def _git_state() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    status = git("status", "--porcelain", "--", "src", "functions")
    return {"commit": git("rev-parse", "HEAD") or None, "src_or_functions_modified": bool(status)}
