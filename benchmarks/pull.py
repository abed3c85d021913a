"""Pull of pending deltas through the full handler path, against a raw paginated Query of the same items.

Setup (not timed): ``deltas`` INSERTs of distinct rows of one table go through the real push service, over
in-memory stores whose commits are also rendered by the real DynamoDB store code (:class:`_RenderingBuffer`);
the rendered log items, the shard head and the shard-registry item are then written with ``BatchWriteItem`` /
``PutItem``. The log is thus exactly what pushes write (first-keyed chunks), without paying for the commits' reads,
row writes and head updates on moto during setup. Row and dedup items are not written: a pull reads
neither.

One repetition, on the same seeded tables:

* **handler**: a client pages with ``functions.pull.lambda_handler`` (each API Gateway v2 event carries the
  previous response's ``cursor``; the first an empty one) with ``limit`` deltas a page until ``hasMore`` is false.
  Only the time inside the handler calls counts (not building events, nor reading responses). Each invocation:
  routing, JWT verification, query parsing, one consistent config ``Query`` for the sync rules (none are set:
  every delta is visible) and the shard registry, consistent ``Query`` pages of the log, decompressing each log
  item into its entries, and the JSON response. The shard heads (release marks) are read only
  when a shard's log read comes back empty, which no page of this workload does.
* **floor A** (the figure the goal is set against, as push's floor A is): a consistent ``Query`` page of the log as
  issue 15 measured it, one item per delta (the delta with its row images), ``Limit`` = ``limit``, as many pages
  as the handler serves; the items stay as boto3 returns them. Its table holds exactly one page of those items,
  read again for every page: moto scans the whole table and sorts the partition on every ``Query``, so a
  partition of all the deltas would charge each page for the others too. What the SDK alone spends parsing one
  such page (``botocore``'s parser on the recorded response body, no emulator involved) is reported beside it.
* **raw**: a consistent ``Query`` of the shard's log as it is stored, ``Limit`` = the number of log items that hold
  ``limit`` deltas (the log keeps a commit's entries in one item), following ``LastEvaluatedKey`` to the end; the
  items stay as boto3 returns them (attribute-value dicts, entries still compressed).
* **replay**: the exact DynamoDB requests one handler pass made (recorded on its client), sent again in order by
  the raw client. handler / replay is what our code adds on top of its own DynamoDB calls; replay / raw is what
  those calls cost beyond the plain Query.

* **raw + inflate**: the raw side, then every item's entries decompressed: the least any reader that sends the
  deltas must do with the log as it is stored. Not the goal's reference; it shows how much of the gap is the
  compression alone.

The order of the sides rotates between repetitions.
"""

from __future__ import annotations

import cProfile
import json
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from benchmarks._common import (
    CLIENT_ID,
    GATEWAY,
    TABLE,
    CallRecorder,
    HandlerEnv,
    batch_write,
    make_deltas,
    one_item_per_delta,
    progress,
    pull_event,
    query_all,
    query_page,
    replay,
    summarize,
    timed,
)
from benchmarks._moto import VERIFY_FIRST
from benchmarks._profile import breakdown
from lakesync.io_pool import inline

SHARD = f"{GATEWAY}#{TABLE}#0"
GOAL_RATIO = 1.05
"""Issue 15: a pull pass at most 1.05x the raw ``Query`` of the log as the issue measured it (floor A)."""


class _RenderingBuffer:
    """An in-memory buffer whose commits are also rendered into the log items the real DynamoDB store puts."""

    def __init__(self, names: Any) -> None:
        from lakesync.aws.buffer.store import DynamoDBBufferStore
        from lakesync.gateway.memory import InMemoryBufferStore

        self.memory = InMemoryBufferStore()
        # Only renders items: it is never asked to send a request.
        self.renderer = DynamoDBBufferStore(None, names)  # type: ignore[arg-type]
        self.log_items: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.memory, name)

    def commit(self, commit: Any) -> None:
        self.memory.commit(commit)
        self.log_items.append(self.renderer._chunk_item(commit))

    def shard_items(self, shard: Any) -> list[tuple[str, dict[str, Any]]]:
        """``(table, item)`` of the shard's head, at its final values with every row written, and its registry
        entry: what its commits leave."""
        from lakesync.aws.buffer.items import new_head_item, registry_item

        names = self.renderer._t
        head = self.memory.get_heads([shard])[shard]
        return [
            (names.heads, new_head_item(head, applied=head.seq)),
            (names.config, registry_item(shard)),
        ]


