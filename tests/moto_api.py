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
