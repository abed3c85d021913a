"""The stack's CloudFormation template: synthesized from the CDK app, and read (our functions, the schedules and the
Glue jobs they start, the materialise queue's batch size, the compaction policy; no I/O in the readers)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from benchmarks._common import ROOT
from benchmarks.cost.lake import JOBS
from benchmarks.cost.model import compaction_wants, flush_runs_per_run, glue_dpus, runs_per_month


def synthesize(code_root: Path, out: Path) -> dict[str, dict[str, Any]]:
    """Synthesize the CDK app's ``prod`` (the defaults) and ``dev`` stacks offline; returns their templates."""
    env = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20", "CDK_DISABLE_CLI_TELEMETRY": "true"}
    env.pop("CDK_OUTDIR", None)
    if "UV" not in env and (ROOT / ".tools" / "bin" / "uv").exists():
        env["UV"] = str(ROOT / ".tools" / "bin" / "uv")  # the asset builds use the repository's uv
    command = [sys.executable, "infra/app.py", "--outdir", str(out), "-c", "lakesync:environments=prod,dev"]
    done = subprocess.run(command, cwd=code_root, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"synth failed: {done.stderr[-2000:]}")
    return {name: json.loads((out / f"LakeSync-{name}.template.json").read_text()) for name in ("prod", "dev")}


def fallback_functions() -> dict[str, dict[str, Any]]:
    """Memory and architecture of each function from the infra code when no template is synthesized."""
    sys.path.insert(0, str(code_root() / "infra"))
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    from lakesync_infra.common import LAMBDA_ARCHITECTURE, MATERIALISE_ARCHITECTURE
    from lakesync_infra.config import ALL_FUNCTIONS, LakeSyncConfig
    from lakesync_infra.function_access import ACCESS
    from lakesync_infra.functions import _memory

    config = LakeSyncConfig(name="prod")
    out = {}
    for name in ALL_FUNCTIONS:
        arch = MATERIALISE_ARCHITECTURE if name in ("materialise", "flush") else LAMBDA_ARCHITECTURE
        out[name] = {
            "memory_mb": _memory(config, name, ACCESS[name]),
            "architecture": arch.name,
            "traced": config.tracing,
        }
    return out


def code_root() -> Path:
    import functions

    return Path(functions.__file__).resolve().parent.parent


def of_type(template: Mapping[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    resources: Mapping[str, Any] = template.get("Resources", {})
    return {k: r.get("Properties", {}) for k, r in resources.items() if r.get("Type") == kind}


def refs(value: Any) -> Iterable[str]:
    """Logical ids a CloudFormation value refers to (``Ref`` and ``Fn::GetAtt``)."""
    if isinstance(value, Mapping):
        for fn, arg in value.items():
            if fn == "Ref" and isinstance(arg, str):
                yield arg
            elif fn == "Fn::GetAtt" and isinstance(arg, list) and arg:
                yield str(arg[0])
            else:
                yield from refs(arg)
    elif isinstance(value, list):
        for item in value:
            yield from refs(item)


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
    for props in of_type(template, "AWS::Lambda::Function").values():
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
    jobs = of_type(template, "AWS::Glue::Job")
    out = []
    for logical, props in of_type(template, "AWS::Scheduler::Schedule").items():
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
                for r in refs(target.get("Arn"))
                if resources.get(r, {}).get("Type") == "AWS::Lambda::Function"
            ),
            None,
        )
        job = next((jobs[r] for r in refs(target.get("Input")) if r in jobs), None)
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
    queues = of_type(template, "AWS::SQS::Queue")
    out = []
    for logical, props in of_type(template, "AWS::Lambda::EventSourceMapping").items():
        source = list(refs(props.get("EventSourceArn")))
        if not source or source[0] not in queues:
            continue
        pollers = 5 if props.get("ScalingConfig", {}).get("MaximumConcurrency") else 2
        out.append({"mapping": logical, "queue": source[0], "pollers": pollers})
    return out