def seed(env: HandlerEnv, count: int) -> Any:
    """Fresh tables holding ``count`` pending deltas of one shard (see the module docstring)."""
    from lakesync.core.log import ShardId
    from lakesync.core.messages import SyncPush
    from lakesync.gateway.deps import GatewayDeps, GatewaySettings
    from lakesync.gateway.memory import InMemoryActionStore, InMemoryConfigStore
    from lakesync.gateway.push import push

    names = env.new_tables()
    buffer = _RenderingBuffer(names)
    deps = GatewayDeps(
        buffer=buffer,
        config=InMemoryConfigStore(),
        actions=InMemoryActionStore(),
        settings=GatewaySettings(gateway_ids=frozenset({GATEWAY})),
    )
    deltas = make_deltas(count, row_prefix="pull")
    for start in range(0, count, 1000):
        push(deps, GATEWAY, SyncPush(CLIENT_ID, tuple(deltas[start : start + 1000])), client_id=CLIENT_ID)
    client = env.raw_client()
    batch_write(client, names.deltas, buffer.log_items)
    for table, item in buffer.shard_items(ShardId(GATEWAY, TABLE)):
        client.put_item(TableName=table, Item=item)
    return names


def _pull_all(
    env: HandlerEnv, pull_module: Any, token: str, limit: int, *, max_pages: int | None = None
) -> tuple[float, int, int]:
    """Page through the handler until ``hasMore`` is false (or ``max_pages`` pages).

    Returns:
        (seconds inside the handler calls, deltas received, requests). Building the events (API Gateway's work)
        and reading the responses (the client's) are not counted.
    """
    cursor = ""
    seconds = 0.0
    received = 0
    requests = 0
    while True:
        event = pull_event(token, limit=limit, cursor=cursor)
        start = time.perf_counter()
        result = env.invoke(pull_module, event)
        seconds += time.perf_counter() - start
        requests += 1
        if result["statusCode"] != 200:
            raise RuntimeError(f"pull failed: {result['statusCode']} {result.get('body', '')[:300]}")
        body = json.loads(result["body"])
        received += len(body["deltas"])
        cursor = body["cursor"]
        if not body["hasMore"] or requests == max_pages:
            return seconds, received, requests


