"""Fixtures for the handler tests: the functions' environment on the shared moto server, sample events, tokens.

``api`` points the handlers at fresh DynamoDB tables (``AWS_ENDPOINT_URL`` = the moto server, fake credentials) and
resets the runtime around each test, so every test starts from a cold function.
"""

from __future__ import annotations

import base64
import copy
import gzip
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.aws.rate_limits import KEY_PREFIX as RATE_COUNTER_PREFIX
from lakesync.aws.tables import TableNames
from lakesync.core.canonical import js_stringify
from lakesync.core.hlc import HLC
from lakesync.local.front import LambdaContext

EVENTS = Path(__file__).resolve().parent.parent.parent / "events"
SECRET = "functions-test-secret-0123456789"
GATEWAY = "default"
OTHER_GATEWAY = "other"
FIXED_MS = 1_700_000_000_000
_DEFAULT = object()


@dataclass
class Reply:
    """A handler result as the client sees it."""

    status: int
    headers: dict[str, str]
    body: bytes
    raw: dict[str, Any]

    def json(self) -> Any:
        return json.loads(self.body)


class Api:
    """Builds events from events/*.json, mints tokens, invokes handlers and inspects the tables."""

    secret = SECRET

    def __init__(self, tables: TableNames | None = None, client: Any = None) -> None:
        self.tables = tables
        self.client = client

    def token(
        self,
        sub: str = "client-a",
        *,
        gw: str = GATEWAY,
        role: str = "client",
        secret: str = SECRET,
        ttl_s: int = 3600,
        claims: dict[str, Any] | None = None,
    ) -> str:
        return mint_token(sub, gw, secret, role=role, ttl_s=ttl_s, claims=claims)

    def admin_token(self, sub: str = "ops", gw: str = GATEWAY) -> str:
        return self.token(sub, gw=gw, role="admin")

    def event(
        self,
        name: str,
        *,
        token: Any = _DEFAULT,
        body: Any = _DEFAULT,
        query: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        gateway: str | None = None,
    ) -> dict[str, Any]:
        """The sample ``events/{name}.json`` with the token placeholder filled and optional overrides.

        ``token=None`` drops the Authorization header; ``body`` may be a dict/list (JSON), ``str`` or ``bytes``
        (sent base64 as API Gateway does for binary bodies); ``gateway`` rewrites the path's gateway id.
        """
        event: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text(encoding="utf-8"))
        hdrs: dict[str, str] = event["headers"]
        if token is None:
            hdrs.pop("authorization", None)
        elif "authorization" in hdrs:
            hdrs["authorization"] = hdrs["authorization"].replace(
                "{{token}}", self.token() if token is _DEFAULT else token
            )
        if body is not _DEFAULT:
            self._set_body(event, body)
        if query is not None:
            event["queryStringParameters"] = dict(query)
            event["rawQueryString"] = "&".join(f"{k}={v}" for k, v in query.items())
            if not query:
                del event["queryStringParameters"]
        if gateway is not None:
            for key in ("rawPath",):
                event[key] = event[key].replace(f"/{GATEWAY}", f"/{gateway}")
            event["requestContext"]["http"]["path"] = event["rawPath"]
            event["pathParameters"] = {"gw": gateway}
        for key, value in (headers or {}).items():
            if value is None:
                hdrs.pop(key.lower(), None)
            else:
                hdrs[key.lower()] = value
        return event

    @staticmethod
    def _set_body(event: dict[str, Any], body: Any) -> None:
        if isinstance(body, bytes):
            event["body"] = base64.b64encode(body).decode("ascii")
            event["isBase64Encoded"] = True
            size = len(body)
        else:
            text = body if isinstance(body, str) else js_stringify(body)
            event["body"] = text
            event["isBase64Encoded"] = False
            size = len(text.encode("utf-8", "surrogatepass"))
        event["headers"]["content-length"] = str(size)

    def call(self, module: ModuleType, event: dict[str, Any], *, time_left_s: float | None = None) -> Reply:
        """Invoke as Lambda would; ``time_left_s``: the invocation's remaining time at the start (else unbounded)."""
        context = LambdaContext(
            function_name=f"lakesync-{module.__name__.rsplit('.', 1)[-1]}",
            aws_request_id="c0ffee00-0000-4000-8000-000000000000",
            invoked_function_arn="arn:aws:lambda:eu-west-1:123456789012:function:lakesync",
            memory_limit_in_mb=512,
            deadline_monotonic=math.inf if time_left_s is None else time.monotonic() + time_left_s,
        )
        raw = module.lambda_handler(copy.deepcopy(event), context)
        body = raw.get("body") or ""
        data = base64.b64decode(body) if raw.get("isBase64Encoded") else body.encode("utf-8")
        if (raw.get("headers") or {}).get("Content-Encoding") == "gzip":  # as an HTTP client reads it
            data = gzip.decompress(data)
        return Reply(raw["statusCode"], dict(raw.get("headers") or {}), data, raw)

    def items(self) -> dict[str, int]:
        """Items per table (small tables: a scan is fine), the rate limits' request counters not counted: they are
        not data (every request is counted, a refused one too)."""
        assert self.tables is not None
        counts = {}
        for kind, name in self.tables.as_dict().items():
            counts[kind] = self.client.scan(
                TableName=name,
                Select="COUNT",
                ConsistentRead=True,
                FilterExpression="NOT begins_with(pk, :counter)",
                ExpressionAttributeValues={":counter": {"S": RATE_COUNTER_PREFIX}},
            )["Count"]
        return counts

    def fix_clock(self, ms: int = FIXED_MS) -> None:
        """Pin the gateway's physical clock (the vectors' clock is 1700000000000)."""
        from functions._runtime import get_deps

        deps = get_deps()
        deps.clock = HLC(lambda: ms)
        deps.wall_ms = lambda: ms


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, moto_endpoint: str) -> None:
    """AWS pointed at the moto server with fake credentials, no LakeSync variables, no X-Ray."""
    for key in list(os.environ):
        if key.startswith(("LAKESYNC_", "AWS_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")  # the region of the shared table fixtures
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")


@pytest.fixture
def api(aws_env: None, monkeypatch: pytest.MonkeyPatch, dynamodb_tables: TableNames, dynamodb_client: Any) -> Any:
    """The functions configured on fresh tables, gateways ``default`` and ``other``, a cold runtime."""
    from functions._runtime import reset_runtime
    from lakesync import egress
    from lakesync.aws.settings.variables import TABLE_VARS

    for kind, var in TABLE_VARS.items():
        monkeypatch.setenv(var, getattr(dynamodb_tables, kind))
    monkeypatch.setenv("LAKESYNC_JWT_SECRET", SECRET)
    monkeypatch.setenv("LAKESYNC_GATEWAY_IDS", f"{GATEWAY},{OTHER_GATEWAY}")
    # The test databases and vendor stand-ins listen on loopback over plain http: this test deployment allows them,
    # as `lakesync local` does (link-local and metadata addresses stay refused whatever is set).
    monkeypatch.setenv("LAKESYNC_ALLOWED_NETWORKS", "127.0.0.0/8,::1/128")
    monkeypatch.setenv("LAKESYNC_ALLOW_PLAIN_HTTP", "true")
    policy = egress.current()
    reset_runtime()
    yield Api(dynamodb_tables, dynamodb_client)
    reset_runtime()
    egress.configure(policy)  # the handlers' wiring made this deployment's policy the process's


@pytest.fixture
def bare_api(aws_env: None) -> Any:
    """Events and invocation only: no LakeSync variables, no tables, a cold runtime."""
    from functions._runtime import reset_runtime

    reset_runtime()
    yield Api()
    reset_runtime()
