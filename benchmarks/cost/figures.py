"""Composing the figures: cost per million deltas and capacity units per delta of the push/pull workloads and the
lake, from what the meter counted and the invocations recorded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmarks.cost.environment import CostEnv, merge_passes, usage_of
from benchmarks.cost.lake import JOBS, LAKE_STEPS
from benchmarks.cost.model import lambda_gb_seconds
from benchmarks.cost.pricing import (
    SERVICES,
    Invocations,
    Usage,
    add,
    add_invocations,
    capacity_units,
    fit_line,
    glue_per_million,
    merge_dollars,
    price_invocations,
    price_usage,
    scale_invocations,
    subtract,
)

RUN_SIZES = (1_000, 10_000, 100_000, 1_000_000)
HEADLINE_RUN = 10_000
"""Deltas one flush run carries in the headline figures (at a 15-minute schedule: ~29 million deltas a month)."""


def _line(dollars: Mapping[str, float]) -> dict[str, float]:
    return {s: round(dollars.get(s, 0.0), 6) for s in SERVICES} | {"total": round(sum(dollars.values()), 6)}


def lake_figures(
    env: CostEnv,
    lake: Mapping[str, Any],
    functions: Mapping[str, Any],
    dpus: Mapping[str, float],
    ratios: Mapping[str, float],
    glue_prices: Mapping[str, str],
) -> dict[str, Any]:
    """Per-delta and per-run figures of one lake workload, and its cost per million deltas at several run sizes.

    Per delta: what the loaded runs did beyond an idle run of the same job (the release is a flush run), divided by
    the deltas; per run: an idle run's requests. Seconds per run: a line fitted through the loaded runs (a flush
    run's work is its own time plus the release run's time beyond an idle flush). A Glue job's run is billed in
    DPU-seconds (at least a minute); the flush function's in GB-seconds at its memory, plus its request and its log
    lines (the idle invocation's).
    """
    meter = env.meter
    tag = lake["tag"]
    rounds = lake["rounds"]
    idle_s = lake["idle_seconds"]
    by_function = lake.get("flush_engine") == "function"
    glue_jobs = tuple(job for job in JOBS if not (by_function and job == "flush"))
    total = sum(r["deltas"] for r in rounds)
    idle_usage = {job: usage_of(meter, f"{tag}:{job}-idle") for job in JOBS}
    base = {"flush": "flush", "release": "flush", "compact": "compact", "checkpoint": "checkpoint"}
    by_step: dict[str, Usage] = {}
    invocations: Invocations = {}
    for i in range(len(rounds)):
        for step, _kind, _extra in LAKE_STEPS:
            usage = usage_of(meter, f"{tag}:{i}:{step}")
            if step in base:
                usage = subtract(usage, idle_usage[base[step]])
            by_step[step] = add(by_step.get(step, {}), usage)
        invocations = add_invocations(invocations, env.invocations("count", f"{tag}:{i}:materialise"))
    variable = add(*by_step.values(), scale=1 / total)
    materialise = scale_invocations(invocations, 1 / total)
    per_delta_usd = merge_dollars(price_usage(variable), price_invocations(materialise, functions))
    fixed_usd = {job: sum(price_usage(idle_usage[job]).values()) for job in JOBS}
    points = {
        "flush": [
            (r["deltas"], r["seconds"]["flush"] + r["seconds"]["release"] - idle_s["flush-idle"]) for r in rounds
        ],
        "compact": [(r["deltas"], r["seconds"]["compact"]) for r in rounds],
        "checkpoint": [(r["deltas"], r["seconds"]["checkpoint"]) for r in rounds],
    }
    lines = {job: fit_line(points[job], floor=idle_s[f"{job}-idle"]) for job in JOBS}
    idle_flush = env.invocations("count", f"{tag}:flush-idle").get("flush", {})
    by_size = {}
    for run_deltas in RUN_SIZES:
        glue = {
            job: glue_per_million(*lines[job], run_deltas * ratios[job], dpus[job], glue_prices[job])
            for job in glue_jobs
        }
        runs = {job: 1e6 / (run_deltas * ratios[job]) for job in JOBS}
        fixed = sum(fixed_usd[job] * runs[job] for job in JOBS)
        glue_usd = sum(g["usd"] for g in glue.values())
        function: dict[str, float] = {}
        if by_function:
            run_seconds = lines["flush"][0] + lines["flush"][1] * run_deltas
            memory = int(functions.get("flush", {}).get("memory_mb", 2048))
            per_run = {
                "count": 1.0,
                "gb_s": lambda_gb_seconds(run_seconds, memory),
                "log_bytes": float(idle_flush.get("log_bytes", 0.0)) / max(1.0, float(idle_flush.get("count", 1.0))),
            }
            usd = merge_dollars(price_invocations({"flush": per_run}, functions), scale=runs["flush"])
            function = {"runs": runs["flush"], "run_seconds": run_seconds, "usd": sum(usd.values())} | {
                f"usd_{k}": v for k, v in usd.items() if v
            }
        by_size[str(run_deltas)] = {
            "glue": glue,
            "flush_runs": runs["flush"],
            "glue_usd": glue_usd,
            "flush_function": function,
            "flush_function_usd": function.get("usd", 0.0),
            "per_run_requests_usd": fixed,
            "total_usd": sum(per_delta_usd.values()) * 1e6 + fixed + glue_usd + function.get("usd", 0.0),
        }
    units: dict[str, dict[str, float]] = {}
    for step, usage in by_step.items():
        units.update(capacity_units(usage, step, total))
    return {
        "deltas": total,
        "usage_per_delta": variable,
        "usd_per_million_variable": _line({k: v * 1e6 for k, v in per_delta_usd.items()}),
        "usd_per_idle_run_requests": fixed_usd,
        "materialise_invocations_per_delta": materialise,
        "glue_seconds_model": {job: {"intercept_s": a, "s_per_delta": b} for job, (a, b) in lines.items()},
        "glue_points": points,
        "by_run_size": by_size,
        "capacity_units_per_delta": units,
        "idle_usage": idle_usage,
    }


def workload_figures(
    env: CostEnv,
    run: Mapping[str, Any],
    *,
    deltas: int,
    batch: int,
    readers: int,
    lake: Mapping[str, Any] | None,
    functions: Mapping[str, Any],
) -> dict[str, Any]:
    """Cost per million deltas and capacity units per delta of one push/pull workload with ``readers`` readers."""
    tag = run["tag"]
    meter = env.meter
    push_usage = usage_of(meter, f"{tag}:push")
    push_inv = merge_passes(env, f"{tag}:push")
    pull_usage = add(*(usage_of(meter, f"{tag}:pull{i}") for i in range(readers)))
    pull_inv = add_invocations(*(merge_passes(env, f"{tag}:pull{i}") for i in range(readers)))
    per_delta = 1 / deltas
    sync = merge_dollars(
        price_usage(push_usage),
        price_usage(pull_usage),
        price_invocations(add_invocations(push_inv, pull_inv), functions),
        scale=per_delta * 1e6,
    )
    units = capacity_units(push_usage, "push", deltas)
    units.update(capacity_units(pull_usage, "pull", deltas))
    lake_line: dict[str, float] = {}
    if lake is not None:
        units.update(lake["capacity_units_per_delta"])
        headline = lake["by_run_size"][str(HEADLINE_RUN)]
        lake_line = dict(lake["usd_per_million_variable"])
        lake_line.pop("total", None)
        lake_line["Glue"] = lake_line.get("Glue", 0.0) + headline["glue_usd"]
        for service, usd in headline.get("flush_function", {}).items():
            if service.startswith("usd_"):
                lake_line[service[4:]] = lake_line.get(service[4:], 0.0) + usd
        lake_line["DynamoDB"] = lake_line.get("DynamoDB", 0.0) + headline["per_run_requests_usd"]
    total = merge_dollars(sync, lake_line)
    invocations = add_invocations(push_inv, pull_inv)
    return {
        "workload": {"batch": batch, "readers": readers, "deltas": deltas},
        "usd_per_million": _line(total),
        "usd_per_million_sync_only": _line(sync),
        "usd_per_million_lake": _line(lake_line) if lake is not None else None,
        "wru_per_delta": round(sum(u["WRU"] for u in units.values()), 3),
        "rru_per_delta": round(sum(u["RRU"] for u in units.values()), 3),
        "capacity_units_per_delta": {k: {m: round(v, 4) for m, v in u.items()} for k, u in sorted(units.items())},
        "per_delta": {
            "lambda_invocations": sum(f["count"] for f in invocations.values()) * per_delta,
            "lambda_gb_s": sum(f.get("gb_s", 0.0) for f in invocations.values()) * per_delta,
            "api_requests": sum(f.get("api_requests", 0.0) for f in invocations.values()) * per_delta,
            "response_bytes": sum(f.get("response_bytes", 0.0) for f in invocations.values()) * per_delta,
            "log_bytes": sum(f.get("log_bytes", 0.0) for f in invocations.values()) * per_delta,
            "handler_ms_per_invocation": {
                fn: round(1000 * f.get("seconds", 0.0) / f["count"], 2) for fn, f in invocations.items() if f["count"]
            },
        },
    }
