"""The README's main command: the demo runs end to end over HTTP and shows what it claims."""

from __future__ import annotations

import pytest

from lakesync.local.demo import run

pytestmark = pytest.mark.integration


def test_demo_merges_concurrent_column_edits_and_respects_sync_rules() -> None:
    lines: list[str] = []
    tables = run(say=lines.append)

    red = tables["carol"]
    assert tables["alice"] == tables["bob"] == red
    assert red["t1"] == {"title": "Buy milk and eggs", "done": True, "team": "red", "prio": 3}
    assert "t2" not in red  # alice's delete reached every red client
    assert list(tables["dave"]) == ["b1"]  # blue sees only blue
    assert any("lost to alice" in line for line in lines)  # the late offline edit's receipt names the winner
