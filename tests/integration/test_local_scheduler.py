"""The lake jobs' triggers in the embedded default (lakesync.local.scheduler) against a real local stack: a flush
request recorded over HTTP starts a run within the poll interval and only one, the schedule starts runs without
requests, a failing run is retried no sooner than the back-off, and stopping waits for a run in progress; asked
first whether the lake has work (the lake tick's rule), the schedule starts nothing while the stack is idle.

The pipeline itself (Spark) is covered by the demo test; here each run does what the flush job does to the
requests: it clears those recorded up to its start, through the flush job's own store."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.aws.flush_store import FlushStore
from lakesync.aws.tables import TableNames
from lakesync.local.pipeline import lake_has_work
from lakesync.local.runner import TABLE_PREFIX, LocalStack
from lakesync.local.scheduler import LakeScheduler

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(Path(tmp_path_factory.mktemp("sched")), port=0, persist=False) as running:
        yield running


class Runs:
    """A pipeline stand-in that serves flush requests the way the flush job does, and records its runs."""

    def __init__(self, stack: LocalStack, *, fail: int = 0, seconds: float = 0.0) -> None:
        self.store = FlushStore(stack.dynamodb_client(), TableNames.with_prefix(TABLE_PREFIX))
        self.gateways = stack.gateway_ids
        self.fail = fail
        self.seconds = seconds
        self.started: list[float] = []
        self.finished = 0

    def __call__(self) -> object:
        self.started.append(time.monotonic())
        started_ms = int(time.time() * 1000)
        if len(self.started) <= self.fail:
            raise RuntimeError("spark went away")
        time.sleep(self.seconds)
        self.store.clear_flush_requests(self.gateways, started_ms)
        self.finished += 1
        return None


def request_flush(stack: LocalStack) -> dict[str, Any]:
    token = mint_token("ops", "default", stack.secret, role="admin")
    req = urllib.request.Request(
        f"{stack.url}/v1/admin/flush/default", data=b"", method="POST", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
        return dict(resp.headers)


def wait_for(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def test_scheduler_flush_request_over_http_starts_exactly_one_run(stack: LocalStack) -> None:
    # Given a scheduler whose schedule is far away
    runs = Runs(stack)
    scheduler = LakeScheduler(stack, runs, interval_s=3600, poll_s=0.05, say=lambda _: None).start()
    try:
        # When an admin asks for a flush over HTTP
        request_flush(stack)

        # Then one run starts and serves the request, and no further run follows while nothing is requested
        wait_for(lambda: runs.finished == 1)
        assert scheduler.pending_requests() == 0
        time.sleep(0.5)
        assert len(runs.started) == 1
    finally:
        scheduler.stop()
    assert scheduler.runs == 1 and scheduler.failures == 0


def test_scheduler_runs_on_its_schedule_without_requests(stack: LocalStack) -> None:
    runs = Runs(stack)
    scheduler = LakeScheduler(stack, runs, interval_s=0.3, poll_s=0.05, say=lambda _: None).start()
    try:
        wait_for(lambda: runs.finished >= 2)
    finally:
        scheduler.stop()
    gaps = [b - a for a, b in zip(runs.started, runs.started[1:], strict=False)]
    assert all(gap >= 0.3 for gap in gaps)


def test_scheduler_failed_run_is_retried_after_the_back_off_and_then_serves_the_request(stack: LocalStack) -> None:
    # Given a pipeline that fails once
    runs = Runs(stack, fail=1)
    said: list[str] = []
    scheduler = LakeScheduler(stack, runs, interval_s=3600, poll_s=0.05, retry_s=0.5, say=said.append).start()
    try:
        # When a flush is requested
        request_flush(stack)

        # Then the failure is reported, the retry waits out the back-off, and the request is served
        wait_for(lambda: runs.finished == 1)
    finally:
        scheduler.stop()
    assert scheduler.failures == 1 and scheduler.runs == 1
    assert runs.started[1] - runs.started[0] >= 0.5
    assert any("failed" in line and "spark went away" in line for line in said)
    assert scheduler.pending_requests() == 0


def test_scheduler_stop_waits_for_the_run_in_progress(stack: LocalStack) -> None:
    runs = Runs(stack, seconds=0.5)
    scheduler = LakeScheduler(stack, runs, interval_s=3600, poll_s=0.05, say=lambda _: None).start()
    request_flush(stack)
    wait_for(lambda: len(runs.started) == 1)
    scheduler.stop()
    assert runs.finished == 1


def push(stack: LocalStack) -> None:
    """One small push over HTTP (under the flush threshold: no flush request)."""
    import json

    events = Path(__file__).resolve().parents[2] / "events"
    body = json.loads((events / "push_json.json").read_text(encoding="utf-8"))["body"].encode()
    token = mint_token("client-a", "default", stack.secret)
    req = urllib.request.Request(
        f"{stack.url}/v1/sync/default/push",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def test_scheduler_asking_the_lake_first_runs_nothing_while_idle_and_runs_once_there_is_work(stack: LocalStack) -> None:
    # Given a scheduler on a short interval that first asks whether the lake has work, on a stack with nothing to do
    runs = Runs(stack)
    has_work = lake_has_work(stack, stack.gateway_ids)
    assert not has_work()
    scheduler = LakeScheduler(stack, runs, interval_s=0.2, poll_s=0.05, say=lambda _: None, has_work=has_work).start()
    try:
        # When several intervals pass
        wait_for(lambda: scheduler.idle >= 3)
        # Then no run started
        assert runs.started == []
        # When a delta is pushed (the stand-in pipeline flushes nothing, so the work stays)
        push(stack)
        # Then the next scheduled check runs the pipeline
        wait_for(lambda: len(runs.started) >= 1)
    finally:
        scheduler.stop()
    assert has_work() and scheduler.failures == 0
