"""The embedded default's connector schedules: a background loop that plays EventBridge Scheduler.

Every ``tick_s`` the loop lists each gateway's registered connectors (the config table: registrations from any
handler process are seen) and invokes the ``connector_poll`` handler -- the same function the AWS schedules invoke --
for each connector with ``ingest`` whose ``intervalMs`` has passed since its last poll (any interval works here; on
AWS the finest is one minute). A failed poll is logged and retried at the connector's next interval.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lakesync.gateway.connectors import interval_ms
from lakesync.ports import ConfigStore

logger = logging.getLogger(__name__)

Invoke = Callable[[dict[str, Any]], object]
"""Invokes the poll function with ``{"gateway", "connector"}``."""


@dataclass
class LocalConnectorScheduler:
    """See the module docstring."""

    config: Callable[[], ConfigStore]
    gateways: Sequence[str]
    invoke: Invoke
    tick_s: float = 1.0
    clock: Callable[[], float] = time.monotonic
    polls: int = 0
    failures: int = 0
    _due: dict[tuple[str, str], float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> LocalConnectorScheduler:
        """Start the loop on a daemon thread."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="lakesync-connectors", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop; a poll in progress finishes first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def run_due(self) -> int:
        """Poll every connector that is due; the number polled."""
        store = self.config()
        ran = 0
        live: set[tuple[str, str]] = set()
        for gateway in self.gateways:
            for connector in store.list_connectors(gateway):
                if not connector.has_ingest:
                    continue
                key = (gateway, connector.name)
                live.add(key)
                now = self.clock()
                if self._due.get(key, 0.0) > now:
                    continue
                self._due[key] = now + interval_ms(connector) / 1000
                ran += 1
                self.polls += 1
                try:
                    self.invoke({"gateway": gateway, "connector": connector.name})
                except Exception:  # keep polling the others; this one retries at its next interval
                    self.failures += 1
                    logger.warning("poll of connector %s (%s) failed", connector.name, gateway, exc_info=True)
        for key in set(self._due) - live:
            del self._due[key]
        return ran

    def _loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self.run_due()
            except Exception:  # the local AWS may be stopping
                logger.warning("connector scheduler tick failed", exc_info=True)
