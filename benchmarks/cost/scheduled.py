"""The scheduled functions invoked on an idle stack, with their schedule's input and the template's environment."""

from __future__ import annotations

import importlib.util
import json
import uuid
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from benchmarks._common import progress
from benchmarks.cost.environment import CHECKPOINT_BUCKET, CLAIM_CHECK_BUCKET, CostEnv, environ, merge_passes, usage_of
from benchmarks.cost.pricing import price_usage
from benchmarks.cost.template import job_kind, schedules_of
from benchmarks.cost.workloads import PUSH_GATEWAY


def _clear_caches(module: ModuleType) -> None:
    """Forget what a handler module built on its first invocation (its ``functools`` caches)."""
    from functions._runtime import reset_runtime

    reset_runtime()
    for value in vars(module).values():
        clear = getattr(value, "cache_clear", None)
        if callable(clear):
            clear()


def measure_scheduled(env: CostEnv, template: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Invoke each function a schedule targets, with the schedule's input, on an idle stack (fresh tables, nothing
    pushed): once to warm it, once counted, once timed. Its environment is the template's, with each ``Ref`` to a
    table, bucket, queue or Glue job resolved to this run's (tables by the logical name in their id)."""

    resources: Mapping[str, Any] = template.get("Resources", {})
    names = env.new_tables()
    env.configure(names, PUSH_GATEWAY)
    glue = env.raw("glue")
    job_names: dict[str, str] = {}
    for logical, resource in resources.items():
        if resource.get("Type") == "AWS::Glue::Job":
            name = f"cost-{job_kind(resource.get('Properties', {}))}-{uuid.uuid4().hex[:6]}"
            glue.create_job(Name=name, Role="arn:aws:iam::123456789012:role/glue", Command={"Name": "glueetl"})
            job_names[logical] = name

    def resolve(value: Any) -> str | None:
        if isinstance(value, str):
            return value
        ref = value.get("Ref") if isinstance(value, Mapping) else None
        target = resources.get(str(ref), {})
        kind = target.get("Type")
        if kind == "AWS::DynamoDB::Table":
            lowered = str(ref).lower()
            return next((t for k, t in names.as_dict().items() if k in lowered), None)
        if kind == "AWS::S3::Bucket":
            return CHECKPOINT_BUCKET if "checkpoint" in str(ref).lower() else CLAIM_CHECK_BUCKET
        if kind == "AWS::SQS::Queue":
            return env.queue_url
        if kind == "AWS::Glue::Job":
            return job_names.get(str(ref))
        if kind == "AWS::Lambda::Function":  # the flush function the tick would queue (an idle tick queues none)
            return f"cost-{ref}"[:64]
        return None

    out: dict[str, dict[str, Any]] = {}
    for entry in schedules_of(template):
        if "function" not in entry:
            continue
        function = next(
            r
            for r in resources.values()
            if r.get("Type") == "AWS::Lambda::Function"
            and str(r.get("Properties", {}).get("Handler", "")).startswith(f"functions.{entry['function']}.")
        )
        raw_vars = function.get("Properties", {}).get("Environment", {}).get("Variables", {})
        variables = {k: v for k, v in ((k, resolve(v)) for k, v in raw_vars.items()) if v is not None}
        module = importlib.import_module(f"functions.{entry['function']}")
        event = json.loads(entry.get("input") or "{}")
        phase = f"idle:{entry['schedule']}"
        with environ(variables, drop=["LAKESYNC_TABLE_PREFIX"]):
            _clear_caches(module)
            try:
                env.invoke(module, event, api=False)
                with env.measuring("count", phase):
                    result = env.invoke(module, event, api=False)
                with env.measuring("time", phase):
                    env.invoke(module, event, api=False)
            finally:
                _clear_caches(module)
        usage = usage_of(env.meter, phase)
        starts = sum(v for k, v in usage.items() if k.startswith("glue|") and "|StartJobRun|" in k)
        queued = sum(v for k, v in usage.items() if k.startswith("lambda|") and "|Invoke|" in k)
        if queued:
            raise RuntimeError(f"an idle {entry['function']} tick queued {queued:g} flush function run(s)")
        invocations = merge_passes(env, phase).get(entry["function"], {})
        out[entry["schedule"]] = {
            "function": entry["function"],
            "input": event,
            "result": result,
            "invocations": invocations,
            "usage": usage,
            "glue_starts": starts,
        }
        progress(
            f"cost: idle {entry['function']} {event}: {1000 * invocations.get('seconds', 0.0):.0f} ms, "
            f"{sum(price_usage(usage).values()) * 1e6:.2f} $ per million invocations in requests, "
            f"{starts:g} Glue run(s) started"
        )
    env.drop_tables(names)
    return out