def sqs_batch_size(template: Mapping[str, Mapping[str, Any]] | None) -> int:
    """The materialise event source's batch size (the template's, else Lambda's default of 10)."""
    if template:
        resources = template["prod"].get("Resources", {})
        for resource in resources.values():
            props = resource.get("Properties", {})
            if resource.get("Type") == "AWS::Lambda::EventSourceMapping" and "Queue" in json.dumps(
                props.get("EventSourceArn")
            ):
                return int(props.get("BatchSize", 10))
    return 10


def glue_setup(template: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """DPUs and DPU-hour price per Glue job, and how many flush runs' worth of deltas a compaction or checkpoint run
    carries at steady traffic: the flush on every flush tick, compaction on the first of its ticks its policy allows
    (the lake tick's environment), the checkpoint on the first of its ticks after a compaction."""

    if template:
        entries = schedules_of(template["prod"])
        runs: dict[str, float] = {}
        for entry in entries:
            kind = entry.get("job_kind") or _scheduled_job(entry)
            if kind in JOBS:
                runs[kind] = entry["runs"]
        glue = [e for e in entries if "dpus" in e]
        dpus = {e["job_kind"]: e["dpus"] for e in glue}
        prices = {e["job_kind"]: e["glue_price"] for e in glue}
    else:  # the config defaults: flush every 15 minutes, compact hourly, checkpoint every 6 hours, 2 G.1X workers, Flex
        runs = {
            "flush": runs_per_month("rate(15 minutes)"),
            "compact": runs_per_month("rate(1 hour)"),
            "checkpoint": runs_per_month("rate(6 hours)"),
        }
        dpus = dict.fromkeys(runs, 2.0)
        prices = dict.fromkeys(runs, "glue.dpu_hour.flex")
    # Compaction waits for its policy's flush runs (the lake tick's environment), the checkpoint for a compaction.

    if template:
        policy = _compact_policy(template["prod"])
    else:
        from lakesync.core.lake_work import DEFAULT_COMPACT_POLICY as default

        policy = (default.min_flush_runs, default.max_wait_ms // 60_000)
    interval_min = 30 * 24 * 60 / runs["flush"]
    ticks = {job: runs["flush"] / runs[job] for job in runs}
    compact = flush_runs_per_run(ticks["compact"], compaction_wants(*policy, interval_min))
    ratios = {"flush": 1.0, "compact": compact, "checkpoint": flush_runs_per_run(ticks["checkpoint"], compact)}
    return {
        "dpus": dpus,
        "prices": prices,
        "runs_per_month": {job: runs["flush"] / ratios[job] for job in runs},
        "schedule_runs_per_month": runs,
        "compact_policy": {"min_flush_runs": policy[0], "max_wait_minutes": policy[1]},
        "ratios": ratios,
    }


def _compact_policy(template: Mapping[str, Any]) -> tuple[int, int]:
    """The lake tick's compaction policy from its environment in the template (min flush runs, max wait minutes)."""
    for resource in template.get("Resources", {}).values():
        props = resource.get("Properties", {})
        if (
            resource.get("Type") == "AWS::Lambda::Function"
            and props.get("Handler") == "functions.lake_tick.lambda_handler"
        ):
            env = props.get("Environment", {}).get("Variables", {})
            return int(env["LAKESYNC_COMPACT_MIN_FLUSH_RUNS"]), int(env["LAKESYNC_COMPACT_MAX_WAIT_MINUTES"])
    raise ValueError("the template has no lake tick function")


def _scheduled_job(entry: Mapping[str, Any]) -> str | None:
    """The job a schedule's event names (``{"job": ...}`` to the lake tick), if any."""
    with contextlib.suppress(TypeError, ValueError, AttributeError):
        job = json.loads(entry.get("input") or "").get("job")
        return job if isinstance(job, str) else None
    return None
