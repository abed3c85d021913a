"""Push throughput through the full handler path, against raw DynamoDB write floors on the same moto server.

One repetition, on fresh tables each side:

* **handler**: ``functions.push.lambda_handler`` called with API Gateway v2 events (built beforehand, as API Gateway
  would) carrying JSON bodies of ``batch`` deltas: routing, JWT verification, body parsing, whole-batch validation,
  then the push service, which per chunk of 48 deltas reads its basis (the shard head, the rows and the deltaId
  records), commits the chunk's log item (one conditional ``PutItem``), writes the chunk's rows on its turn
  (``BatchWriteItem``, 25 a request; docs/design/row-writes-in-batches.md), moves the head, and records the deltaIds
  of deltas that changed nothing with ``BatchWriteItem``.
* **floor C, raw writes of the same items**: ``BatchWriteItem`` (25 per request) of every item the handler run
  stored -- log, row, deltaId, head and shard-registry items, read back from its tables -- unconditional, no reads.
* **floor A, raw log writes** (the figure the goal is set against): ``BatchWriteItem`` of the log alone, one item
  per delta (the handler's entries with their delta and row images, as the buffer stored them before it kept a
  chunk per item).
* **floor B, raw replay**: the very write requests the handler run sent (``PutItem``, ``UpdateItem`` and
  ``BatchWriteItem``, recorded on its client), replayed in order on fresh tables: the storage work of a push without
  its reads and without our code.

Workload: ``deltas`` INSERTs of distinct rows of one table (one shard), three columns each, from one client.
"""

from __future__ import annotations

import cProfile
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import (
    GATEWAY,
    TABLE,
    CallRecorder,
    HandlerEnv,
    batch_write,
    make_deltas,
    one_item_per_delta,
    progress,
    push_events,
    query_all,
    retarget_request,
    scan_all,
    summarize,
    timed,
)
from benchmarks._profile import breakdown, cumulative
from lakesync.io_pool import inline

SHARD = f"{GATEWAY}#{TABLE}#0"
GOAL_RATIO = 0.7
"""Issue 15: the handler at least 0.7x floor A (raw ``BatchWriteItem`` of one log item per delta)."""


def _handler_run(env: HandlerEnv, push_module: Any, deltas: list[Any], batch: int) -> dict[str, Any]:
    names = env.new_tables()
    events = push_events(deltas, batch, env.token())
    recorder = CallRecorder(record=frozenset({"BatchWriteItem", "PutItem", "UpdateItem"}))
    with recorder.attached(env.handler_client()):
        seconds = 0.0
        for event in events:
            start = time.perf_counter()
            result = env.invoke(push_module, event)
            seconds += time.perf_counter() - start
            if result["statusCode"] != 200:
                raise RuntimeError(f"push failed: {result['statusCode']} {result.get('body', '')[:300]}")
    return {"names": names, "seconds": seconds, "recorder": recorder, "requests": len(events)}


def _floor_log_writes(env: HandlerEnv, log_items: list[dict[str, Any]]) -> tuple[float, int]:
    names = env.new_tables(use_for_handlers=False)
    try:
        return timed(lambda: batch_write(env.raw_client(), names.deltas, log_items))
    finally:
        env.drop_tables(names)


def _floor_all_items(env: HandlerEnv, source: Any) -> tuple[float, int, int]:
    """Raw ``BatchWriteItem`` of every item stored in the handler run's tables. Returns (seconds, requests, items)."""
    raw = env.raw_client()
    items = {kind: scan_all(raw, table) for kind, table in source.as_dict().items()}
    names = env.new_tables(use_for_handlers=False)
    targets = names.as_dict()
    try:

        def write_all() -> int:
            return sum(batch_write(raw, targets[kind], table_items) for kind, table_items in items.items())

        seconds, requests = timed(write_all)
        return seconds, requests, sum(len(v) for v in items.values())
    finally:
        env.drop_tables(names)


