"""``cost.md``: the results document for people, one function per section."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmarks.cost.figures import HEADLINE_RUN
from benchmarks.cost.lake import JOBS, LAKE_STEPS
from benchmarks.cost.prices import CHECKED, price
from benchmarks.cost.pricing import comparisons
from benchmarks.report import table, table_row

PRICE_STORAGE = price("dynamodb.storage") + price("dynamodb.pitr")
"""Dollars per GB-month a DynamoDB item costs kept (storage and point-in-time recovery, as the stack enables)."""


def render_markdown(doc: Mapping[str, Any]) -> str:
    """The results for people."""
    r = doc["results"]
    out = [
        *_header(doc),
        *_dollars(r["push_pull"]),
        *_units(r["push_pull"]),
        *_lake(r["lake"], r.get("glue", {})),
        *_storage(r.get("storage") or {}),
        *_idle_month(r["idle_month"], r.get("emf_metrics") or []),
        *_comparison(r["push_pull"]),
        *_prices(doc["prices"]),
    ]
    return "\n".join(out) + "\n"


def yardstick(machine: Mapping[str, Any]) -> str:
    """The machine's yardstick (``benchmarks._common.yardstick_ms``) for the header, when the run recorded one."""
    ms = machine.get("yardstick_ms")
    if ms is None:
        return ""
    return f"; the fixed Python yardstick took {ms} ms, and the Lambda durations below scale with it"


def _fmt(value: float, digits: int = 2) -> str:
    return f"{value:,.{digits}f}"


def _header(doc: Mapping[str, Any]) -> list[str]:
    machine = doc["machine"]
    return [
        "# Cost benchmark",
        "",
        f"Run {doc['finished_at']} ({doc['label']}), commit `{(machine['git'] or {}).get('commit')}`, "
        f"code imported from `{doc['code_root']}`; {doc['seconds']:.0f} s, load average "
        f"{machine.get('load_average_start')} at the start, {machine.get('load_average_end')} at the end "
        f"({machine.get('cpu_count')} CPUs{yardstick(machine)}). Prices: us-east-1 list prices checked "
        f"{CHECKED} (`benchmarks/cost/prices.py`, each with its source). Method: `benchmarks/cost/` and docs/cost.md.",
        "",
    ]


def _dollars(workloads: Mapping[str, Any]) -> list[str]:
    headers = ("workload", "total", "DynamoDB", "Lambda", "API Gateway", "SQS", "S3", "Glue", "Logs", "X-Ray")
    rows = []
    for name, w in workloads.items():
        u = w["usd_per_million"]
        rows.append(
            (
                name,
                f"**{_fmt(u['total'])}**",
                *(_fmt(u[s]) for s in ("DynamoDB", "Lambda", "API Gateway")),
                *(_fmt(u[s], 3) for s in ("SQS", "S3")),
                *(_fmt(u[s]) for s in ("Glue", "CloudWatch Logs", "X-Ray", "Other")),
                _fmt(w["usd_per_million_sync_only"]["total"]),
            )
        )
    return [
        "## Dollars per million deltas",
        "",
        f"Sync (push + pull) and lake (flush, materialise, compaction, checkpoint, release; Glue at "
        f"{HEADLINE_RUN:,} deltas per flush run). Lambda durations are this machine's, standing in for Lambda's.",
        "",
        *table((*headers, "other", "sync only"), rows, align="l" + "r" * 11),
        "",
        '"other" is data transfer out to the internet (response bodies) and Secrets Manager calls; "Logs" is what '
        "the functions print at the deployed log level, plus ~350 B of Lambda's own lines per invocation where the "
        "function's system log level keeps them (the template's `lambdaSystemLogLevel`); X-Ray assumes "
        "the default sampling (5 % of invocations at sustained traffic). The same figures as a picture, beside the "
        "baseline run and AppSync and Firestore: [`cost.png`](cost.png).",
        "",
    ]


