"""The idle month: what a deployed stack bills in a month without traffic, from its synthesized template (no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmarks.cost.model import glue_dpu_hours, runs_per_month
from benchmarks.cost.prices import price
from benchmarks.cost.pricing import merge_dollars, price_invocations, price_usage
from benchmarks.cost.template import functions_of, of_type, schedules_of, sqs_pollers

SQS_LONG_POLL_S = 20
"""Seconds one empty long poll of a Lambda SQS poller waits."""


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
    alarms = of_type(template, "AWS::CloudWatch::Alarm")
    alarm_metrics = sum(max(1, sum(1 for m in a.get("Metrics", []) if "MetricStat" in m)) for a in alarms.values())
    line("CloudWatch alarms", alarm_metrics, "alarm metrics", alarm_metrics * price("cloudwatch.alarm"))
    dashboards = len(of_type(template, "AWS::CloudWatch::Dashboard"))
    line(
        "CloudWatch dashboards",
        dashboards,
        "dashboards",
        dashboards * price("cloudwatch.dashboard"),
        "free if the account has no more than 3 custom dashboards",
    )
    rotations = of_type(template, "AWS::SecretsManager::RotationSchedule")
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
        for props in of_type(template, "AWS::Lambda::EventSourceMapping").values()
        if any("StreamArn" in str(v) for v in [props.get("EventSourceArn")])
    ]
    if streams:
        line("DynamoDB stream read by Lambda", len(streams), "event source mappings", 0.0, "free when Lambda reads")
    kms = len(of_type(template, "AWS::KMS::Key"))
    secrets = len(of_type(template, "AWS::SecretsManager::Secret"))
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
            "schedules": len(of_type(template, "AWS::Scheduler::Schedule")),
            "functions": len(of_type(template, "AWS::Lambda::Function")),
            "tables": len(of_type(template, "AWS::DynamoDB::Table")),
            "buckets": len(of_type(template, "AWS::S3::Bucket")),
            "queues": len(of_type(template, "AWS::SQS::Queue")),
        },
    }
