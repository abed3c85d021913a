"""Flush requests and the rule that decides whether a flush run serves them.

A flush request is a config item ``(gw, sk = "flush#{atMs:015d}#{id}")`` recorded by the gateway (an admin's
``POST /admin/flush/{gw}``, or a push whose shard crossed the flush threshold) after the deltas it is about were
committed. A request is only a trigger: every flush run flushes every shard of its gateways. A run deletes the
requests recorded at or before its own start, and reads the shard heads after that start.

Invariants:

* A run *serves* a request when it begins after the request was recorded: it then reads heads that include the
  request's deltas, and deletes the request. A run that began earlier may or may not include them, and leaves the
  request behind for a later run.
* :meth:`ActiveRun.covers` only answers yes when the run provably begins after the request: a queued run (it has not
  begun at all when we look, and we look after the request was recorded), or a run whose start is at least
  :data:`CLOCK_SKEW_MS` after the request's time (the gateway's clock and the job service's clock are different
  clocks). Every doubt answers no, which costs at most one extra flush run, never a missed request.
* Keys that do not have exactly the shape above are not flush requests (the flush lease ``flushlease`` shares the
  prefix ``flush`` but not ``flush#``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CLOCK_SKEW_MS",
    "FLUSH_REQUEST_PREFIX",
    "ActiveRun",
    "FlushRequest",
    "covering_run",
    "flush_request_key",
    "parse_flush_request_key",
]

FLUSH_REQUEST_PREFIX: Final = "flush#"
"""Sort-key prefix of every flush request in the config table."""

CLOCK_SKEW_MS: Final = 1_000
"""How much later than a request a run must start to count as starting after it (clocks of different hosts)."""

_KEY = re.compile(r"flush#([0-9]{15})#(.+)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class FlushRequest:
    """One recorded flush request.

    Attributes:
        gateway: The gateway it was recorded for.
        at_ms: When it was recorded (epoch ms, the gateway's clock), as encoded in its key.
        request_id: Its id (the key's last part).
    """

    gateway: str
    at_ms: int
    request_id: str

    @property
    def key(self) -> str:
        """The config-table sort key."""
        return flush_request_key(self.at_ms, self.request_id)


def flush_request_key(at_ms: int, request_id: str) -> str:
    """The sort key ``flush#{at_ms:015d}#{request_id}`` (fixed width, so keys sort by time).

    Raises:
        ValueError: ``at_ms`` is negative or needs more than 15 digits, or ``request_id`` is empty.
    """
    if not 0 <= at_ms < 10**15:
        raise ValueError(f"at_ms must be in 0..10**15-1, got {at_ms}")
    if not request_id:
        raise ValueError("request_id must not be empty")
    return f"{FLUSH_REQUEST_PREFIX}{at_ms:015d}#{request_id}"


def parse_flush_request_key(gateway: str, sk: str) -> FlushRequest | None:
    """The request a config item with keys ``(gateway, sk)`` records, or ``None`` if it is not a flush request."""
    match = _KEY.fullmatch(sk)
    if match is None or not gateway:
        return None
    return FlushRequest(gateway=gateway, at_ms=int(match.group(1)), request_id=match.group(2))


@dataclass(frozen=True, slots=True)
class ActiveRun:
    """A flush run that has not finished.

    Attributes:
        run_id: The job service's id of the run.
        started_ms: When the job service accepted the run (epoch ms, its clock), if it says.
        queued: The run waits for capacity and has not begun (Glue's ``WAITING``).
    """

    run_id: str
    started_ms: int | None
    queued: bool = False

    def covers(self, at_ms: int) -> bool:
        """Whether this run provably begins after a request recorded at ``at_ms`` (see the module invariants)."""
        if self.queued:
            return True
        return self.started_ms is not None and self.started_ms >= at_ms + CLOCK_SKEW_MS


def covering_run(runs: Iterable[ActiveRun], at_ms: int) -> ActiveRun | None:
    """The first of ``runs`` that serves a request recorded at ``at_ms``, if any."""
    return next((run for run in runs if run.covers(at_ms)), None)
