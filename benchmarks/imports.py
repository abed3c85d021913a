"""Cold import time of each Lambda handler module, in a fresh interpreter, as a Lambda cold start pays it.

The modules are imported from the API functions' Lambda asset as ``lakesync_infra.packaging`` builds it (its
bytecode included; built for this machine's CPU, since the deployed ARM64 one would not load its extensions here),
with only the AWS SDK beside it, as the runtime provides it (linked from this venv), and ``-I -S``: nothing of the
repository or the venv is on the path. For each module, a fresh interpreter imports it ``runs`` times (after one
unmeasured run that warms the OS file cache and writes the SDK's bytecode, which the runtime ships). Two figures:

* **in-process** (the goal's verdict): the import statement timed inside the fresh interpreter with
  ``time.perf_counter`` -- what a Lambda cold start pays in its INIT phase (the runtime is already up, and the
  process is not torn down after the import).
* **wall - bare**: the median wall time of the whole process minus that of ``python -c "pass"`` (interleaved), as
  the issue suggested; it also counts the interpreter's teardown of everything imported.

The environment is the handlers' (table prefix, JWT secret, fake AWS endpoint), so the numbers include whatever
import-time work the configuration would cause.

``python -X importtime`` of the same import lists the top offenders: import time by top-level package (the sum
of its modules' self times, so the packages add up to the total), the modules with the largest self time, and the
cumulative time of each ``lakesync``/``functions`` module (what importing it pulls in). One run also checks which
heavy packages were loaded (the Lambda path must not load pyspark, pyiceberg, pandas, pyarrow).
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import ROOT, progress, summarize
from lakesync.api_routes import FUNCTIONS

MODULES = tuple(FUNCTIONS.values())
"""Every Lambda handler module of the HTTP API (the route table's)."""
DEPENDENCIES = (
    "aws_xray_sdk.core",
    "aws_lambda_powertools.tracing",
    "aws_lambda_powertools.event_handler",
    "jwt.algorithms",
    "boto3",
    "botocore.session",
    "google.protobuf.message",
)
"""Third-party modules the handlers load, each timed alone in a fresh interpreter (what it costs by itself)."""
GOAL_MS = 120.0
"""Issue 15: every handler module imported in at most 120 ms (median, in process)."""
FORBIDDEN = ("pyspark", "pyiceberg", "pandas", "pyarrow", "numpy", "moto")
_IMPORTTIME = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S.*)$")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKESYNC_", "AWS_", "POWERTOOLS_"))}
    env.update(
        {
            "LAKESYNC_TABLE_PREFIX": "bench",
            "LAKESYNC_JWT_SECRET": "bench-secret-bench-secret-bench-secret",
            "LAKESYNC_GATEWAY_IDS": "default",
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_SERVICE_NAME": "lakesync",
            "POWERTOOLS_METRICS_NAMESPACE": "LakeSync",
        }
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the warm-up writes the SDK's bytecode (the runtime ships it)
    return env


SDK_MODULES = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "six.py", "urllib3")
"""What the Lambda runtime puts on the path besides the function's code: the AWS SDK and its dependencies."""


@dataclass(frozen=True)
class Runtime:
    """Where a measured interpreter runs: the asset and the SDK on its path, in an empty working directory."""

    asset: Path
    sdk: Path
    cwd: Path

    def command(self, code: str, *flags: str) -> list[str]:
        prelude = f"import sys; sys.path[:0] = [{str(self.asset)!r}, {str(self.sdk)!r}]\n"
        return [sys.executable, "-I", "-S", *flags, "-c", prelude + code]


