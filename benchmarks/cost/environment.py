"""The environment the workloads run in: moto in its own process, the handlers' environment, the meter, and each
invocation recorded (counts, bytes, seconds, GB-seconds) per phase."""

from __future__ import annotations

import base64
import contextlib
import gzip
import io
import json
import os
import secrets
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks._common import handler_environment, lambda_context, restore_environ, set_environ
from benchmarks._moto import MotoProcess
from benchmarks.cost.meter import Meter
from benchmarks.cost.model import http_api_requests, lambda_gb_seconds
from benchmarks.cost.prices import REGION
from benchmarks.cost.pricing import Invocations, Usage, usage_key
from benchmarks.cost.workloads import PUSH_GATEWAY, SCHEMA_COLUMNS, TABLE

CLAIM_CHECK_BUCKET = "cost-claim-check"
CHECKPOINT_BUCKET = "cost-checkpoints"
QUEUE = "cost-materialise"
AUTHORIZER = "authorizer"
AUTHORIZER_MISS_RATIO = 0.1
"""Authorizer invocations per API request (an assumption: API Gateway caches an answer per token for 300 s, and a
syncing client calls about ten times in that time; a client calling once every 5 minutes or less misses every
time)."""


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
        variables = handler_environment(
            endpoint_url=self.endpoint,
            region=REGION,
            secret=self.secret,
            gateways=PUSH_GATEWAY,
            # The deployed default (infra config logLevel): what the functions log is CloudWatch Logs ingestion.
            log_level="INFO",
        )
        set_environ({**variables, "LAKESYNC_CLAIM_CHECK_BUCKET": CLAIM_CHECK_BUCKET}, self._saved)
        self._context = lambda_context("lakesync-cost", REGION)
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
        restore_environ(self._saved)
        self.moto.stop()

    def gateways(self, *ids: str) -> None:
        """Serve these gateways (``LAKESYNC_GATEWAY_IDS``)."""
        os.environ["LAKESYNC_GATEWAY_IDS"] = ",".join(ids)
        from functions._runtime import reset_runtime

        reset_runtime()

    def new_tables(self) -> Any:
        """Fresh tables under a unique prefix, registered with the meter, used by the handlers from now on."""
        from functions._runtime import reset_runtime
        from lakesync.aws.table_setup import create_tables
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
        from lakesync.aws.config_store import DynamoDBConfigStore
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


def expect_ok(result: Mapping[str, Any], what: str) -> dict[str, Any]:
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


@contextlib.contextmanager
def environ(variables: Mapping[str, str], drop: Sequence[str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in [*variables, *drop]}
    for key in drop:
        os.environ.pop(key, None)
    os.environ.update(variables)
    try:
        yield
    finally:
        restore_environ(saved)


def merge_passes(env: CostEnv, phase: str) -> Invocations:
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
