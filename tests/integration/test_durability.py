"""`lakesync local` is durable: every acknowledged push survives `kill -9` at a random moment and a restart, exactly
once; so do flush requests (config table) and objects of the checkpoint bucket. A real process, real HTTP, SIGKILL.

The closing figure ("acknowledged deltas surviving N random kill -9s") is printed (``-s``) and asserted.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import pytest

from lakesync.auth import mint_token
from lakesync.client.http import SyncClient
from lakesync.core.delta import RowDelta, make_delta
from lakesync.core.hlc import HLC
from lakesync.local.journal import Journal
from lakesync.local.runner import aws_profile

pytestmark = pytest.mark.integration

KILLS = 6
MIN_ACKNOWLEDGED_PER_ROUND = 30  # 5 rounds push while killed: > 100 acknowledged in all
LOCAL = (sys.executable, "-m", "lakesync.cli", "local", "--port", "0", "--lake-interval", "0", "--workers", "2")
SEED = int(os.environ.get("LAKESYNC_DURABILITY_SEED", str(random.SystemRandom().randrange(1 << 30))))


@dataclass
class Local:
    """A running `lakesync local` subprocess and what it printed."""

    proc: subprocess.Popen[str]
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    url: str = ""
    aws: str = ""
    pump: threading.Thread | None = None

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.url:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("lakesync local did not start") from None
            if line.startswith("LakeSync local gateway"):
                self.url = line.split(" at ", 1)[1].split()[0]
                self.aws = line.rsplit(" at ", 1)[1].rstrip(")\n")
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("lakesync local is not healthy")

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.ended()

    def stop(self, signum: int = signal.SIGTERM) -> int:
        self.proc.send_signal(signum)
        return self.ended()

    def ended(self) -> int:
        code = self.proc.wait(60)
        if self.pump is not None:
            self.pump.join(30)
        return code

    def output(self) -> str:
        lines = []
        while not self.lines.empty():
            lines.append(self.lines.get())
        return "".join(lines)


def start(data_dir: Path, *extra: str) -> Local:
    proc = subprocess.Popen(
        [*LOCAL, "--data-dir", str(data_dir), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    local = Local(proc)

    def pump() -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                local.lines.put(line)

    local.pump = threading.Thread(target=pump, daemon=True)
    local.pump.start()
    return local


def token(data_dir: Path, sub: str, role: str = "client") -> str:
    secret = (data_dir / "jwt-secret").read_text().strip()
    return mint_token(sub, "default", secret, role=role, ttl_s=3600)


def pull_log(url: str, data_dir: Path) -> list[RowDelta]:
    """Every logged delta, by cursor (exactly once), page by page."""
    reader = SyncClient(url, "default", token(data_dir, "reader"), "reader")
    deltas: list[RowDelta] = []
    cursor = None
    while True:
        page = reader.request(
            "GET", "/v1/sync/default/pull", query={"clientId": "reader", "limit": 1000, "cursor": cursor}
        )
        deltas.extend(RowDelta.from_json(d) for d in page["deltas"])
        cursor = page.get("cursor")
        if not page["hasMore"]:
            return deltas


@dataclass
class Pushes:
    acknowledged: list[RowDelta] = field(default_factory=list)
    unacknowledged: list[RowDelta] = field(default_factory=list)


def push_until_killed(url: str, data_dir: Path, rng: random.Random, out: Pushes, round_no: int) -> None:
    writer = SyncClient(url, "default", token(data_dir, "w"), "w", timeout=30)
    hlc = HLC()
    n = 0
    while True:
        size = rng.choice([1, 5, 48, 60, 130])  # one chunk, and pushes spanning several chunks
        batch = [
            make_delta(
                "INSERT", table="t", row_id=f"r{round_no}-{n + i}", client_id="w", hlc=hlc.now(), columns={"v": n + i}
            )
            for i in range(size)
        ]
        n += size
        try:
            writer.push(batch)
        except Exception:  # the server died under the request: not acknowledged (it may or may not have landed)
            out.unacknowledged.extend(batch)
            return
        out.acknowledged.extend(batch)


def wait_for_acknowledged(pushes: Pushes, count: int, pusher: threading.Thread, timeout_s: float = 120.0) -> None:
    """Block until at least ``count`` deltas are acknowledged in all, while the pusher is still pushing."""
    deadline = time.monotonic() + timeout_s
    while len(pushes.acknowledged) < count:
        assert pusher.is_alive(), "the pusher stopped before the server was killed"
        assert time.monotonic() < deadline, f"only {len(pushes.acknowledged)}/{count} acknowledged in {timeout_s} s"
        time.sleep(0.01)


def test_durability_acknowledged_pushes_survive_random_kill_9s_exactly_once(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    print(f"\nseed {SEED} (LAKESYNC_DURABILITY_SEED to repeat)")
    pushes = Pushes()
    kills_during_push = 0
    for round_no in range(KILLS):
        local = start(tmp_path)
        if round_no == 2:
            # Killed while starting (recovering the journal of the rounds before, or writing the snapshot).
            time.sleep(rng.uniform(0.5, 2.5))
            local.kill9()
            continue
        local.wait_ready()
        pusher = threading.Thread(target=push_until_killed, args=(local.url, tmp_path, rng, pushes, round_no))
        before = len(pushes.acknowledged)
        pusher.start()
        # The kill is random in time but bounded by pushes, not wall time: a slow machine still kills mid-stream.
        wait_for_acknowledged(pushes, before + MIN_ACKNOWLEDGED_PER_ROUND, pusher)
        time.sleep(rng.uniform(0.0, 1.0))
        local.kill9()
        pusher.join(60)
        assert not pusher.is_alive()
        kills_during_push += 1

    local = start(tmp_path)
    try:
        local.wait_ready()
        log = pull_log(local.url, tmp_path)
    finally:
        local.stop()

    counts = Counter(d.delta_id for d in log)
    acknowledged = {d.delta_id for d in pushes.acknowledged}
    sent = acknowledged | {d.delta_id for d in pushes.unacknowledged}
    lost = acknowledged - set(counts)
    twice = {d for d, c in counts.items() if c > 1}
    print(
        f"acknowledged deltas surviving {KILLS} random kill -9s ({kills_during_push} during pushes):"
        f" {len(acknowledged) - len(lost)}/{len(acknowledged)}, none twice: {not twice};"
        f" unacknowledged in flight that landed: {len(set(counts) - acknowledged)}/{len(pushes.unacknowledged)}"
    )
    assert len(acknowledged) > 100, "the rounds pushed too little to mean anything"
    assert not lost, f"{len(lost)} acknowledged deltas lost"
    assert not twice, f"{len(twice)} deltas logged twice"
    assert set(counts) <= sent
    assert local.proc.returncode == 0


def test_durability_flush_requests_and_checkpoint_objects_survive_kill_9(tmp_path: Path) -> None:
    local = start(tmp_path)
    local.wait_ready()
    admin = SyncClient(local.url, "default", token(tmp_path, "ops", role="admin"), "ops")
    admin.admin("POST", "flush")
    s3 = boto3.client("s3", **aws_profile(tmp_path))  # moto answers only the run's credential
    s3.put_object(Bucket="lakesync-checkpoints", Key="default/latest.json", Body=b'{"v":1}')
    local.kill9()

    local = start(tmp_path)
    try:
        local.wait_ready()
        s3 = boto3.client("s3", **aws_profile(tmp_path))
        body = s3.get_object(Bucket="lakesync-checkpoints", Key="default/latest.json")["Body"].read()
        dynamodb = boto3.client("dynamodb", **aws_profile(tmp_path))
        items = dynamodb.scan(TableName="lakesync-config", ConsistentRead=True)["Items"]
    finally:
        local.stop()
    assert body == b'{"v":1}'
    assert any(item["sk"]["S"].startswith("flush#") for item in items), items


def test_durability_a_torn_journal_tail_ends_the_journal_there(tmp_path: Path) -> None:
    path = tmp_path / "journal-00000001.log"
    journal = Journal(path)
    journal.sync(journal.append(b"first"))
    journal.sync(journal.append(b"second"))
    journal.close()
    whole = path.read_bytes()

    path.write_bytes(whole[:-3])  # a power cut in the middle of the second record
    assert list(Journal.read(path)) == [b"first"]
    path.write_bytes(whole[:-1] + bytes([whole[-1] ^ 1]))  # a flipped bit
    assert list(Journal.read(path)) == [b"first"]
    path.write_bytes(whole)
    assert list(Journal.read(path)) == [b"first", b"second"]
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)


def test_durability_files_are_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    local = start(data_dir)
    local.wait_ready()
    local.stop()
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in data_dir.iterdir()}
    assert oct(data_dir.stat().st_mode & 0o777) == oct(0o700)
    assert modes and set(modes.values()) == {oct(0o600)}, modes
    assert {"jwt-secret", "snapshot.json", "materialised.db"} <= set(modes)
    assert json.loads((data_dir / "snapshot.json").read_text())["format"] == 2