def _units(workloads: Mapping[str, Any]) -> list[str]:
    units = [
        (
            name,
            f"{w['wru_per_delta']:.2f}",
            f"{w['rru_per_delta']:.2f}",
            f"{w['per_delta']['lambda_invocations']:.3f}",
            f"{w['per_delta']['lambda_gb_s']:.5f}",
            f"{w['per_delta']['api_requests']:.3f}",
        )
        for name, w in workloads.items()
    ]
    seen = sorted({f for w in workloads.values() for f in w["per_delta"]["handler_ms_per_invocation"]})
    handler_ms = [
        (name, *(f"{w['per_delta']['handler_ms_per_invocation'].get(f, 0.0):.1f}" for f in seen))
        for name, w in workloads.items()
    ]
    out = [
        "## DynamoDB units per delta",
        "",
        "WRU and RRU include the lake's stages (the breakdowns below show each); the other columns are the sync "
        "path's (the lake adds one materialise invocation per 10 jobs of up to 5,000 deltas).",
        "",
        *table(("workload", "WRU", "RRU", "Lambda invocations", "Lambda GB-s", "API requests"), units, align="lrrrrr"),
        "",
        "Handler milliseconds per invocation on this machine (the timing pass; moto answers over loopback):",
        "",
        *table(("workload", *seen), handler_ms, align="l" + "r" * len(seen)),
    ]
    most = max((int(w["workload"]["readers"]) for w in workloads.values()), default=0)
    for name, w in workloads.items():
        if w["workload"]["batch"] != 10 or w["workload"]["readers"] != most:
            continue
        stages = [
            (label, f"{u['WRU']:.3f}", f"{u['RRU']:.3f}")
            for label, u in w["capacity_units_per_delta"].items()
            if u["WRU"] or u["RRU"]
        ]
        out += [
            "",
            f"### Breakdown: {name}",
            "",
            *table(("stage: table op", "WRU / delta", "RRU / delta"), stages, align="lrr"),
        ]
    return out


def _lake(lakes: Mapping[str, Any], glue: Mapping[str, Any]) -> list[str]:
    if not lakes:
        return []
    return [
        "",
        "## The lake per million deltas, by flush run size",
        "",
        "Seconds per run: a line fitted through the loaded runs, never below an idle run. The Glue jobs run as "
        "their scripts on local Spark (`local[2]`, this machine; a stand-in for Glue's G.1X workers), each run "
        "billed at least a minute; the flush function (the stack's default flush) runs in this process on the "
        "same lake, billed in GB-seconds at its memory. Compaction and checkpoint runs carry as many flush runs' "
        f"deltas as the lake tick's rules imply at steady traffic ({_carried(glue)}). "
        '"per-run requests" is what an idle run of each job asks of DynamoDB and S3.',
        "",
        *table(
            (
                "rows",
                "deltas per flush run",
                "flush runs",
                "DPU-hours: flush",
                "compact",
                "checkpoint",
                "Glue $",
                "flush function $",
                "per-run requests $",
                "total lake $",
            ),
            [row for row_bytes, lake in lakes.items() for row in _run_sizes(row_bytes, lake)],
            align="l" + "r" * 9,
        ),
        "",
        "Seconds of each step (on local Spark, or the flush function's; the materialise step is the function's "
        "invocations and the event source's requests), and the fitted seconds per run:",
        "",
        *table(
            ("rows", "deltas", *(step for step, _, _ in LAKE_STEPS)),
            [row for row_bytes, lake in lakes.items() for row in _lake_steps(row_bytes, lake)],
            align="l" + "r" * (1 + len(LAKE_STEPS)),
        ),
    ]


def _carried(glue: Mapping[str, Any]) -> str:
    """How many flush runs a compaction and a checkpoint run carry, and why, for people."""
    ratios, policy = glue.get("ratios", {}), glue.get("compact_policy", {})
    if not ratios:
        return "as their schedules imply"
    return (
        f"compaction after {policy.get('min_flush_runs')} flush runs or {policy.get('max_wait_minutes')} minutes "
        f"after the first, on its next tick: {ratios['compact']:.0f} flush runs a compaction; a checkpoint on its "
        f"tick after a compaction: {ratios['checkpoint']:.0f} a checkpoint"
    )


def _run_sizes(row_bytes: str, lake: Mapping[str, Any]) -> list[tuple[str, ...]]:
    rows = []
    for size, figures in lake["by_run_size"].items():
        glue = figures["glue"]
        function = figures.get("flush_function") or {}
        rows.append(
            (
                f"{row_bytes} B",
                f"{int(size):,}",
                f"{figures['flush_runs']:,.0f}",
                *(f"{glue[job]['dpu_hours']:.2f}" if job in glue else "–" for job in JOBS),
                _fmt(figures["glue_usd"]),
                _fmt(function["usd"], 3) if function else "–",
                _fmt(figures["per_run_requests_usd"], 3),
                _fmt(figures["total_usd"]),
            )
        )
    return rows


