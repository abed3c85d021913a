"""Per-caller rate limits: one client, on one gateway, may make at most so many requests of a route family per window.

A limit is ``requests`` per fixed window of ``window_s`` seconds (windows start at multiples of ``window_s`` since
the epoch), per gateway, client (the verified token's ``sub``) and family: ``push``, ``pull``, ``checkpoint``,
``actions`` (both action routes), ``subscriptions`` (the three subscription routes) and ``socket`` (each WebSocket
client message). Over it, the request is refused with :class:`~lakesync.core.errors.CallerRateLimitedError` (429
``RATE_LIMITED`` with ``Retry-After``: the seconds until the window ends), before any other storage request. A fixed
window admits at most ``2 * requests`` across a window boundary; that is the burst a limit allows.

The count is shared by every process serving the gateway (many Lambda instances at once) through a
:class:`~lakesync.ports.RateLimitCounter`, and taken from it in **slices**: a process that has used up its allowance
takes the next one -- a hundredth of the limit (at least 1) at its first request of the window, then twice as much
each time, up to a tenth -- in one conditional write, and serves that many requests with no storage request at all.
So a busy client costs a write every tenth of its limit, and a quiet one a write per window (at most one per
request); the shared count never passes the limit, so no caller is ever served more than its limit. A process holds
back at most what its last slice has not used yet: a hundredth of the limit, or no more than it has already served
in the window (the slices double), so a client spread over a few processes still gets most of its limit. A refusal
is remembered by the process until the window ends, so a caller hammering a refused limit costs no storage request
either.

A counter that cannot be read (the store fails) lets the request through: the limit protects the service and the
bill, and must never be what takes the service down.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from lakesync.core.errors import CallerRateLimitedError, StorageError

if TYPE_CHECKING:
    from lakesync.ports import RateLimitCounter

logger = logging.getLogger(__name__)

FAMILIES: Final = ("push", "pull", "checkpoint", "actions", "subscriptions", "socket")
"""The route families limited separately."""
SLICE_FRACTION: Final = 10
"""A process's largest slice is a tenth of the limit: at most ten shared writes per busy client and window."""
FIRST_SLICE_FRACTION: Final = 100
"""A process's first slice of a window is a hundredth of the limit: a client calling less often than that costs one
shared write per window, and a process holds back at most that much of a window it barely used."""
_MAX_TRACKED: Final = 50_000
"""Allowances a process keeps before it forgets those of ended windows."""


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``requests`` per fixed window of ``window_s`` seconds."""

    requests: int
    window_s: int

    def __post_init__(self) -> None:
        if self.requests < 1 or self.window_s < 1:
            raise ValueError("a rate limit needs at least one request per window of at least one second")

    def __str__(self) -> str:
        return f"{self.requests}/{self.window_s}"


DEFAULT_LIMITS: Final[Mapping[str, RateLimit]] = {
    "push": RateLimit(1_200, 60),
    "pull": RateLimit(2_400, 60),
    "checkpoint": RateLimit(600, 60),
    "actions": RateLimit(600, 60),
    "subscriptions": RateLimit(600, 60),
    "socket": RateLimit(2_400, 60),
}
"""Per client and gateway: 20 pushes and 40 pulls a second sustained, far above what a syncing client sends."""


def parse_limits(raw: str) -> dict[str, RateLimit]:
    """``family=requests/seconds`` entries, comma-separated, over :data:`DEFAULT_LIMITS`; ``family=off`` lifts one
    family's limit and ``off`` alone every limit.

    Raises:
        ValueError: an unknown family or a malformed entry.
    """
    text = raw.strip()
    if text == "off":
        return {}
    limits = dict(DEFAULT_LIMITS)
    for part in filter(None, (p.strip() for p in text.split(","))):
        family, _, value = part.partition("=")
        family, value = family.strip(), value.strip()
        if family not in FAMILIES:
            raise ValueError(f"unknown rate limit family {family!r} (known: {', '.join(FAMILIES)})")
        if value == "off":
            limits.pop(family, None)
            continue
        requests, _, seconds = value.partition("/")
        if not (requests.isascii() and requests.isdigit() and seconds.isascii() and seconds.isdigit()):
            raise ValueError(f"rate limit {part!r} is not family=requests/seconds")
        limits[family] = RateLimit(int(requests), int(seconds))
    return limits


@dataclass(slots=True)
class _Allowance:
    window: int
    next_slice: int
    left: int = 0
    refused: bool = False


@dataclass(slots=True)
class RateLimiter:
    """Counts callers' requests against ``limits`` (family -> limit; a family without one is not limited), taking
    allowance from the shared ``counter`` in slices (see the module docstring). Thread-safe.

    ``clock`` is the wall clock in Unix seconds (injectable: tests move it instead of sleeping).
    """

    counter: RateLimitCounter
    limits: Mapping[str, RateLimit] = field(default_factory=lambda: dict(DEFAULT_LIMITS))
    clock: Callable[[], float] = time.time
    _allowances: dict[tuple[str, str, str], _Allowance] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self, gateway: str, client_id: str, family: str) -> None:
        """Count one request of ``client_id`` on ``gateway`` in ``family``.

        Raises:
            CallerRateLimitedError: the caller is over its limit; ``retry_after_s`` is when its window ends.
        """
        limit = self.limits.get(family)
        if limit is None:
            return
        now = self.clock()
        window = int(now // limit.window_s)
        retry_after = max(1, math.ceil((window + 1) * limit.window_s - now))
        with self._lock:
            allowance = self._allowance((gateway, family, client_id), window, limit)
            if allowance.left > 0:
                allowance.left -= 1
                return
            if not allowance.refused:
                granted = self._take(gateway, family, client_id, window, allowance.next_slice, limit)
                if granted > 0:
                    allowance.left = granted - 1
                    largest = max(1, limit.requests // SLICE_FRACTION)
                    allowance.next_slice = max(allowance.next_slice, min(2 * allowance.next_slice, largest))
                    return
                allowance.refused = True
        raise CallerRateLimitedError(
            f"Rate limit exceeded: at most {limit.requests:,} {family} requests per {limit.window_s} s per client; "
            f"retry after {retry_after} s",
            retry_after_s=retry_after,
        )

    def _allowance(self, key: tuple[str, str, str], window: int, limit: RateLimit) -> _Allowance:
        allowance = self._allowances.get(key)
        if allowance is None or allowance.window != window:
            if len(self._allowances) >= _MAX_TRACKED:
                self._allowances.clear()  # rare: each forgotten slice was counted, so the limit still holds
            first = max(1, limit.requests // FIRST_SLICE_FRACTION)
            allowance = self._allowances[key] = _Allowance(window, first)
        return allowance

    def _take(self, gateway: str, family: str, client_id: str, window: int, want: int, limit: RateLimit) -> int:
        expires_at = (window + 2) * limit.window_s
        try:
            return self.counter.take(f"{gateway}#{family}#{client_id}", window, want, limit.requests, expires_at)
        except StorageError:
            logger.warning("rate limit counter unavailable; request let through", exc_info=True)
            return 1


def check(limiter: RateLimiter | None, gateway: str, client_id: str, family: str) -> None:
    """:meth:`RateLimiter.check` when a limiter is configured; nothing otherwise.

    Raises:
        CallerRateLimitedError: the caller is over its limit.
    """
    if limiter is not None:
        limiter.check(gateway, client_id, family)
