"""The README's main command: the demo runs end to end over HTTP and through the lake, and shows what it claims."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lakesync.local.demo import run
from tests.terminal import noise

pytestmark = pytest.mark.integration


def test_demo_http_half_merges_concurrent_column_edits_and_respects_sync_rules() -> None:
    lines: list[str] = []
    tables = run(say=lines.append, lake=False)

    red = tables["carol"]
    assert tables["alice"] == tables["bob"] == red
    assert red["t1"] == {"title": "Buy milk and eggs", "done": True, "team": "red", "prio": 3}
    assert "t2" not in red  # alice's delete reached every red client
    assert list(tables["dave"]) == ["b1"]  # blue sees only blue
    assert any("lost to alice" in line for line in lines)  # the late offline edit's receipt names the winner
    # Both concurrent edits reached carol's socket as broadcasts; blue dave's socket got nothing of red t1
    assert tables["carol_socket"] == {"t1": {"title": "Buy milk and eggs", "done": True, "prio": 3}}
    assert "   dave's socket (team blue) received 0 delta(s): t1 is not in his bucket" in lines


@pytest.mark.spark
def test_lakesync_demo_runs_the_whole_loop_in_its_own_process() -> None:
    # Its own process: the demo starts its own Spark session on its own lake.
    out = subprocess.run(
        [sys.executable, "-m", "lakesync.cli", "demo"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "erin == a client that replayed every delta: True" in out.stdout
    # Its story and nothing else: no metric's EMF JSON, no JSON log line, no Spark banner or warning, no traceback
    assert noise(out.stdout.splitlines() + out.stderr.splitlines()) == []
    assert out.stderr == ""
    before = next(line for line in out.stdout.splitlines() if "as of snapshot" in line)
    now = next(line for line in out.stdout.splitlines() if "and now:" in line)
    assert "Buy milk and eggs'" in before and "Buy milk, eggs and bread" in now
    # And the flushed rows were materialised into SQLite, as every client folds them (t2 deleted, blue b1 too)
    assert "10. the flushes were materialised into" in out.stdout
    rows = out.stdout.split("10. the flushes were materialised into", 1)[1].splitlines()[1:]
    shown = [line.strip() for line in rows if "|" in line]
    assert shown == [
        "b1 | Blue task | done=False | blue | prio=1",
        "t1 | Buy milk, eggs and bread | done=True | red | prio=3",
    ]