def run(*, deltas: int, limit: int, repetitions: int, profile: bool | None = None) -> dict[str, Any]:
    """Measure the pull (see the module docstring). Returns the figures for the results file.

    Args:
        deltas: Pending deltas to seed.
        limit: Deltas per pull request (and ``Limit`` of the raw Query).
        repetitions: Measured repetitions of each side.
        profile: Profile one more handler pass with cProfile: always (True), never (False), or when the goal is
            missed (None).
    """
    import functions.pull as pull_module

    with HandlerEnv() as env:
        progress(f"pull: seeding {deltas} deltas through the push service")
        seconds, names = timed(lambda: seed(env, deltas))
        progress(f"pull: seeded in {seconds:.1f}s")
        token = env.token()
        raw = env.raw_client()

        last = {"received": 0, "requests": 0, "fetched": 0, "raw_requests": 0}
        calls: list[tuple[str, dict[str, Any]]] = []

        def handler_side() -> float:
            elapsed, last["received"], last["requests"] = _pull_all(env, pull_module, token, limit)
            return elapsed

        # The log keeps a commit's entries in one item: the raw side pages by as many items as hold `limit` entries.
        stored, _ = query_all(raw, names.deltas, SHARD, page=1000)
        raw_page = max(1, round(limit * len(stored) / deltas))

        def raw_side() -> float:
            elapsed, (items, last["raw_requests"]) = timed(lambda: query_all(raw, names.deltas, SHARD, page=raw_page))
            last["fetched"] = sum(int(item["n"]["N"]) for item in items)
            return elapsed

        floor_names = env.new_tables(use_for_handlers=False)
        batch_write(raw, floor_names.deltas, one_item_per_delta(stored)[:limit])
        floor_pages = [min(limit, deltas - start) for start in range(0, deltas, limit)]

        def floor_a_query(page: int) -> dict[str, Any]:
            return query_page(raw, floor_names.deltas, SHARD, page=page)

        def floor_a_side() -> float:
            elapsed, counts = timed(lambda: [len(floor_a_query(page)["Items"]) for page in floor_pages])
            last["floor_a_items"] = sum(counts)
            return elapsed

        def replay_side() -> float:
            return timed(lambda: replay(raw, calls))[0]

        def inflate_side() -> float:
            def read_and_inflate() -> None:
                items, _ = query_all(raw, names.deltas, SHARD, page=raw_page)
                for item in items:
                    zlib.decompress(item["z"]["B"])

            return timed(read_and_inflate)[0]

        progress("pull: warm-up (a first page each side)")
        sdk_parse_ms = _sdk_parse_ms(raw, lambda: floor_a_query(floor_pages[0]))
        env.invoke(pull_module, pull_event(token, limit=limit, cursor=""))
        raw.query(
            TableName=names.deltas,
            KeyConditionExpression="#sh = :s",
            ExpressionAttributeNames={"#sh": "shard"},
            ExpressionAttributeValues={":s": {"S": SHARD}},
            Limit=limit,
        )

        handler_s: list[float] = []
        raw_s: list[float] = []
        replay_s: list[float] = []
        inflate_s: list[float] = []
        floor_a_s: list[float] = []
        recorder = CallRecorder(record=frozenset({"GetItem", "Query", "BatchGetItem"}))
        with recorder.attached(env.handler_client()):
            handler_side()
        calls.extend(recorder.recorded)
        sides = (
            (handler_side, handler_s),
            (floor_a_side, floor_a_s),
            (raw_side, raw_s),
            (replay_side, replay_s),
            (inflate_side, inflate_s),
        )
        for i in range(repetitions):
            for side, samples in sides[i % len(sides) :] + sides[: i % len(sides)]:
                samples.append(side())
            if last["received"] != deltas or last["fetched"] != deltas or last["floor_a_items"] != deltas:
                raise RuntimeError(
                    f"expected {deltas} deltas: handler gave {last['received']}, Query {last['fetched']}, "
                    f"floor A {last['floor_a_items']}"
                )
            progress(
                f"pull: repetition {i + 1}/{repetitions}: handler {handler_s[-1]:.3f}s, floor A {floor_a_s[-1]:.2f}s "
                f"({handler_s[-1] / floor_a_s[-1]:.2f}x), raw Query of the stored chunks {raw_s[-1]:.3f}s "
                f"({handler_s[-1] / raw_s[-1]:.2f}x), the handler's own calls replayed raw {replay_s[-1]:.3f}s, "
                f"raw Query then inflated {inflate_s[-1]:.3f}s"
            )
        handler_summary, floor_a_summary = summarize(handler_s), summarize(floor_a_s)
        ratio_floor_a = summarize([h / f for h, f in zip(handler_s, floor_a_s, strict=True)], digits=3)
        ratio = summarize([h / r for h, r in zip(handler_s, raw_s, strict=True)], digits=3)
        ratio_replay = summarize([h / r for h, r in zip(handler_s, replay_s, strict=True)], digits=3)
        ratio_inflate = summarize([h / r for h, r in zip(handler_s, inflate_s, strict=True)], digits=3)
        profiled = None
        if profile or (profile is None and ratio_floor_a["median"] > GOAL_RATIO):
            profiled = _profile_pass(env, pull_module, token, limit)
        env.drop_tables(names)
        env.drop_tables(floor_names)

    return {
        "workload": {
            "pending_deltas": deltas,
            "limit_per_request": limit,
            "shape": "INSERTs of distinct rows, one table (one shard), 3 columns; no sync rules; JSON responses",
            "repetitions": repetitions,
        },
        "handler_s": handler_summary,
        "raw_query_s": summarize(raw_s),
        "handler_deltas_per_s": summarize([deltas / s for s in handler_s], digits=1),
        "floor_a_s": floor_a_summary,
        "floor_a_deltas_per_s": summarize([deltas / s for s in floor_a_s], digits=1),
        "ratio_handler_over_floor_a": ratio_floor_a,
        "handler_ms_per_page": round(handler_summary["median"] * 1000 / len(floor_pages), 2),
        "floor_a_ms_per_page": round(floor_a_summary["median"] * 1000 / len(floor_pages), 2),
        "floor_a_sdk_parse_ms_per_page": sdk_parse_ms,
        "raw_query_deltas_per_s": summarize([deltas / s for s in raw_s], digits=1),
        "replay_of_handler_calls_s": summarize(replay_s),
        "ratio_handler_over_raw": ratio,
        "ratio_handler_over_replay": ratio_replay,
        "raw_query_and_inflate_s": summarize(inflate_s),
        "ratio_handler_over_raw_and_inflate": ratio_inflate,
        "ratio_raw_and_inflate_over_raw": summarize([f / r for f, r in zip(inflate_s, raw_s, strict=True)], digits=3),
        "goal": {"ratio_at_most": GOAL_RATIO, "met": ratio_floor_a["median"] <= GOAL_RATIO},
        "requests": {
            "handler_invocations": last["requests"],
            "handler_dynamodb_calls_per_pass": dict(recorder.calls),
            "raw_queries": last["raw_requests"],
            "floor_a_queries": len(floor_pages),
            "handler_sdk_retries_total": recorder.retries,
        },
        "profile": profiled,
        "moto_fast_json": env.moto.fast_json_report,
    }


