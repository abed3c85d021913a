"""The run: every workload measured, then composed into the results document."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from benchmarks._common import progress
from benchmarks.cost.environment import CostEnv
from benchmarks.cost.figures import lake_figures, workload_figures
from benchmarks.cost.idle_month import idle_month
from benchmarks.cost.lake import JOBS, Lake, lake_warm_up, lake_workload
from benchmarks.cost.meter import Meter
from benchmarks.cost.pricing import Usage
from benchmarks.cost.scheduled import measure_scheduled
from benchmarks.cost.sync import push_pull
from benchmarks.cost.template import code_root, fallback_functions, functions_of, glue_setup, sqs_batch_size
from benchmarks.cost.workloads import Sizes


def run(sizes: Sizes, *, spark: bool, template: dict[str, dict[str, Any]] | None, work: Path) -> dict[str, Any]:
    """Measure everything (see the package docstring); returns the results document."""
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
            lake = Lake(env, work, code_root(), flush_engine="function" if "flush" in functions else "glue")
            progress("cost: starting local Spark (Iceberg runtime) for the Glue jobs")
            lake.start(cost_dir)
            spark_start = lake.start_seconds
            try:
                batch_size = sqs_batch_size(template)
                lake_warm_up(env, lake, batch_size)
                for row_bytes in sizes.row_sizes:
                    lakes[row_bytes] = lake_workload(
                        env, lake, row_bytes=row_bytes, rounds=sizes.lake_rounds, batch_size=batch_size
                    )
            finally:
                lake.stop()
        glue = glue_setup(template)
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
