"""Pricing of what :mod:`benchmarks.cost` measured, and the idle month of a synthesized stack (no I/O here).

Measured usage comes as :data:`Usage` (``"service|resource|operation|metric" -> value``, from
:class:`benchmarks.cost_meter.Meter`) plus :data:`Invocations` (per Lambda function: invocations, GB-seconds, API
Gateway requests, response and log bytes). Everything is priced with :mod:`benchmarks.prices`.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from benchmarks.cost_model import glue_dpu_hours, glue_dpus, runs_per_month
from benchmarks.prices import price

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


# -- the idle month ---------------------------------------------------------------------------------------------------
def _of_type(template: Mapping[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    resources: Mapping[str, Any] = template.get("Resources", {})
    return {k: r.get("Properties", {}) for k, r in resources.items() if r.get("Type") == kind}


def _refs(value: Any) -> Iterable[str]:
    """Logical ids a CloudFormation value refers to (``Ref`` and ``Fn::GetAtt``)."""
    if isinstance(value, Mapping):
        for fn, arg in value.items():
            if fn == "Ref" and isinstance(arg, str):
                yield arg
            elif fn == "Fn::GetAtt" and isinstance(arg, list) and arg:
                yield str(arg[0])
            else:
                yield from _refs(arg)
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)


def job_kind(props: Mapping[str, Any]) -> str:
    """A Glue job's kind (``flush``, ``compact``, ``checkpoint``) from its script name or description."""
    text = f"{props.get('Description', '')} {props.get('Command', {}).get('ScriptLocation', '')}"
    found = re.search(r"glue_jobs/(\w+)\.py", text if isinstance(text, str) else "")
    return found.group(1) if found else "job"


