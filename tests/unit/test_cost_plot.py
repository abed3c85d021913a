"""The cost benchmark's picture: each workload's bar is its dollars by service, stacked to its total, beside the
baseline run and the comparisons; one panel per reader count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.image
import matplotlib.pyplot as plt
import pytest

from benchmarks.cost.plot import COLOURS, _draw_panel, _segments, plot
from benchmarks.cost.pricing import SERVICES, comparisons


def _run(row_bytes: int, batch: int, readers: int, scale: float) -> dict[str, Any]:
    usd = {service: scale * (i + 1) / 10 for i, service in enumerate(SERVICES)}
    usd["total"] = sum(usd.values())
    return {"row_bytes": row_bytes, "workload": {"batch": batch, "readers": readers}, "usd_per_million": usd}


def _doc(scale: float) -> dict[str, Any]:
    runs = {
        f"rows {size} B, pushes of {batch}, pulled by {readers}": _run(size, batch, readers, scale * batch**-0.5)
        for size in (250, 2048)
        for batch in (1, 10)
        for readers in (1, 10)
    }
    return {"finished_at": "2026-11-29T00:00:00+00:00", "results": {"push_pull": runs}}


def test_segments_add_up_to_the_total_and_fold_the_small_services_into_other() -> None:
    usd = _run(250, 10, 1, 1.0)["usd_per_million"]
    segments = _segments(usd)
    assert list(segments) == list(COLOURS)
    assert sum(segments.values()) == pytest.approx(usd["total"])
    assert segments["other"] == pytest.approx(usd["SQS"] + usd["S3"] + usd["Other"])


def test_each_bar_stacks_its_services_to_the_workloads_total_beside_its_baseline_and_the_comparisons() -> None:
    doc, before = _doc(1.0), _doc(3.0)
    rows = [(name, run) for name, run in doc["results"]["push_pull"].items() if run["workload"]["readers"] == 1]
    fig, ax = plt.subplots()
    try:
        _draw_panel(ax, rows, before["results"]["push_pull"], "before")
        ends: dict[float, float] = {}
        for bar in ax.patches:
            y = round(bar.get_y() + bar.get_height() / 2, 6)
            ends[y] = max(ends.get(y, 0.0), bar.get_x() + bar.get_width())
        # The first row is drawn at the top.
        ys = sorted(ends, reverse=True)
        assert [ends[y] for y in ys] == pytest.approx([run["usd_per_million"]["total"] for _, run in rows])
        markers = {line.get_label(): [] for line in ax.get_lines()}
        for line in ax.get_lines():
            markers[line.get_label()].append(float(line.get_xdata()[0]))
        assert markers["before"] == pytest.approx(
            [before["results"]["push_pull"][n]["usd_per_million"]["total"] for n, _ in rows]
        )
        appsync = [sum(comparisons(run["row_bytes"], 1)["AWS AppSync (+ DataStore)"].values()) for _, run in rows]
        assert markers["AWS AppSync (+ DataStore)"] == pytest.approx(appsync)
        assert [tick.get_text() for tick in ax.get_yticklabels()] == [
            "250 B rows, pushes of 1",
            "250 B rows, pushes of 10",
            "2 KB rows, pushes of 1",
            "2 KB rows, pushes of 10",
        ]
    finally:
        plt.close(fig)


def test_plot_writes_a_png_with_a_panel_per_reader_count(tmp_path: Path) -> None:
    out = plot(_doc(1.0), tmp_path / "nested" / "cost.png", baseline=_doc(2.0))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = matplotlib.image.imread(out).shape
    assert width > 2 * height  # two panels side by side
