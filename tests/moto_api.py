"""moto's own control API (``/moto-api``), for tests that steer the emulator's state machines (e.g. Glue job runs)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any


def moto_state_manager(endpoint: str, action: str, body: dict[str, Any]) -> None:
    """POST ``body`` to ``/moto-api/state-manager/{action}`` (``set-transition``, ``unset-transition``)."""
    request = urllib.request.Request(
        f"{endpoint}/moto-api/state-manager/{action}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10):
        pass
