"""The benchmarks' pictures (``benchmarks/plots.py``): every committed results JSON that has a plot function still
draws, so a change to a results format that breaks its picture fails here, and each results page shows its picture.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.plots import RESULTS, main, plotters, render

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
STEMS = [stem for stem in plotters() if (RESULTS / f"{stem}.json").exists()]


def test_every_benchmark_with_committed_results_has_a_picture_to_draw():
    # Given the committed results; then the benchmarks of every make bench* target are among those drawn
    assert {"latest", "lake", "flush", "materialise", "freshness", "durability", "connectors", "client"} <= set(STEMS)
    assert {"realtime", "streams", "recovery", "cost"} <= set(STEMS)


@pytest.mark.parametrize("stem", STEMS)
def test_plot_draws_a_png_from_the_committed_json(stem: str, tmp_path: Path):
    # When the picture is drawn again from its committed JSON into a scratch directory
    (path,) = render([stem], RESULTS, tmp_path)

    # Then a PNG of some substance is there, and the committed Markdown shows it
    data = path.read_bytes()
    assert path == tmp_path / f"{stem}.png"
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 10_000
    assert f"({stem}.png)" in (RESULTS / f"{stem}.md").read_text(encoding="utf-8")


def test_main_refuses_a_stem_without_a_plot(capsys: pytest.CaptureFixture[str]):
    # When asked for a picture nobody draws; then it says so and exits with a usage error
    with pytest.raises(SystemExit) as exit_info:
        main(["no-such-benchmark"])
    assert exit_info.value.code == 2
    assert "no plot for no-such-benchmark" in capsys.readouterr().err