def _lake_steps(row_bytes: str, lake: Mapping[str, Any]) -> list[tuple[str | None, ...]]:
    rows = [
        (
            f"{row_bytes} B",
            f"{measured['deltas']:,}",
            *(f"{measured['seconds'][step]:.1f}" for step, _, _ in LAKE_STEPS),
        )
        for measured in lake["rounds"]
    ]
    idle = ", ".join(f"{step} {t:.1f} s" for step, t in lake["idle_seconds"].items())
    model = "; ".join(
        f"{job} {m['intercept_s']:.1f} s + {1000 * m['s_per_delta']:.2f} ms/delta"
        for job, m in lake["glue_seconds_model"].items()
    )
    blank = (None,) * (len(LAKE_STEPS) - 1)
    return [*rows, (f"{row_bytes} B", "idle", idle, *blank), (f"{row_bytes} B", "fitted", model, *blank)]


def _storage(storage: Mapping[str, Any]) -> list[str]:
    if not storage:
        return []
    rows = [
        (
            f"{row_bytes} B",
            table_name,
            f"{figures['items_per_delta']:.2f}",
            f"{figures['bytes_per_delta']:,.0f}",
            f"{figures['bytes_per_delta'] * 1e6 / 1e9 * PRICE_STORAGE:.3f}",
        )
        for row_bytes, tables in storage.items()
        for table_name, figures in tables.items()
        if figures["items_per_delta"]
    ]
    return [
        "",
        "## Stored per delta (pushes of 100)",
        "",
        "Item bytes plus DynamoDB's 100 bytes per item, after the push workload (before any flush or release). "
        f"A month of it costs ${PRICE_STORAGE:.2f} per GB (storage and point-in-time recovery); the log is "
        "released after the flush, a checkpoint and the retention (1 day), dedup records expire by TTL, rows stay.",
        "",
        *table(
            ("rows", "table", "items / delta", "bytes / delta", "$ / month per million deltas kept"),
            rows,
            align="llrrr",
        ),
    ]


def _idle_month(idle_month: Mapping[str, Any], emf_metrics: list[str]) -> list[str]:
    out = ["", "## Idle month (no traffic)", ""]
    for env_name, idle in idle_month.items():
        lines = [
            (item["item"], f"{item['quantity']:,.1f} {item['unit']}", f"{item['usd']:.2f}", item["note"])
            for item in idle["lines"]
        ]
        lines += [
            (f"*besides:* {item['item']}", item["quantity"], f"{item['usd']:.2f}", item["note"])
            for item in idle["kms_and_secrets"]
        ]
        out += [
            f"### `{env_name}` stack: ${idle['total_usd']:.2f} a month besides KMS keys and the secret",
            "",
            *table(("item", "quantity", "$ / month", "note"), lines, align="lrrl"),
            "",
        ]
    if not idle_month:
        out += ["Not computed (no template: `--no-synth` or `--quick`).", ""]
    if emf_metrics:
        out += [
            f"While traffic flows the functions publish {len(emf_metrics)} custom metrics (EMF): "
            f"${len(emf_metrics) * 0.30:.2f} a month at $0.30 each.",
            "",
        ]
    return out


def _comparison(workloads: Mapping[str, Any]) -> list[str]:
    headers: list[str] = ["rows, readers", "ours (sync only)"]
    rows: list[tuple[str, ...]] = []
    for w in (w for name, w in workloads.items() if "pushes of 100," in name):
        comps = comparisons(int(w["row_bytes"]), int(w["workload"]["readers"]))
        if not rows:
            headers += comps
        rows.append(
            (
                f"{w['row_bytes']} B, {w['workload']['readers']}",
                _fmt(w["usd_per_million_sync_only"]["total"]),
                *(_fmt(sum(c.values())) for c in comps.values()),
            )
        )
    if not rows:  # no workload pushes 100 deltas at a time: the header alone
        return ["## Comparison (sync traffic only, list prices)", "", table_row(headers)]
    return [
        "## Comparison (sync traffic only, list prices)",
        "",
        *table(headers, rows, align="lr" + "r" * (len(headers) - 2)),
    ]


def _prices(prices: list[Mapping[str, Any]]) -> list[str]:
    rows = [(p["key"], p["usd"], p["unit"], p["source"], p["checked"]) for p in prices]
    return ["", "## Prices", "", *table(("key", "$", "unit", "source", "checked"), rows, align="lrlll")]
