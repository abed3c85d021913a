"""The functions' log level under Lambda's log-level filtering (the deployment's JSON log format): Lambda's filter is
kept at INFO so that the metrics' EMF lines pass it, and the configured ``logLevel`` still decides what our code
logs. Each case runs in a fresh interpreter, as a cold Lambda start would, with the variables Lambda sets."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_PROBE = """
import logging
from aws_lambda_powertools.metrics import MetricUnit
from lakesync.aws.lambda_runtime import logger, metrics
logger.debug("debug line")
logger.info("info line")
logger.warning("warning line")
logging.getLogger("lakesync.gateway.actions").info("module info line")
logging.getLogger("lakesync.gateway.actions").error("module error line")
metrics.add_metric(name="Requests", unit=MetricUnit.Count, value=1)
metrics.flush_metrics()
"""


def _lines(lambda_level: str, configured: str) -> list[dict[str, object]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POWERTOOLS_", "AWS_LAMBDA_"))}
    env.update(AWS_LAMBDA_LOG_LEVEL=lambda_level, AWS_LAMBDA_LOG_FORMAT="JSON", POWERTOOLS_LOG_LEVEL=configured)
    env["POWERTOOLS_METRICS_NAMESPACE"] = "LakeSync"
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def _messages(lines: list[dict[str, object]]) -> set[object]:
    return {line.get("message") for line in lines if "message" in line}


@pytest.mark.parametrize(
    ("lambda_level", "configured", "expected"),
    [
        ("INFO", "WARNING", {"warning line", "module error line"}),
        ("INFO", "ERROR", {"module error line"}),
        ("INFO", "INFO", {"info line", "warning line", "module info line", "module error line"}),
        ("DEBUG", "DEBUG", {"debug line", "info line", "warning line", "module info line", "module error line"}),
    ],
)
def test_configured_level_decides_what_is_logged_under_lambdas_filter(lambda_level, configured, expected):
    # Given Lambda's application log level (what the deployment sets) and the configured logLevel
    # When a cold function logs at every level and flushes a metric
    lines = _lines(lambda_level, configured)
    # Then exactly the lines at the configured level and above are written
    assert _messages(lines) == expected
    # And the metric's EMF line is written whatever the level
    emf = [line for line in lines if "_aws" in line]
    assert len(emf) == 1 and emf[0]["Requests"] == [1.0]
