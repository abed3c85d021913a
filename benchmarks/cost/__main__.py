"""``python -m benchmarks.cost``: run the cost benchmark and write ``cost.json``, ``cost.md`` and ``cost.png``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import cost
from benchmarks._common import machine_info, progress
from benchmarks.cost.figures import HEADLINE_RUN
from benchmarks.cost.markdown import render_markdown
from benchmarks.cost.plot import load_baseline, plot
from benchmarks.cost.prices import table_rows
from benchmarks.cost.run import run
from benchmarks.cost.template import code_root, synthesize
from benchmarks.cost.workloads import FULL, QUICK
from benchmarks.report import RESULTS, load_average, write


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and write the results files."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cost", description=(cost.__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="tiny workloads, no Spark, no synth")
    parser.add_argument("--no-spark", action="store_true", help="skip the lake (Glue jobs on local Spark)")
    parser.add_argument("--no-synth", action="store_true", help="skip the idle month (no CDK synth)")
    parser.add_argument("--spark", action="store_true", help="run the lake even with --quick")
    parser.add_argument("--template", type=Path, action="append", help="a synthesized template (repeatable)")
    parser.add_argument("--out", type=Path, help="results directory (default benchmarks/results; --quick: a temp dir)")
    parser.add_argument("--label", default="", help="a note recorded with the results")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    spark = (not args.quick or args.spark) and not args.no_spark
    out = args.out or (Path(tempfile.mkdtemp(prefix="lakesync-cost-")) if args.quick else RESULTS)
    started = time.perf_counter()
    load_start = load_average()
    machine = machine_info()  # before the run: its yardstick is timed on a machine the run has not loaded yet
    root = code_root()
    with tempfile.TemporaryDirectory(prefix="lakesync-cost-") as tmp:
        work = Path(tmp)
        template: dict[str, dict[str, Any]] | None = None
        if args.template:
            template = {
                p.stem.removeprefix("LakeSync-").removesuffix(".template"): json.loads(p.read_text())
                for p in args.template
            }
            template.setdefault("prod", next(iter(template.values())))
        elif not (args.quick or args.no_synth):
            progress("cost: synthesizing the CDK app (prod and dev)")
            template = synthesize(root, work / "cdk.out")
        results = run(sizes, spark=spark, template=template, work=work)
    doc = {
        "benchmark": "cost",
        "label": args.label or ("quick" if args.quick else "full"),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - started, 1),
        "machine": {**machine, "load_average_start": load_start, "load_average_end": load_average()},
        "code_root": str(root),
        "sizes": {**asdict(sizes), "push_deltas": {str(k): v for k, v in sizes.push_deltas.items()}},
        "headline_run_deltas": HEADLINE_RUN,
        "prices": table_rows(),
        "results": results,
    }
    json_path, md_path = write(doc, out, stem="cost", render=render_markdown, ensure_ascii=True)
    png = plot(doc, out / "cost.png", baseline=load_baseline(RESULTS))
    progress(f"cost: wrote {json_path}, {md_path} and {png}")
    with contextlib.suppress(Exception):
        shutil.rmtree(Path(os.environ.get("LAKESYNC_COST_DIR", "/nonexistent")), ignore_errors=True)


if __name__ == "__main__":
    main()
