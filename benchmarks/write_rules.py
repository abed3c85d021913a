"""The push with write rules against the push without, in the same run (issue 40: goal at least 0.9x).

Each repetition pushes the same shape of deltas through ``functions.push.lambda_handler`` twice, on fresh tables of
the same moto server, back to back and in alternating order: once on a gateway without sync rules (no write check
beyond the reserved tables), once on a gateway whose rules confine writes the way a multi-tenant app does -- three
buckets (a team's rows, the client's own rows, a read-only shared table), a table policy with an immutable ``owner``
column -- with a token carrying the ``team`` claim. Every delta is allowed (the rows are the client's and its team's):
what is measured is the cost of judging each delta against the stored and merged row, not of refusing it. The
DynamoDB calls of both runs are counted: the rules ride on the config ``Query`` the push makes anyway.
"""

from __future__ import annotations

import json
import time
from typing import Any

from benchmarks._common import CLIENT_ID, GATEWAY, TABLE, CallRecorder, HandlerEnv, progress, push_events, summarize

GOAL_RATIO = 0.9
"""Issue 40: the push with write rules at least 0.9x the push without."""

RULES: dict[str, Any] = {
    "version": 1,
    "buckets": [
        {"name": "team", "tables": [TABLE], "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}]},
        {"name": "own", "tables": [], "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}]},
        {"name": "shared", "tables": ["announcements"], "filters": [], "write": {"ops": []}},
    ],
    "tables": {TABLE: {"write": {"immutableColumns": ["owner"]}}},
}


def _deltas(count: int, tag: str) -> list[Any]:
    """INSERTs of distinct rows of the client and its team, then an UPDATE of each tenth (a stored row to judge)."""
    from lakesync.core.delta import make_delta
    from lakesync.core.hlc import encode

    now_ms = int(time.time() * 1000)
    inserts = count - count // 10
    out = []
    for i in range(count):
        row = i if i < inserts else ((i - inserts) * 10) % inserts
        op = "INSERT" if i < inserts else "UPDATE"
        columns: dict[str, Any] = {"title": f"task {i}", "done": i % 3 == 0, "priority": i % 5}
        if op == "INSERT":
            columns |= {"team": "red", "owner": CLIENT_ID}
        out.append(
            make_delta(
                op,
                table=TABLE,
                row_id=f"{tag}-{row:06d}",
                client_id=CLIENT_ID,
                hlc=encode(now_ms + i // 65536, i % 65536),
                columns=columns,
            )
        )
    return out


def _run(env: HandlerEnv, push_module: Any, deltas: list[Any], batch: int, *, rules: bool) -> tuple[float, int]:
    """Seconds inside the handler for the whole push, and the DynamoDB calls it made."""
    from lakesync.auth import mint_token
    from lakesync.aws.config_store import DynamoDBConfigStore
    from lakesync.core.rules import parse_sync_rules

    names = env.new_tables()
    try:
        if rules:
            DynamoDBConfigStore(env.raw_client(), names).put_sync_rules(GATEWAY, parse_sync_rules(RULES))
        token = mint_token(CLIENT_ID, GATEWAY, env.secret, ttl_s=3600, claims={"team": "red"})
        events = push_events(deltas, batch, token)
        recorder = CallRecorder(record=frozenset())
        seconds = 0.0
        with recorder.attached(env.handler_client()):
            for event in events:
                start = time.perf_counter()
                result = env.invoke(push_module, event)
                seconds += time.perf_counter() - start
                body = json.loads(result.get("body") or "{}")
                if result["statusCode"] != 200 or body.get("accepted") != sum(1 for _ in body.get("receipts", ())):
                    raise RuntimeError(f"push refused or rejected: {result['statusCode']} {str(body)[:300]}")
        return seconds, sum(recorder.calls.values())
    finally:
        env.drop_tables(names)


def run(*, deltas: int, batch: int, repetitions: int, warmup_deltas: int) -> dict[str, Any]:
    """Measure (see the module docstring)."""
    import functions.push as push_module

    with HandlerEnv() as env:
        progress(f"write rules: warm-up ({warmup_deltas} deltas, with and without)")
        for rules in (False, True):
            _run(env, push_module, _deltas(warmup_deltas, f"warm{rules}"), min(batch, warmup_deltas), rules=rules)
        reps = []
        for i in range(repetitions):
            order = (False, True) if i % 2 == 0 else (True, False)
            figures: dict[bool, tuple[float, int]] = {}
            for rules in order:
                figures[rules] = _run(env, push_module, _deltas(deltas, f"r{i}{rules}"), batch, rules=rules)
            reps.append(figures)
            progress(
                f"write rules: repetition {i + 1}/{repetitions}: without {deltas / figures[False][0]:.0f} deltas/s, "
                f"with {deltas / figures[True][0]:.0f} deltas/s"
            )
    ratio = summarize([r[False][0] / r[True][0] for r in reps], digits=3)
    return {
        "workload": {
            "deltas": deltas,
            "deltas_per_request": batch,
            "shape": "90 % INSERTs of distinct rows, then UPDATEs of every tenth row; one table; one client",
            "rules": RULES,
            "claims": {"sub": CLIENT_ID, "team": "red"},
            "repetitions": repetitions,
            "warmup_deltas": warmup_deltas,
        },
        "without_rules_deltas_per_s": summarize([deltas / r[False][0] for r in reps], digits=1),
        "with_rules_deltas_per_s": summarize([deltas / r[True][0] for r in reps], digits=1),
        "ratio_with_over_without": ratio,
        "dynamodb_calls": {"without_rules": reps[0][False][1], "with_rules": reps[0][True][1]},
        "goal": {"ratio_at_least": GOAL_RATIO, "met": ratio["median"] >= GOAL_RATIO},
    }


def quick_summary(result: dict[str, Any]) -> str:
    """One line for the console."""
    calls = result["dynamodb_calls"]
    return (
        f"write rules: push with rules {result['with_rules_deltas_per_s']['median']:.0f} deltas/s, without "
        f"{result['without_rules_deltas_per_s']['median']:.0f}: {result['ratio_with_over_without']['median']:.3f}x "
        f"(goal >= {GOAL_RATIO}); DynamoDB calls {calls['with_rules']} with, {calls['without_rules']} without"
    )


def markdown(result: dict[str, Any]) -> list[str]:
    """The results section."""
    w = result["workload"]
    calls = result["dynamodb_calls"]
    ratio = result["ratio_with_over_without"]
    return [
        "## Push with write rules",
        "",
        f"{w['deltas']:,} deltas in pushes of {w['deltas_per_request']} ({w['shape']}), through the push handler on "
        "fresh tables, once on a gateway without sync rules and once with rules that confine writes (three buckets, "
        "one of them read-only, and an immutable `owner` column; every delta allowed), back to back in alternating "
        f"order, {w['repetitions']} repetitions after a warm-up.",
        "",
        "| | deltas/s (median) | min–max |",
        "|---|---|---|",
        f"| without rules | {result['without_rules_deltas_per_s']['median']:.0f} | "
        f"{result['without_rules_deltas_per_s']['min']:.0f}–{result['without_rules_deltas_per_s']['max']:.0f} |",
        f"| with write rules | {result['with_rules_deltas_per_s']['median']:.0f} | "
        f"{result['with_rules_deltas_per_s']['min']:.0f}–{result['with_rules_deltas_per_s']['max']:.0f} |",
        "",
        f"Ratio with / without: **{ratio['median']:.3f}×** (min {ratio['min']:.3f}, max {ratio['max']:.3f}; goal ≥ "
        f"{GOAL_RATIO}). DynamoDB calls of the whole push: {calls['with_rules']} with rules, "
        f"{calls['without_rules']} without (the rules come with the schemas in the one config `Query`).",
        "",
    ]