def _floor_replay(env: HandlerEnv, source: Any, recorded: list[tuple[str, dict[str, Any]]]) -> float:
    names = env.new_tables(use_for_handlers=False)
    client = env.raw_client()
    moved = [(op, retarget_request(op, params, source, names)) for op, params in recorded]
    calls = {
        "BatchWriteItem": client.batch_write_item,
        "PutItem": client.put_item,
        "UpdateItem": client.update_item,
    }
    try:
        seconds, _ = timed(lambda: [calls[op](**params) for op, params in moved])
        items, _ = query_all(client, names.deltas, SHARD, page=1000)
        if len(items) != _commits(recorded, source):
            raise RuntimeError("replayed requests did not write the expected log items")
        return seconds
    finally:
        env.drop_tables(names)


def _repetition(env: HandlerEnv, push_module: Any, count: int, batch: int, tag: str) -> dict[str, Any]:
    deltas = make_deltas(count, row_prefix=tag)
    run = _handler_run(env, push_module, deltas, batch)
    names = run["names"]
    chunks, _ = query_all(env.raw_client(), names.deltas, SHARD, page=1000)
    log_items = one_item_per_delta(chunks)
    if len(log_items) != count:
        raise RuntimeError(f"expected {count} log entries after the push, found {len(log_items)}")
    floor_a, floor_a_requests = _floor_log_writes(env, log_items)
    floor_c, floor_c_requests, floor_c_items = _floor_all_items(env, names)
    recorder: CallRecorder = run["recorder"]
    floor_b = _floor_replay(env, names, recorder.recorded)
    env.drop_tables(names)
    return {
        "handler_s": run["seconds"],
        "floor_all_items_s": floor_c,
        "floor_log_writes_s": floor_a,
        "floor_replay_s": floor_b,
        "handler_requests": run["requests"],
        "floor_all_items_requests": floor_c_requests,
        "floor_all_items": floor_c_items,
        "floor_log_write_requests": floor_a_requests,
        "calls": dict(recorder.calls),
        "retries": recorder.retries,
        "commits": _commits(recorder.recorded, names),
    }


def _commits(recorded: list[tuple[str, dict[str, Any]]], names: Any) -> int:
    """The commits among recorded write requests: each is one ``PutItem`` of its chunk's log item."""
    return sum(1 for op, params in recorded if op == "PutItem" and params["TableName"] == names.deltas)


def run(*, deltas: int, batch: int, repetitions: int, warmup_deltas: int) -> dict[str, Any]:
    """Measure push throughput (see the module docstring); returns the figures for the results file."""
    import functions.push as push_module

    with HandlerEnv() as env:
        progress(f"push: warm-up ({warmup_deltas} deltas, handler + both floors)")
        _repetition(env, push_module, warmup_deltas, min(batch, warmup_deltas), "warm")
        reps = []
        for i in range(repetitions):
            rep = _repetition(env, push_module, deltas, batch, f"rep{i}")
            reps.append(rep)
            progress(
                f"push: repetition {i + 1}/{repetitions}: handler {deltas / rep['handler_s']:.0f} deltas/s, "
                f"raw writes of the same items {deltas / rep['floor_all_items_s']:.0f}/s, "
                f"raw log writes {deltas / rep['floor_log_writes_s']:.0f}/s, "
                f"raw replay {deltas / rep['floor_replay_s']:.0f}/s"
            )

    def rates(key: str) -> dict[str, Any]:
        return summarize([deltas / r[key] for r in reps], digits=1)

    ratio_a = summarize([r["floor_log_writes_s"] / r["handler_s"] for r in reps], digits=3)
    ratio_b = summarize([r["floor_replay_s"] / r["handler_s"] for r in reps], digits=3)
    ratio_c = summarize([r["floor_all_items_s"] / r["handler_s"] for r in reps], digits=3)
    first = reps[0]
    chunks = first["commits"]
    result = {
        "workload": {
            "deltas": deltas,
            "deltas_per_request": batch,
            "requests": first["handler_requests"],
            "shape": "INSERTs of distinct rows, one table (one shard), 3 columns, one client, JSON bodies",
            "repetitions": repetitions,
            "warmup_deltas": warmup_deltas,
        },
        "handler_deltas_per_s": rates("handler_s"),
        "floor_all_items_deltas_per_s": rates("floor_all_items_s"),
        "floor_log_writes_deltas_per_s": rates("floor_log_writes_s"),
        "floor_replay_deltas_per_s": rates("floor_replay_s"),
        "ratio_vs_all_items": ratio_c,
        "ratio_vs_log_writes": ratio_a,
        "ratio_vs_replay": ratio_b,
        "goal": {"ratio_vs_log_writes_at_least": GOAL_RATIO, "met": ratio_a["median"] >= GOAL_RATIO},
        "dynamodb_calls": {
            "handler": first["calls"],
            "handler_total": sum(first["calls"].values()),
            "handler_per_commit": round(sum(first["calls"].values()) / chunks, 2),
            "floor_all_items_total": first["floor_all_items_requests"],
            "floor_log_writes_total": first["floor_log_write_requests"],
            "commits": chunks,
            "items_written_per_delta_floor_all_items": round(first["floor_all_items"] / deltas, 3),
            "items_written_per_delta_floor_log_writes": 1,
            "handler_sdk_retries_total": sum(r["retries"] for r in reps),
        },
        "moto_fast_json": env.moto.fast_json_report,
    }
    return result


