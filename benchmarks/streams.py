"""Streams: what a change of a client's scope costs (issue 43, items 2 to 4): a new subscription's backfill, a
membership row inserted or deleted, and a new rules version for many clients, served as differences.

``python -m benchmarks.streams [--rows 20000] [--clients 1000] [--sample 20] [--out DIR]``.

The gateway is the deployed functions' (``lakesync.aws.wiring.gateway_deps`` over the DynamoDB adapters on a moto
server in its own process, :mod:`benchmarks._moto`, and S3 for the checkpoints), called through its services (the pull
and subscribe services the functions call, no HTTP). The log is seeded as ``benchmarks/pull.py`` seeds it: the deltas go
through the real push service over in-memory stores whose commits are rendered into the log items the DynamoDB store
writes, then written to moto (the row index is not written: neither a pull nor a difference reads it). Checkpoints are
written by the checkpoint writer (``gateway.checkpoint.write_checkpoint``, which the Spark job calls) from the log's
fold, at the heads, the log not released. A client starts with a cursor at the heads.

* **backfill**: a stream over ``--rows`` tasks of 10 projects, each row inserted then its title updated twice (three
  log entries a row); a client subscribes to one project and pulls until ``hasMore`` is false. Once with no
  checkpoint (the difference folds the log from its start), once with a checkpoint at the heads (two deltas a row:
  fewer than the log's three entries, so the difference reads it, ``scope_change._cheaper_checkpoint``). Rows/s is
  the rows entering over the time inside the pull calls.
* **membership**: a bucket reading a memberships table (the real ``GatewayMemberships`` reader the wiring gives every
  function); ``--rows`` tasks over 100 projects. A membership row of the client is pushed (the push service on
  DynamoDB), then the client pulls until ``hasMore`` is false: the rows moved, and the latency from before the push
  to the last page. Three inserts, then two deletes.
* **rules change**: ``--rules-rows`` tasks over 100 projects (5% ``archived``, 5% ``hidden``); ``--clients`` clients,
  each seeing 3 projects through a ``projects`` claim, caught up under rules hiding the archived rows. An admin saves
  a version hiding the hidden ones instead: each client's scope gains its archived rows and loses its hidden ones
  (about 10% of it changes). Each client's next pulls serve the difference; the alternative is a re-bootstrap of
  its whole scope, the checkpoint served per client (``gateway.checkpoint.serve``). All clients run through the same
  gateway services on in-memory stores holding the same log and checkpoint (moto's ``Query`` costs grow with the
  table, and a thousand clients reading it would take most of an hour on this machine); every ``--sample``-th client
  also runs on moto, where its bytes must equal the in-memory run's, and its time and reads are reported. The
  checkpoint served for a claim depends on the projects only, so it is served once per distinct set of projects and
  counted for every client holding it. Bytes are the JSON bodies (the pull page as the function renders it) and the
  checkpoint bodies as served.

Reads are counted on the stores: log entries (and their stored bytes) and checkpoint objects (and their bytes).
Results: ``benchmarks/results/streams.json``, ``.md`` and ``.png``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks._common import GATEWAY, HandlerEnv, batch_write, machine_info, progress
from benchmarks.pull import _RenderingBuffer

RESULTS = report.RESULTS
GOAL_RATIO = 10.0
"""Issue 43: a rules change sends at least 10x less data than re-bootstrapping every client's scope."""
WRITER = "bench-writer"
T0 = 1_765_000_000_000
LIMIT = 1000


# -- the workloads -----------------------------------------------------------------------------------------------------
def _stream_rules(projects: int) -> dict[str, Any]:
    return {
        "version": 1,
        "buckets": [],
        "streams": [
            {
                "name": "project",
                "table": "tasks",
                "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
                "params": {"project": {"subscription": {"allowed": [f"p{i}" for i in range(projects)]}}},
            }
        ],
    }


MEMBERSHIP_RULES = {
    "version": 1,
    "buckets": [
        {
            "name": "mine",
            "tables": ["tasks"],
            "filters": [
                {
                    "column": "project_id",
                    "op": "in",
                    "membership": {
                        "table": "memberships",
                        "column": "project",
                        "where": [{"column": "user", "op": "eq", "value": "jwt:sub"}],
                    },
                }
            ],
        }
    ],
}


