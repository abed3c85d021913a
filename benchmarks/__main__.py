"""``python -m benchmarks``: run every benchmark, print a progress line per step, write the results files.

Options: ``--only push,pull,imports`` runs a subset; ``--quick`` runs tiny workloads as a smoke check and writes to
a temporary directory unless ``--out`` says otherwise (so it never replaces the committed results);
``--profile {auto,always,never}`` profiles push and pull when their goal is missed (``auto``, the default).
``lake`` (:mod:`benchmarks.lake`: Spark and Iceberg, ~15 minutes) runs only when ``--only`` names it, and writes its
own ``lake.json``/``lake.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import imports, lake, pull, push, report, write_rules
from benchmarks._common import machine_info, progress

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True, slots=True)
class Sizes:
    """Workload sizes of one run."""

    push_deltas: int
    push_batch: int
    push_repetitions: int
    push_warmup: int
    push_profile_deltas: int
    pull_deltas: int
    pull_limit: int
    pull_repetitions: int
    import_runs: int


FULL = Sizes(
    push_deltas=2000,
    push_batch=500,
    push_repetitions=5,
    push_warmup=128,
    push_profile_deltas=1000,
    pull_deltas=10_000,
    pull_limit=1000,
    pull_repetitions=9,
    import_runs=5,
)
QUICK = Sizes(
    push_deltas=192,
    push_batch=96,
    push_repetitions=2,
    push_warmup=32,
    push_profile_deltas=96,
    pull_deltas=600,
    pull_limit=200,
    pull_repetitions=2,
    import_runs=2,
)

COMMON_METHOD = [
    "* moto 5 in server mode runs in its own process (`benchmarks/_moto.py`), as DynamoDB is a separate service for "
    "a Lambda; the handlers run in the benchmark process, called as Lambda calls them "
    "(`lambda_handler(event, context)`, API Gateway HTTP API v2 events built beforehand, stdout sent to a sink).",
    "* The handlers get the environment the local runner gives them (`LAKESYNC_TABLE_PREFIX`, `LAKESYNC_JWT_SECRET`, "
    "`LAKESYNC_GATEWAY_IDS`, `AWS_ENDPOINT_URL`, tracing off, log level WARNING); the handlers' boto3 client is "
    "the project's (`lakesync.aws.clients`). The raw floors use a plain boto3 client on the same server "
    "(no retries, long timeouts).",
    "* One emulator artifact is patched in the moto process, for both sides alike: `Query`/`Scan` items of "
    "JSON-native attribute types are written with `json.dumps` instead of moto's model-driven serializer (about "
    "1 ms per returned item; the first responses are serialized both ways and compared, and any difference turns "
    "the fast path off). The server also carries the embedded default's moto patches (`lakesync.local.moto_fast`: "
    "a table's stream keeps its last 20,000 records; no request timed here is a `TransactWriteItems`). moto's "
    "`Query` still scans the table and sorts the partition on every call, so its cost grows with the partition "
    "(STACK.md): only the ratios are meaningful, not the absolute rates.",
    "* Every figure is the median of several repetitions after a warm-up; min, max and spread "
    "((max − min) / median) are given; ratios are taken per repetition (sides measured back to back) and then "
    "their median.",
]
PUSH_METHOD = [
    "* **handler**: `functions.push.lambda_handler` per request: routing, JWT verification, JSON parsing, "
    "whole-batch validation, then per chunk of 48 deltas: the shard head (`GetItem`), one `BatchGetItem` of its rows "
    "(consistent) and deltaId records (eventually consistent), the chunk's log item by one conditional `PutItem` "
    "(first keys, the default; the first commit to the shard also records `lk` on its head), then on the chunk's "
    "turn its rows by `BatchWriteItem` (25 a request) and the head moved over the chunk (`UpdateItem`: `seq`, `ra`, "
    "totals), and `BatchWriteItem` of the deltaId records of deltas that changed nothing (none here).",
    "* **floor A (issue 15's reference)**: `BatchWriteItem` of one log item per delta (the log as it was before it was "
    "chunked: the delta with its row images).",
    "* **floor C (the same items)**: `BatchWriteItem` (25 items per request) of every item the handler run stored -- "
    "log chunks, rows, deltaId records, head and shard-registry items, read back from its tables -- unconditional, "
    "no reads.",
    "* **floor B**: the very write requests the handler run sent (`PutItem`, `UpdateItem`, `BatchWriteItem`), "
    "recorded on its client and replayed in order on fresh tables: the storage work of a push without its reads "
    "and without our code.",
]
PULL_METHOD = [
    "* Setup (not timed): the deltas go through the real push service over in-memory stores whose commits are "
    "also rendered by the real DynamoDB store code; the rendered log items (first-keyed, as a deployment writes them "
    "by default), the shard head and the registry item are written to fresh tables. No sync rules are set (every "
    "delta is visible).",
    "* **handler**: `functions.pull.lambda_handler` from an empty cursor, each later request carrying the previous "
    "response's `cursor`, until `hasMore` is false; only the time inside the handler calls counts. Each call: JWT "
    "verification, query parsing, one config `Query` for the sync rules and the shard registry, consistent log "
    "`Query` pages (the chunks that can hold the page's entries, by key), decoding into deltas, JSON response (the "
    "heads' release marks are read only for a shard whose log read comes back empty: none here).",
    "* **floor A (issue 15's reference, as for push)**: consistent `Query` pages of the log as the issue measured it, "
    "one item per delta (the delta with its row images), `Limit` = the pull `limit`, as many pages as the handler "
    "serves; items left as boto3 returns them. Its table holds exactly one page of such items, read again for each "
    "page: moto scans the table and sorts the partition on every `Query`, and a partition of all the deltas would "
    "charge each page for the rest. The SDK's own parse of one such page (botocore's parser on the recorded body, no "
    "emulator) is given beside it.",
    "* **raw**: a consistent `Query` of the shard's log as stored (compressed chunks of a push's entries), `Limit` = "
    "the number of items that hold `limit` deltas, following `LastEvaluatedKey` to the end; items left as boto3 "
    "returns them.",
    "* **replay**: the exact DynamoDB requests of one handler pass, recorded on its client and sent again by the "
    "raw client: handler / replay is what our code adds to its own requests.",
    "* **raw + inflate** (not a goal; a floor): the raw side, then `zlib.decompress` of every item's entries, the "
    "least any reader that sends the deltas must do with the log as stored (compressed chunks of a push's entries).",
]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--only",
        default="push,pull,imports,write_rules",
        help="comma-separated subset of push,pull,imports,write_rules,lake (lake: named only)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny workloads (smoke check)")
    parser.add_argument("--out", type=Path, help="results directory (default benchmarks/results)")
    parser.add_argument("--profile", choices=("auto", "always", "never"), default="auto")
    args = parser.parse_args(argv)
    selected = {name.strip() for name in args.only.split(",") if name.strip()}
    unknown = selected - {"push", "pull", "imports", "write_rules", "lake"}
    if unknown:
        parser.error(f"unknown benchmarks: {', '.join(sorted(unknown))}")
    sizes = QUICK if args.quick else FULL
    out = args.out or (Path(tempfile.mkdtemp(prefix="lakesync-bench-")) if args.quick else RESULTS)
    profile_mode = {"auto": None, "always": True, "never": False}[args.profile]
    if "lake" in selected:
        lake_summary = lake.quick_summary(lake.run(lake.QUICK if args.quick else lake.FULL, out, quick=args.quick))
        progress(lake_summary)
        selected.discard("lake")
        if not selected:
            print(lake_summary)
            return 0

    started = time.monotonic()
    load_start = _load()
    progress(f"benchmarks: {', '.join(sorted(selected))}{' (quick)' if args.quick else ''}; results -> {out}")
    results: dict[str, Any] = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "sizes": asdict(sizes),
        "method": {"common": COMMON_METHOD, "push": PUSH_METHOD, "pull": PULL_METHOD},
    }
    summaries = []
    if "push" in selected:
        figures = push.run(
            deltas=sizes.push_deltas,
            batch=sizes.push_batch,
            repetitions=sizes.push_repetitions,
            warmup_deltas=sizes.push_warmup,
        )
        results["push"] = figures
        summaries.append(push.quick_summary(figures))
        progress(summaries[-1])
        if profile_mode or (profile_mode is None and not figures["goal"]["met"]):
            results["push_profile"] = push.profile(deltas=sizes.push_profile_deltas, batch=sizes.push_batch)
    if "pull" in selected:
        results["pull"] = pull.run(
            deltas=sizes.pull_deltas,
            limit=sizes.pull_limit,
            repetitions=sizes.pull_repetitions,
            profile=profile_mode,
        )
        summaries.append(pull.quick_summary(results["pull"]))
        progress(summaries[-1])
    if "write_rules" in selected:
        results["write_rules"] = write_rules.run(
            deltas=sizes.push_deltas,
            batch=sizes.push_batch,
            repetitions=sizes.push_repetitions,
            warmup_deltas=sizes.push_warmup,
        )
        summaries.append(write_rules.quick_summary(results["write_rules"]))
        progress(summaries[-1])
    if "imports" in selected:
        results["imports"] = imports.run(runs=sizes.import_runs)
        summaries.append(imports.quick_summary(results["imports"]))
        progress(summaries[-1])

    results["machine"] = {**machine_info(), "load_average_start": load_start, "load_average_end": _load()}
    results["duration_s"] = round(time.monotonic() - started, 1)
    json_path, md_path = report.write(results, out, stem="latest", render=report.markdown)
    png_path = report.plot(results, out / "latest.png")
    progress(f"wrote {json_path}, {md_path} and {png_path} ({results['duration_s']:.0f}s)")
    for line in summaries:
        print(line)
    return 0


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


if __name__ == "__main__":
    sys.exit(main())