def functions_of(template: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Our functions (handler ``functions.<name>.lambda_handler``): memory (MB), architecture, whether X-Ray traces
    them (active tracing) and whether Lambda logs its own lines for each invocation (a system log level other than
    WARN)."""
    out: dict[str, dict[str, Any]] = {}
    for props in _of_type(template, "AWS::Lambda::Function").values():
        handler = str(props.get("Handler", ""))
        if handler.startswith("functions."):
            arch = (props.get("Architectures") or ["x86_64"])[0]
            out[handler.split(".")[1]] = {
                "memory_mb": int(props.get("MemorySize", 128)),
                "architecture": arch,
                "traced": (props.get("TracingConfig") or {}).get("Mode") == "Active",
                "platform_logs": (props.get("LoggingConfig") or {}).get("SystemLogLevel", "INFO") != "WARN",
            }
    return out


def glue_price_key(job: Mapping[str, Any]) -> str:
    """The price of a Glue job's DPU-hours: its execution class's (CloudFormation ``ExecutionClass``)."""
    return "glue.dpu_hour.flex" if job.get("ExecutionClass") == "FLEX" else "glue.dpu_hour"


def schedules_of(template: Mapping[str, Any], *, days: float = 30.0) -> list[dict[str, Any]]:
    """Each EventBridge schedule: expression, runs a month, and what it starts: a Glue job (``job``: its kind, and
    ``dpus``) or a Lambda function (``function``: its handler module's name; ``input``: the event it is sent)."""
    resources: Mapping[str, Any] = template.get("Resources", {})
    jobs = _of_type(template, "AWS::Glue::Job")
    out = []
    for logical, props in _of_type(template, "AWS::Scheduler::Schedule").items():
        expression = str(props.get("ScheduleExpression", ""))
        target = props.get("Target", {})
        entry: dict[str, Any] = {
            "schedule": logical,
            "expression": expression,
            "runs": runs_per_month(expression, days=days),
        }
        function = next(
            (
                resources[r]
                for r in _refs(target.get("Arn"))
                if resources.get(r, {}).get("Type") == "AWS::Lambda::Function"
            ),
            None,
        )
        job = next((jobs[r] for r in _refs(target.get("Input")) if r in jobs), None)
        if function is not None:
            handler = str(function.get("Properties", {}).get("Handler", ""))
            entry["function"] = handler.split(".")[1] if handler.startswith("functions.") else handler
            entry["input"] = target.get("Input") if isinstance(target.get("Input"), str) else None
        elif job is not None:
            entry["job"] = job_kind(job)
        out.append(entry)
    for entry in out:
        kind = entry.get("job")
        if kind is None and isinstance(entry.get("input"), str):
            with contextlib.suppress(ValueError, AttributeError):
                kind = json.loads(entry["input"]).get("job")
        glue = next((j for j in jobs.values() if job_kind(j) == kind), None)
        if kind and glue is not None:
            entry["job_kind"] = kind
            entry["glue_price"] = glue_price_key(glue)
            entry["dpus"] = (
                glue_dpus(str(glue["WorkerType"]), int(glue["NumberOfWorkers"]))
                if "WorkerType" in glue
                else float(glue.get("MaxCapacity", 10))
            )
    return sorted(out, key=lambda e: str(e.get("job_kind", e["schedule"])))


def sqs_pollers(template: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each Lambda event source mapping on an SQS queue, with the pollers Lambda keeps on it while it is idle: five,
    or as few as two when no maximum concurrency is set (AWS Lambda docs, "Configuring scaling behavior for SQS event
    source mappings")."""
    queues = _of_type(template, "AWS::SQS::Queue")
    out = []
    for logical, props in _of_type(template, "AWS::Lambda::EventSourceMapping").items():
        source = list(_refs(props.get("EventSourceArn")))
        if not source or source[0] not in queues:
            continue
        pollers = 5 if props.get("ScalingConfig", {}).get("MaximumConcurrency") else 2
        out.append({"mapping": logical, "queue": source[0], "pollers": pollers})
    return out


def idle_month(
    template: Mapping[str, Any],
    *,
    job_seconds: Mapping[str, float] | None = None,
    job_usage: Mapping[str, Mapping[str, float]] | None = None,
    scheduled: Mapping[str, Mapping[str, Any]] | None = None,
    days: float = 30.0,
) -> dict[str, Any]:
    """What a deployed stack bills in a month without traffic, from its synthesized template.

    Args:
        template: The CloudFormation template.
        job_seconds: Measured seconds of an idle run per job kind (missing: billed at the 1-minute minimum).
        job_usage: Measured AWS usage of one idle run per job kind (DynamoDB, S3, ...), priced per run.
        scheduled: Per schedule that invokes a function: one idle invocation measured (``invocations``: that
            function's figures, ``usage``: its AWS requests, ``glue_starts``: Glue runs it started).
        days: Days in the month.

    Returns:
        ``{"lines": [...], "total_usd", "kms_and_secrets": [...], "kms_and_secrets_usd"}``; each line has ``item``,
        ``quantity``, ``unit``, ``usd`` and ``note``.
    """
    lines: list[dict[str, Any]] = []

    def line(item: str, quantity: float, unit: str, usd: float, note: str = "") -> None:
        lines.append({"item": item, "quantity": quantity, "unit": unit, "usd": usd, "note": note})

    functions = functions_of(template)
    for entry in schedules_of(template, days=days):
        runs = entry["runs"]
        line(
            f"EventBridge Scheduler: {entry['schedule']} ({entry['expression']})",
            runs,
            "invocations",
            runs * price("scheduler.invocation"),
            "the first 14 million a month are free",
        )
        glue_runs = runs if "job" in entry else 0.0
        if "function" in entry:
            measured = (scheduled or {}).get(entry["schedule"])
            name = entry["function"]
            if measured is None:
                line(
                    f"{name} function, {runs:.0f} scheduled invocations",
                    runs,
                    "invocations",
                    runs * price("lambda.request"),
                    "duration and requests not measured",
                )
            else:
                per_run = dict(measured.get("invocations", {}))
                dollars = merge_dollars(
                    price_invocations({name: per_run}, functions, xray_sampled=1.0),
                    price_usage(measured.get("usage", {})),
                )
                seconds = float(per_run.get("seconds", 0.0)) / max(1.0, float(per_run.get("count", 1.0)))
                line(
                    f"{name} function ({entry.get('input') or 'scheduled'}): Lambda, logs, X-Ray and its AWS requests",
                    runs,
                    "invocations",
                    runs * sum(dollars.values()),
                    f"one idle invocation measured: {1000 * seconds:.0f} ms, "
                    f"AWS requests ${sum(price_usage(measured.get('usage', {})).values()):.7f} each",
                )
                glue_runs = runs * float(measured.get("glue_starts", 0.0))
        if not glue_runs or "dpus" not in entry:
            continue
        kind = entry["job_kind"]
        job_s = (job_seconds or {}).get(kind)
        billed = glue_dpu_hours(job_s if job_s is not None else 0.0, entry["dpus"])
        how = f"idle run measured at {job_s:.1f} s" if job_s is not None else "idle run not measured"
        line(
            f"Glue {kind} job: {glue_runs:.0f} runs x {entry['dpus']:g} DPU x {billed * 3600 / entry['dpus']:.0f} s",
            glue_runs * billed,
            "DPU-hours",
            glue_runs * billed * price(entry.get("glue_price", "glue.dpu_hour")),
            f"{how}; Glue bills at least 1 minute per run"
            + ("; Flex execution class" if entry.get("glue_price") == "glue.dpu_hour.flex" else ""),
        )
        usage = (job_usage or {}).get(kind)
        if usage:
            per_run_usd = sum(price_usage(usage).values())
            line(f"{kind} job's AWS requests (DynamoDB, S3) per idle run", glue_runs, "runs", glue_runs * per_run_usd)
    for entry in sqs_pollers(template):
        receives = entry["pollers"] * (60 / SQS_LONG_POLL_S) * 60 * 24 * days
        line(
            f"SQS long polls by the Lambda event source on {entry['queue']}",
            receives,
            "requests",
            receives * price("sqs.request"),
            f"{entry['pollers']} pollers, one {SQS_LONG_POLL_S} s long poll each at a time",
        )
    alarms = _of_type(template, "AWS::CloudWatch::Alarm")
    alarm_metrics = sum(max(1, sum(1 for m in a.get("Metrics", []) if "MetricStat" in m)) for a in alarms.values())
    line("CloudWatch alarms", alarm_metrics, "alarm metrics", alarm_metrics * price("cloudwatch.alarm"))
    dashboards = len(_of_type(template, "AWS::CloudWatch::Dashboard"))
    line(
        "CloudWatch dashboards",
        dashboards,
        "dashboards",
        dashboards * price("cloudwatch.dashboard"),
        "free if the account has no more than 3 custom dashboards",
    )
    rotations = _of_type(template, "AWS::SecretsManager::RotationSchedule")
    for props in rotations.values():
        expression = str(props.get("RotationRules", {}).get("ScheduleExpression", ""))
        with_rate = expression.startswith("rate(")
        per_month = runs_per_month(expression, days=days) if with_rate else 1.0
        line(
            f"secret rotation ({expression or 'scheduled'})",
            4 * per_month,
            "Lambda invocations",
            4 * per_month * price("lambda.request"),
            "4 steps per rotation; their seconds are negligible",
        )
    streams = [
        props
        for props in _of_type(template, "AWS::Lambda::EventSourceMapping").values()
        if any("StreamArn" in str(v) for v in [props.get("EventSourceArn")])
    ]
    if streams:
        line("DynamoDB stream read by Lambda", len(streams), "event source mappings", 0.0, "free when Lambda reads")
    kms = len(_of_type(template, "AWS::KMS::Key"))
    secrets = len(_of_type(template, "AWS::SecretsManager::Secret"))
    besides: list[dict[str, Any]] = [
        {
            "item": "KMS customer managed keys",
            "quantity": kms,
            "unit": "keys",
            "usd": kms * price("kms.key"),
            "note": "rotation adds $1 a month per key for each of the first two yearly rotations",
        },
        {
            "item": "Secrets Manager secrets",
            "quantity": secrets,
            "unit": "secrets",
            "usd": secrets * price("secretsmanager.secret"),
            "note": "",
        },
    ]
    total = sum(float(entry["usd"]) for entry in lines)
    return {
        "lines": lines,
        "total_usd": total,
        "kms_and_secrets": besides,
        "kms_and_secrets_usd": sum(float(b["usd"]) for b in besides),
        "counts": {
            "alarms": len(alarms),
            "dashboards": dashboards,
            "schedules": len(_of_type(template, "AWS::Scheduler::Schedule")),
            "functions": len(_of_type(template, "AWS::Lambda::Function")),
            "tables": len(_of_type(template, "AWS::DynamoDB::Table")),
            "buckets": len(_of_type(template, "AWS::S3::Bucket")),
            "queues": len(_of_type(template, "AWS::SQS::Queue")),
        },
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
