"""What the benchmarks record of the machine that ran them: a yardstick to compare timings across machines."""

from __future__ import annotations

import math

from benchmarks._common import machine_info
from benchmarks.cost.markdown import yardstick


def test_machine_info_records_theyardstick():
    # Given the machine description every benchmark stores with its results
    info = machine_info()
    # Then it holds the yardstick: a positive, finite number of milliseconds
    assert isinstance(info["yardstick_ms"], float)
    assert 0 < info["yardstick_ms"] < math.inf


def test_cost_report_header_shows_the_yardstick_only_when_recorded():
    # Given the machine of a run with a yardstick, and of an older run without one
    # Then the header names it with its unit, and says nothing of it otherwise
    assert "120.3 ms" in yardstick({"yardstick_ms": 120.3})
    assert yardstick({"cpu_count": 2}) == ""
