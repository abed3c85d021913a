"""The real-time benchmark's arithmetic and results (benchmarks/realtime.py), without a stack: latencies from the
listener processes' arrivals, what did not arrive, and the results files with the before figures and the cost of
idle clients."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import realtime


def test_each_listeners_arrival_counts_from_the_pushs_acknowledgement() -> None:
    acked = {"rt-0": 10.0, "rt-1": 20.0}
    arrivals = [{"rt-0": [10.010, 10.020], "rt-1": [20.030]}, {"rt-0": [10.040]}]
    run = realtime._summary(2, 2, acked, arrivals, cpu_s=0.2, invocations=[0.01, 0.03])
    assert run["received"] == 4 and run["missing"] == 0
    assert run["p50_ms"] == 30.0 and run["max_ms"] == 40.0
    assert run["server_cpu_ms_per_change"] == 100.0 and run["broadcaster_ms_per_invocation"] == 20.0
    assert realtime._summary(3, 2, acked, arrivals, 0.2, [])["missing"] == 2


def test_the_results_keep_the_before_figures_and_the_cost_of_idle_clients(tmp_path: Path) -> None:
    run = realtime._summary(1, 1, {"rt-0": 1.0}, [{"rt-0": [1.05]}], cpu_s=0.01, invocations=[0.01])
    before = tmp_path / "before.json"
    before.write_text(json.dumps({"runs": [{**run, "p99_ms": 900.0}]}))
    calls = []

    def fake(samples: int, listeners: int, processes: int) -> dict[str, object]:
        calls.append((samples, listeners, processes))
        return {**run, "listeners": listeners}

    out = tmp_path / "out"
    assert (
        realtime.main(["--samples", "3", "--listeners", "1,4", "--out", str(out), "--before", str(before)], fake) == 0
    )
    assert calls == [(3, 1, 2), (3, 4, 2)]
    doc = json.loads((out / "realtime.json").read_text())
    assert [r["listeners"] for r in doc["runs"]] == [1, 4] and doc["before"][0]["p99_ms"] == 900.0
    text = (out / "realtime.md").read_text()
    assert "Before" in text and "connected idle clients" in text
    assert (out / "realtime.png").stat().st_size > 0
    # A later run without --before keeps the before figures the results hold.
    realtime.main(["--samples", "3", "--listeners", "1", "--out", str(out)], fake)
    assert json.loads((out / "realtime.json").read_text())["before"][0]["p99_ms"] == 900.0
