"""The workloads' sizes, and the deltas and API Gateway events they send (as the client sends them)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TABLE = "todos"
PUSH_GATEWAY = "default"
WRITER = "writer"
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
