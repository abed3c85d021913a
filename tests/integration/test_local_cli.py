"""`lakesync local` as a user runs it: a real process, real HTTP, Ctrl-C shuts it down cleanly and saves the tables,
and the next start serves the same data. `lakesync token` mints tokens from the same data directory."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from lakesync.client.http import SyncClient
from lakesync.core.delta import RowDelta, make_delta
from lakesync.core.hlc import HLC

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start(data_dir: Path, port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "lakesync.cli", "local", "--port", str(port), "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return proc
        except OSError:
            if proc.poll() is not None:
                output = proc.stdout.read() if proc.stdout else ""
                raise AssertionError(f"lakesync local exited early: {output}") from None
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("lakesync local did not become healthy in 60 s")


def _token(data_dir: Path, sub: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "lakesync.cli", "token", "--sub", sub, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def test_local_keeps_data_across_a_ctrl_c_restart(tmp_path: Path) -> None:
    port = _free_port()
    proc = _start(tmp_path, port)
    try:
        url = f"http://127.0.0.1:{port}"
        writer = SyncClient(url, "default", _token(tmp_path, "w"), "w")
        delta = make_delta("INSERT", table="kept", row_id="k", client_id="w", hlc=HLC().now(), columns={"v": "x"})
        writer.push([delta])
    finally:
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    assert "Traceback" not in output
    saved = json.loads((tmp_path / "snapshot.json").read_text())
    assert saved["tables"]["deltas"], "the log was saved"

    proc = _start(tmp_path, port)
    try:
        reader = SyncClient(f"http://127.0.0.1:{port}", "default", _token(tmp_path, "r"), "r")
        page = reader.request("GET", "/v1/sync/default/pull", query={"clientId": "r", "limit": 1000})  # cursor form
        assert [RowDelta.from_json(d) for d in page["deltas"]] == [delta]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 0


def test_token_without_a_secret_explains_what_to_do(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "lakesync.cli", "token", "--sub", "x", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "LAKESYNC_JWT_SECRET"},
    )
    assert out.returncode == 2
    assert "lakesync local" in out.stderr
