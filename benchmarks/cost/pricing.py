"""Pricing of what :mod:`benchmarks.cost` measured, the Glue run-size model and the comparison prices (no I/O here).

Measured usage comes as :data:`Usage` (``"service|resource|operation|metric" -> value``, from
:class:`benchmarks.cost.meter.Meter`) plus :data:`Invocations` (per Lambda function: invocations, GB-seconds, API
Gateway requests, response and log bytes). Everything is priced with :mod:`benchmarks.cost.prices`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.cost.model import glue_dpu_hours
from benchmarks.cost.prices import price

Usage = dict[str, float]
"""``"service|resource|operation|metric" -> value``."""
Invocations = dict[str, dict[str, float]]
"""``function -> {"count", "seconds", "gb_s", "api_requests", "request_bytes", "response_bytes", "log_bytes"}``."""

LAMBDA_PLATFORM_LOG_BYTES = 350
"""Bytes Lambda itself logs per invocation (START, END and REPORT lines; an estimate, not measured), unless the
function's system log level is WARN."""
XRAY_SAMPLED = 0.05
"""Share of invocations traced by X-Ray's default rule at sustained traffic (1 request a second, then 5 %)."""
SQS_LONG_POLL_S = 20
"""Seconds one empty long poll of a Lambda SQS poller waits."""
SERVICES = ("DynamoDB", "Lambda", "API Gateway", "SQS", "S3", "Glue", "CloudWatch Logs", "X-Ray", "Other")


def usage_key(service: str, resource: str, op: str, metric: str) -> str:
    """The :data:`Usage` key of one figure."""
    return f"{service}|{resource}|{op}|{metric}"


def split_key(key: str) -> tuple[str, str, str, str]:
    """Inverse of :func:`usage_key`."""
    service, resource, op, metric = key.split("|", 3)
    return service, resource, op, metric


def add(*usages: Mapping[str, float], scale: float = 1.0) -> Usage:
    """The sum of usages, times ``scale``."""
    out: Usage = {}
    for usage in usages:
        for key, value in usage.items():
            out[key] = out.get(key, 0.0) + value * scale
    return out


def subtract(usage: Mapping[str, float], base: Mapping[str, float]) -> Usage:
    """``usage - base`` per key, never below zero (what a loaded run did beyond an idle one)."""
    return {k: max(0.0, v - base.get(k, 0.0)) for k, v in usage.items() if v - base.get(k, 0.0) > 0}


# -- pricing ----------------------------------------------------------------------------------------------------------
def price_usage(usage: Mapping[str, float]) -> dict[str, float]:
    """Dollars by service of a :data:`Usage` (DynamoDB units, SQS requests, S3 requests, Secrets Manager calls).

    Empty SQS receives are left out: they are the pollers' idle cost, priced in the idle month.
    """
    out = dict.fromkeys(SERVICES, 0.0)
    for key, value in usage.items():
        service, _resource, op, metric = split_key(key)
        if service == "dynamodb" and metric == "WRU":
            out["DynamoDB"] += value * price("dynamodb.wru")
        elif service == "dynamodb" and metric == "RRU":
            out["DynamoDB"] += value * price("dynamodb.rru")
        elif service == "sqs" and metric == "requests" and "(empty)" not in op:
            out["SQS"] += value * price("sqs.request")
        elif service == "s3" and metric == "requests:put":
            out["S3"] += value * price("s3.put")
        elif service == "s3" and metric == "requests:get":
            out["S3"] += value * price("s3.get")
        elif service == "secretsmanager" and metric == "calls":
            out["Other"] += value * price("secretsmanager.call")
    return out


def price_invocations(
    invocations: Mapping[str, Mapping[str, float]],
    functions: Mapping[str, Mapping[str, Any]],
    *,
    xray_sampled: float = XRAY_SAMPLED,
) -> dict[str, float]:
    """Dollars by service of Lambda invocations (requests and GB-seconds at each function's architecture), their API
    Gateway requests, response bytes sent to the internet, logs (what the handler printed plus Lambda's own lines)
    and X-Ray traces."""
    out = dict.fromkeys(SERVICES, 0.0)
    for name, figures in invocations.items():
        function = functions.get(name, {})
        arch = str(function.get("architecture", "x86_64"))
        out["Lambda"] += figures.get("count", 0.0) * price("lambda.request")
        out["Lambda"] += figures.get("gb_s", 0.0) * price(f"lambda.gb_s.{arch}")
        out["API Gateway"] += figures.get("api_requests", 0.0) * price("apigw.http.request")
        out["Other"] += figures.get("response_bytes", 0.0) / 1e9 * price("transfer.out")
        platform_bytes = LAMBDA_PLATFORM_LOG_BYTES if function.get("platform_logs", True) else 0
        log_bytes = figures.get("log_bytes", 0.0) + figures.get("count", 0.0) * platform_bytes
        out["CloudWatch Logs"] += log_bytes / 1e9 * price("cloudwatch.logs_ingest")
        if function.get("traced", True):
            out["X-Ray"] += figures.get("count", 0.0) * xray_sampled * price("xray.trace")
    return out