def profile(*, deltas: int, batch: int) -> dict[str, Any]:
    """cProfile of one handler push run: the client process and (separately) the moto server process."""
    import functions.push as push_module

    with tempfile.TemporaryDirectory() as tmp:
        server_profile = Path(tmp) / "moto.prof"
        client_profile = Path(tmp) / "client.prof"
        with HandlerEnv(profile=server_profile) as env:
            warm = make_deltas(64, row_prefix="pwarm")
            env.new_tables()
            for event in push_events(warm, 64, env.token()):
                env.invoke(push_module, event)
            env.new_tables()
            events = push_events(make_deltas(deltas, row_prefix="prof"), batch, env.token())
            profiler = cProfile.Profile()
            with inline():  # the pool's work in this thread, where cProfile sees it
                profiler.enable()
                for event in events:
                    env.invoke(push_module, event)
                profiler.disable()
            profiler.dump_stats(str(client_profile))
        client = breakdown(client_profile)
        server = breakdown(server_profile, server=True)
        ops = cumulative(
            server_profile,
            {
                op: f"moto/dynamodb/responses.py:{op}"
                for op in ("put_item", "update_item", "batch_get_item", "query", "get_item", "batch_write_item")
            },
        )
        ops["condition expression parsing (moto)"] = cumulative(
            server_profile, {"x": "moto/dynamodb/comparisons.py:get_filter_expression"}
        )["x"]
        client_ops = cumulative(
            client_profile,
            {
                "push service (lakesync.gateway.push.push), incl. its DynamoDB calls": "lakesync/gateway/push.py:push",
                "DynamoDB calls (botocore _make_api_call)": "botocore/client.py:_make_api_call",
                "JSON body parsing (functions._http.parse_json)": "functions/_http.py:parse_json",
                "SyncPush.from_json": "lakesync/core/messages.py:from_json",
                "push validation (_validate)": "lakesync/gateway/push.py:_validate",
                "merge + commit planning (_plan)": "lakesync/gateway/push.py:_plan",
                "commit request building + send (DynamoDBBufferStore.commit)": "lakesync/aws/buffer/commit.py:commit",
                "response JSON (PushResult.to_json)": "lakesync/gateway/push.py:to_json",
            },
        )
    progress("push: profile done")
    return {
        "deltas": deltas,
        "client": client,
        "client_functions": client_ops,
        "moto": server,
        "moto_operations": ops,
    }


def quick_summary(result: dict[str, Any]) -> str:
    """One line for the console."""
    return (
        f"push: handler {result['handler_deltas_per_s']['median']:.0f} deltas/s; "
        f"vs raw log writes of one item per delta (floor A) {result['ratio_vs_log_writes']['median']:.3f}x "
        f"(goal >= {GOAL_RATIO}); vs raw writes of the same items {result['ratio_vs_all_items']['median']:.3f}x; "
        f"vs raw replay {result['ratio_vs_replay']['median']:.3f}x"
    )