def build_asset() -> Path:
    """The API functions' Lambda asset for this machine's CPU (cached under ``build/`` by its content hash)."""
    platform_tag = f"{platform.machine()}-manylinux2014"
    code = (
        "from lakesync_infra.packaging import build_lambda_asset\n"
        f"print(build_lambda_asset(platform={platform_tag!r}, name='bench-lambda'))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "infra")}
    if "UV" not in env and (ROOT / ".tools" / "bin" / "uv").exists():
        env["UV"] = str(ROOT / ".tools" / "bin" / "uv")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"building the Lambda asset failed: {done.stderr[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def _runtime(scratch: Path) -> Runtime:
    import boto3

    site = Path(boto3.__file__).resolve().parent.parent
    sdk = scratch / "runtime-sdk"
    sdk.mkdir()
    for name in SDK_MODULES:
        (sdk / name).symlink_to(site / name)
    cwd = scratch / "cwd"
    cwd.mkdir()
    return Runtime(build_asset(), sdk, cwd)


def _wall(code: str, env: dict[str, str], runtime: Runtime) -> float:
    start = time.perf_counter()
    subprocess.run(runtime.command(code), cwd=runtime.cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def _import(module: str, env: dict[str, str], runtime: Runtime) -> tuple[float, float]:
    """(wall seconds of the process, seconds of the import statement inside it)."""
    code = f"import time as _t\n_s = _t.perf_counter()\nimport {module}\nprint(_t.perf_counter() - _s)"
    start = time.perf_counter()
    out = subprocess.run(runtime.command(code), cwd=runtime.cwd, env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - start, float(out.stdout.strip().splitlines()[-1])


def _importtime(module: str, env: dict[str, str], runtime: Runtime) -> list[tuple[int, int, int, str]]:
    out = subprocess.run(
        runtime.command(f"import {module}", "-X", "importtime"),
        cwd=runtime.cwd,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    rows = []
    for line in out.stderr.splitlines():
        found = _IMPORTTIME.match(line)
        if found:
            self_us, cumulative_us, indent, name = found.groups()
            rows.append((int(self_us), int(cumulative_us), len(indent) // 2, name.strip()))
    return rows


def _offenders(rows: list[tuple[int, int, int, str]], top: int) -> dict[str, Any]:
    by_package: dict[str, int] = defaultdict(int)
    ours: dict[str, int] = {}
    for self_us, cumulative_us, _depth, name in rows:
        root = name.split(".", 1)[0]
        by_package[root] += self_us
        if root in ("lakesync", "functions"):
            ours[name] = cumulative_us
    total = sum(self_us for self_us, _c, _d, _n in rows)
    self_top = sorted(rows, key=lambda r: -r[0])[:top]
    return {
        "total_ms": round(total / 1000, 1),
        "packages_self_ms": {
            name: round(us / 1000, 1) for name, us in sorted(by_package.items(), key=lambda kv: -kv[1])[:top]
        },
        "our_modules_cumulative_ms": {
            name: round(us / 1000, 1) for name, us in sorted(ours.items(), key=lambda kv: -kv[1])[:top]
        },
        "modules_self_ms": {name: round(s / 1000, 1) for s, _c, _d, name in self_top},
    }


def run(*, runs: int, top: int = 10) -> dict[str, Any]:
    """Measure every handler module (see the module docstring). Returns the figures for the results file."""
    progress("imports: building the Lambda asset (cached by its content hash)")
    with tempfile.TemporaryDirectory(prefix="lakesync-imports-") as scratch:
        return _run(runs, top, _runtime(Path(scratch)))


def _run(runs: int, top: int, runtime: Runtime) -> dict[str, Any]:
    env = _env()
    for module in MODULES:  # warm the file cache and the bytecode caches
        _wall(f"import {module}", env, runtime)
    _wall("pass", env, runtime)
    bare: list[float] = []
    walls: dict[str, list[float]] = {m: [] for m in MODULES}
    inside: dict[str, list[float]] = {m: [] for m in MODULES}
    for i in range(runs):
        bare.append(_wall("pass", env, runtime))
        for module in MODULES:
            wall_s, inside_s = _import(module, env, runtime)
            walls[module].append(wall_s)
            inside[module].append(inside_s)
        progress(f"imports: round {i + 1}/{runs} done")
    bare_ms = statistics.median(bare) * 1000
    modules: dict[str, Any] = {}
    for module in MODULES:
        in_process = summarize([s * 1000 for s in inside[module]], digits=1)
        wall = summarize([s * 1000 for s in walls[module]], digits=1)
        modules[module] = {
            "import_ms": in_process["median"],
            "goal_met": in_process["median"] <= GOAL_MS,
            "in_process_ms": in_process,
            "wall_minus_bare_ms": round(wall["median"] - bare_ms, 1),
            "wall_ms": wall,
            "importtime": _offenders(_importtime(module, env, runtime), top),
        }
    dependencies = {}
    for module in DEPENDENCIES:
        _import(module, env, runtime)
        dependencies[module] = summarize(
            [_import(module, env, runtime)[1] * 1000 for _ in range(max(2, runs - 2))], digits=1
        )
    progress("imports: dependencies timed alone")
    loaded = subprocess.run(
        runtime.command(
            "import json\n"
            + "".join(f"import {m}\n" for m in MODULES)
            + f"print(json.dumps(sorted(m for m in {list(FORBIDDEN)!r} if m in sys.modules)))"
        ),
        cwd=runtime.cwd,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    progress("imports: done")
    return {
        "method": f"{runs} fresh `python -I -S -c 'import <module>'` processes per module, the API functions' Lambda "
        "asset (with its bytecode, built for this CPU) and the runtime's AWS SDK alone on the path (after one warm-up "
        "run each): "
        "the import statement timed inside the process (median; the goal's verdict, what a Lambda INIT pays), and "
        f"the process's wall time minus that of `python -c pass` (medians of {runs}, interleaved)",
        "runs": runs,
        "bare_interpreter_ms": summarize([b * 1000 for b in bare], digits=1),
        "goal_ms": GOAL_MS,
        "modules": modules,
        "dependencies_alone_in_process_ms": dependencies,
        "heavy_packages_loaded_by_handlers": json.loads(loaded.stdout),
    }


def quick_summary(result: dict[str, Any]) -> str:
    """One line for the console."""
    parts = [f"{m.split('.')[-1]} {r['import_ms']:.0f}ms" for m, r in result["modules"].items()]
    return f"imports (goal <= {GOAL_MS:.0f}ms): " + ", ".join(parts)
