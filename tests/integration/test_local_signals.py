"""`lakesync local` stops cleanly on SIGTERM, SIGINT and SIGHUP: it says which signal, exits 0, and leaves a final
snapshot (no journal) holding what was pushed. SIGINT is sent to a process started as a shell starts a background
job (SIGINT ignored), which must stop anyway."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.aws.buffer.items import chunk_span
from lakesync.aws.buffer.log_chunks import decode_entries
from lakesync.client.http import SyncClient
from lakesync.core.delta import make_delta
from lakesync.core.hlc import HLC
from lakesync.core.log import ShardId

pytestmark = pytest.mark.integration

LOCAL = (sys.executable, "-m", "lakesync.cli", "local", "--port", "0", "--lake-interval", "0", "--workers", "1")


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what `cmd &` in a non-interactive shell does


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_local_signal_stops_cleanly_and_saves(tmp_path: Path, signum: signal.Signals) -> None:
    proc = subprocess.Popen(
        [*LOCAL, "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=_ignore_sigint,
    )
    lines: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                lines.append(line)
                if line.startswith("Ctrl-C to stop"):
                    ready.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        assert ready.wait(60), "".join(lines)
        url = next(line for line in lines if line.startswith("LakeSync local")).split(" at ", 1)[1].split()[0]
        with urllib.request.urlopen(f"{url}/health", timeout=10) as resp:
            assert resp.status == 200
        secret = (tmp_path / "jwt-secret").read_text().strip()
        writer = SyncClient(url, "default", mint_token("w", "default", secret), "w")
        delta = make_delta("INSERT", table="t", row_id="r", client_id="w", hlc=HLC().now(), columns={"v": 1})
        writer.push([delta])
    finally:
        proc.send_signal(signum)
        code = proc.wait(60)
        reader.join(30)
    output = "".join(lines)
    assert code == 0, output
    assert f"stopping ({signum.name})" in output
    assert "Traceback" not in output
    # And its status said, before it was ready, that no data was at risk (a fresh directory: nothing unflushed)
    assert "gateway 'default': data at risk: none (every commit is in the lake)\nCtrl-C to stop\n" in output
    snapshot = json.loads((tmp_path / "snapshot.json").read_text())
    assert _logged_delta_ids(snapshot["tables"]["deltas"]) == [delta.delta_id]
    assert not list(tmp_path.glob("journal-*.log")), "a clean stop folds the journal into the snapshot"


def _logged_delta_ids(items: list[dict[str, Any]]) -> list[str]:
    """The deltaIds a snapshot's log items hold (one item per commit, its entries compressed)."""
    ids = []
    for item in items:
        shard, (first, _, first_hlc) = ShardId.parse(item["shard"]["S"]), chunk_span(item)
        blob = base64.b64decode(item["z"]["B"])
        ids.extend(e.delta.delta_id for e in decode_entries(shard, first, first_hlc, blob, images=False))
    return ids