def _claim_rules(version: int, hidden_state: str) -> dict[str, Any]:
    return {
        "version": version,
        "buckets": [
            {
                "name": "mine",
                "tables": ["tasks"],
                "filters": [
                    {"column": "project_id", "op": "in", "value": "jwt:projects"},
                    {"column": "state", "op": "neq", "value": hidden_state},
                ],
            }
        ],
    }


def _tasks(rows: int, projects: int, updates: int, *, states: bool = False) -> list[list[Any]]:
    """Pushes of ``rows`` task inserts over ``projects`` projects, then ``updates`` rounds of title updates."""
    from lakesync.core.delta import make_delta
    from lakesync.core.hlc import encode

    tick = 0

    def delta(op: str, i: int, columns: dict[str, Any]) -> Any:
        nonlocal tick
        tick += 1
        hlc = encode(T0 + tick // 1000, tick % 1000)
        return make_delta(op, table="tasks", row_id=f"t{i:06d}", client_id=WRITER, hlc=hlc, columns=columns)

    def state(i: int) -> str:
        return {0: "archived", 1: "hidden"}.get(i % 20, "open") if states else "open"

    rounds = [
        [
            delta("INSERT", i, {"project_id": f"p{i % projects}", "title": f"task {i}", "state": state(i)})
            for i in range(rows)
        ]
    ]
    rounds += [[delta("UPDATE", i, {"title": f"task {i} v{u}"}) for i in range(rows)] for u in range(updates)]
    return [r[start : start + LIMIT] for r in rounds for start in range(0, len(r), LIMIT)]


# -- the stores --------------------------------------------------------------------------------------------------------
@dataclass
class Reads:
    """What a gateway read: log entries (stored bytes) and checkpoint objects (bytes)."""

    entries: int = 0
    entry_bytes: int = 0
    objects: int = 0
    object_bytes: int = 0

    def snapshot(self) -> dict[str, int]:
        return dict(vars(self))

    def since(self, before: Mapping[str, int]) -> dict[str, int]:
        return {k: v - before[k] for k, v in vars(self).items()}


def _count_reads(deps: Any) -> Reads:
    """Wrap ``deps``' log and object reads with a counter."""
    reads = Reads()
    read_log = deps.buffer.read_log

    def counted_log(*args: Any, **kwargs: Any) -> Any:
        out = read_log(*args, **kwargs)
        reads.entries += len(out)
        reads.entry_bytes += sum(e.size for e in out)
        return out

    deps.buffer.read_log = counted_log
    if deps.objects is not None:
        get = deps.objects.get

        def counted_get(key: str) -> bytes | None:
            data: bytes | None = get(key)
            reads.objects += 1
            reads.object_bytes += len(data or b"")
            return data

        deps.objects.get = counted_get
    return reads


@dataclass
class World:
    """A seeded gateway: the deployed wiring on moto, and the same log on in-memory stores."""

    env: HandlerEnv
    names: Any
    real: Any
    memory: Any
    reads: Reads
    memory_reads: Reads
    bucket: str
    manifests: list[Any] = field(default_factory=list)

    def heads(self, deps: Any) -> dict[str, int]:
        buffer = deps.buffer
        return {s.key: h.seq for s, h in buffer.get_heads(buffer.list_shards(GATEWAY)).items()}

    def checkpoint(self) -> Any:
        """A checkpoint of the log's fold at the heads, written to both stores (nothing released)."""
        from lakesync.core.merge import fold
        from lakesync.gateway.checkpoint import encode_row, write_checkpoint

        buffer = self.memory.buffer
        rows: dict[tuple[str, str], list[Any]] = {}
        positions = self.heads(self.memory)
        server_hlc = 0
        for shard in buffer.list_shards(GATEWAY):
            after = 0
            while page := buffer.read_log(shard, after, 1000, images=False):
                for entry in page:
                    rows.setdefault((shard.table, entry.delta.row_id), []).append(entry.delta)
                    server_hlc = max(server_hlc, entry.commit_hlc)
                after = page[-1].seq
        states = [s for s in (fold(ds) for _, ds in sorted(rows.items())) if s is not None]
        manifest = None
        for objects in (self.real.objects, self.memory.objects):
            manifest = write_checkpoint(
                objects,
                gateway=GATEWAY,
                checkpoint_id=f"{T0 + len(self.manifests):013d}-{len(self.manifests):08x}",
                created_at_ms=T0,
                positions=positions,
                server_hlc=server_hlc,
                tables=sorted({t for t, _ in rows}),
                rows=(encode_row(s) for s in states),
            )
        self.manifests.append(manifest)
        return manifest


def _world(env: HandlerEnv, pushes: Iterable[list[Any]]) -> World:
    """Fresh tables and bucket holding the log of ``pushes`` (module docstring), with the deps over them."""
    import boto3

    from lakesync.aws.settings.api import Settings
    from lakesync.aws.wiring import gateway_deps
    from lakesync.core.messages import SyncPush
    from lakesync.gateway.deps import GatewayDeps, GatewaySettings
    from lakesync.gateway.membership_view import GatewayMemberships
    from lakesync.gateway.memory import (
        InMemoryActionStore,
        InMemoryConfigStore,
        InMemoryObjectStore,
        InMemorySubscriptions,
    )
    from lakesync.gateway.push import push

    names = env.new_tables()
    bucket = f"bench-checkpoints-{uuid.uuid4().hex[:8]}"
    boto3.client(
        "s3",
        endpoint_url=env.moto.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_bucket(Bucket=bucket)
    os.environ["LAKESYNC_CHECKPOINT_BUCKET"] = bucket
    buffer = _RenderingBuffer(names)
    settings = GatewaySettings(gateway_ids=frozenset({GATEWAY}), backpressure_bytes=1 << 40)  # nothing is flushed
    seeding = GatewayDeps(buffer=buffer, config=InMemoryConfigStore(), actions=InMemoryActionStore(), settings=settings)
    for deltas in pushes:
        push(seeding, GATEWAY, SyncPush(WRITER, tuple(deltas)), client_id=WRITER, trusted=True)
    client = env.raw_client()
    batch_write(client, names.deltas, buffer.log_items)
    for shard in buffer.memory.list_shards(GATEWAY):
        for table, item in buffer.shard_items(shard):
            client.put_item(TableName=table, Item=item)
    real = gateway_deps(Settings.from_env(os.environ))
    memory = GatewayDeps(
        buffer=buffer.memory,
        config=InMemoryConfigStore(),
        actions=InMemoryActionStore(),
        settings=settings,
        objects=InMemoryObjectStore(),
        subscriptions=InMemorySubscriptions(),
    )
    memory.memberships = GatewayMemberships(memory)
    return World(env, names, real, memory, _count_reads(real), _count_reads(memory), bucket)


# -- a client ----------------------------------------------------------------------------------------------------------
@dataclass
class Served:
    """What a client's pulls until ``hasMore`` is false served."""

    seconds: float = 0.0
    pages: int = 0
    deltas: int = 0
    drops: int = 0
    rows: set[str] = field(default_factory=set)
    bytes: int = 0
    protobuf_bytes: int = 0


def follow(deps: Any, client: str, claims: Mapping[str, Any], cursor: str) -> tuple[str, Served]:
    """Pull as the pull function does (its JSON page budget) until ``hasMore`` is false; each page's bytes as the
    function sends it in JSON, and in protobuf (the body and the cursor header)."""
    from lakesync.core.canonical import js_stringify
    from lakesync.core.messages import SyncResponse
    from lakesync.gateway import pull as service
    from lakesync.wire.codec import encode_sync_response

    deps = service.with_page_bytes(deps, service.json_page_bytes(deps.settings))
    served = Served()
    while True:
        start = time.perf_counter()
        page = service.pull(deps, GATEWAY, limit=LIMIT, claims=dict(claims), cursor=cursor, subscriber=client)
        body = js_stringify(page.to_json())
        served.seconds += time.perf_counter() - start
        served.pages += 1
        served.bytes += len(body.encode())
        proto = encode_sync_response(SyncResponse(page.deltas, page.server_hlc, page.has_more))
        served.protobuf_bytes += len(proto) + len(page.cursor or "")
        for d in page.deltas:
            if d.hlc == 0 and d.op.value == "DELETE":
                served.drops += 1
            else:
                served.rows.add(d.row_id)
        served.deltas += len(page.deltas)
        assert page.cursor is not None
        cursor = page.cursor
        if not page.has_more:
            return cursor, served


def _start_cursor(world: World, deps: Any) -> str:
    from lakesync.gateway.cursor import encode_cursor

    return encode_cursor(world.heads(deps))


# -- the measurements --------------------------------------------------------------------------------------------------
def backfill(env: HandlerEnv, rows: int) -> dict[str, Any]:
    """A new subscription's backfill from the log, then from a checkpoint (module docstring)."""
    from lakesync.core.rules import parse_sync_rules
    from lakesync.gateway import subscriptions as subs

    progress(f"backfill: seeding {rows} rows x 3 log entries")
    world = _world(env, _tasks(rows, 10, 2))
    deps = world.real
    deps.config.put_sync_rules(GATEWAY, parse_sync_rules(_stream_rules(10)))
    out: dict[str, Any] = {"rows": rows, "projects": 10, "log_entries": sum(world.heads(deps).values())}
    for source, project in (("log", "p1"), ("checkpoint", "p2")):
        if source == "checkpoint":
            manifest = world.checkpoint()
            out["manifest"] = {"rows": manifest.rows, "deltas": manifest.deltas, "bytes": manifest.bytes}
        client = f"backfill-{source}"
        claims = {"sub": client}
        cursor = _start_cursor(world, deps)
        subs.subscribe(deps, GATEWAY, client, claims, {"stream": "project", "params": {"project": project}})
        before = world.reads.snapshot()
        progress(f"backfill: subscribing to {project}, the difference from the {source}")
        _, served = follow(deps, client, claims, cursor)
        reads = world.reads.since(before)
        out[source] = {
            "rows": len(served.rows),
            "deltas": served.deltas,
            "pages": served.pages,
            "bytes_sent": served.bytes,
            "seconds": round(served.seconds, 3),
            "rows_per_s": round(len(served.rows) / served.seconds) if served.seconds else None,
            "reads": reads,
        }
    env.drop_tables(world.names)
    return out


def membership(env: HandlerEnv, rows: int) -> dict[str, Any]:
    """Membership rows of the client inserted and deleted; the rows each moves and how long until served."""
    from lakesync.core.delta import make_delta
    from lakesync.core.hlc import encode
    from lakesync.core.messages import SyncPush
    from lakesync.core.rules import parse_sync_rules
    from lakesync.gateway.push import push

    progress(f"membership: seeding {rows} rows over 100 projects")
    world = _world(env, _tasks(rows, 100, 0))
    deps = world.real
    deps.config.put_sync_rules(GATEWAY, parse_sync_rules(MEMBERSHIP_RULES))
    client, claims = "member-0", {"sub": "member-0"}
    cursor, _ = follow(deps, client, claims, _start_cursor(world, deps))  # the cursor takes its scope
    changes: list[dict[str, Any]] = []
    for n, (project, leave) in enumerate([("p7", False), ("p8", False), ("p9", False), ("p7", True), ("p8", True)]):
        row = f"{client}:{project}"
        op = "DELETE" if leave else "INSERT"
        columns = {} if leave else {"user": client, "project": project}
        hlc = encode(int(time.time() * 1000), n)
        delta = make_delta(op, table="memberships", row_id=row, client_id=WRITER, hlc=hlc, columns=columns)
        before = world.reads.snapshot()
        start = time.perf_counter()
        push(deps, GATEWAY, SyncPush(WRITER, (delta,)), client_id=WRITER, trusted=True)
        pushed = time.perf_counter()
        cursor, served = follow(deps, client, claims, cursor)
        changes.append(
            {
                "change": f"{'delete' if leave else 'insert'} {project}",
                "rows_entered": len(served.rows),
                "rows_dropped": served.drops,
                "deltas": served.deltas,
                "pages": served.pages,
                "bytes_sent": served.bytes,
                "push_ms": round((pushed - start) * 1000, 1),
                "latency_ms": round((time.perf_counter() - start) * 1000, 1),
                "reads": world.reads.since(before),
            }
        )
        progress(f"membership: {changes[-1]['change']}: {served.deltas} deltas, {changes[-1]['latency_ms']} ms")
    env.drop_tables(world.names)
    latencies = [float(c["latency_ms"]) for c in changes]
    return {
        "rows": rows,
        "projects": 100,
        "reader": "GatewayMemberships (gateway/membership_view.py, as aws/wiring.py gives every function)",
        "changes": changes,
        "latency_ms_median": statistics.median(latencies),
        "latency_ms_max": max(latencies),
    }


def _claims(n: int, projects: int) -> dict[str, Any]:
    first = random.Random(n).randrange(projects)
    return {"sub": f"c{n:04d}", "projects": [f"p{(first + k * 7) % projects}" for k in range(3)]}


def rules_change(env: HandlerEnv, rows: int, clients: int, sample: int) -> dict[str, Any]:
    """A new rules version for ``clients`` clients: the differences sent against re-bootstrapping each one."""
    from lakesync.aws.settings.variables import DEFAULT_PULL_BASIS_TTL_MS
    from lakesync.core.rules import parse_sync_rules
    from lakesync.gateway import checkpoint

    projects = 100
    progress(f"rules change: seeding {rows} rows over {projects} projects")
    world = _world(env, _tasks(rows, projects, 0, states=True))
    manifest = world.checkpoint()
    sampled = set(range(0, clients, sample)) if sample else set()
    sides = {"memory": (world.memory, world.memory_reads, range(clients)), "moto": (world.real, world.reads, sampled)}
    out: dict[str, Any] = {"rows": rows, "projects": projects, "clients": clients, "checkpoint_rows": manifest.rows}
    per_client: dict[str, dict[int, Served]] = {}
    for side, (deps, reads, which) in sides.items():
        deps.config.put_sync_rules(GATEWAY, parse_sync_rules(_claim_rules(1, "archived")))
        start_cursor = _start_cursor(world, deps)
        cursors = {n: follow(deps, f"c{n:04d}", _claims(n, projects), start_cursor)[0] for n in which}
        deps.config.put_sync_rules(GATEWAY, parse_sync_rules(_claim_rules(2, "hidden")))
        if side == "moto":
            time.sleep(DEFAULT_PULL_BASIS_TTL_MS / 1000 + 0.05)  # a process serves the rules it read for a second
        progress(f"rules change: {len(cursors)} clients pull their difference ({side})")
        before = reads.snapshot()
        served = {n: follow(deps, f"c{n:04d}", _claims(n, projects), c)[1] for n, c in cursors.items()}
        per_client[side] = served
        out[side] = _difference_totals(served, reads.since(before))
    mismatched = [n for n, s in per_client["moto"].items() if _what(s) != _what(per_client["memory"][n])]
    out["moto_sample_matches_memory"] = not mismatched
    progress("rules change: re-bootstrapping every client from the checkpoint")
    out["bootstrap"] = _bootstrap(world.memory, checkpoint.serve, clients, projects)
    out["ratio_bytes"] = round(out["bootstrap"]["bytes"] / max(out["memory"]["protobuf_bytes_sent"], 1), 1)
    out["ratio_bytes_json"] = round(out["bootstrap"]["bytes"] / max(out["memory"]["bytes_sent"], 1), 1)
    out["ratio_deltas"] = round(out["bootstrap"]["deltas"] / max(out["memory"]["deltas"], 1), 1)
    out["goal_ratio"] = GOAL_RATIO
    out["met"] = out["ratio_bytes"] >= GOAL_RATIO
    env.drop_tables(world.names)
    return out


def _what(served: Served) -> tuple[int, int, frozenset[str]]:
    """What a client was sent, whatever the clock (the pages' ``serverHlc`` differ between stores)."""
    return served.deltas, served.drops, frozenset(served.rows)


def _difference_totals(served: Mapping[int, Served], reads: Mapping[str, int]) -> dict[str, Any]:
    clients = max(len(served), 1)
    seconds = [s.seconds * 1000 for s in served.values()]
    return {
        "clients": len(served),
        "bytes_sent": sum(s.bytes for s in served.values()),
        "protobuf_bytes_sent": sum(s.protobuf_bytes for s in served.values()),
        "deltas": sum(s.deltas for s in served.values()),
        "rows_entered": sum(len(s.rows) for s in served.values()),
        "rows_dropped": sum(s.drops for s in served.values()),
        "pages": sum(s.pages for s in served.values()),
        "ms_per_client_median": round(statistics.median(seconds), 1) if seconds else None,
        "reads": dict(reads),
        "read_bytes_per_client": round((reads["entry_bytes"] + reads["object_bytes"]) / clients),
    }


def _bootstrap(deps: Any, serve: Callable[..., Any], clients: int, projects: int) -> dict[str, Any]:
    from lakesync.wire.framing import iter_checkpoint_responses

    by_projects: dict[tuple[str, ...], tuple[int, int]] = {}
    total_bytes = total_deltas = 0
    for n in range(clients):
        claims = _claims(n, projects)
        key = tuple(claims["projects"])
        if key not in by_projects:
            payload = serve(deps, GATEWAY, claims)
            body = payload.body
            deltas = sum(len(r.deltas) for r in iter_checkpoint_responses(body))
            by_projects[key] = (len(body), deltas)
        size, deltas = by_projects[key]
        total_bytes += size
        total_deltas += deltas
    return {"bytes": total_bytes, "deltas": total_deltas, "distinct_claims": len(by_projects)}


# -- the results -------------------------------------------------------------------------------------------------------
def render(doc: Mapping[str, Any]) -> str:
    """The Markdown results."""
    b, m, r = doc["backfill"], doc["membership"], doc["rules_change"]
    lines = [
        "# Streams: scope changes served as differences",
        "",
        f"Run {doc['timestamp']} in {doc['duration_s']} s (`make bench-streams`, benchmarks/streams.py; what each"
        " figure measures is in its docstring).",
        "",
        *report.machine_lines(doc["machine"]),
        "",
        "![Bytes sent for a rules change: the difference against re-bootstrapping](streams.png)",
        "",
        f"## Backfill of a new subscription ({b['rows']:,} rows, {b['log_entries']:,} log entries, one project of"
        f" {b['projects']})",
        "",
        *report.table(
            ["source", "rows", "deltas", "pages", "s", "rows/s", "log entries read", "checkpoint objects (bytes)"],
            [
                [
                    s,
                    b[s]["rows"],
                    b[s]["deltas"],
                    b[s]["pages"],
                    b[s]["seconds"],
                    b[s]["rows_per_s"],
                    f"{b[s]['reads']['entries']:,}",
                    f"{b[s]['reads']['objects']} ({b[s]['reads']['object_bytes']:,})",
                ]
                for s in ("log", "checkpoint")
            ],
            align="lrrrrrrr",
        ),
        "",
        f"The checkpoint: {b['manifest']['rows']:,} rows, {b['manifest']['deltas']:,} deltas,"
        f" {b['manifest']['bytes']:,} bytes; fewer deltas than the log's entries, so the difference reads it"
        ' (docs/streams.md, "The source by cost"). The log source reads the log once for all'
        " its pages (the range read is kept for the next ones: gateway/tail_cache.py).",
        "",
        f"## Membership changes ({m['rows']:,} rows over {m['projects']} projects; reader: {m['reader']})",
        "",
        *report.table(
            ["change", "rows in", "rows dropped", "deltas", "pages", "push ms", "latency ms", "log entries read"],
            [
                [
                    c["change"],
                    c["rows_entered"],
                    c["rows_dropped"],
                    c["deltas"],
                    c["pages"],
                    c["push_ms"],
                    c["latency_ms"],
                    f"{c['reads']['entries']:,}",
                ]
                for c in m["changes"]
            ],
            align="lrrrrrrr",
        ),
        "",
        "Latency: from before the push of the membership row to the client's last page of the difference"
        f" (median {m['latency_ms_median']} ms, max {m['latency_ms_max']} ms).",
        "",
        f"## A rules change for {r['clients']:,} clients ({r['rows']:,} rows over {r['projects']} projects, 3"
        " projects a client)",
        "",
        *report.table(
            ["sent to all clients", "bytes (protobuf)", "bytes (JSON)", "deltas"],
            [
                [
                    "the difference (rows entering with their state, leaving as drops)",
                    f"{r['memory']['protobuf_bytes_sent']:,}",
                    f"{r['memory']['bytes_sent']:,}",
                    f"{r['memory']['deltas']:,}",
                ],
                [
                    "re-bootstrapping each client's scope (the checkpoint served, protobuf)",
                    f"{r['bootstrap']['bytes']:,}",
                    "",
                    f"{r['bootstrap']['deltas']:,}",
                ],
                ["ratio", f"{r['ratio_bytes']}x", f"{r['ratio_bytes_json']}x", f"{r['ratio_deltas']}x"],
            ],
            align="lrrr",
        ),
        "",
        f"Goal: at least {r['goal_ratio']:.0f}x less data: {'met' if r['met'] else 'MISSED'}"
        f" ({r['ratio_bytes']}x in the checkpoint's encoding, protobuf; a JSON pull sends"
        f" {r['ratio_bytes_json']}x less than the protobuf checkpoint). Rows entering"
        f" {r['memory']['rows_entered']:,}, dropped {r['memory']['rows_dropped']:,},"
        f" in {r['memory']['pages']:,} pages.",
        "",
        "The read cost of the difference (the price of sending less): every client's difference folds the whole"
        f" table as of its cursor. In memory, all {r['memory']['clients']:,} clients read"
        f" {r['memory']['reads']['entries']:,} log entries ({r['memory']['reads']['entry_bytes']:,} bytes) and"
        f" {r['memory']['reads']['objects']:,} checkpoint objects ({r['memory']['reads']['object_bytes']:,} bytes):"
        f" {r['memory']['read_bytes_per_client']:,} bytes a client, against a checkpoint of"
        f" {r['checkpoint_rows']:,} rows that has as many deltas as the log has entries (the log is read).",
        "",
        f"On moto ({r['moto']['clients']} sampled clients, the deployed wiring): {r['moto']['ms_per_client_median']} ms"
        f" a client (median), {r['moto']['read_bytes_per_client']:,} bytes read a client; the deltas they were"
        f" sent {'equal' if r['moto_sample_matches_memory'] else 'DIFFER FROM'} the in-memory run's. In memory:"
        f" {r['memory']['ms_per_client_median']} ms a client.",
        "",
    ]
    return "\n".join(lines)


def plot(doc: Mapping[str, Any], path: Path) -> bool:
    """Bytes sent for the rules change, difference against re-bootstrap (``False``: matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    r = doc["rules_change"]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    values = [r["memory"]["protobuf_bytes_sent"] / 1e6, r["memory"]["bytes_sent"] / 1e6, r["bootstrap"]["bytes"] / 1e6]
    labels = ["difference (protobuf)", "difference (JSON)", "re-bootstrap (protobuf)"]
    ax.barh(labels, values, color=["#2a7", "#7c9", "#c44"])
    ax.set_xlabel(f"MB sent to {r['clients']:,} clients after a rules change")
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:.2f} MB", va="center")
    ax.set_xlim(0, max(values) * 1.25)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def run(rows: int, rules_rows: int, clients: int, sample: int) -> dict[str, Any]:
    """All three measurements on one moto server."""
    started = time.monotonic()
    machine = machine_info()
    machine["load_average_start"] = report.load_average()
    with HandlerEnv() as env:
        doc: dict[str, Any] = {
            "backfill": backfill(env, rows),
            "membership": membership(env, rows),
            "rules_change": rules_change(env, rules_rows, clients, sample),
        }
    machine["load_average_end"] = report.load_average()
    return {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "duration_s": round(time.monotonic() - started),
        "machine": machine,
        **doc,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000, help="tasks of the backfill and membership workloads")
    parser.add_argument("--rules-rows", type=int, default=12_000, help="tasks of the rules-change workload")
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--sample", type=int, default=50, help="every n-th client also runs on moto")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    doc = run(args.rows, args.rules_rows, args.clients, args.sample)
    report.write(doc, args.out, stem="streams", render=render)
    plot(doc, args.out / "streams.png")
    r = doc["rules_change"]
    progress(f"rules change: {r['ratio_bytes']}x less data than re-bootstrapping (goal {GOAL_RATIO:.0f}x)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
