"""The cost benchmark as a picture: dollars per million deltas for each workload, by service, beside the baseline
run and the same traffic on AppSync and Firestore (``benchmarks/results/cost.png``).

``python -m benchmarks.cost.plot`` draws it again from ``cost.json`` (and ``cost-baseline.json`` when present) without
running the benchmark; ``make bench-cost`` draws it after every run.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.cost.pricing import SERVICES, comparisons
from benchmarks.report import RESULTS

GOAL_USD = 1.50
"""Issue 15's goal, all in, for pushes of 10 rows of 250 B pulled by one client."""
GOAL_WORKLOAD = (250, 10, 1)
COLOURS = {
    "DynamoDB": "#4C72B0",
    "Lambda": "#DD8452",
    "API Gateway": "#55A868",
    "Glue": "#8172B3",
    "CloudWatch Logs": "#937860",
    "X-Ray": "#DA8BC3",
    "other": "#B3B3B3",
}
"""Services drawn as their own segment; SQS, S3 and "Other" (data transfer, Secrets Manager) are drawn as one."""
MARKERS = {
    "AWS AppSync (+ DataStore)": ("^", "#C44E52"),
    "Firestore Standard, us-east1": ("s", "#CCB974"),
}


def _segments(usd: Mapping[str, float]) -> dict[str, float]:
    out = {name: float(usd.get(name, 0.0)) for name in COLOURS if name != "other"}
    out["other"] = sum(float(usd.get(name, 0.0)) for name in SERVICES if name not in COLOURS)
    return out


def _workloads(doc: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The push/pull workloads, by readers, then row size, then batch size."""
    runs = doc["results"]["push_pull"]
    return sorted(
        runs.items(),
        key=lambda kv: (kv[1]["workload"]["readers"], kv[1]["row_bytes"], kv[1]["workload"]["batch"]),
    )


def _label(run: Mapping[str, Any]) -> str:
    size = int(run["row_bytes"])
    rows = f"{size / 1024:g} KB" if size >= 1024 else f"{size} B"
    return f"{rows} rows, pushes of {run['workload']['batch']}"


def plot(doc: Mapping[str, Any], out: Path, *, baseline: Mapping[str, Any] | None = None) -> Path:
    """Draw ``doc`` (a ``cost.json``) into the PNG ``out``; ``baseline`` (another run) is marked per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = _workloads(doc)
    readers = sorted({run["workload"]["readers"] for _, run in workloads})
    before = baseline["results"]["push_pull"] if baseline is not None else {}
    before_label = f"before: baseline run of {str(baseline['finished_at'])[:10]}" if baseline is not None else ""
    fig, axes = plt.subplots(1, len(readers), figsize=(7.2 * len(readers), 5.8), squeeze=False)
    for ax, reader_count in zip(axes[0], readers, strict=True):
        rows = [(name, run) for name, run in workloads if run["workload"]["readers"] == reader_count]
        _draw_panel(ax, rows, before, before_label)
        who = "one client" if reader_count == 1 else f"{reader_count} clients"
        ax.set_title(f"each delta pulled by {who}", fontsize=11)
    handles, labels = axes[0][0].get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))  # the markers are drawn once per workload: one entry each
    unique = {label: unique[label] for label in sorted(unique, key=lambda label: label not in COLOURS)}
    fig.legend(list(unique.values()), list(unique), loc="lower center", ncol=5, fontsize=8.5, frameon=False)
    fig.suptitle(
        f"Dollars per million deltas, all in (push, pull, flush, lake), us-east-1 list prices; run of "
        f"{str(doc['finished_at'])[:10]}",
        fontsize=12,
    )
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _draw_panel(
    ax: Any, rows: Sequence[tuple[str, Mapping[str, Any]]], before: Mapping[str, Any], before_label: str
) -> None:
    ys = list(range(len(rows)))[::-1]
    left = [0.0] * len(rows)
    segments = [_segments(run["usd_per_million"]) for _, run in rows]
    for service, colour in COLOURS.items():
        widths = [row[service] for row in segments]
        ax.barh(ys, widths, left=left, color=colour, height=0.62, label=service)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    top = max(left)
    for y, (name, run), total in zip(ys, rows, left, strict=True):
        ax.annotate(
            f"${total:.2f}",
            (total, y),
            xytext=(4, -3),
            textcoords="offset points",
            fontsize=8.5,
            bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
            zorder=4,
        )
        was = before.get(name)
        if was is not None:
            then = float(was["usd_per_million"]["total"])
            top = max(top, then)
            ax.plot(
                [then], [y], marker="D", color="black", markersize=5, linestyle="none", label=before_label, zorder=3
            )
        for service, (marker, colour) in MARKERS.items():
            other = sum(comparisons(run["row_bytes"], run["workload"]["readers"])[service].values())
            top = max(top, other)
            ax.plot([other], [y], marker=marker, color=colour, markersize=6, linestyle="none", label=service, zorder=3)
        if (run["row_bytes"], run["workload"]["batch"], run["workload"]["readers"]) == GOAL_WORKLOAD:
            ax.axvline(GOAL_USD, color="#C44E52", linestyle="--", linewidth=1)
            ax.annotate(
                f"goal ${GOAL_USD:.2f}", (GOAL_USD, y + 0.45), xytext=(3, 0), textcoords="offset points", fontsize=8
            )
    ax.set_yticks(ys, [_label(run) for _, run in rows], fontsize=9)
    ax.set_xlim(0, top * 1.12)
    ax.set_xlabel("$ per million deltas")
    ax.grid(axis="x", alpha=0.3)


def load_baseline(results: Path) -> dict[str, Any] | None:
    """The baseline run kept beside the results (``cost-baseline.json``), or ``None`` when there is none."""
    path = results / "cost-baseline.json"
    return json.loads(path.read_text()) if path.exists() else None


def main(argv: list[str] | None = None) -> None:
    """Draw ``cost.png`` from the results directory's ``cost.json`` (and ``cost-baseline.json``)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cost.plot", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="directory holding cost.json")
    args = parser.parse_args(argv)
    doc = json.loads((args.results / "cost.json").read_text())
    print(f"wrote {plot(doc, args.results / 'cost.png', baseline=load_baseline(args.results))}")


if __name__ == "__main__":
    main()
