"""moto's own control API (``/moto-api``), for tests that steer the emulator's state machines (e.g. Glue job runs)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from lakesync.local.access import LocalCredentials, sign

SESSION_CREDENTIALS = LocalCredentials("testing", "testing")
"""The session moto server's key pair (``tests.conftest.FAKE_AWS``): the server refuses unsigned requests."""


def moto_state_manager(
    endpoint: str, action: str, body: dict[str, Any], credentials: LocalCredentials = SESSION_CREDENTIALS
) -> None:
    """POST ``body`` to ``/moto-api/state-manager/{action}`` (``set-transition``, ``unset-transition``)."""
    url = f"{endpoint}/moto-api/state-manager/{action}"
    data = json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        method="POST",
        headers={"Content-Type": "application/json", **sign(credentials, "POST", url, data)},
    )
    with urllib.request.urlopen(request, timeout=10):
        pass


def create_glue_job(client: Any, name: str) -> None:
    """A Glue Spark job on moto allowed one run at a time, as the stack's jobs are (its script is never run)."""
    client.create_job(
        Name=name,
        Role="arn:aws:iam::123456789012:role/job",
        Command={"Name": "glueetl", "ScriptLocation": "s3://a/b.py", "PythonVersion": "3"},
        ExecutionProperty={"MaxConcurrentRuns": 1},
    )


GLUE_JOB_RUN = "glue::job_run"
"""moto's state-manager model of a Glue job run."""


def glue_runs_progress(endpoint: str, progression: str) -> None:
    """Let moto's Glue job runs finish at once (``immediate``) or stay unfinished (``manual``) from now on."""
    transition: dict[str, Any] = {"progression": progression}
    if progression == "manual":
        transition["times"] = 10**9
    moto_state_manager(endpoint, "set-transition", {"model_name": GLUE_JOB_RUN, "transition": transition})