def merge_dollars(*parts: Mapping[str, float], scale: float = 1.0) -> dict[str, float]:
    """Sum of dollars-by-service maps, times ``scale``."""
    out = dict.fromkeys(SERVICES, 0.0)
    for part in parts:
        for service, usd in part.items():
            out[service] = out.get(service, 0.0) + usd * scale
    return out


def scale_invocations(invocations: Mapping[str, Mapping[str, float]], scale: float) -> Invocations:
    """Every figure of every function times ``scale``."""
    return {name: {k: v * scale for k, v in figures.items()} for name, figures in invocations.items()}


def add_invocations(*parts: Mapping[str, Mapping[str, float]]) -> Invocations:
    """Per-function sums."""
    out: Invocations = {}
    for part in parts:
        for name, figures in part.items():
            into = out.setdefault(name, {})
            for k, v in figures.items():
                into[k] = into.get(k, 0.0) + v
    return out


def capacity_units(usage: Mapping[str, float], stage: str, deltas: float) -> dict[str, dict[str, float]]:
    """DynamoDB units per delta by ``"stage: table op"`` (``table/index`` for index copies): ``{"WRU", "RRU"}``."""
    out: dict[str, dict[str, float]] = {}
    for key, value in usage.items():
        service, resource, op, metric = split_key(key)
        if service != "dynamodb" or metric not in ("WRU", "RRU"):
            continue
        row = out.setdefault(f"{stage}: {resource} {op}", {"WRU": 0.0, "RRU": 0.0})
        row[metric] += value / deltas
    return out


# -- Glue -------------------------------------------------------------------------------------------------------------
def fit_line(points: Sequence[tuple[float, float]], *, floor: float) -> tuple[float, float]:
    """``(intercept, slope)`` of seconds per run against deltas per run, by least squares over measured loaded runs.

    The slope is never negative and the intercept never below ``floor`` (an idle run's seconds); with a single point
    the line goes through ``(0, floor)``.
    """
    if not points:
        return floor, 0.0
    if len(points) == 1 or len({n for n, _ in points}) == 1:
        n, t = points[0]
        slope = max(0.0, (t - floor) / n) if n else 0.0
        return floor, slope
    mean_n = sum(n for n, _ in points) / len(points)
    mean_t = sum(t for _, t in points) / len(points)
    var = sum((n - mean_n) ** 2 for n, _ in points)
    slope = max(0.0, sum((n - mean_n) * (t - mean_t) for n, t in points) / var)
    return max(floor, mean_t - slope * mean_n), slope


def glue_per_million(
    intercept: float, slope: float, run_deltas: float, dpus: float, price_key: str = "glue.dpu_hour"
) -> dict[str, float]:
    """Glue for a million deltas carried by runs of ``run_deltas`` each (run seconds ``intercept + slope * n``):
    runs, seconds and billed DPU-seconds per run, DPU-hours and dollars (at the price ``price_key``)."""
    runs = 1e6 / run_deltas
    seconds = intercept + slope * run_deltas
    dpu_hours = glue_dpu_hours(seconds, dpus)
    return {
        "run_deltas": run_deltas,
        "runs": runs,
        "run_seconds": seconds,
        "billed_dpu_seconds_per_run": dpu_hours * 3600,
        "dpu_hours": runs * dpu_hours,
        "usd": runs * dpu_hours * price(price_key),
    }


# -- comparisons ------------------------------------------------------------------------------------------------------
def comparisons(row_bytes: int, readers: int) -> dict[str, dict[str, float]]:
    """Dollars per million deltas of the same sync traffic elsewhere (each delta written once, delivered to
    ``readers`` clients), at list prices; what each includes is in docs/cost.md."""
    m = 1e6
    kb = max(1, math.ceil(row_bytes / 1024))
    return {
        "AWS AppSync (+ DataStore)": {
            "operations": m * price("appsync.operation"),
            "real-time updates": m * readers * price("appsync.realtime_update"),
            "DynamoDB behind it (2 item writes)": m * 2 * kb * price("dynamodb.wru"),
        },
        "Firestore Standard, nam5": {
            "writes": m * price("firestore.nam5.write"),
            "reads by listeners": m * readers * price("firestore.nam5.read"),
        },
        "Firestore Standard, us-east1": {
            "writes": m * price("firestore.us-east1.write"),
            "reads by listeners": m * readers * price("firestore.us-east1.read"),
        },
        "Electric Cloud (PAYG)": {"writes": m * price("electric.write")},
    }