def _sdk_parse_ms(client: Any, query: Any) -> float:
    """Milliseconds (the least of several) botocore's parser takes over one response body of ``query``, recorded on
    ``client``: the SDK's own share of a page, whatever answers the request. ``query`` is also sent enough times to
    get past the moto patch's checked responses."""
    import botocore.parsers

    bodies: list[bytes] = []

    def keep(http_response: Any, **_: Any) -> None:
        bodies.append(http_response.content)

    client.meta.events.register("after-call.dynamodb.Query", keep, unique_id="bench-keep-body")
    try:
        for _ in range(VERIFY_FIRST + 1):
            query()
    finally:
        client.meta.events.unregister("after-call.dynamodb.Query", unique_id="bench-keep-body")
    shape = client.meta.service_model.operation_model("Query").output_shape
    parser = botocore.parsers.create_parser("json")
    response = {"body": bodies[-1], "headers": {}, "status_code": 200}
    times = []
    for _ in range(7):
        start = time.perf_counter()
        parser.parse(response, shape)
        times.append(time.perf_counter() - start)
    return round(min(times) * 1000, 2)


PROFILE_PAGES = 3


def _profile_pass(env: HandlerEnv, pull_module: Any, token: str, limit: int) -> dict[str, Any]:
    """cProfile of the first :data:`PROFILE_PAGES` pages of a handler pass in this (the client) process."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pull.prof"
        profiler = cProfile.Profile()
        with inline():  # the pool's work in this thread, where cProfile sees it
            profiler.enable()
            _pull_all(env, pull_module, token, limit, max_pages=PROFILE_PAGES)
            profiler.disable()
        profiler.dump_stats(str(path))
        progress("pull: profile done")
        return {"pages": PROFILE_PAGES, "limit": limit, **breakdown(path)}


def quick_summary(result: dict[str, Any]) -> str:
    """One line for the console."""
    return (
        f"pull: {result['workload']['pending_deltas']} deltas in {result['handler_s']['median']:.3f}s via the handler, "
        f"{result['floor_a_s']['median']:.2f}s by floor A: {result['ratio_handler_over_floor_a']['median']:.2f}x "
        f"(goal <= {GOAL_RATIO}); {result['ratio_handler_over_raw']['median']:.2f}x the raw Query of the stored chunks"
    )
