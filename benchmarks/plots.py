"""The benchmarks' pictures: one figure style, a goal line, spreads of repetitions, saving; and
``python -m benchmarks.plots`` (``make bench-plots``), which draws every ``results/<stem>.png`` again from its
``results/<stem>.json`` with the benchmark's own ``plot`` function, without running anything.

matplotlib (the ``bench`` dependency group) is imported inside the functions, with the Agg backend, so the
benchmarks import without it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

RESULTS = Path(__file__).resolve().parent / "results"

OURS = "#4C72B0"
"""Our code's colour in every figure; floors and other systems are grey or :data:`OTHER`."""
FLOOR = "#8C8C8C"
OTHER = "#DD8452"
GOAL = "#C44E52"

Plot = Callable[[Mapping[str, Any], Path], object]


def figure(
    panels: int = 1, *, columns: int | None = None, width: float = 5.2, height: float = 3.8
) -> tuple[Figure, list[Axes]]:
    """A figure of ``panels`` panels, ``columns`` to a row (default: all in one), each ``width`` × ``height``
    inches, in the benchmarks' style; the panels in reading order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(columns or panels, panels)
    rows = -(-panels // columns)
    fig, grid = plt.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[panels:]:
        ax.remove()
    from matplotlib.ticker import FuncFormatter

    for ax in axes[:panels]:
        ax.yaxis.set_major_formatter(FuncFormatter(_number))
        ax.grid(axis="both", color="#E5E5E5", linewidth=0.8)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    return fig, axes[:panels]


def goal_line(ax: Axes, value: float, label: str, *, vertical: bool = False, linestyle: str = "--") -> None:
    """A goal (or floor) line at ``value``, dashed unless ``linestyle`` says otherwise, with ``label`` in the
    legend."""
    draw = ax.axvline if vertical else ax.axhline
    draw(value, color=GOAL, linestyle=linestyle, linewidth=1.2, label=label)


def spread(
    ax: Axes,
    series: Mapping[str, Sequence[float]],
    *,
    colours: Sequence[str] | None = None,
    unit: str = "",
    fmt: str = "{:,.0f}",
) -> None:
    """One box per label over its repetitions, every repetition as a dot and the median written beside the box:
    the spread a table's median hides."""
    labels = list(series)
    values = [list(series[k]) for k in labels]
    box = ax.boxplot(values, widths=0.5, patch_artist=True, showfliers=False, medianprops={"color": "black"})
    ax.set_xticks(range(1, len(labels) + 1), labels)
    for i, (patch, vals) in enumerate(zip(box["boxes"], values, strict=True)):
        colour = (colours or [OURS] * len(labels))[i]
        patch.set_facecolor(colour)
        patch.set_alpha(0.45)
        ax.plot([i + 1] * len(vals), vals, "o", color=colour, markersize=4)
        median = statistics.median(vals)
        ax.annotate(
            fmt.format(median) + (f" {unit}" if unit else ""),
            (i + 1.3, median),
            va="center",
            fontsize="small",
        )
    ax.set_xlim(0.5, len(labels) + 0.9)


def bars(
    ax: Axes,
    values: Mapping[str, float],
    *,
    colours: Sequence[str] | None = None,
    fmt: str = "{:,.0f}",
    log: bool = False,
) -> None:
    """Horizontal bars, first label on top, each value written at its bar's end."""
    labels = list(values)[::-1]
    numbers = [values[k] for k in labels]
    ax.barh(labels, numbers, color=list(colours or [OURS] * len(labels))[::-1])
    for y, v in enumerate(numbers):
        ax.text(v, y, " " + fmt.format(v), va="center", fontsize="small")
    if log:
        plain_log(ax, axis="x")
        ax.set_xlim(min(numbers) / 2, max(numbers) * 6)
    else:
        ax.set_xlim(0, max(numbers) * 1.3)
    ax.grid(axis="y", visible=False)


def plain_log(ax: Axes, *, axis: str = "y") -> None:
    """A log scale on ``axis`` whose ticks (at 1, 2 and 5 of each decade) read as plain numbers with thousands
    separators (``60,000``, not ``6×10⁴``)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    target.set_major_formatter(FuncFormatter(_number))
    target.set_minor_formatter(NullFormatter())


def _number(value: float, _position: object = None) -> str:
    """A tick label: thousands separated from 1,000 up, else as short as it goes."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:g}"


def save(fig: Figure, path: Path, *, title: str | None = None) -> Path:
    """Lay out ``fig`` (with ``title`` above its panels), write it to ``path`` as a PNG and free it."""
    import matplotlib.pyplot as plt

    if title:
        fig.suptitle(title, fontsize="large")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plotters(results: Path = RESULTS) -> dict[str, Plot]:
    """Each results stem that has a picture, and the function that draws it from the stem's JSON (``results``:
    where the cost picture finds its baseline run)."""
    from benchmarks import (
        client,
        connectors,
        durability,
        flush,
        freshness,
        lake,
        materialise,
        realtime,
        recovery,
        report,
        streams,
    )
    from benchmarks.cost import plot as cost

    def cost_plot(doc: Mapping[str, Any], path: Path) -> Path:
        return cost.plot(doc, path, baseline=cost.load_baseline(results))

    return {
        "latest": report.plot,
        "lake": lake.plot,
        "flush": flush.plot,
        "materialise": materialise.plot,
        "freshness": freshness.plot,
        "durability": durability.plot,
        "connectors": connectors.plot,
        "client": client.plot,
        "realtime": lambda doc, path: realtime.plot(dict(doc), path),
        "streams": streams.plot,
        "recovery": recovery.plot,
        "cost": cost_plot,
    }


def render(stems: Sequence[str], results: Path = RESULTS, out: Path | None = None) -> list[Path]:
    """Draw ``<stem>.png`` into ``out`` (default ``results``) from ``results/<stem>.json`` for each stem; returns
    the pictures written."""
    table = plotters(results)
    written = []
    for stem in stems:
        doc = json.loads((results / f"{stem}.json").read_text(encoding="utf-8"))
        path = (out or results) / f"{stem}.png"
        table[stem](doc, path)
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.plots [STEM ...] [--results DIR] [--out DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plots", description=__doc__.split("\n\n")[0])
    parser.add_argument("stems", nargs="*", help="results to draw (default: every one with a JSON and a plot)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="directory holding the <stem>.json files")
    parser.add_argument("--out", type=Path, help="where the pictures go (default: beside their JSON)")
    args = parser.parse_args(argv)
    known = plotters(args.results)
    unknown = [s for s in args.stems if s not in known]
    if unknown:
        parser.error(f"no plot for {', '.join(unknown)} (known: {', '.join(known)})")
    stems = args.stems or [s for s in known if (args.results / f"{s}.json").exists()]
    for path in render(stems, args.results, args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
