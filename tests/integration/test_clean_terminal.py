"""A clean terminal: `lakesync local` (and the demo, in test_demo.py) print their story and nothing else: no metric's
EMF JSON, no raw JSON log line, no Spark or log4j banner, no traceback. The functions still write their cold-start
metric where metrics are enabled, as deployed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakesync.auth import mint_token
from lakesync.client.http import SyncClient
from lakesync.core.delta import make_delta
from lakesync.core.hlc import HLC
from lakesync.local.runner import load_or_create_secret
from tests.terminal import noise

pytestmark = pytest.mark.integration


def test_noise_recognises_what_used_to_be_printed() -> None:
    printed = [
        '{"_aws":{"Timestamp":1,"CloudWatchMetrics":[]},"function_name":"lakesync-local","ColdStart":[1.0]}',
        "26/12/08 01:53:04 WARN NativeCodeLoader: Unable to load native-hadoop library for your platform...",
        'Setting default log level to "WARN".',
        "To adjust logging level use sc.setLogLevel(newLevel). For SparkR, use setLogLevel(newLevel).",
        '{"level":"WARNING","message":"request deferred","service":"lakesync"}',
        "Traceback (most recent call last):",
        "1. admin stored sync rules (each client sees the todos of its own team, jwt:team) and the todos schema",
    ]
    assert noise(printed) == printed[:-1]


_COLD_PROBE = """
from dataclasses import dataclass
from aws_lambda_powertools.metrics import MetricUnit
from lakesync.aws.lambda_runtime import metrics

@dataclass
class Context:
    function_name: str = "probe"

@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event, context):
    metrics.add_metric(name="Requests", unit=MetricUnit.Count, value=1)
    return {}

handler({}, Context())
handler({}, Context())
print("metrics held after the invocations:", len(metrics.provider.metric_set))
"""


@pytest.mark.parametrize(("disabled", "emitted"), [(None, True), ("true", False)])
def test_cold_start_metric_is_written_unless_metrics_are_disabled(disabled: str | None, emitted: bool) -> None:
    # Given a cold function, deployed (metrics enabled) or in the embedded default (POWERTOOLS_METRICS_DISABLED)
    env = {k: v for k, v in os.environ.items() if not k.startswith("POWERTOOLS_")}
    env["POWERTOOLS_METRICS_NAMESPACE"] = "LakeSync"
    if disabled is not None:
        env["POWERTOOLS_METRICS_DISABLED"] = disabled
    # When it is invoked with the cold-start metric captured
    out = subprocess.run([sys.executable, "-c", _COLD_PROBE], capture_output=True, text=True, env=env, check=True)
    # Then the ColdStart metric (a blob of its own, which Powertools' single_metric prints even with metrics disabled)
    # is written only where metrics are enabled, as every other metric
    assert ('"ColdStart"' in out.stdout) is emitted and ('"Requests"' in out.stdout) is emitted
    assert out.stderr == ""
    # And an invocation's metrics are dropped at its end either way (printed, or not kept for ever)
    assert "metrics held after the invocations: 0" in out.stdout


_LOG_PROBE = """
import logging
from lakesync.aws.lambda_runtime import logger
from lakesync.local.terminal import readable_function_logs
readable_function_logs()
logger.append_keys(function_request_id="r-1")
logger.info("request rejected", extra={"status": 401})
logger.warning("request deferred", extra={"status": 503, "code": "STORAGE_BUSY"})
logger.clear_state()
logging.getLogger("lakesync.local.front").warning("a module warning")
try:
    raise ValueError("boom")
except ValueError:
    logger.exception("unhandled error: %s", "ValueError")
"""


def test_function_logs_read_as_lines_in_a_local_terminal() -> None:
    # Given the functions' logger at the local stack's level, written for a terminal
    env = {k: v for k, v in os.environ.items() if not k.startswith("POWERTOOLS_")}
    env["POWERTOOLS_LOG_LEVEL"] = "WARNING"
    # When a function and a module of the package log (with appended keys, extra keys and an exception)
    out = subprocess.run([sys.executable, "-c", _LOG_PROBE], capture_output=True, text=True, env=env, check=True)
    # Then each record is one readable line at the same level as deployed (the traceback follows its error)
    lines = out.stdout.splitlines()
    assert lines[:3] == [
        "WARNING request deferred (status=503 code=STORAGE_BUSY)",
        "WARNING a module warning",
        "ERROR unhandled error: ValueError",
    ]
    assert lines[3] == "Traceback (most recent call last):" and lines[-1] == "ValueError: boom"
    assert out.stderr == ""


def test_lakesync_local_prints_its_story_and_nothing_else(tmp_path: Path) -> None:
    # Given a real `lakesync local` (handler workers and the in-process broadcaster each start cold)
    proc = subprocess.Popen(
        [sys.executable, "-m", "lakesync.cli", "local", "--data-dir", str(tmp_path), "--port", "0", "--workers", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()
        assert first.startswith("LakeSync local gateway 'default' at "), first
        url = first.split(" at ", 1)[1].split()[0]  # printed once the stack serves
        # When a client pushes one delta and pulls it back
        token = mint_token("alice", "default", load_or_create_secret(tmp_path), ttl_s=3600)
        client = SyncClient(url, "default", token, "alice")
        delta = make_delta("INSERT", table="todos", row_id="t1", client_id="alice", hlc=HLC().now(), columns={"a": 1})
        client.push([delta])
        pulled, _ = client.pull_all(None)
        assert [d.row_id for d in pulled] == ["t1"]
        time.sleep(1.0)  # the broadcaster's cold start (the deltas table's stream) happens after the push returns
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    lines = [first.rstrip("\n"), *rest.splitlines()]
    # Then it stopped cleanly, its story is there, and nothing else is
    assert proc.returncode == 0, "\n".join(lines)
    assert "Ctrl-C to stop" in lines and "stopped" in lines
    assert noise(lines) == []
