"""The push/pull workload: JSON pushes through ``functions.push``, cursor pulls through ``functions.pull``."""

from __future__ import annotations

from typing import Any

from benchmarks.cost.environment import CostEnv, expect_ok
from benchmarks.cost.model import item_size
from benchmarks.cost.workloads import PUSH_GATEWAY, WRITER, make_deltas, pull_event, push_event


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
    expect_ok(warm, "warm-up push")
    for client in clients:
        doc = expect_ok(env.invoke(pull_module, pull_event(PUSH_GATEWAY, tokens[client], client, "")), "warm-up pull")
        cursors[client] = doc.get("cursor", "")
    pulled = 0
    for start in range(0, deltas, batch):
        chunk = make_deltas(min(batch, deltas - start), row_bytes=row_bytes, prefix=f"{mode}-{tag}-{start}")
        with env.measuring(mode, f"{tag}:push"):
            expect_ok(env.invoke(push_module, push_event(PUSH_GATEWAY, writer, chunk)), "push")
        for i, client in enumerate(clients):
            with env.measuring(mode, f"{tag}:pull{i}"):
                doc = expect_ok(
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


def _stored_bytes(env: CostEnv, names: Any) -> dict[str, dict[str, float]]:
    """Items and bytes stored per table (item sizes plus DynamoDB's 100 bytes of overhead per item), uncounted."""

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
