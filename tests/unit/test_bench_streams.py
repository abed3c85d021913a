"""The streams benchmark (benchmarks/streams.py) end to end in its smallest configuration, so it cannot rot: a moto
server, the deployed wiring, every measurement and the results files; no timing is asserted."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import streams


def test_the_smallest_run_writes_every_figure(tmp_path: Path) -> None:
    # When the benchmark runs on a few hundred rows and a dozen clients (every fourth also on moto)
    args = ["--rows", "400", "--rules-rows", "400", "--clients", "12", "--sample", "4", "--out", str(tmp_path)]
    assert streams.main(args) == 0
    doc = json.loads((tmp_path / "streams.json").read_text())
    # Then the backfill entered the subscribed project's rows from both sources, the checkpoint read by cost
    backfill = doc["backfill"]
    assert backfill["log"]["rows"] == backfill["checkpoint"]["rows"] == 40
    assert backfill["log"]["reads"]["entries"] >= backfill["log_entries"]
    assert backfill["checkpoint"]["reads"]["object_bytes"] > 0 and backfill["checkpoint"]["reads"]["entries"] == 0
    # And each membership change moved its project's rows in or out
    moved = [(c["rows_entered"], c["rows_dropped"]) for c in doc["membership"]["changes"]]
    assert moved == [(4, 0), (4, 0), (4, 0), (0, 4), (0, 4)]
    # And the rules change was served as differences equal on moto and in memory, smaller than re-bootstrapping
    rules = doc["rules_change"]
    assert rules["moto_sample_matches_memory"] and rules["moto"]["clients"] == 3
    assert 0 < rules["memory"]["deltas"] < rules["bootstrap"]["deltas"]
    assert rules["bootstrap"]["distinct_claims"] <= 12
    text = (tmp_path / "streams.md").read_text()
    assert "## A rules change for 12 clients" in text and "Membership changes" in text
