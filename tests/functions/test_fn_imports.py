"""Cold import of each handler module in a fresh interpreter: no configuration needed, no network, no boto3 client,
none of the Spark/Iceberg stack on the Lambda path (DESIGN §3.8), and a bounded import time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

HANDLERS = [
    "health",
    "push",
    "pull",
    "actions",
    "admin",
    "flush_trigger",
    "rotate_secret",
    "lake_tick",
    "ws_connect",
    "ws_message",
    "ws_broadcast",
]
HEAVY = ("pyspark", "pyiceberg", "pyarrow", "pandas", "moto", "boto3", "google.protobuf")
"""Never imported with a handler: the Spark/Iceberg stack, moto, boto3 (clients are made on first use) and protobuf
(loaded by the first protobuf message, so a JSON-only function never pays for it)."""

_PROBE = """
import json, socket, sys, time
def refuse(*args, **kwargs):
    raise AssertionError("network access at import time")
socket.socket.connect = refuse
socket.create_connection = refuse
start = time.perf_counter()
import importlib
module = importlib.import_module(sys.argv[1])
elapsed = time.perf_counter() - start
assert callable(module.lambda_handler)
heavy = sorted(m for m in sys.argv[2].split(",") if m in sys.modules)
print(json.dumps({"ms": round(elapsed * 1000), "heavy": heavy}))
"""


def _probe(code: str, name: str, modules: tuple[str, ...]) -> Any:
    """What ``code`` prints last (JSON), run in a fresh interpreter with ``functions.{name}`` and ``modules`` as
    arguments, in a clean environment: no LakeSync variables, no credentials, an AWS endpoint nothing listens on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKESYNC_", "AWS_"))}
    env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"
    out = subprocess.run(
        [sys.executable, "-c", code, f"functions.{name}", ",".join(modules)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", HANDLERS)
def test_handler_cold_import_is_light_and_offline(name):
    # When the handler module is imported cold
    result = _probe(_PROBE, name, HEAVY)
    # Then it imported without configuration or network, without any of HEAVY, well within a Lambda init phase
    assert result["heavy"] == []
    assert result["ms"] < 5000


API_HANDLERS = ["health", "push", "pull", "checkpoint", "actions", "admin"]
NOT_THEIRS = (
    "lakesync.aws.lake_tick",
    "lakesync.core.lake_work",
    "lakesync.gateway.materialise",
    "lakesync.gateway.realtime",
    "lakesync.gateway.resync",
    "lakesync.connectors.registry",
)
"""Modules of other functions or of rare requests (the lake tick, the materialiser, the broadcaster, a pull's
checkpoint resync, the connector registry of the admin's /connectors routes)."""

_LOADED = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
importlib.import_module("lakesync.aws.wiring")  # what the first request's get_deps() imports
print(json.dumps(sorted(m for m in sys.argv[2].split(",") if m in sys.modules)))
"""


@pytest.mark.parametrize("name", API_HANDLERS)
def test_an_api_function_cold_start_loads_no_other_functions_modules(name):
    # A module imported at INIT or by the wiring at the first request is paid by every cold start of the function.
    unwanted = NOT_THEIRS if name == "actions" else (*NOT_THEIRS, "lakesync.core.actions")
    assert _probe(_LOADED, name, unwanted) == []
